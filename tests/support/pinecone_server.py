"""A real HTTP server speaking enough of Pinecone's data-plane API for the official client.

Pinecone is a paid hosted service, so tests cannot run the real one; this serves the index host
that `Pinecone(api_key=...).Index(host=server.host)` talks to: `POST /vectors/upsert` and
`POST /query` (exact cosine similarity over what was upserted, per namespace, `topK`,
`includeMetadata` / `includeValues`), answering in the REST API's JSON. Nothing else is
implemented (no filters, no sparse vectors, no control plane). It records every request.

    with FakePinecone() as pinecone:
        index = Pinecone(api_key="test").Index(host=pinecone.host)
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class _Vector:
    values: list[float]
    metadata: dict[str, Any] | None


@dataclass
class FakePinecone:
    namespaces: dict[str, dict[str, _Vector]] = field(default_factory=dict)
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-pinecone", daemon=True)

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> FakePinecone:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _upsert(self, body: dict[str, Any]) -> dict[str, Any]:
        vectors = body.get("vectors", [])
        with self._lock:
            space = self.namespaces.setdefault(body.get("namespace", ""), {})
            for vector in vectors:
                space[vector["id"]] = _Vector(list(vector["values"]), vector.get("metadata"))
        return {"upsertedCount": len(vectors)}

    def _query(self, body: dict[str, Any]) -> dict[str, Any]:
        query = body["vector"]
        namespace = body.get("namespace", "")
        with self._lock:
            stored = list(self.namespaces.get(namespace, {}).items())
        ranked = sorted(
            ((_cosine(query, v.values), key, v) for key, v in stored), key=lambda h: (-h[0], h[1])
        )
        matches = []
        for score, key, vector in ranked[: body.get("topK", 10)]:
            match: dict[str, Any] = {"id": key, "score": score, "values": []}
            if body.get("includeValues"):
                match["values"] = vector.values
            if body.get("includeMetadata") and vector.metadata is not None:
                match["metadata"] = vector.metadata
            matches.append(match)
        return {"matches": matches, "namespace": namespace, "usage": {"readUnits": 1}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self
        routes = {"/vectors/upsert": self._upsert, "/query": self._query}

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                route = routes.get(self.path)
                with server._lock:
                    server.requests.append((self.path, body))
                status, payload = (200, route(body)) if route else (404, {"code": 5, "message": "Not Found"})
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _cosine(a: list[float], b: list[float]) -> float:
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return sum(x * y for x, y in zip(a, b, strict=True)) / norm if norm else 0.0
