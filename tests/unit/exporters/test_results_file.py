"""The local results file: OTLP/JSON lines that round-trip, rotation by size with a bounded number
of kept files, and label-queue lines (one per interaction) read back as labels."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agent.exporters.results_file import ResultsFileExporter
from agent.infra.otlp_json import from_line
from agent.model import Chunk, MetricResult, RagInteraction
from agent.trust.labels import read_label_file
from agent.trust.topic import read_results_file, results_files
from tests.support.pipeline import evaluated


def interaction(n: int) -> RagInteraction:
    return RagInteraction(
        f"{n + 1:032x}", f"{n + 1:016x}", f"question {n}",
        (Chunk("Paris is in France.", "doc-a"), Chunk("Bananas are yellow.", "doc-b")),
        "Paris.", "checkout", "/ask",
    )  # fmt: skip


RESULTS = [
    MetricResult.ok("context_precision", 1.0, judge="lexical", chunk_verdicts=(True, False)),
    MetricResult.ok("faithfulness", 0.5, judge="lexical"),
]


def write(path: Path, count: int, *, max_bytes: int, keep: int) -> None:
    async def scenario() -> None:
        exporter = ResultsFileExporter(path, max_bytes=max_bytes, keep=keep, include_text=True)
        await exporter.start()
        for n in range(count):
            await exporter.export(evaluated(interaction(n), RESULTS))
        await exporter.shutdown(1.0)

    asyncio.run(scenario())


def test_a_line_is_the_results_topic_record_in_otlp_json(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    write(path, 1, max_bytes=10**6, keep=2)
    (line,) = path.read_text().splitlines()
    span = json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert span["traceId"] == f"{1:032x}" and span["parentSpanId"] == f"{1:016x}"
    request = from_line(line, ExportTraceServiceRequest())
    (parsed,) = request.resource_spans[0].scope_spans[0].spans
    assert parsed.trace_id.hex() == f"{1:032x}" and parsed.name == "ragpulse.evaluation"


def test_rotation_keeps_at_most_keep_files_under_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    one = tmp_path / "one.jsonl"
    write(one, 1, max_bytes=10**6, keep=0)
    size = one.stat().st_size
    write(path, 10, max_bytes=3 * size, keep=2)  # three lines per file
    assert results_files(path) == [tmp_path / "results.jsonl.2", tmp_path / "results.jsonl.1", path]
    assert [len(p.read_text().splitlines()) for p in results_files(path)] == [3, 3, 1]
    rows, read, problems = read_results_file(path, marked_only=False)
    # The oldest three were dropped with the third rotated file; the rest read oldest first.
    assert read == 7 and not problems
    assert [row["query"] for row in rows] == [f"question {n}" for n in range(3, 10)]
    write(one, 3, max_bytes=size, keep=0)  # keep 0: the file starts over
    assert results_files(one) == [one] and len(one.read_text().splitlines()) == 1


def test_queue_lines_one_per_interaction_read_back_as_labels(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    write(path, 2, max_bytes=10**6, keep=1)
    rows, _, _ = read_results_file(path, marked_only=False)
    assert [row["scores"] for row in rows] == [{"context_precision": 1.0, "faithfulness": 0.5}] * 2
    assert rows[0]["documents"] == [
        {"document": "doc-a", "id": "doc-a", "useful": True},
        {"document": "doc-b", "id": "doc-b", "useful": False},
    ]
    rows[0]["labels"] = {"context_precision": 1, "faithfulness": "no"}  # a person fills one in
    queue = tmp_path / "queue.jsonl"
    queue.write_text("".join(json.dumps(row) + "\n" for row in rows))
    labels = read_label_file(queue)
    assert labels.unlabelled == 2 and not labels.problems
    assert sorted((label.metric, label.value, label.score) for label in labels.labels) == [
        ("context_precision", 1.0, 1.0),
        ("faithfulness", 0.0, 0.5),
    ]
