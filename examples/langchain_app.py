"""A LangChain RAG chain instrumented with OpenInference, exporting to ragpulse.

Offline: LangChain's fake chat model and deterministic fake embeddings, an in-memory vector
store (its similarity search needs numpy, which langchain-core does not install). Run a ragpulse
first (`ragpulse run`), then:

    pip install langchain-core openinference-instrumentation-langchain numpy \
        opentelemetry-sdk opentelemetry-exporter-otlp-proto-http
    python examples/langchain_app.py --endpoint http://127.0.0.1:4318
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _otel import PASSAGES, QUESTIONS, tracer_provider

ANSWERS = [
    "The Seine flows through Paris.",
    "The Loire is the longest river entirely in France.",
    "Marseille is the oldest city in France.",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", help="OTLP/HTTP endpoint of ragpulse (default http://127.0.0.1:4318)")
    args = parser.parse_args()

    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.language_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnableLambda, RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore
    from openinference.instrumentation.langchain import LangChainInstrumentor

    provider = tracer_provider("langchain-example", args.endpoint)
    LangChainInstrumentor().instrument(tracer_provider=provider)
    retriever = InMemoryVectorStore.from_texts(PASSAGES, DeterministicFakeEmbedding(size=32)).as_retriever(
        search_kwargs={"k": 3}
    )
    prompt = ChatPromptTemplate.from_messages(
        [("system", "Answer only from the passages.\n\n{context}"), ("human", "{question}")]
    )
    chain = (
        {
            "context": retriever | RunnableLambda(lambda docs: "\n\n".join(d.page_content for d in docs)),
            "question": RunnablePassthrough(),
        }
        | prompt
        | FakeListChatModel(responses=ANSWERS)
        | StrOutputParser()
    )
    for question in QUESTIONS:
        print(f"{question} -> {chain.invoke(question)}")
    provider.shutdown()  # flushes the spans to ragpulse


if __name__ == "__main__":
    main()
