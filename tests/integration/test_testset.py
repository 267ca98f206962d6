"""`ragpulse testset` as a user runs it: a subprocess writing a golden set from documents with the
test LLM server (tests/support/llm_server.py) as the judge model, over real HTTP through litellm."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.offline.records import read_items
from agent.offline.testset import chunk_document
from tests.support.llm_server import INVENTED_REFERENCE, FakeLLMServer, fenced_blocks
from tests.support.repo import ROOT

pytestmark = pytest.mark.integration

PARAGRAPHS = {
    "retrieval.md": [
        "# Retrieval metrics",
        "Precision at k is the share of the first k retrieved chunks that are relevant to the query.",
        "Recall at k is the share of all relevant chunks that appear among the first k retrieved ones.",
        "Mean reciprocal rank averages one over the rank of the first relevant chunk across queries.",
        "Questions about the metrics go to metrics-team@example.com, who answer within two days.",
        "## Graded relevance",
        "Normalised discounted cumulative gain compares graded gains with an ideal ordering of them.",
        "Hit rate counts queries with at least one relevant chunk anywhere in the top results.",
        "Reranking models reorder candidate passages by scoring each pair of query and passage.",
    ],
    "generation.txt": [
        "Faithfulness counts the claims of a response that the retrieved context supports.",
        "Answer relevancy asks whether the response addresses the question that the user asked.",
        "Hallucinated claims lower faithfulness even when the response sounds fluent and confident.",
        "Answer correctness compares the claims of a response with those of a reference answer.",
        "Self-knowledge measures correct claims that the model produced without any retrieved support.",
        "Noise sensitivity tracks wrong claims taken from irrelevant passages placed in the context.",
    ],
}
HTML = """<html><head><title>Judges</title><style>.x { color: red }</style>
<script>var secret = "SCRIPT-TEXT-MUST-NOT-APPEAR";</script></head><body>
<h1>Judges</h1><p>A local judge scores <b>lexical overlap</b> between the claims &amp; the chunks.</p>
<p>An LLM judge answers typed questions in one batched call per interaction and question kind.</p>
<p>The verdict cache keys every verdict by judge model, prompt version and normalised inputs.</p>
</body></html>"""


def _docs(root: Path) -> Path:
    docs = root / "docs"
    (docs / "sub").mkdir(parents=True)
    for name, paragraphs in PARAGRAPHS.items():
        (docs / name).write_text("\n\n".join(paragraphs * 1) + "\n")
    (docs / "sub" / "judges.html").write_text(HTML)
    (docs / "manual.pdf").write_bytes(b"%PDF-1.4 binary")
    (docs / "sub" / "logo.png").write_bytes(b"\x89PNG")
    return docs


def _env(server: FakeLLMServer) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_")}
    environment.update(
        {
            "RAGPULSE_JUDGE_MODEL": "openai/ragpulse-test-judge",
            "RAGPULSE_JUDGE_API_BASE": server.api_base,
            "RAGPULSE_JUDGE_API_KEY": "test-key",
            "RAGPULSE_JUDGE_RETRY_MAX_ELAPSED_SECONDS": "5",
        }
    )
    return environment


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "agent", "testset", *args]


def _testset(server: FakeLLMServer, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _command(*args), cwd=ROOT, env=_env(server), capture_output=True, text=True, timeout=300
    )


def _requests(server: FakeLLMServer, kind: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """(user message, fenced blocks) of every request of a question kind the server received."""
    found = []
    for body in server.stats.requests:
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        question_kind, blocks = fenced_blocks(user)
        if question_kind == kind:
            found.append((user, blocks))
    return found


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_set_is_written_from_documents_checked_and_ready_for_eval(tmp_path: Path) -> None:
    docs = _docs(tmp_path)
    out, rejects = tmp_path / "set.jsonl", tmp_path / "rejects.jsonl"
    with FakeLLMServer(invent=0.35) as server:
        run = _testset(
            server,
            str(docs),
            "--out",
            str(out),
            "--rejects",
            str(rejects),
            "--size",
            "8",
            "--kinds",
            "single=0.5,multi=0.25,unanswerable=0.25",
            "--chunk-chars",
            "200",
            "--progress-every",
            "4",
        )
        assert run.returncode == 0, run.stderr
        writes = _requests(server, "write_testset_item")
        checks = _requests(server, "check_reference")
        invented = server.stats.invented
        calls = server.stats.calls

    # Other files are skipped with a line each, naming the file and why.
    assert f"skipped {docs / 'manual.pdf'}: not text, Markdown or HTML (.pdf file)" in run.stderr
    assert f"skipped {docs / 'sub' / 'logo.png'}: not text, Markdown or HTML (.png file)" in run.stderr

    # The set is `ragpulse eval` input, with the kinds asked for.
    items, bad = read_items(out)
    assert bad == [] and len(items) == 8
    rows = _rows(out)
    assert [r["kind"] for r in rows].count("single") == 4
    assert [r["kind"] for r in rows].count("multi") == 2
    assert [r["kind"] for r in rows].count("unanswerable") == 2
    assert len({r["id"] for r in rows}) == 8
    for item, row in zip(items, rows, strict=True):
        assert item.question and item.reference
        expected = {"single": 1, "multi": 2, "unanswerable": 0}[row["kind"]]
        assert len(item.relevant_ids or ()) == expected and len(row["reference_contexts"]) == expected
        assert row["reference"] != INVENTED_REFERENCE
        for chunk_id, context in zip(item.relevant_ids or (), row["reference_contexts"], strict=True):
            assert re.fullmatch(r"docs/(retrieval\.md|generation\.txt|sub/judges\.html)#\d+", chunk_id)
            # The reference (the server's key sentence of each chunk) is in the chunks it names.
            assert any(sentence in context for sentence in row["reference"].split(". "))

    # HTML is text: no tags, no script or style reached the model.
    html_chunks = [
        c
        for r in rows
        for i, c in zip(r["relevant_ids"], r["reference_contexts"], strict=True)
        if "judges.html" in i
    ]
    sent = "\n".join(user for user, _ in writes + checks)
    assert "SCRIPT-TEXT-MUST-NOT-APPEAR" not in sent and "<p>" not in sent and "color: red" not in sent
    assert all("<" not in c for c in html_chunks)

    # Prompts: each draft request fences its chunk texts, and the kind's instruction is outside.
    kinds_asked = {"single": 0, "multi": 0, "unanswerable": 0}
    for user, blocks in writes:
        kind = re.search(r"^KIND (\w+):", user, re.M).group(1)  # type: ignore[union-attr]
        kinds_asked[kind] += 1
        assert [name for name, _ in blocks] == (["CHUNK 1", "CHUNK 2"] if kind == "multi" else ["CHUNK 1"])
        fence = re.search(r"^Fence id: ([0-9a-f]+)\.", user, re.M).group(1)  # type: ignore[union-attr]
        assert user.index(f"{fence}>>>") < user.index(f"KIND {kind}:")
    assert all(kinds_asked.values())

    # Personal data is redacted before it leaves, and restored in the set.
    assert "metrics-team@example.com" not in sent
    assert "<EMAIL_1>" in sent
    assert "<EMAIL_" not in out.read_text()

    # The second pass: one check per answerable draft that was not a duplicate; every invented
    # reference was caught and is in the rejects file with its reason.
    rejected = _rows(rejects)
    unsupported = [r for r in rejected if r["reason"].startswith("unsupported")]
    assert all(r["outcome"] == "unsupported" for r in unsupported)
    assert invented >= 1 and len(unsupported) == invented
    assert all(r["reference"] == INVENTED_REFERENCE for r in unsupported)
    assert calls == len(writes) + len(checks)
    assert f"rejected {invented} unsupported" in run.stderr
    assert f"; {calls} calls," in run.stderr
    # Progress: a line per 4 kept items.
    assert re.search(r"^testset: 4/8 items \(single \d/4, multi \d/2, unanswerable \d/2\)", run.stderr, re.M)
    assert re.search(r"^testset: 8/8 items", run.stderr, re.M)


def test_a_killed_run_continues_without_duplicates_or_repeated_calls(tmp_path: Path) -> None:
    docs = _docs(tmp_path)
    out = tmp_path / "set.jsonl"
    args = [str(docs), "--out", str(out), "--size", "7", "--chunk-chars", "200", "--concurrency", "1"]
    with FakeLLMServer(latency=0.15) as server:
        process = subprocess.Popen(
            _command(*args), cwd=ROOT, env=_env(server), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and process.poll() is None:
                if out.exists() and len(out.read_text().splitlines()) >= 3:
                    break
                time.sleep(0.05)
            process.send_signal(signal.SIGKILL)
        finally:
            process.wait(timeout=30)
        first = _rows(out)
        assert 3 <= len(first) < 7
        asked_first = [
            (user.split("KIND ")[1][:5], [b for _, b in blocks])
            for user, blocks in _requests(server, "write_testset_item")
        ]
        server.reset()
        run = _testset(server, *args)
        assert run.returncode == 0, run.stderr
        asked_again = [
            (user.split("KIND ")[1][:5], [b for _, b in blocks])
            for user, blocks in _requests(server, "write_testset_item")
        ]
    rows = _rows(out)
    assert len(rows) == 7 and len({r["id"] for r in rows}) == 7
    assert rows[: len(first)] == first  # kept as they were
    assert f"continuing {out}: {len(first)} items kept" in run.stderr
    # No chunk whose item was kept is asked about again.
    texts = {
        c.id: c.text
        for p in (docs / "retrieval.md", docs / "generation.txt")
        for c in chunk_document(f"docs/{p.name}", p.read_text(), target_chars=200, max_chars=320)
    }
    for row in first:
        kind = row["kind"][:5]
        chunk_ids = row["id"].split(":", 1)[1].split("+")
        if all(c in texts for c in chunk_ids):
            assert (kind, [texts[c] for c in chunk_ids]) not in asked_again
    assert len(asked_first) + len(asked_again) <= 7 + 2  # at most the one in flight at the kill, repeated


def test_the_budget_stops_cleanly_and_a_rerun_continues(tmp_path: Path) -> None:
    docs = _docs(tmp_path)
    out = tmp_path / "set.jsonl"
    args = [str(docs), "--out", str(out), "--size", "6", "--chunk-chars", "200", "--concurrency", "1"]
    with FakeLLMServer() as server:
        run = _testset(server, *args, "--max-calls", "5")
        assert run.returncode == 0, run.stderr
        assert server.stats.calls <= 5
        assert "stopped: --max-calls 5 reached" in run.stderr
        assert "run the same command again to continue" in run.stderr
        kept = len(_rows(out))
        assert 1 <= kept < 6
        run = _testset(server, *args)
        assert run.returncode == 0, run.stderr
    assert len(_rows(out)) == 6
    assert "stopped" not in run.stderr


def test_the_cost_budget_stops_once_spent(tmp_path: Path) -> None:
    """A model litellm has a price for (the test server answers in its name): the run stops once
    --max-cost-usd is spent, counting the drafts and the second pass alike."""
    docs = _docs(tmp_path)
    out = tmp_path / "set.jsonl"
    with FakeLLMServer() as server:
        environment = {**_env(server), "RAGPULSE_JUDGE_MODEL": "openai/gpt-4o-mini"}
        args = [
            str(docs),
            "--out",
            str(out),
            "--size",
            "6",
            "--chunk-chars",
            "200",
            "--concurrency",
            "1",
            "--max-cost-usd",
            "0.0008",
        ]
        run = subprocess.run(
            _command(*args), cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300
        )
        calls = server.stats.calls
    assert run.returncode == 0, run.stderr
    spent = float(
        re.search(r"stopped: --max-cost-usd 0.0008 reached \(\$([0-9.]+) spent\)", run.stderr).group(1)
    )  # type: ignore[union-attr]
    assert spent >= 0.0008
    assert 2 <= calls < 12 and 1 <= len(_rows(out)) < 6
    assert f"; {calls} calls," in run.stderr and "no price" not in run.stderr


def test_a_permanent_judge_error_stops_at_once_with_one_line(tmp_path: Path) -> None:
    docs = _docs(tmp_path)
    with FakeLLMServer() as server:
        server.fail_always("400")  # a 4xx other than 429: no retry will help
        run = _testset(server, str(docs), "--out", str(tmp_path / "set.jsonl"), "--concurrency", "1")
        calls = server.stats.calls
        server.fail_always(None)
        # No key at all: the OpenAI client refuses before sending (litellm calls that a 500).
        environment = {
            k: v for k, v in _env(server).items() if k not in ("RAGPULSE_JUDGE_API_KEY", "OPENAI_API_KEY")
        }
        keyless = subprocess.run(
            _command(str(docs), "--out", str(tmp_path / "k.jsonl"), "--concurrency", "1"),
            cwd=ROOT,
            env=environment,
            capture_output=True,
            text=True,
            timeout=300,
        )
        keyless_calls = server.stats.calls - calls
    for result, reason in ((run, "(bad_request)"), (keyless, "(auth)")):
        assert result.returncode == 5, result.stderr
        errors = [line for line in result.stderr.splitlines() if "failed permanently" in line]
        assert len(errors) == 1 and reason in errors[0] and "judge_api_key" in errors[0]
        assert "Traceback" not in result.stderr
    assert calls == 1 and keyless_calls == 0  # never retried; the keyless call never left
    assert (tmp_path / "set.jsonl").read_text() == ""


def test_a_rejected_key_stops_at_once_with_the_judges_line_naming_the_key(tmp_path: Path) -> None:
    """The writer's 401 is worded as the judge's (agent/judges/caller.py): the key variable to check."""
    docs = _docs(tmp_path)
    with FakeLLMServer() as server:
        server.fail_always("401")
        run = _testset(server, str(docs), "--out", str(tmp_path / "set.jsonl"), "--concurrency", "1")
        calls = server.stats.calls
    assert run.returncode == 5, run.stderr
    errors = [line for line in run.stderr.splitlines() if "failed permanently" in line]
    assert len(errors) == 1 and "(auth)" in errors[0] and "HTTP 401" in errors[0]
    assert "check the key in RAGPULSE_JUDGE_API_KEY (it is used instead of OPENAI_API_KEY)" in errors[0]
    assert calls == 1 and "Traceback" not in run.stderr


def test_a_local_judge_is_refused_with_the_setting_named(tmp_path: Path) -> None:
    docs = _docs(tmp_path)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_")}
    run = subprocess.run(
        _command(str(docs), "--out", str(tmp_path / "s.jsonl")),
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1].startswith("ragpulse testset: judge_model: 'lexical'")
