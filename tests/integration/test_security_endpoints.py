"""Locked-down endpoints, tested with real clients against `ragpulse run` as a process.

- OTLP/HTTP receiver: TLS with a certificate the test makes (self-signed CA + server
  certificate), a bearer token sent by the real OpenTelemetry SDK exporter (its `headers`, and
  OTEL_EXPORTER_OTLP_HEADERS), and mutual TLS with a client certificate.
- /metrics: a Prometheus web configuration file (TLS + bcrypt basic auth) checked with urllib,
  and scraped by a real Prometheus (Debian package `prometheus`) configured with the same CA and
  credentials.
Every refusal is a 401 (or a failed handshake) and counted in
ragpulse_requests_refused_total{source,reason="unauthorized"}.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.support.agent_process import AgentProcess
from tests.support.net import Scrape, free_port, scrape
from tests.support.spans import capital_of_france
from tests.support.tls import Pki

pytestmark = pytest.mark.integration

TOKEN = "otlp-token-5f2c1e9a"


@pytest.fixture(autouse=True)
def exporter_uses_its_certificate_file(monkeypatch: pytest.MonkeyPatch) -> None:
    # requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE override a session's CA file (the SDK
    # exporter's certificate_file); some machines set them globally.
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)


def export(endpoint: str, **options: object) -> SpanExportResult:
    exporter = OTLPSpanExporter(endpoint=endpoint, timeout=5, **options)  # type: ignore[arg-type]
    try:
        return exporter.export(capital_of_france())
    finally:
        exporter.shutdown()


def https_traces_url(agent: AgentProcess) -> str:
    return agent.traces_url.replace("http://", "https://")


def refused(result: Scrape, source: str) -> float:
    return result.total("ragpulse_requests_refused_total", source=source, reason="unauthorized")


@pytest.fixture
def tls_agent(pki: Pki) -> Iterator[AgentProcess]:
    agent = AgentProcess(
        env={
            "RAGPULSE_OTLP_TLS_CERT_FILE": str(pki.server_cert),
            "RAGPULSE_OTLP_TLS_KEY_FILE": str(pki.server_key),
            "RAGPULSE_OTLP_BEARER_TOKEN": TOKEN,
        }
    )
    try:
        agent.wait_ready()
        yield agent
    finally:
        agent.kill()


def test_otlp_over_tls_with_a_bearer_token_from_the_sdk_exporter(
    tls_agent: AgentProcess, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = https_traces_url(tls_agent)
    # No token, a wrong token, the wrong scheme: refused, counted, nothing taken in.
    assert export(url, certificate_file=str(pki.ca)) is SpanExportResult.FAILURE
    assert export(url, certificate_file=str(pki.ca), headers={"authorization": "Bearer wrong"}) is (
        SpanExportResult.FAILURE
    )
    assert export(url, certificate_file=str(pki.ca), headers={"authorization": f"Basic {TOKEN}"}) is (
        SpanExportResult.FAILURE
    )
    result = tls_agent.wait_for(lambda s: refused(s, "otlp_http") == 3)
    assert refused(result, "otlp_http") == 3
    assert result.total("ragpulse_spans_received_total") == 0

    # The token in the exporter's headers, then in the standard environment variable.
    assert export(url, certificate_file=str(pki.ca), headers={"authorization": f"Bearer {TOKEN}"}) is (
        SpanExportResult.SUCCESS
    )
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"authorization=Bearer%20{TOKEN}")
    assert export(url, certificate_file=str(pki.ca)) is SpanExportResult.SUCCESS
    result = tls_agent.wait_for(lambda s: s.total("ragpulse_interactions_total") == 2)
    assert result.total("ragpulse_interactions_total") == 2
    assert refused(result, "otlp_http") == 3

    # A client that does not trust the CA, or speaks plain HTTP, gets nowhere.
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_HEADERS")
    headers = {"authorization": f"Bearer {TOKEN}"}
    assert export(url, certificate_file=str(pki.other_ca), headers=headers) is SpanExportResult.FAILURE
    assert export(tls_agent.traces_url, headers=headers) is SpanExportResult.FAILURE
    assert scrape(tls_agent.metrics_url).total("ragpulse_interactions_total") == 2
    # The token is a secret: never in the log.
    assert TOKEN not in tls_agent.log()


def test_mutual_tls_requires_a_client_certificate_signed_by_the_client_ca(pki: Pki) -> None:
    agent = AgentProcess(
        env={
            "RAGPULSE_OTLP_TLS_CERT_FILE": str(pki.server_cert),
            "RAGPULSE_OTLP_TLS_KEY_FILE": str(pki.server_key),
            "RAGPULSE_OTLP_TLS_CLIENT_CA_FILE": str(pki.ca),
        }
    )
    try:
        agent.wait_ready()
        url = https_traces_url(agent)
        assert export(url, certificate_file=str(pki.ca)) is SpanExportResult.FAILURE
        assert (
            export(
                url,
                certificate_file=str(pki.ca),
                client_certificate_file=str(pki.client_cert),
                client_key_file=str(pki.client_key),
            )
            is SpanExportResult.SUCCESS
        )
        result = agent.wait_for(lambda s: s.total("ragpulse_interactions_total") == 1)
        assert result.total("ragpulse_interactions_total") == 1
    finally:
        agent.kill()


def test_bad_tls_settings_stop_the_agent_at_start_with_a_clear_message(pki: Pki, tmp_path: Path) -> None:
    agent = AgentProcess(
        env={
            "RAGPULSE_OTLP_TLS_CERT_FILE": str(pki.server_cert),
            "RAGPULSE_OTLP_TLS_KEY_FILE": str(tmp_path / "nope"),
        }
    )
    try:
        assert agent.process.wait(60) == 2
    finally:
        agent.kill()
    assert "cannot load TLS certificate" in agent.log()


# -- /metrics with a Prometheus web configuration file -------------------------------------------

USER, PASSWORD = "prometheus", "scrape-pw-4e1d"


def write_web_config(directory: Path, pki: Pki) -> Path:
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=10)).decode()
    path = directory / "web-config.yml"
    # Relative certificate paths are relative to the file, as in Prometheus.
    shutil.copy(pki.server_cert, directory / "metrics.pem")
    shutil.copy(pki.server_key, directory / "metrics-key.pem")
    path.write_text(
        "tls_server_config:\n"
        "  cert_file: metrics.pem\n"
        "  key_file: metrics-key.pem\n"
        "basic_auth_users:\n"
        f"  {USER}: {hashed}\n"
    )
    return path


def get(url: str, context: ssl.SSLContext, auth: tuple[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def metrics_agent(pki: Pki, tmp_path: Path) -> Iterator[AgentProcess]:
    agent = AgentProcess(env={"RAGPULSE_METRICS_WEB_CONFIG_FILE": str(write_web_config(tmp_path, pki))})
    context = ssl.create_default_context(cafile=str(pki.ca))
    url = f"https://127.0.0.1:{agent.metrics_port}/readyz"
    deadline = time.monotonic() + 60
    try:
        while True:
            assert agent.process.poll() is None, agent.log()
            try:
                if get(url, context, (USER, PASSWORD))[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, agent.log()
            time.sleep(0.1)
        yield agent
    finally:
        agent.kill()


def test_metrics_need_tls_and_basic_auth_from_the_web_config(metrics_agent: AgentProcess, pki: Pki) -> None:
    context = ssl.create_default_context(cafile=str(pki.ca))
    url = f"https://127.0.0.1:{metrics_agent.metrics_port}/metrics"
    assert get(url, context)[0] == 401
    assert get(url, context, (USER, "wrong"))[0] == 401
    assert get(url, context, ("nobody", PASSWORD))[0] == 401
    assert get(url.replace("/metrics", "/readyz"), context)[0] == 401
    status, body = get(url, context, (USER, PASSWORD))
    assert status == 200 and "ragpulse_spans_received_total" in body
    # readiness polling before this test was authenticated; the four attempts above were refused.
    assert 'ragpulse_requests_refused_total{reason="unauthorized",source="metrics"} 4.0' in body
    with pytest.raises(OSError):  # plain HTTP to a TLS port: no answer worth the name
        urllib.request.urlopen(url.replace("https://", "http://"), timeout=10).read()
    assert PASSWORD not in metrics_agent.log()


def test_prometheus_scrapes_the_locked_down_endpoint(
    metrics_agent: AgentProcess, pki: Pki, tmp_path: Path
) -> None:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("needs the Debian package 'prometheus'")
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        json.dumps(
            {
                "global": {"scrape_interval": "1s"},
                "scrape_configs": [
                    {
                        "job_name": "ragpulse",
                        "scheme": "https",
                        "tls_config": {"ca_file": str(pki.ca)},
                        "basic_auth": {"username": USER, "password": PASSWORD},
                        "static_configs": [{"targets": [f"127.0.0.1:{metrics_agent.metrics_port}"]}],
                    },
                    {
                        "job_name": "ragpulse-no-credentials",
                        "scheme": "https",
                        "tls_config": {"ca_file": str(pki.ca)},
                        "static_configs": [{"targets": [f"127.0.0.1:{metrics_agent.metrics_port}"]}],
                    },
                ],
            }
        )
    )
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    try:
        deadline = time.monotonic() + 90
        up: dict[str, str] = {}
        while time.monotonic() < deadline and len(up) < 2:
            try:
                query = f"http://127.0.0.1:{port}/api/v1/query?query=up"
                with urllib.request.urlopen(query, timeout=5) as response:
                    result = json.load(response)["data"]["result"]
                up = {r["metric"]["job"]: r["value"][1] for r in result}
            except (OSError, KeyError, ValueError):
                pass
            time.sleep(0.5)
        assert up == {"ragpulse": "1", "ragpulse-no-credentials": "0"}
    finally:
        process.terminate()
        process.wait(30)
