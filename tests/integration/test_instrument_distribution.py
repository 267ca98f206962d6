"""`ragpulse-instrument` is its own small distribution: its wheel depends on opentelemetry-api only,
it installs into a fresh virtual environment without ragpulse, and writes exactly the attributes
ragpulse's manual convention reads."""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from tests.support.repo import ROOT

pytestmark = pytest.mark.integration

INSTRUMENT = ROOT / "instrument"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out),
         str(INSTRUMENT)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if build.returncode != 0 and "No module named" in build.stderr:
        pytest.skip(f"cannot build without isolation here: {build.stderr[-300:]}")
    assert build.returncode == 0, build.stderr
    (built,) = out.glob("ragpulse_instrument-*.whl")
    return built


def test_wheel_depends_on_opentelemetry_api_only(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
    assert metadata["Name"] == "ragpulse-instrument"
    requires = metadata.get_all("Requires-Dist") or []
    assert [r.split(">")[0].split("=")[0].strip() for r in requires] == ["opentelemetry-api"]
    packages = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert packages == {"ragpulse_instrument"}  # no `agent` package to collide with an app's agent.py


def test_installs_and_records_in_a_fresh_venv_without_ragpulse(wheel: Path, tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    download = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "-d", str(wheels),
         str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if download.returncode != 0:
        pytest.skip(f"cannot fetch opentelemetry-api from the package index: {download.stderr[-300:]}")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-index", "--find-links", str(wheels),
         str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    installed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True
    )
    names = {line.split("==")[0].lower() for line in installed.stdout.splitlines()}
    assert "ragpulse" not in names and "opentelemetry-sdk" not in names
    # With the API alone (no SDK) recording is a no-op that must not fail: one retrieval, several
    # searches in one call, and a search recorded where it runs.
    script = (
        "from ragpulse_instrument import QUERY, Search, record_interaction, record_search\n"
        "record_interaction(query='q', chunks=['a', 'b'], response='r')\n"
        "record_interaction(query='q', searches=[Search('s1', ['a']), Search('s2', [], failed=True)],\n"
        "                   response='r', session_id='c', history=[('user', 'u'), ('assistant', 'a')])\n"
        "record_search(query='s3', chunks=['c'])\n"
        "record_interaction(query='q', response='r')\n"
        "print(QUERY)\n"
    )
    run = subprocess.run([str(python), "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ragpulse.query"
