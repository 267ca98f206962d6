"""What every benchmark shares: its command-line basics, seeded randomness, and one way to report.

    bench = Benchmark(__doc__, seed=13)          # --seed N (default: the script's own seed), --json PATH
    bench.parser.add_argument("--windows", ...)  # then the script's own arguments
    args = bench.parse()
    rng = bench.random(offset)                   # random.Random(seed + offset); bench.numpy(offset)
    line("text")  /  bench.line("text")          # a line of the printed report (print's arguments)
    table = bench.table("name", [Column(...), ...])
    table.header(); table.row(key=value, ...)    # printed as the docs quote it, kept for --json
    bench.record("figure", value)                # a named figure for --json
    bench.finish()                               # writes the figures to --json PATH (also at exit)

A script's default seed reproduces the figures the docs quote; `--seed` moves every random draw
of the run together. `--json PATH` writes what was printed as data: the arguments, every table's
rows and every recorded figure. Statistics come from the product (agent/trust/agreement.py,
agent/trust/ppi.py, agent/metrics/), never from a copy here.
"""

from __future__ import annotations

import argparse
import atexit
import json
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def shared_data() -> Path:
    """The shared evaluation data: ../shared/data beside the repository (or beside its worktree
    directory, for a git worktree one level further down)."""
    for base in (ROOT.parent, ROOT.parent.parent):
        if (base / "shared" / "data").is_dir():
            return base / "shared" / "data"
    return ROOT.parent / "shared" / "data"


@dataclass(frozen=True)
class Column:
    """One column of a figures table: `key` of the row, `header`, and how a value is written.

    Fixed-width tables pad to `width` (`align` '<' or '>'); numbers use `spec` (e.g. '.3f',
    '.1%'); None is written as `missing`, padded like a value.
    """

    key: str
    header: str
    width: int = 0
    align: str = ">"
    spec: str = ""
    missing: str = "n/a"

    def head(self) -> str:
        return f"{self.header:{self.align}{self.width or ''}}"

    def cell(self, value: object) -> str:
        width = self.width or ""
        if value is None:
            return f"{self.missing:>{width}}"
        if self.spec and isinstance(value, int | float):
            return f"{value:{self.align}{width}{self.spec}}"
        return f"{value!s:{self.align}{width}}"


@dataclass
class Table:
    """Rows printed as they come (fixed-width or markdown) and kept for --json."""

    bench: Benchmark
    name: str
    columns: Sequence[Column]
    markdown: bool = False
    rows: list[dict[str, Any]] = field(default_factory=list)

    def header(self) -> None:
        if self.markdown:
            self.bench.line("| " + " | ".join(c.header for c in self.columns) + " |")
            self.bench.line("|" + "|".join("---:" if c.align == ">" else "---" for c in self.columns) + "|")
        else:
            self.bench.line(" ".join(c.head() for c in self.columns))

    def row(self, **values: Any) -> None:
        self.rows.append(values)
        cells = [c.cell(values.get(c.key)) for c in self.columns]
        self.bench.line("| " + " | ".join(cells) + " |" if self.markdown else " ".join(cells))


class Benchmark:
    """The command line, randomness and report of one benchmark run."""

    def __init__(self, doc: str | None, *, seed: int = 0, description: str | None = None) -> None:
        self.parser = argparse.ArgumentParser(
            description=description if description is not None else doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        basics = self.parser.add_argument_group("every benchmark")
        basics.add_argument(
            "--seed", type=int, default=seed, help=f"seed of every random draw (default {seed})"
        )
        basics.add_argument("--json", type=Path, metavar="PATH", help="also write the figures as JSON")
        self.args = argparse.Namespace()
        self.tables: dict[str, Table] = {}
        self.figures: dict[str, Any] = {}
        self.lines: list[str] = []
        self.name = Path(sys.argv[0]).stem
        self._finished = False

    def parse(self, argv: Sequence[str] | None = None) -> argparse.Namespace:
        """The arguments; from now on this run's report collects what `line` prints."""
        global _current
        self.args = self.parser.parse_args(argv)
        _current = self
        atexit.register(self.finish)  # scripts that return early still write their JSON
        return self.args

    @property
    def seed(self) -> int:
        return int(self.args.seed)

    def random(self, offset: int = 0) -> random.Random:
        """A Python RNG for one stream of draws; offsets keep streams apart under one --seed."""
        return random.Random(self.seed + offset)

    def numpy(self, offset: int = 0) -> np.random.Generator:
        return np.random.default_rng(self.seed + offset)

    def line(self, text: str = "") -> None:
        line(text)

    def table(self, name: str, columns: Sequence[Column], *, markdown: bool = False) -> Table:
        table = self.tables.get(name)
        if table is None:
            table = self.tables[name] = Table(self, name, columns, markdown=markdown)
        return table

    def record(self, name: str, value: Any) -> None:
        self.figures[name] = value

    def finish(self) -> None:
        """Write the run's figures to --json PATH (nothing without --json)."""
        path = getattr(self.args, "json", None)
        if path is None or self._finished:
            return
        self._finished = True
        arguments = {
            k: str(v) if isinstance(v, Path) else v
            for k, v in vars(self.args).items()
            if not any(secret in k for secret in ("key", "token", "password"))  # never credentials
        }
        document = {
            "benchmark": self.name,
            "arguments": arguments,
            "tables": {name: table.rows for name, table in self.tables.items()},
            "figures": self.figures,
            "report": self.lines,
        }
        path.write_text(json.dumps(document, indent=2, default=_jsonable) + "\n")


_current: Benchmark | None = None


def line(*values: object, sep: str = " ", end: str = "\n", file: Any = None, flush: bool = True) -> None:
    """print() for a benchmark's report: what goes to stdout is also kept for --json."""
    print(*values, sep=sep, end=end, file=file, flush=flush)
    if file is None and _current is not None:
        _current.lines.append(sep.join(str(v) for v in values))


def run_seed() -> int:
    """The --seed of the running benchmark (0 before its arguments are parsed)."""
    return _current.seed if _current is not None else 0


def seeded(offset: int = 0) -> random.Random:
    """random.Random(--seed + offset): one stream of draws; offsets keep streams apart."""
    return random.Random(run_seed() + offset)


def _jsonable(value: object) -> object:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.generic):
        return value.item()
    if hasattr(value, "__dataclass_fields__"):
        return {k: getattr(value, k) for k in value.__dataclass_fields__}  # type: ignore[attr-defined]
    return repr(value)
