"""A small real RAG web app for the probe tests: Starlette under uvicorn, traced by the
OpenTelemetry ASGI instrumentation (it continues an incoming `traceparent`), with a hand-instrumented
RAG span (the `ragpulse.*` layout), exporting OTLP/HTTP to the agent under test.

Retrieval ranks a small knowledge base by word overlap with the question; the answer is the top
passage. `regress()` injects a retrieval regression: the ranking is reversed, so the relevant
documents drop out of the top k; `slow()` delays each answer; `require_token()` makes /ask answer
401 without the right bearer token (the `authorization` headers received are kept).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from dataclasses import dataclass, field

DOCUMENTS = {
    "paris": "Paris is the capital of France and sits on the Seine river.",
    "berlin": "Berlin is the capital of Germany and its largest city.",
    "madrid": "Madrid is the capital of Spain, in the centre of the country.",
    "rome": "Rome is the capital of Italy and was founded on seven hills.",
    "lisbon": "Lisbon is the capital of Portugal, on the Atlantic coast.",
    "vienna": "Vienna is the capital of Austria, on the Danube river.",
    "bananas": "Bananas grow in tropical climates and are rich in potassium.",
    "coffee": "Coffee beans are the roasted seeds of the coffee plant.",
}

# The golden set, in the `ragpulse eval` input format.
GOLDEN = [
    {"id": "g-fr", "question": "What is the capital of France?", "reference": DOCUMENTS["paris"],
     "relevant_ids": ["paris"]},
    {"id": "g-de", "question": "What is the capital of Germany?", "reference": DOCUMENTS["berlin"],
     "relevant_ids": ["berlin"]},
    {"id": "g-es", "question": "What is the capital of Spain?", "reference": DOCUMENTS["madrid"],
     "relevant_ids": ["madrid"]},
    {"id": "g-it", "question": "What is the capital of Italy?", "reference": DOCUMENTS["rome"],
     "relevant_ids": ["rome"]},
    {"id": "g-pt", "question": "What is the capital of Portugal?", "reference": DOCUMENTS["lisbon"],
     "relevant_ids": ["lisbon"]},
]  # fmt: skip

K = 3


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


def retrieve(question: str, regressed: bool = False) -> list[tuple[str, str]]:
    """The app's retriever: (id, text) of the top K documents."""
    asked = _words(question)
    ranked = sorted(DOCUMENTS.items(), key=lambda kv: (-len(asked & _words(kv[1])), kv[0]))
    if regressed:
        ranked.reverse()
    return ranked[:K]


def answer(question: str, regressed: bool = False) -> tuple[list[tuple[str, str]], str]:
    chunks = retrieve(question, regressed)
    return chunks, chunks[0][1]


@dataclass
class _State:
    regressed: bool = False
    requests: int = 0
    delay: float = 0.0  # seconds each answer takes
    token: str | None = None  # when set, /ask wants `authorization: Bearer <token>`, else 401
    authorizations: list[str] = field(default_factory=list)  # as received, in order


class ProbeApp:
    """The app on a free port in a thread; `url` is its /ask endpoint."""

    def __init__(self, traces_url: str, port: int) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        self.state = _State()
        self.port = port
        self.provider = TracerProvider(resource=Resource({"service.name": "capitals-app"}))
        self.provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url), schedule_delay_millis=100)
        )
        tracer = self.provider.get_tracer("capitals-app")
        state = self.state

        async def ask(request: Request) -> JSONResponse:
            body = await request.json()
            question = str(body["question"])
            state.requests += 1
            authorization = request.headers.get("authorization")
            if authorization is not None:
                state.authorizations.append(authorization)
            if state.token is not None and authorization != f"Bearer {state.token}":
                return JSONResponse({"error": "unauthorized"}, status_code=401)
            if state.delay:
                await asyncio.sleep(state.delay)
            with tracer.start_as_current_span("rag") as span:
                chunks, text = answer(question, state.regressed)
                span.set_attribute("ragpulse.query", question)
                span.set_attribute("ragpulse.chunks", [c for _, c in chunks])
                span.set_attribute("ragpulse.chunk_ids", [i for i, _ in chunks])
                span.set_attribute("ragpulse.response", text)
            return JSONResponse({"data": {"answer": text}})

        app = Starlette(routes=[Route("/ask", ask, methods=["POST"])])
        self._app = OpenTelemetryMiddleware(app, tracer_provider=self.provider)
        self._server = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/ask"

    def regress(self, on: bool = True) -> None:
        self.state.regressed = on

    def slow(self, seconds: float) -> None:
        """Each answer takes `seconds` (0: at once)."""
        self.state.delay = seconds

    def require_token(self, token: str | None) -> None:
        """Answer only requests with `authorization: Bearer <token>` (None: any request)."""
        self.state.token = token

    def start(self) -> ProbeApp:
        import uvicorn

        config = uvicorn.Config(
            self._app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=lambda: asyncio.run(self._server.serve()), daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            assert time.monotonic() < deadline, "app did not start"
            time.sleep(0.02)
        return self

    def ask(self, question: str) -> str:
        """Production traffic: a request without a probe's traceparent."""
        from tests.support.net import http_post

        status, body, _ = http_post(
            self.url, json.dumps({"question": question}).encode(), {"content-type": "application/json"}
        )
        assert status == 200, body
        return json.loads(body)["data"]["answer"]

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        self.provider.shutdown()
