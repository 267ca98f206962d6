"""The OTLP/HTTP receiver's body handling: inflation bounded and off the loop, slices of whole traces."""

from __future__ import annotations

import gzip
import zlib

import pytest

from agent.model import Resource, Span
from agent.otlp.decode import DecodedRequest, UndecodableError
from agent.sources.handover import slices
from agent.sources.otlp_http import _inflate, _TooLarge

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
    # Named: a gzip header holds the time it was made, and every xdist worker must collect alike.
    ids=["identity", "gzip", "gzip-two-members", "deflate", "raw-deflate"],
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
    parts = list(slices(request, 40))
    assert [len(p.spans) for p in parts] == [30, 30, 30]
    assert all(len({s.trace_id for s in p.spans}) == 1 for p in parts)
    assert sorted(s.span_id for p in parts for s in p.spans) == sorted(s.span_id for s in spans)
    assert sum(len(p.rejected) for p in parts) == 1
    assert next(slices(DecodedRequest(spans=spans[:10]), 40)).spans == spans[:10]


# -- the receiver on a real socket, with a scripted intake ------------------------------------------


class ScriptedIntake:
    """An intake whose pause reason and accept() behaviour the test sets."""

    def __init__(self, pause: str | None = None, fail: bool = False) -> None:
        self.pause = pause
        self.fail = fail
        self.accepted: list[DecodedRequest] = []
        self.dead: list[str] = []

    def accepting(self) -> bool:
        return self.pause is None

    def pause_reason(self) -> str | None:
        return self.pause

    def retry_after_seconds(self) -> float:
        return 7.0

    def accept(self, request: DecodedRequest, source: str) -> int:
        if self.fail:
            raise RuntimeError("a bug in the pipeline")
        self.accepted.append(request)
        return len(self.accepted)

    def low_watermark(self) -> int:
        return 0

    def dead_letter(self, reason: str, detail: str, count: int = 1) -> None:
        self.dead.append(reason)


def _serve(intake: ScriptedIntake, requests: list[tuple[bytes, dict[str, str]]]) -> tuple[list, dict]:  # type: ignore[type-arg]
    import asyncio
    import urllib.error
    import urllib.request

    from prometheus_client import CollectorRegistry

    from agent.sources.otlp_http import OtlpHttpSource
    from agent.telemetry import IntakeTelemetry

    registry = CollectorRegistry()

    def post(port: int, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/traces", body, headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, dict(response.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers)

    async def run() -> list:  # type: ignore[type-arg]
        source = OtlpHttpSource("127.0.0.1", 0, 1 << 20, telemetry=IntakeTelemetry(registry))
        await source.start(intake)
        try:
            assert source.bound_port is not None
            answers = [await asyncio.to_thread(post, source.bound_port, b, h) for b, h in requests]
            await asyncio.sleep(0.1)  # the access log counts after the response is written
            return answers
        finally:
            await source.stop()

    answers = asyncio.run(run())
    refused = {
        sample.labels["reason"]: sample.value
        for metric in registry.collect()
        if metric.name == "ragpulse_requests_refused"
        for sample in metric.samples
        if sample.name.endswith("_total")
    }
    return answers, refused


PROTOBUF = {"Content-Type": "application/x-protobuf"}


def test_a_paused_intake_answers_503_with_retry_after_counted_by_its_reason() -> None:
    answers, refused = _serve(ScriptedIntake(pause="judge_unavailable"), [(b"", PROTOBUF), (b"", PROTOBUF)])
    assert [status for status, _ in answers] == [503, 503]
    assert answers[0][1]["Retry-After"] == "7"
    assert refused == {"judge_unavailable": 2}


def test_a_bug_behind_the_receiver_is_a_400_never_a_500() -> None:
    intake = ScriptedIntake(fail=True)
    answers, refused = _serve(intake, [(b"", PROTOBUF)])
    assert [status for status, _ in answers] == [400]
    assert refused == {"internal_error": 1} and intake.dead == ["internal_error"]


def test_accepted_bodies_are_not_refusals() -> None:
    intake = ScriptedIntake()
    answers, refused = _serve(
        intake, [(b"", PROTOBUF), (gzip.compress(b""), {**PROTOBUF, "Content-Encoding": "gzip"})]
    )
    assert [status for status, _ in answers] == [200, 200]
    assert refused == {} and len(intake.accepted) == 2
