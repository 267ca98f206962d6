"""Dependencies absent or late at start-up are waited for, never crashed on.

In compose and Kubernetes the agent usually starts before Kafka or Redis answers. Each dependency
(the Kafka source, the results producer, Redis, the OTLP results endpoint) is probed once when the
agent starts; if that fails it is probed again in the background at growing intervals
(`RETRY_INTERVALS`, 2 s up to 30 s) with one log line per failed attempt:

    waiting for Kafka at 127.0.0.1:9092: ConnectionRefusedError: ...; retrying in 5s

and one line once it answers (`Kafka at 127.0.0.1:9092 is up`). Meanwhile `/readyz` answers 503
naming what is awaited, `/healthz` stays 200 (the process is alive), and intake pushes back
(pause reason `waiting_for_dependency`). Once up, a dependency is not watched here any more: an
outage later on is the component's own business (counted, retried, logged at a bounded rate).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from agent.infra.secrets import mask, mask_url

log = logging.getLogger(__name__)

T = TypeVar("T")

# Seconds between attempts: the first retries come soon (a broker booting beside the agent), then
# they space out so that a dependency away for hours writes two lines a minute.
RETRY_INTERVALS: tuple[float, ...] = (2.0, 5.0, 10.0, 20.0, 30.0)


class Dependency:
    """A service the agent needs (a name and an endpoint): ready once it answered a probe."""

    def __init__(self, name: str, endpoint: str) -> None:
        self.name = name
        self.endpoint = mask_url(endpoint)  # a password in a Redis URL never reaches a log line
        self.ready = False
        self.error: str | None = None  # why the last probe failed

    @property
    def detail(self) -> str:
        """What /readyz says about it."""
        if self.ready:
            return f"{self.name} at {self.endpoint} is up"
        because = f": {self.error}" if self.error else ""
        return f"waiting for {self.name} at {self.endpoint}{because}"


class Dependencies:
    """The dependencies of one agent: what /readyz reports and what intake waits for.

    Components that connect to a dependency probe it themselves (a `Waiter` on the `Dependency`
    they are given); `watch` is for a dependency that no component owns (the shared Redis
    client), probed from `start()`.
    """

    def __init__(self) -> None:
        self._all: list[Dependency] = []
        self._watched: list[Waiter[object]] = []
        self._tasks: list[asyncio.Task[object]] = []

    def add(self, name: str, endpoint: str) -> Dependency:
        dependency = Dependency(name, endpoint)
        self._all.append(dependency)
        return dependency

    def watch(self, name: str, endpoint: str, probe: Callable[[], Awaitable[object]]) -> Dependency:
        dependency = self.add(name, endpoint)
        self._watched.append(Waiter(dependency, probe))
        return dependency

    def __iter__(self) -> Iterator[Dependency]:
        return iter(self._all)

    def awaited(self) -> list[Dependency]:
        """The dependencies not up yet."""
        return [dependency for dependency in self._all if not dependency.ready]

    def ready(self) -> bool:
        return all(dependency.ready for dependency in self._all)

    async def start(self) -> None:
        """Probe each watched dependency once; keep probing the absent ones in the background."""
        for waiter in self._watched:
            if not await waiter.try_once():
                self._tasks.append(asyncio.create_task(waiter.until_up(), name=f"wait-{waiter.name}"))

    async def flush(self) -> None:
        """Nothing held."""

    async def shutdown(self, timeout: float) -> None:
        """Stop probing the dependencies still awaited."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class Waiter(Generic[T]):
    """Probes one dependency until it answers: the retry schedule and the log lines.

    `probe` connects (or checks the connection) and returns what the component needs, e.g. a
    Kafka consumer; an exception means "not up yet". `try_once` makes one attempt, so a component
    can connect inline at start when its dependency is already there, then hand `until_up` to a
    background task.
    """

    def __init__(
        self,
        dependency: Dependency,
        probe: Callable[[], Awaitable[T]],
        logger: logging.Logger | None = None,
        intervals: Sequence[float] = RETRY_INTERVALS,
        *,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        if not intervals or min(intervals) <= 0:
            raise ValueError("retry intervals must be positive")
        self._dependency = dependency
        self._probe = probe
        self._log = logger or log
        self._intervals = tuple(intervals)
        self._sleep = sleep
        self._failures = 0
        self.result: T | None = None

    @property
    def name(self) -> str:
        return self._dependency.name

    def _delay(self) -> float:
        """The wait after the latest failure."""
        return self._intervals[min(self._failures, len(self._intervals)) - 1]

    async def try_once(self) -> bool:
        """One probe: True (and `result` set) when the dependency answered; else one log line."""
        dependency = self._dependency
        try:
            result = await self._probe()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # any failure of a probe means "not up yet"
            self._failures += 1
            dependency.error = describe(exc)
            self._log.warning(
                "waiting for %s at %s: %s; retrying in %s",
                dependency.name,
                dependency.endpoint,
                dependency.error,
                _seconds(self._delay()),
            )
            return False
        self.result = result
        dependency.ready, dependency.error = True, None
        if self._failures:
            self._log.info("%s at %s is up", dependency.name, dependency.endpoint)
        return True

    async def until_up(self) -> T:
        """Probe until the dependency answers (waiting the announced delay after each failure)."""
        while True:
            if self._failures:
                await self._sleep(self._delay())
            if await self.try_once():
                return self.result  # type: ignore[return-value]


async def wait_until_up(
    dependency: Dependency,
    probe: Callable[[], Awaitable[T]],
    logger: logging.Logger | None = None,
    intervals: Sequence[float] = RETRY_INTERVALS,
) -> T:
    """Probe `dependency` until it answers; returns what the probe returned."""
    return await Waiter(dependency, probe, logger, intervals).until_up()


def describe(exc: BaseException) -> str:
    """The error on one line, secrets masked: `Connection refused`, `Name or service not known`,
    `KafkaTimeoutError: Unable to bootstrap from [...]`, `ConnectionError: Error 111 ...`."""
    # A socket error, raised as such or wrapped by the client (redis-py): the socket's own words,
    # without the address that the log line names already.
    for cause in (exc, exc.__cause__, exc.__context__):
        if isinstance(cause, OSError) and cause.errno is not None and cause.strerror:
            return os.strerror(cause.errno) if cause.errno > 0 else cause.strerror
    name = type(exc).__name__
    text = " ".join(str(exc).split())
    if not text:
        return name
    return mask(text if text.startswith(name) else f"{name}: {text}")


def _host_port(address: str, default_port: int) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return address.strip("[]"), default_port
    return host.strip("[]"), int(port)


async def reachable(addresses: Sequence[str], default_port: int, timeout: float = 3.0) -> None:
    """A probe: return once one of `addresses` (HOST[:PORT]) accepts a TCP connection, else raise
    the first one's error (`ConnectionRefusedError: ...`, a DNS error, a timeout)."""
    errors: list[Exception] = []
    for address in addresses:
        host, port = _host_port(address, default_port)
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        except TimeoutError:
            errors.append(TimeoutError(f"no answer from {host}:{port} within {timeout:.0f}s"))
            continue
        except OSError as exc:
            errors.append(exc)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return
    if not errors:
        raise ValueError("no address to connect to")
    raise errors[0]


def _seconds(value: float) -> str:
    return f"{value:.0f}s" if value >= 1 else f"{value:.1f}s"


async def cancel(task: asyncio.Future[Any] | None) -> None:
    """Cancel a background wait and let it end."""
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
