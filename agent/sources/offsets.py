"""At-least-once bookkeeping: which Kafka offsets may be committed.

Every message handed to the pipeline gets a pipeline sequence number. The pipeline reports its
low watermark: the smallest sequence number whose work (spans buffered for assembly, sampled
interactions waiting for or under evaluation) is not finished. A partition's offsets may be
committed up to, not including, its first message at or above that watermark.

Entries leave the tracker only when a commit that covers them succeeded (`committed`), so a
failed commit (a rebalance in progress, the broker away) is simply offered again next time.
Pure logic, no I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Mapping


class OffsetTracker:
    def __init__(self) -> None:
        # Per partition: (offset, sequence) of handed-over messages not yet committed, in order.
        self._pending: dict[Hashable, deque[tuple[int, int]]] = {}
        # Per partition: the offset last committed by us (the next offset the group will read).
        self._committed: dict[Hashable, int] = {}

    def track(self, partition: Hashable, offset: int, sequence: int) -> None:
        self._pending.setdefault(partition, deque()).append((offset, sequence))

    def committable(self, low_watermark: int) -> dict[Hashable, int]:
        """Next offset to commit, per partition with finished messages not yet committed.

        Nothing is forgotten here: call `committed()` once the commit succeeded.
        """
        commits: dict[Hashable, int] = {}
        for partition, pending in self._pending.items():
            next_offset = None
            for offset, sequence in pending:
                if sequence >= low_watermark:
                    break
                next_offset = offset + 1
            if next_offset is not None:
                commits[partition] = next_offset
        return commits

    def committed(self, commits: Mapping[Hashable, int]) -> None:
        """A commit of these next offsets succeeded: forget the messages it covers."""
        for partition, next_offset in commits.items():
            pending = self._pending.get(partition)
            while pending and pending[0][0] < next_offset:
                pending.popleft()
            self._committed[partition] = max(next_offset, self._committed.get(partition, 0))

    def last_committed(self, partition: Hashable) -> int | None:
        """The offset we last committed for a partition (None before our first commit)."""
        return self._committed.get(partition)

    def set_committed(self, partition: Hashable, offset: int) -> None:
        """Record the group's committed offset found on assignment (for lag before our first commit)."""
        self._committed.setdefault(partition, offset)

    def forget(self, partitions: Iterable[Hashable]) -> None:
        """Drop partitions we no longer own: their uncommitted messages go to the new owner."""
        for partition in partitions:
            self._pending.pop(partition, None)
            self._committed.pop(partition, None)

    def pending(self, partition: Hashable) -> int:
        return len(self._pending.get(partition, ()))

    def partitions(self) -> list[Hashable]:
        return list(self._pending)
