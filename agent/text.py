"""Text helpers every judge and signal uses: words, sentences, numbers, names and claims.

Pure functions over strings, at the bottom floor: the lexical and embedding judges, the LLM
judge's question parsing and the cheap signals all read text the same way.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
# A sentence ends at . ! ? followed by space (not inside "3.5" or "e.g."-like tokens), or a newline.
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|\n+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_NAME = re.compile(r"\b[A-Z][a-zA-Z]+(?:[-'][A-Za-z]+)*")
# Function words carry no evidence of where an answer came from.
STOPWORDS = frozenset(
    """
    a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    """.split()  # noqa: SIM905
)
# List markers and source references carry numbers that are no claim: "2.", "Passage 3".
LIST_MARKER = re.compile(r"^\s*(?:\(?\d{1,2}[.)]|[-*•#]+)(?:\s+|$)")
SOURCE_REFERENCE = re.compile(
    r"\b(?:passages?|steps?|documents?|sources?|chunks?)\s+\d+(?:\s*(?:,|and|&)\s*\d+)*", re.I
)


def _fold(token: str) -> str:
    """A light suffix fold so that 'cooking' meets 'cook' and 'steaks' meets 'steak'."""
    for suffix, min_len in (("ing", 6), ("ed", 5), ("ly", 5), ("es", 5), ("s", 4)):
        if len(token) >= min_len and token.endswith(suffix) and not token.endswith("ss"):
            return token[: -len(suffix)]
    return token


# Words a response uses to talk about its sources or itself, not about the world.
_META_WORDS = """
    passage passages provided given based answer answers question questions information context
    unable mention mentioned mentions hope helps let know note according summary overall
    """.split()  # noqa: SIM905
# Connectives order an answer's claims; they are not part of what a claim says.
_CONNECTIVES = """
    however therefore thus hence moreover furthermore additionally whereas nevertheless nonetheless
    ultimately
    """.split()  # noqa: SIM905
# Assent, refusal and hedges: "Yes.", "Sure!", "Sorry, I don't know." assert nothing checkable.
_NON_ASSERTING = """
    yes yeah yep nope sure ok okay maybe perhaps correct incorrect true false right wrong indeed
    absolutely definitely certainly sorry thank thanks hello hi don doesn didn isn aren wasn
    t s ll re ve d m
    """.split()  # noqa: SIM905
META_WORDS = frozenset(map(_fold, _META_WORDS + _CONNECTIVES + _NON_ASSERTING))
# "The passages do not mention X.", "The provided information lacks Y.": what the sources lack is
# said of the sources, not of the world, so such a sentence is no claim to check against them.
_THE_SOURCES = re.compile(
    r"\b(?:passages?|contexts?|documents?|sources?)\b"
    r"|\b(?:given|provided) (?:information|texts?|articles?)\b",
    re.I,
)
_ABSENCE = re.compile(r"\b(?:not|no|nor|unable|cannot|neither|without|lacks?)\b|n't\b", re.I)


def content_words(text: str) -> set[str]:
    """Lowercased word tokens minus stopwords, with a light suffix fold."""
    return {_fold(t) for t in _WORD.findall(text.lower()) if t not in STOPWORDS}


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def numbers(text: str) -> set[str]:
    """Numbers as written, without thousands separators ('1,000' is '1000'), minus source and
    step references ('Passage 2', 'steps 4 and 5') and list markers."""
    text = SOURCE_REFERENCE.sub(" ", LIST_MARKER.sub("", text))
    return {n.replace(",", "").rstrip(".") for n in _NUMBER.findall(text)}


def names(text: str) -> set[str]:
    """Capitalised words inside a sentence (not its first word), folded: likely proper names."""
    found = set()
    for sentence in sentences(text):
        body = LIST_MARKER.sub("", sentence)
        for clause in re.split(r"[:;]\s*", body):
            for match in list(_NAME.finditer(clause))[1:] if clause[:1].isupper() else _NAME.finditer(clause):
                word = match.group().lower()
                if word not in STOPWORDS and word not in META_WORDS:
                    found.add(_fold(word))
    return found


def claims(text: str) -> list[str]:
    """A text's claims: its sentences, without list markers, that say something about the world
    (at least one content word that is not about the sources: "Based on the passages, ..." and
    "Unable to answer based on given passages." are no claims). A lead-in ending in a colon
    ("Here are the steps:") introduces claims and is none, and neither is a sentence saying what
    the sources do not contain ("The passages do not mention the oven's temperature.")."""
    found = []
    for sentence in sentences(text):
        body = LIST_MARKER.sub("", sentence).strip()
        if body.endswith(":") or (_THE_SOURCES.search(body) and _ABSENCE.search(body)):
            continue
        if content_words(SOURCE_REFERENCE.sub(" ", body)) - META_WORDS:
            found.append(body)
    return found
