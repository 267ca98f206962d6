"""The deployment files agree with the code and with their specifications.

docker-compose.yml is validated against the Compose Specification schema (the copy vendored and
kept current by check-jsonschema), the Kubernetes manifests against the Kubernetes schemas
(kubernetes-validate); every file, port, setting and image they reference is checked against the
code; generated rules and dashboards must match their generators.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.config import DEFAULT_ALERT_THRESHOLDS, load_settings
from tests.support.repo import load_module

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy/k8s"


def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def services() -> dict[str, Any]:
    return compose()["services"]


def ragpulse_replicas() -> dict[str, dict[str, Any]]:
    return {name: s for name, s in services().items() if name.startswith("ragpulse-")}


def published(service: dict[str, Any]) -> dict[int, int]:
    """container port -> host port of a compose service."""
    ports = {}
    for entry in service.get("ports", []):
        host, _, container = str(entry).rpartition(":")
        ports[int(container)] = int(host)
    return ports


def rules_module() -> Any:
    return load_module("deploy/prometheus/generate_rules.py")


# -- Compose ---------------------------------------------------------------------------------


def _check_jsonschema(*args: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip(
        "check_jsonschema", reason="check-jsonschema not installed: pip install -r requirements/test.lock"
    )
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_compose_file_matches_the_compose_specification() -> None:
    result = _check_jsonschema(str(ROOT / "docker-compose.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_validator_rejects_a_broken_file(tmp_path: Path) -> None:
    broken = compose()
    broken["services"]["redis"]["restart_policy"] = "always"  # belongs under deploy:
    broken["services"]["grafana"]["depends_on"] = {"prometheus": {"condition": "when_ready"}}
    path = tmp_path / "docker-compose.yml"
    path.write_text(yaml.safe_dump(broken))
    result = _check_jsonschema(str(path))
    assert result.returncode != 0
    assert "$.services.redis" in result.stdout and "$.services.grafana" in result.stdout


def test_compose_runs_two_replicas_in_one_consumer_group_with_valid_settings() -> None:
    replicas = ragpulse_replicas()
    assert len(replicas) == 2
    groups = set()
    for service in replicas.values():
        environment = {k: str(v) for k, v in service["environment"].items()}
        settings = load_settings(environ=environment)
        assert settings.source == "kafka"
        assert settings.redis.url, "replicas share the verdict cache, idempotency keys and budget"
        assert settings.alerts.thresholds == DEFAULT_ALERT_THRESHOLDS
        groups.add(settings.kafka.group_id)
        assert settings.server.address == ("0.0.0.0", 9464)
        assert service["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert len(groups) == 1
    host_ports = [published(s)[9464] for s in replicas.values()]
    assert len(set(host_ports)) == 2


def test_kafka_runs_kraft_without_zookeeper() -> None:
    kafka = services()["kafka"]
    assert "zookeeper" not in services()
    environment = kafka["environment"]
    assert set(environment["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert not any("ZOOKEEPER" in key for key in environment)
    bootstrap = {str(s["environment"]["RAGPULSE_KAFKA_BOOTSTRAP"]) for s in ragpulse_replicas().values()}
    assert bootstrap == {environment["KAFKA_ADVERTISED_LISTENERS"].removeprefix("PLAINTEXT://")}
    assert int(environment["KAFKA_NUM_PARTITIONS"]) >= len(ragpulse_replicas())


def test_collector_writes_what_ragpulse_reads() -> None:
    collector = yaml.safe_load((ROOT / "deploy/otel-collector/config.yaml").read_text())
    kafka = collector["exporters"]["kafka"]
    for service in ragpulse_replicas().values():
        environment = service["environment"]
        assert kafka["topic"] == environment["RAGPULSE_KAFKA_TOPIC"]
        assert kafka["encoding"] == environment["RAGPULSE_KAFKA_ENCODING"]
        assert environment["RAGPULSE_KAFKA_BOOTSTRAP"] in kafka["brokers"]
    assert kafka["partition_traces_by_id"] is True
    traces = collector["service"]["pipelines"]["traces"]
    assert "kafka" in traces["exporters"] and "otlp" in traces["receivers"]
    http_port = int(collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].rsplit(":", 1)[1])
    assert http_port in published(services()["otel-collector"])
    # The demo app sends to the Collector's OTLP/HTTP receiver.
    command = services()["demo-app"]["command"]
    assert command[command.index("--endpoint") + 1] == f"http://otel-collector:{http_port}"


def test_demo_app_is_a_ragpulse_subcommand() -> None:
    command = services()["demo-app"]["command"]
    result = subprocess.run(
        [sys.executable, "-m", "agent", command[0], "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "--endpoint" in result.stdout


def test_prometheus_scrapes_every_replica_and_alerts_through_alertmanager() -> None:
    config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {rules_module().RuleParams().job, "pushgateway"}
    job = jobs[rules_module().RuleParams().job]
    targets = {t for c in job["static_configs"] for t in c["targets"]}
    assert targets == {f"{name}:9464" for name in ragpulse_replicas()}
    (alertmanager,) = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    host, port = alertmanager.split(":")
    assert host in services() and int(port) in published(services()[host])
    mounts = _mounts("prometheus")
    for rule_file in config["rule_files"]:
        assert _host_path(mounts, rule_file).exists(), rule_file


def _mounts(service: str) -> dict[str, Path]:
    """container path -> host path of a service's bind mounts (named volumes left out)."""
    mounts = {}
    for volume in services()[service].get("volumes", []):
        host, container = volume.split(":")[:2]
        if host.startswith("."):
            mounts[container] = (ROOT / host).resolve()
    return mounts


def _named_volumes(service: str) -> dict[str, str]:
    """container path -> volume name of a service's named volumes."""
    named = {}
    for volume in services()[service].get("volumes", []):
        host, container = volume.split(":")[:2]
        if not host.startswith("."):
            named[container] = host
    return named


def _host_path(mounts: dict[str, Path], container_path: str) -> Path:
    for container, host in mounts.items():
        if container_path == container or container_path.startswith(container.rstrip("/") + "/"):
            return host / os.path.relpath(container_path, container)
    raise AssertionError(f"{container_path} is not mounted")


def test_every_mounted_file_exists_and_every_image_is_pinned() -> None:
    declared = set(compose().get("volumes") or {})
    for name, service in services().items():
        for volume in service.get("volumes", []):
            host = volume.split(":")[0]
            if host.startswith("."):
                assert (ROOT / host).exists(), f"{name} mounts {host}, which does not exist"
            else:
                assert host in declared, f"{name} mounts the volume {host}, not declared under volumes:"
        image = service.get("image", "")
        assert "build" in service or re.search(r":[\w.]+$", image), f"{name}: pin the image tag"
        assert not image.endswith(":latest"), name
    for name in ("demo-app", *ragpulse_replicas()):
        assert services()[name]["build"] == "."


def test_grafana_is_provisioned_with_the_datasource_and_the_dashboards() -> None:
    mounts = _mounts("grafana")
    provisioning = _host_path(mounts, "/etc/grafana/provisioning")
    datasources = yaml.safe_load((provisioning / "datasources/prometheus.yml").read_text())
    (datasource,) = datasources["datasources"]
    assert datasource["type"] == "prometheus"
    assert datasource["url"] == f"http://prometheus:{published(services()['prometheus'])[9090] and 9090}"
    providers = yaml.safe_load((provisioning / "dashboards/ragpulse.yml").read_text())
    (provider,) = providers["providers"]
    dashboards = _host_path(mounts, provider["options"]["path"])
    assert dashboards == (ROOT / "dashboards").resolve()
    assert sorted(p.name for p in dashboards.glob("*.json")) == [
        "ragpulse-judges.json",
        "ragpulse-pipeline.json",
        "ragpulse-quality.json",
    ]
    home = services()["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert _host_path(mounts, home).exists()


def test_state_outlives_the_containers_in_named_volumes() -> None:
    """What an operator would lose on `docker compose down`, each in a named volume where the
    image keeps it."""
    expected = {
        "kafka": ("/var/lib/kafka/data", "kafka-data"),
        "prometheus": ("/prometheus", "prometheus-data"),
        "alertmanager": ("/alertmanager", "alertmanager-data"),
        "grafana": ("/var/lib/grafana", "grafana-data"),
        "canary": ("/var/lib/ragpulse-canary", "canary-state"),
    }
    for service, (path, volume) in expected.items():
        assert _named_volumes(service).get(path) == volume, service
    assert services()["kafka"]["environment"]["KAFKA_LOG_DIRS"] == "/var/lib/kafka/data"
    assert "--storage.path=/alertmanager" in services()["alertmanager"]["command"]
    # The image makes the canary's directory its runtime user's, so a fresh volume is writable.
    dockerfile = (ROOT / "Dockerfile").read_text()
    (user,) = re.findall(r"^USER (\S+)", dockerfile, re.M)
    assert f"chown {user} /var/lib/ragpulse-canary" in dockerfile


def _compose_environment(service: str, mounts: dict[str, Path]) -> dict[str, str]:
    """The service's variables, paths under its bind mounts rebased onto the repository."""
    return {k: rebased(str(v), mounts) for k, v in services()[service].get("environment", {}).items()}


def test_compose_canary_judges_like_the_agents_and_pushes_to_the_pushgateway(tmp_path: Path) -> None:
    """The compose canary's own command and settings, run once against a recording Pushgateway."""
    from agent import cli
    from agent.commands import canary as canary_command
    from tests.support.pushgateway import Pushgateway

    canary = services()["canary"]
    args = cli._parser().parse_args(canary["command"])
    assert args.handler is canary_command._main and args.schedule
    gateway_host, _, gateway_port = args.pushgateway.removeprefix("http://").partition(":")
    assert gateway_host in services() and int(gateway_port) in published(services()[gateway_host])
    assert gateway_host in canary["depends_on"]
    config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    pushgateway_job = next(j for j in config["scrape_configs"] if j["job_name"] == "pushgateway")
    assert pushgateway_job["honor_labels"] is True
    assert pushgateway_job["static_configs"][0]["targets"] == [f"{gateway_host}:{gateway_port}"]

    mounts = _mounts("canary")
    mounts[next(iter(_named_volumes("canary")))] = tmp_path  # the state volume
    environment = _compose_environment("canary", mounts)
    settings = load_settings(environ=environment)
    agents = load_settings(
        environ={k: str(v) for k, v in next(iter(ragpulse_replicas().values()))["environment"].items()}
    )
    assert settings.judge == agents.judge, "the canary watches the agents' judge"
    assert Path(settings.canary.state_file).parent == tmp_path
    # The frozen set is the one of the Kubernetes ConfigMap.
    config_map = manifests()["probes-configmap.yaml"]["data"]
    for key in ("canary-items.jsonl", "canary-labels.jsonl", "golden.jsonl"):
        assert (ROOT / "deploy/probes" / key).read_text() == config_map[key], key

    once = [a for a in canary["command"] if a != "--schedule"]
    with Pushgateway() as gateway:
        once[once.index("--pushgateway") + 1] = gateway.url
        result = subprocess.run(
            [sys.executable, "-m", "agent", *once], env={"PATH": "/usr/bin:/bin", **environment},
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    (push,) = gateway.received()
    assert push.path == "/metrics/job/ragpulse-canary"
    assert push.scrape().value("ragpulse_canary_judge_moved") == 0
    assert json.loads(Path(settings.canary.state_file).read_text())["accepted"]
    assert not list(tmp_path.glob("ragpulse-canary*")), "nothing lands in the working directory"


def test_compose_probe_runs_on_demand_through_the_collector(tmp_path: Path) -> None:
    from agent import cli
    from agent.commands import probe as probe_command
    from agent.commands.probe import golden_items, prober_config

    probe = services()["probe"]
    assert probe["profiles"] == ["probes"], "it needs the user's app: only with --profile probes"
    command = [re.sub(r"\$\{PROBE_ENDPOINT:-([^}]*)\}", r"\1", a) for a in probe["command"]]
    args = cli._parser().parse_args(command)
    assert args.handler is probe_command._main and args.schedule and args.endpoint.startswith("http://")
    mounts = _mounts("probe")
    environment = _compose_environment("probe", mounts)
    copy = tmp_path / "probes.yaml"  # its paths under the mounts pointed into the repository
    copy.write_text(rebased(Path(environment["RAGPULSE_CONFIG"]).read_text(), mounts))
    settings = load_settings(environ={**environment, "RAGPULSE_CONFIG": str(copy)})
    assert len(golden_items(Path(settings.probes.golden_set))) >= 1
    assert prober_config(settings, args.endpoint).endpoints[0].url == args.endpoint
    collector = yaml.safe_load((ROOT / "deploy/otel-collector/config.yaml").read_text())
    http_port = collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].rsplit(":", 1)[1]
    assert settings.probes.otlp_endpoint == f"http://otel-collector:{http_port}"


# -- Dockerfile ------------------------------------------------------------------------------


def test_image_is_multi_stage_slim_non_root_with_a_healthcheck() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+)", dockerfile, re.M)
    assert len(stages) >= 2 and all(s.endswith("-slim") or s.split(" ")[0].endswith("-slim") for s in stages)
    assert "--require-hashes" in dockerfile and "requirements/runtime.lock" in dockerfile
    assert "--no-deps ." in dockerfile
    (user,) = re.findall(r"^USER (\S+)", dockerfile, re.M)
    assert user.split(":")[0] not in ("0", "root")
    assert re.search(r"^HEALTHCHECK .*\n?.*/healthz", dockerfile, re.M)
    # Keys only at run time: no ENV or ARG names a key, token, password or secret.
    for line in re.findall(r"^(?:ENV|ARG) .*$", dockerfile, re.M):
        assert not re.search(r"KEY|TOKEN|PASSWORD|SECRET", line.split("#")[0]), line
    assert "deploy/docker/entrypoint.sh" in dockerfile
    exposed = {int(p) for p in re.findall(r"^EXPOSE (.*)$", dockerfile, re.M)[0].split()}
    assert exposed == {4317, 4318, 9464}


def test_image_listens_on_all_interfaces_on_the_ports_it_exposes() -> None:
    """The image's settings bind OTLP/gRPC, OTLP/HTTP and /metrics on 0.0.0.0 (another
    container must reach them), on exactly the ports EXPOSE declares."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    environment = dict(re.findall(r"\b(RAGPULSE_[A-Z_]+)=(\S+)", dockerfile))
    settings = load_settings(environ=environment)
    exposed = {int(p) for p in re.findall(r"^EXPOSE (.*)$", dockerfile, re.M)[0].split()}
    bound = {settings.otlp.address, settings.otlp.grpc_address, settings.server.address}
    assert bound == {("0.0.0.0", port) for port in exposed}


def test_entrypoint_reads_keys_from_mounted_secret_files(tmp_path: Path) -> None:
    secret = tmp_path / "judge_key"
    secret.write_text("sk-from-a-file")
    stub = tmp_path / "bin" / "ragpulse"
    stub.parent.mkdir()
    stub.write_text('#!/bin/sh\necho "args=$*"\nenv\n')
    stub.chmod(0o755)
    environment = {"PATH": f"{stub.parent}:/usr/bin:/bin", "RAGPULSE_JUDGE_API_KEY_FILE": str(secret)}
    result = subprocess.run(
        ["sh", str(ROOT / "deploy/docker/entrypoint.sh"), "run"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert "args=run" in result.stdout
    assert "RAGPULSE_JUDGE_API_KEY=sk-from-a-file" in result.stdout.splitlines()
    # The _FILE variable is gone: the agent rejects settings it does not know.
    assert "RAGPULSE_JUDGE_API_KEY_FILE" not in result.stdout

    environment["RAGPULSE_JUDGE_API_KEY_FILE"] = str(tmp_path / "missing")
    result = subprocess.run(
        ["sh", str(ROOT / "deploy/docker/entrypoint.sh"), "run"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2 and "cannot be read" in result.stderr


# -- Rules and dashboards --------------------------------------------------------------------


def test_committed_rule_files_are_what_the_generator_writes() -> None:
    module = rules_module()
    for path, text in module.outputs().items():
        assert path.read_text() == text, f"{path} is stale: python deploy/prometheus/generate_rules.py"
    rule_file = yaml.safe_load(module.RULES_FILE.read_text())
    prometheus_rule = yaml.safe_load(module.K8S_RULE_FILE.read_text())
    assert prometheus_rule["spec"]["groups"] == rule_file["groups"]


def test_rule_fallback_thresholds_are_the_agents_defaults() -> None:
    assert rules_module().DEFAULT_THRESHOLDS == DEFAULT_ALERT_THRESHOLDS


def test_every_alert_is_documented_and_labelled() -> None:
    runbook = (ROOT / "docs/runbooks.md").read_text()
    alerts = [r for g in rules_module().rule_groups() for r in g["rules"] if "alert" in r]
    assert len(alerts) >= 11
    for rule in alerts:
        name = rule["alert"]
        assert re.search(rf"^## {name}$", runbook, re.M), f"docs/runbooks.md has no section {name}"
        section = runbook.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
        for part in ("**Means:**", "**Check first:**", "**Silence:**"):
            assert part in section, f"{name}: runbook section lacks {part}"
        assert rule["labels"]["severity"] in ("critical", "warning")
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"]
        assert annotations["runbook_url"].endswith(f"docs/runbooks.md#{name.lower()}")
    # Each promtool test file exercises every alert it names, and together they name all.
    tested = "".join(p.read_text() for p in (ROOT / "deploy/prometheus/rules").glob("*.test.yml"))
    for rule in alerts:
        assert f"alertname: {rule['alert']}" in tested, f"no promtool test for {rule['alert']}"


def test_rule_parameters_are_settable_from_the_command_line(tmp_path: Path) -> None:
    module = rules_module()
    params = module._params(["min_evaluations_5m=50", "for_override=1s"])
    assert params.min_evaluations_5m == 50 and params.for_override == "1s"
    text = module.render_rules(params)
    assert "increase5m >= 50" in text and "for: 15m" not in text
    with pytest.raises(SystemExit):
        module._params(["no_such_knob=1"])


def test_committed_dashboards_are_what_the_code_builds() -> None:
    pytest.importorskip("grafana_foundation_sdk", reason="pip install -r requirements/test.lock")
    build = load_module("dashboards/build.py")
    for path, text in build.outputs().items():
        assert path.read_text() == text, f"{path.name} is stale: python dashboards/build.py"


def test_dashboards_use_template_variables_and_existing_recording_rules() -> None:
    import json

    recorded = {r["record"] for g in rules_module().rule_groups() for r in g["rules"] if "record" in r}
    used = set()
    for path in sorted((ROOT / "dashboards").glob("*.json")):
        board = json.loads(path.read_text())
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource"
        assert {"service", "route"} <= set(variables)
        for panel in board["panels"]:
            if panel["type"] != "row":
                assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
                for target in panel["targets"]:
                    used.update(re.findall(r"\b[a-z_]+:[a-z_]+:[a-z_0-9]+\b", target["expr"]))
    assert used <= recorded, used - recorded
    quality = json.loads((ROOT / "dashboards/ragpulse-quality.json").read_text())
    assert "metric" in {v["name"] for v in quality["templating"]["list"]}
    assert {p["type"] for p in quality["panels"]} >= {"timeseries", "heatmap", "state-timeline"}
    assert quality["annotations"]["list"], "alerts are drawn as annotations"


# -- Kubernetes ------------------------------------------------------------------------------


def manifests() -> dict[str, dict[str, Any]]:
    return {
        path.name: yaml.safe_load(path.read_text())
        for path in sorted(K8S.glob("*.yaml"))
        if path.name != "kustomization.yaml"
    }


def test_kubernetes_manifests_match_the_kubernetes_schemas() -> None:
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate",
        reason="kubernetes-validate not installed: pip install -r requirements/test.lock",
    )
    version = kubernetes_validate.latest_version()
    checked = 0
    for resource in manifests().values():
        if resource["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # prometheus-operator CRDs: not in the Kubernetes schemas, checked below
        kubernetes_validate.validate(resource, version, strict=True)
        checked += 1
    assert checked == 8
    broken = manifests()["deployment.yaml"]
    broken["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = {"gb": 1}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, version, strict=True)
    for breakage in ("args as a string", "a misspelt field"):
        broken = manifests()["probe-cronjob.yaml"]
        if breakage == "args as a string":
            broken["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"] = "probe"
        else:
            broken["spec"]["concurrency_policy"] = broken["spec"].pop("concurrencyPolicy")
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, version, strict=True)


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(manifests())


def test_deployment_runs_the_configmap_settings_safely(tmp_path: Path) -> None:
    resources = manifests()
    config = tmp_path / "ragpulse.yaml"
    config.write_text(resources["configmap.yaml"]["data"]["ragpulse.yaml"])
    settings = load_settings(config_file=config, environ={})
    assert settings.source == "kafka" and settings.kafka.group_id == "ragpulse"
    pod = resources["deployment.yaml"]["spec"]["template"]["spec"]
    assert pod["enableServiceLinks"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"requests", "limits"} <= set(container["resources"])
    (port,) = container["ports"]
    assert port["containerPort"] == settings.server.address[1]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    environment = {e["name"]: e for e in container["env"]}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    assert environment["RAGPULSE_CONFIG"]["value"] == f"{mount['mountPath']}/ragpulse.yaml"
    key = environment["RAGPULSE_JUDGE_API_KEY"]["valueFrom"]["secretKeyRef"]
    assert key["name"] == "ragpulse-judge"
    # Graceful shutdown fits in the pod's grace period.
    assert pod["terminationGracePeriodSeconds"] > settings.pipeline.shutdown_timeout_seconds
    # Replicas share one group, so useful replicas stop at the partition count.
    assert resources["deployment.yaml"]["spec"]["replicas"] >= 2


def test_service_monitor_scrapes_the_service_that_the_rules_watch() -> None:
    resources = manifests()
    service, monitor = resources["service.yaml"], resources["servicemonitor.yaml"]
    assert service["metadata"]["name"] == rules_module().RuleParams().job
    assert monitor["kind"] == "ServiceMonitor"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    selector = service["spec"]["selector"]
    pod_labels = resources["deployment.yaml"]["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()
    budget = resources["poddisruptionbudget.yaml"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert resources["prometheusrule.yaml"]["kind"] == "PrometheusRule"


def test_exemplars_lead_from_a_score_bucket_to_the_trace_in_the_compose_stack() -> None:
    """Prometheus keeps exemplars, Grafana links their trace_id to Tempo, Tempo receives both the
    apps' traces (through the Collector) and ragpulse's results, and the quality dashboard asks
    for exemplars on the score buckets."""
    tempo_config = yaml.safe_load((ROOT / "deploy/tempo/tempo.yaml").read_text())
    protocols = tempo_config["distributor"]["receivers"]["otlp"]["protocols"]
    tempo_ports = {name: int(p["endpoint"].rpartition(":")[2]) for name, p in protocols.items()}
    assert "tempo" in services()
    assert "--enable-feature=exemplar-storage" in services()["prometheus"]["command"]
    for service in ragpulse_replicas().values():
        settings = load_settings(environ={k: str(v) for k, v in service["environment"].items()})
        assert settings.results.otlp_endpoint == f"http://tempo:{tempo_ports['http']}"
    collector = yaml.safe_load((ROOT / "deploy/otel-collector/config.yaml").read_text())
    (tempo_exporter,) = [
        name for name in collector["service"]["pipelines"]["traces"]["exporters"] if name.startswith("otlp/")
    ]
    assert collector["exporters"][tempo_exporter]["endpoint"] == f"tempo:{tempo_ports['grpc']}"
    provisioning = ROOT / "deploy/grafana/provisioning/datasources"
    (prometheus,) = yaml.safe_load((provisioning / "prometheus.yml").read_text())["datasources"]
    (tempo,) = yaml.safe_load((provisioning / "tempo.yml").read_text())["datasources"]
    assert (
        tempo["type"] == "tempo"
        and tempo["url"] == f"http://tempo:{tempo_config['server']['http_listen_port']}"
    )
    (link,) = prometheus["jsonData"]["exemplarTraceIdDestinations"]
    assert link == {"name": "trace_id", "datasourceUid": tempo["uid"]}
    quality = json.loads((ROOT / "dashboards/ragpulse-quality.json").read_text())
    targets = [t for panel in quality["panels"] for t in panel.get("targets", [])]
    assert any(t.get("exemplar") and "ragpulse_score_bucket" in t["expr"] for t in targets)


# -- Kubernetes: the golden probes and the judge canary (docs/probes.md) ---------------------

CRONJOBS = {"probe": "probe-cronjob.yaml", "canary": "canary-cronjob.yaml"}


def cronjob_pod(name: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(CronJob, pod spec, its one container) of `ragpulse <name>`'s CronJob."""
    cronjob = manifests()[CRONJOBS[name]]
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return cronjob, pod, container


def pod_files(pod: dict[str, Any], container: dict[str, Any], root: Path) -> dict[str, Path]:
    """The container's mounts laid out under `root`: ConfigMap keys written as files (paths inside
    them rebased under `root`), other volumes as empty directories. mountPath -> host directory."""
    resources = manifests()
    config_maps = {r["metadata"]["name"]: r for r in resources.values() if r["kind"] == "ConfigMap"}
    claims = {r["metadata"]["name"] for r in resources.values() if r["kind"] == "PersistentVolumeClaim"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: root / m["mountPath"].lstrip("/") for m in container["volumeMounts"]}
    for mount in container["volumeMounts"]:
        volume, directory = volumes[mount["name"]], mounts[mount["mountPath"]]
        directory.mkdir(parents=True)
        if "configMap" in volume:
            assert mount.get("readOnly") is True, mount
            for key, text in config_maps[volume["configMap"]["name"]]["data"].items():
                (directory / key).write_text(rebased(text, mounts))
        elif "persistentVolumeClaim" in volume:
            assert volume["persistentVolumeClaim"]["claimName"] in claims, volume
        else:
            assert "emptyDir" in volume, volume
    return mounts


def rebased(text: str, mounts: dict[str, Path]) -> str:
    """Paths under a mount moved under its host directory (one pass: /tmp/... is rebased once)."""
    prefixes = sorted((m.rstrip("/") + "/" for m in mounts), key=len, reverse=True)
    pattern = "(?<![\\w./-])(" + "|".join(re.escape(p) for p in prefixes) + ")"
    return re.sub(pattern, lambda m: f"{mounts[m.group(1).rstrip('/')]}/", text)


def container_environment(container: dict[str, Any], mounts: dict[str, Path]) -> dict[str, str]:
    """The container's plain variables (paths rebased); every Secret reference is optional, so
    the pod starts without the Secret, and names a known setting."""
    environment = {}
    for variable in container["env"]:
        if "valueFrom" in variable:
            assert variable["valueFrom"]["secretKeyRef"]["optional"] is True, variable
            continue
        environment[variable["name"]] = rebased(variable["value"], mounts)
    return environment


def test_probe_and_canary_cronjobs_run_one_at_a_time_as_safely_as_the_agents() -> None:
    deployment_pod = manifests()["deployment.yaml"]["spec"]["template"]["spec"]
    (agent,) = deployment_pod["containers"]
    for name in CRONJOBS:
        cronjob, pod, container = cronjob_pod(name)
        assert cronjob["kind"] == "CronJob"
        # Only one runner sends each round: one CronJob, and a late round is skipped, never
        # run beside the one still going.
        assert cronjob["spec"]["concurrencyPolicy"] == "Forbid", name
        job = cronjob["spec"]["jobTemplate"]["spec"]
        assert job["backoffLimit"] == 0, "a failed round is counted, not sent again"
        assert pod["restartPolicy"] == "Never"
        assert pod["securityContext"] == deployment_pod["securityContext"]
        assert pod["enableServiceLinks"] is False and pod["automountServiceAccountToken"] is False
        assert container["securityContext"] == agent["securityContext"]
        assert container["image"] == agent["image"]
        assert {"requests", "limits"} <= set(container["resources"])
    probe, _, _ = cronjob_pod("probe")
    # A round every 15 minutes is the default probes_interval_seconds, and a stuck round ends
    # before the next is due.
    minutes = re.fullmatch(r"\*/(\d+) \* \* \* \*", probe["spec"]["schedule"])
    assert minutes, probe["spec"]["schedule"]
    interval = int(minutes.group(1)) * 60
    assert interval == load_settings(environ={}).probes.interval_seconds
    assert probe["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"] < interval
    # Stopped early, the requests in flight may take their whole timeout before the spans go out.
    _, probe_pod, _ = cronjob_pod("probe")
    assert probe_pod["terminationGracePeriodSeconds"] > load_settings(environ={}).probes.timeout_seconds
    # The probe alerts look at two rounds.
    window = rules_module().RuleParams().probe_window
    assert window.endswith("m") and int(window[:-1]) * 60 >= 2 * interval
    canary, _, _ = cronjob_pod("canary")
    assert re.fullmatch(r"\d+ \d+ \* \* \*", canary["spec"]["schedule"]), "daily"


def test_cronjob_command_lines_are_accepted_by_the_cli() -> None:
    from agent import cli
    from agent.commands import canary, probe

    parser = cli._parser()
    for name, module in (("probe", probe), ("canary", canary)):
        _, _, container = cronjob_pod(name)
        args = parser.parse_args(container["args"])
        assert args.command == name and args.handler is module._main
    _, _, container = cronjob_pod("canary")
    args = parser.parse_args(container["args"])
    assert args.pushgateway.startswith("http://") and not args.schedule
    # Accepting a moved judge is the CronJob's command plus --accept (docs/probes.md).
    assert parser.parse_args([*container["args"], "--accept"]).accept is True


@pytest.mark.parametrize("name", list(CRONJOBS))
def test_cronjob_settings_are_known_and_name_files_the_pod_mounts(name: str, tmp_path: Path) -> None:
    from agent.config import CONFIG_ENV, ENV_PREFIX, setting_names

    _, pod, container = cronjob_pod(name)
    mounts = pod_files(pod, container, tmp_path)
    environment = container_environment(container, mounts)
    known = {f"{ENV_PREFIX}{n.upper()}" for n in setting_names()} | {CONFIG_ENV}
    assert {v["name"] for v in container["env"]} <= known
    result = subprocess.run(
        [sys.executable, "-m", "agent", "validate-config"],
        env={"PATH": "/usr/bin:/bin", **environment},
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "ignoring" not in result.stderr, result.stderr
    settings = load_settings(environ=environment)
    config = Path(environment[CONFIG_ENV])
    if name == "probe":
        from agent.commands.probe import golden_items, prober_config

        assert settings.probes.golden_set is not None
        assert len(golden_items(Path(settings.probes.golden_set))) >= 1
        assert prober_config(settings).endpoints
        # The prober exports to the Collector's OTLP/HTTP receiver, as the apps do: with Kafka,
        # the Collector keys the prober's span and the app's by trace id (one replica).
        collector = yaml.safe_load((ROOT / "deploy/otel-collector/config.yaml").read_text())
        http_port = collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].rsplit(":", 1)[1]
        assert settings.probes.otlp_endpoint.rstrip("/").endswith(f":{http_port}")
        assert collector["exporters"]["kafka"]["partition_traces_by_id"] is True
    else:
        from agent.offline.records import read_items
        from agent.trust.labels import read_label_file

        items, bad = read_items(Path(str(settings.canary.items_file)))
        assert not bad and items
        labels = read_label_file(Path(str(settings.canary.labels_file))).labels
        assert {label.interaction_id for label in labels} <= {item.id for item in items}
        assert {label.value for label in labels} == {0, 1}, "both classes, or AUROC is undefined"
        # The state outlives the pod: it is on the claim, not in the container.
        state = Path(settings.canary.state_file)
        claim_mount = next(
            mounts[m["mountPath"]]
            for m in container["volumeMounts"]
            if any(v["name"] == m["name"] and "persistentVolumeClaim" in v for v in pod["volumes"])
        )
        assert state.parent == claim_mount
        # The canary judges with the agents' settings and key: the judge it watches is theirs.
        agent = manifests()["deployment.yaml"]["spec"]["template"]["spec"]["containers"][0]
        agent_env = {e["name"]: e for e in agent["env"]}
        canary_env = {e["name"]: e for e in container["env"]}
        assert canary_env["RAGPULSE_JUDGE_API_KEY"] == agent_env["RAGPULSE_JUDGE_API_KEY"]
        assert config.read_text() == manifests()["configmap.yaml"]["data"]["ragpulse.yaml"]
        assert settings.judge == load_settings(config_file=config, environ={}).judge


def test_the_canary_cronjob_runs_and_pushes_its_gauges(tmp_path: Path) -> None:
    """The CronJob's own command and settings (the ConfigMaps' files, the agents' judge), with
    its Pushgateway URL pointed at a real HTTP server that records the push."""
    from tests.support.pushgateway import Pushgateway

    _, pod, container = cronjob_pod("canary")
    mounts = pod_files(pod, container, tmp_path)
    environment = container_environment(container, mounts)
    args = list(container["args"])
    with Pushgateway() as gateway:
        args[args.index("--pushgateway") + 1] = gateway.url
        result = subprocess.run(
            [sys.executable, "-m", "agent", *args], env={"PATH": "/usr/bin:/bin", **environment},
            capture_output=True, text=True, timeout=120, cwd=ROOT,
        )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    (push,) = gateway.received()
    assert (push.method, push.path) == ("PUT", "/metrics/job/ragpulse-canary")
    pushed = push.scrape()
    assert pushed.value("ragpulse_canary_judge_moved") == 0
    assert pushed.value("ragpulse_canary_agreement", metric="faithfulness", statistic="auroc") == 1.0
    assert (pushed.value("ragpulse_canary_last_run_timestamp_seconds") or 0) > 0
    state = json.loads(Path(load_settings(environ=environment).canary.state_file).read_text())
    assert set(state["accepted"]) == {"faithfulness"}
