"""The Judge contract: typed questions in, one Verdict per item out.

A judge answers every item of a question in one go (all chunks of an interaction at once), so an
LLM judge can make one call per question kind instead of one per chunk. A judge that cannot
answer raises JudgeError; it never makes up a verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from agent.model import Verdict

# Question kinds; they are part of every cache key and of every prompt file name.
CHUNK_USEFULNESS = "chunk_usefulness"


class JudgeError(RuntimeError):
    """The judge could not produce valid verdicts (timeout, HTTP error, invalid answer, open breaker)."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class Judge(Protocol):
    """Answers typed questions about an interaction's text."""

    @property
    def model(self) -> str:
        """The judge's identity in cache keys and labels, e.g. 'lexical' or 'openai/gpt-4o-mini'."""
        ...

    def prompt_version(self, kind: str) -> str:
        """Version of the instructions used for a question kind; part of the cache key."""
        ...

    async def chunk_usefulness(self, query: str, response: str, chunks: Sequence[str]) -> list[Verdict]:
        """For each chunk: was it useful in arriving at `response` to `query`? One verdict per chunk."""
        ...
