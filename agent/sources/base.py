"""The Source contract and the Intake it feeds."""

from __future__ import annotations

from typing import Protocol

from agent.otlp.decode import DecodedRequest
from agent.otlp.logs import DecodedLogs


class Intake(Protocol):
    """What a source hands its spans to (the pipeline)."""

    def accepting(self) -> bool:
        """False while intake is paused: the source must push back on its senders."""
        ...

    def pause_reason(self) -> str | None:
        """Why intake is paused (`queue_full`, `judge_unavailable`), or None while accepting.

        Receivers answer 503 / UNAVAILABLE with this reason and count it in
        ragpulse_requests_refused_total{source,reason}; the Kafka source pauses its partitions.
        """
        ...

    def retry_after_seconds(self) -> float:
        """How long a refused sender should wait before retrying (the Retry-After it is sent)."""
        ...

    def accept(self, request: DecodedRequest, source: str) -> int:
        """Take one decoded request; its rejected spans are dead-lettered here.

        Returns the request's sequence number: its work is finished once `low_watermark()`
        exceeds it.
        """
        ...

    def accept_logs(self, logs: DecodedLogs, source: str) -> None:
        """Take one decoded logs request: its GenAI events join their spans (agent/otlp/logs.py).

        Nothing is scored from logs alone, so no sequence number: the spans carry the work.
        """
        ...

    def low_watermark(self) -> int:
        """The smallest sequence number with unfinished work (safe to read from any thread)."""
        ...

    def dead_letter(self, reason: str, detail: str, count: int = 1) -> None:
        """Account for input that could not be decoded at all."""
        ...


class Source(Protocol):
    """Where spans come from. The agent's lifecycle (agent/infra/lifecycle.py) with the intake
    given at start, and `stop()` apart from `shutdown()`: intake stops first, and what the
    pipeline finished is acknowledged only after it drained."""

    name: str

    async def start(self, intake: Intake) -> None: ...

    def ready(self) -> bool:
        """True once the source can receive (listening, connected)."""
        ...

    async def flush(self) -> None:
        """Hand on what the source holds and keep running: input already received reaches the
        intake (OTLP receivers: requests being decoded), and what the pipeline finished is
        acknowledged (Kafka: finished offsets are committed)."""
        ...

    async def stop(self) -> None:
        """Stop taking new input (the pipeline then drains); idempotent."""
        ...

    async def shutdown(self, timeout: float) -> None:
        """Acknowledge what the pipeline finished (e.g. commit offsets) and release resources; idempotent."""
        ...
