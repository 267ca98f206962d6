"""What a golden set written by `ragpulse testset` costs, and whether it tells retrievers apart.

Documents: the five texts in ../shared/seeds/*.txt (skipped cleanly when absent). Model: the
OpenAI-compatible test LLM server (tests/support/llm_server.py), NOT a real LLM: it writes each
draft from the fenced chunks alone (a question on a chunk's most informative sentence, that
sentence as the reference), makes `--invent` of the answerable drafts (seeded) carry a reference no
chunk supports, as a careless model would, and answers the second pass with the lexical judge's
verdicts. Calls and tokens are counted at the server (cl100k tokens when tiktoken is installed).

1. `python -m agent testset SEEDS --size N --rejects ...` end to end: items kept, rejected
   (unsupported, invalid), near-duplicates dropped, calls and tokens per kept item, and how many
   of the invented references the second pass caught.
2. Separation: every answerable item is given to two retrievers over the same chunks (the
   command's own chunking), k=5: `good` returns the item's relevant chunks first, then random
   others; `broken` returns 5 random chunks. Both files go through `ragpulse eval A B --compare`
   with the local lexical judge (no model): the rank metrics score the items' relevant ids, and
   context precision (with the reference) is judged. Printed: each metric's mean and 95% CI
   from summary.json, and the paired difference with its CI from comparison.json.

Run: .venv/bin/python -m benchmarks.testset [--size 60] [--invent 0.2] [--seed 7]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agent.offline.testset import chunk_document
from benchmarks.harness import Benchmark, Column, line, shared_data
from tests.support.llm_server import INVENTED_REFERENCE, FakeLLMServer
from tests.support.repo import ROOT

METRICS = ("mrr", "recall_at_5", "ndcg_at_5", "hit_rate_at_5", "context_precision")
CHUNK_CHARS = 1000


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def main() -> int:
    bench = Benchmark(__doc__, seed=7)
    bench.parser.add_argument("--size", type=int, default=60, help="items asked for (default 60)")
    bench.parser.add_argument("--invent", type=float, default=0.2, help="share of drafts made unsupported")
    args = bench.parse()
    seeds = sorted((shared_data().parent / "seeds").glob("*.txt"))
    if not seeds:
        line(f"skipped: no documents in {shared_data().parent / 'seeds'}")
        return 0
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_")}
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer(invent=args.invent, seed=args.seed) as server:
        work = Path(tmp)
        out, rejects = work / "set.jsonl", work / "rejects.jsonl"
        env = {
            **clean,
            "RAGPULSE_JUDGE_MODEL": "openai/ragpulse-test-judge",
            "RAGPULSE_JUDGE_API_BASE": server.api_base,
            "RAGPULSE_JUDGE_API_KEY": "test-key",
        }
        started = time.monotonic()
        run = _run(
            [
                "testset",
                *map(str, seeds),
                "--out",
                str(out),
                "--rejects",
                str(rejects),
                "--size",
                str(args.size),
                "--seed",
                str(args.seed),
                "--chunk-chars",
                str(CHUNK_CHARS),
            ],
            env,
        )
        wall = time.monotonic() - started
        if run.returncode != 0:
            line(run.stderr)
            return 1
        stats = server.stats
        kept, rejected = _rows(out), _rows(rejects)
        line(
            f"`ragpulse testset` over {len(seeds)} documents in ../shared/seeds, against the test LLM "
            f"server (not a real LLM; invent={args.invent}), seed {args.seed}, "
            f"{wall:.1f} s wall on a shared machine"
        )
        for text in run.stderr.strip().splitlines()[-2:]:
            line(f"  {text}")
        unsupported = [r for r in rejected if r["outcome"] == "unsupported"]
        duplicates = [r for r in rejected if r["outcome"] == "duplicate"]
        invalid = [r for r in rejected if r["outcome"] == "invalid"]
        caught = sum(1 for r in unsupported if r["reference"] == INVENTED_REFERENCE)
        slipped = sum(1 for r in kept if r["reference"] == INVENTED_REFERENCE)
        tokens = stats.prompt_tokens + stats.completion_tokens
        figures = {
            "items_kept": len(kept),
            "kept_by_kind": {
                k: sum(1 for r in kept if r["kind"] == k) for k in ("single", "multi", "unanswerable")
            },
            "rejected_unsupported": len(unsupported),
            "rejected_invalid": len(invalid),
            "near_duplicates_dropped": len(duplicates),
            "invented_references": stats.invented,
            "invented_caught": caught,
            "invented_kept": slipped,
            "unsupported_without_claims": sum(1 for r in unsupported if "no claim" in r["reason"]),
            "calls": stats.calls,
            "calls_by_kind": dict(stats.by_kind),
            "prompt_tokens": stats.prompt_tokens,
            "completion_tokens": stats.completion_tokens,
            "calls_per_kept_item": round(stats.calls / len(kept), 3) if kept else None,
            "tokens_per_kept_item": round(tokens / len(kept), 1) if kept else None,
        }
        for name, value in figures.items():
            bench.record(name, value)
            line(f"  {name}: {value}")

        # 2. Good and broken retrievers over the same chunks, scored by `ragpulse eval`.
        chunks = [
            c
            for path in seeds
            for c in chunk_document(
                path.name,
                path.read_text(encoding="utf-8"),
                target_chars=CHUNK_CHARS,
                max_chars=CHUNK_CHARS * 8 // 5,
            )
        ]
        texts = {c.id: c.text for c in chunks}
        rng = bench.random(1)
        good_rows, broken_rows = [], []
        for row in kept:
            relevant = row["relevant_ids"]
            if not relevant:
                continue
            others = [c for c in texts if c not in relevant]
            good = relevant + rng.sample(others, 5 - len(relevant))
            broken = rng.sample(list(texts), 5)
            for ids, rows in ((good, good_rows), (broken, broken_rows)):
                rows.append(
                    {
                        "id": row["id"],
                        "question": row["question"],
                        "reference": row["reference"],
                        "contexts": [texts[i] for i in ids],
                        "retrieved_ids": ids,
                        "relevant_ids": relevant,
                    }
                )
        for name, rows in (("good", good_rows), ("broken", broken_rows)):
            (work / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        result = _run(
            [
                "eval",
                str(work / "broken.jsonl"),
                str(work / "good.jsonl"),
                "--compare",
                "--out",
                str(work / "eval"),
                "--metrics",
                ",".join(METRICS),
            ],
            clean,
        )
        if result.returncode != 0:
            line(result.stderr)
            return 1
        summaries = {
            side: json.loads((work / "eval" / side / "summary.json").read_text())["metrics"]
            for side in ("a", "b")
        }
        comparison = json.loads((work / "eval" / "comparison.json").read_text())["metrics"]

    line()
    line(
        f"Separation over the {len(good_rows)} answerable items "
        "(k=5; `ragpulse eval --compare`, local lexical judge):"
    )
    table = bench.table(
        "separation",
        [
            Column("metric", "metric", 18, "<"),
            Column("good", "good (95% CI)", 22, "<"),
            Column("broken", "broken (95% CI)", 22, "<"),
            Column("difference", "good - broken (95% CI)", 28, "<"),
            Column("verdict", "verdict", 10, "<"),
        ],
        markdown=True,
    )
    table.header()

    def ci(summary: dict) -> str:
        if summary["mean"] is None:
            return "n/a"
        return f"{summary['mean']:.3f} ({summary['ci_low']:.3f}-{summary['ci_high']:.3f})"

    for metric in METRICS:
        c = comparison.get(metric, {})
        diff = c.get("mean_difference")
        table.row(
            metric=metric,
            good=ci(summaries["b"][metric]),
            broken=ci(summaries["a"][metric]),
            difference="n/a" if diff is None else f"{diff:+.3f} ({c['ci_low']:+.3f} to {c['ci_high']:+.3f})",
            verdict={"better": "separated", "worse": "REVERSED"}.get(c.get("verdict", ""), c.get("verdict")),
        )
    bench.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
