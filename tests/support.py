"""Helpers shared by the tests: free ports, the agent as a subprocess, scraping /metrics, spans."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_is_free(port: int) -> bool:
    """True when a server could listen on the port now (connections in TIME_WAIT do not count)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            return False
        return True


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def http_post(
    url: str, body: bytes, headers: Mapping[str, str], timeout: float = 5.0
) -> tuple[int, bytes, dict]:
    request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


@dataclass(frozen=True)
class Scrape:
    """Parsed Prometheus samples: value(name, **labels) finds one sample."""

    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)

    def value(self, name: str, **labels: str) -> float | None:
        for sample_name, sample_labels, value in self.samples:
            if sample_name == name and all(sample_labels.get(k) == v for k, v in labels.items()):
                return value
        return None

    def total(self, name: str, **labels: str) -> float:
        return sum(
            value
            for sample_name, sample_labels, value in self.samples
            if sample_name == name and all(sample_labels.get(k) == v for k, v in labels.items())
        )


def scrape(url: str) -> Scrape:
    status, body = http_get(url)
    assert status == 200, f"GET {url} -> {status}"
    samples = [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    ]
    return Scrape(samples)


class AgentProcess:
    """`python -m agent run` in a subprocess on free ports, stopped with a signal."""

    def __init__(self, args: Sequence[str] = (), env: Mapping[str, str] | None = None) -> None:
        self.otlp_port = free_port()
        self.grpc_port = free_port()
        self.metrics_port = free_port()
        command = [
            sys.executable, "-m", "agent", "run",
            "--otlp-listen", f"127.0.0.1:{self.otlp_port}",
            "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
            *args,
        ]  # fmt: skip
        environment = {k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_")}
        # The OTLP/gRPC receiver on a free port too (its default 4317 is one per machine).
        environment["RAGPULSE_OTLP_GRPC_LISTEN"] = f"127.0.0.1:{self.grpc_port}"
        environment.update(env or {})
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"ragpulse-agent-{self.otlp_port}.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=environment, stdout=self._log, stderr=subprocess.STDOUT
        )

    @property
    def traces_url(self) -> str:
        return f"http://127.0.0.1:{self.otlp_port}/v1/traces"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"agent exited with {self.process.returncode}:\n{self.log()}")
            try:
                if http_get(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=1)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"agent not ready after {timeout}s:\n{self.log()}")

    def wait_for(self, predicate, timeout: float = 15.0) -> Scrape:  # type: ignore[no-untyped-def]
        """Scrape until predicate(scrape) holds; returns the last scrape."""
        deadline = time.monotonic() + timeout
        while True:
            result = scrape(self.metrics_url)
            if predicate(result) or time.monotonic() > deadline:
                return result
            time.sleep(0.05)

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signum)
        try:
            return self.process.wait(timeout)
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._log.close()


def openinference_single_span(
    tracer,  # type: ignore[no-untyped-def]
    *,
    query: str,
    chunks: Iterable[str],
    response: str,
    name: str = "rag.query",
    attributes: Mapping[str, object] | None = None,
) -> None:
    """Record one OpenInference single-span interaction with the real SDK tracer."""
    with tracer.start_as_current_span(name) as span:
        span.set_attribute("openinference.span.kind", "CHAIN")
        span.set_attribute("input.value", query)
        span.set_attribute("output.value", response)
        for i, chunk in enumerate(chunks):
            span.set_attribute(f"retrieval.documents.{i}.document.id", f"doc-{i}")
            span.set_attribute(f"retrieval.documents.{i}.document.content", chunk)
            span.set_attribute(f"retrieval.documents.{i}.document.score", 1.0 - i / 10)
        for key, value in (attributes or {}).items():
            span.set_attribute(key, value)  # type: ignore[arg-type]
