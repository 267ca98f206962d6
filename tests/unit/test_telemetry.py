"""The agent's instruments: every name in agent/telemetry.py, well formed, unique and documented, and
the size of a scrape at the series budget."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

from agent.model import Chunk, RagInteraction
from agent.signals import SignalRecorder
from agent.telemetry import CanaryTelemetry, DemoTelemetry, SignalsTelemetry, Telemetry
from tests.support.scrape import scrape

ROOT = Path(__file__).resolve().parents[2]
# Where a user reads what a series means: the README's "What you get" and the docs pages.
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Suffixes prometheus_client adds to a histogram's series in the exposition.
SERIES_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def families(registry: CollectorRegistry) -> list[Metric]:
    return list(registry.collect())


def every_instrument() -> list[Metric]:
    """The agent's instruments and the demo's, on a fresh registry."""
    registry = CollectorRegistry()
    Telemetry(registry)
    DemoTelemetry(registry)
    CanaryTelemetry(registry)
    return families(registry)


def exported(metric: Metric) -> str:
    """The name a query uses: counters get `_total` (prometheus_client adds it)."""
    return metric.name + "_total" if metric.type == "counter" else metric.name


def test_every_instrument_is_prefixed_unique_and_counters_end_in_total() -> None:
    metrics = every_instrument()
    assert len(metrics) >= 48
    names = [exported(metric) for metric in metrics]
    assert len(set(names)) == len(names)
    for metric in metrics:
        assert metric.name.startswith("ragpulse_"), metric.name
        assert metric.type in SERIES_SUFFIXES, (metric.name, metric.type)
        assert metric.documentation, metric.name
        for sample in metric.samples:  # no _created series (disabled) and no stray suffixes
            assert any(sample.name == metric.name + s for s in SERIES_SUFFIXES[metric.type]), sample.name
    assert all(name.endswith("_total") for m, name in zip(metrics, names, strict=True) if m.type == "counter")


def test_every_group_is_built_once_on_the_one_registry() -> None:
    registry = CollectorRegistry()
    telemetry = Telemetry(registry)
    groups = [value for name, value in vars(telemetry).items() if name != "registry"]
    per_group = [len(vars(group)) for group in groups]
    assert sum(per_group) == len(families(registry))  # every instrument belongs to exactly one group
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        Telemetry(registry)  # a second container on one registry is a bug, caught at start-up


@pytest.mark.parametrize("metric", every_instrument(), ids=exported)
def test_every_name_is_documented(metric: Metric) -> None:
    name = exported(metric)
    pattern = re.compile(rf"\b{re.escape(name)}(?![a-z0-9_])")
    assert any(pattern.search(page.read_text()) for page in DOCS), (
        f"{name} is exported but neither README.md nor docs/*.md mention it"
    )


def test_agent_telemetry_is_the_one_module_that_names_instruments() -> None:
    """No other module of agent/ builds a prometheus_client instrument: `grep ragpulse_
    agent/telemetry.py` lists every series."""
    builders = {"Counter", "Gauge", "Histogram", "Summary", "Info", "Enum"}
    found = []
    for path in sorted((ROOT / "agent").rglob("*.py")):
        if path == ROOT / "agent" / "telemetry.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        imported = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("prometheus_client")
            for alias in node.names
            if alias.name in builders
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in imported:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
    source = (ROOT / "agent" / "telemetry.py").read_text()
    assert all(f'"{metric.name}"' in source for metric in every_instrument())


@pytest.mark.parametrize(
    ("services", "routes", "shared"),
    [(100, 100, True), (500, 1, False)],
    ids=["100 services x 100 routes", "500 services x 1 route"],
)
def test_a_scrape_at_the_series_budget_stays_under_60k_samples(
    services: int, routes: int, shared: bool
) -> None:
    """Every series one interaction per pair creates, at the default pair budget (500 pairs, plus
    one overflow pair): Prometheus ingests each sample on every scrape of every replica."""
    result = scrape(services, routes, shared)
    assert result.pairs >= 500
    assert result.samples < 60_000, result.samples


def test_a_pair_costs_49_signal_samples() -> None:
    """Buckets only where an operator follows the tail to its traces (top-1 score 12, overlap 9,
    chunks 4: none); four histograms read as means (3 each), four counters, eight drift gauges."""
    registry = CollectorRegistry()
    telemetry = SignalsTelemetry(registry)
    SignalRecorder(telemetry).record(
        RagInteraction(
            trace_id="1" * 32,
            span_id="1" * 16,
            query="q",
            chunks=(Chunk("Refunds take five days.", "doc-1", 0.8),),
            response="Refunds take five days.",
            service="shop",
            route="/ask",
            searches=1,
        )
    )
    assert sum(len(metric.samples) for metric in families(registry)) == 12 + 9 + 4 + 4 * 3 + 4 + 8
