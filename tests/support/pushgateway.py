"""A Prometheus Pushgateway's receiving side, for tests: an HTTP server on a free port that records
every push (method, path, body) and answers as the Pushgateway does. `families(push)` parses a
pushed body with prometheus_client's own text parser."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.support.net import Scrape


@dataclass(frozen=True)
class Push:
    method: str
    path: str  # /metrics/job/<job>[/<label>/<value>...]
    content_type: str
    body: str

    def scrape(self) -> Scrape:
        """The pushed samples, as a scrape of the gateway would show them."""
        return Scrape(
            [
                (s.name, dict(s.labels), s.value)
                for family in text_string_to_metric_families(self.body)
                for s in family.samples
            ]
        )


class Pushgateway:
    def __init__(self) -> None:
        self.pushes: list[Push] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def received(self) -> list[Push]:
        with self._lock:
            return list(self.pushes)

    def __enter__(self) -> Pushgateway:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _push(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0))).decode()
                push = Push(self.command, self.path, self.headers.get("content-type", ""), body)
                with gateway._lock:
                    gateway.pushes.append(push)
                # The Pushgateway answers 200 to a PUT or POST it accepted (202 to a DELETE).
                self.send_response(200 if self.path.startswith("/metrics/job/") else 404)
                self.send_header("content-length", "0")
                self.end_headers()

            do_PUT = _push
            do_POST = _push

        return Handler
