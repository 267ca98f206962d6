"""Golden probes end to end: a real web app (Starlette + the OpenTelemetry ASGI instrumentation,
a hand-instrumented RAG span) exporting OTLP to the agent under test, and `ragpulse probe` sending
the golden set over real HTTP with its own traceparent."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.agent_process import AgentProcess
from tests.support.llm_server import FakeLLMServer
from tests.support.net import free_port
from tests.support.probe_app import GOLDEN, ProbeApp
from tests.support.probing import (
    SET,
    Canary,
    K,
    items_scored,
    offline_scores,
    probe_command,
    probe_sums,
    run_probe,
    write_golden,
)
from tests.support.repo import ROOT

pytestmark = pytest.mark.integration

SAMPLE_RATE = 0.02  # production sampling: a quiet service yields almost no streaming scores
ASSEMBLY_WAIT = 3  # seconds


@pytest.fixture(scope="module")
def agent() -> Iterator[AgentProcess]:
    process = AgentProcess(
        ["--sample-rate", str(SAMPLE_RATE)], env={"RAGPULSE_ASSEMBLY_WAIT_SECONDS": str(ASSEMBLY_WAIT)}
    )
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def app(agent: AgentProcess) -> Iterator[ProbeApp]:
    server = ProbeApp(agent.traces_url, free_port()).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_golden(tmp_path_factory.mktemp("golden"))


def probe(agent: AgentProcess, app: ProbeApp, golden: Path) -> subprocess.CompletedProcess[str]:
    return run_probe(f"http://127.0.0.1:{agent.otlp_port}", app.url, golden)


def test_probe_scores_equal_eval_and_a_retrieval_regression_is_caught(
    agent: AgentProcess, app: ProbeApp, golden: Path
) -> None:
    done = probe(agent, app, golden)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(GOLDEN)} request(s), 0 failed" in done.stdout
    scrape = agent.wait_for(lambda s: items_scored(s) >= len(GOLDEN), timeout=30)
    assert items_scored(scrape) == len(GOLDEN), agent.log()
    assert scrape.total("ragpulse_probe_items_total", probe_set=SET, outcome="pass") == len(GOLDEN)
    healthy = probe_sums(scrape)
    expected = offline_scores(regressed=False)
    for metric in ("context_recall", "answer_correctness", f"recall_at_{K}", "mrr", "context_precision"):
        count, total = healthy[metric]
        assert count == len(expected[metric]), metric
        assert total == pytest.approx(sum(expected[metric]), abs=1e-9), metric
    # Probes are kept out of the production series and sampling.
    assert scrape.total("ragpulse_score_count") == 0
    assert scrape.total("ragpulse_interactions_total") == 0

    # A retrieval regression, at a traffic level where sampling leaves almost nothing to score.
    app.regress()
    for i in range(20):
        app.ask(GOLDEN[i % len(GOLDEN)]["question"])
    done = probe(agent, app, golden)
    assert done.returncode == 0, done.stdout + done.stderr
    scrape = agent.wait_for(
        lambda s: items_scored(s) >= 2 * len(GOLDEN) and s.total("ragpulse_interactions_total") >= 20,
        timeout=30,
    )
    regressed = {
        m: (c - healthy.get(m, (0, 0))[0], s - healthy.get(m, (0, 0))[1])
        for m, (c, s) in probe_sums(scrape).items()
    }
    expected = offline_scores(regressed=True)
    for metric in ("context_recall", f"recall_at_{K}"):
        count, total = regressed[metric]
        assert total == pytest.approx(sum(expected[metric]), abs=1e-9), metric
        assert total / count < healthy[metric][1] / healthy[metric][0] - 0.5, metric
    assert scrape.total("ragpulse_probe_items_total", probe_set=SET, outcome="fail") == len(GOLDEN)
    streaming = scrape.total("ragpulse_score_count", metric="context_precision")
    assert streaming <= 3  # too few to see the regression: the probes saw every item
    assert scrape.total("ragpulse_interactions_total") == 20
    app.regress(False)


def test_probe_failures_are_counted_by_reason(
    agent: AgentProcess, app: ProbeApp, golden: Path, tmp_path: Path
) -> None:
    env_url = f"http://127.0.0.1:{free_port()}/ask"  # nothing listens: every request fails
    env = {"PATH": "/usr/bin:/bin", "RAGPULSE_PROBES_SET_NAME": "down",
           "RAGPULSE_PROBES_OTLP_ENDPOINT": f"http://127.0.0.1:{agent.otlp_port}"}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "agent", "probe", "--golden", str(golden), "--endpoint", env_url],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    scrape = agent.wait_for(
        lambda s: s.total("ragpulse_probe_failures_total", probe_set="down") >= len(GOLDEN), timeout=20
    )
    assert scrape.total("ragpulse_probe_failures_total", probe_set="down", reason="http_error") == len(GOLDEN)
    assert scrape.total("ragpulse_probe_items_total", probe_set="down") == 0


def test_no_answer_says_where_the_answer_was_looked_for_and_what_the_response_had(
    agent: AgentProcess, app: ProbeApp, golden: Path
) -> None:
    """The app answers {"data": {"answer": ...}}; an endpoint given without its answer_path looks
    for "answer" at the top: the round's line says so, and which keys the response had."""
    env = {"PATH": "/usr/bin:/bin", "RAGPULSE_PROBES_SET_NAME": "misread",
           "RAGPULSE_PROBES_OTLP_ENDPOINT": f"http://127.0.0.1:{agent.otlp_port}"}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "agent", "probe", "--golden", str(golden), "--endpoint", app.url],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{len(GOLDEN)} failed (no_answer {len(GOLDEN)})" in done.stdout
    assert (
        "  no_answer on app: answer_path 'answer': no 'answer' at the top; the response has keys: data"
        in (done.stdout)
    )
    from agent.probes.prober import missing_answer_hint

    assert missing_answer_hint({"data": {"text": "Paris"}}, "data.answer") == (
        "answer_path 'data.answer': no 'answer' at 'data'; the response has keys: text"
    )
    assert missing_answer_hint({"choices": []}, "choices.0.text") == (
        "answer_path 'choices.0.text': at 'choices' is a list of 0, no item '0'"
    )
    assert (
        missing_answer_hint({"answer": ["Paris"]}, "answer")
        == "answer_path 'answer' leads to a list, not a string"
    )


def test_probe_schedule_sends_a_round_every_interval_until_stopped(
    agent: AgentProcess, app: ProbeApp, golden: Path
) -> None:
    """`ragpulse probe --schedule`, the one-sidecar way to run the prober (docs/probes.md)."""
    argv, env = probe_command(
        f"http://127.0.0.1:{agent.otlp_port}", app.url, golden,
        "--schedule", "--set", "probes_interval_seconds=1", set_name="scheduled",
    )  # fmt: skip
    process = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        scrape = agent.wait_for(lambda s: items_scored(s, "scheduled") >= 2 * len(GOLDEN), timeout=30)
        assert process.poll() is None, "a scheduled prober keeps running"
    finally:
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=20)
    assert items_scored(scrape, "scheduled") >= 2 * len(GOLDEN), out + err
    assert process.returncode == 0, out + err
    rounds = out.count(f"probe round of scheduled: {len(GOLDEN)} request(s), 0 failed")
    assert rounds >= 2, out
    # Every finished round's items are scored (a round cut short by the signal may add some).
    scrape = agent.wait_for(lambda s: items_scored(s, "scheduled") >= rounds * len(GOLDEN), timeout=15)
    assert items_scored(scrape, "scheduled") >= rounds * len(GOLDEN)
    assert scrape.total("ragpulse_probe_items_total", probe_set="scheduled", outcome="fail") == 0


def test_sigterm_stops_a_scheduled_prober_once_the_requests_in_flight_are_answered(
    agent: AgentProcess, app: ProbeApp, golden: Path
) -> None:
    """What Kubernetes and docker send: the round under way finishes the requests in flight,
    sends no more, exports every span, and the prober exits 0 at once."""
    argv, env = probe_command(
        f"http://127.0.0.1:{agent.otlp_port}", app.url, golden, "--schedule",
        "--set", "probes_interval_seconds=1", "--set", "probes_concurrency=1", set_name="terminated",
    )  # fmt: skip
    received = app.state.requests
    app.slow(0.5)  # a round of 5 items, one at a time, takes 2.5 s
    process = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        # The first round done and the second under way: a request of it is at the app.
        deadline = time.monotonic() + 60
        while app.state.requests < received + len(GOLDEN) + 1:
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.02)
        process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        out, err = process.communicate(timeout=20)
        took = time.monotonic() - signalled
    finally:
        app.slow(0)
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, out + err
    # What was sent is counted below; the bound catches a prober that hangs on the signal, with
    # room for a loaded machine (the canary's stop took 6.6 s on one).
    assert took < 15, f"stopped {took:.1f}s after SIGTERM"
    rounds = out.splitlines()
    assert rounds[0] == f"probe round of terminated: {len(GOLDEN)} request(s), 0 failed", out
    cut = re.fullmatch(
        r"probe round of terminated: (\d) request\(s\), 0 failed; stopped, (\d) not sent", rounds[1]
    )
    assert cut is not None and len(rounds) == 2, out
    sent, unsent = int(cut[1]), int(cut[2])
    assert sent >= 1 and sent + unsent == len(GOLDEN)
    # Nothing was sent after the signal but the requests in flight, and the prober's span of
    # every request the app answered reached the agent, which scored each one.
    assert app.state.requests - received == len(GOLDEN) + sent
    expected = len(GOLDEN) + sent
    scrape = agent.wait_for(lambda s: items_scored(s, "terminated") >= expected, timeout=30)
    assert items_scored(scrape, "terminated") == expected, agent.log()
    time.sleep(ASSEMBLY_WAIT + 1)  # a probe span without the app's spans would be trace_missing by now
    scrape = agent.wait_for(lambda s: True)
    assert items_scored(scrape, "terminated") == expected
    assert scrape.total("ragpulse_probe_failures_total", probe_set="terminated") == 0


PROBE_TOKEN = "probe-token-4e1d7a9b"
API_KEY = "planted-app-key-2c6f"


def test_endpoint_credentials_reach_the_app_and_are_shown_nowhere(
    agent: AgentProcess, app: ProbeApp, golden: Path, tmp_path: Path
) -> None:
    """Headers of probe endpoints can carry credentials: `validate-config` shows them as ***,
    the prober's DEBUG log and its error lines never show them, and the app gets them."""

    def settings_file(name: str, token: str) -> Path:
        endpoint = {"name": "ask", "url": app.url, "answer_path": "data.answer",
                    "headers": {"Authorization": f"Bearer {token}", "x-api-key": API_KEY,
                                "x-tenant": "capitals"}}  # fmt: skip
        probes = {"endpoints": [endpoint], "set_name": "guarded",
                  "otlp_endpoint": f"http://127.0.0.1:{agent.otlp_port}"}  # fmt: skip
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"probes": probes}))
        return path

    def ragpulse(*args: str) -> subprocess.CompletedProcess[str]:
        env = {"PATH": "/usr/bin:/bin", "RAGPULSE_LOG_LEVEL": "DEBUG"}
        return subprocess.run([sys.executable, "-m", "agent", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip

    def assert_hidden(done: subprocess.CompletedProcess[str], *secrets: str) -> None:
        for secret in secrets:
            assert secret not in done.stdout + done.stderr, f"{secret!r} shown by {done.args[3:]}"

    config = settings_file("probes", PROBE_TOKEN)
    shown = ragpulse("validate-config", "--config", str(config))
    assert shown.returncode == 0, shown.stderr
    assert_hidden(shown, PROBE_TOKEN, API_KEY)
    endpoint = yaml.safe_load(shown.stdout)["probes"]["endpoints"][0]
    assert endpoint["headers"] == {"Authorization": "***", "x-api-key": "***", "x-tenant": "capitals"}
    listed = ragpulse("validate-config", "--list", "--config", str(config))
    assert listed.returncode == 0 and "probes_endpoints" in listed.stdout, listed.stderr
    assert_hidden(listed, PROBE_TOKEN, API_KEY)

    app.require_token(PROBE_TOKEN)
    try:
        sent = len(app.state.authorizations)
        done = ragpulse("probe", "--config", str(config), "--golden", str(golden))
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"probe round of guarded: {len(GOLDEN)} request(s), 0 failed" in done.stdout
        assert app.state.authorizations[sent:] == [f"Bearer {PROBE_TOKEN}"] * len(GOLDEN)
        assert_hidden(done, PROBE_TOKEN, API_KEY)
        # A token the app refuses: each request's error line names the status, not the token.
        refused = ragpulse(
            "probe", "--config", str(settings_file("revoked", "revoked-token-8d2f")), "--golden", str(golden)
        )
    finally:
        app.require_token(None)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert refused.stderr.count(": HTTP 401") == len(GOLDEN), refused.stderr
    assert_hidden(refused, "revoked-token-8d2f", API_KEY)


def test_a_judge_that_shifts_trips_the_canary_while_probe_scores_stay_put(
    agent: AgentProcess,
    app: ProbeApp,
    golden: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with FakeLLMServer() as server:
        canary = Canary(tmp_path, server, monkeypatch, capsys)
        first = canary.run()
        assert first.returncode == 0, first.stdout + first.stderr
        assert "faithfulness: mean" in first.stdout and "judge moved" not in first.stdout
        server.lenient = True  # the judge changed behind the same model name
        second = canary.run()
    assert second.returncode == 3, second.stdout + second.stderr
    assert "judge moved: faithfulness" in second.stdout
    assert "may be the judge's, not the app's" in second.stdout
    state = json.loads((tmp_path / "canary-state.json").read_text())
    assert state["last"]["moved"] and state["last"]["possibly_judge_drift_since"] == state["accepted_at"]
    # The app did not change: its probe scores are where they were.
    before = probe_sums(agent.wait_for(lambda s: True))
    done = probe(agent, app, golden)
    assert done.returncode == 0, done.stdout + done.stderr
    scrape = agent.wait_for(lambda s: items_scored(s) >= before_items(before) + len(GOLDEN), timeout=30)
    expected = offline_scores(regressed=False)
    for metric in ("context_recall", "answer_correctness", f"recall_at_{K}"):
        count, total = probe_sums(scrape)[metric]
        assert count - before[metric][0] == len(GOLDEN)
        assert total - before[metric][1] == pytest.approx(sum(expected[metric]), abs=1e-9), metric


def before_items(sums: dict[str, tuple[float, float]]) -> float:
    return sums["context_recall"][0]
