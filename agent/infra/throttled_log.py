"""Log a recurring failure at a bounded rate: one line per key per interval, with a count of the
lines held back, so an outage of Redis or the judge writes a few lines a minute, not one per call.
Counters (not logs) see every occurrence."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class ThrottledLog:
    def __init__(
        self, logger: logging.Logger, interval: float = 30.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._logger = logger
        self._interval = interval
        self._clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def log(self, level: int, key: str, message: str, *args: object) -> bool:
        """Log `message % args` unless `key` was logged less than `interval` ago; True if logged."""
        now = self._clock()
        if now - self._last.get(key, float("-inf")) < self._interval:
            self._held[key] = self._held.get(key, 0) + 1
            return False
        self._last[key] = now
        held = self._held.pop(key, 0)
        if held:
            message += " (%d similar line(s) held back in the last %.0fs)"
            args = (*args, held, self._interval)
        self._logger.log(level, message, *args)
        return True

    def warning(self, key: str, message: str, *args: object) -> bool:
        return self.log(logging.WARNING, key, message, *args)

    def error(self, key: str, message: str, *args: object) -> bool:
        return self.log(logging.ERROR, key, message, *args)

    def recovered(self, key: str, message: str, *args: object) -> None:
        """Log once that a failing `key` works again (only if its failure was logged)."""
        if self._last.pop(key, None) is not None:
            self._held.pop(key, None)
            self._logger.info(message, *args)
