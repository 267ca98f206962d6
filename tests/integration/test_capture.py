"""From a bad answer to a test: a real agent scores real OTLP spans into its results file (or the
Kafka results topic), `ragpulse capture` picks the bad interactions, label-queue reads them, and
`capture --add-to` merges the labelled ones into a golden set that `ragpulse eval` accepts."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent.cli import main
from agent.trust.labels import parse_label_lines
from tests.support.agent_process import AgentProcess
from tests.support.kafka_agent import kafka_agent
from tests.support.kafka_broker import Broker, consume_all, produce_otlp
from tests.support.llm_server import FakeLLMServer, criterion_answer
from tests.support.spans import PARIS_RESPONSE, USEFUL, USELESS, hexid, openinference_single_span

pytestmark = pytest.mark.integration

BAD_ANSWER = "The capital of France is Lyon."
METRICS = "context_precision,faithfulness"


def traffic() -> tuple[list[ReadableSpan], dict[str, str]]:
    """Two services' interactions, real SDK spans: good ones, one deliberately bad answer (checkout)
    and one bad retrieval (search). Returns the spans and the bad ones' interaction ids by kind."""
    spans: list[ReadableSpan] = []
    bad: dict[str, str] = {}
    for service in ("checkout", "search"):
        memory = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        provider.add_span_processor(SimpleSpanProcessor(memory))
        tracer = provider.get_tracer("tests")
        for i in range(3):
            openinference_single_span(
                tracer, query=f"Capital of France? ({service} #{i})",
                chunks=[USEFUL.format(f"{i}.{k}") for k in range(3)], response=PARIS_RESPONSE,
            )  # fmt: skip
        if service == "checkout":
            chunks, response, kind = [USEFUL.format(f"bad.{k}") for k in range(3)], BAD_ANSWER, "answer"
        else:
            chunks, response, kind = (
                [USELESS.format(f"bad.{k}") for k in range(3)],
                PARIS_RESPONSE,
                "retrieval",
            )
        openinference_single_span(
            tracer, query=f"Capital of France? ({service}, bad)", chunks=chunks, response=response
        )
        finished = list(memory.get_finished_spans())
        last = finished[-1]
        bad[kind] = f"{format(last.get_span_context().trace_id, '032x')}:{hexid(last)}"
        spans.extend(finished)
    return spans, bad


def send(url: str, spans: list[ReadableSpan]) -> None:
    exporter = OTLPSpanExporter(endpoint=url)
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    exporter.shutdown()


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_capture_label_and_merge_from_the_results_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results.jsonl"
    agent = AgentProcess(
        env={"RAGPULSE_METRICS": METRICS, "RAGPULSE_RESULTS_FILE": str(results),
             "RAGPULSE_RESULTS_INCLUDE_TEXT": "true"}
    )  # fmt: skip
    spans, bad = traffic()
    try:
        agent.wait_ready()
        send(agent.traces_url, spans)
        scraped = agent.wait_for(lambda s: s.total("ragpulse_score_count") >= 16, timeout=30)
    finally:
        agent.stop()
        agent.kill()
    assert scraped.total("ragpulse_score_count") == 16, agent.log()  # 8 interactions x 2 metrics

    # Thresholds: exactly the bad answer and the bad retrieval, with their scores and verdicts.
    captured = tmp_path / "captured.jsonl"
    code = main([
        "capture", "--results-file", str(results), "--below", "faithfulness=0.5",
        "--below", "context_precision=0.5", "--out", str(captured),
    ])  # fmt: skip
    assert code == 0
    assert "capture: 2 of 8 interactions from" in capsys.readouterr().err
    rows = {row["id"]: row for row in lines(captured)}
    assert sorted(rows) == sorted(bad.values())
    answer, retrieval = rows[bad["answer"]], rows[bad["retrieval"]]
    assert (answer["service"], answer["route"], answer["failing"]) == (
        "checkout",
        "rag.query",
        ["faithfulness"],
    )
    # Graded lexical support: the wrong answer keeps some credit, under the threshold.
    assert answer["scores"]["faithfulness"] < 0.5 <= answer["scores"]["context_precision"]
    assert answer["question"] == "Capital of France? (checkout, bad)" and answer["response"] == BAD_ANSWER
    # Bananas for a question about Paris: no useful chunk, and an answer they do not support.
    assert (retrieval["service"], retrieval["failing"]) == ("search", ["context_precision", "faithfulness"])
    assert retrieval["scores"] == {"context_precision": 0.0, "faithfulness": 0.0}
    assert [d["useful"] for d in retrieval["documents"]] == [False, False, False]
    assert retrieval["retrieved_ids"] == ["doc-0", "doc-1", "doc-2"]
    for row in rows.values():
        assert row["interaction_id"] == row["id"] and row["trace_id"] == str(row["id"]).split(":")[0]
        assert row["reference"] is None and row["labels"] == {"context_precision": None, "faithfulness": None}

    # The worst one per service and route (one window): the same two.
    worst = tmp_path / "worst.jsonl"
    assert (
        main(
            ["capture", "--results-file", str(results), "--worst", "1", "--window", "1h", "--out", str(worst)]
        )
        == 0
    )
    assert sorted(row["id"] for row in lines(worst)) == sorted(bad.values())

    # label-queue reads the captured items as results and as its --inputs: one line each, to label.
    queue = tmp_path / "queue.jsonl"
    code = main([
        "label-queue", str(captured), "--fraction", "1", "--inputs", str(captured), "--out", str(queue),
    ])  # fmt: skip
    assert code == 0
    queued = {row["interaction_id"]: row for row in lines(queue)}
    assert sorted(queued) == sorted(bad.values())
    assert queued[bad["answer"]]["scores"] == answer["scores"]
    assert queued[bad["answer"]]["response"] == BAD_ANSWER

    # A person writes the reference of one; the other is not labelled yet.
    labelled = tmp_path / "labelled.jsonl"
    filled = [
        {**row, "reference": "Paris."} if row["id"] == bad["answer"] else row for row in lines(captured)
    ]
    labelled.write_text("".join(json.dumps(row) + "\n" for row in filled))
    golden = tmp_path / "golden.jsonl"
    golden.write_text(
        json.dumps({"id": "hours", "question": "Opening hours?", "reference": "9 to 5."}) + "\n"
    )
    capsys.readouterr()
    assert main(["capture", "--add-to", str(golden), str(labelled)]) == 0
    assert "1 added, 0 updated, 0 unchanged; 1 not labelled yet" in capsys.readouterr().err
    first = golden.read_text()
    merged = lines(golden)
    assert [row["id"] for row in merged] == ["hours", bad["answer"]]
    assert merged[1]["reference"] == "Paris." and "response" not in merged[1]
    assert merged[1]["captured"]["response"] == BAD_ANSWER and merged[1]["captured"]["failing"] == [
        "faithfulness"
    ]

    # Idempotent: the same file again leaves the golden set as it was.
    assert main(["capture", "--add-to", str(golden), str(labelled)]) == 0
    assert "0 added, 0 updated, 1 unchanged" in capsys.readouterr().err
    assert golden.read_text() == first
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".golden")) == []  # no temp left

    # ragpulse eval accepts the golden set.
    assert main(["eval", str(golden), "--out", str(tmp_path / "eval")]) == 0
    assert len(lines(tmp_path / "eval" / "results.jsonl")) == 2


def test_capture_reads_the_kafka_results_topic(broker: Broker, tmp_path: Path) -> None:
    topic = broker.create_topic(partitions=2)
    results_topic = broker.create_topic(partitions=1)
    agent = kafka_agent(
        broker, topic, f"ragpulse-test-{uuid.uuid4().hex[:8]}", RAGPULSE_METRICS=METRICS,
        RAGPULSE_RESULTS_TOPIC=results_topic, RAGPULSE_RESULTS_INCLUDE_TEXT="true",
    )  # fmt: skip
    spans, bad = traffic()
    try:
        agent.wait_ready()
        produce_otlp(broker.bootstrap, topic, spans)
        assert len(consume_all(broker.bootstrap, results_topic, expected=8)) == 8
    finally:
        agent.stop()
        agent.kill()
    captured = tmp_path / "captured.jsonl"
    code = main([
        "capture", "--from-results-topic", "--worst", "1", "--metric", "faithfulness",
        "--set", f"kafka_bootstrap={broker.bootstrap}", "--set", f"results_topic={results_topic}",
        "--out", str(captured),
    ])  # fmt: skip
    assert code == 0
    rows = {row["id"]: row for row in lines(captured)}
    # Ranked by faithfulness alone, the worst of each service: the bad answer, the bad retrieval.
    assert sorted(rows) == sorted(bad.values())
    scores = rows[bad["answer"]]["scores"]
    assert scores["faithfulness"] < 0.5 <= scores["context_precision"]
    assert rows[bad["answer"]]["failing"] == ["faithfulness"]
    assert rows[bad["retrieval"]]["scores"] == {"context_precision": 0.0, "faithfulness": 0.0}
    assert rows[bad["answer"]]["question"] == "Capital of France? (checkout, bad)"


NAMES_PARIS = {
    "name": "names_paris",
    "question": "Is Paris the capital given?",
    "reads": ["response"],
    "scale": "1-5",
    "anchors": {1: "another city", 5: "Paris, plainly"},
}


def test_a_custom_criterion_is_the_capture_key_and_its_answer_travels_to_the_labeller(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An agent judging with the LLM judge (the test LLM server) scores a custom criterion; capture
    ranks by it, and the judge's answer rides on the captured item and through label-queue."""
    question = str(NAMES_PARIS["question"])
    good, wrong = (criterion_answer(question, "1-5", text) for text in (PARIS_RESPONSE, BAD_ANSWER))
    assert (good, wrong) == (4, 2)  # the server's answers: 0.75 and 0.25
    results = tmp_path / "results.jsonl"
    with FakeLLMServer() as server:
        agent = AgentProcess(
            env={"RAGPULSE_METRICS": "faithfulness", "RAGPULSE_CRITERIA": json.dumps([NAMES_PARIS]),
                 "RAGPULSE_JUDGE_MODEL": "openai/ragpulse-test-judge",
                 "RAGPULSE_JUDGE_API_BASE": server.api_base,
                 "RAGPULSE_JUDGE_API_KEY": "test-key", "RAGPULSE_RESULTS_FILE": str(results),
                 "RAGPULSE_RESULTS_INCLUDE_TEXT": "true"}
        )  # fmt: skip
        spans, bad = traffic()
        try:
            agent.wait_ready()
            send(agent.traces_url, spans)
            scraped = agent.wait_for(lambda s: s.total("ragpulse_score_count") >= 16, timeout=60)
        finally:
            agent.stop()
            agent.kill()
    assert scraped.total("ragpulse_score_count") == 16, agent.log()  # 8 interactions x 2 metrics

    # The criterion as the only threshold: exactly the wrong answer, with the judge's answer.
    captured = tmp_path / "captured.jsonl"
    code = main(
        ["capture", "--results-file", str(results), "--below", "names_paris=0.5", "--out", str(captured)]
    )
    assert code == 0
    assert "capture: 1 of 8 interactions from" in capsys.readouterr().err
    (row,) = lines(captured)
    assert row["id"] == bad["answer"] and row["response"] == BAD_ANSWER
    assert row["scores"]["names_paris"] == 0.25 and row["failing"] == ["faithfulness", "names_paris"]
    assert row["explanations"] == {"names_paris": "answered 2 of 5"}  # faithfulness has no answer text
    assert row["labels"] == {"faithfulness": None, "names_paris": None}

    # Ranked by the criterion alone (--metric), the worst of each service and route: checkout's
    # wrong answer; search answered well everywhere (4 of 5), so its worst is one of those.
    worst = tmp_path / "worst.jsonl"
    code = main(["capture", "--results-file", str(results), "--worst", "1", "--metric", "names_paris",
                 "--out", str(worst)])  # fmt: skip
    assert code == 0
    by_service = {r["service"]: r for r in lines(worst)}
    assert by_service["checkout"]["id"] == bad["answer"]
    assert by_service["search"]["scores"]["names_paris"] == 0.75
    # Its criterion score is not failing, so no explanation is carried for it.
    assert "names_paris" not in by_service["search"]["failing"]
    assert "names_paris" not in by_service["search"].get("explanations", {})

    # label-queue, from the captured items and from the results file: the answer goes along.
    queue = tmp_path / "queue.jsonl"
    code = main(
        ["label-queue", str(captured), "--fraction", "1", "--inputs", str(captured), "--out", str(queue)]
    )
    assert code == 0
    (queued,) = lines(queue)
    assert queued["interaction_id"] == bad["answer"] and queued["scores"]["names_paris"] == 0.25
    assert queued["explanations"] == {"names_paris": "answered 2 of 5"} and queued["response"] == BAD_ANSWER
    from_file = tmp_path / "from-file.jsonl"
    code = main(["label-queue", "--results-file", str(results), "--fraction", "1", "--out", str(from_file)])
    assert code == 0
    every = {r["interaction_id"]: r for r in lines(from_file)}
    assert every[bad["answer"]]["explanations"] == {"names_paris": "answered 2 of 5"}
    assert {r["explanations"]["names_paris"] for i, r in every.items() if i != bad["answer"]} == {
        "answered 4 of 5"
    }

    # A person's label on the criterion reads back as a label of that metric, with the score.
    labelled = tmp_path / "labelled.jsonl"
    labelled.write_text(json.dumps({**queued, "labels": {"faithfulness": None, "names_paris": 0.0}}) + "\n")
    found, unlabelled = parse_label_lines(labelled.read_text().strip(), "person")
    assert unlabelled == 1
    assert [(x.interaction_id, x.metric, x.value, x.score) for x in found] == [
        (bad["answer"], "names_paris", 0.0, 0.25)
    ]
