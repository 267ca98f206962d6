"""Judges answer typed questions about an interaction; metrics never see prompts."""
