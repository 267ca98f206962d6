"""The commands that README.md and docs/ tell a user to type run as written, from a clone.

An explicit list: each command that needs no external service (no Kafka, no Redis, no API key,
no Docker, no cluster, no network) and ends within seconds, with the file of the docs that shows
it. The test first finds the command verbatim in that file, so that a reworded command fails here
until the list follows; then runs it with bash, `ragpulse` being the console script of the venv
the tests run in (`source .venv/bin/activate` of the README), in an empty working directory
holding only the input files the docs assume the user has (a labelled set, a canary set), and
checks its exit status and what it promises.

Left out, and why: `./scripts/run demo --duration 60` (a minute; `ragpulse demo` is
tests/integration/test_demo.py), `./scripts/test` (the suite itself), `pip install ...` (network;
the instrument wheel is tests/integration/test_instrument_distribution.py), `docker`, `kubectl`
and `amtool` commands (a Docker engine, a cluster, an Alertmanager; the files they use are
checked in tests/unit/test_deploy_*.py), benchmarks (minutes, and ../shared data), and commands
that need a judge's key or a Kafka broker.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.net import free_port, http_get
from tests.support.repo import ROOT

pytestmark = pytest.mark.integration

# `ragpulse eval` input in the documented format (docs/eval.md, "Input").
LABELLED_SET = "\n".join(
    json.dumps(row)
    for row in (
        {
            "id": "refund",
            "question": "How many days do customers have to return an item?",
            "contexts": [
                "Items can be returned within 30 days of delivery.",
                "Shipping is free over 50 EUR.",
            ],
            "response": "Customers can return an item within 30 days of delivery.",
            "reference": "Items can be returned within 30 days of delivery for a full refund.",
        },
        {
            "id": "canada",
            "question": "Do you ship to Canada?",
            "contexts": ["Orders ship to Canada within 5 to 7 business days."],
            "response": "Yes, orders ship to Canada within 5 to 7 business days.",
            "reference": "Yes, orders ship to Canada.",
        },
    )
)
WORSE_SET = LABELLED_SET.replace('within 30 days of delivery."', 'within 90 days, no questions asked."')


@dataclass(frozen=True)
class Documented:
    doc: str  # where the user reads it, relative to the repository
    command: str  # exactly as written there
    files: dict[str, str] = field(default_factory=dict)  # what the docs assume the user has
    check: Callable[[subprocess.CompletedProcess[str], Path], None] = lambda result, cwd: None


def _listed_settings(result: subprocess.CompletedProcess[str], cwd: Path) -> None:
    assert "RAGPULSE_OTLP_LISTEN" in result.stdout and "RAGPULSE_OTLP_GRPC_LISTEN" in result.stdout


def _eval_wrote(directory: str) -> Callable[[subprocess.CompletedProcess[str], Path], None]:
    def check(result: subprocess.CompletedProcess[str], cwd: Path) -> None:
        rows = [json.loads(line) for line in (cwd / directory / "results.jsonl").read_text().splitlines()]
        assert [row["id"] for row in rows] == ["refund", "canada"]
        assert rows[0]["faithfulness"] is not None
        summary = json.loads((cwd / directory / "summary.json").read_text())
        assert summary, summary
        assert (cwd / directory / "report.html").exists()

    return check


def _compared(result: subprocess.CompletedProcess[str], cwd: Path) -> None:
    written = {p.name for p in cwd.rglob("comparison.json")}
    assert written == {"comparison.json"}, sorted(str(p) for p in cwd.rglob("*"))


def _gate_passed(result: subprocess.CompletedProcess[str], cwd: Path) -> None:
    for metric, threshold in (("faithfulness", "0.800"), ("context_precision", "0.600")):
        assert re.search(rf"^gate passed: {metric}: mean \d\.\d{{3}} meets the threshold {threshold} ",
                         result.stdout, re.M), result.stdout  # fmt: skip


def _canary_line(result: subprocess.CompletedProcess[str], cwd: Path) -> None:
    assert re.search(
        r"^canary faithfulness: mean \d\.\d{3} \(shift [+-]\d\.\d{3}\), auroc", result.stdout, re.M
    ), result.stdout


def _config_checked(result: subprocess.CompletedProcess[str], cwd: Path) -> None:
    assert "kafka" in result.stdout.lower(), result.stdout


def _k8s_config() -> str:
    import yaml

    config_map = yaml.safe_load((ROOT / "deploy/k8s/configmap.yaml").read_text())
    return str(config_map["data"]["ragpulse.yaml"])


def _canary_files() -> dict[str, str]:
    probes = ROOT / "deploy/probes"
    return {
        "canary.jsonl": (probes / "canary-items.jsonl").read_text(),
        "labels.jsonl": (probes / "canary-labels.jsonl").read_text(),
    }


COMMANDS = [
    Documented("README.md", "ragpulse validate-config --list", check=_listed_settings),
    Documented(
        "README.md",
        "ragpulse validate-config --config ragpulse.yaml",
        files={"ragpulse.yaml": _k8s_config()},
        check=_config_checked,
    ),
    Documented("README.md", "ragpulse eval my-set.jsonl", files={"my-set.jsonl": LABELLED_SET}),
    Documented(
        "docs/trust.md",
        "ragpulse eval data.jsonl --out run/",
        files={"data.jsonl": LABELLED_SET},
        check=_eval_wrote("run"),
    ),
    Documented(
        "docs/eval.md",
        "ragpulse eval a.jsonl b.jsonl --compare",
        files={"a.jsonl": LABELLED_SET, "b.jsonl": WORSE_SET},
        check=_compared,
    ),
    Documented(
        "docs/eval.md",
        "ragpulse eval golden.jsonl --fail-under faithfulness=0.8 --fail-under context_precision=0.6",
        files={"golden.jsonl": LABELLED_SET},
        check=_gate_passed,
    ),
    Documented(
        "docs/probes.md",
        "ragpulse canary --set canary_items_file=canary.jsonl --set canary_labels_file=labels.jsonl",
        files=_canary_files(),
        check=_canary_line,
    ),
]


def _documented_text(doc: str) -> str:
    return (ROOT / doc).read_text()


def _environment() -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("RAGPULSE_", "OPENAI_"))}
    # `source .venv/bin/activate`: the venv's console scripts first on PATH.
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment.get('PATH', '')}"
    environment["HTTP_PROXY"] = environment["HTTPS_PROXY"] = "http://127.0.0.1:9"  # no network
    environment["NO_PROXY"] = "127.0.0.1,localhost"
    return environment


@pytest.mark.parametrize("documented", COMMANDS, ids=[c.command for c in COMMANDS])
def test_documented_command_runs_as_written(documented: Documented, tmp_path: Path) -> None:
    assert documented.command in _documented_text(documented.doc), (
        f"{documented.doc} no longer shows `{documented.command}`: update this list"
    )
    for name, text in documented.files.items():
        (tmp_path / name).write_text(text)
    result = subprocess.run(
        ["bash", "-c", documented.command], cwd=tmp_path, env=_environment(),
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, f"{documented.command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr, result.stderr
    documented.check(result, tmp_path)


def test_running_beside_a_collector_on_other_ports_as_the_readme_says(tmp_path: Path) -> None:
    """README, "Beside an OpenTelemetry Collector": the agent on ports other than 4317/4318. The
    ports written there are replaced by free ones (tests never bind fixed ports); the flags are
    the README's."""
    command = "ragpulse run --otlp-listen 127.0.0.1:14318 --set otlp_grpc_listen=127.0.0.1:14317"
    assert command in _documented_text("README.md")
    http, grpc, metrics = free_port(), free_port(), free_port()
    command = command.replace("14318", str(http)).replace("14317", str(grpc))
    process = subprocess.Popen(
        ["bash", "-c", f"exec {command} --metrics-listen 127.0.0.1:{metrics}"],
        cwd=tmp_path, env=_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()[0]
            try:
                if http_get(f"http://127.0.0.1:{metrics}/readyz", timeout=1)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            raise AssertionError("the agent did not become ready")
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    assert f"OTLP/HTTP receiver on http://127.0.0.1:{http}/v1/traces" in output
    assert f"OTLP/gRPC receiver on 127.0.0.1:{grpc}" in output
