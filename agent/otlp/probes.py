"""The probe span: how a trace started by `ragpulse probe` says which golden item it answers.

The prober makes the trace's root span (a client span around the HTTP request it sends the app,
whose `traceparent` names it) and puts the golden item on it. Any replica assembling the trace
reads the item from that span, so probe scoring needs no coordination (docs/probes.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from agent.model import AttributeValue, Probe, RagInteraction, Span

SET = "ragpulse.probe.set"  # the golden set's name (label probe_set)
ITEM = "ragpulse.probe.item"  # the item's id in the set
REFERENCE = "ragpulse.probe.reference"  # the reference answer
RELEVANT_IDS = "ragpulse.probe.relevant_ids"  # ids of the relevant documents (a string array)
FAILURE = "ragpulse.probe.failure"  # set when the request failed: timeout, http_error, no_answer
ENDPOINT = "ragpulse.probe.endpoint"  # the endpoint's name (for people reading the trace)


def probe_of(span: Span) -> Probe | None:
    """The golden item a prober's span carries, or None for every other span."""
    attributes: Mapping[str, AttributeValue] = span.convention_attributes
    name = attributes.get(SET)
    if not isinstance(name, str) or not name:
        return None
    item = attributes.get(ITEM)
    reference = attributes.get(REFERENCE)
    relevant = attributes.get(RELEVANT_IDS)
    failure = attributes.get(FAILURE)
    return Probe(
        probe_set=name,
        item=str(item) if item is not None else "",
        reference=reference if isinstance(reference, str) and reference else None,
        relevant_ids=tuple(str(v) for v in relevant) if isinstance(relevant, list) else None,
        failure=failure if isinstance(failure, str) and failure else None,
    )


# Why a probe trace was not scored, beside the prober's own reasons (labels
# ragpulse_probe_failures_total): the app's spans did not arrive within the assembly wait.
TRACE_MISSING = "trace_missing"


def mark_probe(
    interactions: Sequence[RagInteraction], probe: Probe
) -> tuple[list[RagInteraction], str | None]:
    """A finished probe trace's interactions, carrying the golden item, and why none is scored
    when so: a failed request (already counted by its reason when the prober's span came in:
    None) or TRACE_MISSING when the app's interaction never formed."""
    if probe.failure is not None:
        return [], None
    if not interactions:
        return [], TRACE_MISSING
    return [dataclasses.replace(i, probe=probe, reference=probe.reference) for i in interactions], None
