"""An LLM's confidence in its verdicts, read from the log-probabilities of its answer tokens.

A judge answers with JSON flags (`"supported": 1`). Where the provider returns log-probabilities
(OpenAI-compatible APIs do with `logprobs=True, top_logprobs=N`), the probability of "yes" at
each flag is p(yes) / (p(yes) + p(no)) over the top alternatives of that token, or the chosen
token's probability (1 - it for a "no") when the alternatives are missing. Those become the
verdicts' `score`, which metrics average (agent/model.py `Verdict.confidence`).

The k-th flag named `key` in the answer text belongs to the k-th verdict of that name in the
parsed answer (JSON lists keep their order). When the counts differ, or a flag's token cannot be
read, the answer stays binary: a wrong confidence is worse than none.

A binary custom criterion's answer (`"cites_policy": 1` under `"criteria"`) is a flag named
after the criterion and is graded the same way; a 1-5 answer is not a yes/no and is kept.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agent.judges.base import ChunkAssessment, ClaimVerdict, InteractionVerdicts
from agent.model import Verdict

_YES, _NO = frozenset({"1", "true"}), frozenset({"0", "false"})
# The keys of the judge's answers whose flags are graded (a custom criterion may not take one).
ANSWER_FLAGS = ("useful", "supported", "relevant", "attributed")


def _flag_pattern(keys: Sequence[str]) -> re.Pattern[str]:
    names = "|".join(re.escape(key) for key in keys)
    return re.compile(rf'(?<!\\)"({names})"\s*:\s*(0|1|true|false)\b')


# A flag's value in the answer text; an escaped quote (inside a string) is not a key.
_FLAG = _flag_pattern(ANSWER_FLAGS)


@dataclass(frozen=True, slots=True)
class Token:
    """One answer token: its text, log-probability and the top alternatives' (text, logprob)."""

    text: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class Completion:
    """An LLM's answer text with its tokens' log-probabilities (empty when not returned)."""

    content: str
    tokens: tuple[Token, ...] = ()


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def tokens_of(logprobs: Any) -> tuple[Token, ...]:
    """The tokens of a provider's `choices[0].logprobs` (an object or a dict; None → none)."""
    tokens = []
    for item in _field(logprobs, "content") or () if logprobs is not None else ():
        text, logprob = _field(item, "token"), _field(item, "logprob")
        if not isinstance(text, str) or not isinstance(logprob, int | float):
            return ()
        top = tuple(
            (str(_field(t, "token")), float(_field(t, "logprob")))
            for t in _field(item, "top_logprobs") or ()
            if isinstance(_field(t, "logprob"), int | float)
        )
        tokens.append(Token(text, float(logprob), top))
    return tuple(tokens)


def _word(text: str) -> str:
    return text.strip().strip('":,{}[]').strip().lower()


def yes_probability(token: Token) -> float | None:
    """p(yes) at a flag token, or None when the token is not a flag."""
    chosen = _word(token.text)
    if chosen not in _YES | _NO:
        return None
    yes = sum(math.exp(lp) for text, lp in token.top if _word(text) in _YES)
    no = sum(math.exp(lp) for text, lp in token.top if _word(text) in _NO)
    if yes + no > 0:
        return yes / (yes + no)
    p = math.exp(token.logprob)
    return p if chosen in _YES else 1.0 - p


def flag_probabilities(completion: Completion, criteria: Sequence[str] = ()) -> dict[str, list[float]] | None:
    """Per flag name, p(yes) of each of its flags in text order (the built-in flags, and the
    binary `criteria` named); None when any is unreadable."""
    if not completion.tokens:
        return None
    starts, offset = [], 0
    for token in completion.tokens:
        starts.append(offset)
        offset += len(token.text)
    if offset != len(completion.content):
        return None  # the tokens do not spell the answer: no way to place the flags
    found: dict[str, list[float]] = {}
    index = 0
    pattern = _flag_pattern((*ANSWER_FLAGS, *criteria)) if criteria else _FLAG
    for match in pattern.finditer(completion.content):
        at = match.start(2)
        while index + 1 < len(starts) and starts[index + 1] <= at:
            index += 1
        p = yes_probability(completion.tokens[index])
        if p is None:
            return None
        found.setdefault(match.group(1), []).append(round(p, 4))
    return found


class _Grader:
    """Hands out the probabilities of each flag name in order; counts what was taken."""

    def __init__(self, probabilities: dict[str, list[float]]) -> None:
        self._left = {key: list(values) for key, values in probabilities.items()}
        self.consistent = True

    def grade(self, key: str, verdict: Verdict) -> Verdict:
        values = self._left.get(key)
        if not values:
            self.consistent = False
            return verdict
        p = values.pop(0)
        if (p >= 0.5) != verdict.value and p != 0.5:
            self.consistent = False  # a probability that contradicts the parsed flag: misplaced
        return replace(verdict, score=p)

    def done(self) -> bool:
        return self.consistent and not any(self._left.values())


def _binary_criteria(result: Any) -> tuple[str, ...]:
    """The names of the binary criterion answers in a parsed answer (a 1-5 answer has a score)."""
    if isinstance(result, InteractionVerdicts):
        answers: Any = result.criteria
    elif isinstance(result, dict) and all(isinstance(x, Verdict) for x in result.values()):
        answers = result
    else:
        return ()
    # A criterion named like a built-in flag could take that flag's probability: kept binary.
    return tuple(name for name, v in answers.items() if v.score is None and name not in ANSWER_FLAGS)


def graded(result: Any, completion: Completion) -> Any:
    """`result` (a parsed answer) with each flag verdict's score set to the LLM's p(yes); the
    result unchanged when the log-probabilities are missing or do not line up with it."""
    binary = _binary_criteria(result)
    probabilities = flag_probabilities(completion, binary)
    if not probabilities:
        return result
    grader = _Grader(probabilities)

    def claims(items: Sequence[ClaimVerdict]) -> list[ClaimVerdict]:
        return [
            ClaimVerdict(
                grader.grade("supported", c.supported),
                None if c.relevant is None else grader.grade("relevant", c.relevant),
            )
            for c in items
        ]

    def chunks(items: Sequence[ChunkAssessment]) -> list[ChunkAssessment]:
        return [a if a.useful is None else replace(a, useful=grader.grade("useful", a.useful)) for a in items]

    def criteria(answers: Mapping[str, Verdict]) -> dict[str, Verdict]:
        # Each binary criterion is one flag named after it: nothing to misplace.
        return {name: grader.grade(name, v) if name in binary else v for name, v in answers.items()}

    if isinstance(result, dict) and result and all(isinstance(x, ChunkAssessment) for x in result.values()):
        new: Any = dict(zip(result, chunks(list(result.values())), strict=True))
    elif isinstance(result, InteractionVerdicts):
        new = replace(
            result,
            chunks=tuple(chunks(result.chunks)),
            claims=tuple(claims(result.claims)),
            criteria=criteria(result.criteria),
        )
    elif isinstance(result, dict) and result and all(isinstance(x, Verdict) for x in result.values()):
        new = criteria(result)  # judge_criteria's answer
    elif isinstance(result, tuple) and len(result) == 2 and all(isinstance(x, list) for x in result):
        new = (chunks(result[0]), claims(result[1]))
    elif isinstance(result, list) and result and all(isinstance(x, ChunkAssessment) for x in result):
        new = chunks(result)
    elif isinstance(result, list) and result and all(isinstance(x, ClaimVerdict) for x in result):
        new = claims(result)
    elif isinstance(result, list) and result and all(isinstance(x, Verdict) for x in result):
        new = [grader.grade("attributed", v) for v in result]
    else:
        return result  # answer comparisons (two lists of one flag name) stay binary
    return new if grader.done() else result
