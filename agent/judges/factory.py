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
    if settings.redis_url is None:
        return MemoryVerdictCache(settings.cache_max_entries)
    from agent.judges.redis_cache import RedisVerdictCache, redis_client

    return RedisVerdictCache(
        redis if redis is not None else redis_client(settings.redis_url),
        settings.cache_ttl_seconds,
        telemetry,
        prefix=settings.cache_key_prefix,
    )


def build_inner_judge(settings: Settings, telemetry: Telemetry) -> Judge:
    """The judge that does the work, without cache or instruments."""
    if settings.judge_model == "embedding":
        from agent.judges.embedding import EmbeddingJudge

        return EmbeddingJudge()
    if settings.judge_is_local:
        return LexicalJudge()
    # Imported here: it loads litellm, which a local-judge deployment never needs.
    from agent.judges.llm import LLMJudge, LLMJudgeOptions

    key = settings.judge_api_key.get_secret_value() if settings.judge_api_key else None
    options = LLMJudgeOptions(
        api_base=settings.judge_api_base,
        api_key=key,
        timeout=settings.judge_timeout_seconds,
        max_retries=settings.judge_max_retries,
        retry_max_elapsed=settings.judge_retry_max_elapsed_seconds,
        breaker_failures=settings.judge_breaker_failures,
        breaker_cooldown=settings.judge_breaker_cooldown_seconds,
        max_concurrency=settings.judge_max_concurrency,
        structured_output=settings.judge_structured_output,
    )
    return LLMJudge(settings.judge_model, options, usage=telemetry)


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
        max_text_chars=settings.judge_max_text_chars,
        offload=settings.judge_is_local,
        on_truncate=telemetry.judge_texts_truncated.inc,
    )
    judge: CachedJudge | InstrumentedJudge = InstrumentedJudge(bounded, telemetry)
    if cached:
        judge = CachedJudge(judge, build_verdict_cache(settings, telemetry, redis), telemetry)
    if not settings.redacts:
        return judge
    from agent.redact import RedactionRules, Redactor

    rules = RedactionRules(
        kinds=settings.redact_kinds,
        patterns=settings.redact_patterns,
        allow=settings.redact_allow,
        phone_regions=settings.redact_phone_regions,
    )
    return RedactingJudge(judge, Redactor(rules), telemetry)
