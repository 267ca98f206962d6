"""The writer of `ragpulse testset`: asks the judge model to write one item from given chunks.

`ItemWriter` is the contract the command depends on; `LLMItemWriter` calls the judge model
through the judge's own `ModelCaller` (agent/judges/caller.py), and `RedactingWriter` redacts
personal data first, as the judge stack does for remote judges, and puts the original values back
into what the model wrote.

The prompt is a versioned file beside the judge's (agent/judges/prompts/write_testset_item.v1.txt,
hashed into `prompt_version`); the chunks are fenced with a random per-request id that no chunk
contains, and the instructions say fenced text is data, so a document cannot instruct the model.

The call policy is the judge's, by the same code: temperature 0, JSON output, retries with
jittered backoff on 429 / 5xx / timeouts / connection errors only (never on other 4xx), a
Retry-After honoured by every later call, a circuit breaker that refuses writes while the model is
down. A failure that cannot pass (auth, an unknown model, a bad request) is a permanent
`JudgeError` whose one line names the provider's message and what to set.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from agent.judges.base import JudgeError, SpendSink
from agent.judges.caller import ModelCaller
from agent.judges.questions import Fence, load_prompt
from agent.offline.testset import (
    MULTI,
    SINGLE,
    UNANSWERABLE,
    Draft,
    parse_draft,
    redact_with_placeholders,
    restore,
)
from agent.redact import Redactor

WRITE_ITEM = "write_testset_item"
# What each kind asks for; the prompt file says what an item is.
KIND_INSTRUCTIONS = {
    SINGLE: "KIND single: write a question that CHUNK 1 alone answers, its reference answer from "
    'CHUNK 1, and "chunks": [1].',
    MULTI: "KIND multi: write a question whose answer needs facts from both CHUNK 1 and CHUNK 2 "
    '(neither alone is enough), its reference answer from both, and "chunks": [1, 2].',
    UNANSWERABLE: "KIND unanswerable: write a question on the subject of CHUNK 1 that a user might "
    "plausibly ask but that CHUNK 1 does not answer (it asks for a fact the chunk does not give), "
    'a reference saying the documents do not give this information, and "chunks": [].',
}


class ItemWriter(Protocol):
    """Writes one draft item of a kind from the chunks it is shown (1, or 2 for `multi`)."""

    @property
    def model(self) -> str: ...

    @property
    def prompt_version(self) -> str: ...

    async def write(self, kind: str, chunks: Sequence[str]) -> Draft:
        """The draft; raises InvalidDraft when the answer cannot be an item, JudgeError when the
        model could not be asked (`retryable` says whether another run may do better)."""
        ...


def render_request(kind: str, chunks: Sequence[str]) -> str:
    """The user message: the fenced chunks, then the kind's instruction (outside any fence)."""
    fence = Fence(*chunks)
    parts = [fence.preamble(WRITE_ITEM)]
    parts += [fence.wrap(f"CHUNK {n}", text) for n, text in enumerate(chunks, 1)]
    parts.append(KIND_INSTRUCTIONS[kind])
    return "\n\n".join(parts)


class LLMItemWriter:
    """Writes drafts with the judge model, through `caller` (its call policy, usage and USD).

    Each write that reaches the model counts one call to `spend` (the run's budget), failed or
    not, as the instrumented judge counts each question; a write the caller refused (breaker
    open, a Retry-After longer than the retry cap) is not, as a refused question is not."""

    def __init__(self, caller: ModelCaller, spend: SpendSink | None = None) -> None:
        self._caller = caller
        self._spend = spend
        self._prompt = load_prompt(WRITE_ITEM)

    @property
    def model(self) -> str:
        return self._caller.model

    @property
    def prompt_version(self) -> str:
        return self._prompt.version

    async def write(self, kind: str, chunks: Sequence[str]) -> Draft:
        messages = [
            {"role": "system", "content": self._prompt.text},
            {"role": "user", "content": render_request(kind, chunks)},
        ]
        try:
            with self._caller.admit():
                completion = await self._caller.complete(messages, self._caller.response_format(WRITE_ITEM))
        except JudgeError as exc:
            if not exc.refused:
                self._spent()
            raise
        self._spent()
        return parse_draft(completion.content, kind)

    def _spent(self) -> None:
        if self._spend is not None:
            self._spend.add(1, 0.0)


class RedactionCounter(Protocol):
    def redacted(self, kind: str, n: int) -> None: ...


class RedactingWriter:
    """Redacts the chunks of each request together (consistent placeholders), and restores the
    original values in the question and reference the model wrote: personal data never leaves,
    and the set still asks about the documents' own words."""

    def __init__(self, inner: ItemWriter, redactor: Redactor, counter: RedactionCounter) -> None:
        self._inner = inner
        self._redactor = redactor
        self._counter = counter

    @property
    def model(self) -> str:
        return self._inner.model

    @property
    def prompt_version(self) -> str:
        return self._inner.prompt_version

    async def write(self, kind: str, chunks: Sequence[str]) -> Draft:
        redaction, originals = redact_with_placeholders(self._redactor, chunks)
        for what, n in redaction.counts.items():
            self._counter.redacted(what, n)
        draft = await self._inner.write(kind, redaction.texts)
        return Draft(restore(draft.question, originals), restore(draft.reference, originals), draft.holding)
