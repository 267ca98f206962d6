"""The Exporter contract."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from agent.model import MetricResult, RagInteraction


class Exporter(Protocol):
    def export(self, interaction: RagInteraction, results: Sequence[MetricResult]) -> None:
        """Publish the results of one evaluated interaction. Must not block on the network."""
        ...

    def shutdown(self, timeout: float) -> None:
        """Flush what is held; idempotent."""
        ...
