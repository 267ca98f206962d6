"""Running `ragpulse probe` and `ragpulse canary` as users do (subprocesses; the canary also
in-process), and what they should give: the golden set of tests/support/probe_app.py, `ragpulse
eval`'s scores of the same items, the probe series read back from an agent, and the canary's
frozen labelled set."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.judges.local import LexicalJudge
from agent.offline.evaluate import OfflineEvaluator, available_metrics
from agent.offline.records import item_from_row
from tests.support.cli import Finished, ragpulse_in_process
from tests.support.llm_server import FakeLLMServer
from tests.support.net import Scrape
from tests.support.probe_app import DOCUMENTS, GOLDEN, answer
from tests.support.repo import ROOT

SET = "capitals"
K = 5  # probes_k's default


def write_golden(directory: Path) -> Path:
    path = directory / "golden.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in GOLDEN))
    return path


def probe_command(
    otlp_endpoint: str, app_url: str, golden: Path, *extra: str, set_name: str = SET
) -> tuple[list[str], dict[str, str]]:
    """argv and environment of `ragpulse probe` asking `app_url`, exporting to `otlp_endpoint`."""
    endpoints = [{"name": "ask", "url": app_url, "answer_path": "data.answer"}]
    env = {"PATH": "/usr/bin:/bin", "RAGPULSE_PROBES_SET_NAME": set_name,
           "RAGPULSE_PROBES_OTLP_ENDPOINT": otlp_endpoint,
           "RAGPULSE_PROBES_ENDPOINTS": json.dumps(endpoints)}  # fmt: skip
    return [sys.executable, "-m", "agent", "probe", "--golden", str(golden), *extra], env


def run_probe(
    otlp_endpoint: str, app_url: str, golden: Path, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """One round of `ragpulse probe`."""
    argv, env = probe_command(otlp_endpoint, app_url, golden, **kwargs)
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)


def items_scored(scrape: Scrape, set_name: str = SET) -> float:
    return scrape.total("ragpulse_probe_items_total", probe_set=set_name)


def offline_scores(regressed: bool) -> dict[str, list[float]]:
    """`ragpulse eval`'s scores of the golden items, with what the app retrieves and answers."""
    items = []
    for line, row in enumerate(GOLDEN, 1):
        chunks, text = answer(row["question"], regressed)
        record = {**row, "contexts": [c for _, c in chunks], "retrieved_ids": [i for i, _ in chunks],
                  "response": text}  # fmt: skip
        items.append(item_from_row(record, line))
    evaluator = OfflineEvaluator(LexicalJudge(), available_metrics(items, K), k=K)
    results = asyncio.run(_score(evaluator, items))
    scores: dict[str, list[float]] = {}
    for result in results:
        for metric, value in result.scores.items():
            if value is not None:
                scores.setdefault(metric, []).append(value)
    return scores


async def _score(evaluator: OfflineEvaluator, items: Sequence[Any]) -> list[Any]:
    return [await evaluator.score(item) for item in items]


def probe_sums(scrape: Scrape, set_name: str = SET) -> dict[str, tuple[float, float]]:
    """(count, sum) of ragpulse_probe_score per metric."""
    metrics = {labels["metric"] for name, labels, _ in scrape.samples if name == "ragpulse_probe_score_count"}
    return {
        m: (
            scrape.total("ragpulse_probe_score_count", probe_set=set_name, metric=m),
            scrape.total("ragpulse_probe_score_sum", probe_set=set_name, metric=m),
        )
        for m in metrics
    }


# The judge canary: a frozen set with human faithfulness labels. An LLM judge (the test judge
# server) scores the supported answers 1 and the unsupported 0 (AUROC 1, mean 0.5); told to be
# lenient, it scores everything 1 (AUROC 0.5, mean 1).
UNSUPPORTED = "{} has a famous opera house and hosts the Olympics every year."
CANARY_ITEMS = [
    {"id": f"c-{key}-{kind}", "question": f"Tell me about {key}.", "contexts": [text],
     "response": text if kind == "ok" else UNSUPPORTED.format(key.title())}
    for key, text in list(DOCUMENTS.items())[:6] for kind in ("ok", "bad")
]  # fmt: skip
CANARY_LABELS = [
    {"id": item["id"], "metric": "faithfulness", "label": 1 if item["id"].endswith("-ok") else 0}
    for item in CANARY_ITEMS
]


def canary_command(
    directory: Path, server: FakeLLMServer, *extra: str, env: Mapping[str, str] | None = None
) -> tuple[list[str], dict[str, str]]:
    """argv and environment of `ragpulse canary` on the frozen set, judged by `server`; its
    state file is directory/canary-state.json."""
    items, labels = directory / "canary.jsonl", directory / "canary-labels.jsonl"
    items.write_text("".join(json.dumps(row) + "\n" for row in CANARY_ITEMS))
    labels.write_text("".join(json.dumps(row) + "\n" for row in CANARY_LABELS))
    environment = {"PATH": "/usr/bin:/bin", "RAGPULSE_JUDGE_MODEL": "openai/ragpulse-test-judge",
           "RAGPULSE_JUDGE_API_BASE": server.api_base, "RAGPULSE_JUDGE_API_KEY": "test-key",
           "RAGPULSE_JUDGE_SELF_CHECK": "false",
           "RAGPULSE_CANARY_ITEMS_FILE": str(items), "RAGPULSE_CANARY_LABELS_FILE": str(labels),
           "RAGPULSE_CANARY_STATE_FILE": str(directory / "canary-state.json"), **(env or {})}  # fmt: skip
    return [sys.executable, "-m", "agent", "canary", *extra], environment


@dataclass(frozen=True)
class Canary:
    """`ragpulse canary` on the frozen set, run in the test's process (tests/support/cli.py) as
    often as a test needs; the scheduled canary's tests start the command as a subprocess."""

    directory: Path
    server: FakeLLMServer
    monkeypatch: pytest.MonkeyPatch
    capsys: pytest.CaptureFixture[str]

    def run(self, *extra: str) -> Finished:
        argv, env = canary_command(self.directory, self.server, *extra)
        return ragpulse_in_process(argv[3:], env, self.monkeypatch, self.capsys)
