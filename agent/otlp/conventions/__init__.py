"""Convention adapters: read what a span contributes to a RAG interaction.

Each instrumentation family (OpenInference, OpenLLMetry, OTel GenAI, the minimal hand-written
layout) names things differently; an adapter maps one family's attributes to `SpanParts` and
nothing else, so the assembler never sees attribute names. Adapters read
`span.convention_attributes`, which holds the keys under `KNOWN_PREFIXES`.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, NamedTuple, Protocol

from agent.model import AttributeValue, Chunk, Span

# Every span attribute a convention reads starts with one of these. The decoder converts exactly
# these keys to Python values up front (into `Span.known`) and leaves the rest in the protobuf
# message until someone asks: converting every attribute of every span would cost more than the
# rest of the intake together. The most frequent keys come first: str.startswith tries in order.
KNOWN_PREFIXES = (
    # OpenInference
    "retrieval.documents.", "input.", "output.", "openinference.span.kind", "reranker.",
    "llm.input_messages.", "llm.output_messages.", "session.id", "user.id", "llm.invocation_parameters",
    # OpenLLMetry / Traceloop
    "traceloop.span.kind", "traceloop.entity.input", "traceloop.entity.output",
    "traceloop.association.properties.session_id", "traceloop.association.properties.user_id",
    "gen_ai.prompt.", "gen_ai.completion.", "db.query.text", "db.statement",
    # OpenTelemetry GenAI
    "gen_ai.operation.name", "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.retrieval.",
    "gen_ai.conversation.id", "gen_ai.tool.",
    "gen_ai.system_instructions", "tool.name", "tool_call.id", "error.type",
    # native framework tracing read by the GenAI adapter: Google ADK
    "gcp.vertex.agent.",
    # the minimal layout, and the default route attribute
    "ragpulse.", "http.route",
    # human labels: OpenInference annotations / evaluations (agent/trust/labels.py)
    "annotations.", "evaluations.", "trace.annotations.", "trace.evaluations.",
)  # fmt: skip


class Role(StrEnum):
    CHAIN = "chain"  # a workflow step; the outermost one usually holds the user's question
    RETRIEVER = "retriever"
    RERANKER = "reranker"  # its output documents are the context the LLM saw
    LLM = "llm"
    TOOL = "tool"  # an agent's tool call: its output went back to the model
    OTHER = "other"


class Message(NamedTuple):
    """One input message of a model call, as far as assembly needs it (system prompts dropped).

    `role`: "user", "assistant" or "tool" (a tool's result; ReAct observations too); an assistant
    message that only called tools is not kept. `call_id` ties a tool result to its tool call;
    `tool` is the called tool's name, when the conversation states it (a hand-off's result, from
    an earlier trace, is then no document); `query` the tool call's input (its sub-query), when
    the conversation states it and no tool span may (a transcript of the turn).
    """

    role: str
    content: str
    call_id: str | None = None
    tool: str | None = None
    query: str | None = None


# The conversation a model call was given is kept only when it is one: more than a single user
# message (the chain layout's prompt). Earlier turns are cut to this many characters each.
TURN_CHARS = 1000


# A retrieval's hits are in the span but not their text (ids and scores only): the context of the
# model call that follows is unknown, and it must not borrow an earlier retrieval's chunks.
UNKNOWN_CHUNKS: tuple[Chunk, ...] = ()


class SpanParts(NamedTuple):
    """The pieces of a RagInteraction one span carries; None means "this span does not say".

    Immutable like the values in agent/model.py; a named tuple because one is built for every
    span received, and it builds several times faster than a frozen dataclass.
    """

    role: Role
    query: str | None = None
    chunks: tuple[Chunk, ...] | None = None
    response: str | None = None
    session_id: str | None = None
    user_id: str | None = None
    # Agents. LLM: the input conversation (None when the call was given one user message or the
    # instrumentor recorded none) and whether its output calls tools. TOOL: `query` is the tool's
    # input (the agent's sub-query), `response` its output text as the model got it, `chunks` that
    # output read as documents; `failed` when the tool raised; `call_id` the tool call it answered.
    # `searches`: how many searches an answer says it was given (the minimal layout), so that its
    # trace waits for them all.
    messages: tuple[Message, ...] | None = None
    calls_tools: bool = False
    failed: bool = False
    call_id: str | None = None
    searches: int | None = None
    # RETRIEVER: the retrieval ran and returned no document (`chunks` is then empty too); an
    # empty retrieval is an interaction with no context, not a span without RAG content.
    empty: bool = False
    # LLM: the system instructions (system prompts) the call was given: documents a generation
    # step pastes into its prompt are found there.
    instructions: str | None = None
    # TOOL: the tool's name, when the span states it (a final-answer or hand-off tool is no search).
    tool_name: str | None = None
    # LLM: the provider's id of the response, and the earlier response whose server-side state the
    # call continues (the Responses API's `previous_response_id`): a follow-up turn sent neither
    # its earlier turns nor, in its later calls, the user's message (sessions.py).
    response_id: str | None = None
    continues: str | None = None

    @property
    def is_complete(self) -> bool:
        if self.role is Role.TOOL:
            return False  # a tool's input, documents and output are a search, not an answer
        return bool(self.query) and bool(self.chunks) and self.response is not None

    @property
    def is_useful(self) -> bool:
        """Whether assembly can use this span: anything else is counted `not_rag` on arrival."""
        if self.role is Role.LLM:
            return self.response is not None or self.calls_tools
        if self.role is Role.TOOL:
            return True
        if self.role in (Role.RETRIEVER, Role.RERANKER):
            # UNKNOWN_CHUNKS too: a retrieval whose text is not in the span still marks where the
            # context of the model calls after it came from.
            return self.chunks is not None
        return bool(self.query) or bool(self.chunks)


class Convention(Protocol):
    """Maps spans of one instrumentation convention to SpanParts."""

    name: str

    def extract(self, span: Span) -> SpanParts | None:
        """Return the span's parts, or None when the span does not follow this convention.

        Must not raise on any attribute values: spans come from outside.
        """
        ...


# -- helpers shared by the adapters -----------------------------------------------------------


_DECODER = json.JSONDecoder()  # json.loads' own configuration


def parse_json(value: AttributeValue) -> Any:
    """The JSON document in a string attribute, or None when it is not JSON (or nests deeper
    than the interpreter recurses)."""
    if not isinstance(value, str) or not value:
        return None
    # Nearly every document fills its string exactly: decoded directly, without json.loads'
    # checks for a byte-order mark and surrounding whitespace (two thirds of the cost of a
    # small document, such as a retrieved document's metadata). json.loads decides the others.
    try:
        document, end = _DECODER.raw_decode(value)
    except (ValueError, RecursionError):
        if not value[0].isspace():
            return None  # not JSON, and no whitespace before it that json.loads would skip
    else:
        if end == len(value):
            return document
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return None


def text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def string_in(document: Any, keys: Sequence[str]) -> str | None:
    """The first string under one of `keys` in a JSON object, or the document if it is a string."""
    if isinstance(document, str):
        return document
    if isinstance(document, Mapping):
        for key in keys:
            value = document.get(key)
            if isinstance(value, str):
                return value
    return None


def identity(attributes: Mapping[str, AttributeValue], key: str) -> str | None:
    value = attributes.get(key)
    if isinstance(value, (str, int)) and not isinstance(value, bool) and value != "":
        return str(value)
    return None


def chunk(
    content: Any, doc_id: Any = None, score: Any = None, metadata: tuple[tuple[str, str], ...] = ()
) -> Chunk | None:
    if not isinstance(content, str):
        return None
    return Chunk(
        content=content,
        id=str(doc_id) if isinstance(doc_id, (str, int)) and not isinstance(doc_id, bool) else None,
        score=number(score),
        metadata=metadata,
    )


# -- document metadata ------------------------------------------------------------------------------
# A document's metadata (its source, file name, URL, page...) is read only for the keys ragpulse
# is configured to use (`documents_key`): without one, spans pay nothing for it. It is bounded
# whatever a span holds: at most MAX_METADATA_KEYS keys, top-level scalar values only (strings and
# numbers; nested objects, lists, booleans and nulls are not read), kept as text cut to
# METADATA_VALUE_CHARS characters; metadata text longer than METADATA_MAX_CHARS is not parsed.
MAX_METADATA_KEYS = 8
METADATA_VALUE_CHARS = 200
METADATA_MAX_CHARS = 64 * 1024
NO_METADATA: tuple[tuple[str, str], ...] = ()
_INT64 = 1 << 64


def metadata_keys(keys: Sequence[str]) -> tuple[str, ...]:
    """The metadata keys a convention reads, checked (ValueError when there are too many)."""
    keys = tuple(dict.fromkeys(key for key in keys if key))
    if len(keys) > MAX_METADATA_KEYS:
        raise ValueError(f"at most {MAX_METADATA_KEYS} document metadata keys, got {len(keys)}")
    return keys


def metadata_record(value: Any) -> Mapping[str, Any] | None:
    """A document's metadata as a mapping: a mapping as it is (an OTLP kvlist, part of a parsed
    document), or the JSON object in a string of at most METADATA_MAX_CHARS characters."""
    # str first, and dict for what json.loads returns: isinstance against the Mapping ABC costs
    # several times more, and this runs for every document whose score sits in its metadata.
    if isinstance(value, str):
        if value[:1] == "{" and len(value) <= METADATA_MAX_CHARS:
            found = parse_json(value)
            return found if isinstance(found, dict) else None
        return None
    return value if isinstance(value, Mapping) else None


def _scalar(value: Any) -> str | None:
    if isinstance(value, str):
        return value[:METADATA_VALUE_CHARS] if value.strip() else None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value) if -_INT64 < value < _INT64 else None
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    return None


def picked(keys: Sequence[str], *records: Any) -> tuple[tuple[str, str], ...]:
    """(key, value) for each of `keys` found in `records`, the first record holding a scalar
    value under it winning (e.g. the document's metadata, then the document's own fields)."""
    if not keys:
        return NO_METADATA
    found = []
    for key in keys:
        for record in records:
            if isinstance(record, Mapping):
                value = _scalar(record.get(key))
                if value is not None:
                    found.append((key, value))
                    break
    return tuple(found)


# -- agents: messages and tool outputs shared by the adapters ---------------------------------------

_REACT_ANSWER = "\nAnswer:"
_OBSERVATION = "Observation:"
_SUB_QUERY_KEYS = ("query", "input", "question", "q", "search_query", "queries", "text", "kwargs")
_DOCUMENT_TEXT = ("content", "text", "page_content", "document", "chunk", "snippet", "body")
_DOCUMENT_LISTS = ("documents", "results", "hits", "chunks", "data", "items")


_DSPY_ANSWER = re.compile(r"\[\[ ## (?:answer|response|output) ## \]\]\n(.*?)(?:\n\n\[\[ ## |\Z)", re.DOTALL)


def final_text(response: str) -> str:
    """A ReAct step's text without its reasoning: what follows its last "Answer:" line (DSPy's
    adapters: the `[[ ## answer ## ]]` field)."""
    if response.startswith("Thought:") and _REACT_ANSWER in response:
        return response.rsplit(_REACT_ANSWER, 1)[1].strip()
    if response.startswith("[[ ## "):
        found = _DSPY_ANSWER.search(response)
        if found:
            return found.group(1).strip()
    return response


# Roles frameworks use for the message model's three: smolagents' "tool-call" / "tool-response",
# LangChain's "human" / "ai", Gemini's "model", OpenAI's legacy "function".
_ROLES = {
    "user": "user", "human": "user", "assistant": "assistant", "ai": "assistant", "model": "assistant",
    "tool": "tool", "tool-response": "tool", "function": "tool", "ipython": "tool",
    "tool-call": "tool-call",
}  # fmt: skip
_EMBEDDED = "\nObservation:"
_OBSERVATIONS = re.compile(r"\nObservation:(.*?)(?=\n\s*Thought:|\Z)", re.DOTALL)
_NEW_TASK = "New task:\n"
_LOGS = "Execution logs:"
_LAST_OUTPUT = "Last output from code snippet:"  # smolagents opens each user task with it
_FINAL_CALL = ("final_answer", "final_result")
# A code step (smolagents' CodeAgent): the tool calls an assistant wrote as code. It answers only
# when the code calls final_answer with a literal, the answer.
_CODE = "<code>"
_FINAL_ANSWER = re.compile(r"""final_answer\(\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')\s*\)""")


def _code_answer(content: str) -> str | None:
    found = _FINAL_ANSWER.search(content)
    if found is None:
        return None
    try:
        value = ast.literal_eval(found.group(1))
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, str) else None


def conversation(messages: list[Message]) -> tuple[Message, ...] | None:
    """The kept input conversation in the message model (user, assistant, tool): None when it is
    only the question (a chain's prompt). A ReAct "Observation:" handed back as a user message is
    a tool result; the result of a final-answer tool call is the assistant's answer."""
    if len(messages) < 2 and not any(m.role == "tool" for m in messages):
        return None
    cut = []
    last_user = max((i for i, m in enumerate(messages) if m.role in ("user", "human")), default=-1)
    final_call = False
    for i, message in enumerate(messages):
        role = _ROLES.get(message.role)
        if role is None:
            continue
        content = message.content
        if role == "tool-call":  # an assistant turn that only called tools, written as text
            final_call = any(name in content for name in _FINAL_CALL)
            continue
        if role == "assistant" and _CODE in content:
            answer = _code_answer(content)
            if answer is None:
                continue  # a step that only called tools, written as code
            content = answer
        if role != "tool" and i != last_user and len(content) > TURN_CHARS:
            content = content[:TURN_CHARS]
        if role in ("user", "tool") and content.startswith(_OBSERVATION):
            # A ReAct observation: the tool's result, handed back as a user message.
            role, content = "tool", content[len(_OBSERVATION) :].strip()
            if content.startswith(_LOGS):  # smolagents' CodeAgent: what its code printed
                content = content[len(_LOGS) :].split(_LAST_OUTPUT, 1)[0].strip()
        elif role == "user" and content.startswith(_NEW_TASK):
            content = content[len(_NEW_TASK) :]
        if role == "tool" and final_call:
            role = "assistant"
        final_call = False
        if role == "assistant" and not content.strip():
            continue  # says nothing (a CodeAgent's final step printed nothing: its answer is above)
        cut.append(Message(role, content, message.call_id, message.tool, message.query))
        if role == "assistant" and _EMBEDDED in message.content:
            # A ReAct scratchpad kept as one assistant message (LlamaIndex's ReActAgent memory):
            # its observations were tool results.
            cut.extend(
                Message("tool", o.strip()) for o in _OBSERVATIONS.findall(message.content) if o.strip()
            )
    return tuple(cut)


def message_fields(message: Any) -> tuple[str | None, str | None]:
    """(role, text) of a chat message in the shapes LangChain / LangGraph serialise."""
    if isinstance(message, list) and len(message) == 2 and all(isinstance(m, str) for m in message):
        return message[0], message[1]  # ("user", "text")
    if not isinstance(message, Mapping):
        return None, None
    inner = message.get("kwargs") or message.get("data")  # lc constructor / message_to_dict
    if isinstance(inner, Mapping):
        message = inner
    role = message.get("role") or message.get("type")
    content = message.get("content")
    if isinstance(content, list):  # content blocks
        content = (
            "\n".join(t for b in content if isinstance(b, Mapping) and isinstance(t := b.get("text"), str))
            or None
        )
    return (role if isinstance(role, str) else None), (content if isinstance(content, str) else None)


def last_user_message(messages: Any) -> str | None:
    """The text of the last user (human) message of a serialised message list."""
    if isinstance(messages, list) and messages and isinstance(messages[0], list) and len(messages) == 1:
        messages = messages[0]  # LangChain's batch of one conversation
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        role, content = message_fields(message)
        if role in ("user", "human") and content:
            return content
    return None


def returned_message(messages: Any) -> str | None:
    """The text a serialised message list ends on, when it ends on an assistant's reply (a graph's
    state as it returned: its last message is the answer; a tool result or a call is not)."""
    if not isinstance(messages, list) or not messages:
        return None
    role, content = message_fields(messages[-1])
    return content if role in ("assistant", "ai") and content else None


def sub_query(arguments: Any) -> str | None:
    """The search query in a tool's input: a string, or JSON arguments holding one."""
    if isinstance(arguments, str):
        parsed = parse_json(arguments) if arguments[:1] in ("{", "[") else None
        if parsed is None:
            return arguments.strip() or None
        arguments = parsed
    if isinstance(arguments, Mapping):
        for key in _SUB_QUERY_KEYS:
            value = arguments.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip()
            if isinstance(value, (Mapping, list)):
                found = sub_query(value)
                if found:
                    return found
        strings = [v for v in arguments.values() if isinstance(v, str) and v.strip()]
        return strings[0].strip() if len(strings) == 1 else None
    if isinstance(arguments, list):
        strings = [v for v in arguments if isinstance(v, str) and v.strip()]
        return "; ".join(strings) if strings else None
    return None


def _document(item: Any, keys: Sequence[str]) -> Chunk | None:
    if isinstance(item, str):
        return Chunk(item) if item.strip() else None
    if not isinstance(item, Mapping):
        return None
    metadata = item.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    node = item.get("node")
    if isinstance(node, Mapping):  # a LlamaIndex NodeWithScore
        return chunk(node.get("text"), node.get("id_"), item.get("score"), picked(keys, node.get("metadata")))
    content = string_in({k: item[k] for k in _DOCUMENT_TEXT if k in item}, _DOCUMENT_TEXT)
    doc_id = item.get("id", metadata.get("id"))
    return chunk(content, doc_id, item.get("score", metadata.get("score")), picked(keys, metadata, item))


# A header opening each document of a tool result that lists several in one text:
# "Document 1:", "Document ID: x", "[1]", "Source 2:", "Result 3:", "Doc 4 -".
_HEADER = re.compile(
    r"^(?:(?:document|doc|source|result|passage|chunk|context)\s*(?:#?\d+|id\s*[:=][^\n]*)\s*[:.\-)]?|\[\d+\])",
    re.IGNORECASE | re.MULTILINE,
)
_FIELD = re.compile(r"^\s*(?:content|text|page_content)\s*:\s*", re.IGNORECASE | re.MULTILINE)


def text_documents(output: str) -> tuple[Chunk, ...]:
    """The documents of a tool result that lists several in one text: one per header line
    ("Document 1:", "Document ID: x" with a "Content:" field, "[1]"), else one per paragraph
    (LangChain's retriever tool joins documents with blank lines), else the whole text."""
    starts = [m.start() for m in _HEADER.finditer(output)]
    if len(starts) >= 2 or (starts and starts[0] == 0 and len(starts) == 1 and _FIELD.search(output)):
        found = []
        for at, end in zip(starts, [*starts[1:], len(output)], strict=True):
            block = output[at:end]
            field_ = _FIELD.search(block)
            body = block[field_.end() :] if field_ else _HEADER.sub("", block, count=1)
            body = body.strip()
            if body:
                found.append(Chunk(body))
        if found:
            return tuple(found)
    paragraphs = [p.strip() for p in output.split("\n\n") if p.strip()]
    return tuple(Chunk(p) for p in paragraphs) if paragraphs else ()


def _text_block(item: Any) -> bool:
    return isinstance(item, Mapping) and isinstance(item.get("text"), str) and set(item) <= {"type", "text"}


def tool_documents(output: str, keys: Sequence[str] = ()) -> tuple[Chunk, ...]:
    """A tool's output as the documents it returned: a JSON list of documents (or an object
    holding one under `documents`, `results`, ...), else its text as documents: one per
    header-delimited block or paragraph (`text_documents`); () when it returned nothing.
    `keys`: the metadata keys to read (a document's `metadata`, else its own fields)."""
    text_ = output.strip()
    if not text_:
        return ()
    document = parse_json(text_) if text_[:1] in ("[", "{") else None
    if isinstance(document, Mapping):
        lists = [document[k] for k in _DOCUMENT_LISTS if isinstance(document.get(k), list)]
        if not lists and len(document) == 1:
            # A function's return value wrapped in an object ({"result": "..."}, Google ADK).
            (inner,) = document.values()
            if isinstance(inner, str):
                return text_documents(inner.strip()) if inner.strip() else ()
            if isinstance(inner, list):
                lists = [inner]
        document = lists[0] if lists else None
    if isinstance(document, list) and document and all(_text_block(item) for item in document):
        # Content blocks ([{"type": "text", "text"}]): one text, not a list of documents.
        return text_documents("\n".join(item["text"] for item in document))
    if isinstance(document, list):
        if not document:
            return ()
        chunks = [found for item in document if (found := _document(item, keys)) is not None]
        if len(chunks) == len(document):
            return tuple(chunks)
    return text_documents(text_)
