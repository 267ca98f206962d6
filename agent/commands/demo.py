"""Parsers of `ragpulse demo` and `ragpulse demo-app`; the work is in `agent.demo.run`, imported
only when one of them runs."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.config import Settings


def register(
    commands: Any, with_settings: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]
) -> None:
    demo = with_settings(
        commands.add_parser(
            "demo",
            help="run the agent on synthetic RAG traffic with an injected regression, live, with a report",
            description="The embedded agent scores a synthetic RAG service's OpenTelemetry traces; "
            "part-way through, retrieval regresses (irrelevant chunks ranked first, then missing "
            "facts) and the drift detector should fire. Writes OUT/report.html, report.png, demo.json.",
        )
    )
    demo.add_argument(
        "--duration",
        type=float,
        default=90.0,
        metavar="SECONDS",
        help="how long to run (default 90; 0 = until Ctrl-C)",
    )
    demo.add_argument(
        "--regress-after",
        type=float,
        metavar="SECONDS",
        help="when the regression starts (default: 40%% of the duration)",
    )
    demo.add_argument("--rate", type=float, default=40.0, help="interactions per second (default 40)")
    demo.add_argument(
        "--time-scale",
        type=_positive,
        default=1.0,
        metavar="N",
        help="run the demo's clock N times faster: the same interactions, regression and report "
        "(in demo seconds) in 1/N of the time, sent N times faster (default 1)",
    )
    demo.add_argument("--out", default="ragpulse-demo", metavar="DIR", help="report directory")
    demo.add_argument("--seed", type=int, default=7, help="traffic seed")
    demo.add_argument("--plain", action="store_true", help="plain lines even on a terminal")
    demo.set_defaults(handler=_demo)

    app = commands.add_parser(
        "demo-app",
        help="the demo's synthetic RAG service alone, sending OTLP/HTTP to any endpoint",
        description="Sends synthetic RAG traces (OpenInference layout, real OpenTelemetry SDK) over "
        "OTLP/HTTP to ENDPOINT, forever or for --duration seconds.",
    )
    app.add_argument(
        "--endpoint", required=True, metavar="URL", help="OTLP/HTTP endpoint, e.g. http://otel-collector:4318"
    )
    app.add_argument("--rate", type=float, default=5.0, help="interactions per second (default 5)")
    app.add_argument("--regress-after", type=float, metavar="SECONDS", help="inject the regression then")
    app.add_argument(
        "--missing-facts-after",
        type=float,
        metavar="SECONDS",
        help="second step of the regression (default: regress-after + 60)",
    )
    app.add_argument("--duration", type=float, metavar="SECONDS", help="stop after this long")
    app.add_argument("--seed", type=int, default=7)
    app.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    app.set_defaults(handler=_demo_app, config=None, set=[], otlp_listen=None, metrics_listen=None,
                     judge_model=None, sample_rate=None)  # fmt: skip


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def _demo(args: argparse.Namespace, settings: Settings) -> int:
    from agent.demo.run import run_demo

    duration = args.duration if args.duration and args.duration > 0 else None
    return run_demo(settings, duration=duration, regress_after=args.regress_after, rate=args.rate,
                    out_dir=Path(args.out), seed=args.seed, live=False if args.plain else None,
                    time_scale=args.time_scale)  # fmt: skip


def _demo_app(args: argparse.Namespace, settings: Settings) -> int:
    from agent.demo.run import run_demo_app

    missing = args.missing_facts_after
    if missing is None and args.regress_after is not None:
        missing = args.regress_after + 60.0
    return run_demo_app(args.endpoint, args.rate, args.regress_after, missing, args.duration, args.seed)
