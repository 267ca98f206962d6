"""The apps in examples/ run as a user runs them, each exporting to a running ragpulse, which
assembles and scores their interactions."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.agent_process import AgentProcess
from tests.support.repo import ROOT

pytestmark = pytest.mark.integration

EXAMPLES = {
    "llamaindex_app.py": "llamaindex-example",
    "langchain_app.py": "langchain-example",
    "hand_instrumented_app.py": "hand-instrumented-example",
}
QUESTIONS = 3


@pytest.fixture(scope="module")
def agent():  # type: ignore[no-untyped-def]
    running = AgentProcess(env={"RAGPULSE_ASSEMBLY_WAIT_SECONDS": "2"})
    running.wait_ready()
    yield running
    running.stop()


@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_example_app_is_scored_by_ragpulse(agent: AgentProcess, script: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    service = EXAMPLES[script]
    env = {
        **os.environ,
        # The hand-instrumented app imports ragpulse_instrument as `pip install ./instrument` would.
        "PYTHONPATH": str(ROOT / "instrument" / "src"),
        "LLAMA_INDEX_CACHE_DIR": str(tmp_path / "llama_index"),
        "OTEL_RESOURCE_ATTRIBUTES": "",
        "HTTP_PROXY": "http://127.0.0.1:9",  # nothing may reach the network
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    run = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), "--endpoint", f"http://127.0.0.1:{agent.otlp_port}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    scrape = agent.wait_for(
        lambda s: s.total("ragpulse_evaluations_total", service=service) >= 3 * QUESTIONS, timeout=60
    )
    assert scrape.total("ragpulse_interactions_total", service=service) == QUESTIONS
    assert scrape.total("ragpulse_evaluations_total", service=service, outcome="error") == 0
    # Every interaction had chunks and a response: faithfulness was defined for each one.
    assert scrape.total("ragpulse_score_count", service=service, metric="faithfulness") == QUESTIONS
