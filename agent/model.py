"""The nouns of ragpulse: what flows between the pipeline's stages.

Read this module first. Everything here is an immutable value object; stages pass them along and
never mutate them, so one object can be shared by concurrent tasks without locks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

# An OTLP AnyValue as Python sees it: str, bool, int, float, bytes, a list of these, or a mapping.
AttributeValue = (
    str | bool | int | float | bytes | list["AttributeValue"] | dict[str, "AttributeValue"] | None
)


@dataclass(frozen=True, slots=True)
class Resource:
    """The entity that produced spans (an OTLP Resource): usually one service instance."""

    attributes: Mapping[str, AttributeValue]

    @property
    def service_name(self) -> str:
        value = self.attributes.get("service.name")
        return value if isinstance(value, str) and value else "unknown_service"


@dataclass(frozen=True, slots=True)
class SpanEvent:
    name: str
    time_unix_nano: int
    attributes: Mapping[str, AttributeValue]


# OTLP Status.StatusCode values.
STATUS_UNSET = 0
STATUS_OK = 1
STATUS_ERROR = 2


@dataclass(frozen=True, slots=True)
class Span:
    """One decoded OTLP span; ids are lowercase hex, as in W3C trace context."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    start_time_unix_nano: int
    end_time_unix_nano: int
    attributes: Mapping[str, AttributeValue]
    resource: Resource
    events: tuple[SpanEvent, ...] = ()
    scope_name: str = ""
    # The attributes the conventions read (keys under `agent.otlp.conventions.KNOWN_PREFIXES`),
    # converted when the span is decoded; a subset of `attributes`, which decodes the rest lazily.
    # None when the span was built without it: readers fall back to `attributes`.
    known: Mapping[str, AttributeValue] | None = None
    # The OTLP span status: STATUS_UNSET, STATUS_OK or STATUS_ERROR (a failed operation).
    status: int = 0

    @property
    def failed(self) -> bool:
        return self.status == STATUS_ERROR

    @property
    def convention_attributes(self) -> Mapping[str, AttributeValue]:
        return self.known if self.known is not None else self.attributes


@dataclass(frozen=True, slots=True)
class Chunk:
    """One retrieved passage, in the rank order the application used it.

    `metadata`: (key, value) pairs of the document's metadata (its source, file name, URL...),
    read from the span only for the keys ragpulse is configured to use (`documents_key`) and
    bounded by the conventions (agent/otlp/conventions: scalar values as text, cut short).
    """

    content: str
    id: str | None = None
    score: float | None = None
    metadata: tuple[tuple[str, str], ...] = ()

    def meta(self, key: str) -> str | None:
        """The document's metadata value under `key`, if the span carried one."""
        for name, value in self.metadata:
            if name == key:
                return value
        return None


@dataclass(frozen=True, slots=True)
class Turn:
    """One earlier message of the conversation an answer belongs to, as the answering model saw it.

    `role` is "user" or "assistant"; `content` is cut to a bounded size by the assembler.
    """

    role: str
    content: str


# How a follow-up's earlier turns travel with its question to a judge: the judge's questions take
# one query string, and everything that changes a verdict must be in that string (the verdict
# cache keys on it, the redacting judge redacts it). Record and unit separators cannot occur in
# span text the assembler hands over (it replaces them), so the encoding cannot be forged.
_RECORD = "\x1e"
_UNIT = "\x1f"
_QUESTION = "question"


def conversation_query(query: str, earlier_turns: Sequence[Turn]) -> str:
    """The text a judge is asked about: the query alone, or the earlier turns and the query."""
    if not earlier_turns:
        return query
    records = [
        f"{_RECORD}{without_separators(turn.role)}{_UNIT}{without_separators(turn.content)}"
        for turn in earlier_turns
    ]
    return "".join(records) + f"{_RECORD}{_QUESTION}{_UNIT}{without_separators(query)}"


def split_conversation(text: str) -> tuple[str, tuple[Turn, ...]]:
    """The inverse of `conversation_query`: (the question, the earlier turns)."""
    if not text.startswith(_RECORD):
        return text, ()
    turns: list[Turn] = []
    question = ""
    for record in text[1:].split(_RECORD):
        role, _, content = record.partition(_UNIT)
        if role == _QUESTION:
            question = content
        else:
            turns.append(Turn(role, content))
    return question, tuple(turns)


def without_separators(text: str) -> str:
    """Span text made safe for `conversation_query`."""
    if _RECORD in text or _UNIT in text:
        return text.replace(_RECORD, " ").replace(_UNIT, " ")
    return text


def relevance_query(text: str) -> str:
    """What a local judge matches relevance against: the earlier user turns, then the question
    (a follow-up such as "and how much does it cost?" names its subject in an earlier turn)."""
    question, turns = split_conversation(text)
    if not turns:
        return question
    return "\n".join([*(t.content for t in turns if t.role == "user"), question])


@dataclass(frozen=True, slots=True)
class Probe:
    """The golden item a probe trace answers, as the prober's client span in that trace carries
    it (agent/probes/attributes.py). An interaction carrying one is scored apart from production:
    always, with the reference-based metrics too, into the probe series only.

    `failure` is the prober's reason when the request itself failed (timeout, http_error,
    no_answer): such a trace is counted, never scored.
    """

    probe_set: str
    item: str
    reference: str | None = None
    relevant_ids: tuple[str, ...] | None = None
    failure: str | None = None


@dataclass(frozen=True, slots=True)
class RagInteraction:
    """One question answered with retrieved context: the unit that ragpulse scores.

    `span_id` names the span the scores belong to (the LLM call, or the single span that carried
    everything), so results can be attached beside the trace in a tracing UI.
    """

    trace_id: str
    span_id: str
    query: str
    chunks: tuple[Chunk, ...]
    response: str | None
    service: str
    route: str
    reference: str | None = None
    end_time_unix_nano: int = 0
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    # The conversation (`session.id`, `gen_ai.conversation.id`) and the end user, when the app's
    # instrumentation names them.
    session_id: str | None = None
    user_id: str | None = None
    # Agents (docs/intake.md, "Agents"): the searches the agent ran for this answer, by their own
    # queries, in order; the earlier turns of the conversation the answering call saw (bounded);
    # and counts for per-answer signals: searches run (retrievals and tool calls that fed the
    # answer), those that returned nothing, tool calls that failed. A chain has one search.
    sub_queries: tuple[str, ...] = ()
    earlier_turns: tuple[Turn, ...] = ()
    searches: int = 0
    empty_searches: int = 0
    tool_errors: int = 0
    # Set when the trace was started by `ragpulse probe` (docs/probes.md); `reference` is then
    # the golden item's reference answer.
    probe: Probe | None = None

    @property
    def interaction_id(self) -> str:
        return f"{self.trace_id}:{self.span_id}"

    @property
    def conversation_id(self) -> str | None:
        return self.session_id

    @property
    def judged_query(self) -> str:
        """The query as judges of relevance see it: with the earlier turns of a follow-up."""
        return conversation_query(self.query, self.earlier_turns)


@dataclass(frozen=True, slots=True)
class SamplingDecision:
    """Whether an interaction is judged, and why. `uniform` is True when the random rate alone
    would have kept it (not only a keep rule): a uniform sample of traffic, which is what
    estimates of the true mean may use (agent/trust)."""

    keep: bool
    reason: str
    uniform: bool = True


@dataclass(frozen=True, slots=True)
class Verdict:
    """A judge's answer to one yes/no question about one item (a chunk, a statement, a claim).

    `score` is the judge's graded confidence in "yes", in [0, 1], when it has one: the local
    judge's support or overlap, the embedding judge's similarity, an LLM's probability of its
    answer token when the provider returns log-probabilities. None means the verdict is binary.
    Metrics average `confidence`, so binary verdicts give exactly the thresholded scores.
    """

    value: bool
    score: float | None = None
    reason: str = ""

    @property
    def confidence(self) -> float:
        """What a metric averages: the graded score (clamped to [0, 1]) when the judge gave one,
        else 1.0 for yes and 0.0 for no."""
        if self.score is None:
            return 1.0 if self.value else 0.0
        return min(max(self.score, 0.0), 1.0)


# What a custom criterion may read of an interaction ("context" is the retrieved chunks).
CRITERION_INPUTS = ("query", "response", "context", "reference")
# A criterion's name is a Prometheus label value and a YAML/JSON key: lower-case words only.
_CRITERION_NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")


@dataclass(frozen=True)
class Criterion:
    """An operator's own metric (the `criteria` setting, docs/criteria.md): a question the LLM
    judge answers about what the criterion `reads` of an interaction, on a `binary` scale (0 / 1)
    or a `1-5` scale whose points the `anchors` describe.

    Scores are "higher is better" everywhere in ragpulse (drift and alerts watch for drops): a
    1-5 answer s scores (s - 1) / 4, a binary one 0 or 1, and a criterion whose question is asked
    the other way round (`higher_is_better: false`, e.g. "is the response rude?") scores
    1 - that. An invalid definition raises ValueError with one line naming the criterion.
    """

    name: str
    question: str
    reads: tuple[str, ...] = ("query", "response")
    scale: str = "binary"
    anchors: dict[int, str] = field(default_factory=dict, hash=False)
    higher_is_better: bool = True

    def __post_init__(self) -> None:
        label = f"criterion {self.name!r}"
        if not _CRITERION_NAME.match(self.name):
            raise ValueError(
                f"{label}: a name is lower-case letters, digits and '_', starting with a letter "
                "(at most 48 characters; it becomes the metric label)"
            )
        if not self.question.strip():
            raise ValueError(f"{label}: the question is empty")
        unknown = [r for r in self.reads if r not in CRITERION_INPUTS]
        if unknown or not self.reads or len(set(self.reads)) != len(self.reads):
            raise ValueError(
                f"{label}: reads must name each of {', '.join(CRITERION_INPUTS)} at most once "
                f"(at least one), got {list(self.reads)}"
            )
        if self.scale not in ("binary", "1-5"):
            raise ValueError(f"{label}: scale must be binary or 1-5, got {self.scale!r}")
        if self.scale == "binary" and self.anchors:
            raise ValueError(f"{label}: anchors describe the points of a 1-5 scale; a binary one has none")
        if self.scale == "1-5":
            if not {1, 5} <= set(self.anchors) or not set(self.anchors) <= {1, 2, 3, 4, 5}:
                raise ValueError(
                    f"{label}: a 1-5 scale needs anchors for 1 and 5 (and may describe 2, 3, 4), "
                    f"got {sorted(self.anchors)}"
                )
            if not all(text.strip() for text in self.anchors.values()):
                raise ValueError(f"{label}: an anchor is empty")
        # Kept in CRITERION_INPUTS order, so the same criterion written two ways is one definition.
        object.__setattr__(self, "reads", tuple(r for r in CRITERION_INPUTS if r in self.reads))

    @property
    def points(self) -> tuple[int, ...]:
        """The answers the judge may give."""
        return (0, 1) if self.scale == "binary" else (1, 2, 3, 4, 5)

    @property
    def definition(self) -> str:
        """Everything that changes what the judge is asked: part of every cache key of its
        verdicts, so editing a criterion invalidates them."""
        return json.dumps(
            [self.name, self.question, list(self.reads), self.scale, sorted(self.anchors.items())]
        )


class Outcome(StrEnum):
    OK = "ok"
    SKIPPED = "skipped"  # the score is undefined for this input (e.g. no chunks)
    ERROR = "error"  # the judge failed; never reported as a score


@dataclass(frozen=True, slots=True)
class MetricResult:
    """The result of one metric on one interaction. `value` is None unless outcome is OK.
    `reason`: why it was skipped or failed; on a score, what the judge answered where the value
    alone does not say it (a custom criterion's "answered 2 of 5")."""

    metric: str
    value: float | None
    outcome: Outcome
    reason: str = ""
    judge: str | None = None
    prompt_version: str | None = None
    # Per chunk, in rank order, the judge's verdict behind the score (context_precision: useful
    # for the answer; context_relevancy: holds a relevant statement); None where it gave none.
    # Feeds the summary of the documents behind low scores (agent/exporters/documents.py).
    chunk_verdicts: tuple[bool | None, ...] | None = None

    def __post_init__(self) -> None:
        if (self.outcome is Outcome.OK) != (self.value is not None):
            raise ValueError(f"{self.metric}: outcome {self.outcome} with value {self.value!r}")

    @classmethod
    def ok(
        cls,
        metric: str,
        value: float,
        *,
        judge: str,
        prompt_version: str | None = None,
        chunk_verdicts: tuple[bool | None, ...] | None = None,
        reason: str = "",
    ) -> MetricResult:
        return cls(
            metric,
            value,
            Outcome.OK,
            reason=reason,
            judge=judge,
            prompt_version=prompt_version,
            chunk_verdicts=chunk_verdicts,
        )

    @classmethod
    def skipped(cls, metric: str, reason: str) -> MetricResult:
        return cls(metric, None, Outcome.SKIPPED, reason=reason)

    @classmethod
    def error(cls, metric: str, reason: str, *, judge: str | None = None) -> MetricResult:
        return cls(metric, None, Outcome.ERROR, reason=reason, judge=judge)


@dataclass(frozen=True, slots=True)
class Spend:
    """Judge calls and USD spent (by this process, or in a minute across replicas)."""

    calls: float
    usd: float


@dataclass(frozen=True, slots=True)
class Mark:
    """A decision taken once about an evaluated interaction, for every exporter to read (e.g.
    drawn for human labels, agent/trust/label_sampling.py): `attributes` go on published
    results, `weight` is what the decision weighs (a label's inverse inclusion probability)."""

    name: str
    attributes: Mapping[str, str | float | bool]
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class Evaluated:
    """One evaluated interaction, as every exporter and observer receives it: what was scored,
    why it was kept, and the marks decided for it before export."""

    interaction: RagInteraction
    results: Sequence[MetricResult]
    decision: SamplingDecision
    marks: tuple[Mark, ...] = ()

    def mark(self, name: str) -> Mark | None:
        return next((mark for mark in self.marks if mark.name == name), None)

    def mark_attributes(self) -> dict[str, str | float | bool]:
        return {key: value for mark in self.marks for key, value in mark.attributes.items()}
