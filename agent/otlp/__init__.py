"""OTLP intake: decode ExportTraceServiceRequest bodies and assemble spans into interactions."""
