"""The nouns of ragpulse: what flows between the pipeline's stages.

Read this module first. Everything here is an immutable value object; stages pass them along and
never mutate them, so one object can be shared by concurrent tasks without locks.
"""

from __future__ import annotations

from collections.abc import Mapping
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

    @property
    def convention_attributes(self) -> Mapping[str, AttributeValue]:
        return self.known if self.known is not None else self.attributes


@dataclass(frozen=True, slots=True)
class Chunk:
    """One retrieved passage, in the rank order the application used it."""

    content: str
    id: str | None = None
    score: float | None = None


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
    # The conversation and the end user, when the app's instrumentation names them.
    session_id: str | None = None
    user_id: str | None = None

    @property
    def interaction_id(self) -> str:
        return f"{self.trace_id}:{self.span_id}"


@dataclass(frozen=True, slots=True)
class SamplingDecision:
    keep: bool
    reason: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """A judge's answer to one yes/no question about one item (a chunk, a statement, a claim).

    `score` is the judge's graded confidence in "yes" when it has one (local judges do); it lets
    offline agreement studies compute AUROC without changing the binary verdict the metric uses.
    """

    value: bool
    score: float | None = None
    reason: str = ""


class Outcome(StrEnum):
    OK = "ok"
    SKIPPED = "skipped"  # the score is undefined for this input (e.g. no chunks)
    ERROR = "error"  # the judge failed; never reported as a score


@dataclass(frozen=True, slots=True)
class MetricResult:
    """The result of one metric on one interaction. `value` is None unless outcome is OK."""

    metric: str
    value: float | None
    outcome: Outcome
    reason: str = ""
    judge: str | None = None
    prompt_version: str | None = None

    def __post_init__(self) -> None:
        if (self.outcome is Outcome.OK) != (self.value is not None):
            raise ValueError(f"{self.metric}: outcome {self.outcome} with value {self.value!r}")

    @classmethod
    def ok(cls, metric: str, value: float, *, judge: str, prompt_version: str | None = None) -> MetricResult:
        return cls(metric, value, Outcome.OK, judge=judge, prompt_version=prompt_version)

    @classmethod
    def skipped(cls, metric: str, reason: str) -> MetricResult:
        return cls(metric, None, Outcome.SKIPPED, reason=reason)

    @classmethod
    def error(cls, metric: str, reason: str, *, judge: str | None = None) -> MetricResult:
        return cls(metric, None, Outcome.ERROR, reason=reason, judge=judge)
