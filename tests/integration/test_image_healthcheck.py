"""The image's HEALTHCHECK command, run as Docker would run it, against a real agent."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.support.agent_process import AgentProcess
from tests.support.net import free_port
from tests.support.repo import ROOT

pytestmark = pytest.mark.integration


def healthcheck_command() -> list[str]:
    dockerfile = (ROOT / "Dockerfile").read_text()
    match = re.search(r"^HEALTHCHECK .*?CMD (\[.*?\])$", dockerfile, re.M | re.S)
    assert match, "Dockerfile has no exec-form HEALTHCHECK"
    command = json.loads(match.group(1))
    assert command[0] == "python"
    return [sys.executable, *command[1:]]


def test_healthcheck_passes_on_a_live_agent_and_fails_without_one() -> None:
    agent = AgentProcess()
    try:
        agent.wait_ready()
        listen = {"RAGPULSE_METRICS_LISTEN": f"0.0.0.0:{agent.metrics_port}"}
        assert subprocess.run(healthcheck_command(), env=listen, timeout=30).returncode == 0
    finally:
        agent.kill()
    nobody = {"RAGPULSE_METRICS_LISTEN": f"0.0.0.0:{free_port()}"}
    result = subprocess.run(healthcheck_command(), env=nobody, capture_output=True, timeout=30)
    assert result.returncode != 0
