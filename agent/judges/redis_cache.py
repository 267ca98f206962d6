"""The shared verdict cache in Redis (the client: agent/infra/redis.py).

`RedisVerdictCache` looks a batch up with one MGET and stores a batch with one pipelined round
trip of SET ... EX ttl. Keys are `ragpulse:v1:verdict:<sha256>`; values are encoded verdicts,
never text. When Redis is down the judge keeps working uncached: errors are counted, a failed
Redis is left alone for `retry_after` seconds, then the client reconnects by itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from agent.infra.throttled_log import ThrottledLog

log = logging.getLogger(__name__)

KEY_PREFIX = "ragpulse:v1:verdict:"


class ErrorCounter(Protocol):
    def cache_error(self, operation: str) -> None: ...


class RedisVerdictCache:
    """The shared verdict cache (see module docstring)."""

    def __init__(
        self,
        client: Any,
        ttl_seconds: int,
        errors: ErrorCounter,
        *,
        prefix: str = KEY_PREFIX,
        retry_after: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._ttl = ttl_seconds
        self._errors = errors
        self._prefix = prefix
        self._retry_after = retry_after
        self._clock = clock
        self._down_until = float("-inf")
        self._log = ThrottledLog(log, 30.0, clock)

    def _available(self) -> bool:
        return self._clock() >= self._down_until

    def _failed(self, operation: str, exc: Exception) -> None:
        self._log.warning(
            "redis",
            "verdict cache: Redis %s failed (%s); continuing uncached until it is back",
            operation,
            exc,
        )
        self._errors.cache_error(operation)
        self._down_until = self._clock() + self._retry_after

    async def get_many(self, keys: Sequence[str]) -> list[str | None]:
        if not keys:
            return []
        if not self._available():
            return [None] * len(keys)
        from redis.exceptions import RedisError

        try:
            values = await self._client.mget([self._prefix + key for key in keys])
        except (RedisError, OSError) as exc:
            self._failed("get", exc)
            return [None] * len(keys)
        self._log.recovered("redis", "verdict cache: Redis is back")
        return [None if v is None else v.decode() if isinstance(v, bytes) else v for v in values]

    async def set_many(self, values: Mapping[str, str]) -> None:
        if not values or not self._available():
            return
        from redis.exceptions import RedisError

        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for key, value in values.items():
                    # The raw command: redis-py's set() spends more CPU checking its optional
                    # arguments than sending the command.
                    pipe.execute_command("SET", self._prefix + key, value, "EX", self._ttl)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            self._failed("set", exc)

    async def close(self) -> None:
        await self._client.aclose()
