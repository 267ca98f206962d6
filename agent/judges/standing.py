"""What each judge measures well: its agreement with human labels per metric, declared with the
figure, the data it was measured on, and the default metric set that follows from it.

A metric's level comes from the 95% interval of its AUROC (the verdict `ragpulse calibrate`
prints, docs/trust.md): "useful" when even the low end reaches 0.7, "weak" when the interval lies
above 0.5 but not that far, "at chance" when it holds 0.5, "worse than chance" below. A judge's
level for a metric is the best level of its figures measured on held-out data (data no rule or
threshold of that judge was written on); figures on data the judge was written on are shown
beside them but decide nothing. A metric no held-out figure rates is "not measured".

The default metric set (`metrics` left unset) is the streaming metrics less those the judge
measures at chance or worse: scoring them would chart and alert on a coin. "Weak" and "not
measured" stay on: weak still orders interactions better than chance, and what is not measured
has no evidence against it (an LLM judge, context precision, which no labelled set here rates).

The figures are those of docs/judges.md, measured by benchmarks/heldout.py (ARES's
human-annotated test set, RAGTruth's held-out responses) and benchmarks/judge_agreement.py (the
shared samples); tests/unit/judges/test_standing.py ties them to that page and recomputes those on
the shared samples. The interval is Hanley and McNeil's (1982) from the AUROC and the two class
sizes, the one method that every figure allows: the held-out files are not in this repository. On
metric values that tie often it is wider than a bootstrap, so it is slow to call a metric above
chance.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

# The plain verdicts on an AUROC interval (agent/trust/agreement.py prints them for `calibrate`).
USEFUL_AUROC = 0.7
AT_CHANCE, WEAK, USEFUL, INVERTED, UNKNOWN = "at chance", "weak", "useful", "worse than chance", "unknown"
NOT_MEASURED = "not measured"
_RANK = {INVERTED: 0, AT_CHANCE: 1, UNKNOWN: 1, WEAK: 2, USEFUL: 3}
OFF_LEVELS = frozenset({AT_CHANCE, INVERTED})  # left out of the default set

# Measured by benchmarks/heldout.py on data no rule of the local judges was written on.
ARES_TEST = "ARES's human-annotated test set"
RAGTRUTH_HELD_OUT = "RAGTruth QA's held-out responses"
# The shared samples (../shared/data): benchmarks/judge_agreement.py.
ARES_EXEMPLARS = "ARES's few-shot exemplars"


def auroc_verdict(low: float | None, high: float | None) -> str:
    """The plain verdict on an AUROC interval (UNKNOWN without one: a single label class)."""
    if low is None or high is None:
        return UNKNOWN
    if high < 0.5:
        return INVERTED
    if low <= 0.5:
        return AT_CHANCE
    return USEFUL if low >= USEFUL_AUROC else WEAK


def auroc_interval(auroc: float, positives: int, negatives: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% interval of an AUROC from the class sizes alone (Hanley & McNeil 1982): the
    standard error of the Mann-Whitney statistic under their exponential approximation."""
    if positives < 1 or negatives < 1:
        raise ValueError("an AUROC needs at least one item of each class")
    a = auroc
    q1 = a / (2 - a)  # P(two good items both above one bad)
    q2 = 2 * a * a / (1 + a)  # P(one good item above two bad)
    variance = (a * (1 - a) + (positives - 1) * (q1 - a * a) + (negatives - 1) * (q2 - a * a)) / (
        positives * negatives
    )
    margin = z * math.sqrt(max(variance, 0.0))
    return max(0.0, a - margin), min(1.0, a + margin)


# What the AUROC ranks by, as docs/judges.md reports each figure.
VALUE, GRADED, WEAKEST_CLAIM = "metric value", "graded score", "weakest claim's support"


@dataclass(frozen=True, slots=True)
class Figure:
    """One measured AUROC of a judge's scores against human labels."""

    auroc: float
    data: str
    positives: int  # good items (relevant, faithful)
    negatives: int  # the problem (irrelevant, unfaithful)
    held_out: bool  # False: the judge's rules were written while reading this data
    score: str = VALUE

    @property
    def interval(self) -> tuple[float, float]:
        return auroc_interval(self.auroc, self.positives, self.negatives)

    @property
    def level(self) -> str:
        return auroc_verdict(*self.interval)

    def describe(self) -> str:
        low, high = self.interval
        items = self.positives + self.negatives
        where = "held out" if self.held_out else "not held out"
        return f"AUROC {self.auroc:.3f} [{low:.2f}, {high:.2f}] on {self.data}, {items} rows, {where}"


@dataclass(frozen=True, slots=True)
class Standing:
    """How well a judge measures one metric, and the figures that say so."""

    metric: str
    figures: tuple[Figure, ...] = ()

    @property
    def deciding(self) -> Figure | None:
        """The held-out figure with the best level (the first of equals), if any."""
        held_out = [f for f in self.figures if f.held_out]
        return max(held_out, key=lambda f: _RANK[f.level], default=None)

    @property
    def level(self) -> str:
        figure = self.deciding
        return NOT_MEASURED if figure is None else figure.level

    @property
    def on_by_default(self) -> bool:
        return self.level not in OFF_LEVELS

    def describe(self) -> str:
        """Its level and the figure behind it: "at chance (AUROC 0.469 [0.33, 0.61] on ...)"."""
        figure = self.deciding
        return self.level + ("" if figure is None else f" ({figure.describe()})")


# ARES's test set: 111 rows; 13 irrelevant contexts, 20 unfaithful answers, 20 irrelevant answers.
# ARES's exemplars: 50 rows; 14 irrelevant contexts, 30 irrelevant answers. RAGTruth: 772 held-out
# responses, 242 hallucinated; six models answer each question, so its responses are not
# independent and the interval is narrower than one resampling whole questions (faithfulness is
# useful at either width).
STANDINGS: Mapping[str, Mapping[str, Standing]] = {
    "lexical": {
        s.metric: s
        for s in (
            Standing("context_precision"),
            Standing(
                "context_relevancy",
                (Figure(0.664, ARES_TEST, 98, 13, True), Figure(0.796, ARES_EXEMPLARS, 36, 14, False)),
            ),
            Standing(
                "faithfulness",
                (
                    Figure(0.814, RAGTRUTH_HELD_OUT, 530, 242, True, WEAKEST_CLAIM),
                    Figure(0.651, ARES_TEST, 91, 20, True),
                ),
            ),
            Standing(
                "answer_relevancy",
                (Figure(0.469, ARES_TEST, 91, 20, True), Figure(0.465, ARES_EXEMPLARS, 20, 30, False)),
            ),
        )
    },
    # Its encoder was never tuned on the shared samples, so ARES's exemplars are held out for it
    # (docs/judges.md, "Local judge: embedding").
    "embedding": {
        s.metric: s
        for s in (
            Standing("context_precision"),
            Standing(
                "context_relevancy",
                (Figure(0.978, ARES_EXEMPLARS, 36, 14, True, GRADED), Figure(0.644, ARES_TEST, 98, 13, True)),
            ),
            Standing(
                "faithfulness",
                (
                    Figure(0.810, RAGTRUTH_HELD_OUT, 530, 242, True, WEAKEST_CLAIM),
                    Figure(0.638, ARES_TEST, 91, 20, True),
                ),
            ),
            Standing("answer_relevancy", (Figure(0.388, ARES_TEST, 91, 20, True),)),
        )
    },
}


def standing(judge_model: str, metric: str) -> Standing:
    """The judge's standing on `metric`; an LLM judge (any other model) is not measured here."""
    return STANDINGS.get(judge_model, {}).get(metric) or Standing(metric)


@dataclass(frozen=True, slots=True)
class MetricChoice:
    """The metrics to score and why: `off` are those the judge's default left out, `doubtful`
    those scored because the user named them although the judge measures them at chance or worse,
    `weak` those scored whose agreement is above chance but weak."""

    judge: str
    scored: tuple[Standing, ...]
    chosen_by_user: bool
    off: tuple[Standing, ...] = ()
    doubtful: tuple[Standing, ...] = ()
    weak: tuple[Standing, ...] = ()
    kept: tuple[str, ...] = ()  # scored though the default would leave them out: asked for (a gate)

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(s.metric for s in self.scored)

    @property
    def every(self) -> tuple[str, ...]:
        """The scored metrics and those left out: what to set to score them all."""
        return (*self.metrics, *(s.metric for s in self.off))

    def why(self) -> str:
        """What the set is and why, in one line (`validate-config`, the start-up log)."""
        whose = "as set" if self.chosen_by_user else f"the {self.judge} judge's default"
        if self.kept:
            whose += f", and {', '.join(self.kept)} as asked"
        parts = [f"metrics {', '.join(self.metrics)} ({whose})"]
        parts += [f"{s.metric} is off: the {self.judge} judge measures it {s.describe()}" for s in self.off]
        parts += [
            f"{s.metric} says little: the {self.judge} judge measures it {s.describe()}"
            for s in self.doubtful
        ]
        parts += [f"{s.metric} is on, {s.describe()}" for s in self.weak]
        if not self.chosen_by_user and all(s.level == NOT_MEASURED for s in self.scored):
            parts.append(f"no figure here rates the {self.judge} judge, so none is off")
        return "; ".join(parts)

    def describe(self) -> str:
        """`why()`, and how to score what the judge's default left out: one line."""
        line = self.why()
        if self.off:
            every = ",".join(self.every)
            off = ", ".join(s.metric for s in self.off)
            line += f"; to score {off}: RAGPULSE_METRICS={every} (or --set metrics={every})"
        return line


def choose_metrics(
    judge_model: str, wanted: Sequence[str] | None, candidates: Sequence[str], keep: Collection[str] = ()
) -> MetricChoice:
    """`wanted` as given (None: the user named none), else `candidates` less those the judge
    measures at chance or worse (all of them, said to be doubtful, when that would leave none),
    except those in `keep` (asked for another way: a quality gate names them)."""
    chosen_by_user = wanted is not None
    standings = [standing(judge_model, m) for m in (candidates if wanted is None else wanted)]
    off = (
        () if chosen_by_user else tuple(s for s in standings if not s.on_by_default and s.metric not in keep)
    )
    if len(off) == len(standings):  # the user's choice, or nothing else to score: scored, doubt said
        off = ()
    scored = [s for s in standings if s not in off]
    return MetricChoice(
        judge_model,
        tuple(scored),
        chosen_by_user,
        off=off,
        doubtful=tuple(s for s in scored if not s.on_by_default),
        weak=tuple(s for s in scored if s.level == WEAK),
        kept=tuple(
            s.metric for s in scored if not s.on_by_default and s.metric in keep and not chosen_by_user
        ),
    )
