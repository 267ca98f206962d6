"""OpenInference (Arize): the convention of the LangChain and LlamaIndex instrumentors.

A span states its kind in `openinference.span.kind`; retrievers list documents as flattened
attributes `retrieval.documents.<N>.document.{id,content,score,metadata}`; rerankers list
`reranker.input_documents.<N>...` and `reranker.output_documents.<N>...` (the output is what the
LLM saw); LLM spans carry `llm.input_messages.<N>.message.{role,content}` and
`llm.output_messages.<N>.message.content`; `input.value` / `output.value` hold text or JSON as
`input.mime_type` / `output.mime_type` say. `session.id` and `user.id` name the conversation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agent.model import AttributeValue, Chunk, Span
from agent.otlp.conventions import (
    NO_METADATA,
    Message,
    Role,
    SpanParts,
    adk,
    conversation,
    haystack,
    identity,
    last_user_message,
    metadata_keys,
    metadata_record,
    parse_json,
    picked,
    returned_message,
    string_in,
    sub_query,
    text,
    tool_documents,
)

KIND = "openinference.span.kind"
_KINDS = {
    "CHAIN": Role.CHAIN,
    "AGENT": Role.CHAIN,
    "RETRIEVER": Role.RETRIEVER,
    "RERANKER": Role.RERANKER,
    "LLM": Role.LLM,
    "TOOL": Role.TOOL,
}
_RETRIEVED = "retrieval.documents"
_RERANKED = "reranker.output_documents"
# Keys a JSON `input.value` / `output.value` commonly holds the question / the answer under
# (LangChain chains, LlamaIndex query engines).
_QUERY_KEYS = ("query", "question", "input", "query_str", "user_input", "task", "user_msg", "user_prompt")
_RESPONSE_KEYS = ("response", "output", "answer", "text", "result")
_VALUE = {"input": "input.value", "output": "output.value"}
_CALLS_TOOLS = "llm.output_messages.0.message.tool_calls.0.tool_call.function.name"
_MIME_TYPE = {"input": "input.mime_type", "output": "output.mime_type"}
_JSON_START = ("{", "[", '"')
_MAX_DOCUMENTS = 1000  # a bound on the index walk, far above any real top-k
_PRECOMPUTED = 64


def _value(attributes: Mapping[str, AttributeValue], prefix: str, keys: tuple[str, ...]) -> str | None:
    """`input.value` / `output.value` as text: plain text as is, JSON by a known key."""
    value = attributes.get(_VALUE[prefix])
    if not isinstance(value, str):
        return None
    # Only text that opens like JSON can be JSON; skip the mime-type lookup for the rest. An
    # input that is a JSON object is read as one whatever its stated type (smolagents says none).
    if value[:1] not in _JSON_START or (
        attributes.get(_MIME_TYPE[prefix]) != "application/json"
        and not (prefix == "input" and value[:1] == "{")
    ):
        return value
    # A JSON value without a known key is an object the framework passed along, not the text.
    document = parse_json(value)
    found = string_in(document, keys)
    if found is None and isinstance(document, Mapping):
        if prefix == "input":
            # LangGraph's agent state; an ADK run's new message
            found = last_user_message(document.get("messages")) or adk.event_text(document, "new_message")
        else:
            # A graph's state (LangGraph: its last message), an ADK agent's final event
            found = returned_message(document.get("messages")) or adk.event_text(document, "content")
    return found


def _responses(attributes: Mapping[str, AttributeValue]) -> tuple[str | None, str | None]:
    """(the response's id, the earlier response it continues) of a Responses API call, from the
    invocation parameters the instrumentor records (their ids open with `resp_`; other calls'
    parameters are not parsed)."""
    parameters = attributes.get("llm.invocation_parameters")
    if not isinstance(parameters, str) or '"resp_' not in parameters:
        return None, None
    document = parse_json(parameters)
    if not isinstance(document, Mapping):
        return None, None
    response_id, continues = document.get("id"), document.get("previous_response_id")
    return (
        response_id if isinstance(response_id, str) else None,
        continues if isinstance(continues, str) else None,
    )


def _document_keys(prefix: str, index: int) -> tuple[str, str, str, str]:
    base = f"{prefix}.{index}.document."
    return base + "content", base + "score", base + "id", base + "metadata"


# Keys of the first documents, formatted once: this runs for every span of every trace.
_KEYS = {
    prefix: [_document_keys(prefix, index) for index in range(_PRECOMPUTED)]
    for prefix in (_RETRIEVED, _RERANKED)
}


def _has_documents(attributes: Mapping[str, AttributeValue]) -> bool:
    """Whether the span lists a first retrieved document in any form (text, id, score or metadata)."""
    return any(key in attributes for key in _KEYS[_RETRIEVED][0])


def _documents(
    attributes: Mapping[str, AttributeValue], prefix: str, keys: tuple[str, ...]
) -> tuple[Chunk, ...] | None:
    """Documents `<prefix>.<N>.document.*` in index order; None when the span lists none.
    `keys`: the metadata keys to read from `document.metadata` (JSON); none: it is not parsed,
    unless the score is only there."""
    chunks: list[Chunk] = []
    precomputed = _KEYS[prefix]
    get = attributes.get
    for index in range(_MAX_DOCUMENTS):
        content_key, score_key, id_key, metadata_key = (
            precomputed[index] if index < _PRECOMPUTED else _document_keys(prefix, index)
        )
        content = get(content_key)
        if content is None:
            break
        if not isinstance(content, str):
            continue
        score = get(score_key)
        # The LangChain instrumentor has no score attribute; retrievers that score put it in the
        # document's metadata. The metadata is parsed for that, or for the configured keys.
        found = NO_METADATA
        if keys:
            metadata = metadata_record(get(metadata_key))
            found = picked(keys, metadata)
            if score is None and metadata is not None:
                score = metadata.get("score")
        elif score is None:
            metadata = parse_json(get(metadata_key))
            score = metadata.get("score") if isinstance(metadata, dict) else None
        if type(score) is not float:  # a float as decoded needs no checks
            score = float(score) if isinstance(score, (float, int)) and not isinstance(score, bool) else None
        doc_id = get(id_key)
        chunks.append(
            Chunk(
                content,
                doc_id if isinstance(doc_id, str) else (str(doc_id) if isinstance(doc_id, int) else None),
                score,
                found,
            )
        )
    return tuple(chunks) if chunks else None


def _message_keys(prefix: str, index: int) -> tuple[str, str, str, str, str]:
    """The keys of message `index` under `prefix`: role, content, content blocks' first text, its
    first tool call's id, and the id of the tool call it answers."""
    base = f"{prefix}.{index}.message."
    return (
        base + "role",
        base + "content",
        base + "contents.0.message_content.text",
        base + "tool_calls.0.tool_call.id",
        base + "tool_call_id",
    )


# Keys of the first messages, formatted once: every model call's span reads them.
_MESSAGE_KEYS = {
    prefix: [_message_keys(prefix, index) for index in range(_PRECOMPUTED)]
    for prefix in ("llm.input_messages", "llm.output_messages")
}


def _messages(attributes: Mapping[str, AttributeValue], prefix: str, role: str | None) -> str | None:
    """Content of the last `<prefix>.<N>.message` with `role` (any role when None)."""
    found = None
    precomputed = _MESSAGE_KEYS[prefix]
    get = attributes.get
    for index in range(_MAX_DOCUMENTS):
        role_key, content_key, blocks_key, _, _ = (
            precomputed[index] if index < _PRECOMPUTED else _message_keys(prefix, index)
        )
        content = get(content_key)
        message_role = get(role_key)
        if content is None and message_role is None:
            break
        if content is None:  # content blocks (smolagents)
            content = get(blocks_key)
        if isinstance(content, str) and (role is None or message_role == role):
            found = content
    return found


_INPUT_MESSAGES = "llm.input_messages"
_MAX_GAP = 2  # message indexes may start at 1 (the OpenAI Agents instrumentor leaves 0 out)


def _input_messages(
    attributes: Mapping[str, AttributeValue],
) -> tuple[tuple[Message, ...] | None, str | None]:
    """The call's input conversation (user, assistant and tool messages in order) and its system
    instructions."""
    messages: list[Message] = []
    system: list[str] = []
    missing = 0
    get = attributes.get
    names: dict[str, str] = {}  # the tool each call id called, from the assistant's tool calls
    precomputed = _MESSAGE_KEYS[_INPUT_MESSAGES]
    for index in range(_MAX_DOCUMENTS):
        role_key, content_key, blocks_key, called_key, answers_key = (
            precomputed[index] if index < _PRECOMPUTED else _message_keys(_INPUT_MESSAGES, index)
        )
        role = get(role_key)
        content = get(content_key)
        called = get(called_key)
        if isinstance(called, str):
            base = f"{_INPUT_MESSAGES}.{index}.message."
            for k in range(_MAX_DOCUMENTS):
                call, name = (
                    get(f"{base}tool_calls.{k}.tool_call.id"),
                    get(f"{base}tool_calls.{k}.tool_call.function.name"),
                )
                if not isinstance(call, str):
                    break
                if isinstance(name, str):
                    names[call] = name
        if role is None and content is None:
            missing += 1
            if missing > _MAX_GAP:
                break
            continue
        missing = 0
        if not isinstance(content, str):
            content = get(blocks_key)
        if not isinstance(content, str) and role == "function":
            # AutoGen: several results in one message, `llm.input_messages.N.function.K` each
            # a JSON object {name, content, call_id}.
            messages.extend(_function_results(attributes, index))
            continue
        if not isinstance(role, str) or not isinstance(content, str) or not content:
            continue  # assistant turns that only called tools
        if role in ("system", "developer"):
            system.append(content)
            continue
        call_id = get(answers_key)
        call_id = call_id if isinstance(call_id, str) else None
        messages.append(Message(role, content, call_id, names.get(call_id) if call_id else None))
    return conversation(messages), "\n\n".join(system) or None


def _function_results(attributes: Mapping[str, AttributeValue], index: int) -> list[Message]:
    found = []
    for k in range(_MAX_DOCUMENTS):
        result = parse_json(attributes.get(f"{_INPUT_MESSAGES}.{index}.function.{k}"))
        if not isinstance(result, Mapping):
            break
        content, call_id = result.get("content"), result.get("call_id")
        if isinstance(content, str):
            found.append(Message("tool", content, call_id if isinstance(call_id, str) else None))
    return found


def _tool_output(attributes: Mapping[str, AttributeValue]) -> tuple[str | None, str | None]:
    """(the text the model got back, the tool call id) from a TOOL span's `output.value`:
    LangChain's ToolMessage, LlamaIndex's ToolOutput, ADK's FunctionResponse (JSON), or plain text."""
    value = attributes.get("output.value")
    if not isinstance(value, str):
        return None, None
    document = parse_json(value) if value[:1] == "{" else None
    if isinstance(document, Mapping):
        returned = adk.function_response(document)
        if returned is not None:
            return returned, text(document.get("id"))
        data = document.get("data") if document.get("type") == "tool" else None
        if isinstance(data, Mapping) and isinstance(data.get("content"), str):
            call_id = data.get("tool_call_id")
            return data["content"], call_id if isinstance(call_id, str) else None
        blocks = document.get("blocks")
        if isinstance(blocks, list):
            texts = [t for b in blocks if isinstance(b, Mapping) and isinstance(t := b.get("text"), str)]
            if texts:
                return "".join(texts), None
        if isinstance(document.get("content"), str) and "tool_name" in document:
            return document["content"], None
    return value, None


def _failed(span: Span) -> bool:
    return span.failed or any(event.name == "exception" for event in span.events)


class OpenInference:
    name = "openinference"

    def __init__(self, metadata: Sequence[str] = ()) -> None:
        """`metadata`: the document metadata keys to carry on chunks (none: metadata is not read)."""
        self._keys = metadata_keys(metadata)

    def extract(self, span: Span) -> SpanParts | None:
        attributes = span.convention_attributes
        kind = attributes.get(KIND)
        if not isinstance(kind, str):
            # A span without a kind but with documents is the single-span layout some apps
            # write by hand; anything else is not OpenInference.
            if f"{_RETRIEVED}.0.document.content" not in attributes:
                return None
            kind = "CHAIN"
        role = _KINDS.get(kind.upper(), Role.OTHER)
        if role is Role.OTHER:
            return SpanParts(Role.OTHER)
        session_id = identity(attributes, "session.id")
        user_id = identity(attributes, "user.id")
        if role is Role.LLM:
            response = _messages(attributes, "llm.output_messages", None)
            calls_tools = _CALLS_TOOLS in attributes
            if response is None and not calls_tools:
                # (A call that only called tools has no text: its `output.value` is a repr.)
                response = _value(attributes, "output", _RESPONSE_KEYS)
            messages, instructions = (
                _input_messages(attributes)
                if "llm.input_messages.1.message.role" in attributes
                or "llm.input_messages.2.message.role" in attributes
                else (None, None)
            )
            response_id, continues = _responses(attributes)
            return SpanParts(
                Role.LLM,
                query=_messages(attributes, "llm.input_messages", "user"),
                response=response,
                session_id=session_id,
                user_id=user_id,
                messages=messages,
                calls_tools=calls_tools,
                instructions=instructions,
                response_id=response_id,
                continues=continues,
            )
        if role is Role.TOOL:
            output, call_id = _tool_output(attributes)
            failed = _failed(span)
            tool_call_id = attributes.get("tool_call.id")
            return SpanParts(
                Role.TOOL,
                query=sub_query(attributes.get("input.value")),
                chunks=None if failed or output is None else tool_documents(output, self._keys),
                response=output,
                session_id=session_id,
                user_id=user_id,
                failed=failed,
                call_id=call_id or (tool_call_id if isinstance(tool_call_id, str) else None),
                tool_name=identity(attributes, "tool.name"),
            )
        if role is Role.RERANKER:
            query = attributes.get("reranker.query")
            return SpanParts(
                Role.RERANKER,
                query=query if isinstance(query, str) else _value(attributes, "input", _QUERY_KEYS),
                chunks=_documents(attributes, _RERANKED, self._keys),
                session_id=session_id,
                user_id=user_id,
            )
        if role is Role.CHAIN:
            returned = attributes.get("output.value")
            if isinstance(returned, str) and returned[:1] == "{" and haystack.REPR_MARK in returned:
                # Haystack's agent: the whole turn as ChatMessage reprs, and no model-call span.
                found = haystack.transcript(returned)
                if found is not None:
                    return found._replace(session_id=session_id, user_id=user_id)
        chunks = _documents(attributes, _RETRIEVED, self._keys)
        # A RETRIEVER span without documents is a search that found nothing.
        empty = role is Role.RETRIEVER and chunks is None and not _has_documents(attributes)
        return SpanParts(
            role,
            query=_value(attributes, "input", _QUERY_KEYS),
            chunks=() if empty else chunks,
            response=_value(attributes, "output", _RESPONSE_KEYS) if role is Role.CHAIN else None,
            session_id=session_id,
            user_id=user_id,
            empty=empty,
        )
