"""A real alerting stack on free ports: ragpulse agents, Prometheus, Alertmanager, a webhook.

Prometheus (Debian `prometheus`) scrapes the agents every second and evaluates the rules that
deploy/prometheus/generate_rules.py generates, with every `for:` shortened; Alertmanager (Debian
`prometheus-alertmanager`) routes with deploy/alertmanager/alertmanager.yml, its receivers pointed
at a webhook server in this process. Used by tests/integration/test_alerting.py and
benchmarks/alert_latency.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.agent_process import AgentProcess
from tests.support.net import free_port, http_get
from tests.support.repo import ROOT, load_module
from tests.support.spans import openinference_single_span

PROMETHEUS = "prometheus"
ALERTMANAGER = "prometheus-alertmanager"
# Debian package of each binary, named when a test skips because the binary is missing.
PACKAGES = {PROMETHEUS: "prometheus", ALERTMANAGER: "prometheus-alertmanager", "promtool": "prometheus"}


def missing_binaries(*names: str) -> str | None:
    """A skip reason naming the Debian packages to install, or None when all are on PATH."""
    missing = [name for name in names if shutil.which(name) is None]
    if not missing:
        return None
    packages = sorted({PACKAGES[name] for name in missing})
    return f"{', '.join(missing)} not found: apt-get install {' '.join(packages)} (CI's .ci/run does)"


CITIES = [
    ("Paris", "France"), ("Rome", "Italy"), ("Madrid", "Spain"),
    ("Berlin", "Germany"), ("Lisbon", "Portugal"), ("Vienna", "Austria"),
]  # fmt: skip


def interaction(i: int, *, good: bool) -> tuple[str, list[str], str]:
    """A query, its chunks, and a response that the chunks support (good) or do not (bad).

    The local lexical judge scores a good one 1.0 and a bad one 0.0 on faithfulness, context
    precision and answer relevancy; context relevancy is 2/3 for both (same chunks).
    """
    city, country = CITIES[i % len(CITIES)]
    query = f"What is the capital of {country}?"
    chunks = [
        f"{city} is the capital of {country}. It has a population of {1 + i % 5} million people.",
        f"{country} is a country in Europe with a long history.",
    ]
    if good:
        response = (
            f"The capital of {country} is {city}, which has a population of {1 + i % 5} million people."
        )
    else:
        response = f"The answer is Zanzibar, founded in {1700 + i} by admiral Blackbeard with {90 + i} ships."
    return query, chunks, response


def send(agent: AgentProcess, start: int, count: int, *, good: bool, service: str = "shop") -> None:
    """Record `count` interactions with the real SDK and export them over OTLP/HTTP."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests")
    for i in range(start, start + count):
        query, chunks, response = interaction(i, good=good)
        openinference_single_span(tracer, query=query, chunks=chunks, response=response, name="ask")
    exporter = OTLPSpanExporter(endpoint=agent.traces_url)
    try:
        assert exporter.export(memory.get_finished_spans()) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


@dataclass
class Webhook:
    """Alertmanager's webhook receiver: every alert it posts, with the time it arrived.

    Each Alertmanager receiver posts to its own path (/page, /ticket, ...), kept in the alert as
    "receiver", so tests see the routing too.
    """

    received: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                arrived = time.monotonic()
                with hook.lock:
                    for alert in json.loads(body).get("alerts", []):
                        hook.received.append((arrived, {**alert, "receiver": self.path.strip("/")}))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def first(self, alertname: str, **labels: str) -> tuple[float, dict[str, Any]] | None:
        with self.lock:
            for arrived, alert in self.received:
                got = alert["labels"]
                matches = got.get("alertname") == alertname and all(
                    got.get(k) == v for k, v in labels.items()
                )
                if matches and alert.get("status") == "firing":
                    return arrived, alert
        return None


class Server:
    """A Prometheus or Alertmanager process on a free port, with its log kept for failures."""

    def __init__(self, binary: str, args: Sequence[str], workdir: Path, ready_path: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"{Path(binary).name}.log"
        self._log = self.log_path.open("wb")
        listen = f"--web.listen-address=127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [binary, listen, *args], cwd=workdir, stdout=self._log, stderr=subprocess.STDOUT
        )
        self._ready_path = ready_path

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"{self.log_path.name} exited:\n{self.log()}")
            try:
                if http_get(self.url + self._ready_path, timeout=1)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"{self.log_path.name} not ready after {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._log.close()


def alertmanager_config(webhook_url: str) -> dict[str, Any]:
    """deploy/alertmanager/alertmanager.yml with each receiver posting to its webhook path, fast."""
    config = yaml.safe_load((ROOT / "deploy/alertmanager/alertmanager.yml").read_text())
    for receiver in config["receivers"]:
        receiver["webhook_configs"] = [{"url": f"{webhook_url}/{receiver['name']}", "send_resolved": False}]
    config["route"].update(group_wait="1s", group_interval="1s", repeat_interval="1h")
    return config


def prometheus_config(targets: Iterable[str], alertmanager: str, rules: Path) -> dict[str, Any]:
    """deploy/prometheus/prometheus.yml with 1s intervals, the test's targets and rule file."""
    config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    config["rule_files"] = [str(rules)]
    config["alerting"]["alertmanagers"] = [{"static_configs": [{"targets": [alertmanager]}]}]
    # The agents' job only: the compose stack's Pushgateway (the canary's gauges) is not run here.
    (job,) = [job for job in config["scrape_configs"] if job["job_name"] == "ragpulse"]
    job["static_configs"] = [{"targets": list(targets)}]
    config["scrape_configs"] = [job]
    return config


def scraping_prometheus(workdir: Path, targets: Iterable[str], rules: Path | None = None) -> Server:
    """A ready Prometheus with exemplar storage that scrapes `targets` every second and evaluates
    `rules` (none: no rules), without Alertmanager."""
    config = prometheus_config(targets, "127.0.0.1:9", rules or workdir / "none.yml")
    config["rule_files"] = [str(rules)] if rules else []
    config.pop("alerting", None)
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    server = Server(
        shutil.which(PROMETHEUS) or PROMETHEUS,
        ["--config.file=prometheus.yml", "--storage.tsdb.path=data", "--enable-feature=exemplar-storage"],
        workdir,
        "/-/ready",
    )
    try:
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server


def prometheus_api(server: Server, path: str, **params: object) -> Any:
    """The `data` of a Prometheus HTTP API answer (asserting success)."""
    query = urllib.parse.urlencode(params)
    with urllib.request.urlopen(f"{server.url}/api/v1/{path}?{query}", timeout=10) as reply:
        document = json.loads(reply.read())
    assert document["status"] == "success", document
    return document["data"]


def exemplar_trace_ids(server: Server, expr: str, seconds: float = 600.0) -> set[str]:
    """Trace ids of the exemplars Prometheus stored for `expr` over the last `seconds`."""
    now = time.time()
    found = prometheus_api(server, "query_exemplars", query=expr, start=now - seconds, end=now + 1)
    return {e["labels"]["trace_id"] for series in found for e in series["exemplars"]}


class AlertingStack:
    """Alertmanager and Prometheus (with the generated rules, `for:` shortened) around agents."""

    def __init__(
        self,
        workdir: Path,
        agents: Sequence[AgentProcess],
        *,
        for_override: str = "2s",
        targets: Sequence[str] = (),
        **rule_params: Any,
    ) -> None:
        """`targets`: more host:port to scrape (e.g. `ragpulse demo`); `rule_params`: other
        RuleParams fields (e.g. the baseline windows shortened to a demo's length)."""
        self.workdir = workdir
        self.agents = agents
        self.targets = [f"127.0.0.1:{agent.metrics_port}" for agent in agents] + list(targets)
        rules_module = load_module("deploy/prometheus/generate_rules.py")
        self.rules_path = workdir / "ragpulse.rules.yml"
        self.rules_path.write_text(
            rules_module.render_rules(rules_module.RuleParams(for_override=for_override, **rule_params))
        )
        self.webhook = Webhook()
        self.servers: list[Server] = []

    def start(self) -> None:
        self.webhook.start()
        am_dir = self.workdir / "alertmanager"
        am_dir.mkdir()
        (am_dir / "alertmanager.yml").write_text(yaml.safe_dump(alertmanager_config(self.webhook.url)))
        self.alertmanager = Server(
            shutil.which(ALERTMANAGER) or ALERTMANAGER,
            [
                "--config.file=alertmanager.yml",
                "--storage.path=data",
                "--cluster.listen-address=",
            ],
            am_dir,
            "/-/ready",
        )
        self.servers.append(self.alertmanager)
        self.alertmanager.wait_ready()
        prom_dir = self.workdir / "prometheus"
        prom_dir.mkdir()
        config = prometheus_config(self.targets, f"127.0.0.1:{self.alertmanager.port}", self.rules_path)
        (prom_dir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.prometheus = Server(
            shutil.which(PROMETHEUS) or PROMETHEUS,
            ["--config.file=prometheus.yml", "--storage.tsdb.path=data"],
            prom_dir,
            "/-/ready",
        )
        self.servers.append(self.prometheus)
        self.prometheus.wait_ready()

    def stop(self) -> None:
        for server in reversed(self.servers):
            server.stop()
        self.webhook.stop()

    # -- Prometheus HTTP API ------------------------------------------------------------------

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.prometheus.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        status, body = http_get(url, timeout=10)
        document = json.loads(body)
        if status != 200 or document.get("status") != "success":
            raise AssertionError(f"{path} {params} -> {status}: {document}")
        return document["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self.api("query", query=expr)["result"]

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert Prometheus holds, pending or firing."""
        return self.api("alerts")["alerts"]

    def firing(self) -> list[dict[str, Any]]:
        return [a for a in self.api("alerts")["alerts"] if a["state"] == "firing"]

    def wait(self, what: str, check: Callable[[], Any], timeout: float = 90.0) -> Any:
        """Poll check() until it returns something truthy; fail with the servers' logs."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = check()
            if result:
                return result
            time.sleep(0.25)
        logs = "\n".join(f"--- {s.log_path.name}\n{s.log()}" for s in self.servers)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{logs}")

    def wait_scraped(self, expr: str, expected: float, timeout: float = 60.0) -> None:
        """Until Prometheus holds `expected` for the (summed) series."""

        def holds() -> bool:
            result = self.query(f"sum({expr})")
            return bool(result) and float(result[0]["value"][1]) == expected

        self.wait(f"Prometheus to scrape {expr} == {expected}", holds, timeout)
