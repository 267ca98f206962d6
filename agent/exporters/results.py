"""The durable results exporters of the `results` settings section: each evaluated interaction to
a Kafka topic (agent/exporters/kafka_results.py) and/or as OTLP to a trace backend
(agent/exporters/otlp_results.py) and/or to a local JSONL file (agent/exporters/results_file.py).
None is built unless configured."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.config import ResultsSettings
from agent.exporters.base import Exporter
from agent.infra.waiting import Dependencies
from agent.telemetry import EvaluationTelemetry


def build(
    section: ResultsSettings,
    telemetry: EvaluationTelemetry,
    *,
    kafka_connection: Mapping[str, Any],
    documents_key: str | None,
    dependencies: Dependencies,
) -> list[Exporter]:
    """`kafka_connection`: the kafka-python options of the brokers (agent/sources/kafka.py);
    `documents_key`: names documents on the results as ragpulse_document_verdicts does."""
    exporters: list[Exporter] = []
    if section.file:
        from pathlib import Path

        from agent.exporters.results_file import ResultsFileExporter

        exporters.append(
            ResultsFileExporter(
                Path(section.file),
                max_bytes=section.file_max_bytes,
                keep=section.file_keep,
                include_text=section.include_text,
                documents_key=documents_key,
            )
        )
    if section.topic:
        # Imported here: only a configured results topic loads the Kafka client.
        from agent.exporters.kafka_results import KafkaResultsExporter

        exporters.append(
            KafkaResultsExporter(
                dict(kafka_connection),
                section.topic,
                include_text=section.include_text,
                documents_key=documents_key,
                dependencies=dependencies,
            )
        )
    if section.otlp_endpoint:
        from agent.exporters.otlp_results import OtlpResultsExporter

        exporters.append(
            OtlpResultsExporter(
                section.otlp_endpoint,
                telemetry,
                headers=section.otlp_header_map,
                include_text=section.include_text,
                documents_key=documents_key,
                timeout_seconds=section.otlp_timeout_seconds,
                dependencies=dependencies,
            )
        )
    return exporters
