"""OTLP intake: decode requests into spans, read conventions, assemble interactions."""

# Resource attribute ragpulse sets on its own telemetry (judge calls traced through litellm or
# any OpenTelemetry instrumentation in the agent's process). Spans from such a resource are never
# assembled, so an agent traced into the pipeline it feeds cannot evaluate its own judge calls.
SELF_RESOURCE_ATTRIBUTE = "ragpulse.agent"
SELF_RESOURCE_VALUE = "true"
