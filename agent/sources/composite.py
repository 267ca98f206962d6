"""Several sources feeding one pipeline as one Source (the embedded default: OTLP/HTTP and gRPC)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from agent.sources.base import Intake, Source


class CompositeSource:
    """Starts, flushes, stops and shuts down its sources together; ready when all of them are."""

    def __init__(self, sources: Sequence[Source]) -> None:
        if not sources:
            raise ValueError("a composite source needs at least one source")
        self.sources = tuple(sources)
        self.name = "+".join(source.name for source in self.sources)

    async def start(self, intake: Intake) -> None:
        started: list[Source] = []
        try:
            for source in self.sources:
                await source.start(intake)
                started.append(source)
        except BaseException:
            # One receiver cannot bind: release the others before failing start-up.
            await asyncio.gather(*(s.stop() for s in started), return_exceptions=True)
            raise

    def ready(self) -> bool:
        return all(source.ready() for source in self.sources)

    async def stop(self) -> None:
        await asyncio.gather(*(source.stop() for source in self.sources))

    async def flush(self) -> None:
        await asyncio.gather(*(source.flush() for source in self.sources))

    async def shutdown(self, timeout: float) -> None:
        await asyncio.gather(*(source.shutdown(timeout) for source in self.sources))
