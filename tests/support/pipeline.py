"""In-memory stand-ins for pipeline stages in unit tests."""

from __future__ import annotations

from collections.abc import Sequence

from agent.model import Evaluated, Mark, MetricResult, RagInteraction, SamplingDecision


def evaluated(
    interaction: RagInteraction,
    results: Sequence[MetricResult],
    *,
    uniform: bool = True,
    marks: Sequence[Mark] = (),
) -> Evaluated:
    """What an exporter receives for `interaction` kept by the rate (`uniform=False`: by a keep rule)."""
    decision = SamplingDecision(True, "rate") if uniform else SamplingDecision(True, "rule: test", False)
    return Evaluated(interaction, list(results), decision, tuple(marks))


class ListExporter:
    """An Exporter that keeps the ids of what it exported."""

    def __init__(self) -> None:
        self.exported: list[str] = []

    async def start(self) -> None: ...

    async def flush(self) -> None: ...

    async def export(self, evaluated: Evaluated) -> None:
        self.exported.append(evaluated.interaction.interaction_id)

    async def shutdown(self, timeout: float) -> None: ...
