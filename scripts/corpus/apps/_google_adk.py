"""The Google ADK app shared by the google-adk stacks (native tracing, OpenInference).

An `LlmAgent` whose model is ADK's `LiteLlm("openai/gpt-4o-mini")` wrapper on the fake server,
a plain function `search` as its tool (ADK wraps the returned string as {"result": ...}), an
`InMemoryRunner`. A conversation is one ADK session (its id is the session id ADK puts on its
spans); each `run_async` of a turn is its own trace.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fake_llm import FakeLLM
from recording import Recorder, offline_env
from scenarios import SCENARIOS, ScenarioPolicy, search_text

SYSTEM = "You answer questions from the knowledge base. Use the search tool, then answer briefly."
APP = "ragpulse-corpus"
USER = "user-1"


def search(query: str) -> str:
    """Search the knowledge base for documents about a topic.

    Args:
        query: what to search for
    """
    return search_text(query)


async def _run(recorder: Recorder) -> None:
    from google.adk.agents import LlmAgent
    from google.adk.models.lite_llm import LiteLlm
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    server = FakeLLM(ScenarioPolicy()).start()
    model = LiteLlm(model="openai/gpt-4o-mini", api_base=server.base_url, api_key="sk-fake")
    agent = LlmAgent(name="assistant", model=model, instruction=SYSTEM, tools=[search])
    runner = InMemoryRunner(agent=agent, app_name=APP)
    for scenario in SCENARIOS:
        session = await runner.session_service.create_session(
            app_name=APP, user_id=USER, session_id=f"session-{scenario.name}"
        )
        earlier: list[list[str]] = []
        for number, turn in enumerate(scenario.turns):
            mark = server.mark()
            message = types.Content(role="user", parts=[types.Part(text=turn.question)])
            response = ""
            async for event in runner.run_async(user_id=USER, session_id=session.id, new_message=message):
                if event.is_final_response() and event.content and event.content.parts:
                    response = "".join(p.text or "" for p in event.content.parts)
            recorder.answer(scenario, number, turn.question, response, server.since(mark), earlier)
            earlier += [["user", turn.question], ["assistant", response]]
        recorder.flush()
    await runner.close()
    server.stop()


def run(stack: str, out_dir: Path, instrument: Callable[[Any], None], **write: str) -> None:
    offline_env()
    # litellm would fetch its model price list from the network at import.
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    recorder = Recorder(stack, out_dir)
    instrument(recorder.provider)
    asyncio.run(_run(recorder))
    recorder.write(**write)
