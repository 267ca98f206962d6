"""A Judge wrapper that measures every call that reaches the real judge (after the cache)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from agent.judges.base import Judge, JudgeError
from agent.model import Verdict
from agent.telemetry import Telemetry


class InstrumentedJudge:
    def __init__(self, inner: Judge, telemetry: Telemetry) -> None:
        self._inner = inner
        self._requests = telemetry.judge_requests
        self._latency = telemetry.judge_latency.labels(inner.model)

    @property
    def model(self) -> str:
        return self._inner.model

    def prompt_version(self, kind: str) -> str:
        return self._inner.prompt_version(kind)

    async def chunk_usefulness(self, query: str, response: str, chunks: Sequence[str]) -> list[Verdict]:
        started = time.perf_counter()
        try:
            verdicts = await self._inner.chunk_usefulness(query, response, chunks)
        except JudgeError:
            self._requests.labels(self.model, "error").inc()
            raise
        finally:
            self._latency.observe(time.perf_counter() - started)
        self._requests.labels(self.model, "ok").inc()
        return verdicts
