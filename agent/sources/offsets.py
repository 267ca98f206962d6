"""At-least-once bookkeeping: which Kafka offsets may be committed.

Every message handed to the pipeline gets a pipeline sequence number. The pipeline reports its
low watermark: the smallest sequence number whose work (spans buffered for assembly, sampled
interactions waiting for or under evaluation) is not finished. A partition's offsets may be
committed up to, not including, its first message at or above that watermark. Pure logic, no I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable


class OffsetTracker:
    def __init__(self) -> None:
        # Per partition: (offset, sequence) of handed-over messages not yet committed, in order.
        self._pending: dict[Hashable, deque[tuple[int, int]]] = {}

    def track(self, partition: Hashable, offset: int, sequence: int) -> None:
        self._pending.setdefault(partition, deque()).append((offset, sequence))

    def committable(self, low_watermark: int) -> dict[Hashable, int]:
        """Next offset to commit per partition whose finished prefix grew; forgets that prefix."""
        commits: dict[Hashable, int] = {}
        for partition, pending in self._pending.items():
            next_offset = None
            while pending and pending[0][1] < low_watermark:
                next_offset = pending.popleft()[0] + 1
            if next_offset is not None:
                commits[partition] = next_offset
        return commits

    def forget(self, partitions: Iterable[Hashable]) -> None:
        """Drop revoked partitions: their uncommitted messages will be redelivered to the new owner."""
        for partition in partitions:
            self._pending.pop(partition, None)

    def pending(self, partition: Hashable) -> int:
        return len(self._pending.get(partition, ()))
