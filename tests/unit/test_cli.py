"""The command line as README.md describes it."""

from __future__ import annotations

import argparse
import re

from agent import cli
from tests.support.repo import ROOT


def test_the_readme_layout_names_every_subcommand() -> None:
    """README, "Layout": the first row lists what cli.py and commands/ serve."""
    readme = (ROOT / "README.md").read_text()
    row = re.search(r"^cli\.py, commands/ +ragpulse (.*?)\n(?=\S)", readme, re.S | re.M)
    assert row, "README.md's layout no longer has its cli.py row"
    listed = [name.strip() for name in re.split(r"[|;,]", " ".join(row[1].split()))]
    parser = cli._parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert sorted(listed) == sorted(commands.choices)
