"""Test support has an architecture too (STYLE.md rule 16), checked on every import.

No test imports another test module (shared helpers live in tests/support), tests never import
benchmarks (a statistic a test checks lives in agent/), and benchmarks import nothing of tests but
tests/support (the real components they run). Every module of tests/integration is marked
`integration` in its `pytestmark`, so that `scripts/test fast` (`-m "not integration"`) never starts
its servers.

tests/unit mirrors agent/: tests/unit/otlp/ holds the tests of agent/otlp/, and so on. Every
directory there names a package of agent/, every test module in it imports that package, and a
test module directly in tests/unit imports a top-level module of agent/ (the composition root,
the pipeline, config, sampling, ...: the nouns of model.py and text.py aside) or none: one that
imports only from subpackages belongs in one of their directories.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support.repo import ROOT

TEST_MODULES = ("tests.unit", "tests.integration")


def imported_modules(root: Path, path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of every import in a file, relative imports resolved against its package."""
    package = path.relative_to(root).with_suffix("").parts[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            for alias in node.names:
                # `from tests import unit` imports the module tests.unit (`from agent import cli`: agent.cli)
                yield node.lineno, f"{module}.{alias.name}" if module in ("", "tests", "agent") else module


def within(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def violations(root: Path) -> list[str]:
    found = []
    for path in sorted((root / "tests").rglob("*.py")):
        for line, module in imported_modules(root, path):
            if within(module, *TEST_MODULES) or within(module, "benchmarks"):
                found.append(f"{path.relative_to(root)}:{line}: imports {module}")
    for path in sorted((root / "benchmarks").rglob("*.py")):
        for line, module in imported_modules(root, path):
            if within(module, "tests") and not within(module, "tests.support"):
                found.append(f"{path.relative_to(root)}:{line}: imports {module}")
    return found


def marks_integration(path: Path) -> bool:
    """Whether the module-level `pytestmark` names pytest.mark.integration (alone or in a list)."""
    for node in ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            marks = node.value.elts if isinstance(node.value, ast.List | ast.Tuple) else [node.value]
            return any(ast.unparse(mark) == "pytest.mark.integration" for mark in marks)
    return False


def unmarked_integration_modules(root: Path) -> list[str]:
    return [
        str(path.relative_to(root))
        for path in sorted((root / "tests" / "integration").glob("test_*.py"))
        if not marks_integration(path)
    ]


NOUNS = ("agent.model", "agent.text")  # imported by tests of every floor


def agent_imports(root: Path, path: Path) -> set[tuple[str, ...]]:
    """The agent modules a file imports, as paths under agent/ (`from agent import cli` → ("cli",))."""
    found = set()
    for _, module in imported_modules(root, path):
        if within(module, "agent") and module != "agent" and not within(module, *NOUNS):
            found.add(tuple(module.split(".")[1:]))
    return found


def misplaced_unit_tests(root: Path) -> list[str]:
    unit, agent = root / "tests" / "unit", root / "agent"
    found = []
    for directory in sorted(p for p in unit.rglob("*") if p.is_dir()):
        package = directory.relative_to(unit).parts
        if any(part.startswith(("_", ".")) for part in package):  # __pycache__, .hypothesis
            continue
        if not (agent.joinpath(*package) / "__init__.py").is_file():
            found.append(f"{directory.relative_to(root)}/: agent/{'/'.join(package)}/ is not a package")
    for path in sorted(unit.rglob("test_*.py")):
        package = path.parent.relative_to(unit).parts
        imported = agent_imports(root, path)
        if package and not any(parts[: len(package)] == package for parts in imported):
            found.append(f"{path.relative_to(root)}: imports nothing of agent/{'/'.join(package)}/")
        if not package and imported and all(agent.joinpath(parts[0]).is_dir() for parts in imported):
            homes = sorted({f"tests/unit/{parts[0]}/" for parts in imported})
            found.append(f"{path.relative_to(root)}: tests only subpackages, belongs in {' or '.join(homes)}")
    return found


def test_tests_and_benchmarks_import_only_what_the_layout_allows() -> None:
    assert violations(ROOT) == []


def test_every_integration_module_is_marked_integration() -> None:
    assert unmarked_integration_modules(ROOT) == []


def test_unit_tests_mirror_agent() -> None:
    assert misplaced_unit_tests(ROOT) == []


def test_the_mirror_check_names_each_misplaced_test(tmp_path: Path) -> None:
    for package in ("agent", "agent/otlp", "agent/judges"):
        (tmp_path / package).mkdir(parents=True)
        (tmp_path / package / "__init__.py").write_text("")
    for module in ("agent/config.py", "agent/model.py", "agent/otlp/decode.py", "agent/judges/local.py"):
        (tmp_path / module).write_text("")
    unit = tmp_path / "tests" / "unit"
    for directory in ("otlp", "judges", "nowhere"):
        (unit / directory).mkdir(parents=True)
    modules = {
        "otlp/test_decode.py": "from agent.otlp.decode import decode_request\n",
        "otlp/test_local.py": "from agent.judges.local import LexicalJudge\nfrom agent.model import Chunk\n",
        "judges/test_local.py": "from agent.judges import local\n",
        "nowhere/test_x.py": "import agent.config\n",
        "test_config.py": "from agent import config\nfrom agent.otlp.decode import decode_request\n",
        "test_repo.py": "import ast\n",
        "test_offload.py": "from agent.judges.local import LexicalJudge\nfrom agent.model import Chunk\n",
    }
    for name, text in modules.items():
        (unit / name).write_text(text)
    assert misplaced_unit_tests(tmp_path) == [
        "tests/unit/nowhere/: agent/nowhere/ is not a package",
        "tests/unit/nowhere/test_x.py: imports nothing of agent/nowhere/",
        "tests/unit/otlp/test_local.py: imports nothing of agent/otlp/",
        "tests/unit/test_offload.py: tests only subpackages, belongs in tests/unit/judges/",
    ]


def test_the_mark_check_reads_pytestmark(tmp_path: Path) -> None:
    (tmp_path / "tests" / "integration").mkdir(parents=True)
    modules = {
        "test_alone.py": "pytestmark = pytest.mark.integration\n",
        "test_listed.py": "pytestmark = [pytest.mark.integration, pytest.mark.skipif(True, reason='x')]\n",
        "test_other.py": "pytestmark = pytest.mark.skipif(True, reason='x')\n",
        "test_none.py": "import pytest\n",
    }
    for name, text in modules.items():
        (tmp_path / "tests" / "integration" / name).write_text(text)
    assert unmarked_integration_modules(tmp_path) == [
        "tests/integration/test_none.py",
        "tests/integration/test_other.py",
    ]


def test_the_check_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "benchmarks").mkdir()
    test_a = [
        "from tests.integration.test_b import helper",
        "import benchmarks.drift",
        "from tests.support import net",
    ]
    (tmp_path / "tests" / "unit" / "test_a.py").write_text("\n".join(test_a))
    (tmp_path / "benchmarks" / "x.py").write_text(
        "from tests.unit.test_a import y\nfrom tests.support import spans\n"
    )
    (tmp_path / "tests" / "unit" / "test_c.py").write_text("from tests import integration\n")
    assert violations(tmp_path) == [
        "tests/unit/test_a.py:1: imports tests.integration.test_b",
        "tests/unit/test_a.py:2: imports benchmarks.drift",
        "tests/unit/test_c.py:1: imports tests.integration",
        "benchmarks/x.py:1: imports tests.unit.test_a",
    ]
