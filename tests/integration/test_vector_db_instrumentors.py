"""A RAG app under OpenLLMetry's vector-DB and OpenAI instrumentors from PyPI, exported over OTLP
to a running ragpulse, which must judge each answer against the passages the model was given.

The app (its own process: instrumentors patch globally) searches a Pinecone index with the
official client and the real `opentelemetry-instrumentation-pinecone`, then asks an OpenAI model
with the official client and the real `opentelemetry-instrumentation-openai`, under one request
span per question. Pinecone is a paid service, so its index is tests/support/pinecone_server.py (a
real HTTP server); the model and ragpulse's judge are the test OpenAI-compatible server. The app
records its spans with the real SDK and sends them with the real OTLP/HTTP exporter, split one
span per request and interleaved with the other question's trace. What ragpulse assembled is
read where it has effect: the chunks, in order, in the judge's prompts.

Run the app by hand: python -m tests.integration.test_vector_db_instrumentors --help
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.judges.questions import statements_body
from tests.support.agent_process import AgentProcess
from tests.support.llm_server import FakeLLMServer, fenced_blocks
from tests.support.net import Scrape
from tests.support.pinecone_server import FakePinecone
from tests.support.repo import ROOT

pytestmark = pytest.mark.integration

PASSAGES = [
    "The Seine flows through the heart of Paris before reaching the English Channel.",
    "Lyon sits where the Rhone and the Saone rivers meet.",
    "The Loire is the longest river entirely in France.",
    "Paris has 37 bridges across the Seine.",
    "The Garonne flows through Bordeaux and Toulouse.",
]
QUESTIONS = ["Which river flows through Paris?", "Where do the Rhone and the Saone meet?"]
ANSWER = "The Seine flows through Paris, and the Rhone meets the Saone at Lyon."
TOP_K = 3
PACKAGES = {  # module → the pip package that provides it
    "opentelemetry.instrumentation.pinecone": "opentelemetry-instrumentation-pinecone",
    "pinecone": "pinecone",
    "opentelemetry.instrumentation.openai": "opentelemetry-instrumentation-openai",
    "openai": "openai",
}


# -- the app (child process) -----------------------------------------------------------------------


def embed(text: str, size: int = 64) -> list[float]:
    """A deterministic bag-of-words embedding: offline, and close enough to rank these passages."""
    vector = [0.0] * size
    for word in text.lower().replace("?", " ").replace(".", " ").replace(",", " ").split():
        vector[zlib.crc32(word.encode()) % size] += 1.0
    return vector


def run_app(pinecone_host: str, llm_base: str, service: str, *, text_in_metadata: bool) -> tuple[list, list]:
    """Index the passages, answer each question; the finished spans and what the model was given."""
    import openai
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.instrumentation.pinecone import PineconeInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from pinecone import Pinecone

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    PineconeInstrumentor().instrument(tracer_provider=provider)
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    tracer = provider.get_tracer("rag-app")

    index = Pinecone(api_key="test-key").Index(host=pinecone_host)
    # LangChain's and LlamaIndex's Pinecone stores keep the chunk's text in the metadata (`text`);
    # an app may also keep only a reference there and the text elsewhere (here: `texts`).
    texts = {f"passage-{i}": passage for i, passage in enumerate(PASSAGES)}
    index.upsert(
        vectors=[
            {
                "id": key,
                "values": embed(passage),
                "metadata": {"source": "rivers.txt", **({"text": passage} if text_in_metadata else {})},
            }
            for key, passage in texts.items()
        ],
        namespace="rivers",
    )
    llm = openai.OpenAI(api_key="test-key", base_url=llm_base, max_retries=0)
    seen = []
    for question in QUESTIONS:
        with tracer.start_as_current_span("POST /ask") as request:
            request.set_attribute("http.route", "/ask")
            found = index.query(
                vector=embed(question), top_k=TOP_K, include_metadata=True, namespace="rivers"
            )
            chunks = [texts[match.id] for match in found.matches]
            completion = llm.chat.completions.create(
                model="gpt-4o-mini",
                messages=[
                    {"role": "system", "content": "Answer only from these passages:\n" + "\n".join(chunks)},
                    {"role": "user", "content": question},
                ],
            )
            seen.append(
                {
                    "trace_id": format(request.get_span_context().trace_id, "032x"),
                    "query": question,
                    "chunks": chunks,
                    "ids": [match.id for match in found.matches],
                    "scores": [match.score for match in found.matches],
                    "response": completion.choices[0].message.content,
                }
            )
    return list(memory.get_finished_spans()), seen


def deliveries(spans: list, delivery: str) -> Iterator[list]:
    """The export requests: `split` sends each span alone in the order spans ended (retrieval,
    model call, request span); `interleaved` alternates the two questions' traces span by span,
    request spans first, so each trace is complete only with its last span."""
    traces: dict[int, list] = {}
    for span in spans:
        traces.setdefault(span.context.trace_id, []).append(span)
    if delivery == "split":
        for span in spans:
            yield [span]
        return
    questions = [trace[::-1] for trace in traces.values() if len(trace) > 1]
    for span in spans:
        if len(traces[span.context.trace_id]) == 1:  # the upsert
            yield [span]
    first, second = questions
    for pair in zip(first, second, strict=True):
        for span in pair:
            yield [span]


def app_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description="The Pinecone + OpenAI RAG app, exporting to ragpulse.")
    parser.add_argument("--pinecone", required=True, help="index host, e.g. http://127.0.0.1:PORT")
    parser.add_argument("--llm", required=True, help="OpenAI-compatible base URL")
    parser.add_argument("--traces-url", required=True, help="ragpulse's OTLP/HTTP /v1/traces URL")
    parser.add_argument("--service", default="pinecone-app")
    parser.add_argument("--delivery", choices=("split", "interleaved"), default="split")
    parser.add_argument("--no-text-in-metadata", action="store_true")
    parser.add_argument("--out", type=Path, required=True, help="where to write what the model saw")
    args = parser.parse_args(argv)

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    spans, seen = run_app(
        args.pinecone, args.llm, args.service, text_in_metadata=not args.no_text_in_metadata
    )
    exporter = OTLPSpanExporter(endpoint=args.traces_url)
    requests = 0
    for batch in deliveries(spans, args.delivery):
        assert exporter.export(batch) is SpanExportResult.SUCCESS
        requests += 1
    exporter.shutdown()
    # The spans as the instrumentors wrote them, for the test to check its premises.
    recorded = [
        {
            "name": span.name,
            "trace_id": format(span.context.trace_id, "032x"),
            "attributes": dict(span.attributes or {}),
            "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
        }
        for span in spans
    ]
    args.out.write_text(json.dumps({"seen": seen, "spans": recorded, "requests": requests}, default=list))


# -- the tests -------------------------------------------------------------------------------------


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def _require_packages() -> None:
    missing = [package for module, package in PACKAGES.items() if not _installed(module)]
    if missing:
        pytest.skip(f"needs {' '.join(missing)} (pip install -e '.[test]')")


@pytest.fixture
def servers() -> Iterator[tuple[FakePinecone, FakeLLMServer]]:
    _require_packages()
    with FakePinecone() as pinecone, FakeLLMServer(default_answer=ANSWER) as llm:
        yield pinecone, llm


def _agent(llm: FakeLLMServer) -> AgentProcess:
    agent = AgentProcess(
        env={
            "RAGPULSE_JUDGE_MODEL": "openai/judge-test",
            "RAGPULSE_JUDGE_API_BASE": llm.api_base,
            "RAGPULSE_JUDGE_API_KEY": "test-key",
            "RAGPULSE_JUDGE_SELF_CHECK": "false",
            "RAGPULSE_METRICS": "context_precision,faithfulness",
            "RAGPULSE_ASSEMBLY_WAIT_SECONDS": "2",
        }
    )
    agent.wait_ready(timeout=60)
    return agent


def _run(agent: AgentProcess, pinecone: FakePinecone, llm: FakeLLMServer, tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "app.json"
    env = {
        **os.environ,
        "TRACELOOP_TRACE_CONTENT": "true",
        "OTEL_RESOURCE_ATTRIBUTES": "",
        # Nothing may reach the network; 127.0.0.1 is the test's.
        "HTTP_PROXY": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1",
    }
    command = [
        sys.executable, "-m", "tests.integration.test_vector_db_instrumentors",
        "--pinecone", pinecone.host, "--llm", llm.api_base, "--traces-url", agent.traces_url,
        "--out", str(out), *args,
    ]  # fmt: skip
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(out.read_text())


def _judged_chunks(llm: FakeLLMServer) -> dict[str, list[list[str]]]:
    """Per query, the CHUNK blocks of every judge prompt that asked about it, in prompt order."""
    judged: dict[str, list[list[str]]] = {}
    for request in llm.stats.requests:
        users = [m["content"] for m in request["messages"] if m.get("role") == "user"]
        try:
            _, blocks = fenced_blocks(users[0])
        except ValueError:
            continue  # the app's own question to the model
        named = dict(blocks)
        chunks = [body for name, body in blocks if name.startswith("CHUNK ")]
        if chunks:
            judged.setdefault(named["QUERY"], []).append(chunks)
    return judged


def _accounted(scrape: Scrape) -> bool:
    received = scrape.total("ragpulse_spans_received_total")
    done = scrape.total("ragpulse_spans_assembled_total") + scrape.total("ragpulse_spans_skipped_total")
    return received > 0 and received == done


def _premises(app: dict) -> None:
    """The instrumentors wrote what this test is about: hits as events, no document text."""
    queries = [s for s in app["spans"] if s["name"] == "pinecone.query"]
    assert len(queries) == 2
    for span, seen in zip(queries, app["seen"], strict=True):
        hits = [e["attributes"] for e in span["events"] if e["name"] == "db.query.result"]
        assert [h["db.query.result.id"] for h in hits] == seen["ids"]
        assert all("db.query.result.document" not in h for h in hits)
        assert "db.query.text" not in span["attributes"]
    assert sum(s["name"] == "openai.chat" for s in app["spans"]) == 2
    assert len({tuple(seen["chunks"]) for seen in app["seen"]}) == 2  # the questions saw different chunks


@pytest.mark.parametrize("delivery", ["split", "interleaved"])
def test_pinecone_hits_are_the_chunks_the_model_saw(
    servers: tuple[FakePinecone, FakeLLMServer], tmp_path: Path, delivery: str
) -> None:
    pinecone, llm = servers
    agent = _agent(llm)
    try:
        app = _run(agent, pinecone, llm, tmp_path, "--delivery", delivery, "--service", "pinecone-app")
        _premises(app)
        assert app["requests"] == len(app["spans"])  # one span per export request
        scrape = agent.wait_for(
            lambda s: (
                _accounted(s)
                and s.total("ragpulse_evaluations_total", service="pinecone-app") >= 2 * len(QUESTIONS)
            ),
            timeout=60,
        )
        assert scrape.total("ragpulse_interactions_total", service="pinecone-app") == len(QUESTIONS)
        assert scrape.total("ragpulse_evaluations_total", service="pinecone-app", outcome="error") == 0
        assert scrape.total("ragpulse_score_count", service="pinecone-app", metric="context_precision") == 2
        # Per question, the judge was shown exactly the passages the model was given, in order.
        judged = _judged_chunks(llm)
        assert sorted(judged) == sorted(QUESTIONS)
        for seen in app["seen"]:
            expected = [statements_body(chunk) for chunk in seen["chunks"]]
            assert len(expected) == TOP_K
            assert all(chunks == expected for chunks in judged[seen["query"]]), (judged, expected)
        # Per trace the search and the model call were assembled; the request spans (links) and
        # the upsert carry nothing an interaction uses.
        assert scrape.total("ragpulse_spans_assembled_total") == 2 * len(QUESTIONS)
        assert scrape.total("ragpulse_spans_skipped_total", reason="not_rag") == len(app["spans"]) - 4
        assert scrape.total("ragpulse_spans_skipped_total", reason="incomplete") == 0
    finally:
        agent.stop()


def test_hits_without_text_make_no_interaction(
    servers: tuple[FakePinecone, FakeLLMServer], tmp_path: Path
) -> None:
    """The app keeps its passages out of the index metadata: the hits carry ids and scores only.
    ragpulse must not judge the answer against anything else (no chunks is not empty chunks)."""
    pinecone, llm = servers
    agent = _agent(llm)
    try:
        app = _run(agent, pinecone, llm, tmp_path, "--no-text-in-metadata", "--service", "pinecone-ids")
        hits = [e for s in app["spans"] for e in s["events"] if e["name"] == "db.query.result"]
        assert len(hits) == 2 * TOP_K
        assert all("'text'" not in e["attributes"]["db.query.result.metadata"] for e in hits)
        # Split delivery: the request spans arrive last, so each trace is given up on after the wait.
        scrape = agent.wait_for(
            lambda s: _accounted(s) and s.total("ragpulse_spans_skipped_total", reason="incomplete") >= 4,
            timeout=30,
        )
        assert scrape.total("ragpulse_interactions_total", service="pinecone-ids") == 0
        assert scrape.total("ragpulse_spans_assembled_total") == 0
        # The searches (context unknown) and the model calls after them could not form an
        # interaction; the rest carries nothing.
        assert scrape.total("ragpulse_spans_skipped_total", reason="incomplete") == 4
        assert _judged_chunks(llm) == {}
    finally:
        agent.stop()


if __name__ == "__main__":
    app_main(sys.argv[1:])
