"""OTLP/JSON lines of protobuf OTLP messages, as the OTLP spec encodes them and the Collector's file
exporter writes them: camelCase keys, trace and span ids as hex (not protobuf JSON's base64)."""

from __future__ import annotations

import base64
import json
from typing import Any, TypeVar

from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.message import Message

_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})
M = TypeVar("M", bound=Message)


def _ids(value: Any, convert: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: convert(v) if k in _ID_KEYS and isinstance(v, str) else _ids(v, convert)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_ids(v, convert) for v in value]
    return value


def to_line(message: Message) -> str:
    """One line of OTLP/JSON (no newline)."""
    as_dict = MessageToDict(message, use_integers_for_enums=True)
    return json.dumps(_ids(as_dict, lambda v: base64.b64decode(v).hex()), ensure_ascii=False)


def from_line(line: str | bytes, message: M) -> M:
    """Parse one OTLP/JSON line into `message` (an empty message of the line's type); raises
    ValueError for a line that is not one."""
    as_dict = json.loads(line)
    if not isinstance(as_dict, dict):
        raise ValueError("not a JSON object")
    ParseDict(_ids(as_dict, lambda v: base64.b64encode(bytes.fromhex(v)).decode()), message)
    return message
