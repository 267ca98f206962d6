"""The floor plan is checked, not hoped for: the README's layers hold, no module circle exists,
and only the composition root and the commands read the settings object."""

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
