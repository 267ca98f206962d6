"""The convention adapters the agent reads spans with: one per instrumentation family."""

from __future__ import annotations

from collections.abc import Sequence

from agent.otlp.conventions import Convention
from agent.otlp.conventions.genai import GenAI
from agent.otlp.conventions.manual import Manual
from agent.otlp.conventions.openinference import OpenInference
from agent.otlp.conventions.openllmetry import OpenLLMetry


def known_conventions(keys: Sequence[str] = ()) -> list[Convention]:
    """Every family's adapter, reading these keys of a document's metadata and no other: without
    keys, no span's metadata is parsed."""
    return [OpenInference(keys), OpenLLMetry(keys), GenAI(keys), Manual(keys)]
