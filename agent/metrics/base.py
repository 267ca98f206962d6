"""The Metric contract: ask a Judge typed questions, turn verdicts into a score with pure math.

A metric holds no per-call state, so one instance serves any number of concurrent interactions.
"""

from __future__ import annotations

from typing import Protocol

from agent.judges.base import Judge
from agent.model import MetricResult, RagInteraction


class Metric(Protocol):
    name: str
    # The judge question kinds it asks (agent.judges.base); lets the evaluator combine calls.
    questions: frozenset[str]

    async def evaluate(self, interaction: RagInteraction, judge: Judge) -> MetricResult:
        """Score one interaction. Undefined scores are SKIPPED; judge failures are ERROR results."""
        ...
