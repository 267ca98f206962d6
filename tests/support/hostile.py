"""Hypothesis strategies for hostile OTLP/HTTP requests: what a fuzzer or an attacker sends.

Deep nesting (AnyValue arrays / kvlists and JSON arrays thousands deep), giant attribute values,
spans with 10,000 retrieved chunks, invalid UTF-8 in protobuf strings and in JSON, truncated
protobuf, and bodies whose Content-Encoding lies (garbage "gzip", truncated gzip, a gzip bomb).
Each strategy gives a `Hostile(content_type, content_encoding, body, kind)`.
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass

from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


@dataclass(frozen=True)
class Hostile:
    content_type: str
    content_encoding: str
    body: bytes
    kind: str

    def __repr__(self) -> str:  # keep failure reports short
        return f"Hostile({self.kind}, {self.content_type}, {self.content_encoding}, {len(self.body)} bytes)"


# -- protobuf wire format by hand: the nesting a message class would refuse to build -------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _string_value(text: bytes) -> bytes:
    return _field(1, text)  # AnyValue.string_value


def nested_any_value(depth: int, leaf: bytes = b"x") -> bytes:
    """AnyValue{array_value{values[AnyValue{array_value{...}}]}} `depth` levels deep."""
    value = _string_value(leaf)
    for level in range(depth):
        if level % 2:
            value = _field(5, _field(1, value))  # array_value.values
        else:
            value = _field(6, _field(1, _field(1, b"k") + _field(2, value)))  # kvlist_value.values
    return value


def request_with_attributes(attributes: list[tuple[bytes, bytes]], name: bytes = b"rag.query") -> bytes:
    """An ExportTraceServiceRequest holding one span with raw (key, AnyValue bytes) attributes."""
    span = (
        _field(1, bytes(range(1, 17)))  # trace_id
        + _field(2, bytes(range(1, 9)))  # span_id
        + _field(5, name)
        + b"".join(_field(9, _field(1, key) + _field(2, value)) for key, value in attributes)
    )
    scope_spans = _field(2, span)
    resource = _field(1, _field(1, _field(1, b"service.name") + _field(2, _string_value(b"fuzz"))))
    resource_spans = resource + _field(2, scope_spans)
    return _field(1, resource_spans)


def rag_attributes(query: bytes, response: bytes, chunks: list[bytes]) -> list[tuple[bytes, bytes]]:
    attributes = [
        (b"openinference.span.kind", _string_value(b"CHAIN")),
        (b"input.value", _string_value(query)),
        (b"output.value", _string_value(response)),
    ]
    attributes += [
        (f"retrieval.documents.{i}.document.content".encode(), _string_value(chunk))
        for i, chunk in enumerate(chunks)
    ]
    return attributes


def _json_request(value: str) -> bytes:
    """An OTLP/JSON request with one span whose attribute value is the JSON text `value`."""
    return (
        '{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"fuzz"}}]},'
        '"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708",'
        '"name":"rag.query","attributes":[{"key":"input.value","value":' + value + "}]}]}]}]}"
    ).encode()


# -- strategies -----------------------------------------------------------------------------------

deep_protobuf = st.integers(50, 3000).map(
    lambda depth: Hostile(
        PROTOBUF,
        "identity",
        request_with_attributes([(b"input.value", nested_any_value(depth))]),
        "deep_protobuf",
    )
)
deep_json = st.integers(50, 100_000).map(
    lambda depth: Hostile(
        JSON,
        "identity",
        _json_request('{"arrayValue":{"values":[' * depth + '{"stringValue":"x"}' + "]}}" * depth),
        "deep_json",
    )
)
deep_raw_json = st.integers(1000, 200_000).map(
    lambda depth: Hostile(JSON, "identity", b"[" * depth + b"]" * depth, "deep_raw_json")
)
giant_attribute = st.integers(1, 6).map(
    lambda megabytes: Hostile(
        PROTOBUF,
        "identity",
        request_with_attributes(
            rag_attributes(b"q " * (megabytes * 200_000), b"a", [b"c" * (megabytes * 500_000)])
        ),
        "giant_attribute",
    )
)
many_chunks = st.integers(1000, 10_000).map(
    lambda n: Hostile(
        PROTOBUF,
        "identity",
        request_with_attributes(
            rag_attributes(
                b"What is it?", b"It is this.", [f"chunk {i} says this".encode() for i in range(n)]
            )
        ),
        "many_chunks",
    )
)
invalid_utf8_protobuf = st.binary(min_size=1, max_size=40).map(
    lambda junk: Hostile(
        PROTOBUF,
        "identity",
        request_with_attributes(rag_attributes(b"\xff\xfe" + junk, b"\xc3\x28", [b"\xed\xa0\x80 chunk"])),
        "invalid_utf8_protobuf",
    )
)
invalid_utf8_json = st.binary(min_size=1, max_size=40).map(
    lambda junk: Hostile(
        JSON, "identity", _json_request('{"stringValue":"') + b"\xff\xfe" + junk, "invalid_utf8_json"
    )
)
truncated_protobuf = st.tuples(st.integers(1, 5000), st.floats(0.0, 0.999)).map(
    lambda args: Hostile(
        PROTOBUF,
        "identity",
        (body := request_with_attributes(rag_attributes(b"q", b"a", [b"c" * args[0]])))[
            : int(len(body) * args[1])
        ],
        "truncated_protobuf",
    )
)
random_bytes = st.tuples(st.sampled_from([PROTOBUF, JSON]), st.binary(max_size=2000)).map(
    lambda args: Hostile(args[0], "identity", args[1], "random_bytes")
)
bad_gzip = st.tuples(st.sampled_from([PROTOBUF, JSON]), st.binary(min_size=1, max_size=500)).map(
    lambda args: Hostile(args[0], "gzip", args[1], "bad_gzip")
)
_GZIPPED = gzip.compress(
    request_with_attributes(rag_attributes(b"q", b"a", [b"chunk %d " % i for i in range(200)]))
)
# Cut inside the compressed data (not only in the 8-byte CRC/length trailer, which loses nothing).
truncated_gzip = st.integers(10, len(_GZIPPED) - 9).map(
    lambda cut: Hostile(PROTOBUF, "gzip", _GZIPPED[:cut], "truncated_gzip")
)
bad_deflate = st.binary(min_size=1, max_size=500).map(
    lambda junk: Hostile(PROTOBUF, "deflate", junk, "bad_deflate")
)
unknown_encoding = st.sampled_from(["br", "zstd", "x-evil", "gzip, gzip"]).map(
    lambda encoding: Hostile(
        PROTOBUF, encoding, ExportTraceServiceRequest().SerializeToString(), "unknown_encoding"
    )
)
wrong_content_type = st.sampled_from(["text/plain", "application/xml", "multipart/form-data", ""]).map(
    lambda content_type: Hostile(content_type, "identity", b"{}", "wrong_content_type")
)


def gzip_bomb(inflated_megabytes: int) -> Hostile:
    """Zeros that inflate to `inflated_megabytes` MiB (about 1000:1)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: gzip container
    block = bytes(1024 * 1024)
    body = b"".join(compressor.compress(block) for _ in range(inflated_megabytes)) + compressor.flush()
    return Hostile(PROTOBUF, "gzip", body, "gzip_bomb")


gzip_bombs = st.integers(40, 200).map(gzip_bomb)

hostile = st.one_of(
    deep_protobuf,
    deep_json,
    deep_raw_json,
    giant_attribute,
    many_chunks,
    invalid_utf8_protobuf,
    invalid_utf8_json,
    truncated_protobuf,
    random_bytes,
    bad_gzip,
    truncated_gzip,
    bad_deflate,
    unknown_encoding,
    wrong_content_type,
    gzip_bombs,
)
# What the decoder alone can be given (no transport encodings, no content type).
decodable = st.one_of(
    deep_protobuf,
    deep_json,
    deep_raw_json,
    many_chunks,
    invalid_utf8_protobuf,
    invalid_utf8_json,
    truncated_protobuf,
    random_bytes,
)
