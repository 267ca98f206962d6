"""The contracts of what hangs on the pipeline beside its stages: observers and markers.

An observer watches traffic without changing it (OTel's `SpanProcessor` with `on_start` /
`on_end`): the signals of every interaction (agent/signals.py), human labels read from annotation
spans (agent/trust/aggregator.py), probe counts (agent/probes/results.py). Observers hang on a
route's list in agent/pipeline.py; adding one is its module, its settings section and one line of
agent/build.py. Hooks run on the event loop, on the intake's hot path: they count and return,
never wait, and never raise (a failure is theirs to count and log).

A marker decides something once about an evaluated interaction, before any exporter sees it
(e.g. drawn for human labels), so that exporters read the decision rather than take it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from agent.infra.lifecycle import Lifecycle
from agent.model import Evaluated, Mark, MetricResult, RagInteraction, Span
from agent.otlp.assemble import Assembly


class Observer(Lifecycle, Protocol):
    def on_spans(self, spans: Sequence[Span], source: str) -> None:
        """Every decoded span as it arrives, before assembly (of all routes), with the name of the
        source that read it (`otlp_http`, `otlp_grpc`, `kafka`)."""
        ...

    def on_assembly(self, assembly: Assembly) -> None:
        """What one assembler step produced, buffer counts and failures included (of all routes)."""
        ...

    def on_interaction(self, interaction: RagInteraction) -> None:
        """Every assembled interaction of the observer's route, before sampling."""
        ...

    def on_evaluated(self, evaluated: Evaluated) -> None:
        """Every interaction of the observer's route once evaluated and exported."""
        ...


class Marker(Protocol):
    def mark(self, interaction: RagInteraction, results: Sequence[MetricResult]) -> Mark | None:
        """The decision about one evaluated interaction, or None when there is nothing to mark."""
        ...
