"""A real OpenAI-compatible chat-completions server for tests and benchmarks (no LLM behind it).

It answers ragpulse's judge prompts like a well-behaved model: it reads only the fenced data of
the prompt and computes deterministic verdicts from it with the lexical judge's functions, so
instructions hidden inside a chunk change nothing. Faults can be scripted per request (429, 500,
400, 401, 403, 404 with bodies shaped like OpenAI's, timeout, malformed JSON, wrong verdict
count), latency can be injected, it can miscount like
real models do at larger k (`miscount=0.3`: that share of answers, drawn with a fixed seed, leave
out one pinned item: a chunk verdict or a claim check), and it counts calls and tokens (cl100k
tokenizer when available, else ~4 characters per token) and records every request.

    server = FakeLLMServer(latency=0.3).start()   # server.api_base -> http://127.0.0.1:PORT/v1
    server.script("429", "malformed")             # the next two requests fail that way
    python -m tests.support.llm_server --port 8001 --latency 0.3 [--fault 500] [--miscount 0.3]

It also writes `ragpulse testset` items (`write_testset_item`) from the fenced chunks alone: a
question on a chunk's most informative sentence with that sentence as the reference (one from each
chunk for `multi`), or a question the chunk does not answer. `invent=0.3` (`--invent 0.3`) makes
that share of answerable drafts (seeded) carry a reference no chunk supports, as a careless model.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib.util
import json
import math
import os
import random
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agent.judges import local

FAULTS = ("429", "500", "400", "401", "403", "404", "timeout", "malformed", "wrong_count", "bad_claims")

# Error bodies shaped as OpenAI's API sends them, so litellm maps them as it maps a provider's.
PROVIDER_ERRORS: dict[str, dict[str, Any]] = {
    "400": {"message": "Invalid parameter: 'response_format' of type 'json_schema' is not supported "
            "with this model.", "type": "invalid_request_error", "param": "response_format",
            "code": None},
    "401": {"message": "Incorrect API key provided: sk-test****-key. You can find your API key at "
            "https://platform.openai.com/account/api-keys.", "type": "invalid_request_error",
            "param": None, "code": "invalid_api_key"},
    "403": {"message": "Project does not have access to this model.", "type": "invalid_request_error",
            "param": None, "code": "model_not_allowed"},
    "404": {"message": "The model `gpt-nonexistent` does not exist or you do not have access to it.",
            "type": "invalid_request_error", "param": None, "code": "model_not_found"},
    "429": {"message": "Rate limit reached for requests.", "type": "requests", "param": None,
            "code": "rate_limit_exceeded"},
    "500": {"message": "The server had an error while processing your request.", "type": "server_error",
            "param": None, "code": None},
}  # fmt: skip


def _token_counter():  # type: ignore[no-untyped-def]
    """cl100k_base through tiktoken with litellm's bundled vocabulary (offline), else chars/4."""
    try:
        spec = importlib.util.find_spec("litellm")
        if spec and spec.submodule_search_locations:
            bundled = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
            os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(bundled))
        import tiktoken

        encoding = tiktoken.get_encoding("cl100k_base")
        return lambda text: len(encoding.encode(text, disallowed_special=()))
    except Exception:
        return lambda text: max(1, len(text) // 4)


count_tokens = _token_counter()


@dataclass
class Stats:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    by_kind: collections.Counter[str] = field(default_factory=collections.Counter)
    faults: collections.Counter[str] = field(default_factory=collections.Counter)
    requests: list[dict[str, Any]] = field(default_factory=list)
    miscounts: int = 0
    invented: int = 0  # testset drafts given an unsupported reference
    # (monotonic arrival time, fault or None) of every request, to check retry pacing.
    arrivals: list[tuple[float, str | None]] = field(default_factory=list)


def _drop_one(verdicts: dict[str, Any], section: str) -> bool:
    """Leave out the last pinned item of an answer, as a model that miscounts does."""
    items = verdicts.get(section)
    if isinstance(items, dict) and items:
        del items[list(items)[-1]]
        return True
    if isinstance(items, list) and items:
        items.pop()
        return True
    return False


_KIND = re.compile(r"^Question kind: (\w+)$", re.M)
_FENCE = re.compile(r"^Fence id: ([0-9a-f]+)\.", re.M)
_STATEMENT = re.compile(r"^\((\d+)\) ", re.M)
_ITEM_KIND = re.compile(r"^KIND (\w+):", re.M)
INVENTED_REFERENCE = "It was first published by the Royal Geographic Society in Geneva in 1887."


def _support_everything(verdicts: Any) -> None:
    """Every claim verdict "supported" (a lenient judge), in place."""
    if isinstance(verdicts, dict):
        for key, value in verdicts.items():
            if key == "supported":
                verdicts[key] = 1
            else:
                _support_everything(value)
    elif isinstance(verdicts, list):
        for value in verdicts:
            _support_everything(value)


def fenced_blocks(user: str) -> tuple[str, list[tuple[str, str]]]:
    """The question kind and the (name, text) of every fenced block of a judge prompt."""
    kind_match, fence_match = _KIND.search(user), _FENCE.search(user)
    if not kind_match or not fence_match:
        raise ValueError("not a ragpulse judge prompt")
    fence = re.escape(fence_match.group(1))
    blocks = re.findall(rf"^<<<{fence} ([A-Z]+(?: \d+)?)\n(.*?)\n{fence}>>>$", user, re.S | re.M)
    return kind_match.group(1), blocks


def _numbered(blocks: list[tuple[str, str]], prefix: str) -> dict[str, str]:
    """{"3": text} for every block named e.g. "CHUNK 3", in order."""
    return {name.split()[1]: text for name, text in blocks if name.startswith(prefix + " ")}


def _statements(block: str) -> list[str]:
    parts = _STATEMENT.split(block)
    # split gives ['', '1', 'text', '2', 'text', ...]
    return [parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)]


def _assess(query: str, answer_text: str | None, chunks: dict[str, str]) -> dict[str, dict[str, Any]]:
    query_words = local.content_words(query)
    answer_sentences = [w for s in local.sentences(answer_text or "") if (w := local.content_words(s))]
    items = {}
    for number, chunk in chunks.items():
        statements = _statements(chunk)
        item: dict[str, Any] = {
            "relevant": [
                i
                for i, s in enumerate(statements, 1)
                if local.coverage(query_words, local.content_words(s)) >= 0.3
            ]
        }
        if answer_text is not None:
            chunk_words = local.content_words(" ".join(statements))
            best = max((local.coverage(w, chunk_words) for w in answer_sentences), default=0.0)
            item["useful"] = int(best >= 0.5)
        items[number] = item
    return items


def _check(query: str, response: str, chunks: list[str]) -> list[dict[str, Any]]:
    claims = local.check_response(query, response, chunks)
    texts = local.claims(response)
    return [
        {
            "claim": t[:60],
            "supported": int(c.supported.value),
            "relevant": int(bool(c.relevant and c.relevant.value)),
        }
        for t, c in zip(texts, claims, strict=True)
    ]


def _key_sentence(chunk: str) -> str:
    """The chunk's sentence with the most content words (the first of equals)."""
    found = [s for s in local.sentences(chunk) if len(s) <= 400] or [chunk[:300]]
    return max(found, key=lambda s: len(local.content_words(s)))


def _topic(sentence: str, n: int = 4) -> str:
    words = [w for w in re.findall(r"[A-Za-z][A-Za-z-]{3,}", sentence) if local.content_words(w)]
    picked = list(dict.fromkeys(w.lower() for w in words))[:n] or ["this"]
    return ", ".join(picked[:-1]) + (" and " if len(picked) > 1 else "") + picked[-1]


def write_item(user: str, chunks: list[str]) -> dict[str, Any]:
    """A testset draft from the fenced chunks only; the kind is named outside the fences."""
    outside = re.sub(r"^<<<([0-9a-f]+) .*?^\1>>>$", "", user, flags=re.S | re.M)
    match = _ITEM_KIND.search(outside)
    item_kind = match.group(1) if match else "single"
    if item_kind == "unanswerable":
        topic = _topic(_key_sentence(chunks[0]), 2)
        return {
            "question": f"Who first proposed {topic}, and in which year?",
            "reference": "The documents do not give this information.",
            "chunks": [],
        }
    if item_kind == "multi" and len(chunks) >= 2:
        first, second = _key_sentence(chunks[0]), _key_sentence(chunks[1])
        return {
            "question": f"How do {_topic(first, 3)} relate to {_topic(second, 3)}?",
            "reference": f"{first} {second}",
            "chunks": [1, 2],
        }
    sentence = _key_sentence(chunks[0])
    return {
        "question": f"What do the docs say about {_topic(sentence)}?",
        "reference": sentence,
        "chunks": [1],
    }


# A custom criterion as the judge prompt lists it (agent/judges/questions.py criteria_instruction).
_CRITERION = re.compile(
    r'^- "(?P<name>[a-z][a-z0-9_]*)" \(reads (?P<reads>[A-Z, ]+); answer '
    r"(?P<scale>1 for yes, 0 for no|an integer from 1 to 5).*?\): (?P<question>.*)$",
    re.M,
)
_READ_BLOCKS = {"QUERY": "QUERY", "RESPONSE": "RESPONSE", "REFERENCE": "REFERENCE"}


def criterion_answer(question: str, scale: str, evidence: str) -> int:
    """The test server's answer to a custom criterion: the share of the question's content words
    that the blocks it reads contain; binary: 1 from half on; 1-5: 1 + round(4 x share)."""
    share = local.coverage(local.content_words(question), local.content_words(evidence))
    return int(share >= 0.5) if scale == "binary" else 1 + round(4 * share)


def _criteria(user: str, named: dict[str, str], chunks: list[str]) -> dict[str, int]:
    """Answers for the CRITERIA listed after the fenced data (outside every fence)."""
    answers = {}
    for match in _CRITERION.finditer(user):
        reads = [r.strip() for r in match["reads"].split(",")]
        texts = [named.get(_READ_BLOCKS[r], "") for r in reads if r in _READ_BLOCKS]
        if "CHUNKS" in reads:
            texts += [" ".join(_statements(chunk)) or chunk for chunk in chunks]
        scale = "binary" if match["scale"].startswith("1 for yes") else "1-5"
        answers[match["name"]] = criterion_answer(match["question"], scale, "\n".join(texts))
    return answers


def answer(user: str) -> dict[str, Any]:
    """The verdicts a careful model would give, computed from the fenced data only."""
    kind, blocks = fenced_blocks(user)
    named = {name: text for name, text in blocks}
    numbered_chunks = _numbered(blocks, "CHUNK")
    chunks = list(numbered_chunks.values())
    query = named.get("QUERY", "")
    if kind == "write_testset_item":
        return write_item(user, chunks)
    if kind == "assess_interaction":
        # Both questions at once; the chunks arrive split into numbered statements.
        response = named["RESPONSE"]
        plain_chunks = [" ".join(_statements(chunk)) for chunk in chunks]
        combined: dict[str, Any] = {
            "chunks": _assess(query, response, numbered_chunks),
            "claims": _check(query, response, plain_chunks),
        }
        if '"criteria"' in user:
            combined["criteria"] = _criteria(user, named, chunks)
        return combined
    if kind == "judge_criteria":
        return {"criteria": _criteria(user, named, chunks)}
    if kind == "assess_chunks":
        return {"chunks": _assess(query, named.get("ANSWER"), numbered_chunks)}
    if kind == "check_response":
        return {"claims": _check(query, named["RESPONSE"], chunks)}
    if kind == "check_claims":
        evidence = "\n".join(chunks)
        query_words = local.content_words(query)
        checks = {}
        for number, claim in _numbered(blocks, "CLAIM").items():
            supported = local.support_score(claim, evidence) >= 0.5
            relevant = local.coverage(query_words, local.content_words(claim)) >= 0.2 if query_words else True
            checks[number] = {"supported": int(supported), "relevant": int(relevant)}
        return {"claims": checks}
    if kind == "check_reference":
        verdicts = local.check_reference(named["REFERENCE"], chunks)
        texts = local.claims(named["REFERENCE"])
        return {
            "claims": [
                {"claim": t[:60], "attributed": int(v.value)} for t, v in zip(texts, verdicts, strict=True)
            ]
        }
    if kind == "compare_answers":
        comparison = local.compare_answers(named["RESPONSE"], named["REFERENCE"])
        return {
            "response_claims": [
                {"claim": t[:60], "supported": int(v.value)}
                for t, v in zip(local.claims(named["RESPONSE"]), comparison.response_claims, strict=True)
            ],
            "reference_claims": [
                {"claim": t[:60], "supported": int(v.value)}
                for t, v in zip(local.claims(named["REFERENCE"]), comparison.reference_claims, strict=True)
            ],
        }
    raise ValueError(f"unknown question kind {kind!r}")


def _logprobs(content: str, flag_probability: float) -> list[dict[str, Any]]:
    """OpenAI-style token log-probabilities of `content`: each 0/1 value its own token with
    `flag_probability` (the other digit as the runner-up), everything else certain."""
    tokens = []
    for text in filter(None, re.split(r'((?<=": )[01](?=[,}]))', content)):
        if text in ("0", "1"):
            other = "1" if text == "0" else "0"
            chosen = math.log(flag_probability)
            top = [
                {"token": text, "logprob": chosen},
                {"token": other, "logprob": math.log(1 - flag_probability)},
            ]
        else:
            chosen, top = 0.0, [{"token": text, "logprob": 0.0}]
        tokens.append({"token": text, "logprob": chosen, "top_logprobs": top})
    return tokens


class _Listener(ThreadingHTTPServer):
    # socketserver's default backlog is 5: 30 judge calls connecting at once overflowed it, and
    # the dropped connections were retried by the client's kernel a second later, a delay no
    # provider's server adds.
    request_queue_size = 128


class FakeLLMServer:
    """The server; `start()` serves on 127.0.0.1 in a background thread."""

    def __init__(
        self,
        port: int = 0,
        latency: float = 0.0,
        hang_seconds: float = 60.0,
        miscount: float = 0.0,
        seed: int = 20251122,
        default_answer: str | None = None,
        invent: float = 0.0,
    ) -> None:
        # Answers any prompt that is not a judge prompt (an app's own LLM calls in framework tests).
        self.default_answer = default_answer
        self.latency = latency
        self.hang_seconds = hang_seconds
        self.miscount = miscount
        # Share of testset drafts given a reference no chunk supports (seeded like miscount).
        self.invent = invent
        self._invent_random = random.Random(seed + 1)
        self._random = random.Random(seed)
        # Sent as the Retry-After header of 429 answers when set (seconds).
        self.retry_after: float | None = None
        self.stats = Stats()
        # A judge whose verdicts shifted (a new model behind the same name): every claim supported.
        self.lenient = False
        # When set, the probability of the chosen token at each 0/1 flag, returned as
        # `choices[0].logprobs` (the other digit as the runner-up) to requests that ask for them.
        self.flag_probability: float | None = None
        self._lock = threading.Lock()
        self._script: collections.deque[str] = collections.deque()
        self._always: str | None = None
        self._closing = threading.Event()
        self._httpd = _Listener(("127.0.0.1", port), self._handler())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeLLMServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-llm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def script(self, *faults: str) -> None:
        """Make the next requests fail, one fault each, in order."""
        unknown = set(faults) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {unknown}; choose from {FAULTS}")
        with self._lock:
            self._script.extend(faults)

    def fail_always(self, fault: str | None) -> None:
        """Fail every request with `fault` until called with None."""
        with self._lock:
            self._always = fault

    def reset(self) -> None:
        with self._lock:
            self.stats = Stats()
            self._script.clear()
            self._always = None

    def _next_fault(self) -> str | None:
        with self._lock:
            return self._script.popleft() if self._script else self._always

    def _handle(self, body: dict[str, Any]) -> tuple[int, dict[str, Any] | str]:
        messages = body.get("messages", [])
        prompt_tokens = sum(count_tokens(str(m.get("content", ""))) + 4 for m in messages)
        users = [m["content"] for m in messages if m.get("role") == "user"]
        fault = self._next_fault()
        with self._lock:
            self.stats.calls += 1
            self.stats.prompt_tokens += prompt_tokens
            self.stats.requests.append(body)
            self.stats.arrivals.append((time.monotonic(), fault))
            if fault:
                self.stats.faults[fault] += 1
        if self.latency:
            time.sleep(self.latency)
        if fault == "timeout":
            self._closing.wait(self.hang_seconds)
            return 504, {"error": {"message": "hung", "type": "timeout"}}
        if fault in PROVIDER_ERRORS:
            return int(fault), {"error": PROVIDER_ERRORS[fault]}
        try:
            verdicts = answer(users[0]) if users else {}
            kind = fenced_blocks(users[0])[0] if users else "unknown"
        except (ValueError, KeyError) as exc:
            if self.default_answer is not None:
                return 200, self._completion(body, self.default_answer, prompt_tokens)
            return 400, {"error": {"message": f"not a judge prompt: {exc}", "type": "invalid_request_error"}}
        if fault == "bad_claims" and isinstance(verdicts.get("claims"), list | dict):
            claims = verdicts["claims"]
            for item in claims.values() if isinstance(claims, dict) else claims:
                item["supported"] = "yes"  # not 0 or 1: the claim text stays, its verdict is invalid
        if self.lenient:
            _support_everything(verdicts)
        if kind == "write_testset_item" and verdicts.get("chunks") and self.invent > 0:
            with self._lock:
                invents = self._invent_random.random() < self.invent
            if invents:
                verdicts["reference"] = INVENTED_REFERENCE
                with self._lock:
                    self.stats.invented += 1
        with self._lock:
            miscounts = self.miscount > 0 and self._random.random() < self.miscount
        section = {"check_claims": "claims", "judge_criteria": "criteria"}.get(kind, "chunks")
        if (fault == "wrong_count" or miscounts) and _drop_one(verdicts, section):
            with self._lock:
                self.stats.miscounts += 1
        content = "this is not JSON {" if fault == "malformed" else json.dumps(verdicts)
        with self._lock:
            self.stats.by_kind[kind] += 1
        return 200, self._completion(body, content, prompt_tokens)

    def _completion(self, body: dict[str, Any], content: str, prompt_tokens: int) -> dict[str, Any]:
        completion_tokens = count_tokens(content)
        with self._lock:
            self.stats.completion_tokens += completion_tokens
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": "stop",
        }
        if body.get("logprobs") and self.flag_probability is not None:
            choice["logprobs"] = {"content": _logprobs(content, self.flag_probability)}
        return {
            "id": f"chatcmpl-fake-{self.stats.calls}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [choice],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": "not found"}})
                    return
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "body is not JSON"}})
                    return
                status, payload = server._handle(body)
                self._send(status, payload)

            def _send(self, status: int, payload: dict[str, Any] | str) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    if status == 429 and server.retry_after is not None:
                        self.send_header("Retry-After", f"{server.retry_after:g}")
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a scripted timeout)

        return Handler


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every response")
    parser.add_argument("--fault", choices=FAULTS, default=None, help="fail every request this way")
    parser.add_argument("--miscount", type=float, default=0.0, help="share of answers missing one item")
    parser.add_argument("--invent", type=float, default=0.0, help="share of testset drafts made unsupported")
    args = parser.parse_args()
    server = FakeLLMServer(args.port, args.latency, miscount=args.miscount, invent=args.invent)
    server.fail_always(args.fault)
    print(f"fake LLM server on {server.api_base}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server._httpd.serve_forever()


if __name__ == "__main__":
    main()
