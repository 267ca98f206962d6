"""`ragpulse eval` as a user runs it: a subprocess over real labelled data, files written, values checked."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from agent.metrics import rank_trec_run
from tests.support.cli import ragpulse_eval, read_jsonl
from tests.support.llm_server import FakeLLMServer
from tests.support.repo import SHARED_DATA

pytestmark = pytest.mark.integration

TREC = SHARED_DATA / "trec_eval_test_vectors"
RAGAS = SHARED_DATA / "ragas_doc_examples" / "ragas_doc_examples.json"
HALUEVAL = SHARED_DATA / "halueval_qa_sample" / "halueval_qa_sample.jsonl"


def trec_eval_all(path: Path) -> dict[str, float]:
    values = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "all" and parts[0] != "runid":
            values[parts[0]] = float(parts[2])
    return values


def test_trec_run_scored_like_trec_eval(tmp_path: Path) -> None:
    if not TREC.is_dir():
        pytest.skip(f"shared data absent: {TREC}")
    grades: dict[str, dict[str, float]] = defaultdict(dict)
    for line in (TREC / "qrels.test").read_text().splitlines():
        topic, _, doc, rel = line.split()
        grades[topic][doc] = float(rel)
    runs: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for line in (TREC / "results.test").read_text().splitlines():
        topic, _, doc, _, score, _ = line.split()
        runs[topic].append((doc, float(score)))
    rows = [
        {"id": topic, "question": f"TREC topic {topic}", "retrieved_ids": rank_trec_run(runs[topic]),
         "relevance": grades[topic]}
        for topic in sorted(runs)
    ]  # fmt: skip
    data = tmp_path / "trec.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))

    run = ragpulse_eval(str(data), "--out", str(tmp_path / "out"), "--k", "5")
    assert run.returncode == 0, run.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())["metrics"]
    expected = trec_eval_all(TREC / "out.test.aq")
    assert summary["precision_at_5"]["mean"] == pytest.approx(expected["P_5"], abs=5e-5)
    assert summary["recall_at_5"]["mean"] == pytest.approx(expected["recall_5"], abs=5e-5)
    assert summary["hit_rate_at_5"]["mean"] == pytest.approx(expected["success_5"], abs=5e-5)
    assert summary["mrr"]["mean"] == pytest.approx(expected["recip_rank"], abs=5e-5)
    assert summary["ndcg_at_5"]["mean"] == pytest.approx(expected["ndcg_cut_5"], abs=5e-5)
    assert summary["mrr"]["count"] == 3 and summary["mrr"]["undefined"] == 0
    low, high = summary["mrr"]["ci_low"], summary["mrr"]["ci_high"]
    assert low <= summary["mrr"]["mean"] <= high
    results = read_jsonl(tmp_path / "out" / "results.jsonl")
    assert [r["id"] for r in results] == ["301", "302", "303"]
    assert results[1]["precision_at_5"] == pytest.approx(0.8)
    # No text, so no judged metric applies: none is reported.
    assert "faithfulness" not in summary
    assert "P_5" not in run.stdout and "precision_at_5" in run.stdout  # the terminal summary table


def test_ragas_columns_as_they_are(tmp_path: Path) -> None:
    if not RAGAS.is_file():
        pytest.skip(f"shared data absent: {RAGAS}")
    vectors = {v["id"]: v for v in json.loads(RAGAS.read_text())["vectors"]}
    wanted = {
        "ragas-cp-nonllm-with-reference-contexts": "nonllm_context_precision",
        "ragas-cr-nonllm": "nonllm_context_recall",
        "ragas-cp-id-based": "id_context_precision",
        "ragas-cr-id-based": "id_context_recall",
    }
    rows = [{"id": vid, **vectors[vid]["inputs"]} for vid in wanted]
    data = tmp_path / "ragas.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = ragpulse_eval(str(data), "--out", str(tmp_path / "out"))
    assert run.returncode == 0, run.stderr
    results = {r["id"]: r for r in read_jsonl(tmp_path / "out" / "results.jsonl")}
    for vid, metric in wanted.items():
        # RAGAS smooths denominators with 1e-10; exact ratios here.
        assert results[vid][metric] == pytest.approx(vectors[vid]["expected"], abs=1e-6), vid


def test_malformed_lines_are_reported_and_skipped(tmp_path: Path) -> None:
    data = tmp_path / "mixed.jsonl"
    good = {"question": "Which river flows through Paris?", "contexts": ["The Seine flows through Paris."],
            "response": "The Seine flows through Paris."}  # fmt: skip
    data.write_text(
        json.dumps(good)
        + "\n"
        + "{broken json\n"
        + json.dumps({"question": "q", "contexts": [1, 2]})
        + "\n"
        + "\n"
        + json.dumps({**good, "id": "last", "response": "It is the Loire, founded in 1850."})
        + "\n"
    )
    run = ragpulse_eval(str(data), "--out", str(tmp_path / "out"))
    assert run.returncode == 0, run.stderr
    assert f"{data}:2: skipped: not valid JSON" in run.stderr
    assert f"{data}:3: skipped: contexts[0] must be a string" in run.stderr
    results = read_jsonl(tmp_path / "out" / "results.jsonl")
    assert [r["line"] for r in results] == [1, 2, 3, 5]
    assert results[0]["faithfulness"] == 1.0
    assert results[3]["id"] == "last" and results[3]["faithfulness"] == 0.0
    assert "skipped" in results[1] and "faithfulness" not in results[1]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["items"] == 2 and summary["bad_lines"] == 2
    assert summary["metrics"]["faithfulness"]["mean"] == pytest.approx(0.5)
    report = (tmp_path / "out" / "report.html").read_text()
    assert "Lines skipped" in report and "not valid JSON" in report


def _halueval_sets(tmp_path: Path) -> tuple[Path, Path]:
    if not HALUEVAL.is_file():
        pytest.skip(f"shared data absent: {HALUEVAL}")
    right, wrong = [], []
    for line in HALUEVAL.read_text().splitlines():
        item = json.loads(line)
        base = {"id": item["id"], "question": item["question"], "contexts": [item["knowledge"]]}
        right.append({**base, "response": item["right_answer"]})
        wrong.append({**base, "response": item["hallucinated_answer_one_turn"]})
    a, b = tmp_path / "right.jsonl", tmp_path / "hallucinated.jsonl"
    a.write_text("".join(json.dumps(r) + "\n" for r in right))
    b.write_text("".join(json.dumps(r) + "\n" for r in wrong))
    return a, b


def test_compare_detects_a_known_difference(tmp_path: Path) -> None:
    a, b = _halueval_sets(tmp_path)
    out = tmp_path / "out"
    run = ragpulse_eval(str(a), str(b), "--compare", "--out", str(out), "--metrics", "faithfulness")
    assert run.returncode == 0, run.stderr
    comparison = json.loads((out / "comparison.json").read_text())
    faithfulness = comparison["metrics"]["faithfulness"]
    assert comparison["paired_by"] == "id" and comparison["pairs"] == 40
    assert faithfulness["mean_difference"] < 0 and faithfulness["ci_high"] < 0
    assert faithfulness["verdict"] == "worse"
    assert (out / "a" / "results.jsonl").is_file() and (out / "b" / "summary.json").is_file()
    assert "worse" in run.stdout
    assert 'data-chart="differences"' in (out / "report.html").read_text()


def test_compare_identical_files_finds_no_difference(tmp_path: Path) -> None:
    a, _ = _halueval_sets(tmp_path)
    copy = tmp_path / "copy.jsonl"
    copy.write_text(a.read_text())
    out = tmp_path / "out"
    run = ragpulse_eval(str(a), str(copy), "--compare", "--out", str(out))
    assert run.returncode == 0, run.stderr
    comparison = json.loads((out / "comparison.json").read_text())
    assert comparison["metrics"], comparison
    for metric, values in comparison["metrics"].items():
        assert values["verdict"] == "no detectable difference", metric
        if values["pairs"]:
            assert values["mean_difference"] == 0.0


def test_llm_judge_through_the_same_cache_and_failures_are_not_scores(tmp_path: Path) -> None:
    data = tmp_path / "set.jsonl"
    rows = [
        {"id": f"q{i}", "question": "Which river flows through Paris?",
         "contexts": ["The Seine flows through Paris.", "Lyon sits on the Rhone."],
         "response": f"The Seine flows through Paris, {i} times a day."}
        for i in range(6)
    ]  # fmt: skip
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with FakeLLMServer() as server:
        server.fail_always("400")  # permanent failure: never retried, never a score
        env = {
            "RAGPULSE_JUDGE_MODEL": "openai/ragpulse-test-judge",
            "RAGPULSE_JUDGE_API_BASE": server.api_base,
            "RAGPULSE_JUDGE_API_KEY": "test-key",
        }
        run = ragpulse_eval(
            str(data), "--out", str(tmp_path / "failed"), "--metrics", "faithfulness", env=env
        )
        assert run.returncode == 0, run.stderr
        summary = json.loads((tmp_path / "failed" / "summary.json").read_text())["metrics"]["faithfulness"]
        assert summary["count"] == 0 and summary["errors"] == 6 and summary["mean"] is None
        server.fail_always(None)
        run = ragpulse_eval(str(data), "--out", str(tmp_path / "ok"), "--metrics", "faithfulness", env=env)
        assert run.returncode == 0, run.stderr
        assert server.stats.calls > 0
    summary = json.loads((tmp_path / "ok" / "summary.json").read_text())
    assert summary["judge"] == "openai/ragpulse-test-judge"
    assert summary["metrics"]["faithfulness"]["count"] == 6
    assert summary["metrics"]["faithfulness"]["errors"] == 0


def test_the_report_shows_the_verdicts_of_scoring_without_asking_the_judge_again(tmp_path: Path) -> None:
    """Scoring costs one combined call per item and the report's weakest items show the verdicts
    obtained then (redacted, like every judge request): no second round of judge calls."""
    data = tmp_path / "set.jsonl"
    rows = [
        {"id": f"q{i}", "question": f"How do I reach support? Ticket {i}",
         "contexts": ["Support answers at help@shop.example within a day.", "Lyon sits on the Rhone."],
         "response": f"Write to jane.doe{i}@customer.example or call +33 6 12 34 56 78."}
        for i in range(4)
    ]  # fmt: skip
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with FakeLLMServer() as server:
        env = {
            "RAGPULSE_JUDGE_MODEL": "openai/ragpulse-test-judge",
            "RAGPULSE_JUDGE_API_BASE": server.api_base,
            "RAGPULSE_JUDGE_API_KEY": "test-key",
        }
        run = ragpulse_eval(str(data), "--out", str(tmp_path / "out"), env=env)
        assert run.returncode == 0, run.stderr
        sent = json.dumps(server.stats.requests)
        calls, by_kind = server.stats.calls, dict(server.stats.by_kind)
    # What scoring needs and nothing more: one combined question per item.
    assert calls == len(rows) and by_kind == {"assess_interaction": len(rows)}
    for planted in ("help@shop.example", "jane.doe0@customer.example", "12 34 56 78"):
        assert planted not in sent, f"{planted} reached the judge"
    report = (tmp_path / "out" / "report.html").read_text()
    weakest = report[report.index('id="weakest"') :]
    # Each item's chunk verdicts and its claim, as the judge gave them (its claim text redacted).
    assert weakest.count("chunk 1 useful") == len(rows) and weakest.count("chunk 2 useful") == len(rows)
    assert weakest.count("claim supported") >= len(rows)
    assert "&lt;EMAIL_1&gt;" in weakest and "No judge verdicts" not in weakest
