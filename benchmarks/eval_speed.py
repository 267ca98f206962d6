"""How fast `ragpulse eval` runs, how much of it is the judge, and how soon `ragpulse demo` scores.

- latency (the default): 30 distinct samples (question, k=5 retrieved passages from the demo's
  knowledge base, answer; each question made unique so that no verdict comes from the cache)
  scored with the four reference-free metrics, end to end through the CLI (`python -m agent
  eval`), against the OpenAI-compatible test LLM server answering after 300 ms. Printed: the
  command's wall time (process start, imports, scoring, summary and report), its CPU time (user
  + system: the command is CPU-bound apart from waiting on the judge, so on a busy machine the
  wall time grows and the CPU time much less), the judge's own time (the time during which the
  server was answering at least one request: what no client can save) and the judge calls per
  sample, counted at the server; and the load average when the run began.
- throughput (`--items 1000`): the same with more samples, on the local lexical judge and the
  test LLM server; items/s = items / wall time of the command.
- demo (`--demo`): wall time from launching `python -m agent demo` to the first non-zero
  `ragpulse_score_count` on its /metrics, and the demo's own figure (demo.json).

Run: .venv/bin/python -m benchmarks.eval_speed [--samples 30] [--latency 0.3] [--k 5]
     [--items 1000] [--demo]
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from agent.demo.traffic import Phase, TrafficModel
from benchmarks.harness import Benchmark, line
from tests.support.llm_server import FakeLLMServer
from tests.support.net import free_port, scrape
from tests.support.repo import ROOT

METRICS = "context_precision,context_relevancy,faithfulness,answer_relevancy"


class TimedServer(FakeLLMServer):
    """The test LLM server, also recording when each request was being answered."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.intervals: list[tuple[float, float]] = []
        self._timing = threading.Lock()

    def _handle(self, body: dict[str, Any]) -> tuple[int, dict[str, Any] | str]:
        started = time.monotonic()
        try:
            return super()._handle(body)
        finally:
            with self._timing:
                self.intervals.append((started, time.monotonic()))

    def busy_seconds(self) -> float:
        """Length of the union of the answering intervals: the judge's own time."""
        total, end = 0.0, float("-inf")
        for start, stop in sorted(self.intervals):
            if stop <= end:
                continue
            total += stop - max(start, end)
            end = stop
        return total


def write_items(path: Path, count: int, k: int = 4) -> None:
    model = TrafficModel(seed=11, top_k=k)
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


def llm_env(server: FakeLLMServer) -> dict[str, str]:
    return {
        "RAGPULSE_JUDGE_MODEL": "openai/ragpulse-test-judge",
        "RAGPULSE_JUDGE_API_BASE": server.api_base,
        "RAGPULSE_JUDGE_API_KEY": "test-key",
    }


def time_eval(data: Path, out: Path, env: dict[str, str]) -> tuple[float, float]:
    """The command's wall time and CPU time (user + system), in seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "agent", "eval", str(data), "--out", str(out), "--metrics", METRICS],
        cwd=ROOT, env=clean_env(env), capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if run.returncode != 0:
        raise SystemExit(run.stderr)
    summary = json.loads((out / "summary.json").read_text())
    errors = sum(m["errors"] for m in summary["metrics"].values())
    if errors:
        raise SystemExit(f"{errors} judge errors: the figure would not be a throughput")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return elapsed, cpu


def latency_run(work: Path, samples: int, latency: float, k: int) -> None:
    data = work / "samples.jsonl"
    write_items(data, samples, k)
    load = os.getloadavg()[0]
    with TimedServer(latency=latency) as server:
        wall, cpu = time_eval(data, work / "latency", llm_env(server))
        calls, judge = server.stats.calls, server.busy_seconds()
    line(
        f"eval, {samples} samples, k={k}, test LLM judge at {latency * 1000:.0f} ms: wall {wall:.2f}s "
        f"(CPU {cpu:.2f}s), judge's own time {judge:.2f}s, not judging {wall - judge:.2f}s; "
        f"{calls} judge calls = {calls / samples:.2f} per sample; load average {load:.1f}"
    )


def throughput_run(work: Path, items: int, latency: float) -> None:
    data = work / "items.jsonl"
    write_items(data, items)
    local, _ = time_eval(data, work / "local", {})
    line(f"eval, lexical judge: {items} items in {local:.1f}s = {items / local:.0f} items/s")
    with TimedServer(latency=latency) as server:
        llm, _ = time_eval(data, work / "llm", llm_env(server))
        calls = server.stats.calls
    line(
        f"eval, test LLM judge at {latency * 1000:.0f} ms: {items} items in {llm:.1f}s = "
        f"{items / llm:.1f} items/s ({calls} judge calls, {calls / items:.2f} per item; "
        "eval_concurrency=32)"
    )


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
    parser.add_argument("--samples", type=int, default=30, help="samples of the latency run")
    parser.add_argument("--latency", type=float, default=0.3, help="the test judge's answer time (s)")
    parser.add_argument("--k", type=int, default=5, help="retrieved passages per sample")
    parser.add_argument("--repeat", type=int, default=1, help="latency runs (each printed)")
    parser.add_argument("--items", type=int, default=0, help="also a throughput run of this many items")
    parser.add_argument("--demo", action="store_true", help="also time the demo's first score")
    args = bench.parse()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for _ in range(args.repeat):
            latency_run(work, args.samples, args.latency, args.k)
        if args.items:
            throughput_run(work, args.items, args.latency)
        if args.demo:
            wall, own = demo_first_score(work)
            line(
                f"demo: first score {wall:.1f}s after launch (its own clock, from after imports: {own:.1f}s)"
            )


if __name__ == "__main__":
    main()
