"""agent/sources/handover.py: how often a source that takes many inputs at once lets the loop run."""

from __future__ import annotations

import asyncio

from agent.sources.handover import LoopTurns


def other_work_seen(turns: LoopTurns, rounds: int) -> int:
    """How many times a concurrent task ran while `rounds` inputs were taken with `turns`."""

    async def scenario() -> int:
        ran = 0

        async def other() -> None:
            nonlocal ran
            while True:
                ran += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(other())
        await asyncio.sleep(0)  # the other task starts
        started = ran
        for _ in range(rounds):
            await turns.turn()
        seen = ran - started
        task.cancel()
        return seen

    return asyncio.run(scenario())


def test_a_spent_budget_gives_the_loop_a_turn_at_every_call() -> None:
    assert other_work_seen(LoopTurns(0.0), 10) == 10


def test_within_the_budget_small_inputs_cost_no_turn() -> None:
    assert other_work_seen(LoopTurns(3600.0), 1000) == 0
