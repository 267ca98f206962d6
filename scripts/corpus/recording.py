"""What every corpus app shares: the OTLP-to-file exporter, the expectations, the versions.

Needs only `opentelemetry-sdk` and `opentelemetry-exporter-otlp-proto-common` besides the stack.

    rec = Recorder("my-stack", out_dir)            # out_dir = tests/fixtures/agents/my-stack
    Instrumentor().instrument(tracer_provider=rec.provider)
    server = FakeLLM(ScenarioPolicy()).start()
    for scenario in SCENARIOS:
        earlier = []
        for number, turn in enumerate(scenario.turns):
            mark = server.mark()
            response = ...run the framework on turn.question...
            rec.answer(scenario, number, turn.question, response, server.since(mark), earlier)
            earlier += [["user", turn.question], ["assistant", response]]
        rec.flush()                                # one NNNN.pb per scenario (or more)
    rec.write(framework=version("langchain"), instrumentation=version("openinference-..."),
              layout="openinference attributes", notes="...")

- `Recorder.provider` is a real SDK TracerProvider (BatchSpanProcessor) whose exporter writes
  each export batch as a serialized `ExportTraceServiceRequest` (the real OTLP encoder,
  `encode_spans`) to `out_dir/otlp/NNNN.pb`; old `.pb` files are removed first.
- `turn_expectation(entries, response)` computes (chunks, sub_queries) of a turn from the fake
  server's log entries of that turn: the answering call is the last request whose reply holds
  the response text (or `answering` picks it); its chunks are the knowledge-base documents
  found verbatim in that request, in order of first appearance, each once. For the Responses
  API the request is read together with the earlier requests of the same turn it chains to by
  `previous_response_id` (server-side state: that text reached the model too); the earlier
  turns it chains to are not: they are not part of this turn's calls. The sub-queries are the
  searches the model asked for in this turn, in order.
- `Recorder.enable_logs()` adds a LoggerProvider writing `out_dir/otlp-logs/NNNN.pb`, for
  instrumentations whose message content goes to OTLP log records rather than spans.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from scenarios import ALL_DOCUMENTS, Scenario


class FileSpanExporter(SpanExporter):
    """Writes each export batch as one OTLP protobuf request file, numbered in order."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.glob("*.pb"):
            old.unlink()
        self.count = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if spans:
            path = self.directory / f"{self.count:04d}.pb"
            path.write_bytes(encode_spans(spans).SerializeToString())
            self.count += 1
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _log_exporter(directory: Path) -> Any:
    """Like FileSpanExporter, for OTLP log records (ExportLogsServiceRequest files)."""
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
    from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult

    class FileLogExporter(LogRecordExporter):
        def __init__(self) -> None:
            directory.mkdir(parents=True, exist_ok=True)
            for old in directory.glob("*.pb"):
                old.unlink()
            self.count = 0

        def export(self, batch: Sequence[Any]) -> Any:
            if batch:
                (directory / f"{self.count:04d}.pb").write_bytes(encode_logs(batch).SerializeToString())
                self.count += 1
            return LogRecordExportResult.SUCCESS

        def shutdown(self) -> None:
            pass

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    return FileLogExporter()


def version(*packages: str) -> str:
    """`name==version` of installed distributions, comma-joined."""
    return ", ".join(f"{p}=={metadata.version(p)}" for p in packages)


def _request_text(body: dict[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=False)


def documents_in(text: str) -> list[str]:
    """Knowledge-base documents found verbatim in a text, in order of first appearance."""
    found = [(text.find(d), d) for d in ALL_DOCUMENTS if d in text]
    return [d for _, d in sorted(found)]


def _reply_has(entry: dict[str, Any], response: str) -> bool:
    """The reply holds the response (a ReAct "Answer:" line) or the response holds the reply."""
    text, wanted = (entry["reply"]["text"] or "").strip(), response.strip()
    return bool(wanted and text) and (wanted in text or text in wanted)


def turn_expectation(
    entries: list[dict[str, Any]],
    response: str,
    answering: Callable[[dict[str, Any]], bool] | None = None,
) -> tuple[list[str], list[str]]:
    """(chunks, sub_queries) of one turn from the fake server's log entries of that turn."""
    if not entries:
        raise ValueError("no model call in this turn")
    pick = answering or (lambda e: _reply_has(e, response))
    chosen = [e for e in entries if pick(e)]
    if not chosen:
        raise ValueError(f"no model call of the turn answered {response!r}")
    answer = chosen[-1]
    bodies = [answer["body"]]
    if answer["api"] == "responses":
        by_id = {e.get("response_id"): e for e in entries}
        previous = answer.get("previous_response_id")
        while previous in by_id:
            bodies.insert(0, by_id[previous]["body"])
            previous = by_id[previous].get("previous_response_id")
    chunks: list[str] = []
    for body in bodies:
        chunks += [d for d in documents_in(_request_text(body)) if d not in chunks]
    queries = [q for e in entries for q in e["queries"]]
    return chunks, queries


class Recorder:
    def __init__(self, stack: str, out_dir: Path | str, service_name: str | None = None) -> None:
        self.stack = stack
        self.out_dir = Path(out_dir)
        self.exporter = FileSpanExporter(self.out_dir / "otlp")
        resource = Resource.create({"service.name": service_name or stack})
        self.provider = TracerProvider(resource=resource)
        # A batch per flush: the app flushes after each scenario.
        self.processor = BatchSpanProcessor(
            self.exporter, max_export_batch_size=512, schedule_delay_millis=60_000
        )
        self.provider.add_span_processor(self.processor)
        self.answers: list[dict[str, Any]] = []
        self.logger_provider: Any = None

    def enable_logs(self) -> Any:
        """A LoggerProvider writing `out_dir/otlp-logs/NNNN.pb` (ExportLogsServiceRequest), for
        instrumentations that put message content in OTLP log records (the GenAI events)."""
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

        self.logger_provider = LoggerProvider(resource=self.provider.resource)
        self.logger_provider.add_log_record_processor(
            BatchLogRecordProcessor(_log_exporter(self.out_dir / "otlp-logs"), schedule_delay_millis=60_000)
        )
        return self.logger_provider

    def flush(self) -> None:
        self.provider.force_flush()
        if self.logger_provider is not None:
            self.logger_provider.force_flush()

    def answer(
        self,
        scenario: Scenario,
        turn: int,
        question: str,
        response: str,
        entries: list[dict[str, Any]],
        earlier_turns: list[list[str]] | None = None,
        answering: Callable[[dict[str, Any]], bool] | None = None,
    ) -> dict[str, Any]:
        chunks, queries = turn_expectation(entries, response, answering)
        if queries and not chunks:  # every scenario's answer is given its documents: a broken app
            raise ValueError(f"{scenario.name} turn {turn}: no document reached the answering call")
        record: dict[str, Any] = {
            "scenario": scenario.name, "turn": turn, "question": question, "response": response,
            "chunks": chunks, "sub_queries": queries,
        }  # fmt: skip
        if turn > 0:
            record["earlier_turns"] = [list(t) for t in earlier_turns or []]
        self.answers.append(record)
        return record

    def write(self, framework: str, instrumentation: str, layout: str, notes: str = "", **extra: Any) -> Path:
        self.flush()
        self.provider.shutdown()
        if self.logger_provider is not None:
            self.logger_provider.shutdown()
        data = {"stack": self.stack, "framework": framework, "instrumentation": instrumentation,
                "layout": layout, "notes": notes, **extra, "answers": self.answers}  # fmt: skip
        path = self.out_dir / "expected.json"
        path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        return path


def offline_env() -> None:
    """Make sure nothing leaves the machine: a dead proxy for everything but 127.0.0.1."""
    os.environ.setdefault("OPENAI_API_KEY", "sk-fake")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        os.environ[name] = "http://127.0.0.1:9"
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
