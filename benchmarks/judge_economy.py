"""What the four reference-free metrics cost per interaction through the real LLMJudge + litellm.

The judge is the test OpenAI-compatible server (tests/support/llm_server.py), which counts
cl100k tokens like a provider would and answers after an injected latency. For k = 5, 10 and 20
chunks of ~160 tokens, 100 interactions each, it prints judge calls and prompt / completion
tokens per interaction for context_precision + context_relevancy + faithfulness +
answer_relevancy together, on a cold cache, a warm cache, and with 30% repeated queries (same
retrieved chunks; once with the same response, once with a new one), plus the wall time; and
cold again with a judge that miscounts (leaves out one pinned item in --miscount of its
answers, the repairs included), as real models do at larger k.

    python benchmarks/judge_economy.py [--latency 0.3] [--interactions 100] [--concurrency 8] [--miscount 0.3]
    python benchmarks/judge_economy.py --cold-only --repeat 3    # the cold rows only, three runs each
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.build import build_judge
from agent.config import Settings
from agent.evaluate import Evaluator
from agent.metrics import STREAMING_METRICS
from agent.model import RagInteraction
from agent.telemetry import Telemetry
from benchmarks.common.workload import score_all, workload
from benchmarks.harness import Benchmark, line
from tests.support.llm_server import FakeLLMServer, count_tokens

MODEL = "openai/economy-judge"


@dataclass
class Row:
    scenario: str
    k: int
    calls: float
    prompt_tokens: float
    completion_tokens: float
    judged_tokens: float
    wall_seconds: float
    errors: int


def counter(telemetry: Telemetry, name: str, labels: dict[str, str]) -> float:
    return telemetry.registry.get_sample_value(name, labels) or 0.0


async def run(
    items: list[RagInteraction], judge, telemetry: Telemetry, concurrency: int
) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    evaluator = Evaluator([m() for m in STREAMING_METRICS.values()], judge)
    started = time.perf_counter()
    errors = await score_all(evaluator, items, concurrency)
    return time.perf_counter() - started, errors


def measure(server: FakeLLMServer, k: int, args: argparse.Namespace, miscounting: bool = False) -> list[Row]:
    rows = []
    scenarios = [
        ("cold", 0.0, False),
        ("warm (same 100 again)", None, False),
        ("30% repeated, same response", 0.3, False),
        ("30% repeated, new response", 0.3, True),
    ]
    if miscounting:
        scenarios = [(f"cold, judge miscounts {args.miscount:.0%}", 0.0, False)]
    elif args.cold_only:
        scenarios = scenarios[:1]

    async def all_scenarios() -> None:
        judge = telemetry = None
        items: list[RagInteraction] = []
        for name, repeat_share, new_response in scenarios:
            if repeat_share is not None:  # a fresh agent: empty cache
                telemetry = Telemetry(CollectorRegistry())
                settings = Settings(judge_model=MODEL, judge_api_base=server.api_base, judge_api_key="k")
                judge = build_judge(settings, telemetry.judge)
                items = workload(k, args.interactions, repeat_share, new_response, seed=args.seed)
            before = [
                counter(telemetry, "ragpulse_judge_unpriced_calls_total", {"model": MODEL}),
                counter(telemetry, "ragpulse_judge_tokens_total", {"model": MODEL, "kind": "prompt"}),
                counter(telemetry, "ragpulse_judge_tokens_total", {"model": MODEL, "kind": "completion"}),
            ]
            wall, errors = await run(items, judge, telemetry, args.concurrency)
            after = [
                counter(telemetry, "ragpulse_judge_unpriced_calls_total", {"model": MODEL}),
                counter(telemetry, "ragpulse_judge_tokens_total", {"model": MODEL, "kind": "prompt"}),
                counter(telemetry, "ragpulse_judge_tokens_total", {"model": MODEL, "kind": "completion"}),
            ]
            n = len(items)
            judged = sum(
                count_tokens(i.query)
                + count_tokens(i.response or "")
                + sum(count_tokens(c.content) for c in i.chunks)
                for i in items
            )
            calls, prompt, completion = (a - b for a, b in zip(after, before, strict=True))
            rows.append(Row(name, k, calls / n, prompt / n, completion / n, judged / n, wall, errors))

    asyncio.run(all_scenarios())
    return rows


def main() -> None:
    bench = Benchmark(__doc__, seed=20251122)
    parser = bench.parser
    parser.add_argument("--latency", type=float, default=0.3, help="judge latency in seconds")
    parser.add_argument("--interactions", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=8, help="interactions evaluated at once")
    parser.add_argument("--miscount", type=float, default=0.3, help="share of answers missing one item")
    parser.add_argument("--cold-only", action="store_true", help="only the cold-cache rows")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs of each row (which answers miscount shifts with concurrency between runs)",
    )
    args = bench.parse()
    rows = []
    for k in (5, 10, 20):
        for _ in range(args.repeat):
            with FakeLLMServer(latency=args.latency) as server:
                rows += measure(server, k, args)
        for _ in range(args.repeat):
            with FakeLLMServer(latency=args.latency, miscount=args.miscount) as server:
                rows += measure(server, k, args, miscounting=True)
    line(
        f"{args.interactions} interactions, 4 metrics (context_precision, context_relevancy, "
        f"faithfulness, answer_relevancy), judge latency {args.latency * 1000:.0f} ms, "
        f"{args.concurrency} interactions at once"
    )
    header = f"{'scenario':<32} {'k':>3} {'calls/int':>9} {'prompt tok/int':>14} {'compl tok/int':>13} "
    header += f"{'judged tok/int':>14} {'wall s':>7} {'errors':>6}"
    line(header)
    line("-" * len(header))
    for r in rows:
        line(
            f"{r.scenario:<32} {r.k:>3} {r.calls:>9.2f} {r.prompt_tokens:>14.0f} "
            f"{r.completion_tokens:>13.0f} {r.judged_tokens:>14.0f} {r.wall_seconds:>7.2f} {r.errors:>6}"
        )


if __name__ == "__main__":
    main()
