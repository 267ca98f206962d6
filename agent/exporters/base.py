"""The Exporter contract."""

from __future__ import annotations

from typing import Protocol

from agent.infra.lifecycle import Lifecycle
from agent.model import Evaluated


class Exporter(Lifecycle, Protocol):
    """Publishes evaluated interactions; `start` connects (e.g. to a broker) before the first export."""

    async def export(self, evaluated: Evaluated) -> None:
        """Publish the results of one evaluated interaction.

        Returns once the results are durable where this exporter puts them (e.g. acknowledged by
        a broker): the interaction counts as done, and its offset may be committed, only after.
        Raises on failure.
        """
        ...
