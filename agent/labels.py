"""Bounded Prometheus label values: the first N distinct values pass, the rest become __other__."""

from __future__ import annotations

import threading

OVERFLOW = "__other__"


class LabelLimiter:
    """Caps the distinct values one label may take, so a misbehaving app cannot explode series."""

    def __init__(self, max_values: int) -> None:
        self._max_values = max_values
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        if value in self._seen:
            return value
        with self._lock:
            if len(self._seen) < self._max_values:
                self._seen.add(value)
                return value
        return OVERFLOW
