"""RAG metrics: pure scoring functions and the judged metric classes built on them."""

from __future__ import annotations

from agent.metrics.base import Metric
from agent.metrics.context import ContextPrecision
from agent.metrics.ranking import context_precision_at_k

# Reference-free metrics the streaming agent can score, by configuration name.
STREAMING_METRICS: dict[str, type[Metric]] = {
    ContextPrecision.name: ContextPrecision,
}

__all__ = ["STREAMING_METRICS", "ContextPrecision", "Metric", "context_precision_at_k"]
