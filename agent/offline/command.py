"""`ragpulse eval FILE [B --compare] [--out DIR] [--metrics m1,m2] [--judge MODEL]`: the parser.

The work is in `agent.offline.cli`, imported only when the command runs (it loads rich, numpy,
scipy and matplotlib, which `ragpulse run` never needs).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from agent.config import Settings


def register(
    commands: Any, with_settings: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]
) -> None:
    parser = with_settings(
        commands.add_parser(
            "eval",
            help="score a labelled set offline (JSONL / RAGAS columns / CSV / Parquet)",
            description="Score every item of FILE with every metric whose inputs are present; "
            "with two files and --compare, compare configuration B with A.",
        )
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="evaluation set (two with --compare)")
    parser.add_argument("--out", default="ragpulse-eval", metavar="DIR", help="output directory")
    parser.add_argument("--metrics", metavar="M1,M2", help="only these metrics (default: all that apply)")
    parser.add_argument("--judge", dest="judge_model", metavar="MODEL", help="judge model (as --judge-model)")
    parser.add_argument("--k", type=int, default=5, help="cut-off of the rank metrics (default 5)")
    parser.add_argument("--compare", action="store_true", help="A/B comparison of two files")
    parser.set_defaults(handler=_main)


def _main(args: argparse.Namespace, settings: Settings) -> int:
    from agent.offline.cli import main

    return main(args, settings)
