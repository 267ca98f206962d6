"""In-memory stand-ins for pipeline stages in unit tests."""

from __future__ import annotations

from collections.abc import Sequence

from agent.model import MetricResult, RagInteraction


class ListExporter:
    """An Exporter that keeps the ids of what it exported."""

    def __init__(self) -> None:
        self.exported: list[str] = []

    async def start(self) -> None: ...

    async def export(self, interaction: RagInteraction, results: Sequence[MetricResult]) -> None:
        self.exported.append(interaction.interaction_id)

    async def shutdown(self, timeout: float) -> None: ...
