"""Which of the lexical judge's claim checks carry over between labelled sets: an ablation.

    python benchmarks/judge_ablation.py ../shared/data [--ragtruth RAGTRUTH_QA_JSONL]

The lexical judge's claim support (agent/judges/local.py) is content-word coverage plus three
rules: a number the evidence lacks caps the score at 0.25, each capitalised name it lacks halves
it, and words about the sources ("passage", "based") are no content. Each row switches rules off,
or replaces the bag of all evidence words by the best window of consecutive evidence sentences
(a claim whose words are scattered over the evidence is less supported than one found in one
place). Columns per labelled set (RAGTruth QA, ARES, HaluEval QA, as in judge_agreement.py
--cross): hallucination F1 at the documented rule (s 0.5, r 1.0), F1 at the rule chosen on the two
other sets (leave one set out), and the AUROC of the weakest claim's support. With --ragtruth (the
public file benchmarks/heldout.py reads), a fourth column gives the same on the held-out RAGTruth
dev half (388 responses to questions the rules were not written on), its "others" rule chosen on
the three shared sets.

The first row is the judge's `support_score`; the others reuse its tokenisation and claim
splitting and rebuild only the scoring, so the production judge carries no switches.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent import text as txt
from agent.judges import local
from agent.trust.agreement import auroc, problem_f1
from benchmarks.common.heldout import load_ragtruth
from benchmarks.common.labelled import SETS, SHARE_GRID, SUPPORT_GRID, faithful
from benchmarks.harness import Benchmark
from tests.support.labelled import load_cases

# (claim, evidence text, question) -> support in [0, 1]
Scorer = Callable[[str, str, str], float]


def support(
    *,
    numbers: bool = True,
    names: bool = True,
    meta: bool = True,
    window: int = 0,
    question_given: bool = False,
) -> Scorer:
    def score(claim: str, evidence_text: str, question: str) -> float:
        claim_words = txt.content_words(txt.SOURCE_REFERENCE.sub(" ", claim))
        if meta:
            claim_words -= txt.META_WORDS
        if not claim_words:
            return 1.0
        evidence = local.Evidence.of(evidence_text)
        # A claim restating the question ("To fry chicken in the oven, ...") takes its words as given.
        given = evidence.words | txt.content_words(question) if question_given else evidence.words
        value = local.coverage(claim_words, given)
        if window:
            sentence_words = [txt.content_words(s) for s in txt.sentences(evidence_text)] or [set()]
            spans = range(max(len(sentence_words) - window + 1, 1))
            value = max(
                local.coverage(claim_words, set().union(*sentence_words[i : i + window])) for i in spans
            )
        if numbers and txt.numbers(claim) - evidence.numbers:
            value = min(value, 0.25)
        if names:
            value *= 0.5 ** len(txt.names(claim) - evidence.words)
        return value

    return score


VARIANTS: dict[str, Scorer] = {
    # The judge's own function, so the first row is the judge itself, not a rebuilt copy of it.
    "the judge (all rules)": lambda claim, text, _: local.support_score(claim, text),
    "without the number rule": support(numbers=False),
    "without the name rule": support(names=False),
    "without numbers and names": support(numbers=False, names=False),
    "plain coverage (no rules)": support(numbers=False, names=False, meta=False),
    "best window of 1 sentence": support(window=1),
    "best window of 3 sentences": support(window=3),
    "the question's words as given": support(question_given=True),
}


HELD_OUT = "RAGTruth dev"


def claim_scores(
    scorer: Scorer, data: Path, ragtruth: Path | None
) -> dict[str, tuple[list[int], list[list[float]]]]:
    sets = {
        name: [c for c in load_cases(data / relative)[1] if c.metric == "faithfulness"]
        for name, relative in SETS.items()
    }
    if ragtruth is not None:
        sets[HELD_OUT] = load_ragtruth(ragtruth)["dev"]
    scored = {}
    for name, cases in sets.items():
        scored[name] = (
            [c.label for c in cases],
            [
                [scorer(claim, "\n".join(c.chunks), c.query) for claim in txt.claims(c.response)]
                for c in cases
            ],
        )
    return scored


def f1(labels: Sequence[int], scores: Sequence[Sequence[float]], rule: tuple[float, float]) -> float:
    return problem_f1(labels, [faithful(s, *rule) for s in scores]) or 0.0


def main() -> None:
    bench = Benchmark(__doc__)
    parser = bench.parser
    parser.add_argument("data", type=Path, help="the shared data directory (../shared/data)")
    parser.add_argument("--ragtruth", type=Path, help="FaithJudge's eval_data/ragtruth_qa.jsonl (held out)")
    args = bench.parse()
    grid = [(s, r) for s in SUPPORT_GRID for r in SHARE_GRID]
    names = list(SETS) + ([HELD_OUT] if args.ragtruth else [])
    bench.line(f"{'variant':<28}" + "".join(f"{n + ': doc / others / AUROC':>36}" for n in names))
    for label, scorer in VARIANTS.items():
        scored = claim_scores(scorer, args.data, args.ragtruth)
        cells = []
        for target in names:
            others = [n for n in SETS if n != target]
            rule = max(grid, key=lambda g: sum(f1(*scored[n], g) for n in others))
            labels, scores = scored[target]
            weakest = [min(s, default=1.0) for s in scores]
            cells.append(
                f"{f1(labels, scores, (0.5, 1.0)):.3f} / {f1(labels, scores, rule):.3f} / "
                f"{auroc(labels, weakest) or 0.0:.3f}"
            )
        bench.line(f"{label:<28}" + "".join(f"{c:>36}" for c in cells))
        bench.record(label, dict(zip(names, cells, strict=True)))
    bench.line(
        "doc: F1 at the documented rule (0.5, 1.0); others: F1 at the rule chosen on the other shared samples"
    )

    bench.finish()


if __name__ == "__main__":
    main()
