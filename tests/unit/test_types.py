"""The package ships py.typed: its annotations are checked on every test run (configuration in pyproject)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.repo import ROOT


def test_agent_type_checks() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--hide-error-context"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"mypy found type errors in agent/:\n{result.stdout}{result.stderr}"
