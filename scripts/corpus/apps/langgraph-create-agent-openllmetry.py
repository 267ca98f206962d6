"""LangGraph `create_agent` under OpenLLMetry (opentelemetry-instrumentation-langchain).

Run through scripts/corpus/record.sh (it sets PYTHONPATH=scripts/corpus): app.py OUT_DIR
"""

import sys
from pathlib import Path

from _langgraph_create_agent import run
from recording import version


def instrument(provider):  # type: ignore[no-untyped-def]
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor

    LangchainInstrumentor().instrument(tracer_provider=provider)


if __name__ == "__main__":
    run(
        "langgraph-create-agent-openllmetry",
        Path(sys.argv[1]),
        instrument,
        framework=version("langchain", "langgraph", "langchain-openai"),
        instrumentation=version("opentelemetry-instrumentation-langchain"),
        layout="openllmetry (traceloop) attributes",
        notes="create_agent with a retriever tool (documents joined by blank lines in the tool result); "
        "conversation = one thread_id on an InMemorySaver, each turn its own trace, earlier turns re-sent",
    )
