"""The quality gate of `ragpulse eval` as CI runs it (a subprocess, the local judge), and the
Python API giving the same results as the command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.quality import assert_not_worse, assert_quality, evaluate
from tests.support.cli import ragpulse_eval, read_jsonl
from tests.support.golden import golden_items, write_set
from tests.support.llm_server import FakeLLMServer
from tests.support.repo import ROOT

pytestmark = pytest.mark.integration

GATE_FAILED = 4


def gate_lines(stderr: str) -> list[str]:
    return [line.removeprefix("ragpulse eval: gate failed: ") for line in stderr.splitlines()
            if line.startswith("ragpulse eval: gate failed: ")]  # fmt: skip


def test_fail_under_exits_4_after_writing_and_names_each_failing_metric(tmp_path: Path) -> None:
    data = write_set(tmp_path / "set.jsonl", golden_items(20, invented={0, 1, 2, 3, 4, 5, 6, 7}))
    out = tmp_path / "out"
    run = ragpulse_eval(str(data), "--out", str(out), "--fail-under", "faithfulness=0.9",
                        "--fail-under", "answer_relevancy=0.05")  # fmt: skip
    assert run.returncode == GATE_FAILED, run.stderr
    summary = json.loads((out / "summary.json").read_text())["metrics"]
    f = summary["faithfulness"]
    assert f["mean"] < 0.9
    # One line for the failing metric, with its mean, 95% CI and threshold as summary.json has them.
    assert gate_lines(run.stderr) == [
        f"faithfulness: mean {f['mean']:.3f} is under the threshold 0.900 "
        f"(95% CI {f['ci_low']:.3f} – {f['ci_high']:.3f}, {f['count']} scores)"
    ]
    # A gate that names a metric the judge's default leaves out scores it, with the doubt said.
    assert "gate passed: answer_relevancy: mean" in " ".join(run.stdout.split())
    assert "answer_relevancy says little: the lexical judge measures it at chance" in run.stderr
    assert (out / "results.jsonl").is_file() and (out / "report.html").is_file()

    passing = ragpulse_eval(str(data), "--out", str(tmp_path / "ok"), "--fail-under", "faithfulness=0.3")
    assert passing.returncode == 0, passing.stderr
    assert gate_lines(passing.stderr) == []


def test_fail_under_ci_compares_the_lower_bound(tmp_path: Path) -> None:
    data = write_set(tmp_path / "set.jsonl", golden_items(20, invented={0, 1, 2, 3, 4, 5}))
    first = ragpulse_eval(str(data), "--out", str(tmp_path / "first"), "--metrics", "faithfulness")
    f = json.loads((tmp_path / "first" / "summary.json").read_text())["metrics"]["faithfulness"]
    assert f["ci_low"] < f["mean"], first.stdout
    between = round((f["ci_low"] + f["mean"]) / 2, 3)
    on_mean = ragpulse_eval(
        str(data), "--out", str(tmp_path / "mean"), "--fail-under", f"faithfulness={between}"
    )
    assert on_mean.returncode == 0, on_mean.stderr
    on_ci = ragpulse_eval(
        str(data), "--out", str(tmp_path / "ci"), "--fail-under-ci", f"faithfulness={between}"
    )
    assert on_ci.returncode == GATE_FAILED, on_ci.stderr
    [line] = gate_lines(on_ci.stderr)
    assert line.startswith(
        f"faithfulness: 95% CI lower bound {f['ci_low']:.3f} is under the threshold {between:.3f}"
    )


def test_gate_usage_errors_are_one_line_and_score_nothing(tmp_path: Path) -> None:
    data = write_set(tmp_path / "set.jsonl", golden_items(4))
    out = tmp_path / "out"
    cases = {
        ("--fail-under", "faithfulnes=0.8"): "gate: unknown metric 'faithfulnes': did you mean faithfulness?",
        ("--fail-under", "faithfulness"): "--fail-under expects METRIC=MIN",
        ("--fail-if-worse", "faithfulness"): "--fail-if-worse needs two files and --compare",
        ("--fail-under", "ragchecker_hallucination=0.2"): "gate: ragchecker_hallucination: lower is better",
    }
    for flags, says in cases.items():
        run = ragpulse_eval(str(data), "--out", str(out), *flags)
        assert run.returncode == 2, (flags, run.stderr)
        lines = [line for line in run.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith(f"ragpulse eval: {says}"), (flags, run.stderr)
        assert not out.exists()


def test_a_gated_metric_without_scores_fails_the_gate(tmp_path: Path) -> None:
    data = write_set(tmp_path / "set.jsonl", golden_items(4))  # no reference: no context recall
    run = ragpulse_eval(str(data), "--out", str(tmp_path / "out"), "--metrics", "faithfulness",
                        "--fail-under", "context_recall=0.5")  # fmt: skip
    assert run.returncode == GATE_FAILED, run.stderr
    assert gate_lines(run.stderr) == [
        "context_recall: not scored (no item carries its inputs, or it is not among the metrics scored); "
        "threshold 0.500 not met"
    ]


def test_fail_if_worse_fails_only_on_a_significant_drop(tmp_path: Path) -> None:
    a = write_set(tmp_path / "a.jsonl", golden_items(20))
    clearly = write_set(tmp_path / "clearly.jsonl", golden_items(20, invented=set(range(0, 20, 2))))
    slightly = write_set(tmp_path / "slightly.jsonl", golden_items(20, invented={7}))

    gate = ("--fail-if-worse", "faithfulness", "--fail-if-worse", "context_precision")
    worse = ragpulse_eval(str(a), str(clearly), "--compare", "--out", str(tmp_path / "worse"), *gate)
    assert worse.returncode == GATE_FAILED, worse.stderr
    comparison = json.loads((tmp_path / "worse" / "comparison.json").read_text())["metrics"]
    expected = []
    for metric in ("faithfulness", "context_precision"):
        c = comparison[metric]
        assert c["verdict"] == "worse" and c["ci_high"] < 0
        expected.append(
            f"{metric}: B is worse than A (B − A {c['mean_difference']:+.3f}, 95% CI {c['ci_low']:+.3f} – "
            f"{c['ci_high']:+.3f}, {c['pairs']} pairs: the interval excludes 0)"
        )
    assert gate_lines(worse.stderr) == expected

    noise = ragpulse_eval(str(a), str(slightly), "--compare", "--out", str(tmp_path / "noise"),
                          "--fail-if-worse", "faithfulness")  # fmt: skip
    assert noise.returncode == 0, noise.stderr
    n = json.loads((tmp_path / "noise" / "comparison.json").read_text())["metrics"]["faithfulness"]
    assert n["mean_difference"] < 0 and n["ci_low"] < 0 <= n["ci_high"]
    stdout = " ".join(noise.stdout.split())
    assert "gate passed: faithfulness: B's mean is worse than A's but not significant" in stdout


def test_the_python_api_gives_what_the_command_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in os.environ if n.startswith("RAGPULSE_")]:
        monkeypatch.delenv(name)
    items = golden_items(12, invented={1, 4, 9})
    items.append({"id": "broken", "contexts": ["no question"], "response": "an answer"})
    data = write_set(tmp_path / "set.jsonl", items)
    run = ragpulse_eval(str(data), "--out", str(tmp_path / "out"), "--fail-under", "faithfulness=0.95")
    assert run.returncode == GATE_FAILED, run.stderr
    # The lexical judge's default leaves answer relevancy out (at chance), in one line that says how
    # to score it; the Python API says the same in a warning.
    assert "answer_relevancy" not in json.loads((tmp_path / "out" / "summary.json").read_text())["metrics"]
    [said] = [line for line in run.stderr.splitlines() if "answer_relevancy is off" in line]
    assert said.endswith("to score answer_relevancy: --metrics "
                         "context_precision,context_relevancy,faithfulness,answer_relevancy")  # fmt: skip

    with (
        pytest.warns(UserWarning, match="item 13 skipped: a response without its question"),
        pytest.warns(UserWarning, match="answer_relevancy is off: the lexical judge measures it at chance"),
    ):
        from_dicts = evaluate(items, judge="lexical")
    with pytest.warns(UserWarning, match="item 13 skipped"):
        from_file = evaluate(data)
    for results in (from_dicts, from_file):
        assert results.rows() == read_jsonl(tmp_path / "out" / "results.jsonl")
        document = json.loads(json.dumps(results.summary_document(str(data))))
        assert document == json.loads((tmp_path / "out" / "summary.json").read_text())
    with pytest.raises(AssertionError) as failed:
        assert_quality(from_dicts, faithfulness=0.95, context_relevancy=0.0)
    assert str(failed.value).splitlines()[1:] == [f"  {line}" for line in gate_lines(run.stderr)]
    assert_quality(from_dicts, faithfulness=0.5)
    with pytest.raises(AssertionError, match="B is worse than A"):
        assert_not_worse(evaluate(golden_items(12), judge="lexical"), from_dicts, "faithfulness")


def test_the_example_pytest_gate_passes_a_good_set_and_fails_a_bad_one(tmp_path: Path) -> None:
    def pytest_example(**env: str) -> subprocess.CompletedProcess[str]:
        environment = {
            k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_") and k != "GOLDEN_SET"
        }
        return subprocess.run(
            [sys.executable, "-m", "pytest", "examples/test_rag_quality.py", "-p", "no:cacheprovider", "-q"],
            cwd=ROOT, env={**environment, **env}, capture_output=True, text=True, timeout=600,
        )  # fmt: skip

    good = pytest_example()  # the example's own golden.jsonl
    assert good.returncode == 0, good.stdout + good.stderr
    # The local judge's default leaves answer relevancy out (at chance on real labels): its test
    # says so and skips; it runs with a judge that measures it (an LLM).
    assert "1 passed, 1 skipped" in good.stdout
    bad = write_set(tmp_path / "bad.jsonl", golden_items(12, invented=set(range(9))))
    failed = pytest_example(GOLDEN_SET=str(bad))
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "1 failed, 1 skipped" in failed.stdout
    run = ragpulse_eval(str(bad), "--out", str(tmp_path / "out"), "--fail-under", "faithfulness=0.7")
    [line] = gate_lines(run.stderr)
    assert line in failed.stdout  # the same line as the command's gate


def test_the_python_api_judges_with_an_llm_as_the_command_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test LLM server as the judge: the API's judge usage is what the server counted, and a
    judge that cannot work is JudgeBroken in the command's one line."""
    from agent.quality import JudgeBroken

    for name in [n for n in os.environ if n.startswith("RAGPULSE_")]:
        monkeypatch.delenv(name)
    items = golden_items(6)
    with FakeLLMServer() as server:
        monkeypatch.setenv("RAGPULSE_JUDGE_MODEL", "openai/ragpulse-test-judge")
        monkeypatch.setenv("RAGPULSE_JUDGE_API_BASE", server.api_base)
        monkeypatch.setenv("RAGPULSE_JUDGE_API_KEY", "test-key")
        results = evaluate(items, metrics=["faithfulness"])
        asked = server.stats.calls
        assert results.judge == "openai/ragpulse-test-judge"
        assert results.summary("faithfulness").count == 6  # type: ignore[union-attr]
        assert results.usage.calls == asked - 1 and results.usage.failed == 0  # the self-check not counted
        server.fail_always("401")
        with pytest.raises(JudgeBroken, match="judge self-check failed: judge openai/ragpulse-test-judge: "):
            evaluate(items, metrics=["faithfulness"])
