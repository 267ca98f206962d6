"""`ragpulse eval`'s scoring runs in the stream's Evaluator: each judge question asked once per
item, retryable judge failures retried with backoff and then recorded as errors (never scores).
Against the real test LLM server through litellm; requests counted where the server got them."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from agent.build import build_judge
from agent.config import Settings
from agent.offline.evaluate import (
    RAGCHECKER_FIELDS,
    ItemResult,
    OfflineEvaluator,
    RetryPolicy,
    available_metrics,
)
from agent.offline.records import EvalItem
from agent.telemetry import JudgeTelemetry
from tests.support.llm_server import FakeLLMServer, fenced_blocks

pytestmark = pytest.mark.integration

MODEL = "openai/ragpulse-test-judge"
CONTEXTS = (
    "Paris is the capital and largest city of France. It lies on the Seine.",
    "The Eiffel Tower is in Paris. It was built for the 1889 World's Fair.",
    "Bananas grow in tropical climates. They are rich in potassium.",
)


def full_item(n: int) -> EvalItem:
    """A row that carries every input, so every metric applies."""
    return EvalItem(
        id=f"q{n}",
        line=n + 1,
        question=f"What is the capital of France, and when was its tower built? ({n})",
        contexts=CONTEXTS,
        response="Paris is the capital of France. The Eiffel Tower was built in 1925.",
        reference=f"Paris is the capital of France. The Eiffel Tower was built for the 1889 World's Fair "
        f"({n}).",
        reference_contexts=CONTEXTS[:2],
        retrieved_ids=("d1", "d2", "d3"),
        relevant_ids=("d1", "d2"),
    )


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(hang_seconds=5.0) as running:
        yield running


@pytest.fixture
def fake(server: FakeLLMServer) -> FakeLLMServer:
    server.reset()
    return server


def evaluator(
    server: FakeLLMServer, retry: RetryPolicy | None = None, **overrides: object
) -> OfflineEvaluator:
    values: dict[str, object] = {
        "judge_model": MODEL,
        "judge_api_base": server.api_base,
        "judge_api_key": "test-key",
        "judge_timeout_seconds": 5.0,
        "judge_max_retries": 0,  # the offline retries are under test
        "judge_breaker_cooldown_seconds": 0.05,
    }
    values.update(overrides)
    items = [full_item(0)]
    judge = build_judge(Settings.model_validate(values), JudgeTelemetry(CollectorRegistry()))
    return OfflineEvaluator(judge, available_metrics(items, 3), k=3, retry=retry)


def score(evaluator: OfflineEvaluator, items: list[EvalItem]) -> list[ItemResult]:
    async def run() -> list[ItemResult]:
        return list(await asyncio.gather(*(evaluator.score(item) for item in items)))

    return asyncio.run(run())


def test_every_judge_question_is_asked_once_per_item(fake: FakeLLMServer) -> None:
    items = [full_item(n) for n in range(3)]
    offline = evaluator(fake)
    assert set(RAGCHECKER_FIELDS) <= set(offline.metrics) and "answer_correctness" in offline.metrics
    results = score(offline, items)
    for result in results:
        assert not result.errors, result.errors
        assert all(result.scores[m] is not None for m in ("context_precision", "faithfulness", "mrr"))
        assert result.scores["ragchecker_faithfulness"] is not None
    k = len(CONTEXTS)
    # Per item: chunk usefulness against the reference (context precision and relevancy), the
    # response's claims (faithfulness, answer relevancy), the reference's claims (context
    # recall), the comparison (answer correctness and RAGChecker, one question), and RAGChecker's
    # per-chunk checks of both claim lists: 4 + 2k distinct questions, each asked once. (Rows
    # differ in every text, so no question is shared between items.)
    assert fake.stats.calls == len(items) * (4 + 2 * k)
    kinds = Counter(fenced_blocks(r["messages"][1]["content"])[0] for r in fake.stats.requests)
    per_item = {"assess_chunks": 1, "check_response": 1 + k, "check_reference": 1 + k, "compare_answers": 1}
    assert kinds == {kind: n * len(items) for kind, n in per_item.items()}
    # The verdicts obtained while scoring stay on the result.
    chunks, claims = results[0].verdicts.chunks, results[0].verdicts.claims
    assert chunks is not None and len(chunks) == k and claims is not None and len(claims) == 2


def test_without_a_reference_one_combined_call_per_item(fake: FakeLLMServer) -> None:
    items = [
        EvalItem(f"q{n}", n + 1, f"What is the capital of France? ({n})", CONTEXTS, "Paris is the capital.")
        for n in range(4)
    ]
    results = score(evaluator(fake), items)
    assert all(not r.errors for r in results)
    assert dict(fake.stats.by_kind) == {"assess_interaction": len(items)}


def test_a_retryable_failure_is_retried_with_backoff_then_scored(fake: FakeLLMServer) -> None:
    item = full_item(7)
    fake.script("500", "500")  # the first two requests fail; the judge itself does not retry
    results = score(evaluator(fake, RetryPolicy(attempts=3, base=0.01, cap=0.05)), [item])
    assert fake.stats.faults["500"] == 2
    assert not results[0].errors
    assert results[0].scores["context_precision"] is not None


def test_a_judge_that_stays_down_is_an_error_after_the_attempts_never_a_score(fake: FakeLLMServer) -> None:
    fake.fail_always("500")
    item = EvalItem("q", 1, "What is the capital of France?", CONTEXTS, "Paris is the capital.")
    results = score(evaluator(fake, RetryPolicy(attempts=3, base=0.01, cap=0.1)), [item])
    fake.fail_always(None)
    (result,) = results
    judged = ("context_precision", "context_relevancy", "faithfulness", "answer_relevancy")
    assert set(result.errors) == set(judged)
    assert all(result.scores[m] is None for m in judged)
    # Three evaluations, one combined question each (or refused by the open breaker: fewer).
    assert 1 <= fake.stats.calls <= 3
    assert fake.stats.by_kind == Counter()  # no answer was ever given


def test_retry_delays_grow_are_capped_and_honour_retry_after() -> None:
    from agent.judges.base import JudgeError

    policy = RetryPolicy(attempts=5, base=1.0, cap=8.0)
    plain = JudgeError("down", retryable=True)
    delays = [policy.delay(n, plain) for n in range(6)]
    assert all(0.5 * min(8.0, 2**n) <= d <= min(8.0, 2**n) for n, d in enumerate(delays))
    assert policy.delay(0, JudgeError("slow down", retryable=True, retry_after=5.0)) == 5.0
    assert policy.delay(0, JudgeError("slow down", retryable=True, retry_after=60.0)) == 8.0
