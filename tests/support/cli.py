"""The `ragpulse` command line as a user runs it: a subprocess in the repository."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.support.repo import ROOT


def ragpulse_eval(
    *args: str, env: dict[str, str] | None = None, unset: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    """`python -m agent eval ARGS` without the caller's RAGPULSE_* settings and the variables in
    `unset` (plus `env`)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_") and k not in unset}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "agent", "eval", *args],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]
