"""Verdict cache: remember each verdict so that a repeated question never reaches the judge twice.

Keys are `sha256(judge model, prompt version, question kind, normalised inputs)`. Chunk
assessments are cached per chunk (usefulness and relevance under separate keys), so a query that
comes back with one new chunk costs one chunk's verdicts, not a whole call; claim checks are
cached per (response, chunks). A custom criterion's answer is cached per criterion under its
whole definition (`Criterion.definition`) and the inputs it reads, so editing a criterion
invalidates its verdicts and nothing else's. The cache holds hashes and encoded verdicts only,
never the text that was judged.

Valid verdicts of an answer that failed as a whole (`JudgeError.partial`: 4 chunks of 5 after a
failed repair) are stored too, so the next question about the same chunks (the metrics' own
fallback, a later interaction) asks only for the one still missing. The failure itself is still
raised: it becomes an `error` outcome, never a score.

`CachedJudge` also merges identical questions asked concurrently (single flight), so
interactions scored at the same time that share chunks or a response share one judge call.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol, TypeVar, cast

from agent.judges.base import (
    ASSESS_CHUNKS,
    ASSESS_INTERACTION,
    CHECK_REFERENCE,
    CHECK_RESPONSE,
    COMPARE_ANSWERS,
    JUDGE_CRITERIA,
    AnswerComparison,
    ChunkAssessment,
    ClaimVerdict,
    CriterionInputs,
    InteractionVerdicts,
    Judge,
    JudgeError,
    JudgeWrapper,
)
from agent.model import Criterion, Verdict

T = TypeVar("T")


class VerdictCache(Protocol):
    """A store of encoded verdicts by key."""

    async def get_many(self, keys: Sequence[str]) -> list[str | None]:
        """One lookup for a whole batch; None where the key is missing (or the store is down)."""
        ...

    async def set_many(self, values: Mapping[str, str]) -> None:
        """Store a batch; a store that is down drops it (the judge's answer is still returned)."""
        ...


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


# -- Encoding: numbers only, no text ------------------------------------------------------------


def encode_verdict(verdict: Verdict) -> str:
    score = "" if verdict.score is None else repr(verdict.score)
    return f"{int(verdict.value)}|{score}"


def decode_verdict(raw: str | bytes) -> Verdict:
    text = raw.decode() if isinstance(raw, bytes) else raw
    value, _, score = text.partition("|")
    return Verdict(value == "1", float(score) if score else None)


def _encode_list(verdicts: Sequence[Verdict]) -> str:
    # A leading '#' keeps an empty list distinct from a missing value.
    return "#" + ";".join(encode_verdict(v) for v in verdicts)


def _decode_list(raw: str) -> list[Verdict]:
    body = raw[1:]
    return [decode_verdict(part) for part in body.split(";")] if body else []


def encode_relevance(assessment: ChunkAssessment) -> str:
    r, graded = assessment.relevance, assessment.graded_relevant
    text = f"{encode_verdict(r)}|{assessment.statements}|{assessment.relevant_statements}"
    # The graded statement relevance is a fifth field, present only when the judge graded.
    return text if graded is None else f"{text}|{graded!r}"


def decode_relevance(raw: str) -> tuple[Verdict, int, int, float | None]:
    """(relevance verdict, statements, relevant statements, graded relevant statements); entries
    written before graded scores have four fields and read as binary (graded None)."""
    value, score, statements, relevant, *graded = raw.split("|")
    return (
        decode_verdict(f"{value}|{score}"),
        int(statements),
        int(relevant),
        float(graded[0]) if graded else None,
    )


def encode_claims(claims: Sequence[ClaimVerdict]) -> str:
    parts = [
        encode_verdict(c.supported) + "/" + ("" if c.relevant is None else encode_verdict(c.relevant))
        for c in claims
    ]
    return "#" + ";".join(parts)


def decode_claims(raw: str) -> list[ClaimVerdict]:
    body = raw[1:]
    claims = []
    for part in body.split(";") if body else []:
        supported, _, relevant = part.partition("/")
        claims.append(ClaimVerdict(decode_verdict(supported), decode_verdict(relevant) if relevant else None))
    return claims


def _text(raw: str | bytes) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


# -- Stores --------------------------------------------------------------------------------------


class MemoryVerdictCache:
    """A bounded in-process LRU; the embedded default when no Redis is configured."""

    def __init__(self, max_entries: int) -> None:
        self._max_entries = max_entries
        self._entries: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    async def get_many(self, keys: Sequence[str]) -> list[str | None]:
        found: list[str | None] = []
        for key in keys:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            found.append(value)
        return found

    async def set_many(self, values: Mapping[str, str]) -> None:
        for key, value in values.items():
            self._entries[key] = value
            self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)


class CacheStats(Protocol):
    def hits(self, n: int) -> None: ...

    def misses(self, n: int) -> None: ...


class CachedJudge(JudgeWrapper):
    """A Judge that asks its inner judge only about what the cache does not know."""

    def __init__(self, inner: Judge, cache: VerdictCache, stats: CacheStats) -> None:
        super().__init__(inner)
        self._cache = cache
        self._stats = stats
        self._in_flight: dict[str, asyncio.Future[object]] = {}

    def _key(self, kind: str, *inputs: str) -> str:
        return verdict_key(self.model, self.prompt_version(kind), kind, *inputs)

    async def _single_flight(self, key: str, answer: Callable[[], Awaitable[T]]) -> T:
        """Run `answer` once for concurrent callers asking the same question."""
        pending = self._in_flight.get(key)
        if pending is not None:
            return cast("T", await asyncio.shield(pending))
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._in_flight[key] = future
        try:
            result = await answer()
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as exc:
            future.set_exception(exc)
            # Retrieve it so that a failure nobody else awaited is not logged as "never retrieved".
            future.exception()
            raise
        else:
            future.set_result(result)
            return result
        finally:
            del self._in_flight[key]

    async def _lookup(self, keys: Sequence[str]) -> list[str | None]:
        found = await self._cache.get_many(keys)
        return [None if value is None else _text(value) for value in found]

    def _count(self, items: int, missing: int) -> None:
        # Hits and misses count items (a chunk, a response's claims), not keys.
        self._stats.hits(items - missing)
        self._stats.misses(missing)

    # -- Questions -------------------------------------------------------------------------------

    async def assess_chunks(
        self, query: str, answer: str | None, chunks: Sequence[str]
    ) -> list[ChunkAssessment]:
        flight = self._key(ASSESS_CHUNKS, "flight", query, answer or "\0", *chunks)
        return await self._single_flight(flight, lambda: self._assess_chunks(query, answer, chunks))

    async def _assess_chunks(
        self, query: str, answer: str | None, chunks: Sequence[str]
    ) -> list[ChunkAssessment]:
        relevance_keys = [self._key(ASSESS_CHUNKS, "relevance", query, c) for c in chunks]
        useful_keys = (
            [] if answer is None else [self._key(ASSESS_CHUNKS, "useful", query, answer, c) for c in chunks]
        )
        found = await self._lookup(relevance_keys + useful_keys)
        relevance, useful = found[: len(chunks)], found[len(chunks) :]
        missing = [
            i
            for i in range(len(chunks))
            if relevance[i] is None or (answer is not None and useful[i] is None)
        ]
        self._count(len(chunks), len(missing))
        fresh: dict[int, ChunkAssessment] = {}
        if missing:
            try:
                answered = await self._inner.assess_chunks(query, answer, [chunks[i] for i in missing])
            except JudgeError as exc:
                if exc.partial:
                    kept = {missing[j]: a for j, a in exc.partial.chunks.items()}
                    await self._cache.set_many(self._chunk_entries(kept, relevance_keys, useful_keys))
                raise
            fresh = dict(zip(missing, answered, strict=True))
            await self._cache.set_many(self._chunk_entries(fresh, relevance_keys, useful_keys))
        assessed = []
        for i in range(len(chunks)):
            if i in fresh:
                assessed.append(fresh[i])
                continue
            verdict, statements, relevant, graded = decode_relevance(relevance[i])  # type: ignore[arg-type]
            usefulness = None if answer is None else decode_verdict(useful[i])  # type: ignore[arg-type]
            assessed.append(ChunkAssessment(usefulness, verdict, statements, relevant, graded))
        return assessed

    @staticmethod
    def _chunk_entries(
        assessed: Mapping[int, ChunkAssessment], relevance_keys: Sequence[str], useful_keys: Sequence[str]
    ) -> dict[str, str]:
        """Cache entries for assessments by chunk position (usefulness only where it was asked)."""
        entries = {relevance_keys[i]: encode_relevance(a) for i, a in assessed.items()}
        if useful_keys:
            entries |= {useful_keys[i]: encode_verdict(a.useful) for i, a in assessed.items() if a.useful}
        return entries

    async def _store_interaction(
        self,
        assessed: Mapping[int, ChunkAssessment],
        claims: Sequence[ClaimVerdict] | None,
        judged: Mapping[str, Verdict],
        keys: tuple[list[str], list[str], str, dict[str, str]],
    ) -> None:
        """Store what is known of one interaction: a whole answer, or the valid part of a failed one."""
        relevance_keys, useful_keys, claims_key, criteria_keys = keys
        entries = self._chunk_entries(assessed, relevance_keys, useful_keys)
        if claims is not None:
            entries[claims_key] = encode_claims(claims)
        entries |= {
            criteria_keys[name]: encode_verdict(v) for name, v in judged.items() if name in criteria_keys
        }
        await self._cache.set_many(entries)

    def _criterion_key(self, criterion: Criterion, inputs: CriterionInputs) -> str:
        """The criterion's definition and only the inputs it reads, each named (so a response
        and a reference of the same text are two keys)."""
        parts: list[str] = []
        for read in criterion.reads:
            if read == "context":
                parts += [read, str(len(inputs.chunks)), *inputs.chunks]
            else:
                value = {"query": inputs.query, "response": inputs.response, "reference": inputs.reference}[
                    read
                ]
                parts += [read, value or ""]
        return self._key(JUDGE_CRITERIA, criterion.definition, *parts)

    async def judge_criteria(
        self, criteria: Sequence[Criterion], inputs: CriterionInputs
    ) -> dict[str, Verdict]:
        """Each criterion from the cache where it is known; the rest in one question."""
        if not criteria:
            return {}
        keys = {c.name: self._criterion_key(c, inputs) for c in criteria}
        flight = self._key(JUDGE_CRITERIA, "flight", *sorted(keys.values()))

        async def fill() -> dict[str, Verdict]:
            found = dict(zip(keys, await self._lookup(list(keys.values())), strict=True))
            missing = [c for c in criteria if found[c.name] is None]
            self._count(len(criteria), len(missing))
            known = {name: decode_verdict(raw) for name, raw in found.items() if raw is not None}
            if not missing:
                return known
            try:
                answered = await self._inner.judge_criteria(missing, inputs)
            except JudgeError as exc:
                if exc.partial and exc.partial.criteria:
                    await self._cache.set_many(
                        {keys[n]: encode_verdict(v) for n, v in exc.partial.criteria.items() if n in keys}
                    )
                raise
            await self._cache.set_many({keys[n]: encode_verdict(v) for n, v in answered.items() if n in keys})
            return {**known, **answered}

        return await self._single_flight(flight, fill)

    async def assess_interaction(
        self, query: str, response: str, chunks: Sequence[str], criteria: Sequence[Criterion] = ()
    ) -> InteractionVerdicts:
        """Both questions about one interaction, from the cache where it can answer them.

        When the cache knows nothing of the interaction, the inner judge's combined question is
        asked (one call for an LLM judge) and its verdicts are stored under the two usual
        question kinds; when it knows all of it, no judge is asked; when it knows part (a new
        response to a known query and chunks), `assess_chunks` and `check_response` ask for what
        is missing only (and `judge_criteria` the criteria it does not know). A failed combined
        answer's valid verdicts are stored before the error is raised, so the next question asks
        only for the rest.
        """
        relevance_keys = [self._key(ASSESS_CHUNKS, "relevance", query, c) for c in chunks]
        useful_keys = [self._key(ASSESS_CHUNKS, "useful", query, response, c) for c in chunks]
        claims_key = self._key(CHECK_RESPONSE, query, response, *chunks)
        inputs = CriterionInputs(query, response, tuple(chunks))
        criteria_keys = {c.name: self._criterion_key(c, inputs) for c in criteria}
        keys = (relevance_keys, useful_keys, claims_key, criteria_keys)
        flight = self._key(
            ASSESS_INTERACTION, "flight", query, response, *chunks, *sorted(criteria_keys.values())
        )

        async def fill() -> InteractionVerdicts:
            found = await self._lookup([claims_key, *relevance_keys, *useful_keys, *criteria_keys.values()])
            if any(value is not None for value in found):
                # Known in part or whole: each question answers from the cache what it can.
                assessed, claims, judged = await asyncio.gather(
                    self.assess_chunks(query, response, chunks),
                    self.check_response(query, response, chunks),
                    self.judge_criteria(criteria, inputs),
                )
                return InteractionVerdicts(tuple(assessed), tuple(claims), judged)
            try:
                answer = await self._inner.assess_interaction(query, response, chunks, criteria)
            except JudgeError as exc:
                if exc.partial:
                    partial = exc.partial
                    await self._store_interaction(partial.chunks, partial.claims, partial.criteria, keys)
                raise
            self._count(len(chunks) + 1 + len(criteria), len(chunks) + 1 + len(criteria))
            await self._store_interaction(
                dict(enumerate(answer.chunks)), answer.claims, answer.criteria, keys
            )
            return answer

        return await self._single_flight(flight, fill)

    async def _whole(
        self,
        key: str,
        decode: Callable[[str], T],
        encode: Callable[[T], str],
        ask: Callable[[], Awaitable[T]],
    ) -> T:
        """A question cached as a whole (claims depend on the whole response and context)."""

        async def answer() -> T:
            (cached,) = await self._lookup([key])
            self._count(1, cached is None)
            if cached is not None:
                return decode(cached)
            result = await ask()
            await self._cache.set_many({key: encode(result)})
            return result

        return await self._single_flight(key, answer)

    async def check_response(self, query: str, response: str, chunks: Sequence[str]) -> list[ClaimVerdict]:
        key = self._key(CHECK_RESPONSE, query, response, *chunks)
        return await self._whole(
            key, decode_claims, encode_claims, lambda: self._inner.check_response(query, response, chunks)
        )

    async def check_reference(self, reference: str, chunks: Sequence[str]) -> list[Verdict]:
        key = self._key(CHECK_REFERENCE, reference, *chunks)
        return await self._whole(
            key, _decode_list, _encode_list, lambda: self._inner.check_reference(reference, chunks)
        )

    async def compare_answers(self, query: str, response: str, reference: str) -> AnswerComparison:
        key = self._key(COMPARE_ANSWERS, query, response, reference)

        def encode(c: AnswerComparison) -> str:
            return _encode_list(c.response_claims) + "&" + _encode_list(c.reference_claims)

        def decode(raw: str) -> AnswerComparison:
            left, _, right = raw.partition("&")
            return AnswerComparison(tuple(_decode_list(left)), tuple(_decode_list(right)))

        return await self._whole(
            key, decode, encode, lambda: self._inner.compare_answers(query, response, reference)
        )
