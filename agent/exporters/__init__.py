"""Exporters: where evaluated interactions go."""
