"""Opening kafka-python clients when the broker may not be there yet.

kafka-python 3 bootstraps inside the KafkaConsumer / KafkaProducer constructor: with no broker it
logs every attempt and raises KafkaTimeoutError after 30 s, leaving the IO thread it started
running. `open_kafka` checks that a bootstrap server accepts a TCP connection first (so that an
absent broker is reported at once, with the socket's own error), bounds the bootstrap, and closes
the network client of a failed or abandoned attempt, so that retrying for hours leaks nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any, TypeVar

from agent.config import KafkaSettings
from agent.infra.waiting import reachable

T = TypeVar("T")

BOOTSTRAP_TIMEOUT_MS = 10_000  # one attempt's bootstrap (the constructor's default is 30 s)
DEFAULT_PORT = 9092


async def open_kafka(
    factory: Callable[..., T], options: Mapping[str, Any], close: Callable[[T], object]
) -> T:
    """`factory(**options)` (KafkaConsumer, KafkaProducer) once a bootstrap server answers.

    Runs the blocking constructor in a thread. If it fails, the network client it started is
    closed; if the caller is cancelled meanwhile (shutdown during a wait), the client it returns
    is closed with `close` when it arrives.
    """
    from kafka.net.compat import KafkaNetClient

    await reachable(options["bootstrap_servers"], DEFAULT_PORT)
    clients: list[Any] = []

    def make_client(**config: Any) -> Any:
        client = KafkaNetClient(**config)
        clients.append(client)
        return client

    def build() -> T:
        try:
            return factory(
                **{"bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS, **options, "kafka_client": make_client}
            )
        except BaseException:
            for client in clients:
                with contextlib.suppress(Exception):
                    client.close()
            raise

    built: Future[T] = Future()

    def run() -> None:
        if not built.set_running_or_notify_cancel():
            return
        try:
            built.set_result(build())
        except BaseException as exc:
            built.set_exception(exc)

    threading.Thread(target=run, name="kafka-connect", daemon=True).start()
    try:
        return await asyncio.wrap_future(built)
    except asyncio.CancelledError:
        built.add_done_callback(lambda done: _close_result(done, close))
        raise


def _close_result(done: Future[T], close: Callable[[T], object]) -> None:
    if not done.cancelled() and done.exception() is None:
        with contextlib.suppress(Exception):
            close(done.result())


def kafka_connection(kafka: KafkaSettings) -> dict[str, Any]:
    """kafka-python options shared by the consumer, the results producer and `label-queue`:
    bootstrap_servers, security_protocol, sasl_*, ssl_*."""
    password = kafka.sasl_password
    optional = {
        "sasl_mechanism": kafka.sasl_mechanism,
        "sasl_plain_username": kafka.sasl_username,
        "sasl_plain_password": password.get_secret_value() if password else None,
        "ssl_cafile": kafka.ssl_cafile,
        "ssl_certfile": kafka.ssl_certfile,
        "ssl_keyfile": kafka.ssl_keyfile,
    }
    return {
        "bootstrap_servers": list(kafka.bootstrap),
        "security_protocol": kafka.security_protocol,
        **{k: v for k, v in optional.items() if v is not None},
    }
