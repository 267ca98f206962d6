"""OTLP intake: decode requests into spans, read conventions, assemble interactions."""

from __future__ import annotations

import os
from collections.abc import MutableMapping

# Resource attribute ragpulse sets on its own telemetry (judge calls traced through litellm or
# any OpenTelemetry instrumentation in the agent's process). Spans from such a resource are never
# assembled, so an agent traced into the pipeline it feeds cannot evaluate its own judge calls.
SELF_RESOURCE_ATTRIBUTE = "ragpulse.agent"
SELF_RESOURCE_VALUE = "true"


def mark_own_telemetry(environ: MutableMapping[str, str] | None = None) -> None:
    """Tag every OpenTelemetry resource created later in this process as ragpulse's own.

    Adds `ragpulse.agent=true` to `OTEL_RESOURCE_ATTRIBUTES`, which every OpenTelemetry SDK reads
    when it builds its resource (litellm's OpenTelemetry callback included), so spans of the
    agent's judge calls are recognised and skipped if they are routed back into the agent.
    """
    environ = os.environ if environ is None else environ
    entry = f"{SELF_RESOURCE_ATTRIBUTE}={SELF_RESOURCE_VALUE}"
    current = environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    if entry not in current.split(","):
        environ["OTEL_RESOURCE_ATTRIBUTES"] = f"{current},{entry}" if current else entry
