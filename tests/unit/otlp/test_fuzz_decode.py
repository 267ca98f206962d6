"""Fuzzing the decoders with hostile bodies (tests/support/hostile.py): whatever arrives, decoding
either returns spans or raises UndecodableError (a 400 and a dead letter upstream) — never a
RecursionError, a UnicodeDecodeError or any other exception that would become a 500 or kill a
Kafka consumer."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from agent.otlp.decode import DecodedRequest, UndecodableError, decode_kafka_value, decode_request
from tests.support.hostile import Hostile, decodable

ENCODING = {"application/x-protobuf": "protobuf", "application/json": "json"}
KAFKA = {"protobuf": "otlp_proto", "json": "otlp_json"}
FUZZ = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@FUZZ
@given(decodable)
def test_decoders_accept_or_refuse_hostile_bodies_cleanly(case: Hostile) -> None:
    encoding = ENCODING[case.content_type]
    for decode in (
        lambda: decode_request(case.body, encoding),  # type: ignore[arg-type]
        lambda: decode_kafka_value(case.body, KAFKA[encoding]),
    ):
        try:
            decoded = decode()
        except UndecodableError as exc:
            assert str(exc), "an undecodable body needs a reason"
        else:
            assert isinstance(decoded, DecodedRequest)
            for span in decoded.spans:
                # Decoded text is valid Unicode: it can be logged, judged and exported.
                for value in span.convention_attributes.values():
                    if isinstance(value, str):
                        value.encode("utf-8")
