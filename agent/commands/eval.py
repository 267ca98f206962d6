"""`ragpulse eval FILE [B --compare] [--out DIR] [--metrics m1,m2] [--judge MODEL]`: the parser.

The work is in `agent.commands.eval_run`, imported only when the command runs (it loads rich and
numpy, which `ragpulse run` never needs). An LLM judge's client (litellm: seconds of imports)
is imported in a background thread started as the command begins, so that it overlaps reading
and validating the input instead of preceding it. Until the judge is built the cycle collector
is paused: those imports build half a million container objects and next to no garbage, and the
collector walking them again and again as they pile up cost a quarter of the import time.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import logging
import threading
from collections.abc import Callable
from typing import Any

from agent.config import Settings


def register(commands: Any, with_settings: Callable[..., argparse.ArgumentParser]) -> None:
    parser = with_settings(
        commands.add_parser(
            "eval",
            help="score a JSONL set offline (RAGAS columns, CSV and Parquet too)",
            description="Score every item of FILE (a JSONL set: question, contexts, response, "
            "optionally reference and ids) with every metric whose inputs are present; with two "
            "files and --compare, compare B with A. Exit status: 0 scored, 1 no usable line, "
            "2 usage or input error, 3 too many judge errors (--max-judge-errors), 4 the quality "
            "gate failed (--fail-under, --fail-under-ci, --fail-if-worse), 5 the judge cannot "
            "work (self-check failed); see docs/eval.md.",
        ),
        agent_flags=False,  # no listen address, no sampling: eval reads a file
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="JSONL set to score (two with --compare)")
    parser.add_argument("--out", default="ragpulse-eval", metavar="DIR", help="output directory")
    parser.add_argument("--metrics", metavar="M1,M2", help="only these metrics (default: all that apply)")
    parser.add_argument(
        "--judge", "--judge-model", dest="judge_model", metavar="MODEL",
        help="judge: lexical, embedding, or a litellm model such as openai/gpt-4o-mini",
    )  # fmt: skip
    parser.add_argument("--k", type=int, default=5, help="cut-off of the rank metrics (default 5)")
    parser.add_argument("--compare", action="store_true", help="A/B comparison of two files")
    parser.add_argument(
        "--max-judge-errors", type=_share, default=0.1, metavar="SHARE",
        help="exit 3 when more than this share of the judged scores are judge errors (default 0.1)",
    )  # fmt: skip
    # The quality gate (docs/eval.md, "A gate in CI"): exit 4 after the files are written.
    parser.add_argument(
        "--fail-under", action="append", default=[], metavar="METRIC=MIN",
        help="exit 4 when METRIC's mean is under MIN, e.g. faithfulness=0.8 (repeatable; B with --compare)",
    )  # fmt: skip
    parser.add_argument(
        "--fail-under-ci", action="append", default=[], metavar="METRIC=MIN",
        help="exit 4 when the lower bound of METRIC's 95%% CI is under MIN (stricter; repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--fail-if-worse", action="append", default=[], metavar="METRIC",
        help="with --compare: exit 4 when B is worse than A on METRIC, the 95%% CI of B − A "
        "excluding 0 (repeatable)",
    )  # fmt: skip
    # Trust (docs/trust.md): prediction-powered estimates of the true means from human labels.
    parser.add_argument(
        "--labels", metavar="FILE", help="human labels JSONL: adds PPI estimates to the summary"
    )
    parser.add_argument("--calibration", metavar="FILE", help="calibration JSON from ragpulse calibrate")
    parser.set_defaults(handler=_main)


def _share(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"a share between 0 and 1, got {text}")
    return value


def _main(args: argparse.Namespace, settings: Settings) -> int:
    # At exit the interpreter would have the cycle collector walk every object that litellm, its
    # SDKs and the report made (1-2 s on a busy machine) to free memory the OS takes back anyway;
    # frozen objects are skipped. Registered first, so it runs after every other exit handler.
    atexit.unregister(gc.freeze)  # once, however often the command runs in one process
    atexit.register(gc.freeze)
    collecting = gc.isenabled()
    gc.disable()  # until eval_run has built the judge
    try:
        if not settings.judge.is_local:
            threading.Thread(target=_import_judge_client, name="import-litellm", daemon=True).start()
        from agent.commands.eval_run import main

        return main(args, settings)
    finally:
        if collecting:  # also when the command ended before building the judge
            gc.enable()
        else:  # an in-process caller's choice, restored
            gc.disable()


def _import_judge_client() -> None:
    """Import litellm ahead of its first use; the judge imports it again (at no cost once done,
    waiting for this thread if it is still at work) and reports any failure itself."""
    try:
        from agent.judges.caller import load_litellm

        load_litellm()
    except Exception:  # the judge's own import raises it where it can be reported
        logging.getLogger(__name__).debug("importing the judge client ahead of time failed", exc_info=True)
