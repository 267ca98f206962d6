"""The deployment files agree with the code: settings exist and validate, topics and ports match."""

from __future__ import annotations

from pathlib import Path

import yaml

from agent.config import load_settings

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_settings_for_ragpulse_validate() -> None:
    environment = compose()["services"]["ragpulse"]["environment"]
    settings = load_settings(environ={k: str(v) for k, v in environment.items()})
    assert settings.source == "kafka"
    assert settings.metrics_address == ("0.0.0.0", 9464)


def test_collector_writes_what_ragpulse_reads() -> None:
    environment = compose()["services"]["ragpulse"]["environment"]
    collector = yaml.safe_load((ROOT / "deploy/otel-collector/config.yaml").read_text())
    kafka = collector["exporters"]["kafka"]
    assert kafka["topic"] == environment["RAGPULSE_KAFKA_TOPIC"]
    assert kafka["encoding"] == environment["RAGPULSE_KAFKA_ENCODING"]
    assert environment["RAGPULSE_KAFKA_BOOTSTRAP"] in kafka["brokers"]
    assert "kafka" in collector["service"]["pipelines"]["traces"]["exporters"]


def test_prometheus_scrapes_the_agents_metrics_port() -> None:
    scrape = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    targets = [t for job in scrape["scrape_configs"] for c in job["static_configs"] for t in c["targets"]]
    port = compose()["services"]["ragpulse"]["environment"]["RAGPULSE_METRICS_LISTEN"].rsplit(":", 1)[1]
    assert f"ragpulse:{port}" in targets


def test_image_installs_from_the_hashed_lock() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "--require-hashes" in dockerfile and "requirements/runtime.lock" in dockerfile
    assert "--no-deps ." in dockerfile
