"""The `ragpulse` command line as a user runs it: a subprocess in the repository, or the same
command run by agent.cli.main in the test's process (no new interpreter, no second import of
litellm), for tests that run a command many times."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

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


@dataclass(frozen=True)
class Finished:
    """What a command run in-process left, named as subprocess.CompletedProcess names it."""

    returncode: int
    stdout: str
    stderr: str


def ragpulse_in_process(
    argv: Sequence[str],
    env: Mapping[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Finished:
    """`ragpulse ARGV` by agent.cli.main with the RAGPULSE_* variables of `env` and no others.

    main() sets process-wide things (the unraisable hook, logger levels): they are put back, so
    the next test starts as this one did. Log records go to pytest's log capture, not `stderr`."""
    for name in [n for n in os.environ if n.startswith("RAGPULSE_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        if name.startswith("RAGPULSE_"):
            monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    loggers = [logging.getLogger(), *(logging.getLogger(name) for name in logging.root.manager.loggerDict)]
    levels = {logger: logger.level for logger in loggers}
    from agent.cli import main

    capsys.readouterr()
    try:
        returncode = main(list(argv))
    finally:
        for logger, level in levels.items():
            logger.setLevel(level)
    captured = capsys.readouterr()
    return Finished(returncode, captured.out, captured.err)
