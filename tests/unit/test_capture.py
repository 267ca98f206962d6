"""`ragpulse capture`'s pure part: results read back from real result spans, the selection per
service, route and window, the eval items, and the merge into a golden set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.exporters.result_spans import evaluation_request
from agent.model import Chunk, MetricResult, Outcome, RagInteraction
from agent.offline.capture import (
    ScoredResult,
    Selection,
    golden_row,
    item_row,
    merge,
    scored_results,
    select,
    thresholds,
    window_seconds,
)
from agent.offline.records import item_from_row

HOUR = 3600.0
T0 = 1_800_000_000.0  # a whole hour (divisible by 3600)


def result(
    n: int, *, service: str = "checkout", route: str = "/ask", at: float = T0, **scores: float
) -> ScoredResult:
    return ScoredResult(
        trace_id=f"{n:032x}", span_id=f"{n:016x}", service=service, route=route, time=at,
        scores=scores, question=f"question {n}", response=f"answer {n}",
    )  # fmt: skip


def ids(results: list[ScoredResult]) -> list[int]:
    return [int(r.trace_id, 16) for r in results]


def test_a_result_span_reads_back_with_its_scores_verdicts_text_and_time() -> None:
    interaction = RagInteraction(
        trace_id="ab" * 16, span_id="cd" * 8, query="Capital of France?",
        chunks=(Chunk("Bananas are yellow.", id="doc-0"), Chunk("Paris is the capital.", id="doc-1")),
        response="Lyon.", service="checkout", route="/ask",
    )  # fmt: skip
    results = [
        MetricResult("faithfulness", 0.0, Outcome.OK, reason="claim 'Lyon' is not supported"),
        MetricResult("context_precision", 0.5, Outcome.OK, chunk_verdicts=(False, True)),
        MetricResult("answer_relevancy", None, Outcome.ERROR, reason="judge timed out"),
        MetricResult("context_recall", None, Outcome.SKIPPED),
    ]
    request = evaluation_request(interaction, results, include_text=True, now_ns=int(T0 * 1e9))
    [read] = scored_results(request)
    assert read.interaction_id == "ab" * 16 + ":" + "cd" * 8
    assert (read.service, read.route, read.time) == ("checkout", "/ask", T0)
    # An undefined or failed score is no score; the failure is kept apart.
    assert read.scores == {"context_precision": 0.5, "faithfulness": 0.0}
    assert read.errors == ("answer_relevancy",)
    assert read.question == "Capital of France?" and read.response == "Lyon."
    assert [d["id"] for d in read.documents] == ["doc-0", "doc-1"]
    assert [d["useful"] for d in read.documents] == [False, True]

    row = item_row(read, Selection(below={"faithfulness": 0.5}))
    assert row is not None
    assert row["id"] == row["interaction_id"] == read.interaction_id
    assert row["failing"] == ["faithfulness"]  # context_precision 0.5 is not below 0.5
    assert row["explanations"] == {"faithfulness": "claim 'Lyon' is not supported"}
    assert row["errors"] == ["answer_relevancy"]
    assert row["labels"] == {"context_precision": None, "faithfulness": None}
    assert row["retrieved_ids"] == ["doc-0", "doc-1"] and row["reference"] is None
    assert row["time"] == "2027-01-15T08:00:00+00:00"
    # It is an eval item as `ragpulse eval` reads it.
    item = item_from_row(json.loads(json.dumps(row)), 1)
    assert (item.id, item.question, item.response, item.reference) == (
        read.interaction_id,
        "Capital of France?",
        "Lyon.",
        None,
    )

    # Without the text (results_include_text off) there is no eval item to write.
    [bare] = scored_results(evaluation_request(interaction, results, now_ns=int(T0 * 1e9)))
    assert bare.question is None and item_row(bare, Selection(worst=1)) is None


def test_below_thresholds_selects_per_service_and_route_lowest_first() -> None:
    results = [
        result(1, faithfulness=0.9, context_precision=0.2),
        result(2, faithfulness=0.1, context_precision=0.9),
        result(3, faithfulness=0.6, context_precision=0.7),
        result(4, service="search", faithfulness=0.3),
        result(5, service="search", context_precision=0.0),  # faithfulness undefined: not low on it
    ]
    picked = select(results, Selection(below={"faithfulness": 0.5}))
    assert ids(picked) == [2, 4]
    both = select(results, Selection(below={"faithfulness": 0.5, "context_precision": 0.5}))
    # checkout first (sorted), lowest first within it: 2 (0.1) before 1 (0.2); then search.
    assert ids(both) == [2, 1, 5, 4]
    # Selected by one metric, ranked by another.
    ranked = Selection(below={"context_precision": 0.5}, metrics=("faithfulness",))
    assert ids(select(results, ranked)) == [1]  # 5 has no faithfulness score to rank it by
    # With --worst 1 as well: the worst of those below, per service and route.
    assert ids(
        select(results, Selection(below={"faithfulness": 0.5, "context_precision": 0.5}, worst=1))
    ) == [2, 5]


def test_worst_n_per_window_of_the_records_time() -> None:
    results = [
        result(1, at=T0 + 10, faithfulness=0.4),
        result(2, at=T0 + 20, faithfulness=0.2),
        result(3, at=T0 + 30, faithfulness=0.9),
        result(4, at=T0 + HOUR + 5, faithfulness=0.8),
        result(5, at=T0 + HOUR + 6, faithfulness=0.95),
        result(6, route="/other", at=T0 + 15, faithfulness=1.0),
    ]
    assert ids(select(results, Selection(worst=1, window_seconds=HOUR))) == [2, 4, 6]
    assert ids(select(results, Selection(worst=2, window_seconds=HOUR))) == [2, 1, 4, 5, 6]
    assert ids(select(results, Selection(worst=2))) == [2, 1, 6]
    # Ranked by the lowest score among those considered, then the mean.
    tied = [
        result(7, faithfulness=0.3, answer_relevancy=0.9),
        result(8, faithfulness=0.3, answer_relevancy=0.2),
    ]
    assert ids(select(tied, Selection(worst=1))) == [8]
    assert ids(select(tied, Selection(worst=1, metrics=("answer_relevancy",)))) == [8]
    assert ids(select(tied, Selection(worst=2, metrics=("faithfulness",)))) == [7, 8]  # tie: by id


def test_an_interaction_read_twice_counts_once_with_its_latest_result() -> None:
    again = [
        result(1, at=T0, faithfulness=0.1),
        result(1, at=T0 + 5, faithfulness=0.7),
        result(2, faithfulness=0.3),
    ]
    picked = select(again, Selection(worst=5))
    assert ids(picked) == [2, 1] and picked[1].scores == {"faithfulness": 0.7}


def test_bad_selections_name_the_option() -> None:
    with pytest.raises(ValueError, match="--below METRIC=VALUE"):
        Selection()
    with pytest.raises(ValueError, match="--window needs --worst"):
        Selection(below={"faithfulness": 0.5}, window_seconds=60)
    with pytest.raises(ValueError, match="--worst must be at least 1"):
        Selection(worst=0)
    assert window_seconds("1h") == 3600 and window_seconds("30m") == 1800 and window_seconds("90") == 90
    with pytest.raises(ValueError, match="--window expects"):
        window_seconds("an hour")
    assert thresholds(["faithfulness=0.5", " context_precision = 0.25"]) == {
        "faithfulness": 0.5, "context_precision": 0.25,
    }  # fmt: skip
    with pytest.raises(ValueError, match="METRIC=NUMBER"):
        thresholds(["faithfulness"])


def captured(n: int, reference: str | None = None) -> dict[str, object]:
    row = item_row(result(n, faithfulness=0.1), Selection(below={"faithfulness": 0.5}))
    assert row is not None
    return {**row, "reference": reference}


def test_merge_adds_labelled_items_once_skips_unlabelled_and_says_what_it_updated() -> None:
    hand_made = {"id": "q1", "question": "Opening hours?", "reference": "9 to 5."}
    labelled = [(1, captured(1, "Paris.")), (2, captured(2)), (3, {"question": "no id"}), (4, None)]
    first = merge([hand_made], labelled)
    assert first.added == (f"{1:032x}:{1:016x}",) and first.updated == () and first.unlabelled == 1
    assert first.problems == (
        "line 3: no id (id, interaction_id or trace_id and span_id)",
        "line 4: not a JSON object",
    )
    assert first.rows[0] == hand_made
    golden = first.rows[1]
    # The test (question, reference) and the production evidence apart from it: no response to score.
    assert {k: golden[k] for k in ("id", "question", "reference")} == {
        "id": f"{1:032x}:{1:016x}", "question": "question 1", "reference": "Paris.",
    }  # fmt: skip
    assert "response" not in golden and golden["captured"]["response"] == "answer 1"
    assert golden["captured"]["scores"] == {"faithfulness": 0.1}
    assert golden["captured"]["failing"] == ["faithfulness"]
    assert item_from_row(json.loads(json.dumps(golden)), 2).response is None

    # The same labelled file again (through JSON, as from disk): nothing changes.
    again = merge(json.loads(json.dumps(first.rows)), labelled)
    assert (again.added, again.updated, again.unchanged, again.changed) == ((), (), 1, False)
    assert list(again.rows) == json.loads(json.dumps(first.rows))
    # Labelled again with another reference: updated in place, and said so.
    relabelled = merge(list(first.rows), [(1, captured(1, "Paris, on the Seine."))])
    assert (
        relabelled.updated == (f"{1:032x}:{1:016x}",)
        and relabelled.rows[1]["reference"] == "Paris, on the Seine."
    )
    assert len(relabelled.rows) == 2
    # Taken out of the golden set and merged back: the same item.
    assert golden_row(golden, str(golden["id"])) == golden


def test_relevant_ids_alone_label_an_item() -> None:
    row = {**captured(3), "relevant_ids": ["doc-1"]}
    merged = merge([], [(1, row)])
    assert len(merged.added) == 1 and merged.rows[0]["relevant_ids"] == ["doc-1"]


def test_operator_mistakes_are_one_line_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent.cli import main

    monkeypatch.delenv("RAGPULSE_RESULTS_FILE", raising=False)
    results = tmp_path / "results.jsonl"
    results.write_text("")
    cases = [
        (["capture", "--results-file", str(results)], "--below METRIC=VALUE"),
        (["capture", "--results-file", str(results), "--below", "faithfulness"], "METRIC=NUMBER"),
        (["capture", "--below", "faithfulness=0.5"], "give --results-file FILE, set results_file"),
        (["capture", "--results-file", str(tmp_path / "none.jsonl"), "--worst", "1"], "cannot read"),
        (["capture", "--add-to", str(tmp_path / "golden.jsonl")], "give the LABELLED items file"),
    ]
    for argv, expected in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert expected in err and len(err.strip().splitlines()) == 1, err
    # A golden set that is not all JSON objects is never rewritten (its lines would be lost).
    golden = tmp_path / "golden.jsonl"
    golden.write_text('{"id": "a", "question": "q", "reference": "r"}\n[1, 2]\n')
    labelled = tmp_path / "labelled.jsonl"
    labelled.write_text(json.dumps(captured(1, "Paris.")) + "\n")
    assert main(["capture", "--add-to", str(golden), str(labelled)]) == 2
    assert "line 2 is not a JSON object" in capsys.readouterr().err
    assert golden.read_text() == '{"id": "a", "question": "q", "reference": "r"}\n[1, 2]\n'
