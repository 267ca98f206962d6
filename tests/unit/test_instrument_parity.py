"""The standalone `ragpulse_instrument` and `agent.instrument` write the same attributes, which the
manual convention reads back as one interaction."""

from __future__ import annotations

import importlib.util
import sys

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent import instrument as in_agent
from agent.otlp.conventions import manual
from tests.otlp_support import assembler, decoded
from tests.support import ROOT


def _standalone():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "ragpulse_instrument", ROOT / "instrument" / "src" / "ragpulse_instrument" / "__init__.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("ragpulse_instrument", module)
    spec.loader.exec_module(module)
    return module


def test_same_attribute_names() -> None:
    standalone = _standalone()
    for name in ("QUERY", "CHUNKS", "CHUNK_IDS", "CHUNK_SCORES", "RESPONSE"):
        assert getattr(standalone, name) == getattr(manual, name)
    assert standalone.SPAN_NAME == in_agent.SPAN_NAME


def test_both_record_the_same_span_and_it_assembles() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    arguments = dict(query="Which river?", chunks=["The Seine.", "The Rhone."], response="The Seine.",
                     chunk_ids=["a", "b"], chunk_scores=[0.9, 0.1], tracer=tracer)  # fmt: skip
    _standalone().record_interaction(**arguments)
    in_agent.record_interaction(**arguments)
    first, second = memory.get_finished_spans()
    assert dict(first.attributes or {}) == dict(second.attributes or {})
    result = assembler().add(decoded([first]))
    (interaction,) = result.interactions
    assert interaction.query == "Which river?" and [c.id for c in interaction.chunks] == ["a", "b"]
