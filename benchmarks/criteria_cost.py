"""What custom criteria cost per interaction through the real LLMJudge + litellm.

The judge is the test OpenAI-compatible server (tests/support/llm_server.py), a real HTTP server
that reports each response's token usage (cl100k tokens of the prompt and of its answer, as a
provider does); the figures are read from ragpulse's own instruments
(ragpulse_judge_requests_total, ragpulse_judge_tokens_total), which count what litellm reports in
each response's `usage`. For k = 5 and 10 chunks, on a cold cache, it prints judge calls and
prompt / completion tokens per interaction for the four reference-free metrics with 0 and with 2
custom criteria (one binary reading the response and the chunks, one 1-5 reading the query and
the response), and for the 2 criteria alone (no built-in metric: their own question).

    python benchmarks/criteria_cost.py [--interactions 100] [--latency 0.05] [--concurrency 8]
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.build import build_judge, build_metrics
from agent.config import Settings
from agent.evaluate import Evaluator
from agent.metrics.criteria import CriterionMetric
from agent.telemetry import Telemetry
from benchmarks.common.workload import score_all, workload
from benchmarks.harness import Benchmark, Column
from tests.support.llm_server import FakeLLMServer

MODEL = "openai/criteria-judge"
CRITERIA: list[dict[str, Any]] = [
    {
        "name": "grounded_answer",
        "question": "Does the response state only what the retrieved chunks support?",
        "reads": ["response", "context"],
    },
    {
        "name": "helpfulness",
        "question": "How well does the response help the user with the query?",
        "reads": ["query", "response"],
        "scale": "1-5",
        "anchors": {1: "does not help at all", 3: "helps in part", 5: "answers it fully"},
    },
]
SCENARIOS = (
    ("4 built-in, 0 criteria", False, 0),
    ("4 built-in, 2 criteria", False, 2),
    ("2 criteria alone", True, 2),
)


def sample(telemetry: Telemetry, name: str, **labels: str) -> float:
    return telemetry.registry.get_sample_value(name, {"model": MODEL, **labels}) or 0.0


def measure(server: FakeLLMServer, k: int, only_criteria: bool, criteria: int, args: Any) -> dict[str, Any]:
    telemetry = Telemetry(CollectorRegistry())  # a fresh agent: cold cache
    settings = Settings.model_validate(
        {"judge_model": MODEL, "judge_api_base": server.api_base, "judge_api_key": "k",
         "criteria": CRITERIA[:criteria]}
    )  # fmt: skip
    metrics = build_metrics(settings)
    if only_criteria:
        metrics = [m for m in metrics if isinstance(m, CriterionMetric)]
    evaluator = Evaluator(metrics, build_judge(settings, telemetry.judge))
    items = workload(k, args.interactions, 0.0, False, seed=args.seed)
    errors = asyncio.run(score_all(evaluator, items, args.concurrency))
    n = len(items)
    return {
        "k": k,
        "calls": sample(telemetry, "ragpulse_judge_requests_total", outcome="ok") / n,
        "prompt_tokens": sample(telemetry, "ragpulse_judge_tokens_total", kind="prompt") / n,
        "completion_tokens": sample(telemetry, "ragpulse_judge_tokens_total", kind="completion") / n,
        "server_calls": server.stats.calls / n,
        "errors": errors,
    }


def main() -> None:
    bench = Benchmark(__doc__, seed=20261127)
    bench.parser.add_argument("--interactions", type=int, default=100)
    bench.parser.add_argument("--latency", type=float, default=0.05, help="judge latency in seconds")
    bench.parser.add_argument("--concurrency", type=int, default=8, help="interactions evaluated at once")
    args = bench.parse()
    bench.line(
        f"{args.interactions} interactions per row, cold cache, judge latency {args.latency * 1000:.0f} ms; "
        "tokens as litellm reports them (the usage of the test server's responses: cl100k counts)"
    )
    table = bench.table(
        "criteria_cost",
        [
            Column("scenario", "scenario", 24, "<"),
            Column("k", "k", 3),
            Column("calls", "calls/int", 9, spec=".2f"),
            Column("prompt_tokens", "prompt tok/int", 14, spec=".0f"),
            Column("completion_tokens", "compl tok/int", 13, spec=".0f"),
            Column("server_calls", "server calls/int", 16, spec=".2f"),
            Column("errors", "errors", 6),
        ],
    )
    table.header()
    for k in (5, 10):
        for name, only_criteria, criteria in SCENARIOS:
            with FakeLLMServer(latency=args.latency) as server:
                table.row(scenario=name, **measure(server, k, only_criteria, criteria, args))


if __name__ == "__main__":
    main()
