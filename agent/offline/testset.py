"""Golden sets from documents (`ragpulse testset`): the pure parts, no I/O.

The command (agent/commands/testset.py) reads files and calls the model; everything it decides is
here, as functions over values:

1. `html_to_text` and `chunk_document` turn a document into chunks with stable ids
   (`<document id>#<n>`, n from 1), so a re-run over the same files plans the same work.
2. `plan` turns the chunks, a size and a kind mix into an ordered list of `Task`s per kind: a
   single-chunk question per chunk, a two-chunk question per pair of related chunks (the most
   word overlap), a question the documents cannot answer per chunk. Seeded, so deterministic; more
   candidates than the target, because some drafts are rejected.
3. `parse_draft` checks what the writer answered (shape, lengths, which chunks hold the answer
   for the task's kind) and raises `InvalidDraft` with the reason.
4. `supported` turns the second pass's claim verdicts into keep or reject.
5. `QuestionIndex` drops near-duplicate questions (content-word Jaccard >= 0.8).
6. `ResumeState` reads back what an earlier run wrote (the set and its journal), so finished
   tasks are not asked again and kept items count towards the targets.
7. `redact_with_placeholders` redacts the chunks of one request and returns how to restore the
   original values in what the model wrote, so the set holds the documents' own words.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from agent.redact import Redaction, Redactor
from agent.text import content_words, sentences

SINGLE = "single"
MULTI = "multi"
UNANSWERABLE = "unanswerable"
KINDS = (SINGLE, MULTI, UNANSWERABLE)
DEFAULT_MIX = {SINGLE: 0.5, MULTI: 0.3, UNANSWERABLE: 0.2}
# Chunks each kind of task shows the writer.
CHUNKS_PER_KIND = {SINGLE: 1, MULTI: 2, UNANSWERABLE: 1}

MAX_QUESTION_CHARS = 400
MAX_REFERENCE_CHARS = 1500
DUPLICATE_JACCARD = 0.8
TEXT_SUFFIXES = {
    ".txt": "text",
    ".text": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
}


# -- Documents and chunks ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DocChunk:
    """A piece of a document: `id` is `<document id>#<n>`, stable while the document is."""

    id: str
    document: str
    text: str


class _TextOfHtml(HTMLParser):
    _SKIPPED = frozenset({"script", "style", "head", "template", "noscript", "svg"})
    _BLOCKS = frozenset(
        [
            "p",
            "div",
            "br",
            "li",
            "ul",
            "ol",
            "h1",
            "h2",
            "h3",
            "h4",
            "h5",
            "h6",
            "tr",
            "table",
            "section",
            "article",
            "header",
            "footer",
            "pre",
            "blockquote",
            "dt",
            "dd",
            "title",
        ]
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIPPED:
            self._skipping += 1
        elif tag in self._BLOCKS:
            self.parts.append("\n\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIPPED:
            self._skipping = max(0, self._skipping - 1)
        elif tag in self._BLOCKS:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    """The visible text of an HTML page: scripts, styles and the head left out, block elements
    (paragraphs, headings, list items, rows) as paragraphs, entities decoded."""
    parser = _TextOfHtml()
    parser.feed(html)
    parser.close()
    paragraphs = ("".join(parser.parts)).split("\n\n")
    cleaned = (" ".join(p.split()) for p in paragraphs)
    return "\n\n".join(p for p in cleaned if p)


_FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.S)
_HEADING = re.compile(r"^#{1,6}\s")


def _paragraphs(text: str) -> list[str]:
    """Paragraphs (blank-line separated); a Markdown heading starts a new one."""
    text = _FRONT_MATTER.sub("", text.replace("\r\n", "\n"))
    found: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        current: list[str] = []
        for line in block.split("\n"):
            if _HEADING.match(line) and current:
                found.append("\n".join(current))
                current = []
            current.append(line)
        if current:
            found.append("\n".join(current))
    return [p.strip() for p in found if p.strip()]


def _pieces(paragraph: str, max_chars: int) -> list[str]:
    """A paragraph longer than max_chars, cut at sentence ends (at max_chars when a sentence is)."""
    if len(paragraph) <= max_chars:
        return [paragraph]
    out: list[str] = []
    current = ""
    for sentence in sentences(paragraph) or [paragraph]:
        while len(sentence) > max_chars:
            if current:
                out.append(current)
                current = ""
            out.append(sentence[:max_chars])
            sentence = sentence[max_chars:]
        if current and len(current) + 1 + len(sentence) > max_chars:
            out.append(current)
            current = sentence
        else:
            current = f"{current} {sentence}".strip()
    if current:
        out.append(current)
    return out


def chunk_document(
    document: str, text: str, *, target_chars: int = 1000, max_chars: int = 1600, min_chars: int = 80
) -> list[DocChunk]:
    """Paragraphs packed into chunks of about `target_chars` (never over `max_chars`); a heading
    stays with the text under it. Chunks shorter than `min_chars` (a lone heading, a link line)
    are merged into the next one or, at the end, dropped: there is no question to ask of them."""
    pieces = [piece for p in _paragraphs(text) for piece in _pieces(p, max_chars)]
    chunks: list[str] = []
    current = ""
    for piece in pieces:
        joined = f"{current}\n\n{piece}" if current else piece
        if current and len(joined) > max_chars:
            chunks.append(current)
            current = piece
        elif len(joined) >= target_chars:
            chunks.append(joined)
            current = ""
        else:
            current = joined
    if current:
        if len(current) < min_chars and chunks and len(chunks[-1]) + len(current) + 2 <= max_chars:
            chunks[-1] = f"{chunks[-1]}\n\n{current}"
        else:
            chunks.append(current)
    kept = [c for c in chunks if len(c) >= min_chars]
    return [DocChunk(f"{document}#{n}", document, c) for n, c in enumerate(kept, 1)]


# -- Kinds and the plan --------------------------------------------------------------------------


def parse_kinds(spec: str) -> dict[str, float]:
    """`single=0.5,multi=0.3,unanswerable=0.2` (weights, normalised; a kind left out gets 0).
    Raises ValueError naming the problem."""
    weights: dict[str, float] = {}
    for part in spec.split(","):
        if not part.strip():
            continue
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in KINDS:
            raise ValueError(
                f"expected KIND=WEIGHT with KIND one of {', '.join(KINDS)}; got {part.strip()!r}"
            )
        try:
            weight = float(value)
        except ValueError:
            raise ValueError(f"{name}: weight {value.strip()!r} is not a number") from None
        if not weight >= 0:
            raise ValueError(f"{name}: weight must be >= 0, got {value.strip()}")
        weights[name] = weight
    total = sum(weights.values())
    if total <= 0:
        raise ValueError("at least one kind needs a weight above 0")
    return {kind: weights.get(kind, 0.0) / total for kind in KINDS}


def targets(size: int, mix: Mapping[str, float]) -> dict[str, int]:
    """Items per kind summing to `size` (largest remainders; ties in KINDS order)."""
    exact = {kind: size * mix.get(kind, 0.0) for kind in KINDS}
    counts = {kind: int(value) for kind, value in exact.items()}
    short = size - sum(counts.values())
    by_remainder = sorted(KINDS, key=lambda k: (-(exact[k] - counts[k]), KINDS.index(k)))
    for kind in by_remainder[:short]:
        counts[kind] += 1
    return counts


@dataclass(frozen=True, slots=True)
class Task:
    """One request to the writer: a kind and the chunks shown. `id` is also the item's id."""

    id: str
    kind: str
    chunk_ids: tuple[str, ...]


def _pairs(chunks: Sequence[DocChunk], order: Sequence[int]) -> list[tuple[int, int]]:
    """For each chunk in `order`, the other chunk sharing the most content words with it (Jaccard),
    each unordered pair once. Related chunks make a question that needs both."""
    words = [content_words(c.text) for c in chunks]
    seen: set[frozenset[int]] = set()
    pairs = []
    for i in order:
        best, best_score = None, 0.0
        for j in range(len(chunks)):
            if j == i or frozenset((i, j)) in seen:
                continue
            union = len(words[i] | words[j])
            score = len(words[i] & words[j]) / union if union else 0.0
            if score > best_score:
                best, best_score = j, score
        if best is not None:
            seen.add(frozenset((i, best)))
            pairs.append((i, best))
    return pairs


def plan(chunks: Sequence[DocChunk], seed: int = 0) -> dict[str, list[Task]]:
    """Every candidate task per kind, in the order they are tried (seeded shuffles: documents
    are mixed, and the same seed gives the same plan)."""
    rng = random.Random(seed)
    single_order = list(range(len(chunks)))
    rng.shuffle(single_order)
    other_order = list(range(len(chunks)))
    rng.shuffle(other_order)
    return {
        SINGLE: [Task(f"{SINGLE}:{chunks[i].id}", SINGLE, (chunks[i].id,)) for i in single_order],
        MULTI: [
            Task(f"{MULTI}:{chunks[i].id}+{chunks[j].id}", MULTI, (chunks[i].id, chunks[j].id))
            for i, j in _pairs(chunks, single_order)
        ],
        UNANSWERABLE: [
            Task(f"{UNANSWERABLE}:{chunks[i].id}", UNANSWERABLE, (chunks[i].id,)) for i in other_order
        ],
    }


# -- Drafts --------------------------------------------------------------------------------------


class InvalidDraft(ValueError):
    """What the writer answered cannot be an item; the message says why."""


@dataclass(frozen=True, slots=True)
class Draft:
    """What the writer wrote for a task: `holding` are the positions (1-based) of the shown chunks
    that hold the answer (none for a question the documents cannot answer)."""

    question: str
    reference: str
    holding: tuple[int, ...]


def parse_draft(content: str, kind: str) -> Draft:
    """The writer's JSON answer `{"question", "reference", "chunks": [numbers]}` for a task of
    `kind`, checked: a single-chunk question is held by chunk 1, a two-chunk one by both."""
    text = content.strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        answer = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidDraft(f"not valid JSON ({exc.msg})") from None
    if not isinstance(answer, dict):
        raise InvalidDraft("expected a JSON object")
    question, reference, holding = answer.get("question"), answer.get("reference"), answer.get("chunks")
    if not isinstance(question, str) or not question.strip():
        raise InvalidDraft("no question")
    if not isinstance(reference, str) or not reference.strip():
        raise InvalidDraft("no reference answer")
    if len(question) > MAX_QUESTION_CHARS:
        raise InvalidDraft(f"question longer than {MAX_QUESTION_CHARS} characters")
    if len(reference) > MAX_REFERENCE_CHARS:
        raise InvalidDraft(f"reference longer than {MAX_REFERENCE_CHARS} characters")
    if not isinstance(holding, list) or not all(
        isinstance(n, int) and not isinstance(n, bool) for n in holding
    ):
        raise InvalidDraft("'chunks' must be a list of chunk numbers")
    expected = tuple(range(1, CHUNKS_PER_KIND[kind] + 1)) if kind != UNANSWERABLE else ()
    if tuple(sorted(set(holding))) != expected:
        raise InvalidDraft(f"a {kind} question must be answered by chunk(s) {list(expected)}, not {holding}")
    return Draft(" ".join(question.split()), reference.strip(), expected)


def support(verdicts: Sequence[bool]) -> float | None:
    """Share of the reference's claims the chunks support; None when it made no claim."""
    return sum(verdicts) / len(verdicts) if verdicts else None


def supported(verdicts: Sequence[bool], min_support: float = 1.0) -> tuple[bool, str]:
    """Whether the second pass keeps an answerable item, and the reason when it does not."""
    share = support(verdicts)
    if share is None:
        return False, "the reference makes no claim to check"
    if share + 1e-9 < min_support:
        missing = sum(1 for v in verdicts if not v)
        return False, f"unsupported: {missing} of {len(verdicts)} claim(s) of the reference not in its chunks"
    return True, ""


# -- De-duplication ------------------------------------------------------------------------------


@dataclass
class QuestionIndex:
    """Kept questions, to drop near-duplicates: the same text once case and spacing are ignored,
    or content words that overlap by at least `threshold` (Jaccard)."""

    threshold: float = DUPLICATE_JACCARD
    _kept: list[tuple[str, str, frozenset[str]]] = field(default_factory=list)

    def duplicate_of(self, question: str) -> str | None:
        """The id of a kept question this one nearly repeats, if any."""
        normal, words = _normal(question), frozenset(content_words(question))
        for item_id, other_normal, other in self._kept:
            if normal == other_normal:
                return item_id
            union = len(words | other)
            if union and len(words & other) / union >= self.threshold:
                return item_id
        return None

    def add(self, item_id: str, question: str) -> None:
        self._kept.append((item_id, _normal(question), frozenset(content_words(question))))


def _normal(question: str) -> str:
    return " ".join(question.lower().split())


# -- Items, journal and resume -------------------------------------------------------------------


def item_row(
    task: Task, draft: Draft, chunks: Mapping[str, DocChunk], support_share: float | None
) -> dict[str, Any]:
    """The eval/probe input row (agent/offline/records.py): question, reference, relevant ids and
    their texts, plus the kind and the second pass's support share."""
    relevant = [task.chunk_ids[n - 1] for n in draft.holding]
    return {
        "id": task.id,
        "question": draft.question,
        "reference": draft.reference,
        "relevant_ids": relevant,
        "reference_contexts": [chunks[c].text for c in relevant],
        "kind": task.kind,
        "support": None if support_share is None else round(support_share, 4),
    }


@dataclass(frozen=True, slots=True)
class ResumeState:
    """What an earlier run left: tasks finished (kept, rejected or dropped) and items kept."""

    done: frozenset[str]
    kept: Mapping[str, int]
    questions: tuple[tuple[str, str], ...]  # (id, question) of kept items, in file order

    @classmethod
    def empty(cls) -> ResumeState:
        return cls(frozenset(), {kind: 0 for kind in KINDS}, ())

    @classmethod
    def read(cls, items: Iterable[str], journal: Iterable[str]) -> ResumeState:
        """From the lines of the set and of its journal. A half-written last line (the run was
        killed mid-write) is ignored: its task is simply asked again."""
        done: set[str] = set()
        kept: Counter[str] = Counter({kind: 0 for kind in KINDS})
        questions: list[tuple[str, str]] = []
        for row in _rows(items):
            item_id, question, kind = row.get("id"), row.get("question"), row.get("kind")
            if isinstance(item_id, str) and isinstance(question, str) and item_id not in done:
                done.add(item_id)
                questions.append((item_id, question))
                if kind in KINDS:
                    kept[kind] += 1
        for row in _rows(journal):
            if isinstance(row.get("task"), str):
                done.add(row["task"])
        return cls(frozenset(done), dict(kept), tuple(questions))


def _rows(lines: Iterable[str]) -> Iterable[dict[str, Any]]:
    for line in lines:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            yield row


def journal_row(task: Task, outcome: str, reason: str = "") -> dict[str, Any]:
    return {"task": task.id, "kind": task.kind, "outcome": outcome, **({"reason": reason} if reason else {})}


# -- Budget --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits of one run; None is no limit. A task starts only if `calls_per_task` more calls fit."""

    max_calls: int | None = None
    max_cost_usd: float | None = None

    def exhausted(self, calls: float, cost_usd: float, calls_per_task: int, reserved: int = 0) -> str | None:
        """Why no further task may start, or None; `reserved` calls are those of tasks under way."""
        if self.max_calls is not None and calls + reserved + calls_per_task > self.max_calls:
            return f"--max-calls {self.max_calls} reached ({calls:.0f} calls made)"
        if self.max_cost_usd is not None and cost_usd >= self.max_cost_usd:
            return f"--max-cost-usd {self.max_cost_usd:g} reached (${cost_usd:.4f} spent)"
        return None


# -- Redaction -----------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"<[A-Z][A-Z0-9_]*_\d+>")


def redact_with_placeholders(redactor: Redactor, texts: Sequence[str]) -> tuple[Redaction, dict[str, str]]:
    """The texts redacted together, and each placeholder's original value (as first written), read
    off the redacted texts themselves so the numbering is the redactor's own."""
    redaction = redactor.redact(texts)
    originals: dict[str, str] = {}
    for original, out in zip(texts, redaction.texts, strict=True):
        shift = 0
        for finding in redactor.find(original) if original else []:
            match = _PLACEHOLDER.match(out, finding.start + shift)
            if match is None:  # cannot happen while redact() replaces every finding
                break
            originals.setdefault(match.group(), original[finding.start : finding.end])
            shift += len(match.group()) - (finding.end - finding.start)
    return redaction, originals


def restore(text: str, originals: Mapping[str, str]) -> str:
    """Placeholders the model copied back into what it wrote, replaced by the original values."""
    if not originals:
        return text
    return _PLACEHOLDER.sub(lambda m: originals.get(m.group(), m.group()), text)
