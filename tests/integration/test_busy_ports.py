"""A port already taken is an operator's mistake: `ragpulse run` says which setting to change.

Each listener of the agent (OTLP/HTTP, OTLP/gRPC, /metrics) is pointed at a port that a socket of
this test already listens on, as when an OpenTelemetry Collector holds 4317/4318 (its own
defaults) on the same machine. The agent runs as a subprocess and must exit 2 with one line naming
the setting and its environment variable: no traceback, no gRPC C++ log line.
"""

from __future__ import annotations

import re
import socket
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
