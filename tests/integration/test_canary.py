"""`ragpulse canary` handing its gauges to Prometheus: pushed to a Pushgateway after each run
(`--pushgateway`, the CronJob way), or served while it runs every canary_interval_seconds
(`--schedule --metrics-listen`, the long-running way). The judge is the test LLM server, told
to turn lenient between runs; the Pushgateway is a real HTTP server recording what is pushed. The
single runs are made in-process (agent.cli.main), the scheduled canary as a subprocess."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import Finished, ragpulse_in_process
from tests.support.llm_server import FakeLLMServer
from tests.support.net import Scrape, free_port, scrape
from tests.support.probing import CANARY_ITEMS, Canary, canary_command
from tests.support.pushgateway import Pushgateway
from tests.support.repo import ROOT

pytestmark = pytest.mark.integration

JOB_PATH = "/metrics/job/ragpulse-canary"


def agreement(scrape: Scrape, statistic: str) -> float | None:
    return scrape.value("ragpulse_canary_agreement", metric="faithfulness", statistic=statistic)


def test_each_complete_run_pushes_the_canary_gauges_to_the_pushgateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeLLMServer() as server, Pushgateway() as gateway:
        canary = Canary(tmp_path, server, monkeypatch, capsys)  # in-process: five runs
        started = time.time()
        first = canary.run("--pushgateway", gateway.url)
        assert first.returncode == 0, first.stdout + first.stderr
        server.lenient = True  # the judge changed behind the same model name
        second = canary.run("--pushgateway", gateway.url)
        assert second.returncode == 3, second.stdout + second.stderr
        moved_state = json.loads((tmp_path / "canary-state.json").read_text())
        # After review, the operator accepts the new judge: the alert's gauge goes back to 0.
        third = canary.run("--pushgateway", gateway.url, "--accept")
        assert third.returncode == 0, third.stdout + third.stderr
        finished = time.time()
        calls = server.stats.calls
        # A judge failing on labelled items gives no measure of the judge: the run exits 1 and
        # leaves the reference, and the gateway's last complete run (whose timestamp the stale
        # alert watches), as they were.
        state = (tmp_path / "canary-state.json").read_text()
        server.fail_always("400")  # a permanent judge error: not retried
        failed = canary.run("--pushgateway", gateway.url)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert f"the judge failed on {len(CANARY_ITEMS)} of {len(CANARY_ITEMS)} labelled item(s)" in failed.stdout
    assert "canary faithfulness: mean" not in failed.stdout
    assert (tmp_path / "canary-state.json").read_text() == state
    pushes = gateway.received()
    assert [(p.method, p.path) for p in pushes] == [("PUT", JOB_PATH)] * 3
    assert all(p.content_type.startswith("text/plain") for p in pushes)
    healthy, moved, accepted = (p.scrape() for p in pushes)

    assert healthy.value("ragpulse_canary_judge_moved") == 0
    assert agreement(healthy, "auroc") == 1.0 and agreement(healthy, "balanced_accuracy") == 1.0
    assert healthy.value("ragpulse_canary_mean_shift", metric="faithfulness") == 0.0

    assert moved.value("ragpulse_canary_judge_moved") == 1
    assert agreement(moved, "auroc") == 0.5 and agreement(moved, "balanced_accuracy") == 0.5
    runs = moved_state["last"]["runs"]["faithfulness"], moved_state["accepted"]["faithfulness"]
    assert runs[0]["mean"] == 1.0 and runs[1]["mean"] == 0.5
    assert moved.value("ragpulse_canary_mean_shift", metric="faithfulness") == pytest.approx(0.5)

    assert accepted.value("ragpulse_canary_judge_moved") == 0
    assert accepted.value("ragpulse_canary_mean_shift", metric="faithfulness") == pytest.approx(0.5)
    times = [p.value("ragpulse_canary_last_run_timestamp_seconds") for p in (healthy, moved, accepted)]
    assert started <= times[0] < times[1] < times[2] <= finished
    # The judge's own counters go with them: every item judged afresh on every run (no cache).
    judged = [p.total("ragpulse_judge_requests_total") for p in (healthy, moved, accepted)]
    assert all(n >= len(CANARY_ITEMS) for n in judged) and sum(judged) == calls


def wait_scrape(url: str, predicate: Callable[[Scrape], bool], timeout: float) -> Scrape:
    deadline = time.monotonic() + timeout
    last = Scrape()
    while time.monotonic() < deadline:
        try:
            last = scrape(url)
        except OSError:  # not listening yet
            pass
        else:
            if predicate(last):
                return last
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout}s; last scrape: {last.samples}")


def test_schedule_runs_every_interval_and_serves_and_pushes_the_gauges(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    with FakeLLMServer() as server, Pushgateway() as gateway:
        argv, env = canary_command(
            tmp_path, server, "--schedule", "--metrics-listen", f"127.0.0.1:{port}",
            "--pushgateway", gateway.url, env={"RAGPULSE_CANARY_INTERVAL_SECONDS": "1"},
        )  # fmt: skip
        process = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            first = wait_scrape(
                url, lambda s: s.value("ragpulse_canary_last_run_timestamp_seconds") is not None, 60
            )
            assert first.value("ragpulse_canary_judge_moved") == 0
            assert agreement(first, "auroc") == 1.0
            # The next runs come by themselves, one per interval.
            again = wait_scrape(
                url,
                lambda s: (
                    (s.value("ragpulse_canary_last_run_timestamp_seconds") or 0)
                    > (first.value("ragpulse_canary_last_run_timestamp_seconds") or 0)
                ),
                30,
            )
            assert again.value("ragpulse_canary_judge_moved") == 0
            server.lenient = True
            # A run under way may have been judged half before, half after: wait for a whole one.
            moved = wait_scrape(
                url,
                lambda s: s.value("ragpulse_canary_judge_moved") == 1 and agreement(s, "auroc") == 0.5,
                30,
            )
            assert moved.value("ragpulse_canary_mean_shift", metric="faithfulness") == pytest.approx(0.5)
            assert process.poll() is None, "a moved judge does not end the scheduled canary"
        finally:
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=30)
    pushes = gateway.received()
    assert len(pushes) >= 3 and {(p.method, p.path) for p in pushes} == {("PUT", JOB_PATH)}
    assert pushes[0].scrape().value("ragpulse_canary_judge_moved") == 0
    assert pushes[-1].scrape().value("ragpulse_canary_judge_moved") == 1
    # One push per run printed (a run the signal cut between its print and its push aside).
    assert out.count("canary faithfulness: mean") in (len(pushes), len(pushes) + 1), out + err
    assert "judge moved: faithfulness" in out


def test_sigterm_ends_the_scheduled_canary_with_a_run_under_way_abandoned(tmp_path: Path) -> None:
    """What Kubernetes and docker send: the scheduled canary stops at once, exit 0; the run the
    judge was still answering is abandoned like an incomplete one (nothing saved or pushed), and
    the complete runs before it stay as they were."""
    with FakeLLMServer() as server, Pushgateway() as gateway:
        argv, env = canary_command(
            tmp_path, server, "--schedule", "--metrics-listen", f"127.0.0.1:{free_port()}",
            "--pushgateway", gateway.url, env={"RAGPULSE_CANARY_INTERVAL_SECONDS": "1"},
        )  # fmt: skip
        process = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            deadline = time.monotonic() + 60
            while not gateway.received():  # a complete run
                assert process.poll() is None and time.monotonic() < deadline, process.communicate()
                time.sleep(0.05)
            server.fail_always("timeout")  # from now on the judge hangs: a run stays under way
            while server.stats.faults["timeout"] == 0:
                assert process.poll() is None and time.monotonic() < deadline, process.communicate()
                time.sleep(0.02)
            state = (tmp_path / "canary-state.json").read_text()
            pushed = gateway.received()
            process.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            out, err = process.communicate(timeout=20)
            took = time.monotonic() - signalled
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 0, out + err
    # A stop that waited for the hung call would take the judge's timeout (30 s, the call just
    # began); one that abandons it takes a few seconds, on a loaded machine too.
    assert took < 15, f"stopped {took:.1f}s after SIGTERM"
    assert out.rstrip().endswith(
        "canary stopped: the run under way was abandoned; nothing compared or saved"
    ), out
    assert (tmp_path / "canary-state.json").read_text() == state
    assert gateway.received() == pushed and pushed[-1].scrape().value("ragpulse_canary_judge_moved") == 0
    assert out.count("canary faithfulness: mean") == len(pushed), out + err


def test_a_changed_frozen_set_is_refused_not_blamed_on_the_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The state file keeps a fingerprint of the items and labels the accepted run was measured
    on: after an edit the canary judges nothing and says how to accept the new set (exit 4),
    instead of reporting that the judge moved (exit 3)."""
    state_file = tmp_path / "canary-state.json"
    with FakeLLMServer() as server:
        argv, env = canary_command(tmp_path, server)  # the files are edited below: written once

        def canary(*extra: str) -> Finished:  # in-process: six runs
            return ragpulse_in_process([*argv[3:], *extra], env, monkeypatch, capsys)

        first = canary()
        assert first.returncode == 0, first.stdout + first.stderr
        assert f"canary: first run, accepted as the reference ({len(CANARY_ITEMS)} items" in first.stdout
        assert f"state in {state_file}" in first.stdout
        accepted = json.loads(state_file.read_text())["accepted_fingerprint"]
        assert len(accepted) == 16

        # The same set in another order is the same set.
        items = tmp_path / "canary.jsonl"
        items.write_text("".join(reversed(items.read_text().splitlines(keepends=True))))
        again = canary()
        assert again.returncode == 0, again.stdout + again.stderr
        assert "accepted as the reference" not in again.stdout

        # One response edited: a different set, refused before any judge call.
        rows = [json.loads(line) for line in items.read_text().splitlines()]
        rows[0]["response"] = rows[0]["response"] + " It is also open on Sundays."
        items.write_text("".join(json.dumps(row) + "\n" for row in rows))
        calls = server.stats.calls
        changed = canary()
        assert changed.returncode == 4, changed.stdout + changed.stderr
        assert server.stats.calls == calls
        assert "the frozen set changed" in changed.stdout and "accept it with --accept" in changed.stdout
        assert "judge moved" not in changed.stdout
        assert json.loads(state_file.read_text())["accepted_fingerprint"] == accepted

        # A changed label is a changed set too.
        labels = tmp_path / "canary-labels.jsonl"
        label_rows = [json.loads(line) for line in labels.read_text().splitlines()]
        label_rows[0]["label"] = 1 - label_rows[0]["label"]
        labels.write_text("".join(json.dumps(row) + "\n" for row in label_rows))
        changed = canary()
        assert changed.returncode == 4, changed.stdout + changed.stderr

        accept = canary("--accept")
        assert accept.returncode == 0, accept.stdout + accept.stderr
        assert (
            "canary: accepted as the reference" in accept.stdout and f"state in {state_file}" in accept.stdout
        )
        new = json.loads(state_file.read_text())["accepted_fingerprint"]
        assert new != accepted
        after = canary()
        assert after.returncode == 0, after.stdout + after.stderr


def test_a_canary_whose_judge_cannot_work_stops_before_judging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeLLMServer() as server:
        server.fail_always("401")
        argv, env = canary_command(tmp_path, server, env={"RAGPULSE_JUDGE_SELF_CHECK": "true"})
        run = ragpulse_in_process(argv[3:], env, monkeypatch, capsys)
        calls = server.stats.calls
    assert run.returncode == 5, run.stdout + run.stderr
    assert calls == 1
    assert "Incorrect API key provided" in run.stdout and "RAGPULSE_JUDGE_API_KEY" in run.stdout
    assert not (tmp_path / "canary-state.json").exists()


def test_schedule_with_its_metrics_port_taken_is_one_line_naming_the_setting(tmp_path: Path) -> None:
    """The scheduled canary serves its gauges on metrics_listen: a port another process holds is
    the operator's mistake, told in one line with the setting and its variable (exit 2)."""
    with socket.socket() as holder, FakeLLMServer() as server:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        argv, env = canary_command(tmp_path, server, "--schedule", "--metrics-listen", f"127.0.0.1:{port}")
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        f"ragpulse canary: cannot listen on 127.0.0.1:{port} (metrics_listen, RAGPULSE_METRICS_LISTEN): "
        "Address already in use; another process listens there; choose another HOST:PORT with "
        "RAGPULSE_METRICS_LISTEN or --set metrics_listen=HOST:PORT"
    ], done.stderr
