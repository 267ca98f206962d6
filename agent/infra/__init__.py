"""Plumbing every stage may use: throttled logs, event-loop lag, secrets, logging, endpoint security."""
