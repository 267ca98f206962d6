"""A Judge wrapper that bounds what a judge is given and keeps local judges off the event loop.

- Size cap: every text handed to the judge (query, response, reference, each chunk) is cut to
  `max_text_chars` characters, so one 200 KB span costs a bounded amount of CPU (local judges) or
  tokens (LLM judges). Cuts are counted (ragpulse_judge_texts_truncated_total) and documented in
  docs/limits.md. The verdict cache sits outside this wrapper and keys on the full text.
- Off the loop: a local judge (lexical, embedding) computes its verdicts in pure Python; with
  `offload` its calls run in a small pool of worker threads, each with an event loop of its own,
  so health checks, intake and /metrics keep being served while it works. LLM judges wait on the
  network and stay on the main loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from agent.judges.base import (
    AnswerComparison,
    ChunkAssessment,
    ClaimVerdict,
    CriterionInputs,
    InteractionVerdicts,
    Judge,
    JudgeWrapper,
)
from agent.model import Criterion, Verdict

T = TypeVar("T")

# Texts longer than this are cut before judging (judge_max_text_chars).
DEFAULT_MAX_TEXT_CHARS = 32_768

_thread_state = threading.local()


def _run_in_thread_loop(call: Callable[[], Awaitable[T]]) -> T:
    """Run a judge coroutine to completion on this worker thread's own event loop."""
    loop: asyncio.AbstractEventLoop | None = getattr(_thread_state, "loop", None)
    if loop is None:
        loop = _thread_state.loop = asyncio.new_event_loop()
    return loop.run_until_complete(call())


class BoundedJudge(JudgeWrapper):
    """Cuts texts to `max_text_chars` and, with `offload`, runs the inner judge in threads."""

    def __init__(
        self,
        inner: Judge,
        *,
        max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
        offload: bool = False,
        workers: int = 2,
        on_truncate: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(inner)
        self._max = max_text_chars
        self._on_truncate = on_truncate
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="judge") if offload else None

    def _cut(self, text: str) -> str:
        if len(text) <= self._max:
            return text
        if self._on_truncate is not None:
            self._on_truncate()
        return text[: self._max]

    def _cut_all(self, texts: Sequence[str]) -> list[str]:
        return [self._cut(text) for text in texts]

    async def _call(self, call: Callable[[], Awaitable[T]]) -> T:
        if self._pool is None:
            return await call()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, _run_in_thread_loop, call)

    async def assess_chunks(
        self, query: str, answer: str | None, chunks: Sequence[str]
    ) -> list[ChunkAssessment]:
        q, a, c = self._cut(query), None if answer is None else self._cut(answer), self._cut_all(chunks)
        return await self._call(lambda: self._inner.assess_chunks(q, a, c))

    async def check_response(self, query: str, response: str, chunks: Sequence[str]) -> list[ClaimVerdict]:
        q, r, c = self._cut(query), self._cut(response), self._cut_all(chunks)
        return await self._call(lambda: self._inner.check_response(q, r, c))

    async def assess_interaction(
        self, query: str, response: str, chunks: Sequence[str], criteria: Sequence[Criterion] = ()
    ) -> InteractionVerdicts:
        q, r, c = self._cut(query), self._cut(response), self._cut_all(chunks)
        return await self._call(lambda: self._inner.assess_interaction(q, r, c, criteria))

    async def check_reference(self, reference: str, chunks: Sequence[str]) -> list[Verdict]:
        r, c = self._cut(reference), self._cut_all(chunks)
        return await self._call(lambda: self._inner.check_reference(r, c))

    async def compare_answers(self, query: str, response: str, reference: str) -> AnswerComparison:
        q, r, ref = self._cut(query), self._cut(response), self._cut(reference)
        return await self._call(lambda: self._inner.compare_answers(q, r, ref))

    async def judge_criteria(
        self, criteria: Sequence[Criterion], inputs: CriterionInputs
    ) -> dict[str, Verdict]:
        cut = CriterionInputs(
            self._cut(inputs.query),
            None if inputs.response is None else self._cut(inputs.response),
            tuple(self._cut_all(inputs.chunks)),
            None if inputs.reference is None else self._cut(inputs.reference),
        )
        return await self._call(lambda: self._inner.judge_criteria(criteria, cut))
