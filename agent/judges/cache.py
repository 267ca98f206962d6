"""Verdict cache: remember each verdict so that a repeated question never reaches the judge twice.

Keys are verdict-level, `sha256(judge model, prompt version, question kind, normalised inputs)`,
so a query that comes back with one new chunk costs one verdict, not a whole call. The cache holds
hashes and verdicts only, never the text that was judged.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Protocol

from agent.judges.base import CHUNK_USEFULNESS, Judge
from agent.model import Verdict


class VerdictCache(Protocol):
    async def get_many(self, keys: Sequence[str]) -> list[Verdict | None]:
        """One lookup for a whole batch; None where the key is missing."""
        ...

    async def set_many(self, verdicts: Mapping[str, Verdict]) -> None: ...


def _normalise(text: str) -> str:
    return " ".join(text.split()).casefold()


def verdict_key(model: str, prompt_version: str, kind: str, *inputs: str) -> str:
    digest = hashlib.sha256()
    for part in (model, prompt_version, kind, *map(_normalise, inputs)):
        encoded = part.encode()
        # Length-prefix every part so that ("ab", "c") and ("a", "bc") differ.
        digest.update(len(encoded).to_bytes(8, "big"))
        digest.update(encoded)
    return digest.hexdigest()


def encode_verdict(verdict: Verdict) -> str:
    score = "" if verdict.score is None else repr(verdict.score)
    return f"{int(verdict.value)}|{score}"


def decode_verdict(raw: str | bytes) -> Verdict:
    text = raw.decode() if isinstance(raw, bytes) else raw
    value, _, score = text.partition("|")
    return Verdict(value == "1", float(score) if score else None)


class MemoryVerdictCache:
    """A bounded in-process LRU; the embedded default when no Redis is configured."""

    def __init__(self, max_entries: int) -> None:
        self._max_entries = max_entries
        self._entries: OrderedDict[str, Verdict] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    async def get_many(self, keys: Sequence[str]) -> list[Verdict | None]:
        found: list[Verdict | None] = []
        for key in keys:
            verdict = self._entries.get(key)
            if verdict is not None:
                self._entries.move_to_end(key)
            found.append(verdict)
        return found

    async def set_many(self, verdicts: Mapping[str, Verdict]) -> None:
        for key, verdict in verdicts.items():
            self._entries[key] = verdict
            self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)


class CacheStats(Protocol):
    def hits(self, n: int) -> None: ...

    def misses(self, n: int) -> None: ...


class CachedJudge:
    """A Judge that asks its inner judge only about the items the cache does not know."""

    def __init__(self, inner: Judge, cache: VerdictCache, stats: CacheStats) -> None:
        self._inner = inner
        self._cache = cache
        self._stats = stats

    @property
    def model(self) -> str:
        return self._inner.model

    def prompt_version(self, kind: str) -> str:
        return self._inner.prompt_version(kind)

    async def chunk_usefulness(self, query: str, response: str, chunks: Sequence[str]) -> list[Verdict]:
        version = self.prompt_version(CHUNK_USEFULNESS)
        keys = [verdict_key(self.model, version, CHUNK_USEFULNESS, query, response, c) for c in chunks]
        cached = await self._cache.get_many(keys)
        missing = [i for i, verdict in enumerate(cached) if verdict is None]
        self._stats.hits(len(keys) - len(missing))
        self._stats.misses(len(missing))
        if not missing:
            return [v for v in cached if v is not None]
        fresh = await self._inner.chunk_usefulness(query, response, [chunks[i] for i in missing])
        await self._cache.set_many({keys[i]: v for i, v in zip(missing, fresh, strict=True)})
        merged = list(cached)
        for i, verdict in zip(missing, fresh, strict=True):
            merged[i] = verdict
        return [v for v in merged if v is not None]
