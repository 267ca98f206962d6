"""The commands that README.md and docs/ tell a user to type run as written, from a clone.

An explicit list: each command that needs no external service (no Kafka, no Redis, no API key,
no Docker, no cluster, no network) and ends within seconds, with the file of the docs that shows
it. The test first finds the command verbatim in that file, so that a reworded command fails here
until the list follows; then runs it with bash, `ragpulse` being the console script of the venv
the tests run in (`source .venv/bin/activate` of the README), in an empty working directory
holding only the input files the docs assume the user has (a labelled set, a canary set), and
checks its exit status and what it promises. The commands that start the agent (SERVED) run
until it is ready, then stop on SIGTERM.

Every `ragpulse ...` line of a fenced block of README.md and docs/*.md is either run here or
named in LEFT_OUT with the reason (your app, a judge's key, a minute-long demo, the agent's
results file of your traffic) and where what it does is tested instead; a test checks that no
documented command is in neither. Not read as commands: synopses (`[--out DIR]`), elisions
(`...`), output lines and diagrams. Also left out, being no `ragpulse` lines: `./scripts/test`,
`pip install ...` (network; the instrument wheel is tests/integration/test_instrument_distribution.py),
`docker`, `kubectl` and `amtool` commands (the files they use are checked in
tests/unit/test_deploy_*.py), and benchmarks.
"""

from __future__ import annotations

import json
import os
import re
import signal
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
# A candidate build's answers, as the README's gate expects them: the references, said again.
ANSWERS = "\n".join(
    json.dumps({**row, "response": row["reference"]}) for row in map(json.loads, LABELLED_SET.splitlines())
)


def _calibration_set() -> tuple[str, str]:
    """Forty items of which every third invents its answer, and a human's faithfulness label of
    each (docs/trust.md's labels format): enough for `ragpulse calibrate` to fit."""
    from tests.support.golden import golden_items

    items = golden_items(40, invented=set(range(0, 40, 3)))
    labels = [
        {"id": item["id"], "metric": "faithfulness", "label": int(i % 3 != 0)} for i, item in enumerate(items)
    ]
    return "".join(json.dumps(item) + "\n" for item in items), "".join(
        json.dumps(row) + "\n" for row in labels
    )


@dataclass(frozen=True)
class Documented:
    doc: str  # where the user reads it, relative to the repository
    command: str  # exactly as written there
    files: dict[str, str] = field(default_factory=dict)  # what the docs assume the user has
    check: Callable[[subprocess.CompletedProcess[str], Path], None] = lambda result, cwd: None
    # What the docs have the user do first in that directory (earlier documented commands, a
    # hand-filled label queue), given the directory.
    prepare: Callable[[Path], None] = lambda cwd: None


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


def _every_setting(result: subprocess.CompletedProcess[str], cwd: Path) -> None:
    import yaml

    from agent.config import setting_names

    assert result.stdout.startswith(f"# every setting ({len(list(setting_names()))}); 0 settings set")
    assert yaml.safe_load(result.stdout)["kafka"]["topic"] == "otlp_spans"


def _gates_passed(*metrics: str) -> Callable[[subprocess.CompletedProcess[str], Path], None]:
    def check(result: subprocess.CompletedProcess[str], cwd: Path) -> None:
        passed = re.findall(r"^gate passed: (\w+): ", result.stdout, re.M)
        assert passed == list(metrics), result.stdout

    return check


def _added_to_golden(result: subprocess.CompletedProcess[str], cwd: Path) -> None:
    golden = [json.loads(line) for line in (cwd / "golden.jsonl").read_text().splitlines()]
    assert [item["id"] for item in golden] == ["refund", "canada"] and all(
        item["reference"] for item in golden
    )


def _calibrated(result: subprocess.CompletedProcess[str], cwd: Path) -> None:
    assert re.search(r"^faithfulness +40 +\d+ ", result.stdout, re.M), result.stdout
    assert {p.name for p in (cwd / "cal").iterdir()} >= {"calibration.json", "agreement.json", "report.html"}


def _scored(cwd: Path) -> None:
    """docs/trust.md: `ragpulse eval data.jsonl --out run/` first."""
    ran = subprocess.run(["bash", "-c", "ragpulse eval data.jsonl --out run/"], cwd=cwd, env=_environment(),
                         capture_output=True, text=True, timeout=180)  # fmt: skip
    assert ran.returncode == 0, ran.stderr


def _queue_filled(cwd: Path) -> None:
    """docs/trust.md: the judge scores the set, label-queue draws it, a person fills in the labels."""
    _scored(cwd)
    drawn = subprocess.run(
        ["bash", "-c", "ragpulse label-queue run/results.jsonl --fraction 1 --inputs data.jsonl "
                       "--out queue.jsonl"],
        cwd=cwd, env=_environment(), capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert drawn.returncode == 0, drawn.stderr
    labels = {
        json.loads(line)["id"]: json.loads(line)["label"]
        for line in (cwd / "labels.jsonl").read_text().splitlines()
    }
    filled = []
    for line in (cwd / "queue.jsonl").read_text().splitlines():
        row = json.loads(line)
        row["labels"]["faithfulness"] = labels[row["interaction_id"]]
        filled.append(json.dumps(row) + "\n")
    (cwd / "queue-filled.jsonl").write_text("".join(filled))


COMMANDS = [
    Documented("README.md", "ragpulse validate-config --list", check=_listed_settings),
    Documented("README.md", "ragpulse validate-config --all", check=_every_setting),
    Documented(
        "README.md",
        "ragpulse eval answers.jsonl --fail-under faithfulness=0.8 --fail-under answer_correctness=0.7",
        files={"answers.jsonl": ANSWERS},
        check=_gates_passed("faithfulness", "answer_correctness"),
    ),
    Documented(
        "README.md",
        "ragpulse capture --add-to golden.jsonl captured.jsonl",
        files={"captured.jsonl": LABELLED_SET},
        check=_added_to_golden,
    ),
    Documented(
        "docs/eval.md",
        "ragpulse capture --add-to golden.jsonl labelled.jsonl",
        files={"labelled.jsonl": LABELLED_SET},
        check=_added_to_golden,
    ),
    Documented(
        "docs/eval.md",
        "ragpulse eval data.jsonl --fail-under faithfulness=0.8 --fail-under context_precision=0.6",
        files={"data.jsonl": LABELLED_SET},
        check=_gate_passed,
    ),
    Documented(
        "docs/eval.md",
        "ragpulse eval golden.jsonl --fail-under-ci faithfulness=0.8",
        files={"golden.jsonl": LABELLED_SET},
        check=_gates_passed("faithfulness"),
    ),
    Documented(
        "docs/eval.md",
        "ragpulse eval a.jsonl b.jsonl --compare --fail-if-worse faithfulness",
        files={"a.jsonl": LABELLED_SET, "b.jsonl": LABELLED_SET},
        check=_compared,
    ),
    Documented(
        "docs/eval.md",
        "ragpulse eval before.jsonl after.jsonl --compare --fail-if-worse faithfulness --fail-if-worse "
        "context_precision",
        files={"before.jsonl": LABELLED_SET, "after.jsonl": LABELLED_SET},
        check=_compared,
    ),
    Documented(
        "docs/testset.md",
        "ragpulse eval golden-with-your-retrievals.jsonl --out report/",
        files={"golden-with-your-retrievals.jsonl": LABELLED_SET},
        check=_eval_wrote("report"),
    ),
    Documented(
        "docs/trust.md",
        "ragpulse calibrate labels.jsonl --scores run/results.jsonl --judge openai/gpt-4o-mini --out cal/",
        files=dict(zip(("data.jsonl", "labels.jsonl"), _calibration_set(), strict=True)),
        prepare=_scored,
        check=_calibrated,
    ),
    Documented(
        "docs/trust.md",
        "ragpulse calibrate queue-filled.jsonl --out cal/",
        files=dict(zip(("data.jsonl", "labels.jsonl"), _calibration_set(), strict=True)),
        prepare=_queue_filled,
        check=_calibrated,
    ),
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
    documented.prepare(tmp_path)
    result = subprocess.run(
        ["bash", "-c", documented.command], cwd=tmp_path, env=_environment(),
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, f"{documented.command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr, result.stderr
    documented.check(result, tmp_path)


# Commands that start the agent, run as written with their listeners moved to free ports by the
# environment (tests never bind the defaults), until /readyz says ready; then SIGTERM, exit 0.
SERVED = [
    ("README.md", "ragpulse run"),
    (
        "README.md",
        "ragpulse run --live --set results_file=ragpulse-results.jsonl --set results_include_text=true",
    ),
    ("README.md", "RAGPULSE_DOCUMENTS_KEY=source ragpulse run"),
    (
        "README.md",
        "RAGPULSE_METRICS=context_precision,context_relevancy,faithfulness,answer_relevancy ragpulse run",
    ),
]
COLLECTOR_COMMAND = "ragpulse run --otlp-listen 127.0.0.1:14318 --set otlp_grpc_listen=127.0.0.1:14317"
# README, "From a bad answer to a test", steps 1 to 4 (step 5 asks your app, step 6 is in COMMANDS).
BAD_ANSWER_STEPS = (
    "export RAGPULSE_RESULTS_FILE=results.jsonl RAGPULSE_RESULTS_INCLUDE_TEXT=true",
    "ragpulse capture --below faithfulness=0.5 --out captured.jsonl",
    "ragpulse label-queue captured.jsonl --fraction 1 --inputs captured.jsonl --out queue.jsonl",
    "ragpulse capture --add-to golden.jsonl captured.jsonl",
)
# Documented commands that need what a test cannot have, each with where what it does is tested.
LEFT_OUT = {
    "./scripts/run demo --duration 60": "a minute; `ragpulse demo` is tests/integration/test_demo.py",
    "ragpulse probe --golden golden.jsonl --endpoint http://my-rag-app:8000/ask": "your app",
    "ragpulse probe --golden golden.jsonl --endpoint http://my-app/ask": "your app",
    "ragpulse probe --config probes.yaml": "your app, named in probes.yaml",
    "RAGPULSE_JUDGE_MODEL=openai/test RAGPULSE_JUDGE_API_BASE=http://127.0.0.1:8001/v1 "
    "RAGPULSE_JUDGE_API_KEY=x ragpulse run": "a judge on port 8001",
}
_COMMAND = re.compile(r"^(?:[A-Z][A-Z0-9_]*=\S* +)*(?:ragpulse|\./scripts/run) ")


def fenced_commands(text: str) -> list[str]:
    """The `ragpulse ...` (and `./scripts/run ...`) command lines of the fenced blocks of a Markdown
    text, as a user would type them: continuations joined, a `$ ` prompt and a trailing `# ...`
    comment left out. Not commands: output lines (`ragpulse eval: ...`), diagrams (`──`),
    synopses and elisions (`[--out DIR]`, `...`)."""
    found = []
    for block in re.findall(r"^```[\w-]*\n(.*?)^```", text, re.S | re.M):
        for line in re.sub(r"\s*\\\n\s*", " ", block).splitlines():
            line = re.split(r"\s+#\s", line.strip().removeprefix("$ "), maxsplit=1)[0].strip()
            if not _COMMAND.match(line) or re.match(r"^\S+ [\w-]+(:|'s)", line):
                continue
            if "──" in line or "[" in line or "..." in line:
                continue
            found.append(line)
    return found


def test_every_fenced_command_of_the_docs_is_run_here_or_left_out_with_a_reason() -> None:
    tested = {c.command for c in COMMANDS} | {command for _, command in SERVED} | {COLLECTOR_COMMAND}
    tested |= set(BAD_ANSWER_STEPS)
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    untested = [
        f"{doc.relative_to(ROOT)}: {command}"
        for doc in docs
        for command in fenced_commands(doc.read_text())
        if command not in tested and command not in LEFT_OUT
    ]
    assert untested == [], "documented commands neither run by this module nor in LEFT_OUT"
    shown = {command for doc in docs for command in fenced_commands(doc.read_text())}
    assert set(LEFT_OUT) <= shown, "LEFT_OUT names commands the docs no longer show"


def test_the_command_finder_reads_blocks_as_a_user_does() -> None:
    text = (
        "```sh\n$ ragpulse eval a.jsonl --out run/   # a comment\nRAGPULSE_X=1 \\\n  ragpulse run\n"
        "ragpulse eval: gate failed: ...\nragpulse eval data.jsonl [--out DIR]\n```\n"
        "Not in a block: ragpulse run --live\n```\nragpulse probe ──HTTP──▶ app\n./scripts/run demo\n```\n"
    )
    assert fenced_commands(text) == [
        "ragpulse eval a.jsonl --out run/",
        "RAGPULSE_X=1 ragpulse run",
        "./scripts/run demo",
    ]
    assert fenced_commands("```\n./scripts/run demo --duration 5\n```\n") == [
        "./scripts/run demo --duration 5"
    ]


def _serve(
    command: str,
    tmp_path: Path,
    ports: tuple[int, int] | None = None,
    while_ready: Callable[[int], None] = lambda otlp_port: None,
) -> tuple[str, int, int]:
    """Run `command` with bash until /readyz answers, then `while_ready(OTLP/HTTP port)`, then
    SIGTERM; returns its output, exit status and OTLP/HTTP port. Its listeners are on free ports:
    set by the environment, or the `ports` (OTLP/HTTP, OTLP/gRPC) the command's own flags name."""
    http, grpc = ports or (free_port(), free_port())
    metrics = free_port()
    environment = {**_environment(), "RAGPULSE_OTLP_LISTEN": f"127.0.0.1:{http}",
                   "RAGPULSE_OTLP_GRPC_LISTEN": f"127.0.0.1:{grpc}",
                   "RAGPULSE_METRICS_LISTEN": f"127.0.0.1:{metrics}"}  # fmt: skip
    # Its own process group: the signal reaches the agent whether or not bash exec'd it.
    process = subprocess.Popen(
        ["bash", "-c", command], cwd=tmp_path, env=environment, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
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
        while_ready(http)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    return output, process.returncode, http


@pytest.mark.parametrize(("doc", "command"), SERVED, ids=[command for _, command in SERVED])
def test_documented_agent_command_starts_and_stops_cleanly(doc: str, command: str, tmp_path: Path) -> None:
    assert command in _documented_text(doc), f"{doc} no longer shows `{command}`: update SERVED"
    output, status, http = _serve(command, tmp_path)
    assert status == 0, output
    assert f"OTLP/HTTP receiver on http://127.0.0.1:{http}/v1/traces" in output, output
    assert "Traceback" not in output and "ERROR" not in output, output


def test_running_beside_a_collector_on_other_ports_as_the_readme_says(tmp_path: Path) -> None:
    """README, "Beside an OpenTelemetry Collector": the agent on ports other than 4317/4318. The
    ports written there are replaced by free ones (tests never bind fixed ports); the flags are
    the README's."""
    assert COLLECTOR_COMMAND in _documented_text("README.md")
    http, grpc = free_port(), free_port()
    command = COLLECTOR_COMMAND.replace("14318", str(http)).replace("14317", str(grpc))
    output, status, _ = _serve(command, tmp_path, ports=(http, grpc))
    assert status == 0, output
    assert f"OTLP/HTTP receiver on http://127.0.0.1:{http}/v1/traces" in output
    assert f"OTLP/gRPC receiver on 127.0.0.1:{grpc}" in output


def test_from_a_bad_answer_to_a_test_as_the_readme_says(tmp_path: Path) -> None:
    """The agent keeps its results in results.jsonl (step 1: the README's variables, in the
    directory the user works in) while a good and a bad answer arrive as real OTLP spans; then
    steps 2 to 4 as written: capture the bad one, queue it for labelling, write its reference,
    merge it into the golden set."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tests.support.spans import PARIS_RESPONSE, USEFUL, openinference_single_span

    readme = _documented_text("README.md")
    for step in BAD_ANSWER_STEPS:
        assert step in readme, f"README.md no longer shows `{step}`: update BAD_ANSWER_STEPS"
    export, capture, label_queue, add_to = BAD_ANSWER_STEPS

    def traffic(otlp_port: int) -> None:
        memory = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create({"service.name": "checkout"}))
        provider.add_span_processor(SimpleSpanProcessor(memory))
        tracer = provider.get_tracer("tests")
        chunks = [USEFUL.format(k) for k in range(3)]
        openinference_single_span(tracer, query="Capital of France?", chunks=chunks, response=PARIS_RESPONSE)
        openinference_single_span(tracer, query="Capital of France, again?", chunks=chunks,
                                  response="The capital of France is Lyon, on the Loire.")  # fmt: skip
        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{otlp_port}/v1/traces")
        assert exporter.export(list(memory.get_finished_spans())) is SpanExportResult.SUCCESS
        exporter.shutdown()
        deadline = time.monotonic() + 60
        results = tmp_path / "results.jsonl"
        while not (results.exists() and len(results.read_text().splitlines()) >= 2):
            assert time.monotonic() < deadline, "the agent wrote no results"
            time.sleep(0.2)

    output, status, _ = _serve(f"{export}; exec ragpulse run", tmp_path, while_ready=traffic)
    assert status == 0, output

    def step(command: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["bash", "-c", f"{export}; {command}"], cwd=tmp_path, env=_environment(),
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0 and "Traceback" not in done.stderr, f"{command}\n{done.stderr}"
        return done

    step(capture)
    captured = [json.loads(line) for line in (tmp_path / "captured.jsonl").read_text().splitlines()]
    assert [row["question"] for row in captured] == ["Capital of France, again?"], captured
    step(label_queue)
    queued = [json.loads(line) for line in (tmp_path / "queue.jsonl").read_text().splitlines()]
    assert [row["interaction_id"] for row in queued] == [captured[0]["id"]]
    # A person writes the reference.
    (tmp_path / "captured.jsonl").write_text(json.dumps({**captured[0], "reference": "Paris."}) + "\n")
    step(add_to)
    golden = [json.loads(line) for line in (tmp_path / "golden.jsonl").read_text().splitlines()]
    assert [(row["question"], row["reference"]) for row in golden] == [
        ("Capital of France, again?", "Paris.")
    ]
