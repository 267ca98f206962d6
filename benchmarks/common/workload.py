"""The judge economy workload: RAG interactions with ~160-token chunks of made-up encyclopedic
prose (benchmarks/judge_economy.py, and the load of benchmarks/stream.py)."""

from __future__ import annotations

import asyncio
import random

from agent.evaluate import Evaluator
from agent.model import Chunk, Outcome, RagInteraction
from tests.support.llm_server import count_tokens

SEED = 20251122  # the workload the docs quote


SUBJECTS = ["The Meridian dam", "Lake Oster", "The Halvard bridge", "Saint Corin abbey", "The Pell railway"]


VERBS = ["was completed in", "was renovated in", "was first surveyed in", "reopened to visitors in"]


FACTS = [
    "It supplies water to {n} thousand households in the northern valley.",
    "Its main span measures {n} metres and rests on granite piers.",
    "Engineers from {n} firms worked on the foundations during the wet season.",
    "The regional council funds its upkeep with a levy of {n} cents per ticket.",
    "Visitors can reach it by the number {n} bus from the central station.",
    "A museum beside the entrance documents the {n} workers who built it.",
]


def chunk_text(rng: random.Random, subject: str) -> str:
    """About 160 cl100k tokens of encyclopedic prose about `subject`."""
    parts = [f"{subject} {rng.choice(VERBS)} {rng.randint(1850, 2020)}."]
    while count_tokens(" ".join(parts)) < 150:
        parts.append(rng.choice(FACTS).format(n=rng.randint(2, 900)))
    return " ".join(parts)


def make_interaction(rng: random.Random, n: int, k: int) -> RagInteraction:
    subject = rng.choice(SUBJECTS)
    chunks = tuple(Chunk(chunk_text(rng, rng.choice(SUBJECTS) if i % 2 else subject)) for i in range(k))
    first = chunks[0].content.split(". ")
    response = f"{first[0]}. {first[1]}. It is one of the best known sights of the region."
    return RagInteraction(
        trace_id=f"{n:032x}",
        span_id=f"{n:016x}",
        query=f"When was {subject.lower()} completed, and what is it known for? (user {n})",
        chunks=chunks,
        response=response,
        service="bench",
        route="r",
    )


def workload(
    k: int, count: int, repeat_share: float, new_response: bool, *, seed: int = SEED
) -> list[RagInteraction]:
    """`count` interactions of `k` chunks; a `repeat_share` of them repeat an earlier query (with a
    new response when `new_response`). The same seed and k give the same interactions."""
    rng = random.Random(seed + k)
    items: list[RagInteraction] = []
    for n in range(count):
        if items and rng.random() < repeat_share:
            earlier = rng.choice(items)
            response = f"{earlier.response} (asked again {n})" if new_response else earlier.response
            items.append(
                RagInteraction(
                    f"{n:032x}", f"{n:016x}", earlier.query, earlier.chunks, response, "bench", "r"
                )
            )
        else:
            items.append(make_interaction(rng, n, k))
    return items


async def score_all(evaluator: Evaluator, items: list[RagInteraction], concurrency: int) -> int:
    """Evaluate every item, `concurrency` at a time; the number of judge errors among the results."""
    queue: asyncio.Queue[RagInteraction] = asyncio.Queue()
    for item in items:
        queue.put_nowait(item)
    errors = 0

    async def worker() -> None:
        nonlocal errors
        while not queue.empty():
            results = await evaluator.evaluate(queue.get_nowait())
            errors += sum(r.outcome is Outcome.ERROR for r in results)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return errors
