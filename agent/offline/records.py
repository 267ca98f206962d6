"""Read an offline evaluation set: JSONL (ragpulse or RAGAS column names), CSV, or Parquet.

One `EvalItem` per usable row; a row that cannot be used becomes a `BadRow` with its line number
and the reason, and reading goes on. Column names:

| ragpulse | also accepted (RAGAS and older RAGAS) |
|---|---|
| `question` | `user_input`, `query` |
| `contexts` | `retrieved_contexts` |
| `response` | `answer` |
| `reference` | `ground_truth`, `ground_truths` (first), `reference_answer` |
| `reference_contexts` | |
| `retrieved_ids` | `retrieved_context_ids` |
| `relevant_ids` | `reference_context_ids` |
| `relevance` | graded relevance: an object id → grade |
| `id` | |

In CSV, list columns hold a JSON array (`["a", "b"]`) and `relevance` a JSON object.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ALIASES: dict[str, tuple[str, ...]] = {
    "question": ("question", "user_input", "query"),
    "contexts": ("contexts", "retrieved_contexts"),
    "response": ("response", "answer"),
    "reference": ("reference", "ground_truth", "ground_truths", "reference_answer"),
    "reference_contexts": ("reference_contexts",),
    "retrieved_ids": ("retrieved_ids", "retrieved_context_ids"),
    "relevant_ids": ("relevant_ids", "reference_context_ids"),
    "relevance": ("relevance",),
    "id": ("id",),
}
_LIST_FIELDS = ("contexts", "reference_contexts", "retrieved_ids", "relevant_ids")


@dataclass(frozen=True, slots=True)
class EvalItem:
    """One row of an evaluation set. Empty optional parts are None (a metric needing them is skipped)."""

    id: str
    line: int
    question: str
    contexts: tuple[str, ...] = ()
    response: str | None = None
    reference: str | None = None
    reference_contexts: tuple[str, ...] | None = None
    retrieved_ids: tuple[str, ...] | None = None
    relevant_ids: tuple[str, ...] | None = None
    relevance: Mapping[str, float] | None = field(default=None, hash=False)
    id_given: bool = True  # False when `id` is the line number because the row had none


@dataclass(frozen=True, slots=True)
class BadRow:
    line: int
    reason: str


class InputError(ValueError):
    """The file as a whole cannot be read (missing, unknown format, no pyarrow for Parquet)."""


def _pick(row: Mapping[str, Any], name: str) -> Any:
    for alias in ALIASES[name]:
        value = row.get(alias)
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            return value
    return None


def _text(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, list) and name == "reference":
        value = value[0] if value else None  # older RAGAS: ground_truths is a list
        if value is None:
            return None
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__}")
    return value if value.strip() else None


def _strings(value: Any, name: str, *, from_csv: bool) -> tuple[str, ...] | None:
    if value is None:
        return None
    if from_csv and isinstance(value, str):
        if not value.strip():
            return None
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = [value]  # one plain-text context
    if hasattr(value, "tolist"):  # a numpy / Arrow array from Parquet
        value = value.tolist()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(f"{name} must be a list of strings, got {type(value).__name__}")
    items = []
    for i, item in enumerate(value):
        if isinstance(item, (int, float)) and not isinstance(item, bool) and name.endswith("_ids"):
            item = str(item)
        if not isinstance(item, str):
            raise ValueError(f"{name}[{i}] must be a string, got {type(item).__name__}")
        items.append(item)
    return tuple(items)


def _relevance(value: Any, *, from_csv: bool) -> dict[str, float] | None:
    if value is None:
        return None
    if from_csv and isinstance(value, str):
        if not value.strip():
            return None
        value = json.loads(value)
    if not isinstance(value, Mapping):
        raise ValueError(f"relevance must be an object of id -> grade, got {type(value).__name__}")
    grades = {}
    for key, grade in value.items():
        if isinstance(grade, bool) or not isinstance(grade, (int, float)) or not math.isfinite(grade):
            raise ValueError(f"relevance[{key!r}] must be a number, got {grade!r}")
        grades[str(key)] = float(grade)
    return grades


def item_from_row(row: Any, line: int, *, from_csv: bool = False) -> EvalItem:
    """Build one item; raises ValueError with a readable reason when the row cannot be used."""
    if not isinstance(row, Mapping):
        raise ValueError(f"expected a JSON object, got {type(row).__name__}")
    question = _text(_pick(row, "question"), "question")
    lists = {name: _strings(_pick(row, name), name, from_csv=from_csv) for name in _LIST_FIELDS}
    response = _text(_pick(row, "response"), "response")
    if question is None and response is not None:
        raise ValueError("a response without its question (column question or user_input)")
    if question is None and lists["retrieved_ids"] is None and lists["reference_contexts"] is None:
        raise ValueError("nothing to score: no question, contexts, response or retrieved ids")
    raw_id = _pick(row, "id")
    id_given = raw_id is not None and str(raw_id) != ""
    return EvalItem(
        id=str(raw_id) if id_given else str(line),
        id_given=id_given,
        line=line,
        question=question or "",
        contexts=lists["contexts"] or (),
        response=response,
        reference=_text(_pick(row, "reference"), "reference"),
        reference_contexts=lists["reference_contexts"],
        retrieved_ids=lists["retrieved_ids"],
        relevant_ids=lists["relevant_ids"],
        relevance=_relevance(_pick(row, "relevance"), from_csv=from_csv),
    )


def _jsonl_rows(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    with path.open(encoding="utf-8", errors="replace") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield line_number, json.loads(line), None
            except json.JSONDecodeError as exc:
                yield line_number, None, f"not valid JSON: {exc.msg} at column {exc.colno}"


def _csv_rows(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    with path.open(encoding="utf-8", errors="replace", newline="") as handle:
        reader = csv.DictReader(handle)
        for row in reader:
            # Line of the row's last physical line (quoted fields may span lines); header is line 1.
            yield reader.line_num, {k: v for k, v in row.items() if k is not None}, None


def _parquet_rows(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    try:
        import pyarrow.parquet as pq  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError as exc:
        raise InputError(
            f"{path}: reading Parquet needs pyarrow (pip install pyarrow), or convert it to JSONL"
        ) from exc
    table = pq.read_table(path)
    for row_number, row in enumerate(table.to_pylist(), start=1):
        yield row_number, row, None


def read_items(path: Path) -> tuple[list[EvalItem], list[BadRow]]:
    """Every usable row of `path`, and every unusable one with its line (row) number and reason."""
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        rows, from_csv = _jsonl_rows(path), False
    elif suffix == ".csv":
        rows, from_csv = _csv_rows(path), True
    elif suffix == ".parquet":
        rows, from_csv = _parquet_rows(path), False
    else:
        raise InputError(f"{path}: unknown format {suffix!r}; use .jsonl, .csv or .parquet")
    return items_from_rows(rows, from_csv=from_csv)


def items_from_rows(
    rows: Iterable[tuple[int, Any, str | None]], *, from_csv: bool = False
) -> tuple[list[EvalItem], list[BadRow]]:
    """Items from `(line, row, error)` triples: a row that cannot be used (an error already, a
    wrong type, a duplicate id) becomes a BadRow with its reason."""
    items: list[EvalItem] = []
    bad: list[BadRow] = []
    seen_ids: set[str] = set()
    for line, row, error in rows:
        if error is not None:
            bad.append(BadRow(line, error))
            continue
        try:
            item = item_from_row(row, line, from_csv=from_csv)
        except (ValueError, TypeError) as exc:
            bad.append(BadRow(line, str(exc)))
            continue
        if item.id in seen_ids:
            bad.append(BadRow(line, f"duplicate id {item.id!r}"))
            continue
        seen_ids.add(item.id)
        items.append(item)
    return items, bad
