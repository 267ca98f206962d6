"""`ragpulse validate-config` as an operator runs it: by default only the settings they set, each
marked with where it came from (the config file by its path, the environment by its variable, the
command line), as YAML nested by section; `--all` every setting; `--json` every setting as JSON;
and a typo in the config file named as written, with a suggestion. Each is the real command in a
subprocess."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agent.config import setting_names
from tests.support.repo import ROOT

pytestmark = pytest.mark.integration

API_KEY = "sk-planted-validate-5d1e"


def ragpulse(
    *args: str, env: dict[str, str] | None = None, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_")}
    return subprocess.run(
        [sys.executable, "-m", "agent", *args], cwd=cwd, env={**environment, **(env or {})},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "ragpulse.yaml"
    path.write_text(f"judge: {{model: openai/gpt-4o-mini, api_key: {API_KEY}}}\nkafka: {{topic: spans}}\n")
    return path


def test_by_default_only_what_was_set_each_with_where_from(config: Path) -> None:
    done = ragpulse(
        "validate-config", "--config", str(config), "--set", "drift_window=80", "--sample-rate", "0.5",
        env={"RAGPULSE_REDIS_URL": "redis://default:pw-planted-77@127.0.0.1:6390/0"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    total = len(list(setting_names()))
    assert lines[0] == (
        f"# 6 settings set, each with where it came from; {total - 6} others have their defaults "
        "(--all: every setting; --list: what each means)"
    )
    marked = {line.split(":")[0].strip(): line.split("# from ")[1] for line in lines[1:] if "# from " in line}
    assert marked == {
        "model": f"config file {config}",
        "api_key": f"config file {config}",
        "topic": f"config file {config}",
        "url": "environment RAGPULSE_REDIS_URL",
        "rate": "command line",
        "window": "command line",
    }
    # Valid YAML, nested by section as a config file is; secrets masked; nothing at its default.
    shown = yaml.safe_load(done.stdout)
    assert shown == {
        "kafka": {"topic": "spans"},
        "judge": {"model": "openai/gpt-4o-mini", "api_key": "***"},
        "redis": {"url": "redis://default:***@127.0.0.1:6390/0"},
        "sampling": {"rate": 0.5},
        "drift": {"window": 80},
    }
    assert API_KEY not in done.stdout + done.stderr and "pw-planted-77" not in done.stdout


def test_nothing_set_says_so(tmp_path: Path) -> None:
    done = ragpulse("validate-config", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    total = len(list(setting_names()))
    assert done.stdout == (
        f"# no setting set: all {total} have their defaults (--all: every setting; --list: what each means)\n"
    )


def test_all_shows_every_setting_and_still_marks_those_set(config: Path) -> None:
    done = ragpulse("validate-config", "--all", "--config", str(config))
    assert done.returncode == 0, done.stderr
    shown = yaml.safe_load(done.stdout)
    leaves = sum(len(value) if isinstance(value, dict) else 1 for value in shown.values())
    assert leaves == len(list(setting_names()))
    assert shown["kafka"]["group_id"] == "ragpulse" and shown["judge"]["api_key"] == "***"
    marked = [line for line in done.stdout.splitlines() if "# from " in line]
    assert [line.split(":")[0].strip() for line in marked] == ["topic", "model", "api_key"]
    assert done.stdout.splitlines()[0].startswith(
        f"# every setting ({len(list(setting_names()))}); 3 settings set"
    )


def test_json_is_every_setting_by_section(config: Path) -> None:
    done = ragpulse("validate-config", "--json", "--config", str(config))
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["judge"]["model"] == "openai/gpt-4o-mini" and shown["judge"]["api_key"] == "***"
    assert shown["kafka"]["group_id"] == "ragpulse"  # a default, shown too


def test_a_typo_in_the_config_file_is_one_line_with_a_suggestion(tmp_path: Path) -> None:
    config = tmp_path / "ragpulse.yaml"
    config.write_text("judge:\n  modle: openai/gpt-4o-mini\nsampling_rat: 0.1\n")
    done = ragpulse("validate-config", "--config", str(config))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "ragpulse validate-config: invalid configuration:",
        "  judge.modle (from config file): unknown setting; did you mean judge.model? "
        "(`ragpulse validate-config --list` lists every setting)",
        "  sampling_rat (from config file): unknown setting; did you mean sample_rate? "
        "(`ragpulse validate-config --list` lists every setting)",
    ]


def test_the_readme_sample_is_what_the_command_prints(tmp_path: Path) -> None:
    """README, "Configuration": the sample output of `ragpulse validate-config --config
    ragpulse.yaml`, with its count of the settings left at their defaults, for the inputs the
    README states, run in the directory holding ragpulse.yaml as the user would."""
    readme = (ROOT / "README.md").read_text()
    inputs = (
        "With `kafka: {topic: spans}` in `ragpulse.yaml` and `RAGPULSE_JUDGE_MODEL=openai/gpt-4o-mini` in\n"
        "the environment, `ragpulse validate-config --config ragpulse.yaml` prints"
    )
    assert inputs in readme, "README.md no longer states the sample's inputs: update this test"
    after = readme.split(inputs, 1)[1]
    sample = re.search(r"^```\n(.*?)^```", after, re.S | re.M)
    assert sample, "no sample block after the README's inputs"
    (tmp_path / "ragpulse.yaml").write_text("kafka: {topic: spans}\n")
    done = ragpulse(
        "validate-config", "--config", "ragpulse.yaml", cwd=tmp_path,
        env={"RAGPULSE_JUDGE_MODEL": "openai/gpt-4o-mini", "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == sample[1], f"README.md's sample is out of date; the command prints:\n{done.stdout}"
