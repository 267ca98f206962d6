"""agent/infra/waiting.py: the retry schedule, the log lines, what /readyz and intake are told."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest

from agent.infra.waiting import Dependencies, Dependency, Waiter, describe, reachable


class Flaky:
    """A probe that fails `failures` times, then answers `value`."""

    def __init__(self, failures: int, error: Exception, value: str = "client") -> None:
        self.failures = failures
        self.error = error
        self.value = value
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return self.value


def run_waiter(
    probe: Flaky, caplog: pytest.LogCaptureFixture, dependency: Dependency
) -> tuple[str, list[float]]:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    waiter = Waiter(dependency, probe, intervals=(2, 5, 10), sleep=sleep)
    with caplog.at_level(logging.INFO, logger="agent.infra.waiting"):
        result = asyncio.run(waiter.until_up())
    return result, slept


def test_retries_at_growing_intervals_one_line_each_then_one_line_when_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dependency = Dependency("Kafka", "kafka-0:9092")
    probe = Flaky(5, ConnectionRefusedError(111, "Connection refused"))
    result, slept = run_waiter(probe, caplog, dependency)
    assert result == "client" and probe.calls == 6
    assert slept == [2, 5, 10, 10, 10]  # the last interval repeats
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        *[
            ("WARNING", f"waiting for Kafka at kafka-0:9092: Connection refused; retrying in {delay}")
            for delay in ("2s", "5s", "10s", "10s", "10s")
        ],
        ("INFO", "Kafka at kafka-0:9092 is up"),
    ]
    assert dependency.ready and dependency.error is None
    assert dependency.detail == "Kafka at kafka-0:9092 is up"


def test_up_at_once_is_silent(caplog: pytest.LogCaptureFixture) -> None:
    dependency = Dependency("Redis", "redis://127.0.0.1:6379/0")
    result, slept = run_waiter(Flaky(0, OSError()), caplog, dependency)
    assert result == "client" and slept == [] and caplog.records == []
    assert dependency.ready


def test_a_password_in_the_endpoint_or_the_error_is_never_shown(caplog: pytest.LogCaptureFixture) -> None:
    dependency = Dependency("Redis", "redis://user:s3cret-pw@redis:6379/0")
    assert dependency.endpoint == "redis://user:***@redis:6379/0"
    error = RuntimeError("cannot use redis://user:s3cret-pw@redis:6379/0 now")
    run_waiter(Flaky(1, error), caplog, dependency)
    assert caplog.records[0].getMessage() == (
        "waiting for Redis at redis://user:***@redis:6379/0: RuntimeError: cannot use "
        "redis://user:***@redis:6379/0 now; retrying in 2s"
    )
    assert "s3cret" not in caplog.text


def test_what_readyz_and_intake_are_told() -> None:
    dependencies = Dependencies()
    kafka = dependencies.add("Kafka", "127.0.0.1:9092")
    redis = dependencies.add("Redis", "redis://127.0.0.1:6379/0")
    assert not dependencies.ready()
    assert kafka.detail == "waiting for Kafka at 127.0.0.1:9092"  # not probed yet
    kafka.error = "Connection refused"
    assert [d.detail for d in dependencies.awaited()] == [
        "waiting for Kafka at 127.0.0.1:9092: Connection refused",
        "waiting for Redis at redis://127.0.0.1:6379/0",
    ]
    kafka.ready = redis.ready = True
    assert dependencies.ready() and dependencies.awaited() == []


def test_a_watched_dependency_is_probed_at_start_then_in_the_background(
    caplog: pytest.LogCaptureFixture,
) -> None:
    probe = Flaky(1, ConnectionRefusedError(111, "Connection refused"))

    async def scenario() -> tuple[bool, bool]:
        dependencies = Dependencies()
        redis = dependencies.watch("Redis", "redis://127.0.0.1:1/0", probe)
        await dependencies.start()  # first probe fails: start returns, the wait goes on
        after_start = redis.ready
        await dependencies.shutdown(1.0)  # cancels the background wait (the next try is 2 s away)
        return after_start, redis.ready

    with caplog.at_level(logging.INFO, logger="agent.infra.waiting"):
        assert asyncio.run(scenario()) == (False, False)
    assert probe.calls == 1
    assert [r.getMessage() for r in caplog.records] == [
        "waiting for Redis at redis://127.0.0.1:1/0: Connection refused; retrying in 2s"
    ]


@pytest.mark.parametrize(
    ("error", "text"),
    [
        (ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 9092)"), "Connection refused"),
        (socket.gaierror(-2, "Name or service not known"), "Name or service not known"),
        (
            TimeoutError("no answer from kafka:9092 within 3s"),
            "TimeoutError: no answer from kafka:9092 within 3s",
        ),
        (RuntimeError(), "RuntimeError"),
        (RuntimeError("line one\nline two"), "RuntimeError: line one line two"),
    ],
)
def test_describe(error: Exception, text: str) -> None:
    assert describe(error) == text


def test_describe_sees_the_socket_error_a_client_wrapped() -> None:
    class ClientConnectionError(Exception):
        pass

    try:
        try:
            raise ConnectionRefusedError(111, "Connect call failed")
        except OSError:
            raise ClientConnectionError("Error 111 connecting to 127.0.0.1:6390.") from None
    except ClientConnectionError as exc:
        wrapped = exc
    assert describe(wrapped) == "Connection refused"


def test_reachable_connects_or_raises_the_socket_error() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        open_port = listening.getsockname()[1]
        with socket.socket() as unused:
            unused.bind(("127.0.0.1", 0))
            closed_port = unused.getsockname()[1]  # bound, not listening: refused
            asyncio.run(reachable([f"127.0.0.1:{closed_port}", f"127.0.0.1:{open_port}"], 9092))
            with pytest.raises(ConnectionRefusedError):
                asyncio.run(reachable([f"127.0.0.1:{closed_port}"], 9092))


def test_intervals_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Waiter(Dependency("x", "y"), Flaky(0, OSError()), intervals=())
