"""The documents behind low scores: a bounded top-N per service, whatever the number of documents."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

from agent.exporters.documents import DocumentsConfig, DocumentSummary, document_key
from agent.heavy_hitters import SpaceSaving
from agent.model import Chunk, MetricResult, RagInteraction


def test_space_saving_is_exact_below_capacity_and_bounded_above_it() -> None:
    exact = SpaceSaving(10)
    for key in "aabbbc":
        exact.add(key)
    assert [(h.key, h.count, h.error) for h in exact.top(3)] == [("b", 3, 0), ("a", 2, 0), ("c", 1, 0)]

    rng = random.Random(5)
    summary, truth = SpaceSaving(200), Counter[str]()
    # A Zipf-like stream over 100k distinct keys: a few heavy ones, a long tail.
    for _ in range(150_000):
        key = f"doc-{int(rng.paretovariate(1.1)) if rng.random() < 0.5 else rng.randrange(100_000)}"
        summary.add(key)
        truth[key] += 1
    assert len(summary) == 200 and summary.total == 150_000
    held = {h.key: h for h in summary.top(200)}
    for key, count in truth.items():
        if count > summary.total / summary.capacity:
            assert key in held, key  # every key above total/capacity is held
    for key, hitter in held.items():
        assert hitter.count - hitter.error <= truth[key] <= hitter.count
    assert [h.key for h in summary.top(5)] == [k for k, _ in truth.most_common(5)]


class Gauge:
    def __init__(self) -> None:
        self.series: dict[tuple[str, str, str], float] = {}

    def set(self, service: str, verdict: str, document: str, count: float) -> None:
        self.series[(service, verdict, document)] = count

    def remove(self, service: str, verdict: str, document: str) -> None:
        del self.series[(service, verdict, document)]


def scored(service: str, docs: list[tuple[str, bool]]) -> tuple[RagInteraction, list[MetricResult]]:
    interaction = RagInteraction(
        query="q", chunks=tuple(Chunk(f"text of {d}", id=d) for d, _ in docs), response="r",
        service=service, route="r", trace_id="0" * 32, span_id="0" * 16,
    )  # fmt: skip
    verdicts = tuple(useful for _, useful in docs)
    results = [
        MetricResult.ok("context_precision", 0.5, judge="lexical", chunk_verdicts=verdicts),
        MetricResult.ok("context_relevancy", 0.5, judge="lexical", chunk_verdicts=verdicts),
        MetricResult.ok("faithfulness", 1.0, judge="lexical"),
    ]
    return interaction, results


def test_top_documents_stay_bounded_in_series_and_memory_with_100k_distinct_documents() -> None:
    gauge = Gauge()
    summary = DocumentSummary(gauge, DocumentsConfig(top_n=20, refresh_seconds=3600.0))

    async def feed() -> None:
        for i in range(50_000):
            # Two documents are retrieved all the time and judged useless; two per answer are new
            # (100k distinct documents in all), one useful, one not.
            docs = [("stale-faq", False), ("old-pricing", False), (f"doc-{i}", True), (f"rare-{i}", False)]
            await summary.export(*scored("shop", docs))

    asyncio.run(feed())
    summary.refresh()
    # Memory is the counters: capacity per (service, verdict), however many documents passed.
    assert all(len(s) <= 200 and s.heap_size() <= 4 * 200 for s in summary.summaries())
    assert len(gauge.series) <= 3 * 20
    useless = summary.top("shop", "useless")
    assert {h.key for h in useless[:2]} == {"stale-faq", "old-pricing"} and useless[0].count == 50_000
    assert summary.top("shop", "irrelevant")[0].key in {"stale-faq", "old-pricing"}
    assert len(summary.top("shop", "useful")) == 20


def test_a_chunk_without_an_id_is_named_by_its_text_and_skipped_verdicts_count_nothing() -> None:
    assert document_key("same text", None) == document_key("same text", None) != document_key("other", None)
    assert document_key("x", "kb/42") == "kb/42"
    gauge = Gauge()
    summary = DocumentSummary(gauge, DocumentsConfig(refresh_seconds=0.0))
    interaction, _ = scored("shop", [("a", True)])
    asyncio.run(summary.export(interaction, [MetricResult.skipped("context_precision", "no_response")]))
    assert gauge.series == {}
