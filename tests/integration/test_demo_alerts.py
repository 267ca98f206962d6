"""`ragpulse demo` watched as an operator would: a real Prometheus scrapes it every second and
evaluates the generated rules (recording rules included), with every `for:` shortened to 2s and
the baseline rule's windows shortened to the demo's length (8 s against the 10m before). The demo
runs its clock four times as fast as the wall clock (`--time-scale 4`, 20 interactions per demo
second): its 144 seconds of traffic take 36 s at most; once every alert it should raise has been
seen and the dashboards checked (about 31 s in), the test ends it as a user would, with Ctrl-C.
Prometheus' windows and `for:` are wall-clock ones.

With the defaults (local lexical judge, no absolute threshold) no alert is pending or firing while
the traffic is healthy, and the drift and baseline alerts fire after the injected regression; and
every query of every dashboard panel returns series from what the demo feeds, unless the panel is
listed in UNFED with the reason the embedded demo cannot feed it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support.alerting import ALERTMANAGER, PROMETHEUS, AlertingStack, missing_binaries
from tests.support.net import free_port, http_get, scrape
from tests.support.repo import ROOT, load_module

_missing = missing_binaries(PROMETHEUS, ALERTMANAGER)
pytestmark = [pytest.mark.integration, pytest.mark.skipif(_missing is not None, reason=_missing or "")]

# Demo seconds: healthy traffic for 80 (20 wall seconds), "irrelevant chunks first" until 112,
# then "missing facts". The drift detectors count scores, so the faster clock shows them the same
# story; WALL is the run's length in wall-clock seconds. 80 interactions per wall second (20 per
# route): what a busy 2-core machine keeps up with beside the other tests. The alerts of the
# first step fire about 6 s after it, the faithfulness one is pending about 3 s into the second.
DURATION, REGRESS_AFTER, TIME_SCALE, RATE = 144, 80, 4, 20
WALL = DURATION / TIME_SCALE
# The baseline rule in wall seconds: the last 8 s (about 160 scores per route and metric) against
# the 10 minutes before them (every earlier second of the demo: 120 scores per series in them from
# about 14 s on, so the rule watches the last 6 s of healthy traffic).
RULE_PARAMS = {
    "baseline_recent": "8s",
    "baseline_history": "10m",
    "min_evaluations_1h": 100,
    "min_evaluations_baseline": 120,
}
# What the demo scores: the lexical judge's default, answer relevancy left out (at chance on real
# labels, docs/judges.md).
METRICS = ("context_precision", "context_relevancy", "faithfulness")
EXPECTED_AFTER = {"RagpulseQualityDrift", "RagpulseQualityBelowBaseline", "RagpulseServiceQualityDegraded"}
# May fire after the regression too: the broken retriever scores lower (the top-score signal
# drifts, on every interaction, no judge), and once facts go missing answers leave their context
# (the overlap signal may confirm it before the demo ends).
ALLOWED_AFTER = {"RagpulseSignalDrift": {"retrieval_top_score", "overlap"}}

# (dashboard, panel title, refId) the embedded demo cannot feed, and why. A new panel is either fed
# by the demo (its queries must return series) or listed here.
UNFED = {
    ("ragpulse-quality.json", "Mean $metric (5m) against its alert threshold", "B"):
        "absolute thresholds are opt-in: none by default (test_alerting.py sets one and sees it)",
    ("ragpulse-quality.json", "1h mean against the same hour a week earlier", "B"):
        "needs a week of history",
    ("ragpulse-judges.json", "Tokens per second", "A"): "the local judge spends no tokens",
    ("ragpulse-judges.json", "Cost, last hour", "A"): "the local judge costs nothing",
    ("ragpulse-judges.json", "Cost per hour (USD)", "A"): "the local judge costs nothing",
    ("ragpulse-judges.json", "Cost per hour (USD)", "B"): "the local judge is not priced by litellm",
    ("ragpulse-judges.json", "Verdict cache errors per second", "A"): "in-memory cache: no Redis to fail",
    ("ragpulse-pipeline.json", "Consumer lag", "A"): "OTLP/HTTP source: no Kafka",
    ("ragpulse-pipeline.json", "Kafka consumer lag", "A"): "OTLP/HTTP source: no Kafka",
    ("ragpulse-pipeline.json", "Intake paused", "B"): "OTLP/HTTP source: no Kafka partitions",
    ("ragpulse-pipeline.json", "Intake paused", "A"): "the demo's load never pauses intake",
    ("ragpulse-pipeline.json", "Spans received per second", "B"):
        "every span the demo sends belongs to a RAG interaction: none skipped",
    ("ragpulse-pipeline.json", "Refused requests and dead letters per second", "B"):
        "the demo's spans all decode: no dead letter",
    ("ragpulse-quality.json", "Probe mean score per set and metric (30m)", "A"):
        "the demo runs no prober (tests/integration/test_probes.py feeds it)",
    ("ragpulse-quality.json", "Probe items and failures per round (30m)", "A"):
        "the demo runs no prober (tests/integration/test_probes.py feeds it)",
    ("ragpulse-quality.json", "Probe items and failures per round (30m)", "B"):
        "the demo runs no prober: no probe fails",
    ("ragpulse-quality.json", "Judge canary: agreement with human labels", "A"):
        "the canary is a command of its own (ragpulse canary), not run by the demo",
    ("ragpulse-quality.json", "Judge canary: mean shift against the accepted run", "A"):
        "the canary is a command of its own (ragpulse canary), not run by the demo",
    ("ragpulse-quality.json", "Judge canary: mean shift against the accepted run", "B"):
        "the canary is a command of its own (ragpulse canary), not run by the demo",
    ("ragpulse-quality.json", "Empty retrievals (share of interactions, 10m)", "B"):
        "the alert level is the share over the day before the last 10m: the demo is shorter",
    ("ragpulse-quality.json", "Refusals (share of interactions, 10m)", "B"):
        "the alert level is the share over the day before the last 10m: the demo is shorter",
}  # fmt: skip


@dataclass
class DemoRun:
    stack: AlertingStack
    regressed_at: float  # monotonic time the demo's phase was first seen above 0
    seen_before: list[str] = field(default_factory=list)
    seen_after: dict[str, set[tuple[str, str, str]]] = field(default_factory=dict)
    panels: list[str] = field(default_factory=list)
    unfed_with_data: list[str] = field(default_factory=list)
    variables: list[str] = field(default_factory=list)
    metric_values: list[str] = field(default_factory=list)  # what the dashboards' $metric offers
    checked: int = 0
    log: str = ""


def _targets(board: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(panel title, refId, expr) of every target, and the annotations' queries (refId "")."""
    for panel in board.get("panels", []):
        for child in [panel, *panel.get("panels", [])]:
            for target in child.get("targets", []):
                yield child.get("title", ""), target.get("refId", ""), target["expr"]
    for annotation in board.get("annotations", {}).get("list", []):
        if "expr" in annotation:
            yield f"annotation {annotation['name']}", "", annotation["expr"]


def _substitute(expr: str, metric: str) -> str:
    return (
        expr.replace('metric=~"$metric"', 'metric=~".*"')  # the variable's "All"
        .replace("$metric", metric)
        .replace("$service", ".*")
        .replace("$route", ".*")
        .replace("$__rate_interval", "15s")
    )


def _check_dashboards(run: DemoRun) -> None:
    """Every panel query, for every metric the demo scores, while the demo still runs."""
    build = load_module("dashboards/build.py")
    stack = run.stack
    for path in sorted((ROOT / "dashboards").glob("*.json")):
        board = json.loads(path.read_text())
        targets = list(_targets(board))
        assert len(targets) == len(list(build.expressions(board)))
        for title, ref, expr in targets:
            # A panel repeated per metric (metric="$metric") must show every metric the demo scores.
            metrics = METRICS if 'metric="$metric"' in expr else METRICS[:1]
            empty = [m for m in metrics if not stack.query(_substitute(expr, m))]  # raises on a PromQL error
            run.checked += len(metrics)
            reason = UNFED.get((path.name, title, ref))
            if reason is None and empty:
                run.panels.append(f"{path.name}: {title} [{ref}] for {empty}: {expr}")
            if reason is not None and not empty:
                run.unfed_with_data.append(f"{path.name}: {title} [{ref}] ({reason})")
        for variable in board["templating"]["list"]:
            match = re.fullmatch(r"label_values\((.*), (\w+)\)", variable.get("query") or "")
            if match:
                selector, label = _substitute(match.group(1), METRICS[0]), match.group(2)
                query = urllib.parse.urlencode({"match[]": selector})
                status, body = http_get(f"{stack.prometheus.url}/api/v1/label/{label}/values?{query}")
                if status != 200 or not json.loads(body)["data"]:
                    run.variables.append(f"{path.name}: ${variable['name']}: {body!r}")
                elif variable["name"] == "metric":
                    run.metric_values = sorted(json.loads(body)["data"])


def _labels(alert: dict[str, Any]) -> tuple[str, str, str]:
    """(service, route, metric), or the signal in place of the metric for a signal alert."""
    labels = alert["labels"]
    return labels.get("service", ""), labels.get("route", ""), labels.get("metric", labels.get("signal", ""))


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoRun]:
    workdir = tmp_path_factory.mktemp("demo-alerts")
    metrics_port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_")}
    env.update({
        "RAGPULSE_METRICS_LISTEN": f"127.0.0.1:{metrics_port}",
        "RAGPULSE_OTLP_LISTEN": f"127.0.0.1:{free_port()}",
        "RAGPULSE_OTLP_GRPC_LISTEN": f"127.0.0.1:{free_port()}",  # never the default 4317
    })  # fmt: skip
    log_path = workdir / "demo.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "agent", "demo", "--duration", str(DURATION),
         "--regress-after", str(REGRESS_AFTER), "--time-scale", str(TIME_SCALE), "--rate", str(RATE),
         "--out", str(workdir / "report")],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    stack = AlertingStack(workdir, [], targets=[f"127.0.0.1:{metrics_port}"], **RULE_PARAMS)
    url = f"http://127.0.0.1:{metrics_port}/metrics"

    def phase() -> float | None:
        try:
            return scrape(url).value("ragpulse_demo_phase")
        except (OSError, AssertionError):
            return None

    try:
        stack.wait("the demo's /metrics", lambda: phase() is not None or process.poll() is not None)
        stack.start()
        # Prometheus' own start: until its first scrape, absent(up) holds; watch from there on.
        stack.wait("the demo scraped", lambda: stack.query('up{job="ragpulse"} == 1'))
        stack.wait("no alert at the first scrape", lambda: not stack.alerts(), timeout=15)
        run = DemoRun(stack, regressed_at=0.0)
        deadline = time.monotonic() + WALL + 120
        while process.poll() is None and time.monotonic() < deadline:
            alerts = stack.alerts()
            now = phase()
            if now is None:
                break
            if now == 0:
                run.seen_before += [f"{a['labels']['alertname']} {a['state']} {_labels(a)}" for a in alerts]
            else:
                run.regressed_at = run.regressed_at or time.monotonic()
                for alert in alerts:
                    run.seen_after.setdefault(alert["labels"]["alertname"], set()).add(_labels(alert))
            firing_after = {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}
            if (
                now == 2
                and firing_after >= EXPECTED_AFTER
                and "faithfulness"
                in {m for _, _, m in run.seen_after.get("RagpulseQualityBelowBaseline", set())}
            ):
                break
            time.sleep(0.5)
        # The demo still runs (its traffic is in its last phase): its series are live.
        if process.poll() is None:
            _check_dashboards(run)
            process.send_signal(signal.SIGINT)  # seen what it shows: Ctrl-C ends it early
        assert process.wait(timeout=WALL + 120) == 0, log_path.read_text()[-4000:]
        run.log = log_path.read_text()
        yield run
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()
        stack.stop()


def test_healthy_demo_traffic_raises_no_alert(demo: DemoRun) -> None:
    assert demo.regressed_at, "the demo never reached its regression:\n" + demo.log[-3000:]
    assert demo.seen_before == [], demo.log[-3000:]


def test_the_regression_fires_the_drift_and_baseline_alerts_and_nothing_else(demo: DemoRun) -> None:
    # Both fire, and nothing else (no threshold alert: none is set by default) but a drift of the
    # signals the regression moves.
    assert EXPECTED_AFTER <= set(demo.seen_after) <= EXPECTED_AFTER | set(ALLOWED_AFTER), demo.seen_after
    for alert, signals in ALLOWED_AFTER.items():
        assert {s for _, _, s in demo.seen_after.get(alert, set())} <= signals, demo.seen_after
    # The retriever's lower scores are seen too (pending at least: the alert holds for 5 minutes).
    assert any(s == "retrieval_top_score" for _, _, s in demo.seen_after.get("RagpulseSignalDrift", set()))
    below = demo.seen_after["RagpulseQualityBelowBaseline"]
    # Irrelevant chunks ranked first: context precision of every route falls to about a quarter.
    routes = {(s, r) for s, r, m in below if m == "context_precision"}
    assert len(routes) == 4, below
    # Then facts go missing: faithfulness falls to 0.
    assert any(m == "faithfulness" for _, _, m in below), below
    # Answer relevancy is not scored with the lexical judge's default: no series, no alert.
    assert not any(m == "answer_relevancy" for alerts in demo.seen_after.values() for _, _, m in alerts)
    # One page per service, however many of its routes and metrics alert (docs/runbooks.md).
    series = demo.seen_after["RagpulseQualityDrift"] | below
    pages = demo.seen_after["RagpulseServiceQualityDegraded"]
    assert {service for service, _, _ in pages} == {service for service, _, _ in series}
    assert len(pages) < len(series), (pages, series)


def test_the_demo_scores_the_judges_default_set_and_says_why_once(demo: DemoRun) -> None:
    # The dashboards offer the metrics scored, and only those; the start-up line says what is off.
    assert demo.metric_values == sorted(METRICS), demo.metric_values
    lines = [line for line in demo.log.splitlines() if "answer_relevancy is off" in line]
    assert len(lines) == 1, demo.log[-3000:]
    assert "at chance (AUROC 0.469" in lines[0] and "RAGPULSE_METRICS=" in lines[0]


def test_every_dashboard_panel_the_demo_feeds_returns_series(demo: DemoRun) -> None:
    assert demo.checked >= 40
    assert demo.panels == [], "panels without data (feed them, or list them in UNFED):\n" + "\n".join(
        demo.panels
    )
    assert demo.variables == []


def test_every_unfed_panel_exists_and_really_gets_no_data(demo: DemoRun) -> None:
    keys = {
        (path.name, title, ref)
        for path in (ROOT / "dashboards").glob("*.json")
        for title, ref, _ in _targets(json.loads(path.read_text()))
    }
    assert set(UNFED) <= keys, set(UNFED) - keys
    assert demo.unfed_with_data == [], "fed after all: remove from UNFED:\n" + "\n".join(demo.unfed_with_data)
