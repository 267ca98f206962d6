"""The Exporter contract."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from agent.model import MetricResult, RagInteraction


class Exporter(Protocol):
    async def start(self) -> None:
        """Connect (e.g. to a broker); called once before the first export."""
        ...

    async def export(self, interaction: RagInteraction, results: Sequence[MetricResult]) -> None:
        """Publish the results of one evaluated interaction.

        Returns once the results are durable where this exporter puts them (e.g. acknowledged by
        a broker): the interaction counts as done, and its offset may be committed, only after.
        Raises on failure.
        """
        ...

    async def shutdown(self, timeout: float) -> None:
        """Flush what is held; idempotent."""
        ...
