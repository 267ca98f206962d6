"""How fast `ragpulse eval` scores, and how soon `ragpulse demo` shows its first score.

- eval: 1,000 distinct items (question, 4 retrieved passages, answer; from the demo's knowledge
  base, each question made unique so that no verdict comes from the cache) scored with the four
  reference-free metrics, end to end through the CLI (`python -m agent eval`), on the local
  lexical judge and on the OpenAI-compatible test LLM server answering after 300 ms.
  Items/s = items / wall time of the command (process start, imports and report included).
- demo: wall time from launching `python -m agent demo` to the first non-zero
  `ragpulse_score_count` on its /metrics, and the demo's own figure (demo.json).

Run: .venv/bin/python -m benchmarks.eval_speed [--items 1000] [--latency 0.3]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agent.demo.traffic import Phase, TrafficModel
from benchmarks.harness import Benchmark, line, run_seed
from tests.support.llm_server import FakeLLMServer
from tests.support.net import free_port, scrape
from tests.support.repo import ROOT

METRICS = "context_precision,context_relevancy,faithfulness,answer_relevancy"


def write_items(path: Path, count: int) -> None:
    model = TrafficModel(seed=run_seed())
    with path.open("w") as handle:
        for n in range(count):
            drawn = model.draw(Phase.HEALTHY)
            row = {
                "id": f"item-{n}",
                "question": f"{drawn.question} (ticket {n})",
                "contexts": [c.content for c in drawn.chunks],
                "response": drawn.response,
            }
            handle.write(json.dumps(row) + "\n")


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_")}
    env.update(extra)
    return env


def time_eval(data: Path, out: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "agent", "eval", str(data), "--out", str(out), "--metrics", METRICS],
        cwd=ROOT, env=clean_env(env), capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    if run.returncode != 0:
        raise SystemExit(run.stderr)
    summary = json.loads((out / "summary.json").read_text())
    errors = sum(m["errors"] for m in summary["metrics"].values())
    if errors:
        raise SystemExit(f"{errors} judge errors: the figure would not be a throughput")
    return elapsed


def demo_first_score(work: Path) -> tuple[float, float]:
    metrics_port = free_port()
    env = clean_env({"RAGPULSE_METRICS_LISTEN": f"127.0.0.1:{metrics_port}",
                     "RAGPULSE_OTLP_LISTEN": f"127.0.0.1:{free_port()}"})  # fmt: skip
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "agent", "demo", "--duration", "15", "--out", str(work / "demo")],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    first = None
    while process.poll() is None:
        try:
            if scrape(f"http://127.0.0.1:{metrics_port}/metrics").total("ragpulse_score_count") > 0:
                first = time.perf_counter() - started
                break
        except (OSError, AssertionError):
            pass
        time.sleep(0.05)
    process.wait(120)
    own = json.loads((work / "demo" / "demo.json").read_text())["first_score_seconds"]
    if first is None:
        raise SystemExit("the demo scored nothing")
    return first, own


def main() -> None:
    bench = Benchmark(__doc__, description=__doc__.splitlines()[0], seed=11)
    parser = bench.parser
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=0.3)
    args = bench.parse()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = work / "items.jsonl"
        write_items(data, args.items)
        local = time_eval(data, work / "local", {})
        line(f"eval, lexical judge: {args.items} items in {local:.1f}s = {args.items / local:.0f} items/s")
        with FakeLLMServer(latency=args.latency) as server:
            env = {
                "RAGPULSE_JUDGE_MODEL": "openai/ragpulse-test-judge",
                "RAGPULSE_JUDGE_API_BASE": server.api_base,
                "RAGPULSE_JUDGE_API_KEY": "test-key",
            }
            llm = time_eval(data, work / "llm", env)
            calls = server.stats.calls
        line(
            f"eval, test LLM judge at {args.latency * 1000:.0f} ms: {args.items} items in {llm:.1f}s = "
            f"{args.items / llm:.1f} items/s ({calls} judge calls, {calls / args.items:.2f} per item; "
            "eval_concurrency=32)"
        )
        wall, own = demo_first_score(work)
        line(f"demo: first score {wall:.1f}s after launch (its own clock, from after imports: {own:.1f}s)")


if __name__ == "__main__":
    main()
