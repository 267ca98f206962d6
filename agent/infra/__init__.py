"""Plumbing every stage may use: throttled logs, event-loop lag, secrets, logging, endpoint
security, waiting for dependencies and connecting to them."""
