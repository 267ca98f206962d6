"""Signals on every interaction: the refusal rule on real answers, the overlap, what the recorder
exports (values, exemplars, bounds) and the drift of signals under a retrieval regression."""

from __future__ import annotations

import json
import math
import random

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

from agent.config import DriftSettings, SignalsSettings
from agent.drift import DriftDetector
from agent.model import Chunk, RagInteraction
from agent.signals import SignalRecorder, overlap, refuses
from agent.telemetry import SignalsTelemetry
from tests.support.repo import SHARED_DATA

LABELS = {"service": "shop", "route": "/ask"}


def interaction(
    n: int = 0,
    *,
    scores: tuple[float | None, ...] = (0.8, 0.6),
    response: str | None = "Payroll summary shows pension deductions.",
    searches: int = 1,
    chunks: tuple[Chunk, ...] | None = None,
) -> RagInteraction:
    if chunks is None:
        chunks = tuple(
            Chunk(f"The payroll record of chunk {i} lists deductions.", f"doc-{i}", score)
            for i, score in enumerate(scores)
        )
    return RagInteraction(
        trace_id=f"{n:032x}",
        span_id=f"{n:016x}",
        query="What does the payroll summary show?",
        chunks=chunks,
        response=response,
        service="shop",
        route="/ask",
        searches=searches,
    )


def recorder(
    drift: DriftSettings | None = None, **config: object
) -> tuple[SignalRecorder, CollectorRegistry, list[float]]:
    registry = CollectorRegistry()
    now = [1000.0]
    settings = SignalsSettings(**config)  # type: ignore[arg-type]
    signals = SignalRecorder(SignalsTelemetry(registry), settings, clock=lambda: now[0], drift=drift)
    return signals, registry, now


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {**LABELS, **labels})


# -- The refusal rule ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "response",
    [
        "I don't know.",
        "I don\u2019t know based on the documents.",  # typographic apostrophe
        "Unable to answer based on given passages.",
        "I'm sorry, but the provided context does not contain any information about refunds.",
        "The passages do not mention the opening hours.",
        "There is no information about the 2024 rates in the context.",
    ],
)
def test_refusals_are_recognised(response: str) -> None:
    assert refuses(response)


@pytest.mark.parametrize(
    "response",
    [
        "The documents contain the answer: open Settings, then Security.",
        "You should know that the P60 summarises pay and deductions for the year.",
        "Make sure to file before 31 January; the information is on the HMRC form.",
        "",
        # A refusal that comes only after a long answer is a partial answer, not a refusal.
        "The P60 summarises total pay and deductions for the tax year. " * 4 + "I don't know the rest.",
    ],
)
def test_answers_are_not_refusals(response: str) -> None:
    assert not refuses(response)


def real_answers() -> list[tuple[str, str]]:
    """Every answer of the shared real-world sets: RAGTruth QA responses, ARES answers, HaluEval
    right and hallucinated answers, the RAGAS and RAGChecker examples' responses."""
    answers: list[tuple[str, str]] = []
    for line in (SHARED_DATA / "ragtruth_qa_sample" / "ragtruth_qa_sample.jsonl").read_text().splitlines():
        row = json.loads(line)
        answers.append((row["id"], row["response"]))
    for line in (SHARED_DATA / "ares_sample" / "ares_fewshot_judge_examples.jsonl").read_text().splitlines():
        row = json.loads(line)
        answers.append((row["id"], row["answer"]))
    halueval = SHARED_DATA / "halueval_qa_sample" / "halueval_qa_sample.jsonl"
    for n, line in enumerate(halueval.read_text().splitlines()):
        row = json.loads(line)
        for key in ("right_answer", "hallucinated_answer_one_turn", "hallucinated_answer_multi_turn"):
            answers.append((f"halueval-{n}-{key}", row[key]))
    checking = json.loads((SHARED_DATA / "ragchecker_examples" / "checking_inputs.json").read_text())
    answers += [(f"ragchecker-{r['query_id']}", r["response"]) for r in checking["results"]]
    return answers


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"shared data not found at {SHARED_DATA}")
def test_the_rule_flags_exactly_the_real_refusals() -> None:
    """On 217 real answers the rule flags five, and each is a refusal (read by hand): the two
    RAGTruth "Unable to answer" responses, one that goes on to explain, and ARES' two "could not
    be found ... I don't know" answers. Answers that answer part and then say the rest is not in
    the passages (three RAGTruth ones) are not flagged: the rule reads an answer's opening."""
    answers = real_answers()
    assert len(answers) == 217
    flagged = sorted(answer_id for answer_id, text in answers if refuses(text))
    assert flagged == [
        "ares-fewshot-databricks_human_examples-2",
        "ares-fewshot-databricks_human_examples-3",
        "ragtruth-qa-12219-gpt-4-0613",
        "ragtruth-qa-12262-gpt-3.5-turbo-0613",
        "ragtruth-qa-12262-llama-2-70b-chat",
    ]


# -- Overlap ---------------------------------------------------------------------------------------


def test_overlap_is_the_share_of_response_content_words_in_the_context() -> None:
    chunks = (Chunk("The payroll summary, for April."), Chunk("Pension rules"))
    # content words: payroll, summary, shows, pension (4+ characters); "the" is too short.
    assert overlap("The Payroll summary shows PENSION!", chunks) == pytest.approx(3 / 4)
    assert overlap("payroll payroll", chunks) == 1.0  # distinct words
    assert overlap("no", chunks) is None  # no content word
    assert overlap("payroll", ()) is None  # no context


# -- The recorder ----------------------------------------------------------------------------------


def test_every_signal_of_an_interaction_is_exported() -> None:
    signals, registry, _ = recorder()
    signals.record(interaction(1, scores=(0.8, 0.6)))
    signals.record(interaction(2, scores=(0.4, None), response="I don't know."))
    assert sample(registry, "ragpulse_retrieval_top_score_count") == 2
    assert sample(registry, "ragpulse_retrieval_top_score_sum") == pytest.approx(1.2)
    assert sample(registry, "ragpulse_retrieval_top_score_bucket", le="0.5") == 1
    assert sample(registry, "ragpulse_retrieval_mean_score_sum") == pytest.approx(0.7 + 0.4)
    assert sample(registry, "ragpulse_retrieved_chunks_sum") == 4
    context = sum(len(f"The payroll record of chunk {i} lists deductions.") for i in range(2))
    assert sample(registry, "ragpulse_context_characters_sum") == 2 * context
    assert sample(registry, "ragpulse_response_characters_sum") == len(
        "Payroll summary shows pension deductions."
    ) + len("I don't know.")
    assert sample(registry, "ragpulse_refusals_total") == 1
    assert sample(registry, "ragpulse_empty_retrievals_total") == 0  # exported at 0
    assert sample(registry, "ragpulse_agent_searches_count") == 2
    # "payroll", "deductions" of 5 content words are in the context; "know" (the refusal) is not.
    assert sample(registry, "ragpulse_response_context_overlap_count") == 2
    assert sample(registry, "ragpulse_response_context_overlap_sum") == pytest.approx(2 / 5 + 0.0)


def test_empty_retrievals_are_counted_and_answers_without_search_are_not() -> None:
    signals, registry, _ = recorder()
    signals.record(interaction(1, chunks=()))
    signals.record(interaction(2, chunks=(), searches=0))  # the model answered without searching
    assert sample(registry, "ragpulse_empty_retrievals_total") == 1
    assert sample(registry, "ragpulse_retrieved_chunks_bucket", le="0.0") == 2
    assert sample(registry, "ragpulse_retrieval_top_score_count") == 0
    assert sample(registry, "ragpulse_context_characters_count") == 0


def test_hostile_scores_never_reach_the_sums() -> None:
    signals, registry, _ = recorder()
    signals.record(interaction(1, scores=(math.nan, 0.5)))
    signals.record(interaction(2, scores=(math.inf, -math.inf)))
    signals.record(interaction(3, scores=(0.9,)))
    assert sample(registry, "ragpulse_retrieval_top_score_count") == 1
    assert sample(registry, "ragpulse_retrieval_top_score_sum") == pytest.approx(0.9)
    assert sample(registry, "ragpulse_retrieved_chunks_count") == 3  # the rest is still measured


def bucket_line(registry: CollectorRegistry, le: str) -> str:
    """The OpenMetrics line of one ragpulse_retrieval_top_score bucket, exemplar included."""
    lines = openmetrics(registry).decode().splitlines()
    return next(x for x in lines if x.startswith("ragpulse_retrieval_top_score_bucket") and f'le="{le}"' in x)


def test_buckets_carry_the_trace_id_as_an_exemplar() -> None:
    signals, registry, _ = recorder()
    signals.record(interaction(0xABC, scores=(0.25,)))
    line = bucket_line(registry, "0.25")
    assert f'trace_id="{0xABC:032x}"' in line and f'span_id="{0xABC:016x}"' in line and " 0.25" in line
    # An exemplar is the newest observation of its bucket.
    signals.record(interaction(0xDEF, scores=(0.22,)))
    assert f'trace_id="{0xDEF:032x}"' in bucket_line(registry, "0.25")


def test_signals_read_as_means_have_no_buckets_and_keep_an_exemplar() -> None:
    """Searches, chunk scores, context and response size: sum, count and the +Inf bucket, whose
    exemplar is the newest interaction; chunks have one bucket, the answers given none (the
    scrape's size at the series budget)."""
    signals, registry, _ = recorder()
    signals.record(interaction(0xABC, chunks=()))
    signals.record(interaction(0xDEF, scores=(0.5,)))
    lines = openmetrics(registry).decode().splitlines()
    for family in (
        "ragpulse_agent_searches",
        "ragpulse_retrieval_mean_score",
        "ragpulse_context_characters",
        "ragpulse_response_characters",
    ):
        buckets = [x for x in lines if x.startswith(f"{family}_bucket")]
        assert len(buckets) == 1 and 'le="+Inf"' in buckets[0], buckets
        assert f'trace_id="{0xDEF:032x}"' in buckets[0]
    chunks = [x for x in lines if x.startswith("ragpulse_retrieved_chunks_bucket")]
    assert [x.split("}")[0].split(",")[0] for x in chunks] == [
        'ragpulse_retrieved_chunks_bucket{le="0.0"',
        'ragpulse_retrieved_chunks_bucket{le="+Inf"',
    ]
    assert f'trace_id="{0xABC:032x}"' in chunks[0]  # the empty retrieval's trace
    assert sample(registry, "ragpulse_retrieved_chunks_bucket", le="0.0") == 1
    assert sample(registry, "ragpulse_retrieved_chunks_sum") == 1
    assert sample(registry, "ragpulse_retrieved_chunks_count") == 2


def test_overlap_is_computed_up_to_its_rate_per_second() -> None:
    signals, registry, now = recorder(overlap_per_second=3)
    for n in range(10):
        signals.record(interaction(n))
    assert sample(registry, "ragpulse_response_context_overlap_count") == 3
    assert sample(registry, "ragpulse_response_characters_count") == 10  # everything else on all
    now[0] += 1.0
    for n in range(10):
        signals.record(interaction(n))
    assert sample(registry, "ragpulse_response_context_overlap_count") == 6
    off, registry_off, _ = recorder(overlap_per_second=0)
    off.record(interaction(1))
    assert sample(registry_off, "ragpulse_response_context_overlap_count") == 0


# -- Drift of signals ------------------------------------------------------------------------------

SMALL = DriftSettings(baseline_size=500, window=100)


def stream(signals: SignalRecorder, count: int, start: int, rng: random.Random, **shape: float) -> None:
    """`count` interactions whose top score is N(mean, 0.05) and retrieval empty with `empty`."""
    mean, empty = shape.get("mean", 0.8), shape.get("empty", 0.0)
    for n in range(start, start + count):
        if rng.random() < empty:
            signals.record(interaction(n, chunks=()))
        else:
            signals.record(interaction(n, scores=(rng.gauss(mean, 0.05), 0.5)))


def detected(registry: CollectorRegistry, signal: str) -> float | None:
    return sample(registry, "ragpulse_signal_drift_detected", signal=signal)


def test_a_retrieval_score_shift_is_detected_and_healthy_traffic_stays_quiet() -> None:
    rng = random.Random(7)
    signals, registry, _ = recorder(drift=SMALL, drift_batch=10)
    stream(signals, 20_000, 0, rng)
    assert detected(registry, "retrieval_top_score") == 0.0
    assert detected(registry, "retrieval_hit") == 0.0
    # A changed embedding model: the top score drops by two of its standard deviations.
    delay = None
    for n in range(20_000, 21_000, 10):
        stream(signals, 10, n, rng, mean=0.7)
        if detected(registry, "retrieval_top_score") == 1.0:
            delay = n + 10 - 20_000
            break
    assert delay is not None and delay <= 200, delay
    assert sample(registry, "ragpulse_signal_drift_score", signal="retrieval_top_score") >= 1.0  # type: ignore[operator]


def test_a_rising_top_score_is_a_change_too() -> None:
    rng = random.Random(8)
    signals, registry, _ = recorder(drift=SMALL, drift_batch=10)
    stream(signals, 2_000, 0, rng, mean=0.5)
    stream(signals, 400, 2_000, rng, mean=0.7)  # a new model that scores everything higher
    assert detected(registry, "retrieval_top_score") == 1.0


def test_empty_retrievals_drop_the_hit_signal() -> None:
    rng = random.Random(9)
    signals, registry, _ = recorder(drift=SMALL, drift_batch=10)
    stream(signals, 2_000, 0, rng, empty=0.02)
    assert detected(registry, "retrieval_hit") == 0.0
    stream(signals, 200, 2_000, rng, empty=0.5)  # the index lost half its documents
    assert detected(registry, "retrieval_hit") == 1.0
    assert sample(registry, "ragpulse_empty_retrievals_total") > 40  # type: ignore[operator]


def test_batched_detector_keeps_baseline_and_window_in_interactions() -> None:
    detector = DriftDetector(DriftSettings(baseline_size=1000, window=200), batch=10)
    assert (detector.params.baseline_size, detector.params.window) == (100, 20)
    assert detector.params.min_sigma == pytest.approx(0.05 / math.sqrt(10))


# -- Drift state across restarts -------------------------------------------------------------------


class FailingStore:
    """A store whose every call fails, as Redis does while it is down."""

    def __init__(self) -> None:
        self.calls = 0

    async def load(self, key: object) -> None:
        self.calls += 1
        raise ConnectionError("redis down")

    async def save(self, states: object) -> None:
        self.calls += 1
        raise ConnectionError("redis down")


def test_a_restarted_recorder_resumes_its_baselines_from_the_store() -> None:
    import asyncio

    from agent.drift_store import MemoryDriftStore

    store = MemoryDriftStore()
    rng = random.Random(12)

    async def first() -> None:
        telemetry = SignalsTelemetry(CollectorRegistry())
        signals = SignalRecorder(telemetry, drift=SMALL, store=store)
        await signals.start()
        stream(signals, 2_000, 0, rng)  # baselines learnt
        await signals.shutdown(1.0)  # saved at shutdown

    asyncio.run(first())
    saved = store.states[("shop", "/ask", "signal:retrieval_top_score:b10")]
    assert saved["n"] == SMALL.baseline_size // 10
    assert ("shop", "/ask", "signal:retrieval_top_score:rise:b10") in store.states

    async def second() -> float | None:
        registry = CollectorRegistry()
        signals = SignalRecorder(SignalsTelemetry(registry), drift=SMALL, store=store)
        await signals.start()
        signals.record(interaction(0, scores=(0.8,)))  # opens the series: its state is loaded
        await asyncio.sleep(0.01)
        # No baseline to learn: a drop is judged against the saved one within the window.
        stream(signals, 300, 1, rng, mean=0.6)
        await signals.shutdown(1.0)
        return detected(registry, "retrieval_top_score")

    assert asyncio.run(second()) == 1.0


def test_a_store_outage_costs_the_state_never_the_signals() -> None:
    import asyncio

    store = FailingStore()
    errors: list[str] = []

    async def run() -> CollectorRegistry:
        registry = CollectorRegistry()
        signals = SignalRecorder(
            SignalsTelemetry(registry),
            drift=SMALL,
            store=store,  # type: ignore[arg-type]
            on_store_error=errors.append,
        )
        await signals.start()
        stream(signals, 800, 0, random.Random(13))
        await asyncio.sleep(0.01)
        await signals.shutdown(1.0)
        return registry

    registry = asyncio.run(run())
    assert sample(registry, "ragpulse_retrieved_chunks_count") == 800
    assert "load" in errors and "save" in errors
