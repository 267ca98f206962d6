"""What each judge declares it measures (agent/judges/standing.py): the figures are docs/judges.md's,
those on the shared samples are recomputed, the interval is checked against a bootstrap, and the
default metric set follows from the levels."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest

from agent.judges.local import LexicalJudge
from agent.judges.standing import (
    ARES_EXEMPLARS,
    ARES_TEST,
    AT_CHANCE,
    GRADED,
    NOT_MEASURED,
    RAGTRUTH_HELD_OUT,
    STANDINGS,
    USEFUL,
    VALUE,
    WEAK,
    WEAKEST_CLAIM,
    Figure,
    Standing,
    auroc_interval,
    choose_metrics,
    standing,
)
from agent.metrics import STREAMING_METRICS
from agent.trust.agreement import agreement, agreement_table, auroc, bootstrap
from tests.support.labelled import judge_file
from tests.support.repo import ROOT, SHARED_DATA

STREAMING = tuple(STREAMING_METRICS)
JUDGES_MD = (ROOT / "docs" / "judges.md").read_text()


def table_rows(after: str) -> list[list[str]]:
    """The rows of the markdown table that follows the line containing `after`, as cells without
    bold marks (the separator row left out)."""
    lines = JUDGES_MD.splitlines()
    start = next(n for n, line in enumerate(lines) if after in line)
    rows: list[list[str]] = []
    for line in lines[start + 1 :]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [cell.strip().replace("**", "") for cell in line.strip().strip("|").split("|")]
        if not set(cells[0]) <= {"-"}:
            rows.append(cells)
    return rows


def row(after: str, *first: str) -> list[str]:
    """The one row of that table whose first cells are `first`."""
    (found,) = [cells for cells in table_rows(after) if tuple(cells[: len(first)]) == first]
    return found


def numbers(cell: str) -> list[float]:
    return [float(n) for n in re.findall(r"[0-9]\.[0-9]+", cell)]


def documented(judge: str, metric: str, figure: Figure) -> float:
    """The AUROC docs/judges.md gives for this judge, metric, data and score."""
    if figure.data == ARES_TEST:
        column = {"context_relevancy": 1, "faithfulness": 2, "answer_relevancy": 3}[metric]
        value, graded = numbers(
            row("ARES human-annotated test set, AUROC of the metric value", judge)[column]
        )
        return graded if figure.score == GRADED else value
    if figure.data == RAGTRUTH_HELD_OUT:
        assert figure.score == WEAKEST_CLAIM
        cell = row("| judge | dev (388)", judge)[3]
        found = re.search(r"AUROC ([0-9.]+)", cell)
        assert found, cell
        return float(found.group(1))
    assert figure.data == ARES_EXEMPLARS
    if judge == "embedding":
        assert (metric, figure.score) == ("context_relevancy", GRADED)
        return numbers(
            row("Across the shared samples (same `--cross` protocol", "context relevancy AUROC")[2]
        )[0]
    cells = row("| data | metric | items |", "ARES exemplars", metric.replace("_", " "))
    value, graded = numbers(cells[3])  # "thr → grd": the metric value, then the graded score
    return graded if figure.score == GRADED else value


def test_every_declared_figure_is_the_one_docs_judges_md_reports() -> None:
    text = " ".join(JUDGES_MD.split())
    # The class sizes the figures are declared with, as the page describes the sets.
    assert "111 questions to a Databricks documentation assistant" in text
    assert (
        "context relevance (13 irrelevant), faithfulness (20 unfaithful) and answer relevance (20 irrelevant)"
        in text
    )
    assert "772 responses of six models, 242 with a human hallucination span" in text
    sizes = {
        (ARES_TEST, "context_relevancy"): (98, 13),
        (ARES_TEST, "faithfulness"): (91, 20),
        (ARES_TEST, "answer_relevancy"): (91, 20),
        (RAGTRUTH_HELD_OUT, "faithfulness"): (530, 242),
    }
    checked = 0
    for judge, standings in STANDINGS.items():
        assert set(standings) == set(STREAMING), judge
        for metric, declared in standings.items():
            for figure in declared.figures:
                assert figure.auroc == documented(judge, metric, figure), (judge, metric, figure)
                if (figure.data, metric) in sizes:
                    assert (figure.positives, figure.negatives) == sizes[figure.data, metric]
                checked += 1
    assert checked == 11


def test_the_page_states_each_judges_default_as_declared() -> None:
    """docs/judges.md's table of what each judge measures is the declaration, row by row."""
    table = "| judge | metric | level |"
    for judge, standings in STANDINGS.items():
        for metric, declared in standings.items():
            cells = row(table, judge, metric)
            figure = declared.deciding
            assert cells[2] == declared.level and cells[-1] == ("on" if declared.on_by_default else "off")
            if figure is None:
                assert cells[3] == "", cells
            else:
                low, high = figure.interval
                assert cells[3] == f"{figure.auroc:.3f} [{low:.2f}, {high:.2f}] on {figure.data}", cells
    llm = row(table, "an LLM (any other model)")
    assert (llm[1], llm[2], llm[-1]) == ("all four", NOT_MEASURED, "on")


def test_the_interval_agrees_with_a_bootstrap_of_the_same_auroc() -> None:
    rng = np.random.default_rng(3)
    for positives, negatives, shift in ((98, 13, 0.6), (91, 20, 0.0), (36, 14, 2.0), (530, 242, 1.2)):
        labels = np.array([1.0] * positives + [0.0] * negatives)
        scores = np.concatenate([rng.normal(shift, 1.0, positives), rng.normal(0.0, 1.0, negatives)])
        value = auroc(labels, scores)
        assert value is not None
        sampled = bootstrap(auroc, labels, scores, resamples=2000, seed=1)
        low, high = auroc_interval(value, positives, negatives)
        assert sampled.low is not None and sampled.high is not None
        assert low == pytest.approx(sampled.low, abs=0.04) and high == pytest.approx(sampled.high, abs=0.04)
        assert 0.0 <= low < value < high <= 1.0 or value == 1.0
    with pytest.raises(ValueError, match="one item of each class"):
        auroc_interval(0.7, 10, 0)


def test_levels_come_from_held_out_figures_only() -> None:
    lexical = STANDINGS["lexical"]
    assert lexical["answer_relevancy"].level == AT_CHANCE
    # Weak, not at chance: the interval of 0.664 on 111 rows (13 irrelevant) excludes 0.5.
    relevancy = lexical["context_relevancy"]
    assert relevancy.level == WEAK and relevancy.deciding is not None
    assert relevancy.deciding.data == ARES_TEST and relevancy.deciding.interval[0] > 0.5
    assert lexical["faithfulness"].level == USEFUL
    assert lexical["context_precision"].level == NOT_MEASURED
    # A figure on data the judge was written on decides nothing, however good.
    flattering = Standing("context_relevancy", (Figure(0.99, ARES_EXEMPLARS, 36, 14, False),))
    assert flattering.level == NOT_MEASURED and flattering.on_by_default
    # The best held-out figure decides: the embedding judge's encoder never saw ARES's exemplars.
    embedding = STANDINGS["embedding"]["context_relevancy"]
    assert embedding.level == USEFUL and embedding.deciding is not None
    assert embedding.deciding.data == ARES_EXEMPLARS
    assert standing("openai/gpt-4o-mini", "answer_relevancy").level == NOT_MEASURED


def test_the_default_set_leaves_out_what_the_judge_measures_at_chance() -> None:
    lexical = choose_metrics("lexical", None, STREAMING)
    assert lexical.metrics == ("context_precision", "context_relevancy", "faithfulness")
    assert [s.metric for s in lexical.off] == ["answer_relevancy"]
    assert [s.metric for s in lexical.weak] == ["context_relevancy"]
    assert not lexical.chosen_by_user and lexical.every == STREAMING
    why = lexical.why()
    assert "answer_relevancy is off: the lexical judge measures it at chance (AUROC 0.469 [0.33, 0.61]" in why
    assert "context_relevancy is on, weak (AUROC 0.664 [0.52, 0.81]" in why
    embedding = choose_metrics("embedding", None, STREAMING)
    assert embedding.metrics == ("context_precision", "context_relevancy", "faithfulness")
    assert [s.metric for s in embedding.off] == ["answer_relevancy"] and embedding.weak == ()
    llm = choose_metrics("openai/gpt-4o-mini", None, STREAMING)
    assert llm.metrics == STREAMING and llm.off == ()
    assert "no figure here rates the openai/gpt-4o-mini judge" in llm.why()


def test_a_users_choice_is_kept_exactly_and_a_metric_at_chance_in_it_is_named() -> None:
    chosen = choose_metrics("lexical", ("answer_relevancy", "faithfulness"), STREAMING)
    assert chosen.metrics == ("answer_relevancy", "faithfulness") and chosen.chosen_by_user
    assert chosen.off == () and [s.metric for s in chosen.doubtful] == ["answer_relevancy"]
    assert chosen.why().startswith(
        "metrics answer_relevancy, faithfulness (as set); answer_relevancy says little"
    )
    quiet = choose_metrics("lexical", ("faithfulness",), STREAMING)
    assert quiet.doubtful == () and quiet.why() == "metrics faithfulness (as set)"
    # Asked for another way (a gate names it), or nothing else to score: scored, the doubt said.
    kept = choose_metrics("lexical", None, STREAMING, keep={"answer_relevancy"})
    assert kept.metrics == STREAMING and [s.metric for s in kept.doubtful] == ["answer_relevancy"]
    assert kept.why().startswith(
        "metrics context_precision, context_relevancy, faithfulness, answer_relevancy (the lexical "
        "judge's default, and answer_relevancy as asked); answer_relevancy says little"
    )
    alone = choose_metrics("lexical", None, ("answer_relevancy",))
    assert alone.metrics == ("answer_relevancy",) and alone.off == () and len(alone.doubtful) == 1


@pytest.mark.skipif(not SHARED_DATA.exists(), reason="shared evaluation data not present")
def test_the_figures_on_the_shared_samples_are_recomputed() -> None:
    (path,) = (SHARED_DATA / "ares_sample").glob("*.jsonl")
    name, judged = asyncio.run(judge_file(LexicalJudge(), path))
    rows = {row.metric: row for row in agreement_table(name, judged)}
    checked = 0
    for metric, declared in STANDINGS["lexical"].items():
        for figure in declared.figures:
            if figure.data != ARES_EXEMPLARS:
                continue
            row = rows[metric]
            assert (row.positives, row.items - row.positives) == (figure.positives, figure.negatives)
            measured = row.graded_auroc if figure.score == GRADED else row.auroc
            assert figure.score in (VALUE, GRADED) and measured == pytest.approx(figure.auroc, abs=0.0005)
            # On tied metric values the interval is no narrower than calibrate's bootstrap.
            cases = [j for j in judged if j.metric == metric]
            labels = [j.label for j in cases]
            values = [1.0 if j.value is None else j.value for j in cases]
            sampled = agreement(metric, labels, values, resamples=2000).auroc
            low, high = figure.interval
            assert sampled.low is not None and sampled.high is not None
            assert low <= sampled.low and high >= sampled.high, (metric, figure.interval, sampled)
            checked += 1
    assert checked == 2
