"""The most frequent keys of an unbounded stream in bounded memory: the space-saving summary.

Metwally, Agrawal and El Abbadi (2005), "Efficient computation of frequent and top-k elements in
data streams": `capacity` counters; a key not held takes the place of the smallest counter and
inherits its count as its possible overcount (`error`). Every key whose true count exceeds
total / capacity is held, and a held key's count is at most `error` above its true count. Memory
is O(capacity) however many distinct keys pass.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HeavyHitter:
    key: str
    count: int  # an upper bound of the true count
    error: int  # count - error is a lower bound of the true count


class SpaceSaving:
    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self.capacity = capacity
        self.total = 0
        self._counts: dict[str, int] = {}
        self._errors: dict[str, int] = {}
        # A lazy min-heap of (count, key): entries whose count is stale are skipped when popped.
        self._heap: list[tuple[int, str]] = []

    def __len__(self) -> int:
        return len(self._counts)

    def heap_size(self) -> int:
        """Entries of the lazy heap: at most 4 × capacity (it is rebuilt beyond)."""
        return len(self._heap)

    def add(self, key: str, count: int = 1) -> None:
        self.total += count
        if key in self._counts:
            self._counts[key] += count
            heapq.heappush(self._heap, (self._counts[key], key))
        elif len(self._counts) < self.capacity:
            self._counts[key] = count
            self._errors[key] = 0
            heapq.heappush(self._heap, (count, key))
        else:
            smallest, evicted = self._pop_smallest()
            del self._counts[evicted]
            del self._errors[evicted]
            self._counts[key] = smallest + count
            self._errors[key] = smallest
            heapq.heappush(self._heap, (smallest + count, key))
        if len(self._heap) > 4 * self.capacity:
            self._heap = [(c, k) for k, c in self._counts.items()]
            heapq.heapify(self._heap)

    def _pop_smallest(self) -> tuple[int, str]:
        while True:
            count, key = heapq.heappop(self._heap)
            if self._counts.get(key) == count:
                return count, key

    def top(self, n: int) -> list[HeavyHitter]:
        """The `n` keys with the highest counts, highest first (ties by key)."""
        best = heapq.nsmallest(n, self._counts.items(), key=lambda item: (-item[1], item[0]))
        return [HeavyHitter(key, count, self._errors[key]) for key, count in best]
