"""The documents behind low scores: a bounded top-N per service, whatever the number of documents."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest

from agent.config import DocumentsSettings
from agent.exporters.documents import DocumentSummary, document_key, document_name
from agent.exporters.result_spans import RESULT_DOCUMENTS, evaluation_request
from agent.heavy_hitters import SpaceSaving
from agent.model import Chunk, MetricResult, RagInteraction
from tests.support.pipeline import evaluated


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


def scored(
    service: str, docs: list[tuple[str, bool]], sources: list[str | None] | None = None
) -> tuple[RagInteraction, list[MetricResult]]:
    """An interaction of `docs` (id, useful), its chunks from `sources` (metadata `source`) if given."""
    chunks = tuple(
        Chunk(f"text of {d}", id=d, metadata=(("source", sources[i]),) if sources and sources[i] else ())
        for i, (d, _) in enumerate(docs)
    )
    interaction = RagInteraction(
        query="q", chunks=chunks, response="r",
        service=service, route="r", trace_id="0" * 32, span_id="0" * 16,
    )  # fmt: skip
    verdicts = tuple(useful for _, useful in docs)
    results = [
        MetricResult.ok("context_precision", 0.5, judge="lexical", chunk_verdicts=verdicts),
        MetricResult.ok("context_relevancy", 0.5, judge="lexical", chunk_verdicts=verdicts),
        MetricResult.ok("faithfulness", 1.0, judge="lexical"),
    ]
    return interaction, results


@pytest.mark.parametrize("key", [None, "source"])
def test_top_documents_stay_bounded_in_series_and_memory_with_100k_distinct_documents(
    key: str | None,
) -> None:
    """By id, or by source (documents_key): 100k distinct names pass, memory and series stay flat."""
    gauge = Gauge()
    summary = DocumentSummary(gauge, DocumentsSettings(top_n=20, key=key), refresh_seconds=3600.0)
    heavy = ("stale-faq.md", "old-pricing.pdf")

    async def feed() -> None:
        for i in range(50_000):
            # Two documents are retrieved all the time and judged useless; two per answer are new
            # (100k distinct documents in all), one useful, one not. By source, every chunk has a
            # new id: the heavy ones are heavy by their source only.
            if key is None:
                docs = [(heavy[0], False), (heavy[1], False), (f"doc-{i}", True), (f"rare-{i}", False)]
                await summary.export(evaluated(*scored("shop", docs)))
            else:
                docs = [(f"c{i}-{n}", useful) for n, useful in enumerate((False, False, True, False))]
                sources = [*heavy, f"kb/doc-{i}.md", f"kb/rare-{i}.md"]
                await summary.export(evaluated(*scored("shop", docs, sources)))

    asyncio.run(feed())
    summary.refresh()
    # Memory is the counters: capacity per (service, verdict), however many documents passed.
    assert all(len(s) <= 200 and s.heap_size() <= 4 * 200 for s in summary.summaries())
    assert len(gauge.series) <= 3 * 20
    useless = summary.top("shop", "useless")
    assert {h.key for h in useless[:2]} == set(heavy) and useless[0].count == 50_000
    assert summary.top("shop", "irrelevant")[0].key in heavy
    assert len(summary.top("shop", "useful")) == 20
    assert {document for _, _, document in gauge.series} >= set(heavy)


def test_documents_are_named_by_the_configured_key_else_their_id_else_their_text() -> None:
    sourced = Chunk("text", id="kb/42#3", metadata=(("source", "kb/42.md"),))
    assert document_name(sourced, "source") == "kb/42.md"
    assert document_name(sourced, None) == "kb/42#3"  # no key configured: the id
    assert document_name(sourced, "url") == "kb/42#3"  # without that key: the id
    assert document_name(Chunk("text"), "source") == document_key("text", None)
    assert document_name(Chunk("t", metadata=(("source", "s" * 500),)), "source") == "s" * 200

    gauge = Gauge()
    summary = DocumentSummary(gauge, DocumentsSettings(key="source"), refresh_seconds=0.0)
    # Two chunks of one file count for it twice; a chunk without a source counts under its id.
    docs = [("a#1", False), ("a#2", False), ("b#1", True)]
    asyncio.run(summary.export(evaluated(*scored("shop", docs, ["handbook/a.md", "handbook/a.md", None]))))
    assert gauge.series[("shop", "useless", "handbook/a.md")] == 2
    assert gauge.series[("shop", "useful", "b#1")] == 1
    assert ("shop", "useless", "a#1") not in gauge.series


def test_results_list_each_document_by_name_id_source_and_verdicts() -> None:
    docs = [("a#1", False), ("b#1", True), ("c#1", True)]
    interaction, results = scored("shop", docs, ["handbook/a.md", "handbook/b.md", None])

    def attributes(**options: str | None) -> dict[str, object]:
        request = evaluation_request(interaction, results, now_ns=1, **options)  # type: ignore[arg-type]
        (span,) = request.resource_spans[0].scope_spans[0].spans
        return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in span.attributes}

    found = attributes(documents_key="source")
    assert {k: v for k, v in found.items() if k.startswith("ragpulse.documents.")} == {
        "ragpulse.documents.0.document": "handbook/a.md",
        "ragpulse.documents.0.id": "a#1",
        "ragpulse.documents.0.metadata.source": "handbook/a.md",
        "ragpulse.documents.0.useful": False,
        "ragpulse.documents.0.relevant": False,
        "ragpulse.documents.1.document": "handbook/b.md",
        "ragpulse.documents.1.id": "b#1",
        "ragpulse.documents.1.metadata.source": "handbook/b.md",
        "ragpulse.documents.1.useful": True,
        "ragpulse.documents.1.relevant": True,
        "ragpulse.documents.2.document": "c#1",  # no source: named by its id
        "ragpulse.documents.2.id": "c#1",
        "ragpulse.documents.2.useful": True,
        "ragpulse.documents.2.relevant": True,
    }
    # Without a key, documents are named by id and no metadata is written.
    plain = attributes()
    assert plain["ragpulse.documents.0.document"] == "a#1"
    assert not any(".metadata." in key for key in plain)
    # Bounded: an interaction with many chunks lists the first RESULT_DOCUMENTS.
    many = [(f"d{i}", True) for i in range(RESULT_DOCUMENTS + 50)]
    interaction, results = scored("shop", many)
    names = [k for k in attributes() if k.endswith(".document")]
    assert len(names) == RESULT_DOCUMENTS


def test_a_chunk_without_an_id_is_named_by_its_text_and_skipped_verdicts_count_nothing() -> None:
    assert document_key("same text", None) == document_key("same text", None) != document_key("other", None)
    assert document_key("x", "kb/42") == "kb/42"
    gauge = Gauge()
    summary = DocumentSummary(gauge, DocumentsSettings(), refresh_seconds=0.0)
    interaction, _ = scored("shop", [("a", True)])
    asyncio.run(
        summary.export(evaluated(interaction, [MetricResult.skipped("context_precision", "no_response")]))
    )
    assert gauge.series == {}
