"""`ragpulse testset DOCS... --out set.jsonl`: a golden set written from documents (docs/testset.md).

Reads text, Markdown and HTML files (directories recursively; any other file is skipped with a
line naming it), chunks them, and has the judge model write items of three kinds: questions one
chunk answers, questions needing two chunks, questions the documents cannot answer. Each draft
is checked (shape, near-duplicates), and a second judge pass (`check_reference`, the context-recall
question, through the judge stack: redaction, cache, instruments) rejects any answerable item
whose reference is not supported by its chunks. Kept items are the `ragpulse eval` / `probe`
input format (question, reference, relevant_ids, reference_contexts) plus `kind` and `support`.

Each kept item is appended to --out as it is accepted and each finished task to OUT.journal, so
a run that is killed or stopped by its budget continues where it stopped when run again with the
same --out: kept items stay, finished tasks (kept, rejected or dropped) are not asked again.
The pure rules are in agent/offline/testset.py, the model call in agent/offline/testset_writer.py.

Exit status: 0 done, or stopped by the budget (said in a line); 1 no text to read, or stopped
because the judge failed 5 times in a row; 2 a usage or settings error; 5 the judge cannot work
(no key, 401/403, unknown model, another 4xx), named in one line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TextIO

from agent.config import ConfigError, Settings
from agent.infra.secrets import mask
from agent.judges.base import JudgeError
from agent.offline.testset import (
    DEFAULT_MIX,
    KINDS,
    TEXT_SUFFIXES,
    UNANSWERABLE,
    Budget,
    DocChunk,
    InvalidDraft,
    QuestionIndex,
    ResumeState,
    Task,
    chunk_document,
    html_to_text,
    item_row,
    journal_row,
    parse_kinds,
    plan,
    support,
    supported,
    targets,
)

if TYPE_CHECKING:  # imported when the command runs: `ragpulse run` never needs them
    from agent.judges.base import Judge
    from agent.offline.testset_writer import ItemWriter

PROGRESS_SECONDS = 10.0
# Retryable failures in a row (the judge is down) after which the run stops; a re-run continues.
FAILURES_IN_A_ROW = 5
# Exit status when the judge cannot work at all (as `ragpulse eval`'s).
JUDGE_BROKEN = 5


def register(
    commands: Any, with_settings: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]
) -> None:
    parser = with_settings(
        commands.add_parser(
            "testset",
            help="write a golden set (eval / probe input) from your documents with the judge model",
            description="Chunk text, Markdown and HTML files and have the judge model write "
            "questions with reference answers and the ids of the chunks that hold them; a second "
            "judge pass rejects references their chunks do not support. Re-run with the same "
            "--out to continue a run that stopped. Exit status: 0 done or stopped by the budget, "
            "1 no text or the judge kept failing, 2 usage error, 5 the judge cannot work.",
        )
    )
    parser.add_argument("docs", nargs="+", metavar="DOCS", help="files or directories (recursive)")
    parser.add_argument(
        "--out", required=True, metavar="FILE", help="the set (JSONL); appended to on re-runs"
    )
    parser.add_argument("--size", type=int, default=50, help="items wanted in all (default 50)")
    parser.add_argument(
        "--kinds",
        default=",".join(f"{k}={w}" for k, w in DEFAULT_MIX.items()),
        metavar="KIND=W,...",
        help="mix of single, multi, unanswerable (default %(default)s)",
    )
    parser.add_argument("--judge", dest="judge_model", metavar="MODEL", help="judge model (as --judge-model)")
    parser.add_argument("--max-calls", type=int, metavar="N", help="stop before making more model calls")
    parser.add_argument("--max-cost-usd", type=float, metavar="USD", help="stop once this much is spent")
    parser.add_argument("--rejects", metavar="FILE", help="also write rejected drafts here, with the reason")
    parser.add_argument(
        "--min-support",
        type=float,
        default=1.0,
        metavar="SHARE",
        help="share of a reference's claims its chunks must support (default 1.0: all)",
    )
    parser.add_argument(
        "--chunk-chars", type=int, default=1000, metavar="N", help="chunk size (default 1000)"
    )
    parser.add_argument("--seed", type=int, default=0, help="order in which chunks are used (default 0)")
    parser.add_argument("--concurrency", type=int, default=4, help="tasks at once (default 4)")
    parser.add_argument("--progress-every", type=int, default=10, metavar="N", help="a line per N items")
    parser.set_defaults(handler=_main)


# -- Reading documents ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Skipped:
    path: Path
    reason: str


def _files(paths: Sequence[Path]) -> list[tuple[str, Path]]:
    """(document id, path) of every file: a file given is named by its name, a file found in a
    directory by the directory's name and its path inside it (ids stay the same across runs)."""
    found: list[tuple[str, Path]] = []
    for path in paths:
        if path.is_dir():
            found += [
                (f"{path.resolve().name}/{f.relative_to(path).as_posix()}", f)
                for f in sorted(path.rglob("*"))
                if f.is_file()
            ]
        else:
            found.append((path.name, path))
    return found


def read_documents(paths: Sequence[Path]) -> tuple[dict[str, str], list[Skipped]]:
    """Text of every readable document by id, and every file skipped with the reason."""
    documents: dict[str, str] = {}
    skipped: list[Skipped] = []
    for path in paths:
        if not path.exists():
            raise ConfigError(f"DOCS: {path}: no such file or directory")
    for doc_id, path in _files(paths):
        kind = TEXT_SUFFIXES.get(path.suffix.lower())
        if kind is None:
            what = f"{path.suffix} file" if path.suffix else "file without a suffix"
            skipped.append(Skipped(path, f"not text, Markdown or HTML ({what})"))
            continue
        try:
            raw = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            skipped.append(Skipped(path, "not UTF-8 text"))
            continue
        except OSError as exc:
            skipped.append(Skipped(path, f"cannot read: {exc.strerror or exc}"))
            continue
        text = html_to_text(raw) if kind == "html" else raw
        if not text.strip():
            skipped.append(Skipped(path, "no text"))
            continue
        if doc_id in documents:
            raise ConfigError(f"DOCS: two documents named {doc_id!r}; give their directory instead")
        documents[doc_id] = text
    return documents, skipped


# -- The run -------------------------------------------------------------------------------------


@dataclass
class Tally:
    """What this run did, for the progress lines and the summary."""

    kept: Counter[str] = field(default_factory=Counter)  # all kept items, earlier runs included
    new: int = 0
    rejected: Counter[str] = field(default_factory=Counter)  # unsupported, invalid
    duplicates: int = 0
    failed: int = 0


class _Generator:
    """Runs the planned tasks with the writer and the verifying judge, appending what it keeps."""

    def __init__(
        self,
        writer: ItemWriter,
        judge: Judge,
        chunks: dict[str, DocChunk],
        queues: dict[str, deque[Task]],
        wanted: dict[str, int],
        state: ResumeState,
        files: tuple[TextIO, TextIO, TextIO | None],
        budget: Budget,
        spent: Callable[[], tuple[float, float]],
        min_support: float,
        report: Callable[[str], None],
    ) -> None:
        self._writer, self._judge, self._chunks = writer, judge, chunks
        self._queues, self._wanted = queues, wanted
        self._items, self._journal, self._rejects = files
        self._budget, self._spent, self._min_support = budget, spent, min_support
        self._report = report
        self.tally = Tally(kept=Counter(state.kept))
        self._inflight: Counter[str] = Counter()
        self._index = QuestionIndex()
        for item_id, question in state.questions:
            self._index.add(item_id, question)
        self.stop_reason: str | None = None
        self.fatal: str | None = None
        self.judge_down = False  # stopped by failures in a row
        self._failures_in_a_row = 0

    def _next(self) -> Task | None:
        """The next task of the kind furthest from its target, or None (stop, budget, all done)."""
        if self.stop_reason or self.fatal:
            return None
        open_kinds = [
            k for k in KINDS if self._queues[k] and self.tally.kept[k] + self._inflight[k] < self._wanted[k]
        ]
        if not open_kinds:
            return None
        kind = max(
            open_kinds,
            key=lambda k: (self._wanted[k] - self.tally.kept[k] - self._inflight[k], -KINDS.index(k)),
        )
        calls, usd = self._spent()
        # A draft and its check: two calls (an unanswerable draft is not checked: one).
        per_task = 1 if kind == UNANSWERABLE else 2
        exhausted = self._budget.exhausted(calls, usd, per_task, reserved=2 * sum(self._inflight.values()))
        if exhausted:
            self.stop_reason = exhausted
            return None
        self._inflight[kind] += 1
        return self._queues[kind].popleft()

    async def worker(self) -> None:
        while (task := self._next()) is not None:
            try:
                await self._run(task)
            finally:
                self._inflight[task.kind] -= 1

    async def _run(self, task: Task) -> None:
        texts = [self._chunks[c].text for c in task.chunk_ids]
        try:
            draft = await self._writer.write(task.kind, texts)
            if (twin := self._index.duplicate_of(draft.question)) is not None:
                self._drop(task, draft.question, f"near-duplicate of {twin}")
                return
            share: float | None = None
            if task.kind != UNANSWERABLE:
                verdicts = [bool(v.value) for v in await self._judge.check_reference(draft.reference, texts)]
                share = support(verdicts)
                keep, reason = supported(verdicts, self._min_support)
                if not keep:
                    self._reject(task, "unsupported", reason, draft.question, draft.reference)
                    return
        except InvalidDraft as exc:
            self._reject(task, "invalid", f"invalid draft: {exc}")
            return
        except JudgeError as exc:
            if not exc.retryable and exc.reason != "invalid_answer":
                error = " ".join(str(exc).split())  # one line, whatever the provider's message holds
                self.fatal = f"judge {self._writer.model} failed permanently ({exc.reason}): {error}"
                return
            if exc.reason == "invalid_answer":  # the check's answer was unusable, twice
                self._reject(task, "invalid", f"second pass failed: {exc}")
                return
            self.tally.failed += 1  # not journaled: a re-run asks again
            self._failures_in_a_row += 1
            if self._failures_in_a_row >= FAILURES_IN_A_ROW:
                self.judge_down = True
                self.stop_reason = f"the judge failed {FAILURES_IN_A_ROW} times in a row ({exc.reason})"
            return
        self._failures_in_a_row = 0
        # Checked again now: a concurrent task may have kept the same question meanwhile.
        if (twin := self._index.duplicate_of(draft.question)) is not None:
            self._drop(task, draft.question, f"near-duplicate of {twin}")
            return
        _append(self._items, item_row(task, draft, self._chunks, share))
        _append(self._journal, journal_row(task, "kept"))
        self._index.add(task.id, draft.question)
        self.tally.kept[task.kind] += 1
        self.tally.new += 1
        self._report("kept")

    def _drop(self, task: Task, question: str, reason: str) -> None:
        self._failures_in_a_row = 0
        self.tally.duplicates += 1
        self._write_reject(task, "duplicate", reason, question)
        _append(self._journal, journal_row(task, "duplicate", reason))
        self._report("dropped")

    def _reject(self, task: Task, outcome: str, reason: str, question: str = "", reference: str = "") -> None:
        self._failures_in_a_row = 0
        self.tally.rejected[outcome] += 1
        self._write_reject(task, outcome, reason, question, reference)
        _append(self._journal, journal_row(task, outcome, reason))
        self._report("rejected")

    def _write_reject(
        self, task: Task, outcome: str, reason: str, question: str, reference: str = ""
    ) -> None:
        if self._rejects is not None:
            row = {
                "task": task.id,
                "kind": task.kind,
                "outcome": outcome,
                "chunk_ids": list(task.chunk_ids),
                "question": question,
                "reference": reference,
                "reason": reason,
            }
            _append(self._rejects, row)


def _append(handle: IO[str], row: dict[str, Any]) -> None:
    # One line at a time, flushed: a killed run leaves at most a half line, which resume ignores.
    handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    handle.flush()


def _lines(path: Path) -> list[str]:
    if not path.exists():
        return []
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def _check_args(args: argparse.Namespace) -> dict[str, float]:
    if args.size < 1:
        raise ConfigError(f"--size: expected a number of items >= 1, got {args.size}")
    if args.max_calls is not None and args.max_calls < 1:
        raise ConfigError(f"--max-calls: expected >= 1, got {args.max_calls}")
    if args.max_cost_usd is not None and not args.max_cost_usd > 0:
        raise ConfigError(f"--max-cost-usd: expected > 0, got {args.max_cost_usd}")
    if not 0 < args.min_support <= 1:
        raise ConfigError(f"--min-support: expected a share in (0, 1], got {args.min_support}")
    if args.chunk_chars < 200:
        raise ConfigError(f"--chunk-chars: expected >= 200, got {args.chunk_chars}")
    if args.concurrency < 1:
        raise ConfigError(f"--concurrency: expected >= 1, got {args.concurrency}")
    try:
        return parse_kinds(args.kinds)
    except ValueError as exc:
        raise ConfigError(f"--kinds: {exc}") from None


def _main(args: argparse.Namespace, settings: Settings) -> int:
    mix = _check_args(args)
    if settings.judge.is_local:
        raise ConfigError(
            f"judge_model: {settings.judge.model!r} is a local judge, which cannot write questions; "
            "give an LLM with --judge MODEL (and judge_api_base / judge_api_key as for eval)"
        )
    documents, skipped = read_documents([Path(d) for d in args.docs])
    for s in skipped:
        print(f"ragpulse testset: skipped {s.path}: {s.reason}", file=sys.stderr)
    chunk_list = [
        c
        for doc_id, text in documents.items()
        for c in chunk_document(
            doc_id,
            text,
            target_chars=args.chunk_chars,
            max_chars=max(args.chunk_chars * 8 // 5, args.chunk_chars + 1),
        )
    ]
    if not chunk_list:
        print("ragpulse testset: no text to write questions from", file=sys.stderr)
        return 1
    return asyncio.run(_generate(args, settings, mix, chunk_list, len(documents)))


async def _generate(
    args: argparse.Namespace,
    settings: Settings,
    mix: dict[str, float],
    chunk_list: list[DocChunk],
    n_docs: int,
) -> int:
    from prometheus_client import CollectorRegistry

    from agent.budget import SpendCounter
    from agent.build import build_judge
    from agent.judges.caller import ModelCaller
    from agent.offline.testset_writer import LLMItemWriter, RedactingWriter
    from agent.telemetry import JudgeTelemetry

    out = Path(args.out)
    journal_path = Path(f"{out}.journal")
    state = ResumeState.read(_lines(out), _lines(journal_path))
    wanted = targets(args.size, mix)
    planned = plan(chunk_list, args.seed)
    queues = {k: deque(t for t in planned[k] if t.id not in state.done) for k in KINDS}
    chunks = {c.id: c for c in chunk_list}

    registry = CollectorRegistry()  # the judge's instruments, read back for the summary
    telemetry = JudgeTelemetry(registry)
    spend = SpendCounter()
    # The second pass: the judge stack eval uses (redaction when on, cache, instruments).
    judge = build_judge(settings, telemetry, spend=spend)
    # The writer calls the same model with the judge's call policy: one ModelCaller of its own.
    writer: ItemWriter = LLMItemWriter(ModelCaller(settings.judge, usage=telemetry, spend=spend), spend)
    if settings.redacts:
        from agent.redact import RedactionRules, Redactor

        security = settings.security
        rules = RedactionRules(
            kinds=security.kinds,
            patterns=security.patterns,
            allow=security.allow,
            phone_regions=security.phone_regions,
        )
        writer = RedactingWriter(writer, Redactor(rules), telemetry)

    def spent() -> tuple[float, float]:
        total = spend.total()
        return total.calls, total.usd

    done_before = sum(state.kept.values())
    print(
        f"ragpulse testset: {n_docs} document(s), {len(chunk_list)} chunks; want {args.size} items "
        f"({', '.join(f'{k} {wanted[k]}' for k in KINDS)}) with {writer.model}"
        + (
            f"; continuing {out}: {done_before} items kept, {len(state.done)} tasks done"
            if state.done
            else ""
        ),
        file=sys.stderr,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    tty = sys.stderr.isatty()
    last_line = [time.monotonic()]

    def line(gen: _Generator) -> str:
        t = gen.tally
        calls, usd = spent()
        kinds = ", ".join(f"{k} {t.kept[k]}/{wanted[k]}" for k in KINDS)
        return (
            f"testset: {sum(t.kept.values())}/{args.size} items ({kinds}); "
            f"{sum(t.rejected.values())} rejected, {t.duplicates} duplicates; {calls:.0f} calls, ${usd:.4f}"
        )

    with contextlib.ExitStack() as files:
        items = files.enter_context(out.open("a", encoding="utf-8"))
        journal = files.enter_context(journal_path.open("a", encoding="utf-8"))
        rejects = (
            files.enter_context(Path(args.rejects).open("a", encoding="utf-8")) if args.rejects else None
        )

        def report(event: str) -> None:
            if event == "kept" and gen.tally.new % args.progress_every == 0:
                print(line(gen), file=sys.stderr, flush=True)
                last_line[0] = time.monotonic()

        gen = _Generator(
            writer,
            judge,
            chunks,
            queues,
            wanted,
            state,
            (items, journal, rejects),
            Budget(args.max_calls, args.max_cost_usd),
            spent,
            args.min_support,
            report,
        )

        async def heartbeat() -> None:
            # Not on a terminal (CI logs), a line every ~10 s however slowly items come.
            while True:
                await asyncio.sleep(1.0)
                if not tty and time.monotonic() - last_line[0] >= PROGRESS_SECONDS:
                    print(line(gen), file=sys.stderr, flush=True)
                    last_line[0] = time.monotonic()

        ticker = asyncio.create_task(heartbeat())
        try:
            await asyncio.gather(*(gen.worker() for _ in range(args.concurrency)))
        finally:
            ticker.cancel()

    if gen.fatal:
        print(
            f"ragpulse testset: {mask(gen.fatal)}; check --judge, judge_api_base and judge_api_key "
            f"(RAGPULSE_JUDGE_MODEL, RAGPULSE_JUDGE_API_BASE, RAGPULSE_JUDGE_API_KEY)",
            file=sys.stderr,
        )
        return JUDGE_BROKEN
    _summary(gen, args, wanted, registry, spent(), out)
    return 1 if gen.judge_down else 0


def _summary(
    gen: _Generator,
    args: argparse.Namespace,
    wanted: dict[str, int],
    registry: Any,
    spent: tuple[float, float],
    out: Path,
) -> None:
    t = gen.tally
    calls, usd = spent
    tokens = sum(
        s.value
        for metric in registry.collect()
        if metric.name == "ragpulse_judge_tokens"
        for s in metric.samples
        if s.name.endswith("_total")
    )
    unpriced = sum(
        s.value
        for metric in registry.collect()
        if metric.name == "ragpulse_judge_unpriced_calls"
        for s in metric.samples
        if s.name.endswith("_total")
    )
    kept = sum(t.kept.values())
    per_item = f"; per kept item {calls / t.new:.2f} calls, {tokens / t.new:.0f} tokens" if t.new else ""
    cost = f"${usd:.4f}" + (f" (+{unpriced:.0f} calls litellm has no price for)" if unpriced else "")
    print(
        f"ragpulse testset: {out} holds {kept} items ({', '.join(f'{k} {t.kept[k]}' for k in KINDS)}); "
        f"this run kept {t.new}, rejected {t.rejected['unsupported']} unsupported and "
        f"{t.rejected['invalid']} invalid, dropped {t.duplicates} near-duplicates"
        + (f", {t.failed} failed (asked again on a re-run)" if t.failed else "")
        + f"; {calls:.0f} calls, {tokens:.0f} tokens, {cost}{per_item}"
        + (f"; rejects in {args.rejects}" if args.rejects else ""),
        file=sys.stderr,
    )
    if gen.stop_reason:
        print(
            f"ragpulse testset: stopped: {gen.stop_reason}; run the same command again to continue",
            file=sys.stderr,
        )
        return
    short = [f"{k} {t.kept[k]} of {wanted[k]}" for k in KINDS if t.kept[k] < wanted[k]]
    if short:
        print(
            f"ragpulse testset: ran out of chunks to ask about: {', '.join(short)}; add documents "
            "or lower --chunk-chars",
            file=sys.stderr,
        )


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it as `ragpulse testset`")
