"""RAGChecker claim-level metrics from entailment verdicts.

Definitions from Ru et al., "RAGChecker: A Fine-grained Framework for Diagnosing
Retrieval-Augmented Generation" (NeurIPS 2024, https://arxiv.org/abs/2408.08067). Notation:
m is the response, gt the ground-truth answer, {c^(m)} and {c^(gt)} their claims. A claim is
"in" a text when the checker judges it entailed. A retrieved chunk is *relevant* when it entails
at least one gt claim, *irrelevant* otherwise. A response claim is *correct* when gt entails it.

- overall precision = |{c^(m) correct}| / |{c^(m)}|
- overall recall = |{c^(gt) in m}| / |{c^(gt)}|;  f1 = 2PR / (P + R), per item
- claim recall = |{c^(gt) in some chunk}| / |{c^(gt)}|
- context precision = |relevant chunks| / k
- faithfulness = |{c^(m) in some chunk}| / |{c^(m)}|
- hallucination = |{c^(m) incorrect, in no chunk}| / |{c^(m)}|
- self-knowledge = |{c^(m) correct, in no chunk}| / |{c^(m)}|
- context utilisation = |{c^(gt) in some chunk and in m}| / |{c^(gt) in some chunk}|
- relevant / irrelevant noise sensitivity = |{c^(m) incorrect, in some relevant / irrelevant
  chunk}| / |{c^(m)}|; as in RAGChecker's reference implementation, a claim found in both a
  relevant and an irrelevant chunk counts as relevant noise only (the relevant chunk is taken as
  its source), so the two sensitivities never count the same claim.

Faithfulness, hallucination and self-knowledge partition the response claims, so they sum to 1.

Undefined scores are ``None`` instead of RAGChecker's 0:
- a fraction over response claims, gt claims or chunks is ``None`` when that set is empty;
- context utilisation is ``None`` when no gt claim is found in any chunk;
- context precision is also ``None`` without gt claims, since relevance is defined by them;
- so are relevant / irrelevant noise sensitivity: a chunk is relevant when it holds a gt claim,
  so without gt claims no chunk is relevant and the split (and "incorrect") means nothing;
- with no chunks, the generator metrics (faithfulness, hallucination, self-knowledge, context
  utilisation, noise sensitivity) are ``None``: they describe how the generator used a context
  it never received. Claim recall stays defined (0.0): retrieving nothing is a real retrieval
  failure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields

__all__ = [
    "ClaimCheck",
    "RagCheckerScores",
    "aggregate_ragchecker",
    "claim_check_from_verdicts",
    "ragchecker_scores",
]

_VERDICTS: dict[str, bool] = {"entailment": True, "neutral": False, "contradiction": False}


@dataclass(frozen=True)
class ClaimCheck:
    """Entailment results of one RAG interaction, the input of :func:`ragchecker_scores`.

    Attributes:
        answer2response: Per response claim i, whether the ground-truth answer entails it.
        response2answer: Per gt claim j, whether the response entails it.
        retrieved2response: ``[i][k]``: whether chunk k entails response claim i.
        retrieved2answer: ``[j][k]``: whether chunk k entails gt claim j.
        n_chunks: Number of retrieved chunks k. Explicit because the matrices cannot tell it
            when there are no claims.

    Sequences are stored as tuples of ``bool``, so an instance is immutable and hashable.

    Raises:
        ValueError: if a result is not a boolean (or 0/1), or the matrix shapes disagree with
            the claim lists or with ``n_chunks``.
    """

    answer2response: Sequence[bool]
    response2answer: Sequence[bool]
    retrieved2response: Sequence[Sequence[bool]]
    retrieved2answer: Sequence[Sequence[bool]]
    n_chunks: int

    def __post_init__(self) -> None:
        if self.n_chunks < 0:
            raise ValueError(f"n_chunks must be >= 0, got {self.n_chunks}")
        object.__setattr__(self, "answer2response", _bools(self.answer2response))
        object.__setattr__(self, "response2answer", _bools(self.response2answer))
        object.__setattr__(self, "retrieved2response", tuple(_bools(row) for row in self.retrieved2response))
        object.__setattr__(self, "retrieved2answer", tuple(_bools(row) for row in self.retrieved2answer))
        _check_matrix("retrieved2response", self.retrieved2response, self.answer2response, self)
        _check_matrix("retrieved2answer", self.retrieved2answer, self.response2answer, self)


def _bools(values: Sequence[bool]) -> tuple[bool, ...]:
    # Accept 0/1 and numpy bools, but never let None (an unknown verdict) pass as False.
    for value in values:
        if value not in (0, 1):
            raise ValueError(f"entailment results must be booleans, got {value!r}")
    return tuple(bool(value) for value in values)


def _check_matrix(
    name: str, matrix: Sequence[Sequence[bool]], claims: Sequence[bool], check: ClaimCheck
) -> None:
    if len(matrix) != len(claims):
        raise ValueError(f"{name} has {len(matrix)} rows but there are {len(claims)} claims")
    for i, row in enumerate(matrix):
        if len(row) != check.n_chunks:
            raise ValueError(f"{name}[{i}] has {len(row)} verdicts, expected {check.n_chunks}")


@dataclass(frozen=True)
class RagCheckerScores:
    """The eleven RAGChecker metrics of one interaction, as fractions in [0, 1].

    ``None`` marks an undefined score (see the module docstring), never a failure.
    RAGChecker's own reports scale them by 100.
    """

    precision: float | None
    recall: float | None
    f1: float | None
    claim_recall: float | None
    context_precision: float | None
    faithfulness: float | None
    hallucination: float | None
    self_knowledge: float | None
    context_utilization: float | None
    noise_sensitivity_in_relevant: float | None
    noise_sensitivity_in_irrelevant: float | None


def _masked(flags: Sequence[bool], mask: Sequence[bool]) -> list[bool]:
    return [flag and keep for flag, keep in zip(flags, mask, strict=True)]


def _negated(flags: Sequence[bool]) -> list[bool]:
    return [not flag for flag in flags]


def _fraction(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def _f1(precision: float | None, recall: float | None) -> float | None:
    if precision is None or recall is None:
        return None
    if precision + recall == 0.0:
        return 0.0
    return 2 * precision * recall / (precision + recall)


def ragchecker_scores(check: ClaimCheck) -> RagCheckerScores:
    """Compute the RAGChecker metrics of one interaction from its entailment results.

    A response claim that is incorrect and entailed both by a relevant and by an irrelevant
    chunk counts as relevant noise only, as RAGChecker's reference implementation does.

    Args:
        check: Claim-level entailment results.

    Returns:
        The eleven scores; ``None`` where undefined.
    """
    n_resp = len(check.answer2response)
    n_gt = len(check.response2answer)

    relevant_chunk = [any(row[k] for row in check.retrieved2answer) for k in range(check.n_chunks)]
    irrelevant_chunk = _negated(relevant_chunk)
    gt_in_context = [any(row) for row in check.retrieved2answer]
    resp_in_context = [any(row) for row in check.retrieved2response]
    resp_in_relevant = [any(_masked(row, relevant_chunk)) for row in check.retrieved2response]
    resp_in_irrelevant = [
        any(_masked(row, irrelevant_chunk)) and not in_relevant
        for row, in_relevant in zip(check.retrieved2response, resp_in_relevant, strict=True)
    ]
    correct = check.answer2response
    incorrect = _negated(correct)
    ungrounded = _negated(resp_in_context)

    def generator(flags: Sequence[bool]) -> float | None:
        # Generator metrics describe how a context was used; without one they are undefined.
        return _fraction(sum(flags), n_resp) if check.n_chunks else None

    def noise(flags: Sequence[bool]) -> float | None:
        # Chunk relevance (and so the relevant / irrelevant split) is defined by the gt claims.
        return generator(flags) if n_gt else None

    precision = _fraction(sum(correct), n_resp)
    recall = _fraction(sum(check.response2answer), n_gt)
    return RagCheckerScores(
        precision=precision,
        recall=recall,
        f1=_f1(precision, recall),
        claim_recall=_fraction(sum(gt_in_context), n_gt),
        context_precision=_fraction(sum(relevant_chunk), check.n_chunks) if n_gt else None,
        faithfulness=generator(resp_in_context),
        hallucination=generator(_masked(incorrect, ungrounded)),
        self_knowledge=generator(_masked(correct, ungrounded)),
        context_utilization=_fraction(sum(_masked(gt_in_context, check.response2answer)), sum(gt_in_context)),
        noise_sensitivity_in_relevant=noise(_masked(incorrect, resp_in_relevant)),
        noise_sensitivity_in_irrelevant=noise(_masked(incorrect, resp_in_irrelevant)),
    )


def aggregate_ragchecker(scores: Sequence[RagCheckerScores]) -> dict[str, float | None]:
    """Mean of each metric over the items where it is defined.

    f1 is the mean of the per-item f1 values, as RAGChecker reports it, not the f1 of the mean
    precision and mean recall.

    Args:
        scores: Per-item scores.

    Returns:
        Metric name → mean in [0, 1], or ``None`` when no item defines that metric. Keys are
        the field names of :class:`RagCheckerScores`, in declaration order.
    """
    rows = [asdict(item) for item in scores]
    result: dict[str, float | None] = {}
    for field in fields(RagCheckerScores):
        defined = [row[field.name] for row in rows if row[field.name] is not None]
        result[field.name] = math.fsum(defined) / len(defined) if defined else None
    return result


def _parse_verdict(verdict: object, where: str) -> bool:
    key = verdict.strip().casefold() if isinstance(verdict, str) else None
    if key not in _VERDICTS:
        raise ValueError(f"{where}: expected 'Entailment', 'Neutral' or 'Contradiction', got {verdict!r}")
    return _VERDICTS[key]


def _parse_matrix(matrix: Sequence[Sequence[str]], name: str) -> list[list[bool]]:
    return [
        [_parse_verdict(v, f"{name}[{i}][{k}]") for k, v in enumerate(row)] for i, row in enumerate(matrix)
    ]


def claim_check_from_verdicts(
    answer2response: Sequence[str],
    response2answer: Sequence[str],
    retrieved2response: Sequence[Sequence[str]],
    retrieved2answer: Sequence[Sequence[str]],
    *,
    n_chunks: int | None = None,
) -> ClaimCheck:
    """Build a :class:`ClaimCheck` from RAGChecker's string verdicts.

    Only ``"Entailment"`` counts as entailed; ``"Neutral"`` and ``"Contradiction"`` do not.
    Matching ignores case and surrounding whitespace. Argument names and matrix layouts are
    those of RAGChecker's checking output (``retrieved2response[i][k]``: chunk k vs response
    claim i).

    Args:
        answer2response: Per response claim, verdict against the ground-truth answer.
        response2answer: Per gt claim, verdict against the response.
        retrieved2response: Per response claim, one verdict per chunk.
        retrieved2answer: Per gt claim, one verdict per chunk.
        n_chunks: Number of chunks; inferred from the matrices when omitted.

    Returns:
        The parsed entailment results.

    Raises:
        ValueError: on any other verdict (including ``None`` from a failed check: a judge
            failure is an error, not a "not entailed"), on inconsistent shapes, or when
            ``n_chunks`` is omitted and there are no claims to infer it from.
    """
    if n_chunks is None:
        first_rows = [matrix[0] for matrix in (retrieved2response, retrieved2answer) if matrix]
        if not first_rows:
            raise ValueError("n_chunks is required when there are no claims")
        n_chunks = len(first_rows[0])
    return ClaimCheck(
        answer2response=[_parse_verdict(v, f"answer2response[{i}]") for i, v in enumerate(answer2response)],
        response2answer=[_parse_verdict(v, f"response2answer[{j}]") for j, v in enumerate(response2answer)],
        retrieved2response=_parse_matrix(retrieved2response, "retrieved2response"),
        retrieved2answer=_parse_matrix(retrieved2answer, "retrieved2answer"),
        n_chunks=n_chunks,
    )
