"""ragpulse: monitor RAG quality in production from OpenTelemetry spans."""

__version__ = "0.1.0"
