"""Redaction of personal data (agent/redact.py) and the redacting judge wrapper, in process."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from agent.build import build_judge, load_checked_settings
from agent.config import ConfigError, Settings
from agent.judges.base import ChunkAssessment, ClaimVerdict, InteractionVerdicts
from agent.judges.cache import CachedJudge, MemoryVerdictCache
from agent.judges.local import LexicalJudge
from agent.judges.redacting import RedactingJudge
from agent.model import Criterion, Verdict
from agent.redact import RedactionConfigError, RedactionRules, Redactor
from agent.telemetry import JudgeTelemetry

# Test values: documentation ranges, example domains, the standard test card and IBAN examples.
PLANTED = {
    "email": ["jane.doe@example.com", "Bob.Smith+rag@mail.example.org"],
    "phone": ["+44 20 7946 0958", "(415) 555-2671", "+49 30 901820"],
    "card": ["4111 1111 1111 1111", "5500-0000-0000-0004", "378282246310005"],
    "iban": ["GB82 WEST 1234 5698 7654 32", "DE89370400440532013000"],
    "ip": ["192.0.2.17", "2001:db8::8a2e:370:7334"],
}


def test_every_planted_value_is_replaced_by_a_placeholder_of_its_kind() -> None:
    redactor = Redactor()
    for kind, values in PLANTED.items():
        for value in values:
            text = f"Contact details: {value}. Thanks!"
            (redacted,) = redactor.redact([text]).texts
            assert value not in redacted, (kind, redacted)
            assert f"<{kind.upper()}_1>" in redacted, (kind, redacted)
            assert redacted.startswith("Contact details: ") and redacted.endswith(". Thanks!")


@pytest.mark.parametrize(
    "text",
    [
        "Paris has 2,102,650 residents and was founded in 250 BC.",
        "Order 1234-5678 shipped on 2024-01-15 at 12:30:45 (release 1.2.3).",
        "The card 4111 1111 1111 1112 fails the Luhn check.",  # one digit off
        "GB82WEST12345698765433 has a wrong checksum.",
        "999.12.1.1 is no address; neither is a:b.",
        "ISBN 978-3-16-148410-0, price 1 234 euros, the year 1889.",
    ],
)
def test_look_alikes_are_left_alone(text: str) -> None:
    assert Redactor().redact([text]).texts == (text,)


def test_placeholders_are_consistent_across_query_chunks_and_response() -> None:
    query = "What is the phone number of jane.doe@example.com?"
    chunk1 = "Jane Doe (Jane.Doe@Example.com) can be reached on +44 20 7946 0958."
    chunk2 = "Bob (bob@example.org) sits at 192.0.2.17; Jane's desk phone is 020 7946 0958."
    response = "You can call JANE.DOE@EXAMPLE.COM's number, +44 20 7946 0958."
    redaction = Redactor().redact([query, response, chunk1, chunk2])
    q, r, c1, c2 = redaction.texts
    assert q == "What is the phone number of <EMAIL_1>?"
    assert r == "You can call <EMAIL_1>'s number, <PHONE_1>."
    assert c1 == "Jane Doe (<EMAIL_1>) can be reached on <PHONE_1>."
    # The national and the international form of one number are one value.
    assert c2 == "Bob (<EMAIL_2>) sits at <IP_1>; Jane's desk phone is <PHONE_1>."
    assert redaction.counts == {"email": 4, "phone": 3, "ip": 1}
    # Redaction is deterministic: the same texts give the same output (and so the same cache keys).
    assert Redactor().redact([query, response, chunk1, chunk2]) == redaction


def test_allow_list_and_custom_patterns() -> None:
    rules = RedactionRules(
        patterns={"EMPLOYEE_ID": r"\bE\d{6}\b", "TICKET": r"TCK-\d+"},
        allow=("support@acme.example", "+1 415 555 2671"),
    )
    redactor = Redactor(rules)
    text = (
        "E123456 opened TCK-42 and TCK-42 again; write to Support@ACME.example or jane@acme.example; "
        "call (415) 555-2671 or (212) 555-1234."
    )
    (redacted,) = redactor.redact([text]).texts
    assert redacted == (
        "<EMPLOYEE_ID_1> opened <TICKET_1> and <TICKET_1> again; write to Support@ACME.example or "
        "<EMAIL_1>; call (415) 555-2671 or <PHONE_1>."
    )


def test_numbers_in_a_row_are_each_found() -> None:
    (redacted,) = (
        Redactor()
        .redact(["call 020 7946 0958 2 times or 415 555 2671 415 555 2672; card 0958 4111 1111 1111 1111"])
        .texts
    )
    assert redacted == "call <PHONE_1> 2 times or <PHONE_2> <PHONE_3>; card 0958 <CARD_1>"


def test_kinds_can_be_switched_off() -> None:
    redactor = Redactor(RedactionRules(kinds=("email",)))
    (redacted,) = redactor.redact(["jane@example.com from 192.0.2.17"]).texts
    assert redacted == "<EMAIL_1> from 192.0.2.17"


@pytest.mark.parametrize(
    "rules",
    [
        RedactionRules(patterns={"bad kind": "x"}),
        RedactionRules(patterns={"EMAIL": "x"}),
        RedactionRules(patterns={"OK": "("}),
        RedactionRules(kinds=("email", "names")),
    ],
)
def test_invalid_rules_are_refused(rules: RedactionRules) -> None:
    with pytest.raises(RedactionConfigError):
        Redactor(rules)


def test_settings_turn_redaction_on_for_llm_judges_only() -> None:
    assert Settings(judge_model="openai/gpt-4o-mini").redacts
    assert not Settings(judge_model="lexical").redacts
    assert Settings(judge_model="lexical", redact_pii="on").redacts
    assert not Settings(judge_model="openai/gpt-4o-mini", redact_pii="off").redacts
    # YAML's bare on/off, and a JSON object of patterns from the environment.
    settings = load_checked_settings(
        environ={"RAGPULSE_REDACT_PATTERNS": '{"EMPLOYEE_ID": "E\\\\d{6}"}', "RAGPULSE_REDACT_PII": "on"}
    )
    assert settings.security.patterns == {"EMPLOYEE_ID": r"E\d{6}"}
    with pytest.raises(ConfigError, match="redact_patterns"):
        load_checked_settings(environ={"RAGPULSE_REDACT_PATTERNS": '{"X": "("}'})
    with pytest.raises(ConfigError, match="redact_kinds"):
        load_checked_settings(environ={"RAGPULSE_REDACT_KINDS": "email,names"})


class RecordingJudge:
    """A judge that records the texts it is asked about and answers like the lexical judge."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self._lexical = LexicalJudge()

    @property
    def model(self) -> str:
        return "recording"

    def prompt_version(self, kind: str) -> str:
        return "1"

    def healthy(self) -> bool:
        return True

    async def assess_interaction(
        self, query: str, response: str, chunks: Sequence[str], criteria: Sequence[Criterion] = ()
    ) -> InteractionVerdicts:
        self.seen += [query, response, *chunks]
        return await self._lexical.assess_interaction(query, response, chunks)

    async def assess_chunks(
        self, query: str, answer: str | None, chunks: Sequence[str]
    ) -> list[ChunkAssessment]:
        self.seen += [query, answer or "", *chunks]
        return await self._lexical.assess_chunks(query, answer, chunks)

    async def check_response(self, query: str, response: str, chunks: Sequence[str]) -> list[ClaimVerdict]:
        self.seen += [query, response, *chunks]
        return await self._lexical.check_response(query, response, chunks)

    async def check_reference(self, reference: str, chunks: Sequence[str]) -> list[Verdict]:
        self.seen += [reference, *chunks]
        return await self._lexical.check_reference(reference, chunks)

    async def compare_answers(self, query: str, response: str, reference: str):  # type: ignore[no-untyped-def]
        self.seen += [query, response, reference]
        return await self._lexical.compare_answers(query, response, reference)


def test_redacting_judge_hides_values_from_cache_and_judge_and_counts_once_per_interaction() -> None:
    telemetry = JudgeTelemetry(CollectorRegistry())
    inner = RecordingJudge()
    cache = MemoryVerdictCache(100)
    judge = RedactingJudge(CachedJudge(inner, cache, telemetry), Redactor(), telemetry)
    query = "Which card did jane.doe@example.com use?"
    response = "jane.doe@example.com paid with card 4111 1111 1111 1111."
    chunks = ["Payment by jane.doe@example.com with 4111-1111-1111-1111 from 192.0.2.17."]

    async def ask() -> None:
        await judge.assess_interaction(query, response, chunks)
        await judge.assess_chunks(query, response, chunks)  # cached
        await judge.check_response(query, response, chunks)  # cached

    asyncio.run(ask())
    joined = "\n".join(inner.seen)
    assert "jane.doe@example.com" not in joined and "4111" not in joined and "192.0.2.17" not in joined
    assert "<EMAIL_1> paid with card <CARD_1>." in inner.seen
    assert (
        chunks[0]
        .replace("jane.doe@example.com", "<EMAIL_1>")
        .replace("4111-1111-1111-1111", "<CARD_1>")
        .replace("192.0.2.17", "<IP_1>")
        in inner.seen
    )
    # Counted per interaction (one set of texts), not per question asked.
    assert telemetry.redactions.labels("email")._value.get() == 3
    assert telemetry.redactions.labels("card")._value.get() == 2
    assert telemetry.redactions.labels("ip")._value.get() == 1


def test_factory_wraps_llm_judges_only() -> None:
    telemetry = JudgeTelemetry(CollectorRegistry())
    assert isinstance(build_judge(Settings(judge_model="lexical"), telemetry), CachedJudge)
    redacting = build_judge(Settings(judge_model="lexical", redact_pii="on"), telemetry)
    assert isinstance(redacting, RedactingJudge)
    # The inner judges (the combined question included) are reached through redaction only.
    assert isinstance(redacting.inner, CachedJudge)


POOL = [(kind, value) for kind, values in PLANTED.items() for value in values]
FILLER = [
    "the",
    "order",
    "shipped",
    "in",
    "1889",
    "to",
    "Paris",
    "v1.2.3",
    "on",
    "2024-01-15",
    "at",
    "12:30",
    ".",
]


@settings(max_examples=200, deadline=None, database=None)
@given(
    st.lists(
        st.lists(st.one_of(st.sampled_from(FILLER), st.sampled_from(range(len(POOL)))), max_size=12),
        min_size=1,
        max_size=5,
    )
)
def test_planted_values_never_survive_and_share_one_placeholder_across_texts(
    texts: list[list[str | int]],
) -> None:
    # Values stand apart as in prose (a comma between neighbours); numbers run together with only
    # spaces between them are a different problem (see the two-numbers-in-a-row test).
    rendered = [", ".join(POOL[p][1] if isinstance(p, int) else p for p in parts) for parts in texts]
    redacted = Redactor().redact(rendered).texts
    placeholder = re.compile(r"<([A-Z]+)_(\d+)>")
    for original, parts, out in zip(rendered, texts, redacted, strict=True):
        planted = [POOL[p] for p in parts if isinstance(p, int)]
        for _, value in planted:
            assert value not in out, (original, out)
        kinds = [m.group(1).lower() for m in placeholder.finditer(out)]
        assert sorted(kinds) == sorted(kind for kind, _ in planted), (original, out)
    # One value, one placeholder, in every text.
    seen: dict[str, set[str]] = {}
    for parts, out in zip(texts, redacted, strict=True):
        slots = [p for p in parts if isinstance(p, int)]
        found = placeholder.findall(out)
        for p, (kind, number) in zip(slots, found, strict=True):
            seen.setdefault(POOL[p][1], set()).add(f"{kind}_{number}")
    assert all(len(names) == 1 for names in seen.values()), seen
