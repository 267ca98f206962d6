"""./scripts/run says what it is doing while it installs (README, "Getting started").

The real script runs with RAGPULSE_VENV pointing at a directory whose `bin/python` and
`bin/ragpulse` are stubs that record their arguments, so the install steps run as written
without installing anything.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.repo import ROOT

STUB = """#!/bin/sh
echo "$(basename "$0") $*" >> "{log}"
"""


def stub_venv(tmp_path: Path) -> tuple[Path, Path]:
    venv, log = tmp_path / "venv", tmp_path / "calls.log"
    (venv / "bin").mkdir(parents=True)
    for name in ("python", "ragpulse"):
        path = venv / "bin" / name
        path.write_text(STUB.format(log=log))
        path.chmod(0o755)
    return venv, log


def run_script(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "RAGPULSE_VENV": str(venv)}
    return subprocess.run(
        [str(ROOT / "scripts/run"), *args], env=environment, capture_output=True, text=True, timeout=60
    )


def test_a_first_install_says_what_it_installs_then_later_runs_are_quiet(tmp_path: Path) -> None:
    venv, log = stub_venv(tmp_path)
    first = run_script(venv, "validate-config")
    assert first.returncode == 0, first.stderr
    lines = first.stderr.splitlines()
    pinned = sum(
        1 for line in (ROOT / "requirements/runtime.lock").read_text().splitlines() if "==" in line[:80]
        and line[:1].isalnum()
    )  # fmt: skip
    assert lines[0] == (
        f"scripts: installing {pinned} pinned packages from requirements/runtime.lock into {venv} "
        "(first time: a minute or two; later runs skip this)"
    )
    assert lines[1].startswith("scripts: installed in ") and lines[1].endswith(
        "installing ragpulse from this checkout"
    )
    calls = log.read_text().splitlines()
    assert calls[-1] == "ragpulse validate-config"
    assert any("--require-hashes" in call for call in calls)

    again = run_script(venv, "validate-config")
    assert again.returncode == 0 and again.stderr == "", "nothing to install: nothing said"
