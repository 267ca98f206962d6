"""Free ports, HTTP requests with urllib, and /metrics scrapes parsed by prometheus_client."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families


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
