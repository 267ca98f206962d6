"""Offline evaluation: input readers, scoring, bootstrap summaries and A/B comparison."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agent.judges.local import LexicalJudge
from agent.offline.evaluate import (
    LOWER_IS_BETTER,
    RAGCHECKER_FIELDS,
    ItemResult,
    OfflineEvaluator,
    available_metrics,
    deterministic_scores,
)
from agent.offline.records import EvalItem, InputError, read_items
from agent.offline.summary import (
    BETTER,
    NO_DIFFERENCE,
    WORSE,
    bootstrap_mean_ci,
    compare,
    pair_results,
    summarise,
    write_summary,
)


def _write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_reads_ragpulse_and_ragas_columns_and_reports_bad_lines(tmp_path: Path) -> None:
    path = _write_jsonl(
        tmp_path / "set.jsonl",
        [
            {"id": "a", "question": "q1", "contexts": ["c1"], "response": "r1", "reference": "ref"},
            {"user_input": "q2", "retrieved_contexts": ["c2", "c3"], "response": "r2",
             "reference_contexts": ["c2"]},
            "{not json",
            {"contexts": ["c"], "response": "no question"},
            {"question": "q", "contexts": "not a list"},
            {"id": "a", "question": "duplicate id"},
            [1, 2],
            "",
            {"question": "q7", "retrieved_ids": [3, 1], "relevant_ids": ["1"], "relevance": {"1": 2}},
        ],
    )  # fmt: skip
    items, bad = read_items(path)
    assert [i.id for i in items] == ["a", "2", "9"]
    assert items[1].question == "q2" and items[1].contexts == ("c2", "c3")
    assert items[1].reference_contexts == ("c2",)
    assert items[2].retrieved_ids == ("3", "1") and items[2].relevance == {"1": 2.0}
    assert [b.line for b in bad] == [3, 4, 5, 6, 7]
    assert "not valid JSON" in bad[0].reason
    assert "question" in bad[1].reason
    assert "contexts must be a list" in bad[2].reason
    assert "duplicate id" in bad[3].reason
    assert "JSON object" in bad[4].reason


def test_reads_csv_with_json_list_columns(tmp_path: Path) -> None:
    path = tmp_path / "set.csv"
    path.write_text(
        "id,user_input,retrieved_contexts,response\n"
        'x,"Where?","[""Paris is in France."", ""Berlin""]",Paris\n'
        'y,"Plain","one context",ok\n'
        "z,,,\n"
    )
    items, bad = read_items(path)
    assert [i.id for i in items] == ["x", "y"]
    assert items[0].contexts == ("Paris is in France.", "Berlin")
    assert items[1].contexts == ("one context",)
    assert len(bad) == 1 and bad[0].line == 4


def test_unknown_format_and_missing_file_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read_items(tmp_path / "missing.jsonl")
    (tmp_path / "x.xml").write_text("<a/>")
    with pytest.raises(InputError, match="unknown format"):
        read_items(tmp_path / "x.xml")


def test_ranking_metrics_by_hand() -> None:
    item = EvalItem(
        "1", 1, "q", retrieved_ids=("d3", "d1", "d7", "d2", "d9"), relevant_ids=("d1", "d2", "d4")
    )
    scores = deterministic_scores(item, 5)
    assert scores["precision_at_5"] == pytest.approx(2 / 5)
    assert scores["recall_at_5"] == pytest.approx(2 / 3)
    assert scores["hit_rate_at_5"] == 1.0
    assert scores["mrr"] == pytest.approx(1 / 2)
    # DCG = 1/log2(3) + 1/log2(5); IDCG = 1 + 1/log2(3) + 1/log2(4)
    dcg = 1 / 1.584962500721156 + 1 / 2.321928094887362
    idcg = 1 + 1 / 1.584962500721156 + 0.5
    assert scores["ndcg_at_5"] == pytest.approx(dcg / idcg)
    assert scores["id_context_precision"] == pytest.approx(2 / 5)
    assert scores["id_context_recall"] == pytest.approx(2 / 3)


def test_no_relevant_ids_is_undefined_not_zero() -> None:
    item = EvalItem("1", 1, "q", retrieved_ids=("d1",), relevant_ids=())
    scores = deterministic_scores(item, 5)
    assert scores["precision_at_5"] is None and scores["mrr"] is None and scores["ndcg_at_5"] is None


def test_evaluator_runs_only_metrics_whose_inputs_exist() -> None:
    full = EvalItem("1", 1, "Which river flows through Paris?",
                    ("The Seine flows through Paris.", "Lyon is on the Rhone."),
                    "The Seine flows through Paris.", reference="The Seine.")  # fmt: skip
    bare = EvalItem("2", 2, "Which river?", ("The Seine flows through Paris.",))
    metrics = available_metrics([full, bare], 5)
    assert "faithfulness" in metrics and "context_recall" in metrics
    assert "ragchecker_faithfulness" in metrics and "precision_at_5" not in metrics
    evaluator = OfflineEvaluator(LexicalJudge(), metrics)
    full_result, bare_result = asyncio.run(_score_all(evaluator, [full, bare]))
    assert full_result.scores["faithfulness"] == 1.0
    assert full_result.scores["ragchecker_faithfulness"] == 1.0
    assert bare_result.scores["faithfulness"] is None  # no response: undefined, never 0
    assert bare_result.scores["context_relevancy"] is not None
    assert bare_result.scores["ragchecker_precision"] is None
    assert not full_result.errors and not bare_result.errors


async def _score_all(evaluator: OfflineEvaluator, items: list[EvalItem]) -> list[ItemResult]:
    return list(await asyncio.gather(*(evaluator.score(i) for i in items)))


def _results(values: dict[str, list[float | None]], ids: list[str] | None = None) -> list[ItemResult]:
    n = len(next(iter(values.values())))
    ids = ids or [f"i{k}" for k in range(n)]
    return [
        ItemResult(EvalItem(ids[k], k + 1, f"question {ids[k]}"), {m: v[k] for m, v in values.items()})
        for k in range(n)
    ]


def test_summary_counts_undefined_and_bootstraps_the_mean(tmp_path: Path) -> None:
    values = [0.1, 0.9, 0.5, 0.7, 0.3, None, 0.6, 0.8, None, 0.4]
    (summary,) = summarise(_results({"m": values}), ["m"])
    defined = [v for v in values if v is not None]
    assert summary.count == 8 and summary.undefined == 2
    assert summary.mean == pytest.approx(sum(defined) / 8)
    assert summary.ci_low is not None and summary.ci_high is not None
    assert summary.ci_low < summary.mean < summary.ci_high
    assert summary.ci_low >= 0.1 and summary.ci_high <= 0.9
    written = write_summary(
        tmp_path / "s.json", [summary], items=10, bad_lines=1, judge="lexical", source="x"
    )
    assert json.loads((tmp_path / "s.json").read_text()) == written
    assert written["metrics"]["m"]["undefined"] == 2


def test_lower_is_better_names_are_real_metrics() -> None:
    assert set(RAGCHECKER_FIELDS) >= LOWER_IS_BETTER


def test_bootstrap_edge_cases() -> None:
    assert bootstrap_mean_ci([]) is None and bootstrap_mean_ci([0.5]) is None
    assert bootstrap_mean_ci([0.4, 0.4, 0.4]) == (0.4, 0.4)


def test_compare_verdicts() -> None:
    a = _results({"m": [0.2, 0.3, 0.25, 0.4, 0.35, 0.3, 0.2, 0.3], "h": [0.1] * 8})
    better = _results({"m": [0.8, 0.7, 0.9, 0.75, 0.85, 0.8, 0.7, 0.9], "h": [0.5] * 8})
    pairs, by = pair_results(a, better)
    assert by == "id" and len(pairs) == 8
    (m,) = compare(pairs, ["m"])
    assert m.verdict == BETTER and m.ci_low is not None and m.ci_low > 0
    pairs_back, _ = pair_results(better, a)
    assert compare(pairs_back, ["m"])[0].verdict == WORSE
    same, _ = pair_results(a, a)
    assert compare(same, ["m"])[0].verdict == NO_DIFFERENCE
    assert compare(same, ["m"])[0].mean_difference == 0.0


def test_lower_is_better_metrics_flip_the_verdict() -> None:
    a = _results({"ragchecker_hallucination": [0.1, 0.0, 0.2, 0.1, 0.0, 0.1]})
    b = _results({"ragchecker_hallucination": [0.6, 0.7, 0.5, 0.8, 0.6, 0.7]})
    (c,) = compare(pair_results(a, b)[0], ["ragchecker_hallucination"])
    assert c.mean_difference is not None and c.mean_difference > 0 and c.verdict == WORSE


def test_pairs_by_question_when_files_have_no_ids() -> None:
    def result(line: int, question: str, value: float) -> ItemResult:
        return ItemResult(EvalItem(str(line), line, question, id_given=False), {"m": value})

    a = [result(1, "What?", 0.1), result(2, "Why?", 0.2)]
    b = [result(1, "Why?", 0.9), result(2, "What?", 0.8)]
    pairs, by = pair_results(a, b)
    assert by == "question"
    assert [(x.item.question, y.item.question) for x, y in pairs] == [("What?", "What?"), ("Why?", "Why?")]


@pytest.mark.parametrize("collecting", [True, False])
def test_eval_pauses_the_collector_until_its_judge_is_built_and_restores_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, collecting: bool
) -> None:
    """Imports (litellm's, for an LLM judge) build half a million objects and no garbage: the
    cycle collector waits until the judge is built, runs while scoring, and is left as found."""
    import argparse
    import gc

    import agent.build
    import agent.offline.run
    from agent.commands.eval import _main as eval_command
    from agent.config import Settings

    seen: dict[str, bool] = {}
    build_judge, summarise_ = agent.build.build_judge, agent.offline.run.summarise

    def building(*args: object, **kwargs: object) -> object:
        seen["building the judge"] = gc.isenabled()
        return build_judge(*args, **kwargs)  # type: ignore[arg-type]

    def summarising(*args: object, **kwargs: object) -> object:
        seen["summarising"] = gc.isenabled()
        return summarise_(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(agent.build, "build_judge", building)
    monkeypatch.setattr(agent.offline.run, "summarise", summarising)
    data = _write_jsonl(tmp_path / "set.jsonl", [{"question": "Capital of France?", "response": "Paris."}])
    args = argparse.Namespace(
        files=[str(data)], out=str(tmp_path / "out"), metrics=None, judge_model=None, k=5,
        compare=False, labels=None, calibration=None, max_judge_errors=0.1,
        fail_under=[], fail_under_ci=[], fail_if_worse=[],
    )  # fmt: skip
    was = gc.isenabled()
    try:
        (gc.enable if collecting else gc.disable)()
        assert eval_command(args, Settings(judge_model="lexical")) == 0
        assert seen == {"building the judge": False, "summarising": True}
        assert gc.isenabled() is collecting
        # Ended before the judge was built (no usable line): the collector is left as found too.
        args.files = [str(_write_jsonl(tmp_path / "bad.jsonl", ["not json"]))]
        assert eval_command(args, Settings(judge_model="lexical")) == 1
        assert gc.isenabled() is collecting
    finally:
        (gc.enable if was else gc.disable)()
