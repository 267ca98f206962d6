"""A RAG app with no framework, instrumented by hand with `ragpulse_instrument`, exporting to ragpulse.

The retriever ranks passages by shared words and the "model" answers with the best passage's
sentence: no network, no API key. Run a ragpulse first (`ragpulse run`), then:

    pip install ./instrument opentelemetry-sdk opentelemetry-exporter-otlp-proto-http
    python examples/hand_instrumented_app.py --endpoint http://127.0.0.1:4318
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from opentelemetry import trace

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _otel import PASSAGES, QUESTIONS, tracer_provider
from ragpulse_instrument import record_interaction


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", text.lower()) if len(w) > 3}


def retrieve(question: str, k: int = 3) -> list[tuple[str, str, float]]:
    ranked = sorted(
        ((f"passage-{i}", p, len(words(question) & words(p)) / len(words(question)))
         for i, p in enumerate(PASSAGES)),
        key=lambda hit: hit[2], reverse=True,
    )  # fmt: skip
    return ranked[:k]


def generate(question: str, passages: list[str]) -> str:
    return passages[0] if passages else "I don't know."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", help="OTLP/HTTP endpoint of ragpulse (default http://127.0.0.1:4318)")
    args = parser.parse_args()
    provider = tracer_provider("hand-instrumented-example", args.endpoint)
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("hand-instrumented-example")
    for question in QUESTIONS:
        with tracer.start_as_current_span("POST /ask", attributes={"http.route": "/ask"}):
            hits = retrieve(question)
            answer = generate(question, [text for _, text, _ in hits])
            # The three lines that make an app visible to ragpulse.
            record_interaction(
                query=question,
                chunks=[text for _, text, _ in hits],
                chunk_ids=[doc_id for doc_id, _, _ in hits],
                chunk_scores=[score for _, _, score in hits],
                response=answer,
            )
        print(f"{question} -> {answer}")
    provider.shutdown()  # flushes the spans to ragpulse


if __name__ == "__main__":
    main()
