"""Conversations whose turns arrive as separate traces: the earlier turns of a session.

Many frameworks make each turn of a conversation its own trace and name the conversation with a
session id (`session.id`, `gen_ai.conversation.id`, a framework's thread id). A follow-up's model
call usually carries the earlier turns in its messages; when it does not (the Responses API with
`previous_response_id` keeps them on the server), the judge still needs them to read "and how
much does it cost?". `Sessions` remembers the last turns of each session it saw (each turn's
question and answer as assembled) and hands them to the next interaction of that session; they
replace the turns read from the call's messages when they cover as many (the messages hold the
question inside a framework's prompt template). A turn that ended before the session's latest
(assembled out of order) is given nothing and changes nothing.

An answer that no model call records (anchored on the agent span that returned it, its context
the turn's searches: rules.AgentContext.inferred) also gets the documents of its session's earlier
such answers, before its own: an agent that keeps its session (Google ADK) gives the model every
earlier tool result, and no span shows what it was given.

A follow-up whose conversation the provider keeps (the Responses API's `previous_response_id`)
needs its earlier turn assembled first: `Sessions` also remembers the ids of the responses of the
turns assembled (the latest `MAX_RESPONSES`, ~3 MB), and a trace whose call continues a response
it does not know yet waits for that turn, up to the trace wait (rules.agent.awaited_response).

Bounded: at most `max_sessions` sessions (least recently used evicted), each forgotten after
`ttl_seconds` without a turn, at most `max_turns` turns per session (a turn: one user or assistant
message), each cut to `turn_chars` characters. With the defaults that is at most
5000 × 6 × 1000 characters (~30 MB) in the worst case, a few MB in practice. The documents of
inferred answers are kept only for their sessions, the latest that fit in `document_chars`
characters (a document longer than that is not kept): at most 5000 × 16 000 characters more
(~80 MB) if every session were of that kind. It lives in one replica's memory: a follow-up
assembled on another replica sees the turns its own messages carry.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from agent.model import Chunk, RagInteraction, Turn, without_separators
from agent.otlp.conventions import TURN_CHARS
from agent.otlp.rules import MAX_TURNS
from agent.otlp.rules.agent import dedupe

MAX_SESSIONS = 5000
SESSION_TTL_SECONDS = 3600.0
SESSION_DOCUMENT_CHARS = 16_000
MAX_RESPONSES = 20_000


@dataclass(slots=True)
class _Session:
    seen: float
    turns: list[Turn] = field(default_factory=list)
    documents: tuple[Chunk, ...] = ()  # of its inferred answers, oldest first
    end: int = 0  # end time (unix ns) of its latest turn


class Sessions:
    """The earlier turns of conversations, by session id (see the module doc)."""

    def __init__(
        self,
        max_sessions: int = MAX_SESSIONS,
        ttl_seconds: float = SESSION_TTL_SECONDS,
        max_turns: int = MAX_TURNS,
        turn_chars: int = TURN_CHARS,
        document_chars: int = SESSION_DOCUMENT_CHARS,
    ) -> None:
        self._max_sessions = max_sessions
        self._ttl = ttl_seconds
        self._max_turns = max_turns
        self._turn_chars = turn_chars
        self._document_chars = document_chars
        self._sessions: OrderedDict[str, _Session] = OrderedDict()  # least recently used first
        self._responses: OrderedDict[str, None] = OrderedDict()  # ids of responses assembled, oldest first
        # No session expires before this time (a lower bound: the oldest session's expiry when
        # last looked at), so most turns skip looking.
        self._due = float("inf")

    def __len__(self) -> int:
        return len(self._sessions)

    def follow(self, interaction: RagInteraction, now: float, *, inferred: bool = False) -> RagInteraction:
        """The interaction with its session's earlier turns when it carries none (a session's
        first turn has none), remembered as the session's latest turn. `inferred`: its context
        was read from its turn's searches (no model call records it): the session's earlier
        documents join it, first."""
        session_id = interaction.session_id
        if not session_id or self._max_sessions <= 0:
            return interaction
        if now >= self._due:
            self._expire(now)
        held = self._sessions.get(session_id)
        if held is not None and interaction.end_time_unix_nano < held.end:
            # An earlier turn assembled after a later one (its spans arrived late): the session's
            # turns are its future, so it keeps what its own messages say and changes nothing.
            return interaction
        session = self._sessions.pop(session_id, None) or _Session(now)
        session.end = interaction.end_time_unix_nano
        # The session's turns as assembled (the question and answer of each) read better than
        # the call's raw messages (a framework's prompt template around the question), when they
        # cover as many turns.
        if session.turns and len(session.turns) >= len(interaction.earlier_turns):
            interaction = dataclasses.replace(interaction, earlier_turns=tuple(session.turns))
        session.seen = now
        turns = list(interaction.earlier_turns) if interaction.earlier_turns else session.turns
        turns = [*turns, self._turn("user", interaction.query)]
        if interaction.response:
            turns.append(self._turn("assistant", interaction.response))
        session.turns = turns[-self._max_turns :]
        if inferred:
            chunks = dedupe((*session.documents, *interaction.chunks))
            interaction = dataclasses.replace(interaction, chunks=chunks)
            session.documents = self._kept(chunks)
        self._sessions[session_id] = session
        self._due = min(self._due, now + self._ttl)
        while len(self._sessions) > self._max_sessions:
            self._sessions.popitem(last=False)
        return interaction

    def knows(self, response_id: str) -> bool:
        """Whether the response is one of an assembled turn's (always, when sessions are off:
        nothing would read the turns it waited for)."""
        return self._max_sessions <= 0 or response_id in self._responses

    def assembled(self, response_ids: Iterable[str]) -> None:
        """Remember the ids of an assembled trace's responses (the latest MAX_RESPONSES)."""
        for response_id in response_ids:
            self._responses[response_id] = None
            self._responses.move_to_end(response_id)
        while len(self._responses) > MAX_RESPONSES:
            self._responses.popitem(last=False)

    def _kept(self, chunks: tuple[Chunk, ...]) -> tuple[Chunk, ...]:
        """The latest documents that fit in `document_chars` characters."""
        room, kept = self._document_chars, 0
        for chunk in reversed(chunks):
            room -= len(chunk.content)
            if room < 0:
                break
            kept += 1
        return chunks[len(chunks) - kept :]

    def _turn(self, role: str, text: str) -> Turn:
        return Turn(role, without_separators(text[: self._turn_chars]))

    def _expire(self, now: float) -> None:
        while self._sessions:
            session = next(iter(self._sessions.values()))
            if session.seen + self._ttl > now:
                self._due = session.seen + self._ttl
                return
            self._sessions.popitem(last=False)
        self._due = float("inf")
