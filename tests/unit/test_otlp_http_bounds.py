"""The OTLP/HTTP receiver's body handling: inflation bounded and off the loop, slices of whole traces."""

from __future__ import annotations

import gzip
import zlib

import pytest

from agent.model import Resource, Span
from agent.otlp.decode import DecodedRequest, UndecodableError
from agent.sources.otlp_http import _inflate, _slices, _TooLarge

BODY = b"an OTLP body " * 1000


@pytest.mark.parametrize(
    ("encoded", "content_encoding"),
    [
        (BODY, "identity"),
        (gzip.compress(BODY), "gzip"),
        (gzip.compress(BODY[:5000]) + gzip.compress(BODY[5000:]), "gzip"),  # two gzip members
        (zlib.compress(BODY), "deflate"),
        (zlib.compress(BODY)[2:-4], "deflate"),  # raw deflate, as some clients send it
    ],
)
def test_bodies_inflate(encoded: bytes, content_encoding: str) -> None:
    assert _inflate(encoded, content_encoding, len(BODY)) == BODY


@pytest.mark.parametrize("content_encoding", ["gzip", "deflate"])
def test_a_body_inflating_past_the_limit_is_too_large(content_encoding: str) -> None:
    bomb = b"\x00" * (8 << 20)
    encoded = gzip.compress(bomb) if content_encoding == "gzip" else zlib.compress(bomb)
    assert len(encoded) < 64 << 10
    with pytest.raises(_TooLarge):
        _inflate(encoded, content_encoding, 1 << 20)
    assert len(_inflate(encoded, content_encoding, 8 << 20)) == 8 << 20


@pytest.mark.parametrize(
    ("encoded", "content_encoding"),
    [(b"this is not gzip", "gzip"), (gzip.compress(BODY)[:-20], "gzip"), (b"\xff" * 50, "deflate")],
    ids=["not-gzip", "truncated", "not-deflate"],
)
def test_corrupt_compression_is_undecodable(encoded: bytes, content_encoding: str) -> None:
    with pytest.raises(UndecodableError, match="cannot be decompressed"):
        _inflate(encoded, content_encoding, 1 << 30)


def _span(trace: int, index: int) -> Span:
    return Span(f"{trace:032x}", f"{index + 1:016x}", None, "s", 0, 0, {}, Resource({}))


def test_large_requests_are_handed_over_in_slices_of_whole_traces() -> None:
    spans = [_span(trace, i) for i in range(30) for trace in (1, 2, 3)]  # interleaved traces
    request = DecodedRequest(spans=spans, rejected=["invalid_id"])
    parts = list(_slices(request, 40))
    assert [len(p.spans) for p in parts] == [30, 30, 30]
    assert all(len({s.trace_id for s in p.spans}) == 1 for p in parts)
    assert sorted(s.span_id for p in parts for s in p.spans) == sorted(s.span_id for s in spans)
    assert sum(len(p.rejected) for p in parts) == 1
    assert next(_slices(DecodedRequest(spans=spans[:10]), 40)).spans == spans[:10]
