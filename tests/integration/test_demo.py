"""`ragpulse demo --duration 60` as a user runs it: drift is detected after the injected regression
and never before, seen from its /metrics while it runs and from the report it writes. Its clock runs
twice as fast as the wall clock (`--time-scale 2`): the same 60 demo seconds of traffic in 30 s;
the report's times are demo seconds. Once drift has been seen and the regression has run for 10
demo seconds (about 17 s in), the test ends the demo with Ctrl-C, as its banner offers: the report
is written the same way (test_demo_uses_the_configured_llm_judge runs to the end)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.net import free_port, scrape
from tests.support.repo import ROOT

pytestmark = pytest.mark.integration


def test_demo_detects_the_injected_regression_and_nothing_before(tmp_path: Path) -> None:
    metrics_port, otlp_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_")}
    env.update({
        "RAGPULSE_METRICS_LISTEN": f"127.0.0.1:{metrics_port}",
        "RAGPULSE_OTLP_LISTEN": f"127.0.0.1:{otlp_port}",
        "RAGPULSE_OTLP_GRPC_LISTEN": f"127.0.0.1:{free_port()}",  # never the default 4317
    })  # fmt: skip
    out = tmp_path / "demo"
    log = (tmp_path / "demo.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "agent", "demo", "--duration", "60", "--time-scale", "2", "--out", str(out)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    false_alarms: list[str] = []
    alarm_seen_in_phase: set[float] = set()
    services: set[str] = set()
    routes: set[str] = set()
    regressed_at, stopping = 0.0, False
    try:
        deadline = time.monotonic() + 240
        while process.poll() is None and time.monotonic() < deadline:
            try:
                samples = scrape(url)
            except (OSError, AssertionError):
                time.sleep(0.3)
                continue
            phase = samples.value("ragpulse_demo_phase")
            alarms = samples.total("ragpulse_drift_detected")
            if phase == 0 and alarms > 0:
                false_alarms.append(f"{alarms} series alarmed before the injection")
            if alarms > 0 and phase is not None:
                alarm_seen_in_phase.add(phase)
            if phase is not None and phase >= 1:
                regressed_at = regressed_at or time.monotonic()
                # Seen what it shows, with 10 demo seconds of the regression in the report.
                if alarms > 0 and not stopping and time.monotonic() - regressed_at >= 5:
                    stopping = True
                    process.send_signal(signal.SIGINT)
            for name, labels, _ in samples.samples:
                if name == "ragpulse_interactions_total":
                    services.add(labels["service"])
                    routes.add(labels["route"])
            time.sleep(0.5)
        assert process.wait(timeout=60) == 0, (tmp_path / "demo.log").read_text()[-4000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()
    output = (tmp_path / "demo.log").read_text()
    assert false_alarms == [], output[-3000:]
    assert alarm_seen_in_phase and min(alarm_seen_in_phase) >= 1, output[-3000:]
    assert len(services) >= 3 and len(routes) >= 4
    assert "regression injected: irrelevant chunks ranked first" in output  # plain lines: not a terminal
    assert "DRIFT detected" in output

    data = json.loads((out / "demo.json").read_text())
    injected = data["regression_injected_at"]
    assert injected is not None and 0 < injected < 60
    assert data["time_scale"] == 2
    assert data["detections"], data
    assert all(d["at"] > injected for d in data["detections"])
    # Each alarm is timed from the start of the phase it fired in: the second step's from its own.
    starts = data["phases"]
    for alarm in data["detections"]:
        phase = max((label for label in starts if starts[label] <= alarm["at"]), key=starts.__getitem__)
        assert alarm["phase"] == phase and phase != "healthy", alarm
        assert alarm["after_phase_start"] == pytest.approx(alarm["at"] - starts[phase]), alarm
    assert "first alarms: 'irrelevant chunks ranked first' at " in output
    assert 0 < data["first_score_seconds"] < injected
    metrics = {d["metric"] for d in data["detections"]}
    assert "context_precision" in metrics or "context_relevancy" in metrics
    # The regression moved the scores: the local judge's context precision really dropped.
    times, precision = data["timeline"]["t"], data["timeline"]["context_precision"]
    before = [v for t, v in zip(times, precision, strict=True) if v is not None and t < injected]
    after = [v for t, v in zip(times, precision, strict=True) if v is not None and t > injected + 4]
    assert sum(before) / len(before) - sum(after) / len(after) > 0.3
    # The lexical judge's default set: answer relevancy (at chance) is neither scored nor charted,
    # and the report and the start-up line say why.
    assert data["metrics"] == ["context_precision", "context_relevancy", "faithfulness"]
    assert "answer_relevancy" not in data["timeline"] and "answer_relevancy=" not in output
    assert output.count("answer_relevancy is off: the lexical judge measures it at chance") == 1
    html = (out / "report.html").read_text()
    assert 'id="metrics"' in html and "answer_relevancy is off" in html
    assert 'data-chart="timeline"' in html and "<svg" in html
    assert "<script" not in html and "stylesheet" not in html  # self-contained: nothing to fetch
    assert (out / "report.png").read_bytes().startswith(b"\x89PNG")


def test_demo_app_sends_to_any_otlp_endpoint() -> None:
    from tests.support.agent_process import AgentProcess

    agent = AgentProcess(env={"RAGPULSE_ASSEMBLY_WAIT_SECONDS": "2"})
    try:
        agent.wait_ready()
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_")}
        run = subprocess.run(
            [sys.executable, "-m", "agent", "demo-app", "--endpoint", f"http://127.0.0.1:{agent.otlp_port}",
             "--rate", "20", "--duration", "4"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert "sent" in run.stderr
        sent = int(run.stderr.rsplit("sent ", 1)[1].split()[0])
        assert sent >= 40
        scrape = agent.wait_for(lambda s: s.total("ragpulse_interactions_total") >= sent, timeout=60)
        assert scrape.total("ragpulse_interactions_total") == sent
        services = {
            labels["service"] for name, labels, _ in scrape.samples if name == "ragpulse_interactions_total"
        }
        assert services == {"support-assistant", "docs-search", "hr-assistant"}
    finally:
        agent.stop()


def test_demo_uses_the_configured_llm_judge(tmp_path: Path) -> None:
    from tests.support.llm_server import FakeLLMServer

    with FakeLLMServer() as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_")}
        env.update({
            "RAGPULSE_METRICS_LISTEN": f"127.0.0.1:{free_port()}",
            "RAGPULSE_OTLP_LISTEN": f"127.0.0.1:{free_port()}",
            "RAGPULSE_OTLP_GRPC_LISTEN": f"127.0.0.1:{free_port()}",  # never the default 4317
            "RAGPULSE_JUDGE_MODEL": "openai/ragpulse-test-judge",
            "RAGPULSE_JUDGE_API_BASE": server.api_base,
            "RAGPULSE_JUDGE_API_KEY": "test-key",
        })  # fmt: skip
        run = subprocess.run(
            [sys.executable, "-m", "agent", "demo", "--duration", "4", "--rate", "10",
             "--out", str(tmp_path)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        calls = server.stats.calls
    data = json.loads((tmp_path / "demo.json").read_text())
    assert data["judge"] == "openai/ragpulse-test-judge"
    assert data["interactions_scored"] > 0 and calls > 0


def test_a_demo_too_short_to_learn_a_baseline_says_so_and_how_long_is_enough(tmp_path: Path) -> None:
    """`ragpulse demo --duration 15`: the regression comes at 6 s, before 150 scores of every
    series; "no drift detected" alone would read as a miss."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_")}
    env.update({
        "RAGPULSE_METRICS_LISTEN": f"127.0.0.1:{free_port()}",
        "RAGPULSE_OTLP_LISTEN": f"127.0.0.1:{free_port()}",
        "RAGPULSE_OTLP_GRPC_LISTEN": f"127.0.0.1:{free_port()}",
    })  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-m", "agent", "demo", "--duration", "15", "--time-scale", "2",
         "--out", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    match = re.search(
        r"; no drift detected: the regression came at 6\.\ds, before the drift detector had learnt its "
        r"baseline \(150 scores of each service, route and metric; the fewest had (\d+)\); "
        r"--duration (\d+) or more gives it time\n",
        run.stdout,
    )
    assert match, run.stdout[-2000:]
    assert int(match[1]) < 150 and 40 <= int(match[2]) <= 120
    assert match[0].strip("\n; ") in (tmp_path / "report.html").read_text()


def test_a_demo_on_port_0_sends_its_traffic_to_the_ports_it_bound(tmp_path: Path) -> None:
    """`ragpulse demo --otlp-listen 127.0.0.1:0`: port 0 is any free port, for every listener;
    the demo's own traffic goes to the port its receiver bound (not to port 80 of a URL with
    port 0) and its banner names the /metrics port bound."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_")}
    env["RAGPULSE_OTLP_GRPC_LISTEN"] = "127.0.0.1:0"
    run = subprocess.run(
        [sys.executable, "-m", "agent", "demo", "--otlp-listen", "127.0.0.1:0", "--metrics-listen",
         "127.0.0.1:0", "--duration", "4", "--time-scale", "2", "--out", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-3000:]
    assert "Connection refused" not in output and "Failed to export" not in output, output[-3000:]
    bound = re.search(r"metrics on (http://127\.0\.0\.1:(\d+))/metrics", output)
    assert bound and int(bound[2]) != 0, output[-3000:]
    assert f"/metrics on {bound[1]}/metrics, regression at" in output  # the banner
    receiver = re.search(r"OTLP/HTTP receiver on http://127\.0\.0\.1:(\d+)/v1/traces", output)
    assert receiver and int(receiver[1]) != 0, output[-3000:]
    data = json.loads((tmp_path / "demo.json").read_text())
    assert data["interactions_scored"] >= 40, data["interactions_scored"]
