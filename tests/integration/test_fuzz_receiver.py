"""Fuzzing the real OTLP/HTTP receiver with hostile requests (tests/support/hostile.py).

1. In process: the agent built by `build_agent` serves on free ports in a background event loop;
   hypothesis sends deep nesting, giant attributes, 10,000-chunk spans, invalid UTF-8, truncated
   protobuf and lying Content-Encodings. Every answer is 200 or a 4xx (never a 5xx), and every
   4xx is counted with a reason in ragpulse_requests_refused_total{source,reason} or
   ragpulse_dead_letters_total{reason}.
2. As a process: the worst case of every kind against `ragpulse run`, whose peak resident memory
   (VmHWM) must stay under RSS_BOUND_MIB.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from prometheus_client import CollectorRegistry

from agent.build import build_agent
from agent.config import load_settings
from agent.pipeline import Agent
from tests.support.agent_process import AgentProcess
from tests.support.hostile import (
    Hostile,
    _json_request,
    gzip_bomb,
    hostile,
    nested_any_value,
    rag_attributes,
    request_with_attributes,
)
from tests.support.net import http_post

pytestmark = pytest.mark.integration

MAX_BODY = 8 * 1024 * 1024
RSS_BOUND_MIB = 256  # measured peak 99 MiB (VmHWM) with the hostile-input hardening
# What each kind may be answered with; any other status (and any 5xx) fails.
ALLOWED = {
    "deep_protobuf": {200, 400},
    "deep_json": {200, 400},
    "deep_raw_json": {400},
    "giant_attribute": {200},
    "many_chunks": {200},
    "invalid_utf8_protobuf": {200, 400},
    "invalid_utf8_json": {400},
    "truncated_protobuf": {200, 400},
    "random_bytes": {200, 400},
    "bad_gzip": {400},
    "truncated_gzip": {400},
    "bad_deflate": {400},
    "unknown_encoding": {415},
    "wrong_content_type": {415},
    "gzip_bomb": {413},
}


class InProcessAgent:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        settings = load_settings(
            environ={
                "RAGPULSE_OTLP_LISTEN": "127.0.0.1:0",
                "RAGPULSE_METRICS_LISTEN": "127.0.0.1:0",
                "RAGPULSE_OTLP_GRPC_LISTEN": "",  # OTLP/HTTP only: the source is the HTTP receiver
                "RAGPULSE_OTLP_MAX_BODY_BYTES": str(MAX_BODY),
                # Intake only: what is under test is the receiver, not evaluation speed.
                "RAGPULSE_SAMPLE_RATE": "0",
                "RAGPULSE_ASSEMBLY_WAIT_SECONDS": "0.5",
            }
        )
        self.agent: Agent = build_agent(settings, self.registry)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fuzz-agent", daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.agent.start(), self.loop).result(60)
        self.url = f"http://127.0.0.1:{self.agent.source.bound_port}/v1/traces"  # type: ignore[attr-defined]

    def counted(self) -> float:
        total = 0.0
        for family in self.registry.collect():
            if family.name in ("ragpulse_requests_refused", "ragpulse_dead_letters"):
                total += sum(s.value for s in family.samples if s.name.endswith("_total"))
        return total

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.agent.shutdown(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def receiver() -> Iterator[InProcessAgent]:
    agent = InProcessAgent()
    try:
        yield agent
    finally:
        agent.stop()


def post(url: str, case: Hostile) -> int:
    headers = {"Content-Encoding": case.content_encoding}
    if case.content_type:
        headers["Content-Type"] = case.content_type
    status, _, _ = http_post(url, case.body, headers, timeout=60)
    return status


FUZZ_EXAMPLES = 400


@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(case=hostile)
def test_hostile_requests_get_200_or_a_counted_4xx_never_a_5xx(
    receiver: InProcessAgent, case: Hostile
) -> None:
    before = receiver.counted()
    status = post(receiver.url, case)
    assert status < 500, f"{case!r} -> {status}"
    assert status in ALLOWED[case.kind], f"{case!r} -> {status}"
    if status >= 400:
        # Refusals are counted when the response has been sent (aiohttp's access log): poll.
        deadline = time.monotonic() + 10
        while receiver.counted() < before + 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert receiver.counted() >= before + 1, f"{case!r} -> {status} without a counted reason"


# -- memory of the real process -------------------------------------------------------------------


def worst_cases() -> list[Hostile]:
    chunk = b"c" * 500_000
    giant = request_with_attributes(rag_attributes(b"q " * 1_200_000, b"a", [chunk] * 6))
    assert len(giant) < MAX_BODY
    return [
        Hostile("application/x-protobuf", "identity", giant, "giant_attribute"),
        _many_chunks(10_000),
        Hostile(
            "application/x-protobuf",
            "identity",
            request_with_attributes([(b"input.value", nested_any_value(3000))]),
            "deep_protobuf",
        ),
        Hostile(
            "application/json",
            "identity",
            _json_request('{"arrayValue":{"values":[' * 100_000 + '{"stringValue":"x"}' + "]}}" * 100_000),
            "deep_json",
        ),
        Hostile("application/json", "identity", b"[" * 1_000_000 + b"]" * 1_000_000, "deep_raw_json"),
        gzip_bomb(1024),
        gzip_bomb(1024),
    ]


def _many_chunks(n: int) -> Hostile:
    chunks = [f"chunk {i} says this about the question".encode() for i in range(n)]
    return Hostile(
        "application/x-protobuf",
        "identity",
        request_with_attributes(rag_attributes(b"What is it?", b"It is this.", chunks)),
        "many_chunks",
    )


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc status")


def test_the_agent_process_stays_within_its_memory_bound_under_the_worst_cases() -> None:
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc to read the agent's peak memory")
    agent = AgentProcess(env={"RAGPULSE_OTLP_MAX_BODY_BYTES": str(MAX_BODY)})
    try:
        agent.wait_ready()
        for case in worst_cases():
            status = post(agent.traces_url, case)
            assert status < 500 and status in ALLOWED[case.kind], f"{case!r} -> {status}"
            assert agent.process.poll() is None, agent.log()
        peak = peak_rss_mib(agent.process.pid)
        assert peak < RSS_BOUND_MIB, f"peak RSS {peak:.0f} MiB"
        print(f"agent peak RSS under the worst cases: {peak:.0f} MiB (bound {RSS_BOUND_MIB} MiB)")
    finally:
        agent.kill()
