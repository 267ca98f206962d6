"""The testset writer calls the judge model through the judge's own call policy (ModelCaller,
agent/judges/caller.py), against the test LLM server (tests/support/llm_server.py) over real HTTP
through litellm: what a 500, a 429 with Retry-After or a 401 does to a write is what it does to a
judge question. Before the writer shared the caller it had none of this: no breaker (every write
called a model that was down), a Retry-After held back only its own retry, and a rejected key
was the provider's raw error text."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from agent.budget import SpendCounter
from agent.judges.base import JudgeError
from agent.judges.llm import LLMJudge
from agent.offline.testset import SINGLE
from agent.offline.testset_writer import LLMItemWriter
from tests.support.judges import model_caller
from tests.support.llm_server import FakeLLMServer

pytestmark = pytest.mark.integration

CHUNK = "Recall at k is the share of all relevant chunks that appear among the first k retrieved ones."


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as running:
        yield running


@pytest.fixture
def fake(server: FakeLLMServer) -> FakeLLMServer:
    server.reset()
    server.retry_after = None
    return server


def writer_for(server: FakeLLMServer, spend: SpendCounter | None = None, **options: object) -> LLMItemWriter:
    return LLMItemWriter(model_caller(server.api_base, spend=spend, **options), spend)


def write(writer: LLMItemWriter) -> JudgeError | None:
    """The failure of one `single` write, or None when it wrote a draft from the chunk."""
    try:
        draft = asyncio.run(writer.write(SINGLE, [CHUNK]))
    except JudgeError as exc:
        return exc
    assert draft.reference == CHUNK and draft.holding == (1,)
    return None


def test_an_outage_opens_the_writers_breaker_and_a_probe_closes_it(fake: FakeLLMServer) -> None:
    fake.fail_always("500")
    spend = SpendCounter()
    writer = writer_for(fake, spend, max_retries=0, breaker_failures=2, breaker_cooldown_seconds=0.3)
    failures = [write(writer), write(writer)]
    assert [(f.reason, f.retryable) for f in failures if f] == [("server_error", True)] * 2
    assert fake.stats.calls == 2

    # Open: the next write is refused without a call, and costs the budget nothing.
    refused = write(writer)
    assert refused is not None and refused.reason == "breaker_open" and refused.refused
    assert "circuit breaker open" in str(refused)
    assert fake.stats.calls == 2 and spend.total().calls == 2

    # After the cooldown one probe goes through; it succeeds and closes the breaker.
    fake.fail_always(None)
    time.sleep(0.35)
    assert write(writer) is None
    assert fake.stats.calls == 3 and spend.total().calls == 3


def test_a_retry_after_holds_back_the_next_write_not_only_the_retry(fake: FakeLLMServer) -> None:
    fake.retry_after = 1.0
    fake.script("429")
    writer = writer_for(fake, max_retries=0)
    failed = write(writer)
    assert failed is not None and failed.reason == "rate_limited" and failed.retryable
    assert failed.retry_after == pytest.approx(1.0)

    # A new write, right away: it waits out the Retry-After the first one was given.
    assert write(writer) is None
    (first, fault), (second, _) = fake.stats.arrivals
    assert fault == "429" and second - first >= 1.0 - 0.05


@pytest.mark.parametrize(
    ("fault", "reason", "names"),
    [
        ("401", "auth", "check the key in RAGPULSE_JUDGE_API_KEY (it is used instead of OPENAI_API_KEY)"),
        ("404", "not_found", "check RAGPULSE_JUDGE_MODEL and RAGPULSE_JUDGE_API_BASE"),
    ],
)
def test_a_permanent_failure_is_the_judges_one_line(
    fake: FakeLLMServer, fault: str, reason: str, names: str
) -> None:
    fake.fail_always(fault)
    failed = write(writer_for(fake))
    judge = LLMJudge(model_caller(fake.api_base))
    with pytest.raises(JudgeError) as asked:
        asyncio.run(judge.check_reference(CHUNK, [CHUNK]))
    assert fake.stats.calls == 2  # one each, never retried
    assert failed is not None and not failed.retryable and failed.reason == reason
    assert "\n" not in str(failed) and names in str(failed) and f"HTTP {fault}" in str(failed)
    # Word for word the line the judge gives for the same answer.
    assert str(failed) == str(asked.value)
