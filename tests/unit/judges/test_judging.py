"""The local lexical judge, the verdict cache and the context-precision metric on top of them."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from agent.judges.base import (
    AnswerComparison,
    ChunkAssessment,
    ClaimVerdict,
    InteractionVerdicts,
    JudgeError,
    answer_separately,
)
from agent.judges.cache import (
    CachedJudge,
    MemoryVerdictCache,
    decode_claims,
    decode_relevance,
    decode_verdict,
    encode_claims,
    encode_relevance,
    encode_verdict,
    verdict_key,
)
from agent.judges.local import LexicalJudge
from agent.metrics import ContextPrecision
from agent.model import Chunk, Criterion, Outcome, RagInteraction, Verdict
from agent.text import content_words

RESPONSE = "The capital of France is Paris."
USEFUL = "Paris is the capital and largest city of France."
USELESS = "Bananas grow in tropical climates."


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def interaction(chunks: Sequence[str], response: str | None = RESPONSE) -> RagInteraction:
    return RagInteraction(
        trace_id="ab" * 16,
        span_id="cd" * 8,
        query="What is the capital of France?",
        chunks=tuple(Chunk(c) for c in chunks),
        response=response,
        service="s",
        route="r",
    )


class CountingJudge:
    """A judge that records what it was asked (a test double for call counting, not for I/O)."""

    model = "counting"

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[list[str]] = []
        self._fail = fail
        self._lexical = LexicalJudge()

    def prompt_version(self, kind: str) -> str:
        return "v1"

    def healthy(self) -> bool:
        return True

    async def assess_chunks(
        self, query: str, answer: str | None, chunks: Sequence[str]
    ) -> list[ChunkAssessment]:
        self.calls.append(list(chunks))
        if self._fail:
            raise JudgeError("judge unavailable", retryable=True)
        return await self._lexical.assess_chunks(query, answer, chunks)

    async def check_response(self, query: str, response: str, chunks: Sequence[str]) -> list[ClaimVerdict]:
        self.calls.append(["check_response", response])
        if self._fail:
            raise JudgeError("judge unavailable", retryable=True)
        await asyncio.sleep(0.01)  # let a concurrent identical question arrive while this one is in flight
        return await self._lexical.check_response(query, response, chunks)

    async def assess_interaction(
        self, query: str, response: str, chunks: Sequence[str], criteria: Sequence[Criterion] = ()
    ) -> InteractionVerdicts:
        return await answer_separately(self, query, response, chunks, criteria)

    async def check_reference(self, reference: str, chunks: Sequence[str]) -> list[Verdict]:
        self.calls.append(["check_reference", reference])
        return await self._lexical.check_reference(reference, chunks)

    async def compare_answers(self, query: str, response: str, reference: str) -> AnswerComparison:
        self.calls.append(["compare_answers", response, reference])
        return await self._lexical.compare_answers(query, response, reference)


class Stats:
    def __init__(self) -> None:
        self.hit_count = 0
        self.miss_count = 0

    def hits(self, n: int) -> None:
        self.hit_count += n

    def misses(self, n: int) -> None:
        self.miss_count += n


def test_content_words_drop_stopwords_and_fold_plurals() -> None:
    assert content_words("The cities of France are large") == {"citi", "france", "large"}
    assert content_words("cooking steaks") == content_words("cook steak")
    assert content_words("Grass, glass!") == {"grass", "glass"}


def test_lexical_usefulness_verdicts_and_scores() -> None:
    assessed = run(LexicalJudge().assess_chunks("q", RESPONSE, [USEFUL, USELESS, "Paris has museums."]))
    verdicts = [a.useful for a in assessed]
    assert [v.value for v in verdicts] == [True, False, False]
    assert verdicts[0].score == 1.0  # capital, france, paris all present
    assert verdicts[1].score == 0.0
    assert verdicts[2].score == pytest.approx(1 / 3, abs=1e-4)


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ((0, 1, 1, 0, 0), 0.5833),
        ((1, 1, 0, 1, 0), 0.9167),
        ((0, 0, 1, 1, 1), 0.4778),
        ((0, 0), 0.0),
        ((1, 1), 1.0),
    ],
)
def test_context_precision_metric_with_the_lexical_judge(pattern: tuple[int, ...], expected: float) -> None:
    chunks = [USEFUL if v else USELESS for v in pattern]
    result = run(ContextPrecision().evaluate(interaction(chunks), LexicalJudge()))
    assert result.outcome is Outcome.OK
    assert result.value == pytest.approx(expected, abs=1e-4)
    assert result.judge == "lexical" and result.prompt_version == "lexical-assess_chunks-v3"


def test_context_precision_is_undefined_without_chunks_or_response() -> None:
    no_chunks = run(ContextPrecision().evaluate(interaction([]), LexicalJudge()))
    assert (
        no_chunks.outcome is Outcome.SKIPPED and no_chunks.value is None and no_chunks.reason == "no_chunks"
    )
    no_response = run(ContextPrecision().evaluate(interaction([USEFUL], response=""), LexicalJudge()))
    assert no_response.outcome is Outcome.SKIPPED and no_response.value is None


def test_judge_failure_is_an_error_not_a_score() -> None:
    result = run(ContextPrecision().evaluate(interaction([USEFUL]), CountingJudge(fail=True)))
    assert result.outcome is Outcome.ERROR and result.value is None
    assert "judge unavailable" in result.reason


def test_cache_sends_only_misses_to_the_judge_in_one_call() -> None:
    inner, stats = CountingJudge(), Stats()
    judge = CachedJudge(inner, MemoryVerdictCache(100), stats)

    first = run(judge.assess_chunks("q", RESPONSE, [USEFUL, USELESS]))
    second = run(
        judge.assess_chunks(
            "q", RESPONSE, [USELESS, "Paris  is the CAPITAL and largest city of France.", "new chunk"]
        )
    )

    assert [a.useful.value for a in first] == [True, False]  # type: ignore[union-attr]
    assert [a.useful.value for a in second] == [False, True, False]  # type: ignore[union-attr]
    # Cached answers equal fresh ones, relevance counts included.
    assert second[0] == first[1] and second[1] == first[0]
    # The second call asked only about the chunk never seen (whitespace and case are normalised).
    assert inner.calls == [[USEFUL, USELESS], ["new chunk"]]
    # Counted per chunk (each has a usefulness and a relevance key).
    assert (stats.hit_count, stats.miss_count) == (2, 3)


def test_concurrent_identical_questions_share_one_call() -> None:
    inner, stats = CountingJudge(), Stats()
    judge = CachedJudge(inner, MemoryVerdictCache(100), stats)

    async def both() -> list[list[ClaimVerdict]]:
        return list(await asyncio.gather(*(judge.check_response("q", RESPONSE, [USEFUL]) for _ in range(3))))

    answers = run(both())
    assert inner.calls == [["check_response", RESPONSE]]
    assert answers[0] == answers[1] == answers[2] and len(answers[0]) == 1


def test_cache_does_not_store_failures() -> None:
    inner, stats = CountingJudge(fail=True), Stats()
    cache = MemoryVerdictCache(100)
    with pytest.raises(JudgeError):
        run(CachedJudge(inner, cache, stats).assess_chunks("q", RESPONSE, [USEFUL]))
    assert len(cache) == 0


def test_memory_cache_evicts_least_recently_used() -> None:
    cache = MemoryVerdictCache(2)
    run(cache.set_many({"a": "1|", "b": "0|"}))
    run(cache.get_many(["a"]))  # a is now the most recent
    run(cache.set_many({"c": "1|"}))
    assert run(cache.get_many(["a", "b", "c"])) == ["1|", None, "1|"]


def test_verdict_keys_name_every_input() -> None:
    base = verdict_key("m", "v1", "kind", "query", "chunk")
    assert base == verdict_key("m", "v1", "kind", " Query ", "CHUNK")
    variants = [
        verdict_key("m2", "v1", "kind", "query", "chunk"),
        verdict_key("m", "v2", "kind", "query", "chunk"),
        verdict_key("m", "v1", "kind2", "query", "chunk"),
        verdict_key("m", "v1", "kind", "querychunk", ""),
    ]
    assert len({base, *variants}) == 5


def test_verdict_encoding_round_trips() -> None:
    for verdict in (Verdict(True, 0.25), Verdict(False), Verdict(False, 0.0)):
        assert decode_verdict(encode_verdict(verdict).encode()) == Verdict(verdict.value, verdict.score)


def test_relevance_and_claim_encodings_round_trip_without_text() -> None:
    assessment = ChunkAssessment(Verdict(True), Verdict(True, 0.5), statements=4, relevant_statements=2)
    assert decode_relevance(encode_relevance(assessment)) == (Verdict(True, 0.5), 4, 2, None)
    claims = [
        ClaimVerdict(Verdict(True, 0.9, reason="Paris is the capital"), Verdict(False)),
        ClaimVerdict(Verdict(False)),
    ]
    encoded = encode_claims(claims)
    assert "Paris" not in encoded
    assert decode_claims(encoded) == [
        ClaimVerdict(Verdict(True, 0.9), Verdict(False)),
        ClaimVerdict(Verdict(False)),
    ]
    assert decode_claims(encode_claims([])) == []


def test_every_wrapper_passes_the_judges_identity_and_health_through() -> None:
    from prometheus_client import CollectorRegistry

    from agent.judges.instrumented import InstrumentedJudge
    from agent.judges.offload import BoundedJudge
    from agent.judges.redacting import RedactingJudge
    from agent.redact import RedactionRules, Redactor
    from agent.telemetry import JudgeTelemetry

    class Refusing(CountingJudge):
        model = "refusing"

        def prompt_version(self, kind: str) -> str:
            return f"v7-{kind}"

        def healthy(self) -> bool:
            return False

    telemetry = JudgeTelemetry(CollectorRegistry())
    for inner, health in ((Refusing(), False), (CountingJudge(), True)):
        wrapped = [
            BoundedJudge(inner),
            InstrumentedJudge(inner, telemetry),
            CachedJudge(inner, MemoryVerdictCache(10), telemetry),
            RedactingJudge(inner, Redactor(RedactionRules()), telemetry),
        ]
        for judge in wrapped:
            assert judge.inner is inner and judge.model == inner.model
            assert judge.prompt_version("assess_chunks") == inner.prompt_version("assess_chunks")
            assert judge.healthy() is health
    stacked = RedactingJudge(
        CachedJudge(
            InstrumentedJudge(BoundedJudge(Refusing()), telemetry), MemoryVerdictCache(10), telemetry
        ),
        Redactor(RedactionRules()),
        telemetry,
    )
    assert (stacked.model, stacked.prompt_version("x"), stacked.healthy()) == ("refusing", "v7-x", False)


# -- The contract: every wrapper forwards every question, whatever the order ------------------


def _wrapper_classes() -> list[type]:
    from agent.evaluate import _InteractionJudge
    from agent.judges.instrumented import InstrumentedJudge
    from agent.judges.offload import BoundedJudge
    from agent.judges.redacting import RedactingJudge

    return [CachedJudge, RedactingJudge, InstrumentedJudge, BoundedJudge, _InteractionJudge]


def test_every_wrapper_defines_every_question_itself_and_looks_nothing_up() -> None:
    from agent.judges.base import Judge, JudgeWrapper

    questions = {
        name
        for name in vars(Judge)
        if not name.startswith("_") and name not in {"model", "prompt_version", "healthy", "problem"}
    }
    assert questions == {
        "assess_chunks",
        "check_response",
        "assess_interaction",
        "check_reference",
        "compare_answers",
        "judge_criteria",
    }
    for wrapper in _wrapper_classes():
        assert issubclass(wrapper, JudgeWrapper)
        assert questions <= set(vars(wrapper)), (wrapper, questions - set(vars(wrapper)))
        assert "__getattr__" not in vars(wrapper) and "__getattribute__" not in vars(wrapper)


def test_a_wrapper_that_forgets_a_question_cannot_be_built() -> None:
    from agent.judges.base import JudgeWrapper

    class Forgetful(JudgeWrapper):
        async def assess_chunks(self, query, answer, chunks):  # type: ignore[no-untyped-def]
            return await self._inner.assess_chunks(query, answer, chunks)

    with pytest.raises(TypeError, match="abstract"):
        Forgetful(LexicalJudge())  # type: ignore[abstract]


class RecordingCombined(CountingJudge):
    """Answers the combined question in one call, and records every text it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    async def assess_interaction(
        self, query: str, response: str, chunks: Sequence[str], criteria: Sequence[Criterion] = ()
    ) -> InteractionVerdicts:
        self.calls.append(["assess_interaction"])
        self.texts += [query, response, *chunks]
        assessed = await self._lexical.assess_chunks(query, response, chunks)
        claims = await self._lexical.check_response(query, response, chunks)
        return InteractionVerdicts(tuple(assessed), tuple(claims))

    async def assess_chunks(
        self, query: str, answer: str | None, chunks: Sequence[str]
    ) -> list[ChunkAssessment]:
        self.texts += [query, answer or "", *chunks]
        return await super().assess_chunks(query, answer, chunks)

    async def check_response(self, query: str, response: str, chunks: Sequence[str]) -> list[ClaimVerdict]:
        self.texts += [query, response, *chunks]
        return await super().check_response(query, response, chunks)


@pytest.mark.parametrize("order", ["redact-outside", "cache-outside", "instruments-outside"])
def test_wrapper_order_keeps_redaction_caching_and_the_one_call(order: str) -> None:
    from prometheus_client import CollectorRegistry

    from agent.evaluate import Evaluator
    from agent.judges.base import Judge
    from agent.judges.instrumented import InstrumentedJudge
    from agent.judges.offload import BoundedJudge
    from agent.judges.redacting import RedactingJudge
    from agent.metrics import STREAMING_METRICS
    from agent.redact import Redactor
    from agent.telemetry import JudgeTelemetry

    telemetry = JudgeTelemetry(CollectorRegistry())
    inner = RecordingCombined()
    bounded = BoundedJudge(inner)

    def redact(j: Judge) -> Judge:
        return RedactingJudge(j, Redactor(), telemetry)

    def cache(j: Judge) -> Judge:
        return CachedJudge(j, MemoryVerdictCache(100), telemetry)

    def instruments(j: Judge) -> Judge:
        return InstrumentedJudge(j, telemetry)

    layers = {
        "redact-outside": (instruments, cache, redact),
        "cache-outside": (instruments, redact, cache),
        "instruments-outside": (redact, cache, instruments),
    }[order]
    judge: Judge = bounded
    for layer in layers:
        judge = layer(judge)
    subject = RagInteraction(
        trace_id="ab" * 16,
        span_id="cd" * 8,
        query="Which card did jane.doe@example.com use?",
        chunks=(Chunk("jane.doe@example.com paid with card 4111 1111 1111 1111."), Chunk(USELESS)),
        response="jane.doe@example.com used card 4111 1111 1111 1111.",
        service="s",
        route="r",
    )
    evaluator = Evaluator([m() for m in STREAMING_METRICS.values()], judge)
    for _ in range(2):  # the second time from the cache
        results = run(evaluator.evaluate(subject))
        assert all(r.outcome is Outcome.OK for r in results), results
    assert inner.calls == [["assess_interaction"]]
    joined = "\n".join(inner.texts)
    assert "jane.doe@example.com" not in joined and "4111" not in joined
    assert "<EMAIL_1>" in joined and "<CARD_1>" in joined


def test_the_evaluator_asks_each_question_once_and_keeps_the_verdicts() -> None:
    from agent.evaluate import Evaluator
    from agent.metrics import METRICS

    inner = CountingJudge()  # no combined call: the two questions, each once
    subject = interaction([USEFUL, USELESS])
    evaluation = run(Evaluator([m() for m in METRICS.values()], inner).assess(subject))
    assert sorted(map(str, inner.calls)) == sorted(
        map(str, [[USEFUL, USELESS], ["check_response", RESPONSE]])
    )
    assert evaluation.verdicts.chunks is not None and len(evaluation.verdicts.chunks) == 2
    assert evaluation.verdicts.claims is not None and len(evaluation.verdicts.claims) == 1
    assert [a.useful.value for a in evaluation.verdicts.chunks] == [True, False]  # type: ignore[union-attr]
