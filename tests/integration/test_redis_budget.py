"""The judge budget is global: replicas add their spend to the same Redis buckets and all of them
slow down when the sum exceeds the budget. Against a real redis-server."""

from __future__ import annotations

import asyncio

import pytest

from agent.budget import BudgetController, RedisLedger, Spend
from agent.infra.redis import redis_client
from tests.support.redis_server import redis_server

pytestmark = pytest.mark.integration


class Meter:
    def __init__(self) -> None:
        self.calls = 0.0

    def total(self) -> Spend:
        return Spend(self.calls, 0.0)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_two_replicas_share_one_budget_in_redis() -> None:
    async def scenario(url: str) -> None:
        client = redis_client(url)
        clock = Clock(60 * 20_000.0 + 1)
        meters = [Meter(), Meter()]
        replicas = [
            BudgetController(RedisLedger(client), meter, calls_per_minute=100, usd_per_hour=None, clock=clock)
            for meter in meters
        ]
        # Each replica alone stays under the budget (60 calls), together they spend 120.
        for meter in meters:
            meter.calls += 60
        factors = [await replica.refresh() for replica in replicas]
        # The first refresh saw only its own 60 calls; the second saw both replicas' 120.
        assert factors[0] == 1.0
        assert factors[1] == pytest.approx(0.95 / 1.2, rel=0.01)
        assert await replicas[0].refresh() == pytest.approx(0.95 / 1.2, rel=0.01)
        previous, current = await RedisLedger(client).read((int(clock.now // 60) - 1, int(clock.now // 60)))
        assert (previous.calls, current.calls) == (0.0, 120.0)
        assert await client.ttl(f"ragpulse:budget:{int(clock.now // 60)}") > 0
        await client.aclose()

    with redis_server() as server:
        asyncio.run(scenario(server.url))


def test_budget_keeps_its_factor_and_its_spend_while_redis_is_down() -> None:
    async def scenario() -> None:
        with redis_server() as server:
            client = redis_client(server.url)
            clock, meter = Clock(60 * 30_000.0 + 1), Meter()
            controller = BudgetController(
                RedisLedger(client), meter, calls_per_minute=10, usd_per_hour=None, clock=clock
            )
            meter.calls += 40
            lowered = await controller.refresh()
            assert lowered == pytest.approx(0.95 / 4, rel=0.01)
            server.kill()
            meter.calls += 40
            assert await controller.refresh() == lowered  # unchanged, no exception
            server.restart()
            await asyncio.sleep(0.2)
            await controller.refresh()
            # The restarted server kept nothing; the 40 calls made while it was down were held
            # back and written now.
            _, current = await RedisLedger(client).read((int(clock.now // 60) - 1, int(clock.now // 60)))
            assert current.calls == 40.0
            await client.aclose()

    asyncio.run(scenario())
