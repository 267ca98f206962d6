"""The floor plan is checked, not hoped for: the README's layers hold, no module circle exists,
only the composition root and the commands read the settings object, and a settings section is
imported only by the component that owns it (and the composition root)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "agent"

# Besides agent/config.py, which defines it: the composition root, the commands and the Python API
# (agent/quality.py, an entry point like the command line).
SETTINGS_READERS = {"agent/build.py", "agent/cli.py", "agent/demo/run.py", "agent/quality.py"}


def test_the_layers_contract_holds() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.exists():
        pytest.skip('needs import-linter: pip install "ragpulse[test]"')
    result = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "1 kept, 0 broken" in result.stdout


def test_no_module_imports_itself_through_others() -> None:
    grimp = pytest.importorskip("grimp", reason='needs import-linter: pip install "ragpulse[test]"')
    graph = grimp.build_graph("agent", include_external_packages=False)
    circles = _strongly_connected(
        {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}
    )
    assert [sorted(c) for c in circles if len(c) > 1] == []


def test_only_the_composition_root_and_the_commands_read_settings() -> None:
    readers = set()
    for path in AGENT.rglob("*.py"):
        relative = path.relative_to(ROOT).as_posix()
        if relative == "agent/config.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = {alias.name for alias in node.names} if isinstance(node, ast.ImportFrom) else set()
            if names & {"Settings", "load_settings"} and node.module == "agent.config":  # type: ignore[attr-defined]
                readers.add(relative)
    commands = {r for r in readers if r.startswith("agent/commands/")}
    assert readers - commands == SETTINGS_READERS


# A settings section IS its component's config: imported by its owner (modules, or packages
# ending in "."), and by the composition root and the commands, never elsewhere.
SECTION_OWNERS = {
    "ServerSettings": ("agent.server",),
    "OtlpSettings": ("agent.sources.otlp_http",),
    # The connection options are shared by the consumer and the results producer.
    "KafkaSettings": ("agent.sources.kafka", "agent.infra.kafka_connect"),
    "ResultsSettings": ("agent.exporters.results",),
    # The judge's call policy (agent.judges.caller) serves the testset writer too.
    "JudgeSettings": ("agent.judges.stack", "agent.judges.caller"),
    "RedisSettings": (),
    "CacheSettings": ("agent.judges.stack",),
    "SamplingSettings": ("agent.sampling",),
    "BudgetSettings": ("agent.budget",),
    "IdempotencySettings": ("agent.delivery",),
    "AssemblySettings": ("agent.otlp.assemble",),
    "SeriesSettings": ("agent.series_budget",),
    "PipelineSettings": ("agent.pipeline",),
    # One detector algorithm, kept by the judged scores' aggregator and by the signals.
    "DriftSettings": ("agent.drift", "agent.exporters.drift", "agent.signals"),
    "DocumentsSettings": ("agent.exporters.documents",),
    "SignalsSettings": ("agent.signals",),
    "ActivitySettings": ("agent.activity",),
    "AlertSettings": (),
    "TrustSettings": ("agent.trust.aggregator",),
    "SecuritySettings": ("agent.redact",),
    "ProbeSettings": ("agent.probes.",),
    "ProbeEndpoint": ("agent.probes.prober",),
    "CanarySettings": ("agent.probes.canary",),
}
COMPOSITION_ROOT = ("agent.build", "agent.cli", "agent.config", "agent.commands.", "agent.demo.run")


def section_imports_out_of_place(root: Path) -> list[str]:
    """`module imports Section` for every import of a section class outside its owners."""
    found = []
    for path in sorted((root / "agent").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module == "agent.config"):
                continue
            for alias in node.names:
                owners = SECTION_OWNERS.get(alias.name)
                if owners is None:
                    continue
                allowed = (*owners, *COMPOSITION_ROOT)
                if not any(module == a or (a.endswith(".") and module.startswith(a)) for a in allowed):
                    found.append(f"{module} imports {alias.name}")
    return found


def test_every_settings_section_has_its_owners_listed() -> None:
    from agent.config import SECTIONS

    assert {model.__name__ for model in SECTIONS.values()} | {"ProbeEndpoint"} == set(SECTION_OWNERS)


def test_a_settings_section_is_imported_only_by_its_owner_and_the_composition_root(tmp_path: Path) -> None:
    assert section_imports_out_of_place(ROOT) == []
    # The checker itself, on a fake tree: a stage reading another stage's section is caught.
    (tmp_path / "agent" / "exporters").mkdir(parents=True)
    (tmp_path / "agent" / "exporters" / "drift.py").write_text("from agent.config import DriftSettings\n")
    (tmp_path / "agent" / "pipeline.py").write_text(
        "def f():\n    from agent.config import DriftSettings, PipelineSettings\n"
    )
    assert section_imports_out_of_place(tmp_path) == ["agent.pipeline imports DriftSettings"]


def _strongly_connected(edges: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iteratively (the graph is a few hundred modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[set[str]] = []
    counter = 0
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                found.append(component)
    return found


def test_the_readme_layout_names_every_package_and_module() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Layout", 1)[1].split("```", 2)[1]
    words = set(block.replace(",", " ").split())
    names = [p.name + "/" for p in AGENT.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    names += [p.name for p in AGENT.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert sorted(name for name in names if name not in words) == []
