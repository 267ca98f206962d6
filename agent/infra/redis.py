"""Redis: the agent's one asyncio client (verdict cache, idempotency keys, judge budget, drift
state), from RAGPULSE_REDIS_URL.

`redis_client(url)` understands
- `redis://[user:password@]host:port/db` and `rediss://...` (TLS), `unix:///path.sock?db=0`;
- `redis+sentinel://[password@]host1:port1,host2:port2/service_name[/db]`: the master of
  `service_name` found through the listed sentinels;
- `redis+cluster://host:port[,host2:port2...]`: a Redis Cluster, discovered from those nodes.

`RedisConnection` is the client as a component of the agent (agent/infra/lifecycle.py): closed
when the agent stops, after every component that uses it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

from agent.config import ConfigError
from agent.infra.secrets import mask_url


def redis_client(url: str, *, socket_timeout: float = 1.0, max_connections: int = 256) -> Any:
    """An asyncio Redis client for `url` (forms in the module docstring). Connects lazily.

    Standalone servers get a blocking pool: with many evaluations in flight, a caller waits up
    to `socket_timeout` for a free connection instead of failing with "Too many connections".
    After a Redis restart the pool's connections are stale: a command that fails on one with a
    connection error is retried once on a fresh connection, and idle connections are checked
    before reuse, so recovery is immediate instead of one failure per pooled connection.

    A URL it cannot use raises ConfigError naming the setting. The client connects on first use:
    a Redis that is not up yet is waited for by the agent (its `ping` is the probe, see
    agent/infra/waiting.py), not by this function.
    """
    try:
        return _client(url, socket_timeout, max_connections)
    except ValueError as exc:
        raise ConfigError(f"redis_url (env RAGPULSE_REDIS_URL): {mask_url(str(exc))}") from None


def _client(url: str, socket_timeout: float, max_connections: int) -> Any:
    from redis.asyncio import BlockingConnectionPool, Redis
    from redis.asyncio.cluster import ClusterNode, RedisCluster
    from redis.asyncio.retry import Retry
    from redis.asyncio.sentinel import Sentinel
    from redis.backoff import NoBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError

    retry_on: list[type[Exception]] = [RedisConnectionError, ConnectionResetError, BrokenPipeError]
    parts = urlsplit(url)
    if parts.scheme == "redis+sentinel":
        hosts = [_host_port(h, 26379) for h in parts.netloc.rpartition("@")[2].split(",")]
        path = [p for p in parts.path.split("/") if p]
        if not path:
            raise ValueError(f"{url!r}: a sentinel URL names the service: redis+sentinel://host:port/service")
        password = unquote(parts.password) if parts.password else None
        db = int(path[1]) if len(path) > 1 else 0
        timeouts = {"socket_timeout": socket_timeout, "socket_connect_timeout": socket_timeout}
        sentinel = Sentinel(
            hosts,
            sentinel_kwargs=timeouts,
            password=password,
            db=db,
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
            retry=Retry(NoBackoff(), 1),
            retry_on_error=retry_on,
            health_check_interval=5,
        )
        return sentinel.master_for(path[0])
    if parts.scheme == "redis+cluster":
        nodes = [ClusterNode(*_host_port(h, 6379)) for h in parts.netloc.rpartition("@")[2].split(",")]
        password = unquote(parts.password) if parts.password else None
        return RedisCluster(
            startup_nodes=nodes,
            password=password,
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
        )
    if parts.scheme in ("redis", "rediss", "unix"):
        pool = BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=socket_timeout,
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
            retry=Retry(NoBackoff(), 1),
            retry_on_error=retry_on,
            health_check_interval=5,
        )
        return Redis.from_pool(pool)  # the client owns the pool and closes it
    raise ValueError(f"unsupported Redis URL scheme {parts.scheme!r} in {url!r}")


def _host_port(text: str, default_port: int) -> tuple[str, int]:
    host, _, port = text.rpartition(":") if ":" in text else (text, "", "")
    return host or "127.0.0.1", int(port) if port else default_port


class RedisConnection:
    """The one client as a Lifecycle component: nothing to start (it connects on first use),
    closed at shutdown."""

    def __init__(self, client: Any) -> None:
        self.client = client

    async def start(self) -> None:
        """The client connects on first use; a Redis not up yet is waited for (agent/infra/waiting.py)."""

    async def flush(self) -> None:
        """Nothing held."""

    async def shutdown(self, timeout: float) -> None:
        await self.client.aclose()
