"""The judge metrics use, as one stack: redaction → verdict cache → instruments → bounds → the
local or LLM judge that does the work (its settings section: `judge`; the cache's: `cache`).

Order matters and is fixed here: redaction in front, so cache keys and everything behind it see
redacted text only; the cache in front of the instruments, so only cache misses are counted as
judge calls and reported to the budget.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, TypeAlias

from agent.config import CacheSettings, JudgeSettings
from agent.judges.base import Judge, SpendSink
from agent.judges.cache import CachedJudge, MemoryVerdictCache, VerdictCache
from agent.judges.instrumented import InstrumentedJudge
from agent.judges.local import LexicalJudge
from agent.judges.offload import BoundedJudge
from agent.judges.redacting import RedactingJudge
from agent.redact import Redactor
from agent.telemetry import JudgeTelemetry

# What `build` returns: the outermost judge of the stack, whichever parts it has.
StackedJudge: TypeAlias = CachedJudge | RedactingJudge | InstrumentedJudge


def build_cache(section: CacheSettings, telemetry: JudgeTelemetry, redis: Any = None) -> VerdictCache:
    """Redis when there is a client (the agent's one), else in-process."""
    if redis is None:
        return MemoryVerdictCache(section.max_entries)
    from agent.judges.redis_cache import RedisVerdictCache

    return RedisVerdictCache(redis, section.ttl_seconds, telemetry, prefix=section.key_prefix)


def build_inner(section: JudgeSettings, telemetry: JudgeTelemetry, spend: SpendSink | None = None) -> Judge:
    """The judge that does the work, without cache or instruments. An LLM judge reports its token
    usage to `telemetry` and the USD it costs to `spend` (the judge budget)."""
    if section.model == "embedding":
        from agent.judges.embedding import EmbeddingJudge

        return EmbeddingJudge()
    if section.is_local:
        return LexicalJudge()
    # Imported here: it loads litellm, which a local-judge deployment never needs.
    from agent.judges.caller import ModelCaller
    from agent.judges.llm import LLMJudge

    return LLMJudge(ModelCaller(section, usage=telemetry, spend=spend))


def build(
    section: JudgeSettings,
    telemetry: JudgeTelemetry,
    *,
    cache: VerdictCache | None,
    redactor: Redactor | None,
    spend: SpendSink | None = None,
) -> StackedJudge:
    """The stack over `build_inner(section)`: texts cut to `judge_max_text_chars` (local judges
    compute in worker threads, off the event loop), instruments, then `cache` and `redactor`
    when given. `healthy()` on the result is False while an LLM judge's circuit breaker is open.
    Every call that reaches the judge, and its price, is reported to `spend` (the judge budget)."""
    bounded = BoundedJudge(
        build_inner(section, telemetry, spend),
        max_text_chars=section.max_text_chars,
        offload=section.is_local,
        on_truncate=telemetry.texts_truncated.inc,
    )
    judge: CachedJudge | InstrumentedJudge = InstrumentedJudge(bounded, telemetry, spend)
    if cache is not None:
        judge = CachedJudge(judge, cache, telemetry)
    if redactor is None:
        return judge
    return RedactingJudge(judge, redactor, telemetry)


def self_check(section: JudgeSettings, judge: Judge) -> Callable[[], Coroutine[Any, Any, object]] | None:
    """`ragpulse run`'s check of `judge` at start (agent/judges/llm.py), or None when the
    section says there is none (`JudgeSettings.checked_at_start`)."""
    if not section.checked_at_start:
        return None
    # Imported here, as in build_inner: a local-judge deployment never loads the LLM judge.
    from agent.judges.llm import self_check as check_judge

    return functools.partial(check_judge, judge, section.api_base or "")
