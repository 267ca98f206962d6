"""`ragpulse capture`: the lowest-scored production interactions as eval items, and labelled
items merged into a golden set (docs/eval.md, "From production to a golden set").

    ragpulse capture [--results-file FILE | --from-results-topic] (--below METRIC=VALUE ... | --worst N
                     [--window 1h]) [--metric M ...] [--out FILE]
    ragpulse capture --add-to GOLDEN LABELLED

The selection and the merge are pure (agent/offline/capture.py); this module reads the results
(agent/trust/topic.py, as label-queue does) and writes the files. The golden set is rewritten
atomically: a new file beside it, flushed to disk, then renamed over it, so a reader (a prober,
CI) sees the old set or the new one, never half of one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from agent.config import ConfigError, Settings


def register(commands: Any, with_settings: Callable[..., argparse.ArgumentParser]) -> None:
    parser = with_settings(
        commands.add_parser(
            "capture",
            help="lowest-scored interactions as eval items; --add-to merges labelled ones into a golden set",
            description="Read the results (results_file, or results_topic with --from-results-topic), "
            "pick the lowest-scored interactions per service and route, and write them as eval "
            "items for a person to label (reference, relevant_ids) — or, with --add-to GOLDEN, merge "
            "labelled items into a golden set.",
        ),
        agent_flags=False,
    )
    parser.add_argument("labelled", nargs="?", metavar="LABELLED", help="labelled items, with --add-to")
    parser.add_argument("--add-to", metavar="GOLDEN", help="merge LABELLED into this golden set (JSONL)")
    parser.add_argument(
        "--results-file", metavar="FILE", help="the agent's results file (default results_file)"
    )
    parser.add_argument(
        "--from-results-topic", action="store_true", help="read the Kafka results topic (results_topic)"
    )
    parser.add_argument(
        "--wait", type=float, default=30.0, metavar="S", help="give up reading the topic after S"
    )
    parser.add_argument(
        "--below", action="append", default=[], metavar="METRIC=VALUE",
        help="capture interactions with a score below VALUE on METRIC (repeatable: any of them)",
    )  # fmt: skip
    parser.add_argument(
        "--worst", type=int, metavar="N", help="the N lowest-scored per service, route (and window)"
    )
    parser.add_argument(
        "--window", metavar="LENGTH", help="with --worst: per window of the records' time, e.g. 1h"
    )
    parser.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="METRIC",
        help="rank by these metrics only (repeatable)",
    )
    parser.add_argument("--out", metavar="FILE", help="captured items JSONL (default: stdout)")
    parser.set_defaults(handler=_main)


def _main(args: argparse.Namespace, settings: Settings) -> int:
    if args.add_to:
        if not args.labelled:
            raise ConfigError("capture --add-to GOLDEN: give the LABELLED items file")
        return add_to(Path(args.add_to), Path(args.labelled))
    if args.labelled:
        raise ConfigError(f"capture: {args.labelled} given without --add-to GOLDEN")
    return capture(args, settings)


def _selection(args: argparse.Namespace) -> Any:
    from agent.offline.capture import Selection, thresholds, window_seconds

    try:
        return Selection(
            below=thresholds(args.below),
            worst=args.worst,
            window_seconds=window_seconds(args.window) if args.window else None,
            metrics=tuple(args.metric),
        )
    except ValueError as exc:
        raise ConfigError(f"capture: {exc}") from None


def _results(args: argparse.Namespace, settings: Settings) -> tuple[list[Any], str]:
    """Every result read, and where from."""
    from agent.offline.capture import scored_results

    if args.from_results_topic:
        from agent.infra.kafka_connect import kafka_connection
        from agent.trust.topic import topic_messages

        topic = settings.results.topic
        if not topic:
            raise ConfigError("results_topic (env RAGPULSE_RESULTS_TOPIC) is not set; capture reads it")
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        messages = topic_messages(kafka_connection(settings.kafka), topic, args.wait)
        return [r for m in messages for r in scored_results(ExportTraceServiceRequest.FromString(m))], topic
    from agent.trust.topic import file_requests

    name = args.results_file or settings.results.file
    if not name:
        raise ConfigError(
            "capture: no results to read; give --results-file FILE, set results_file, or --from-results-topic"
        )
    problems: list[str] = []
    try:
        results = [r for request in file_requests(Path(name), problems) for r in scored_results(request)]
    except OSError as exc:
        raise ConfigError(f"capture: cannot read {name}: {exc.strerror}") from None
    for problem in problems:
        print(problem, file=sys.stderr)
    return results, name


def capture(args: argparse.Namespace, settings: Settings) -> int:
    from agent.offline.capture import item_row, latest, select

    selection = _selection(args)
    try:
        results, source = _results(args, settings)
    except ConfigError:
        raise
    except Exception as exc:  # the broker is unreachable or the topic unknown: say so, no traceback
        if not args.from_results_topic:
            raise
        print(f"ragpulse capture: cannot read {settings.results.topic}: {exc}", file=sys.stderr)
        return 1
    picked = select(results, selection)
    rows = [row for result in picked if (row := item_row(result, selection)) is not None]
    from agent.commands.calibrate import write_jsonl

    write_jsonl(rows, Path(args.out) if args.out else None)
    interactions = len(latest(results))
    print(
        f"capture: {len(rows)} of {interactions} interactions from {source} written"
        + (f" to {args.out}" if args.out else ""),
        file=sys.stderr,
    )
    if len(rows) < len(picked):
        print(
            f"capture: {len(picked) - len(rows)} selected interaction(s) carry no query text and were "
            "left out; run the agent with results_include_text: true",
            file=sys.stderr,
        )
    return 0


def _jsonl(path: Path) -> list[tuple[int, Any]]:
    """(line number, parsed value or the JSON error) per non-blank line."""
    found: list[tuple[int, Any]] = []
    with path.open(encoding="utf-8") as lines:
        for number, text in enumerate(lines, start=1):
            if text.strip():
                try:
                    found.append((number, json.loads(text)))
                except json.JSONDecodeError as exc:
                    found.append((number, exc))
    return found


def add_to(golden: Path, labelled: Path) -> int:
    from agent.offline.capture import merge

    try:
        incoming = _jsonl(labelled)
        existing = _jsonl(golden) if golden.exists() else []
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"capture --add-to: cannot read {getattr(exc, 'filename', None) or labelled}: {exc}"
        ) from None
    for number, row in existing:
        # Rewriting a golden set we cannot read whole would lose its lines: refuse instead.
        if not isinstance(row, dict):
            raise ConfigError(f"capture --add-to: {golden} line {number} is not a JSON object; fix it first")
    for number, row in incoming:
        if isinstance(row, json.JSONDecodeError):
            print(f"{labelled}: line {number}: not JSON ({row.msg})", file=sys.stderr)
    result = merge(
        [row for _, row in existing],
        [(n, row) for n, row in incoming if not isinstance(row, json.JSONDecodeError)],
    )
    for problem in result.problems:
        print(f"{labelled}: {problem}", file=sys.stderr)
    for identifier in result.updated:
        print(f"capture: updated {identifier} (labelled again)", file=sys.stderr)
    if result.changed or not golden.exists():
        _replace(golden, result.rows)
    print(
        f"capture: {golden}: {len(result.added)} added, {len(result.updated)} updated, "
        f"{result.unchanged} unchanged; {result.unlabelled} not labelled yet (no reference or "
        f"relevant_ids) skipped; {len(result.rows)} items",
        file=sys.stderr,
    )
    return 0


def _replace(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Write `rows` to a new file beside `path`, flushed to disk, then rename it over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    written: str | None = None
    try:
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False
        ) as handle:
            written = handle.name
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(written, path)
    except BaseException:
        if written is not None:
            Path(written).unlink(missing_ok=True)
        raise
