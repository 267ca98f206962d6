"""Publish every evaluated interaction to a Kafka topic as OTLP, beside the trace it scores.

Each message is an ExportTraceServiceRequest holding one `ragpulse.evaluation` span (built by
agent/exporters/result_spans.py, which says what it carries), so Jaeger, Phoenix or Langfuse
behind a Collector's kafka receiver show the scores under the trace.
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agent.exporters.result_spans import AGENT_RESOURCE_ATTRIBUTE, EVALUATION_EVENT, evaluation_request
from agent.infra.kafka_connect import open_kafka
from agent.infra.waiting import Dependencies, Waiter, cancel
from agent.model import Evaluated

__all__ = ["AGENT_RESOURCE_ATTRIBUTE", "EVALUATION_EVENT", "KafkaResultsExporter", "evaluation_request"]


class KafkaResultsExporter:
    """Durable exporter: `export` returns when the broker has acknowledged the message.

    Never blocks the event loop: kafka-python's `send()` blocks while it has no metadata for the
    topic or its buffer is full (the broker is away), so it runs in a small thread pool and gives
    up after `max_block_seconds`. A failed export raises; the pipeline counts it
    (ragpulse_export_failures_total) and retries the interaction later.

    A broker absent at start-up is waited for in the background (agent/infra/waiting.py); until
    it answers, `export` raises and the pipeline keeps the interaction for later.
    """

    def __init__(
        self, producer_options: dict[str, Any], topic: str, *, include_text: bool = False,
        documents_key: str | None = None,
        timeout_seconds: float = 30.0, max_block_seconds: float = 5.0, send_threads: int = 4,
        dependencies: Dependencies | None = None,
    ) -> None:  # fmt: skip
        self._options = producer_options
        self._topic = topic
        self._include_text = include_text
        self._documents_key = documents_key
        self._timeout = timeout_seconds
        self._max_block = max_block_seconds
        self._send_threads = send_threads
        self._producer: Any = None
        self._senders: ThreadPoolExecutor | None = None
        servers = ",".join(producer_options["bootstrap_servers"])
        self.dependency = (dependencies or Dependencies()).add("Kafka (results topic)", servers)
        self._waiter = Waiter(self.dependency, self._open_producer)
        self._connecting: asyncio.Task[None] | None = None

    async def _open_producer(self) -> Any:
        from kafka import KafkaProducer

        options = {
            "acks": "all",
            "linger_ms": 5,
            "max_request_size": 16 * 1024 * 1024,
            "max_block_ms": int(self._max_block * 1000),
            **self._options,
        }
        return await open_kafka(KafkaProducer, options, lambda producer: producer.close(0))

    async def start(self) -> None:
        self._senders = ThreadPoolExecutor(max_workers=self._send_threads, thread_name_prefix="results-send")
        if await self._waiter.try_once():
            self._producer = self._waiter.result
        else:
            self._connecting = asyncio.create_task(self._connect(), name="results-producer")

    async def _connect(self) -> None:
        self._producer = await self._waiter.until_up()

    async def export(self, evaluated: Evaluated) -> None:
        producer, senders = self._producer, self._senders
        if senders is None:
            raise RuntimeError("results exporter used before start()")
        if producer is None:
            raise ConnectionError(self.dependency.detail)
        interaction = evaluated.interaction
        # Decided once before export (e.g. drawn for human labels, agent/trust): on the result.
        marks = evaluated.mark_attributes() or None
        value = evaluation_request(
            interaction, evaluated.results, include_text=self._include_text, extra_attributes=marks,
            documents_key=self._documents_key,
        ).SerializeToString()  # fmt: skip
        loop = asyncio.get_running_loop()
        acknowledged: asyncio.Future[None] = loop.create_future()

        def settle(error: BaseException | None) -> None:
            if acknowledged.done():
                return
            if error is None:
                acknowledged.set_result(None)
            else:
                acknowledged.set_exception(error)

        send = functools.partial(producer.send, self._topic, key=interaction.trace_id.encode(), value=value)
        # Raises KafkaTimeoutError after max_block_seconds when the broker is unreachable.
        sent = await asyncio.wait_for(loop.run_in_executor(senders, send), self._timeout)
        # Callbacks run on the producer's I/O thread (or here, if it is already settled).
        sent.add_callback(lambda _: loop.call_soon_threadsafe(settle, None))
        sent.add_errback(lambda exc: loop.call_soon_threadsafe(settle, exc))
        await asyncio.wait_for(acknowledged, self._timeout)

    async def flush(self) -> None:
        """Nothing held: each export returns once the broker acknowledged it."""

    async def shutdown(self, timeout: float) -> None:
        connecting, self._connecting = self._connecting, None
        await cancel(connecting)
        producer, self._producer = self._producer, None
        senders, self._senders = self._senders, None
        if senders is not None:
            senders.shutdown(wait=False, cancel_futures=True)
        if producer is not None:
            await asyncio.to_thread(producer.close, timeout)
