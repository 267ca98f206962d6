"""The shared verdict cache against a real redis-server process (hits, misses, TTL, Redis dying)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis
from prometheus_client import CollectorRegistry

from agent.build import build_judge
from agent.config import Settings
from agent.infra.redis import redis_client
from agent.judges.cache import CachedJudge
from agent.judges.redis_cache import KEY_PREFIX
from agent.metrics import STREAMING_METRICS
from agent.model import Chunk, MetricResult, Outcome, RagInteraction
from agent.telemetry import Telemetry
from tests.support.llm_server import FakeLLMServer
from tests.support.redis_server import RedisServer, redis_server, redis_server_binary

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(redis_server_binary() is None, reason="no redis-server binary"),
]

MODEL = "openai/ragpulse-test-judge"
CHUNKS = (
    "Paris is the capital and largest city of France. It lies on the Seine.",
    "The Eiffel Tower is in Paris. It was built for the 1889 World's Fair.",
    "Bananas grow in tropical climates.",
)


def interaction(n: int = 0) -> RagInteraction:
    return RagInteraction(
        trace_id=f"{n:032x}",
        span_id="cd" * 8,
        query=f"What is the capital of France? (variant {n})",
        chunks=tuple(Chunk(c) for c in CHUNKS),
        response="The capital of France is Paris.",
        service="s",
        route="r",
    )


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with redis_server() as running:
        yield running


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as running:
        yield running


def judge_for(redis_url: str, llm: FakeLLMServer, **overrides: object) -> tuple[CachedJudge, Telemetry]:
    values: dict[str, object] = {
        "judge_model": MODEL,
        "judge_api_base": llm.api_base,
        "judge_api_key": "k",
        "redis_url": redis_url,
    }
    values.update(overrides)
    telemetry = Telemetry(CollectorRegistry())
    return build_judge(Settings.model_validate(values), telemetry.judge), telemetry


async def evaluate(judge: CachedJudge, subject: RagInteraction) -> dict[str, MetricResult]:
    results = await asyncio.gather(*(m().evaluate(subject, judge) for m in STREAMING_METRICS.values()))
    return {r.metric: r for r in results}


def test_verdicts_are_shared_through_redis(server: RedisServer, llm: FakeLLMServer) -> None:
    async def scenario() -> None:
        llm.reset()
        plain = redis.Redis(port=server.port)
        first, telemetry = judge_for(server.url, llm)
        cold = await evaluate(first, interaction())
        assert all(r.outcome is Outcome.OK for r in cold.values())
        assert llm.stats.calls == 2

        # One MGET per lookup batch, and the SETs of a batch in one pipeline.
        stats = plain.info("commandstats")
        assert stats["cmdstat_mget"]["calls"] == 2  # assess_chunks and check_response
        assert stats["cmdstat_set"]["calls"] == 2 * len(CHUNKS) + 1
        keys = sorted(k.decode() for k in plain.keys("*"))
        # Per chunk a relevance and a usefulness key, plus one for the response's claims.
        assert len(keys) == 2 * len(CHUNKS) + 1
        assert all(k.startswith(KEY_PREFIX) and len(k) == len(KEY_PREFIX) + 64 for k in keys)
        values = [v.decode() for v in plain.mget(keys)]
        assert not any("Paris" in v or "France" in v for v in values)  # verdicts only, no text
        assert all(7 * 24 * 3600 - 10 <= plain.ttl(k) <= 7 * 24 * 3600 for k in keys)

        # Another agent (a fresh judge) finds everything in Redis and calls nobody.
        second, second_telemetry = judge_for(server.url, llm)
        warm = await evaluate(second, interaction())
        assert {n: r.value for n, r in warm.items()} == {n: r.value for n, r in cold.items()}
        assert llm.stats.calls == 2
        registry = second_telemetry.registry
        assert registry.get_sample_value("ragpulse_judge_cache_hits_total") == len(CHUNKS) + 1
        assert registry.get_sample_value("ragpulse_judge_cache_misses_total") is None or (
            registry.get_sample_value("ragpulse_judge_cache_misses_total") == 0
        )
        assert telemetry.registry.get_sample_value("ragpulse_judge_cache_misses_total") == len(CHUNKS) + 1

    asyncio.run(scenario())


def test_verdicts_expire_after_the_ttl(server: RedisServer, llm: FakeLLMServer) -> None:
    async def scenario() -> None:
        llm.reset()
        judge, _ = judge_for(server.url, llm, cache_ttl_seconds=1)
        await evaluate(judge, interaction())
        assert llm.stats.calls == 2
        await evaluate(judge, interaction())
        assert llm.stats.calls == 2
        await asyncio.sleep(2.1)
        assert redis.Redis(port=server.port).dbsize() == 0
        await evaluate(judge, interaction())
        assert llm.stats.calls == 4

    asyncio.run(scenario())


def test_evaluation_survives_redis_dying_and_caching_resumes(server: RedisServer, llm: FakeLLMServer) -> None:
    async def scenario() -> None:
        llm.reset()
        judge, telemetry = judge_for(server.url, llm)
        registry = telemetry.registry

        assert all(r.outcome is Outcome.OK for r in (await evaluate(judge, interaction(1))).values())
        server.kill()
        # Redis is gone: every metric is still scored, uncached, and the failures are counted.
        for n in (2, 3):
            results = await evaluate(judge, interaction(n))
            assert all(r.outcome is Outcome.OK for r in results.values())
        assert llm.stats.calls == 6
        errors = sum(
            registry.get_sample_value("ragpulse_judge_cache_errors_total", {"operation": op}) or 0
            for op in ("get", "set")
        )
        assert errors >= 1

        server.restart()  # same port, empty
        # The cache leaves a failed Redis alone for a second, then reconnects by itself.
        await asyncio.sleep(1.1)
        await evaluate(judge, interaction(4))
        assert llm.stats.calls == 8
        assert redis.Redis(port=server.port).dbsize() == 2 * len(CHUNKS) + 1
        await evaluate(judge, interaction(4))
        assert llm.stats.calls == 8  # served from the restarted Redis

    asyncio.run(scenario())


def test_client_url_forms() -> None:
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

    assert isinstance(redis_client("redis://127.0.0.1:6390/2"), Redis)
    assert isinstance(redis_client("rediss://user:pw@cache.example:6380/0"), Redis)
    assert isinstance(redis_client("redis+sentinel://s1:26379,s2:26379/mymaster/1"), Redis)
    assert isinstance(redis_client("redis+cluster://n1:7000,n2:7001"), RedisCluster)
    with pytest.raises(ValueError, match="names the service"):
        redis_client("redis+sentinel://s1:26379")
    with pytest.raises(ValueError, match="unsupported"):
        redis_client("memcached://x")


def test_verdict_confidence_round_trips_through_redis(server: RedisServer, llm: FakeLLMServer) -> None:
    async def scenario() -> dict[str, MetricResult]:
        first, _ = judge_for(server.url, llm)
        cold = await evaluate(first, interaction(7))
        second, telemetry = judge_for(server.url, llm)
        warm = await evaluate(second, interaction(7))
        assert telemetry.registry.get_sample_value("ragpulse_judge_cache_hits_total") == len(CHUNKS) + 1
        assert {n: r.value for n, r in warm.items()} == {n: r.value for n, r in cold.items()}
        return warm

    llm.reset()
    llm.flag_probability = 0.8
    try:
        warm = asyncio.run(scenario())
    finally:
        llm.flag_probability = None
    assert llm.stats.calls == 2  # the second judge asked nobody
    # "The capital of France is Paris." is one supported claim, read at p = 0.8 from the cache.
    assert warm["faithfulness"].value == pytest.approx(0.8)
    values = [v.decode() for v in redis.Redis(port=server.port).mget(redis.Redis(port=server.port).keys("*"))]
    assert any("|0.8" in v for v in values)  # stored with the verdict, not in the key
