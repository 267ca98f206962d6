"""Free ports, HTTP requests with urllib, and /metrics scrapes parsed by prometheus_client."""

from __future__ import annotations

import itertools
import os
import random
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

_FIRST = 10_000  # the lowest port handed out


def free_port() -> int:
    """A port nothing listens on, below the kernel's ephemeral range and this worker's alone.

    A port the kernel picks (bind to 0) is an ephemeral one: between the pick and the server's bind
    another test's outgoing connection, or another xdist worker's pick, can take it, and the server
    started on it exits with "address in use". Ports below the ephemeral range are never handed to
    outgoing connections, and each worker draws from its own slice of them.
    """
    with _PICKING:  # tests that start servers from threads share the one sequence
        return next(_PORTS)


def _ports() -> Iterator[int]:
    low = _ephemeral_low()
    if low <= _FIRST + 1000:  # an unusual range: fall back to the kernel's pick
        while True:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                yield sock.getsockname()[1]
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    width = (low - _FIRST) // max(workers, 1)
    first = _FIRST + (int(worker) if worker.isdigit() else 0) % max(workers, 1) * width
    # A random start: two runs one after the other do not meet each other's ports in TIME_WAIT.
    for offset in itertools.count(random.randrange(width)):
        port = first + offset % width
        if _bindable(port):
            yield port


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


_PORTS = _ports()
_PICKING = threading.Lock()


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
