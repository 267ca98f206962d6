"""Nothing private leaves: personal data planted in spans never reaches the HTTP judge server.

`ragpulse run` as a real process with an LLM judge (litellm → tests/support/llm_server.py, which
records every request body); spans come from the real OpenTelemetry SDK exporter. The fake
server judges from the fenced text it receives, like the lexical judge, so the scores the agent
exports must equal the lexical judge's scores on the *redacted* interaction: the verdicts came
back for the redacted text and were mapped to the original interaction.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent.judges.local import LexicalJudge
from agent.metrics import STREAMING_METRICS
from agent.model import Chunk, RagInteraction
from agent.redact import RedactionRules, Redactor
from tests.support.agent_process import AgentProcess
from tests.support.judges import Binary
from tests.support.llm_server import FakeLLMServer
from tests.support.spans import openinference_single_span

pytestmark = pytest.mark.integration

MODEL = "openai/ragpulse-test-judge"
PATTERNS = {"EMPLOYEE_ID": r"\bE\d{6}\b"}
ALLOWED = "support@acme.example"
# Eleven planted values of every built-in kind (documentation ranges and test numbers) plus a
# custom one; each appears in more than one text so that placeholders must line up.
PLANTED = (
    "jane.doe@example.com",
    "bob.smith@mail.example.org",
    "+44 20 7946 0958",
    "(415) 555-2671",
    "4111 1111 1111 1111",
    "5500-0000-0000-0004",
    "192.0.2.17",
    "2001:db8::8a2e:370:7334",
    "GB82 WEST 1234 5698 7654 32",
    "DE89 3704 0044 0532 0130 00",
    "E123456",
)
QUERY = "Which e-mail and phone number does Jane Doe (jane.doe@example.com, employee E123456) use?"
CHUNKS = (
    "Jane Doe's e-mail is jane.doe@example.com and her phone number is +44 20 7946 0958.",
    "Bob Smith (bob.smith@mail.example.org) paid with card 4111 1111 1111 1111 from 192.0.2.17.",
    "Refunds go to IBAN GB82 WEST 1234 5698 7654 32 or DE89 3704 0044 0532 0130 00; card "
    "5500-0000-0000-0004 was declined at 2001:db8::8a2e:370:7334. US office: (415) 555-2671.",
    f"Questions about the account of employee E123456 go to {ALLOWED}.",
)
RESPONSE = (
    "Jane Doe's e-mail is jane.doe@example.com and her phone number is +44 20 7946 0958; "
    f"questions go to {ALLOWED}."
)


@pytest.fixture(scope="module")
def judge_server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture
def agent(judge_server: FakeLLMServer) -> Iterator[AgentProcess]:
    judge_server.reset()
    process = AgentProcess(
        env={
            "RAGPULSE_JUDGE_MODEL": MODEL,
            "RAGPULSE_JUDGE_API_BASE": judge_server.api_base,
            "RAGPULSE_JUDGE_API_KEY": "test-key-not-secret",
            "RAGPULSE_REDACT_PATTERNS": json.dumps(PATTERNS),
            "RAGPULSE_REDACT_ALLOW": ALLOWED,
        }
    )
    try:
        process.wait_ready(timeout=60)
        yield process
    finally:
        process.kill()


def export(agent: AgentProcess) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-app"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests")
    openinference_single_span(tracer, query=QUERY, chunks=CHUNKS, response=RESPONSE)
    exporter = OTLPSpanExporter(endpoint=agent.traces_url)
    assert exporter.export(memory.get_finished_spans()) is SpanExportResult.SUCCESS
    exporter.shutdown()


def expected_scores() -> dict[str, float | None]:
    """The lexical judge's yes/no verdicts' scores on the interaction as the redactor leaves it (the
    test LLM server answers yes/no as the lexical judge thresholds)."""
    redactor = Redactor(RedactionRules(patterns=PATTERNS, allow=(ALLOWED,)))
    query, response, *chunks = redactor.redact([QUERY, RESPONSE, *CHUNKS]).texts
    redacted = RagInteraction(
        "ab" * 16, "cd" * 8, query, tuple(Chunk(c) for c in chunks), response, "rag-app", "rag.query"
    )

    async def run() -> dict[str, float | None]:
        judge = Binary(LexicalJudge())
        results = [await metric().evaluate(redacted, judge) for metric in STREAMING_METRICS.values()]
        return {r.metric: r.value for r in results}

    return asyncio.run(run())


def test_no_planted_personal_data_reaches_the_judge_and_scores_still_come_back(
    agent: AgentProcess, judge_server: FakeLLMServer
) -> None:
    export(agent)
    labels = {"service": "rag-app", "route": "rag.query"}
    scrape = agent.wait_for(
        lambda s: s.total("ragpulse_evaluations_total", **labels) == len(STREAMING_METRICS), timeout=60
    )
    assert judge_server.stats.calls >= 1
    sent = json.dumps(judge_server.stats.requests)
    for value in PLANTED:
        assert value not in sent, f"{value!r} reached the judge"
    # Digits-only and case-folded forms did not slip through either.
    assert "4111111111111111" not in sent and "jane.doe@" not in sent.lower()
    # The allow-listed address is sent as it is.
    assert ALLOWED in sent
    # Consistent placeholders: the query's e-mail is the chunk's and the response's.
    prompts = [
        m["content"] for body in judge_server.stats.requests for m in body["messages"] if m["role"] == "user"
    ]
    user = next(p for p in prompts if "Question kind: assess_interaction" in p)
    assert "Jane Doe (<EMAIL_1>, employee <EMPLOYEE_ID_1>)" in user
    assert "Jane Doe's e-mail is <EMAIL_1> and her phone number is <PHONE_1>" in user  # chunk + response
    assert user.count("<EMAIL_1>") >= 3 and user.count("<PHONE_1>") >= 2

    # Every metric was scored from the judge's verdicts on the redacted text.
    expected = expected_scores()
    for metric, value in expected.items():
        assert scrape.value("ragpulse_evaluations_total", outcome="ok", metric=metric, **labels) == 1, metric
        assert value is not None
        assert scrape.value("ragpulse_score_sum", metric=metric, **labels) == pytest.approx(value), metric
    # The claim check lined up across texts: the response's claims are supported by chunk 1.
    assert expected["faithfulness"] == pytest.approx(1.0)
    # Counted per kind (each value once per text it appears in).
    assert scrape.value("ragpulse_redactions_total", kind="email") == 4
    assert scrape.value("ragpulse_redactions_total", kind="phone") == 3
    assert scrape.value("ragpulse_redactions_total", kind="card") == 2
    assert scrape.value("ragpulse_redactions_total", kind="iban") == 2
    assert scrape.value("ragpulse_redactions_total", kind="ip") == 2
    assert scrape.value("ragpulse_redactions_total", kind="employee_id") == 2
