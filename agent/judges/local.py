"""Local judges: no network, no model download, cheap enough to run on every sampled span.

`LexicalJudge` decides by content-word overlap. It is a baseline with known limits: it cannot see
paraphrase, and a chunk that repeats the response's words is "useful" even if the model ignored
it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from agent.model import Verdict

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
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


def content_words(text: str) -> set[str]:
    """Lowercased word tokens minus stopwords, with a light plural/suffix fold."""
    words = set()
    for token in _WORD.findall(text.lower()):
        if token in STOPWORDS:
            continue
        if len(token) > 4 and token.endswith("s") and not token.endswith("ss"):
            token = token[:-1]
        words.add(token)
    return words


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


class LexicalJudge:
    """Judges by lexical overlap.

    Chunk usefulness: the score is the largest share of one response sentence's content words
    found in the chunk; a chunk is useful when that share reaches `usefulness_threshold`.
    """

    model = "lexical"

    def __init__(self, usefulness_threshold: float = 0.5) -> None:
        self._usefulness_threshold = usefulness_threshold

    def prompt_version(self, kind: str) -> str:
        return f"lexical-{kind}-v1"

    async def chunk_usefulness(self, query: str, response: str, chunks: Sequence[str]) -> list[Verdict]:
        response_sentences = [words for s in sentences(response) if (words := content_words(s))]
        verdicts = []
        for chunk in chunks:
            chunk_words = content_words(chunk)
            score = max((len(words & chunk_words) / len(words) for words in response_sentences), default=0.0)
            verdicts.append(Verdict(score >= self._usefulness_threshold, score=round(score, 4)))
        return verdicts
