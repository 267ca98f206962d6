"""Personal data out of text before it leaves for a remote judge: pure functions, no I/O.

Detected kinds (`kind` is also the `ragpulse_redactions_total` label):

- `email`: RFC 5322-ish addresses (`local@domain.tld`).
- `phone`: numbers that libphonenumber (`phonenumberslite`) parses as *valid* for one of the
  configured regions, or in international form (`+44 …`) for any region.
- `card`: 13–19 digit payment card numbers (spaces or dashes allowed) that pass the Luhn check.
- `iban`: IBANs whose country format and mod-97 checksum `python-stdnum` validates.
- `ip`: IPv4 and IPv6 addresses that `ipaddress` parses.
- custom kinds: user regular expressions (`redact_patterns: {EMPLOYEE_ID: 'E\\d{6}'}`).

Checksums (Luhn, mod 97) and libphonenumber's validity rules keep false positives down: an order
number or a timestamp is left alone. Names, postal addresses and free-text identifiers are *not*
detected (that needs a language model; see docs/security.md), unless a custom pattern says so.

Replacement is consistent across the texts of one call: every occurrence of the same value (after
normalisation: e-mails case-folded, phones in E.164, cards and IBANs without separators) becomes
the same placeholder, `<EMAIL_1>`, in the query, the chunks and the response alike, numbered in
order of first appearance. So a claim "write to <EMAIL_1>" is still supported by a chunk that
held the same address, and the same texts always give the same redacted texts (and cache keys).
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from agent.config import SecuritySettings

BUILTIN_KINDS = ("email", "phone", "card", "iban", "ip")
_PRIORITY = ("email", "iban", "card", "ip", "phone")
DEFAULT_PHONE_REGIONS = ("US", "GB", "DE", "FR", "IN")
_CUSTOM_KIND = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")

_EMAIL = re.compile(
    r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+"
    r"[A-Za-z]{2,24}\b"
)
# Digit runs with single spaces or dashes between digits; 13-19 digits are checked with Luhn.
_CARD = re.compile(r"(?<![\w-])\d(?:[ -]?\d){12,}(?![\w-])")
# Country code, check digits, then 11-30 alphanumerics, optionally in groups separated by spaces.
_IBAN = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}(?![A-Za-z0-9])")
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w]|\.\d)")
# Candidates only; ipaddress decides. At least two colons, hex groups, optional dotted tail.
_IPV6 = re.compile(
    r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|(?:\d{1,3}\.){3}\d{1,3})?(?![\w:])"
)
# A phone candidate: optional +, then digits with the separators people write; 7-20 digits.
_PHONE = re.compile(r"(?<![\w+])(?:\+|00)?\(?\d[\d \-.()/]{5,40}\d(?![\w])")
_ISO_DATE = re.compile(r"\d{4}-\d{1,2}-\d{1,2}")
# Runs of digits and the separators of cards, IPv4 addresses and phone numbers: the only places
# those three detectors look, so prose is scanned once instead of three times.
_RUN = re.compile(r"[+(]?\d[\d \-.()/]{5,}\d")
# Dates look like national phone numbers to libphonenumber (20240115 is "valid" in Germany).
_DATE = re.compile(r"\d{4}([-./])\d{1,2}\1\d{1,2}|\d{1,2}([-./])\d{1,2}\2\d{2,4}")


class RedactionConfigError(ValueError):
    """A custom pattern or kind is invalid; the message names it."""


class UnknownKindError(RedactionConfigError):
    """A kind to redact that is not built in (`redact_kinds`)."""


@dataclass(frozen=True, slots=True)
class Finding:
    start: int
    end: int
    kind: str
    value: str  # normalised: equal values get the same placeholder


@dataclass(frozen=True, slots=True)
class Redaction:
    """The redacted texts, in the order given, and how many values of each kind were replaced."""

    texts: tuple[str, ...]
    counts: Mapping[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def luhn_valid(digits: str) -> bool:
    from stdnum import luhn

    return luhn.is_valid(digits)


@functools.lru_cache(maxsize=32)
def _runs(text: str) -> tuple[tuple[int, int], ...]:
    return tuple(m.span() for m in _RUN.finditer(text))


def _in_runs(pattern: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    """pattern's matches inside the digit runs of text (lookarounds see one character beyond)."""
    for start, end in _runs(text):
        yield from pattern.finditer(text, start, end + 1)


def _emails(text: str) -> Iterable[Finding]:
    if "@" not in text:
        return
    for m in _EMAIL.finditer(text):
        yield Finding(m.start(), m.end(), "email", m.group().casefold())


def _card_digits(candidate: str) -> str | None:
    """The digits of a plausible card number: 13-19 digits, written in one piece or in groups of
    3-6 (4-4-4-4, 4-6-5, ...), passing the Luhn check."""
    groups = re.split(r"[ -]", candidate)
    digits = "".join(groups)
    if not 13 <= len(digits) <= 19:
        return None
    if len(groups) > 1 and not all(3 <= len(g) <= 6 for g in groups):
        return None
    return digits if luhn_valid(digits) else None


def _cards(text: str) -> Iterable[Finding]:
    for m in _in_runs(_CARD, text):
        digits = _card_digits(m.group())
        if digits is not None:
            yield Finding(m.start(), m.end(), "card", digits)
            continue
        # A card number next to other figures ("… 0958 4111 1111 1111 1111"): from each group
        # on, the longest window of whole groups (19 digits at most) that is a card.
        groups = [(g.start(), g.end()) for g in re.finditer(r"\d+", m.group())]
        i = 0
        while i < len(groups):
            ends, digits_so_far = [], 0
            for j in range(i, len(groups)):
                digits_so_far += groups[j][1] - groups[j][0]
                if digits_so_far > 19:
                    break
                ends.append(j)
            for j in reversed(ends):
                window = m.group()[groups[i][0] : groups[j][1]]
                digits = _card_digits(window)
                if digits is not None:
                    yield Finding(m.start() + groups[i][0], m.start() + groups[j][1], "card", digits)
                    i = j
                    break
            i += 1


def _ibans(text: str) -> Iterable[Finding]:
    from stdnum import iban

    for m in _IBAN.finditer(text):
        candidate = m.group()
        # The greedy match may have swallowed a following code-like word: drop groups until valid.
        while len(candidate.replace(" ", "")) >= 15:
            compact = candidate.replace(" ", "")
            if iban.is_valid(compact):
                yield Finding(m.start(), m.start() + len(candidate), "iban", compact)
                break
            if " " not in candidate:
                break
            candidate = candidate.rsplit(" ", 1)[0]


def _ips(text: str) -> Iterable[Finding]:
    for m in _in_runs(_IPV4, text):
        try:
            address = ipaddress.IPv4Address(m.group())
        except ValueError:
            continue
        yield Finding(m.start(), m.end(), "ip", str(address))
    if text.count(":") >= 2:
        for m in _IPV6.finditer(text):
            candidate = m.group()
            if not any(c.isalnum() for c in candidate):
                continue
            try:
                address6 = ipaddress.IPv6Address(candidate)
            except ValueError:
                continue
            yield Finding(m.start(), m.end(), "ip", str(address6))


def _phones(regions: Sequence[str]) -> Callable[[str], Iterable[Finding]]:
    import phonenumbers

    e164 = phonenumbers.PhoneNumberFormat.E164

    def parse(candidate: str, in_regions: Sequence[str] = regions) -> str | None:
        """The number in E.164 when `candidate` is a valid phone number of a known region."""
        if not 7 <= sum(c.isdigit() for c in candidate) <= 17 or _DATE.fullmatch(candidate):
            return None
        if _ISO_DATE.search(candidate):  # "2024-01-15 1889" is a date and a year
            return None
        if candidate.startswith("00"):
            candidate = "+" + candidate[2:]
        for region in (None,) if candidate.startswith("+") else in_regions:
            try:
                number = phonenumbers.parse(candidate, region)
            except phonenumbers.NumberParseException:
                continue
            if phonenumbers.is_valid_number(number):
                return str(phonenumbers.format_number(number, e164))
        return None

    def find(text: str) -> Iterable[Finding]:
        for m in _in_runs(_PHONE, text):
            found = parse(m.group())
            if found is not None:
                yield Finding(m.start(), m.end(), "phone", found)
                continue
            # Two numbers in a row, or a number followed by another figure: from each group on,
            # the longest run of space-separated groups valid in the first region that has one.
            groups = [(g.start(), g.end()) for g in re.finditer(r"\S+", m.group())]
            i = 0
            while len(groups) > 1 and i < len(groups):
                taken = split_at(m.group(), groups, i)
                if taken is None:
                    i += 1
                    continue
                j, value = taken
                yield Finding(m.start() + groups[i][0], m.start() + groups[j][1], "phone", value)
                i = j + 1

    def split_at(candidate: str, groups: list[tuple[int, int]], i: int) -> tuple[int, str] | None:
        for region in regions:
            for j in range(len(groups) - 1, i - 1, -1):
                found = parse(candidate[groups[i][0] : groups[j][1]], (region,))
                if found is not None:
                    return j, found
        return None

    return find


def _pattern(kind: str, pattern: re.Pattern[str]) -> Callable[[str], Iterable[Finding]]:
    def find(text: str) -> Iterable[Finding]:
        for m in pattern.finditer(text):
            if m.end() > m.start():
                yield Finding(m.start(), m.end(), kind, m.group())

    return find


@dataclass(frozen=True, slots=True)
class RedactionRules:
    """What to redact. `patterns` map a custom kind to a regular expression; `allow` lists values
    (compared case-insensitively, after the same normalisation) that are never redacted, such as
    the support address that every answer quotes."""

    kinds: tuple[str, ...] = BUILTIN_KINDS
    patterns: Mapping[str, str] = field(default_factory=dict)
    allow: tuple[str, ...] = ()
    phone_regions: tuple[str, ...] = DEFAULT_PHONE_REGIONS


class Redactor:
    """Finds personal data in texts and replaces it with consistent placeholders."""

    def __init__(self, rules: RedactionRules = RedactionRules()) -> None:
        unknown = set(rules.kinds) - set(BUILTIN_KINDS)
        if unknown:
            raise RedactionConfigError(
                f"unknown redaction kind(s) {sorted(unknown)}; choose from {BUILTIN_KINDS}"
            )
        # Custom patterns first: a user's rule wins over a built-in one on the same text.
        detectors: list[Callable[[str], Iterable[Finding]]] = []
        for kind, source in rules.patterns.items():
            if not _CUSTOM_KIND.match(kind):
                raise RedactionConfigError(f"custom redaction kind {kind!r}: use letters, digits and _")
            if kind.lower() in BUILTIN_KINDS:
                raise RedactionConfigError(f"custom redaction kind {kind!r} clashes with a built-in kind")
            try:
                compiled = re.compile(source)
            except re.error as exc:
                raise RedactionConfigError(f"redaction pattern {kind}: invalid regex: {exc}") from None
            detectors.append(_pattern(kind.lower(), compiled))
        builtin = {
            "email": _emails,
            "iban": _ibans,
            "card": _cards,
            "ip": _ips,
            "phone": _phones(tuple(r.upper() for r in rules.phone_regions)),
        }
        # Checksummed and unambiguous kinds before phone numbers, which are the loosest match.
        detectors += [builtin[kind] for kind in _PRIORITY if kind in rules.kinds]
        self._detectors = tuple(detectors)
        self._allow = frozenset(value.casefold() for value in rules.allow)
        self._allow_normalised = self._allowed_values(rules.allow) if rules.allow else frozenset()

    def _allowed_values(self, allow: Sequence[str]) -> frozenset[str]:
        # The normalised forms of allowed values, so "+44 20 7946 0958" also allows "020 7946 0958".
        normalised: set[str] = set()
        for value in allow:
            for detect in self._detectors:
                normalised.update(f.value.casefold() for f in detect(value))
        return frozenset(normalised)

    def _is_allowed(self, text: str, finding: Finding) -> bool:
        if not self._allow:
            return False
        return (
            text[finding.start : finding.end].casefold() in self._allow
            or finding.value.casefold() in self._allow_normalised
        )

    def find(self, text: str) -> list[Finding]:
        """Non-overlapping findings, in text order; earlier detectors win overlaps, then longer."""
        found: list[Finding] = []
        taken: list[tuple[int, int]] = []
        seen = text  # the text with what earlier detectors took blanked out (positions kept)
        for detect in self._detectors:
            fresh = []
            for finding in sorted(detect(seen), key=lambda f: (f.start, f.start - f.end)):
                if any(finding.start < end and start < finding.end for start, end in taken):
                    continue
                if self._is_allowed(text, finding):
                    continue
                fresh.append(finding)
                taken.append((finding.start, finding.end))
            if fresh:
                found += fresh
                # Later (looser) detectors must not re-parse a card number as a phone number.
                parts, position = [], 0
                for f in sorted(fresh, key=lambda f: f.start):
                    parts += [seen[position : f.start], "\x00" * (f.end - f.start)]
                    position = f.end
                seen = "".join([*parts, seen[position:]])
        found.sort(key=lambda f: f.start)
        return found

    def redact(self, texts: Sequence[str]) -> Redaction:
        """Redact `texts` together: the same value gets the same placeholder in all of them."""
        placeholders: dict[tuple[str, str], str] = {}
        per_kind: Counter[str] = Counter()
        counts: Counter[str] = Counter()
        out = []
        for text in texts:
            findings = self.find(text) if text else []
            if not findings:
                out.append(text)
                continue
            parts = []
            position = 0
            for finding in findings:
                key = (finding.kind, finding.value)
                placeholder = placeholders.get(key)
                if placeholder is None:
                    per_kind[finding.kind] += 1
                    placeholder = f"<{finding.kind.upper()}_{per_kind[finding.kind]}>"
                    placeholders[key] = placeholder
                parts.append(text[position : finding.start])
                parts.append(placeholder)
                position = finding.end
                counts[finding.kind] += 1
            parts.append(text[position:])
            out.append("".join(parts))
        return Redaction(tuple(out), dict(counts))


def check(section: SecuritySettings) -> None:
    """Raise UnknownKindError for a kind that is not built in, or RedactionConfigError for a
    custom pattern that does not build: the security section's checks at start-up."""
    unknown = sorted(set(section.kinds) - set(BUILTIN_KINDS))
    if unknown:
        raise UnknownKindError(f"unknown kind(s) {unknown}; choose from {list(BUILTIN_KINDS)}")
    build(section)


def build(section: SecuritySettings) -> Redactor:
    """The redactor of the security section (`redact_*`)."""
    return Redactor(
        RedactionRules(
            kinds=section.kinds,
            patterns=section.patterns,
            allow=section.allow,
            phone_regions=section.phone_regions,
        )
    )
