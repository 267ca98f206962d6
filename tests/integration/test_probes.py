"""Golden probes end to end: a real web app (Starlette + the OpenTelemetry ASGI instrumentation,
a hand-instrumented RAG span) exporting OTLP to the agent under test, and `ragpulse probe` sending
the golden set over real HTTP with its own traceparent."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.judges.local import LexicalJudge
from agent.offline.evaluate import OfflineEvaluator, available_metrics
from agent.offline.records import item_from_row
from tests.support.agent_process import AgentProcess
from tests.support.llm_server import FakeLLMServer
from tests.support.net import Scrape, free_port
from tests.support.probe_app import DOCUMENTS, GOLDEN, ProbeApp, answer
from tests.support.repo import ROOT

pytestmark = pytest.mark.integration

SET = "capitals"
K = 5
SAMPLE_RATE = 0.02  # production sampling: a quiet service yields almost no streaming scores


@pytest.fixture(scope="module")
def agent() -> Iterator[AgentProcess]:
    process = AgentProcess(["--sample-rate", str(SAMPLE_RATE)], env={"RAGPULSE_ASSEMBLY_WAIT_SECONDS": "3"})
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def app(agent: AgentProcess) -> Iterator[ProbeApp]:
    server = ProbeApp(agent.traces_url, free_port()).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("golden") / "golden.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in GOLDEN))
    return path


def probe(agent: AgentProcess, app: ProbeApp, golden: Path) -> subprocess.CompletedProcess[str]:
    endpoints = [{"name": "ask", "url": app.url, "answer_path": "data.answer"}]
    env = {"PATH": "/usr/bin:/bin", "RAGPULSE_PROBES_SET_NAME": SET,
           "RAGPULSE_PROBES_OTLP_ENDPOINT": f"http://127.0.0.1:{agent.otlp_port}",
           "RAGPULSE_PROBES_ENDPOINTS": json.dumps(endpoints)}  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "agent", "probe", "--golden", str(golden)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def items_scored(scrape: Scrape) -> float:
    return scrape.total("ragpulse_probe_items_total", probe_set=SET)


def offline_scores(regressed: bool) -> dict[str, list[float]]:
    """`ragpulse eval`'s scores of the same items, with what the app retrieves and answers."""
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


async def _score(evaluator: OfflineEvaluator, items: list) -> list:  # type: ignore[type-arg]
    return [await evaluator.score(item) for item in items]


def probe_sums(scrape: Scrape) -> dict[str, tuple[float, float]]:
    """(count, sum) of ragpulse_probe_score per metric."""
    metrics = {labels["metric"] for name, labels, _ in scrape.samples if name == "ragpulse_probe_score_count"}
    return {
        m: (
            scrape.total("ragpulse_probe_score_count", probe_set=SET, metric=m),
            scrape.total("ragpulse_probe_score_sum", probe_set=SET, metric=m),
        )
        for m in metrics
    }


def test_probe_scores_equal_eval_and_a_retrieval_regression_is_caught(
    agent: AgentProcess, app: ProbeApp, golden: Path
) -> None:
    done = probe(agent, app, golden)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(GOLDEN)} request(s), 0 failed" in done.stdout
    scrape = agent.wait_for(lambda s: items_scored(s) >= len(GOLDEN), timeout=30)
    assert items_scored(scrape) == len(GOLDEN), agent.log()
    assert scrape.total("ragpulse_probe_items_total", probe_set=SET, outcome="pass") == len(GOLDEN)
    healthy = probe_sums(scrape)
    expected = offline_scores(regressed=False)
    for metric in ("context_recall", "answer_correctness", f"recall_at_{K}", "mrr", "context_precision"):
        count, total = healthy[metric]
        assert count == len(expected[metric]), metric
        assert total == pytest.approx(sum(expected[metric]), abs=1e-9), metric
    # Probes are kept out of the production series and sampling.
    assert scrape.total("ragpulse_score_count") == 0
    assert scrape.total("ragpulse_interactions_total") == 0

    # A retrieval regression, at a traffic level where sampling leaves almost nothing to score.
    app.regress()
    for i in range(20):
        app.ask(GOLDEN[i % len(GOLDEN)]["question"])
    done = probe(agent, app, golden)
    assert done.returncode == 0, done.stdout + done.stderr
    scrape = agent.wait_for(
        lambda s: items_scored(s) >= 2 * len(GOLDEN) and s.total("ragpulse_interactions_total") >= 20,
        timeout=30,
    )
    regressed = {
        m: (c - healthy.get(m, (0, 0))[0], s - healthy.get(m, (0, 0))[1])
        for m, (c, s) in probe_sums(scrape).items()
    }
    expected = offline_scores(regressed=True)
    for metric in ("context_recall", f"recall_at_{K}"):
        count, total = regressed[metric]
        assert total == pytest.approx(sum(expected[metric]), abs=1e-9), metric
        assert total / count < healthy[metric][1] / healthy[metric][0] - 0.5, metric
    assert scrape.total("ragpulse_probe_items_total", probe_set=SET, outcome="fail") == len(GOLDEN)
    streaming = scrape.total("ragpulse_score_count", metric="context_precision")
    assert streaming <= 3  # too few to see the regression: the probes saw every item
    assert scrape.total("ragpulse_interactions_total") == 20
    app.regress(False)


def test_probe_failures_are_counted_by_reason(
    agent: AgentProcess, app: ProbeApp, golden: Path, tmp_path: Path
) -> None:
    env_url = f"http://127.0.0.1:{free_port()}/ask"  # nothing listens: every request fails
    env = {"PATH": "/usr/bin:/bin", "RAGPULSE_PROBES_SET_NAME": "down",
           "RAGPULSE_PROBES_OTLP_ENDPOINT": f"http://127.0.0.1:{agent.otlp_port}"}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "agent", "probe", "--golden", str(golden), "--endpoint", env_url],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    scrape = agent.wait_for(
        lambda s: s.total("ragpulse_probe_failures_total", probe_set="down") >= len(GOLDEN), timeout=20
    )
    assert scrape.total("ragpulse_probe_failures_total", probe_set="down", reason="http_error") == len(GOLDEN)
    assert scrape.total("ragpulse_probe_items_total", probe_set="down") == 0


# The judge canary: a frozen set with human faithfulness labels, re-judged by an LLM judge (the
# test judge server) that turns lenient between two runs.
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


def canary(tmp_path: Path, server: FakeLLMServer, *extra: str) -> subprocess.CompletedProcess[str]:
    items, labels = tmp_path / "canary.jsonl", tmp_path / "canary-labels.jsonl"
    items.write_text("".join(json.dumps(row) + "\n" for row in CANARY_ITEMS))
    labels.write_text("".join(json.dumps(row) + "\n" for row in CANARY_LABELS))
    env = {"PATH": "/usr/bin:/bin", "RAGPULSE_JUDGE_MODEL": "openai/ragpulse-test-judge",
           "RAGPULSE_JUDGE_API_BASE": server.api_base, "RAGPULSE_JUDGE_API_KEY": "test-key",
           "RAGPULSE_JUDGE_SELF_CHECK": "false",
           "RAGPULSE_CANARY_ITEMS_FILE": str(items), "RAGPULSE_CANARY_LABELS_FILE": str(labels),
           "RAGPULSE_CANARY_STATE_FILE": str(tmp_path / "canary-state.json")}  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "agent", "canary", *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_a_judge_that_shifts_trips_the_canary_while_probe_scores_stay_put(
    agent: AgentProcess, app: ProbeApp, golden: Path, tmp_path: Path
) -> None:
    with FakeLLMServer() as server:
        first = canary(tmp_path, server)
        assert first.returncode == 0, first.stdout + first.stderr
        assert "faithfulness: mean" in first.stdout and "judge moved" not in first.stdout
        server.lenient = True  # the judge changed behind the same model name
        second = canary(tmp_path, server)
    assert second.returncode == 3, second.stdout + second.stderr
    assert "judge moved: faithfulness" in second.stdout
    assert "may be the judge's, not the app's" in second.stdout
    state = json.loads((tmp_path / "canary-state.json").read_text())
    assert state["last"]["moved"] and state["last"]["possibly_judge_drift_since"] == state["accepted_at"]
    # The app did not change: its probe scores are where they were.
    before = probe_sums(agent.wait_for(lambda s: True))
    done = probe(agent, app, golden)
    assert done.returncode == 0, done.stdout + done.stderr
    scrape = agent.wait_for(lambda s: items_scored(s) >= before_items(before) + len(GOLDEN), timeout=30)
    expected = offline_scores(regressed=False)
    for metric in ("context_recall", "answer_correctness", f"recall_at_{K}"):
        count, total = probe_sums(scrape)[metric]
        assert count - before[metric][0] == len(GOLDEN)
        assert total - before[metric][1] == pytest.approx(sum(expected[metric]), abs=1e-9), metric


def before_items(sums: dict[str, tuple[float, float]]) -> float:
    return sums["context_recall"][0]
