"""`ragpulse run` on one box: log lines about the traffic, a local results file that label-queue
reads, and `--live` in a real terminal (tmux). The agent is a subprocess; spans come from the real
OpenTelemetry SDK through its OTLP/HTTP exporter."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent.cli import main
from tests.support.agent_process import AgentProcess
from tests.support.net import free_port, http_get
from tests.support.repo import ROOT
from tests.support.spans import PARIS_RESPONSE, USEFUL, USELESS, openinference_single_span, record_spans

pytestmark = pytest.mark.integration

METRIC = {"metric": "context_precision"}


def send(url: str, spans: list[ReadableSpan]) -> None:
    exporter = OTLPSpanExporter(endpoint=url)
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    exporter.shutdown()


def scored(agent: AgentProcess, count: int) -> None:
    scrape = agent.wait_for(lambda s: s.total("ragpulse_score_count") >= count, timeout=30)
    assert scrape.total("ragpulse_score_count") == count


def summaries(log: str) -> list[str]:
    return [line for line in log.splitlines() if "ragpulse.activity: last 1s:" in line]


def test_first_spans_once_per_service_and_a_summary_only_while_traffic_flows(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    agent = AgentProcess(
        env={
            "RAGPULSE_METRICS": "context_precision",
            "RAGPULSE_ACTIVITY_SUMMARY_SECONDS": "1",
            "RAGPULSE_RESULTS_FILE": str(results),
            "RAGPULSE_RESULTS_FILE_MAX_BYTES": "6000",
            "RAGPULSE_RESULTS_FILE_KEEP": "2",
            "RAGPULSE_RESULTS_INCLUDE_TEXT": "true",
        }
    )
    try:
        agent.wait_ready()
        send(agent.traces_url, record_spans(6, service="checkout"))
        send(agent.traces_url, record_spans(3, service="search"))
        send(agent.traces_url, record_spans(6, service="checkout"))
        scored(agent, 15)
        # A summary of the period with traffic, then quiet: wait for the first, then three periods.
        deadline = time.monotonic() + 10
        while not any("15 scored" in line or "scored" in line for line in summaries(agent.log())):
            assert time.monotonic() < deadline, agent.log()
            time.sleep(0.1)
        time.sleep(1.5)  # the period that was running when the traffic ended ends too
        busy = summaries(agent.log())
        time.sleep(3.5)
        idle = summaries(agent.log())
    finally:
        agent.stop()
        agent.kill()
    log = agent.log()
    first = [line.split("ragpulse.activity: ")[1] for line in log.splitlines() if "first spans from" in line]
    # One line per service, when its first spans arrive, naming how they were read.
    assert first == [
        "first spans from service checkout (otlp_http): 6 spans, 6 interactions",
        "first spans from service search (otlp_http): 3 spans, 3 interactions",
    ]
    assert busy, log
    assert sum(int(line.split(" scored")[0].rsplit(" ", 1)[1]) for line in busy) == 15
    assert all("means context_precision=" in line and "drift alarms: 0" in line for line in busy)
    assert idle == busy  # no line for a quiet period

    # The results file: rotated at the bound, two rotated files kept, the oldest lines gone.
    files = [results, results.with_name("results.jsonl.1"), results.with_name("results.jsonl.2")]
    assert all(f.exists() for f in files) and not results.with_name("results.jsonl.3").exists()
    lines = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert all(f.stat().st_size <= 6000 for f in files)
    assert 0 < len(lines) < 15
    span = lines[0]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert span["name"] == "ragpulse.evaluation" and len(span["traceId"]) == 32

    # label-queue reads it without Kafka: nothing was marked (label_sample_rate 0), a draw of all.
    queue = tmp_path / "queue.jsonl"
    assert main(["label-queue", "--results-file", str(results), "--out", str(queue)]) == 0
    assert queue.read_text() == ""
    assert main(["label-queue", "--results-file", str(results), "--fraction", "1", "--out", str(queue)]) == 0
    rows = [json.loads(line) for line in queue.read_text().splitlines()]
    # One line per interaction (not per metric), each document listed once with its verdict.
    assert len(rows) == len(lines) == len({row["interaction_id"] for row in rows})
    for row in rows:
        assert row["labels"] == {"context_precision": None} and row["service"] in ("checkout", "search")
        assert row["query"].startswith("Capital of France?") and row["response"] == PARIS_RESPONSE
        assert len(row["documents"]) == 5 and all("useful" in d for d in row["documents"])
        verdicts = [d["useful"] for d in row["documents"]]
        assert verdicts in ([False, True, True, False, False], [True, True, False, True, False],
                            [False, False, True, True, True])  # fmt: skip


def low_scored_interaction() -> tuple[list[ReadableSpan], str]:
    """One interaction whose five chunks are all useless (context precision 0), and its trace id."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "checkout"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests")
    openinference_single_span(
        tracer, query="Capital of France? (bad retrieval)",
        chunks=[USELESS.format(k) for k in range(5)], response=PARIS_RESPONSE,
    )  # fmt: skip
    for i in range(4):
        openinference_single_span(
            tracer, query=f"Capital of France? #{i}", chunks=[USEFUL.format(k) for k in range(3)],
            response=PARIS_RESPONSE,
        )  # fmt: skip
    spans = list(memory.get_finished_spans())
    return spans, format(spans[0].get_span_context().trace_id, "032x")


@pytest.mark.parametrize(("columns", "rows"), [(160, 50), (80, 24)])
def test_live_view_in_a_terminal_shows_the_lowest_scored_trace(
    tmp_path: Path, columns: int, rows: int
) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (Debian package `tmux`)")
    session = f"ragpulse-live-{uuid.uuid4().hex[:8]}"
    otlp, metrics, grpc = free_port(), free_port(), free_port()
    command = (
        f"{sys.executable} -m agent run --live --otlp-listen 127.0.0.1:{otlp} "
        f"--metrics-listen 127.0.0.1:{metrics}"
    )
    # COLUMNS/LINES (set under pytest-xdist) would override the terminal's size for rich.
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_") and k not in ("COLUMNS", "LINES")
    }
    env.update(RAGPULSE_OTLP_GRPC_LISTEN=f"127.0.0.1:{grpc}", RAGPULSE_METRICS="context_precision")
    # The pane stays when the agent exits, so a failure shows what it printed last.
    config = tmp_path / "tmux.conf"
    config.write_text("set-option -g remain-on-exit on\n")
    subprocess.run(
        # Its own tmux server (-L): another server's options or clients cannot size this window.
        ["tmux", "-L", session, "-f", str(config), "new-session", "-d", "-s", session,
         "-x", str(columns), "-y", str(rows), "-c", str(ROOT), command],
        env=env, check=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if http_get(f"http://127.0.0.1:{metrics}/readyz", timeout=1)[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, capture(session)
            time.sleep(0.1)
        spans, trace_id = low_scored_interaction()
        send(f"http://127.0.0.1:{otlp}/v1/traces", spans)
        deadline = time.monotonic() + 30
        screen = capture(session)
        while trace_id not in screen and time.monotonic() < deadline:
            time.sleep(0.2)
            screen = capture(session)
    finally:
        subprocess.run(["tmux", "-L", session, "kill-server"], check=False)
    # The dashboard: means per metric, and the worst interaction with its verdicts and trace id.
    assert "lowest-scored recent interactions" in screen, screen
    assert trace_id in screen, screen
    # The interaction's cell: its route, its trace id below, then its question (cut if need be);
    # the scores beside it, whole, their verdicts read down the column at any width.
    lines = screen.splitlines()
    row = next(i for i, line in enumerate(lines) if trace_id in line) - 1
    assert "checkout" in lines[row] and "context_precision=0.00" in lines[row], screen
    column = lines[row].index("context_precision=0.00")
    scores = " ".join(" ".join(line[column:].strip(" │").split()) for line in lines[row : row + 4])
    assert "context_precision: #1 #2 #3 #4 #5 not useful" in scores, screen
    assert all(len(line) <= columns for line in lines)


def capture(session: str) -> str:
    result = subprocess.run(
        ["tmux", "-L", session, "capture-pane", "-p", "-t", session], capture_output=True, text=True
    )
    return result.stdout
