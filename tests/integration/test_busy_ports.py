"""A port already taken is an operator's mistake: `ragpulse run` says which setting to change.

Each listener of the agent (OTLP/HTTP, OTLP/gRPC, /metrics) is pointed at a port that a socket of
this test already listens on, as when an OpenTelemetry Collector holds 4317/4318 (its own
defaults) on the same machine. The agent runs as a subprocess and must exit 2 with one line naming
the setting and its environment variable: no traceback, no gRPC C++ log line.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.support.agent_process import AgentProcess

pytestmark = pytest.mark.integration

# "2026-11-25 21:48:25,437 INFO agent.build: ..." (a log record of the agent)
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ \S+: ")


@contextmanager
def busy_port() -> Iterator[int]:
    """A port on 127.0.0.1 that a socket of this process listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def run_until_exit(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    agent = AgentProcess(args=args, env=env)
    try:
        status = agent.process.wait(60)
    finally:
        agent.kill()
    return status, agent.log()


@pytest.mark.parametrize(
    ("setting", "variable"),
    [
        ("otlp_listen", "RAGPULSE_OTLP_LISTEN"),
        ("otlp_grpc_listen", "RAGPULSE_OTLP_GRPC_LISTEN"),
        ("metrics_listen", "RAGPULSE_METRICS_LISTEN"),
    ],
)
def test_a_busy_port_exits_2_with_one_line_naming_the_setting(setting: str, variable: str) -> None:
    with busy_port() as port:
        address = f"127.0.0.1:{port}"
        if setting == "otlp_grpc_listen":
            status, log = run_until_exit([], {variable: address})
        else:  # the flag wins over the free port AgentProcess chose
            status, log = run_until_exit([f"--{setting.replace('_', '-')}", address], {})
    assert status == 2, log
    errors = [line for line in log.splitlines() if "cannot listen" in line]
    assert errors == [
        f"ragpulse run: cannot listen on 127.0.0.1:{port} ({setting}, {variable}): Address already in use; "
        f"another process listens there; "
        f"choose another HOST:PORT with {variable} or --set {setting}=HOST:PORT"
    ], log
    # Nothing else but the agent's own log records: no traceback, no gRPC core line (E0000 ...).
    others = [line for line in log.splitlines() if line not in errors and not LOG_LINE.match(line)]
    assert others == [], log
    assert "Traceback" not in log and "GRPC_VERBOSITY" not in log and "unexpected error" not in log


def test_a_free_port_beside_a_busy_one_still_starts() -> None:
    """The check is on the address given: the same port on another address is free."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.2", 0))
        holder.listen()
        port = holder.getsockname()[1]
        agent = AgentProcess(env={"RAGPULSE_OTLP_GRPC_LISTEN": f"127.0.0.1:{port}"})
        try:
            agent.wait_ready()
            assert f"OTLP/gRPC receiver on 127.0.0.1:{port}" in agent.log()
        finally:
            agent.stop()


def test_the_collectors_ports_are_named_as_such() -> None:
    """4317/4318 are the OpenTelemetry Collector's defaults as well as ragpulse's: say so."""
    import errno

    from agent.infra.listening import listen_error

    error = listen_error("otlp_grpc_listen", "127.0.0.1", 4317, OSError(errno.EADDRINUSE, "in use"))
    assert str(error) == (
        "cannot listen on 127.0.0.1:4317 (otlp_grpc_listen, RAGPULSE_OTLP_GRPC_LISTEN): Address already "
        "in use; another process listens there, perhaps an OpenTelemetry Collector (4317 and 4318 are its "
        "defaults); choose another HOST:PORT with RAGPULSE_OTLP_GRPC_LISTEN "
        "or --set otlp_grpc_listen=HOST:PORT"
    )


def test_port_0_means_any_free_port_and_the_log_names_the_one_bound() -> None:
    """`ragpulse run` with every listener on port 0: each binds a free port and logs it, and the
    logged ports are where the agent answers: /readyz, an OTLP/HTTP export, an OTLP/gRPC export."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    from tests.support.net import http_get, scrape
    from tests.support.spans import record_spans

    agent = AgentProcess(
        args=["--otlp-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"],
        env={"RAGPULSE_OTLP_GRPC_LISTEN": "127.0.0.1:0"},
    )
    try:
        deadline = time.monotonic() + 60
        ports: dict[str, int] = {}
        while len(ports) < 3:
            assert agent.process.poll() is None and time.monotonic() < deadline, agent.log()
            for name, pattern in BOUND.items():
                found = re.search(pattern, agent.log())
                if found:
                    ports[name] = int(found[1])
            time.sleep(0.1)
        assert 0 not in ports.values() and len(set(ports.values())) == 3, ports
        while http_get(f"http://127.0.0.1:{ports['metrics']}/readyz", timeout=2)[0] != 200:
            assert time.monotonic() < deadline, agent.log()
            time.sleep(0.1)
        http = HttpExporter(endpoint=f"http://127.0.0.1:{ports['http']}/v1/traces", timeout=10)
        grpc = GrpcExporter(endpoint=f"127.0.0.1:{ports['grpc']}", insecure=True, timeout=10)
        try:
            assert http.export(record_spans(2, "port-zero")) is SpanExportResult.SUCCESS
            assert grpc.export(record_spans(3, "port-zero")) is SpanExportResult.SUCCESS
        finally:
            http.shutdown()
            grpc.shutdown()
        received = scrape(f"http://127.0.0.1:{ports['metrics']}/metrics")
        assert received.total("ragpulse_spans_received_total", source="otlp_http") == 2
        assert received.total("ragpulse_spans_received_total", source="otlp_grpc") == 3
        assert agent.stop() == 0, agent.log()
    finally:
        agent.kill()
    assert ":0/" not in agent.log() and "127.0.0.1:0 " not in agent.log(), agent.log()


# The listeners' start-up lines, with the port each bound.
BOUND = {
    "metrics": r"metrics on http://127\.0\.0\.1:(\d+)/metrics",
    "http": r"OTLP/HTTP receiver on http://127\.0\.0\.1:(\d+)/v1/traces",
    "grpc": r"OTLP/gRPC receiver on 127\.0\.0\.1:(\d+)",
}
