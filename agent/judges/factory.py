"""Build the judge the settings ask for: cache → instruments → local or LLM judge."""

from __future__ import annotations

from typing import Any

from agent.config import Settings
from agent.judges.base import Judge
from agent.judges.cache import CachedJudge, MemoryVerdictCache, VerdictCache
from agent.judges.instrumented import InstrumentedJudge
from agent.judges.local import LexicalJudge
from agent.judges.offload import BoundedJudge
from agent.judges.redacting import RedactingJudge
from agent.telemetry import Telemetry


def build_verdict_cache(settings: Settings, telemetry: Telemetry, redis: Any = None) -> VerdictCache:
    """Redis when configured (sharing `redis`, the agent's one client, if given), else in-process."""
    if settings.redis.url is None:
        return MemoryVerdictCache(settings.cache.max_entries)
    from agent.judges.redis_cache import RedisVerdictCache, redis_client

    return RedisVerdictCache(
        redis if redis is not None else redis_client(settings.redis.url),
        settings.cache.ttl_seconds,
        telemetry,
        prefix=settings.cache.key_prefix,
    )


def build_inner_judge(settings: Settings, telemetry: Telemetry) -> Judge:
    """The judge that does the work, without cache or instruments."""
    if settings.judge.model == "embedding":
        from agent.judges.embedding import EmbeddingJudge

        return EmbeddingJudge()
    if settings.judge.is_local:
        return LexicalJudge()
    # Imported here: it loads litellm, which a local-judge deployment never needs.
    from agent.judges.llm import LLMJudge, LLMJudgeOptions

    key = settings.judge.api_key.get_secret_value() if settings.judge.api_key else None
    options = LLMJudgeOptions(
        api_base=settings.judge.api_base,
        api_key=key,
        timeout=settings.judge.timeout_seconds,
        max_retries=settings.judge.max_retries,
        retry_max_elapsed=settings.judge.retry_max_elapsed_seconds,
        breaker_failures=settings.judge.breaker_failures,
        breaker_cooldown=settings.judge.breaker_cooldown_seconds,
        max_concurrency=settings.judge.max_concurrency,
        structured_output=settings.judge.structured_output,
    )
    return LLMJudge(settings.judge.model, options, usage=telemetry)


def build_judge(
    settings: Settings, telemetry: Telemetry, redis: Any = None, *, cached: bool = True
) -> CachedJudge | RedactingJudge | InstrumentedJudge:
    """The judge metrics use: verdict cache in front of an instrumented local or LLM judge, behind
    redaction of personal data when `settings.redacts` (so cache keys see redacted text only).
    `cached=False` leaves the cache out (for questions whose answers it does not keep, such as a
    report's reasons) and nothing else: redaction stays in front.

    `healthy()` on the result is False while an LLM judge's circuit breaker is open. Texts are cut
    to `judge_max_text_chars`, and local judges compute in worker threads, off the event loop.
    """
    bounded = BoundedJudge(
        build_inner_judge(settings, telemetry),
        max_text_chars=settings.judge.max_text_chars,
        offload=settings.judge.is_local,
        on_truncate=telemetry.judge_texts_truncated.inc,
    )
    judge: CachedJudge | InstrumentedJudge = InstrumentedJudge(bounded, telemetry)
    if cached:
        judge = CachedJudge(judge, build_verdict_cache(settings, telemetry, redis), telemetry)
    if not settings.redacts:
        return judge
    from agent.redact import RedactionRules, Redactor

    rules = RedactionRules(
        kinds=settings.security.kinds,
        patterns=settings.security.patterns,
        allow=settings.security.allow,
        phone_regions=settings.security.phone_regions,
    )
    return RedactingJudge(judge, Redactor(rules), telemetry)
