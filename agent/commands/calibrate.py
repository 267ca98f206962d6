"""`ragpulse calibrate` and `ragpulse label-queue`.

    ragpulse calibrate LABELS [--scores RESULTS] [--out DIR] [--method auto|isotonic|platt]
    ragpulse label-queue RESULTS --fraction F [--oversample K] [--inputs FILE] [--out FILE]
    ragpulse label-queue --from-results-topic [--config FILE] [--set NAME=VALUE] [--out FILE]
    ragpulse label-queue --results-file FILE [--fraction F] [--out FILE]

calibrate writes DIR/calibration.json (load it with `--set calibration_file=...` in `ragpulse
run`), DIR/agreement.json and DIR/report.html, prints a table, and reports unusable label lines
by number on stderr without stopping (one line for a reason shared by many lines). Per metric it
prints a plain verdict on the judge's AUROC interval: at chance, weak or useful (docs/trust.md).
label-queue draws interactions for labelling exactly as the running agent does (same hash, same
weights) and writes one JSONL line per interaction, with its `scores` and `"labels": {metric: null}`
for a person to fill in (and its documents once, with the judge's verdicts, when the results carry
them); the filled file is a labels file for calibrate and for `agent.trust.offline.ppi_summary`.
With --from-results-topic it exports what the running agents marked on the Kafka results topic;
with --results-file, what they marked in a local results file (`results_file`, rotated files
included), or with --fraction a draw among all its results.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

EXTRA_HINT = 'install the trust extra from the clone: pip install ".[trust]"'


def add_commands(commands: Any) -> None:
    """Register the trust subcommands on `ragpulse`'s subparsers."""
    calibrate = commands.add_parser(
        "calibrate", help="agreement of the judge with human labels, and a fitted calibration"
    )
    calibrate.add_argument("labels", type=Path, metavar="LABELS", help="labels JSONL")
    calibrate.add_argument(
        "--scores", type=Path, metavar="RESULTS", help="judge scores JSONL (ragpulse eval's results.jsonl)"
    )
    calibrate.add_argument("--out", type=Path, default=Path("calibration"), metavar="DIR")
    calibrate.add_argument(
        "--method", choices=["auto", "isotonic", "platt"], default="auto",
        help="auto (default): isotonic from 100 labels of a metric on, Platt scaling below; "
        "isotonic is refused below 100 labels",
    )  # fmt: skip
    calibrate.add_argument("--metrics", nargs="+", metavar="METRIC", help="only these metrics")
    calibrate.add_argument(
        "--judge", metavar="NAME",
        help="the judge that produced the scores (default: the one named in the summary.json beside RESULTS)",
    )  # fmt: skip
    calibrate.add_argument("--target-precision", type=float, default=0.9, metavar="P")
    calibrate.add_argument("--target-recall", type=float, default=0.9, metavar="R")
    calibrate.add_argument(
        "--threshold", action="append", default=[], metavar="METRIC=VALUE",
        help="verdict threshold of a metric (default: the documented one, else 0.5)",
    )  # fmt: skip
    calibrate.add_argument("--bootstrap", type=int, default=1000, metavar="N", help="bootstrap resamples")
    calibrate.add_argument("--seed", type=int, default=0)
    calibrate.set_defaults(trust_handler=calibrate_command)

    queue = commands.add_parser("label-queue", help="draw interactions for human labelling, as JSONL")
    queue.add_argument(
        "results", type=Path, metavar="RESULTS", nargs="?", help="ragpulse eval's results.jsonl"
    )
    queue.add_argument(
        "--from-results-topic", action="store_true",
        help="read what the agents marked on the Kafka results topic (results_topic, kafka_* settings)",
    )  # fmt: skip
    queue.add_argument(
        "--results-file", type=Path, metavar="FILE",
        help="read the agent's local results file (results_file) and its rotated files",
    )  # fmt: skip
    queue.add_argument("--config", metavar="FILE", help="YAML settings file, for --from-results-topic")
    queue.add_argument("--set", metavar="NAME=VALUE", action="append", default=[], help="override a setting")
    queue.add_argument(
        "--wait", type=float, default=30.0, metavar="S", help="give up reading the topic after S"
    )
    queue.add_argument("--fraction", type=float, help="share drawn (label_sample_rate); for RESULTS files")
    queue.add_argument("--oversample", type=float, default=1.0, help="factor for low-confidence verdicts")
    queue.add_argument("--band", type=float, nargs=2, default=(0.3, 0.7), metavar=("LOW", "HIGH"))
    queue.add_argument("--inputs", type=Path, metavar="FILE", help="eval input JSONL: copy its text per id")
    queue.add_argument("--out", type=Path, metavar="FILE", help="output JSONL (default: stdout)")
    queue.set_defaults(trust_handler=label_queue_command)


def _thresholds(items: list[str]) -> dict[str, float]:
    found = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            found[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise SystemExit(f"ragpulse calibrate: --threshold expects METRIC=NUMBER, got {item!r}")
    return found


def calibrate_command(args: argparse.Namespace) -> int:
    try:
        from agent.report.calibration import render
        from agent.trust.agreement import agreement, auroc_verdict, plain
        from agent.trust.calibration import CalibrationSet, fit, method_for
    except ImportError as exc:
        print(f"ragpulse calibrate: {exc.name} is missing; {EXTRA_HINT}", file=sys.stderr)
        return 2
    from agent.trust.labels import read_label_file
    from agent.trust.offline import join, read_scores

    try:
        label_file = read_label_file(args.labels)
        table = read_scores(args.scores) if args.scores else None
    except OSError as exc:
        print(f"ragpulse calibrate: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    thresholds = _thresholds(args.threshold)
    pairs, join_problems = join(label_file.labels, table, args.metrics)
    problems = sorted([*label_file.problems, *join_problems], key=lambda p: p.line)
    _print_problems(args.labels, problems)
    judge = args.judge or _judge_of(args.scores)
    if table is not None and table.problems:
        for problem in table.problems:
            print(f"{args.scores}: {problem}", file=sys.stderr)
    if label_file.unlabelled:
        print(
            f"{args.labels}: {label_file.unlabelled} line(s) not labelled yet (label null)", file=sys.stderr
        )
    usable = {m: p for m, p in pairs.items() if len(p.labels) >= 2}
    if not usable:
        print("ragpulse calibrate: no metric has two usable labels; nothing to calibrate", file=sys.stderr)
        return 1
    if args.method == "isotonic":
        for metric, joined in sorted(usable.items()):
            try:
                method_for(len(joined.labels), "isotonic")
            except ValueError as exc:
                print(f"ragpulse calibrate: {metric}: {exc}", file=sys.stderr)
                return 2

    agreements = {}
    calibrations = {}
    goals = (("precision", args.target_precision), ("recall", args.target_recall))
    for metric, joined in sorted(usable.items()):
        agreements[metric] = agreement(
            metric, joined.labels, joined.scores, threshold=thresholds.get(metric),
            resamples=args.bootstrap, seed=args.seed,
        )  # fmt: skip
        if len({label >= 0.5 for label in joined.labels}) == 2:
            calibrations[metric] = fit(
                metric, joined.scores, joined.labels, method=method_for(len(joined.labels), args.method),
                judge=judge, source=args.labels.name, goals=goals,
            )  # fmt: skip
        else:
            print(f"{metric}: every label is on one side; no calibration fitted", file=sys.stderr)

    args.out.mkdir(parents=True, exist_ok=True)
    CalibrationSet(calibrations).save(args.out / "calibration.json")
    document = {
        "judge": judge,
        "labels": str(args.labels),
        "scores": str(args.scores) if args.scores else None,
        "problems": [str(p) for p in problems],
        "metrics": {m: a.as_dict() for m, a in agreements.items()},
    }
    (args.out / "agreement.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    page = render(
        agreements, calibrations, usable, problems, title="ragpulse calibrate: judge against human labels",
        judge=judge,
    )  # fmt: skip
    (args.out / "report.html").write_text(page, encoding="utf-8")

    print(f"Judge: {judge or 'unknown (give --judge, or --scores beside its summary.json)'}")
    width = max(len("metric"), *(len(m) for m in agreements))
    print(f"{'metric':<{width}} {'items':>5} {'good':>5} {'AUROC [95% CI]':>22} {'bal.acc':>7} "
          f"{'F1(prob)':>8} {'threshold':>11} {'method':>8}  verdict")  # fmt: skip
    for metric, a in agreements.items():
        auroc = "n/a" if a.auroc.value is None else f"{a.auroc.value:.3f}"
        if a.auroc.low is not None and a.auroc.high is not None:
            auroc += f" [{a.auroc.low:.3f}, {a.auroc.high:.3f}]"
        bal = "n/a" if a.balanced_accuracy.value is None else f"{a.balanced_accuracy.value:.3f}"
        f1 = "n/a" if a.problem_f1.value is None else f"{a.problem_f1.value:.3f}"
        method = calibrations[metric].method if metric in calibrations else "none"
        verdict = auroc_verdict(a.auroc.low, a.auroc.high)
        print(f"{metric:<{width}} {a.items:>5} {a.positives:>5} {auroc:>22} {bal:>7} {f1:>8} "
              f"{plain(a.threshold):>11} {method:>8}  {verdict}")  # fmt: skip
    print(f"wrote {args.out / 'calibration.json'}, {args.out / 'agreement.json'}, {args.out / 'report.html'}")
    if problems:
        print(f"{len(problems)} label line(s) not used (listed above and in the report)")
    return 0


SAME_REASON_SHOWN = 3


def _print_problems(labels: Path, problems: Any) -> None:
    """Unusable label lines on stderr: each line's own reason, but one line for a reason shared
    by more than a few lines (a labels file without scores gives every line the same one)."""
    from collections import defaultdict

    by_reason: dict[str, list[int]] = defaultdict(list)
    for problem in problems:
        by_reason[problem.reason].append(problem.line)
    for reason, lines in by_reason.items():
        if len(lines) <= SAME_REASON_SHOWN:
            for line in lines:
                print(f"{labels}: line {line}: {reason}", file=sys.stderr)
            continue
        hint = ""
        if reason.startswith("no score on the line"):
            hint = ("; give the judge's scores with --scores RESULTS (ragpulse eval's results.jsonl), or "
                    "label the lines of a label-queue file, which carry them")  # fmt: skip
        print(
            f"{labels}: {len(lines)} lines (first {lines[0]}, last {lines[-1]}): {reason}{hint}",
            file=sys.stderr,
        )


def _judge_of(scores: Path | None) -> str | None:
    """The judge named in the summary.json that ragpulse eval wrote beside `scores`, if any."""
    if scores is None:
        return None
    try:
        summary = json.loads((scores.parent / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    judge = summary.get("judge") if isinstance(summary, dict) else None
    return judge if isinstance(judge, str) and judge else None


def _inputs(path: Path) -> dict[str, dict[str, Any]]:
    """Eval input rows by id, with the text a labeller needs (RAGAS column names accepted)."""
    found = {}
    with path.open(encoding="utf-8", errors="replace") as lines:
        for number, text in enumerate(lines, start=1):
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError:
                continue
            if not isinstance(row, dict):
                continue
            identifier = str(row.get("id", number))
            found[identifier] = {
                "query": row.get("query", row.get("question", row.get("user_input"))),
                "contexts": row.get("contexts", row.get("retrieved_contexts")),
                "response": row.get("response", row.get("answer")),
                # A captured item's judge answers (a criterion's "answered 2 of 5"), for the labeller.
                "explanations": row.get("explanations"),
            }
    return found


def label_queue_command(args: argparse.Namespace) -> int:
    from agent.trust.label_sampling import LabelSampler
    from agent.trust.offline import read_scores

    if args.from_results_topic:
        return _queue_from_topic(args)
    if args.results_file is not None:
        return _queue_from_file(args)
    if args.results is None or args.fraction is None:
        print(
            "ragpulse label-queue: give RESULTS and --fraction, --results-file FILE, or --from-results-topic",
            file=sys.stderr,
        )
        return 2

    try:
        low, high = args.band
        sampler = LabelSampler(args.fraction, args.oversample, (low, high))
    except ValueError as exc:
        print(f"ragpulse label-queue: {exc}", file=sys.stderr)
        return 2
    try:
        table = read_scores(args.results)
        texts = _inputs(args.inputs) if args.inputs else {}
    except OSError as exc:
        print(f"ragpulse label-queue: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    for problem in table.problems:
        print(f"{args.results}: {problem}", file=sys.stderr)
    out = args.out.open("w", encoding="utf-8") if args.out else sys.stdout
    drawn = lines = 0
    try:
        for identifier, scores in table.scores.items():
            request = sampler.decide_scores(identifier, scores)
            if not request.requested:
                continue
            defined = {metric: score for metric, score in sorted(scores.items()) if score is not None}
            if not defined:
                continue
            drawn += 1
            row: dict[str, Any] = {
                "interaction_id": identifier,
                "scores": defined,
                "labels": dict.fromkeys(defined),
                "weight": round(request.weight, 6),
                "reason": request.reason,
            }
            row.update({k: v for k, v in texts.get(identifier, {}).items() if v is not None})
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            lines += 1
    finally:
        if args.out:
            out.close()
    print(
        f"label-queue: drew {drawn} of {len(table.scores)} interactions ({lines} lines to label)",
        file=sys.stderr,
    )
    return 0


def _queue_from_file(args: argparse.Namespace) -> int:
    """What the agent marked in its local results file; with --fraction, a draw among all of it."""
    from agent.trust.label_sampling import LabelSampler
    from agent.trust.topic import read_results_file

    try:
        sampler = (
            None if args.fraction is None else LabelSampler(args.fraction, args.oversample, tuple(args.band))
        )
    except ValueError as exc:
        print(f"ragpulse label-queue: {exc}", file=sys.stderr)
        return 2
    try:
        rows, read, problems = read_results_file(args.results_file, marked_only=sampler is None)
    except OSError as exc:
        print(f"ragpulse label-queue: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    for problem in problems:
        print(problem, file=sys.stderr)
    if sampler is not None:
        drawn = []
        for row in rows:
            request = sampler.decide_scores(row["interaction_id"], row["scores"])
            if request.requested:
                drawn.append({**row, "weight": round(request.weight, 6), "reason": request.reason})
        rows = drawn
    write_jsonl(rows, args.out)
    print(f"label-queue: {len(rows)} of {read} results to label from {args.results_file}", file=sys.stderr)
    if not rows and sampler is None and read:
        print(
            "label-queue: no result was marked for labelling (label_sample_rate is 0 on the agent); "
            "give --fraction F to draw among them",
            file=sys.stderr,
        )
    return 0


def write_jsonl(rows: Iterable[dict[str, Any]], path: Path | None) -> None:
    """One JSON object per line, to `path` or to stdout."""
    out = path.open("w", encoding="utf-8") if path else sys.stdout
    try:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    finally:
        if path:
            out.close()


def _queue_from_topic(args: argparse.Namespace) -> int:
    """The interactions the agents marked for labelling, read from the results topic to its end."""
    from agent.config import ConfigError, load_settings
    from agent.trust.topic import read_marked

    overrides: dict[str, Any] = {}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep:
            print(f"ragpulse label-queue: --set expects NAME=VALUE, got {item!r}", file=sys.stderr)
            return 2
        overrides[name.strip().replace("-", "_")] = value
    try:
        settings = load_settings(config_file=args.config, overrides=overrides)
    except ConfigError as exc:
        print(f"ragpulse label-queue: {exc}", file=sys.stderr)
        return 2
    topic = settings.results.topic
    if not topic:
        print("ragpulse label-queue: results_topic is not set", file=sys.stderr)
        return 2
    from agent.infra.kafka_connect import kafka_connection

    try:
        rows, read = read_marked(kafka_connection(settings.kafka), topic, args.wait)
    except Exception as exc:  # the broker is unreachable or the topic unknown: say so, no traceback
        print(f"ragpulse label-queue: cannot read {topic}: {exc}", file=sys.stderr)
        return 1
    write_jsonl(rows, args.out)
    drawn = len({row["interaction_id"] for row in rows})
    print(
        f"label-queue: {drawn} of {read} results were marked for labelling ({len(rows)} lines)",
        file=sys.stderr,
    )
    return 0
