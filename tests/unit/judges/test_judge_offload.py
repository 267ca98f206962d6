"""BoundedJudge: texts cut to the cap, local judges computed off the event loop."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

from agent.judges.base import ClaimVerdict
from agent.judges.local import LexicalJudge
from agent.judges.offload import BoundedJudge
from agent.model import Verdict


class SlowJudge:
    """Burns CPU without yielding, as a pure-Python judge does, and records what it was given."""

    model = "slow"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.threads: list[int] = []
        self.seen: list[tuple[str, str, list[str]]] = []

    def prompt_version(self, kind: str) -> str:
        return "v1"

    def healthy(self) -> bool:
        return False

    async def check_response(self, query: str, response: str, chunks: Sequence[str]) -> list[ClaimVerdict]:
        self.threads.append(threading.get_ident())
        self.seen.append((query, response, list(chunks)))
        deadline = time.perf_counter() + self.seconds
        while time.perf_counter() < deadline:
            pass
        return [ClaimVerdict(Verdict(True))]


async def _ticks_during(call) -> tuple[object, float]:  # type: ignore[no-untyped-def]
    """Run `call` while a 10 ms ticker measures the longest gap between its ticks."""
    longest = 0.0
    done = False

    async def ticker() -> None:
        nonlocal longest
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            longest = max(longest, now - last)
            last = now

    task = asyncio.create_task(ticker())
    result = await call
    done = True
    await task
    return result, longest


def test_local_judge_work_runs_in_a_worker_thread_and_the_loop_keeps_ticking() -> None:
    inner = SlowJudge(seconds=1.5)
    judge = BoundedJudge(inner, offload=True)

    async def run():  # type: ignore[no-untyped-def]
        return await _ticks_during(judge.check_response("q", "r", ["c"]))

    verdicts, longest_gap = asyncio.run(run())
    assert verdicts == [ClaimVerdict(Verdict(True))]
    assert inner.threads and inner.threads[0] != threading.get_ident()
    # On the loop this would be a 1.5 s gap; generous bound for a busy machine.
    assert longest_gap < 1.0, longest_gap


def test_without_offload_the_judge_runs_on_the_loop() -> None:
    inner = SlowJudge(seconds=0.0)
    asyncio.run(BoundedJudge(inner).check_response("q", "r", ["c"]))
    assert inner.threads == [threading.get_ident()]


def test_texts_are_cut_to_the_cap_and_counted() -> None:
    cuts: list[int] = []
    inner = SlowJudge(seconds=0.0)
    judge = BoundedJudge(inner, max_text_chars=10, on_truncate=lambda: cuts.append(1))
    asyncio.run(judge.check_response("q" * 5, "r" * 50, ["c" * 10, "d" * 11]))
    assert inner.seen == [("qqqqq", "r" * 10, ["c" * 10, "d" * 10])]
    assert len(cuts) == 2


def test_identity_and_health_pass_through() -> None:
    judge = BoundedJudge(SlowJudge(0.0), offload=True)  # type: ignore[arg-type]
    assert judge.model == "slow" and judge.prompt_version("x") == "v1" and judge.healthy() is False


def test_the_combined_question_is_cut_and_offloaded_too() -> None:
    cuts: list[int] = []
    judge = BoundedJudge(LexicalJudge(), max_text_chars=40, offload=True, on_truncate=lambda: cuts.append(1))
    chunks = ["Paris is the capital of France. " * 3, "Lyon is a city."]
    together = asyncio.run(judge.assess_interaction("Where is Paris?", "Paris is in France.", chunks))
    cut = [c[:40] for c in chunks]
    lexical = LexicalJudge()
    assert together.chunks == tuple(
        asyncio.run(lexical.assess_chunks("Where is Paris?", "Paris is in France.", cut))
    )
    assert together.claims == tuple(
        asyncio.run(lexical.check_response("Where is Paris?", "Paris is in France.", cut))
    )
    assert len(cuts) == 1


def test_the_lexical_judge_answers_the_same_through_the_wrapper() -> None:
    query, response = "Where is Paris?", "Paris is in France. It has 2 million people."
    chunks = ["Paris is the capital of France.", "About 2.1 million people live in Paris."]
    direct = asyncio.run(LexicalJudge().check_response(query, response, chunks))
    wrapped = asyncio.run(BoundedJudge(LexicalJudge(), offload=True).check_response(query, response, chunks))
    assert wrapped == direct
