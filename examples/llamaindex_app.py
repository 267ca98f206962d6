"""A LlamaIndex RAG app instrumented with OpenInference, exporting to ragpulse.

Offline: LlamaIndex's MockLLM and MockEmbedding, an in-memory vector index. Run a ragpulse first
(`ragpulse run`), then:

    pip install llama-index-core openinference-instrumentation-llama-index \
        opentelemetry-sdk opentelemetry-exporter-otlp-proto-http
    python examples/llamaindex_app.py --endpoint http://127.0.0.1:4318
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _otel import PASSAGES, QUESTIONS, tracer_provider


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", help="OTLP/HTTP endpoint of ragpulse (default http://127.0.0.1:4318)")
    args = parser.parse_args()

    from llama_index.core import Settings, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.llms import MockLLM
    from llama_index.core.schema import TextNode
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    provider = tracer_provider("llamaindex-example", args.endpoint)
    LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    Settings.llm = MockLLM()  # answers by echoing its prompt: deterministic, no API key
    Settings.embed_model = MockEmbedding(embed_dim=8)
    nodes = [TextNode(text=text, id_=f"passage-{i}") for i, text in enumerate(PASSAGES)]
    engine = VectorStoreIndex(nodes).as_query_engine(similarity_top_k=3)
    for question in QUESTIONS:
        answer = engine.query(question)
        print(f"{question} -> {len(answer.source_nodes)} passages")
    provider.shutdown()  # flushes the spans to ragpulse


if __name__ == "__main__":
    main()
