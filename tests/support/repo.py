"""Where the repository and the shared evaluation data are, and its scripts imported by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
# ../shared/data beside the repository, or beside the directory of its git worktrees.
SHARED_DATA = next(
    (
        base / "shared" / "data"
        for base in (ROOT.parent, ROOT.parent.parent)
        if (base / "shared" / "data").is_dir()
    ),
    ROOT.parent / "shared" / "data",
)


def load_module(relative: str) -> ModuleType:
    """Import a generator script of the repository (deploy/, dashboards/) by path."""
    path = ROOT / relative
    name = f"ragpulse_{path.parent.name}_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module
