"""`ragpulse eval` as a user runs it: a subprocess over real labelled data, files written, values checked."""

from __future__ import annotations

import html
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
    report = (out / "report.html").read_text()
    assert 'data-chart="differences"' in report
    # Each file where it is said to be.
    stdout = " ".join(run.stdout.split())
    assert (
        f"Wrote {out}/ (comparison.json, report.html), {out}/a/ and {out}/b/ (results.jsonl, summary.json)"
        in stdout
    )
    assert not (out / "results.jsonl").exists() and (out / "comparison.json").is_file()
    # The items that got worse, each with A's and B's answers and verdicts side by side.
    assert "Items that got worse from A to B" in stdout
    worse = report[report.index("Items that got worse from A to B") : report.index("Items that got better")]
    blocks = worse.split('<details open class="changed">')[1:]
    assert 0 < len(blocks) <= 10
    a_rows = {json.loads(line)["id"]: json.loads(line) for line in a.read_text().splitlines()}
    b_rows = {json.loads(line)["id"]: json.loads(line) for line in b.read_text().splitlines()}
    for block in blocks:
        item = block.split("<b>", 1)[1].split("</b>", 1)[0]
        assert "<h4>A</h4>" in block and "<h4>B</h4>" in block and block.count("claim supported") >= 2
        assert (
            html.escape(a_rows[item]["response"]) in block and html.escape(b_rows[item]["response"]) in block
        )
    # B's sections say they are B's.
    assert "Score distributions of B" in report and "Weakest items of B" in report


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


def _judged_set(tmp_path: Path, n: int = 6) -> Path:
    data = tmp_path / "set.jsonl"
    rows = [
        {"id": f"q{i}", "question": "Which river flows through Paris?",
         "contexts": ["The Seine flows through Paris.", "Lyon sits on the Rhone."],
         "response": f"The Seine flows through Paris, {i} times a day."}
        for i in range(n)
    ]  # fmt: skip
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


def _judge_env(server: FakeLLMServer, **extra: str) -> dict[str, str]:
    return {
        "RAGPULSE_JUDGE_MODEL": "openai/ragpulse-test-judge",
        "RAGPULSE_JUDGE_API_BASE": server.api_base,
        "RAGPULSE_JUDGE_API_KEY": "test-key",
        **extra,
    }


def _lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def test_judge_errors_are_never_scores_and_fail_the_run_above_the_allowed_share(tmp_path: Path) -> None:
    data = _judged_set(tmp_path)
    with FakeLLMServer() as server:
        # Past the self-check, every call rejected (a permanent failure: never retried).
        env = _judge_env(server, RAGPULSE_JUDGE_SELF_CHECK="false")
        server.fail_always("400")
        run = ragpulse_eval(
            str(data), "--out", str(tmp_path / "failed"), "--metrics", "faithfulness", env=env
        )
        assert server.stats.calls == 6  # one per item, none retried
        # All scores are judge errors: exit 3 whatever the allowed share, in one line.
        assert run.returncode == 3, run.stderr
        failed_lines = [line for line in _lines(run.stderr) if "the judge failed on" in line]
        assert len(failed_lines) == 1, run.stderr
        assert "the judge failed on 6 of 6 judged scores" in failed_lines[0]
        assert "'response_format' of type 'json_schema' is not supported" in failed_lines[0]
        summary = json.loads((tmp_path / "failed" / "summary.json").read_text())["metrics"]["faithfulness"]
        assert summary["count"] == 0 and summary["errors"] == 6 and summary["mean"] is None

        # Two errors in six: above the default share (0.1), within --max-judge-errors 0.5.
        server.fail_always(None)
        server.reset()
        server.script("400", "400")
        run = ragpulse_eval(str(data), "--out", str(tmp_path / "some"), "--metrics", "faithfulness", env=env)
        assert run.returncode == 3 and "failed on 2 of 6 judged scores (33%" in run.stderr, run.stderr
        server.script("400", "400")
        run = ragpulse_eval(str(data), "--out", str(tmp_path / "allowed"), "--metrics", "faithfulness",
                            "--max-judge-errors", "0.5", env=env)  # fmt: skip
        assert run.returncode == 0, run.stderr

        server.reset()
        run = ragpulse_eval(str(data), "--out", str(tmp_path / "ok"), "--metrics", "faithfulness", env=env)
        assert run.returncode == 0, run.stderr
        sent = (server.stats.calls, server.stats.prompt_tokens, server.stats.completion_tokens)
    summary = json.loads((tmp_path / "ok" / "summary.json").read_text())
    assert summary["judge"] == "openai/ragpulse-test-judge"
    assert summary["metrics"]["faithfulness"]["count"] == 6
    assert summary["metrics"]["faithfulness"]["errors"] == 0
    # What scoring cost, as the judge's server counted it (litellm has no price for this model).
    usage = summary["judge_usage"]
    assert (usage["calls"], usage["prompt_tokens"], usage["completion_tokens"]) == sent
    assert usage["failed"] == 0 and usage["unpriced_calls"] == 6
    assert f"judge openai/ragpulse-test-judge: 6 calls (0 failed), {sent[1]:,} prompt" in " ".join(
        run.stdout.split()
    )
    # No terminal: a progress line per tenth of the items (every item of six), then the total.
    progress = [line.rpartition(",")[0] for line in run.stderr.splitlines() if " items (" in line]
    for n in range(1, 6):
        assert f"scoring {data}: {n}/6 items ({n / 6:.0%})" in progress, run.stderr
    assert f"scored 6 items of {data} in " in run.stderr


@pytest.mark.parametrize(
    ("fault", "provider_says", "settings"),
    [
        ("401", "Incorrect API key provided", "check the key in RAGPULSE_JUDGE_API_KEY"),
        ("403", "Project does not have access to this model", "check the key in RAGPULSE_JUDGE_API_KEY"),
        ("404", "The model `gpt-nonexistent` does not exist",
         "check RAGPULSE_JUDGE_MODEL and RAGPULSE_JUDGE_API_BASE"),
    ],
)  # fmt: skip
def test_a_judge_that_cannot_work_stops_eval_before_scoring_in_one_line(
    tmp_path: Path, fault: str, provider_says: str, settings: str
) -> None:
    data = _judged_set(tmp_path)
    with FakeLLMServer() as server:
        server.fail_always(fault)
        run = ragpulse_eval(str(data), "--out", str(tmp_path / "out"), env=_judge_env(server))
        calls = server.stats.calls
    assert run.returncode == 5, run.stdout + run.stderr
    assert calls == 1  # the self-check's one call: not retried, nothing scored
    lines = _lines(run.stderr)
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("ragpulse eval: judge self-check failed: judge openai/ragpulse-test-judge: ")
    assert provider_says in lines[0] and settings in lines[0], lines[0]
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_a_judge_server_in_trouble_stops_eval_after_a_few_requests(tmp_path: Path) -> None:
    data = _judged_set(tmp_path)
    with FakeLLMServer() as server:
        server.fail_always("500")
        run = ragpulse_eval(str(data), "--out", str(tmp_path / "out"), env=_judge_env(server))
        calls = server.stats.calls
    assert run.returncode == 5, run.stdout + run.stderr
    assert 1 < calls <= 4  # the self-check's call and its retries (judge_max_retries 3), no more
    lines = _lines(run.stderr)
    assert len(lines) == 1, run.stderr
    assert "HTTP 500" in lines[0] and "The server had an error while processing your request" in lines[0]
    assert "(server_error); check RAGPULSE_JUDGE_MODEL, RAGPULSE_JUDGE_API_BASE" in lines[0]


def test_no_key_for_a_provider_model_is_named_without_a_request(tmp_path: Path) -> None:
    """litellm's OpenAI client refuses to send without a key (it reports that as a 500): the
    cause and the two variables that supply a key are named at once. OPENAI_API_BASE points at a
    test server to show that nothing is sent, so the test needs no network."""
    data = _judged_set(tmp_path)
    with FakeLLMServer() as server:
        run = ragpulse_eval(
            str(data), "--out", str(tmp_path / "out"), "--judge", "openai/gpt-4o-mini",
            env={"OPENAI_API_BASE": server.api_base}, unset=("OPENAI_API_KEY",),
        )  # fmt: skip
        calls = server.stats.calls
    assert run.returncode == 5, run.stdout + run.stderr
    assert calls == 0
    lines = _lines(run.stderr)
    assert len(lines) == 1, run.stderr
    assert "Missing credentials" in lines[0]
    assert "set OPENAI_API_KEY (read by litellm for this provider) or RAGPULSE_JUDGE_API_KEY" in lines[0]
    assert "gave up after" not in lines[0]  # not retried


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
    # What scoring needs and nothing more: one combined question per item (and the self-check's).
    assert calls == len(rows) + 1 and by_kind == {"assess_interaction": len(rows), "assess_chunks": 1}
    for planted in ("help@shop.example", "jane.doe0@customer.example", "12 34 56 78"):
        assert planted not in sent, f"{planted} reached the judge"
    report = (tmp_path / "out" / "report.html").read_text()
    weakest = report[report.index('id="weakest"') :]
    # Each item's chunk verdicts and its claim, as the judge gave them (its claim text redacted).
    assert weakest.count("chunk 1 useful") == len(rows) and weakest.count("chunk 2 useful") == len(rows)
    assert weakest.count("claim supported") >= len(rows)
    assert "&lt;EMAIL_1&gt;" in weakest and "No judge verdicts" not in weakest


def test_terminal_tables_keep_full_metric_names(tmp_path: Path) -> None:
    """Two metrics whose names differ only at the end stay two rows that read apart, even in the
    80 columns of a log."""
    data = tmp_path / "set.jsonl"
    rows = [
        {"id": f"q{i}", "question": "Which river flows through Paris?",
         "contexts": ["The Seine flows through Paris.", "Lyon sits on the Rhone."],
         "response": "The Seine flows through Paris.", "reference": "The Seine flows through Paris."}
        for i in range(3)
    ]  # fmt: skip
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = ragpulse_eval(str(data), "--out", str(tmp_path / "out"), env={"COLUMNS": "80"})
    assert run.returncode == 0, run.stderr
    for name in ("ragchecker_noise_sensitivity_in_relevant", "ragchecker_noise_sensitivity_in_irrelevant"):
        assert f" {name} " in run.stdout, run.stdout
    assert "…" not in run.stdout


def test_eval_help_offers_only_what_eval_uses() -> None:
    import subprocess
    import sys

    from tests.support.repo import ROOT

    shown = subprocess.run([sys.executable, "-m", "agent", "eval", "--help"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60, check=True).stdout  # fmt: skip
    for flag in ("--otlp-listen", "--metrics-listen", "--sample-rate"):
        assert flag not in shown
    for flag in ("--judge", "--max-judge-errors", "--compare", "--config", "--set"):
        assert flag in shown
    assert "labelled set" not in shown and "JSONL set" in shown
