"""`ragpulse` never ends in a traceback: what each kind of failure prints, and its exit code."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent import cli
from agent.commands.logs import QUIET_LOGGERS, configure_logging
from agent.config import load_settings


@pytest.fixture(autouse=True)
def process_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """main() sets process-wide things (logger levels, the unraisable hook): put them back."""
    for name in [n for n in __import__("os").environ if n.startswith("RAGPULSE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    levels = {name: logging.getLogger(name).level for name in [*QUIET_LOGGERS, "ragpulse"]}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


@pytest.fixture
def failing_eval(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ragpulse eval` hits a defect (a secret in its message, as a connection error would have)."""
    import agent.commands.eval_run

    def defect(args: object, settings: object) -> int:
        raise RuntimeError("cannot reach redis://user:s3cret-pw@redis:6379/0\nsecond line")

    monkeypatch.setattr(agent.commands.eval_run, "main", defect)


def test_an_unexpected_error_is_one_line_and_exit_1(
    failing_eval: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["eval", str(tmp_path / "set.jsonl")]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "ragpulse eval: unexpected error: RuntimeError: cannot reach redis://user:***@redis:6379/0 "
        "second line; run again with --log-level DEBUG for the full trace\n"
    )


@pytest.mark.parametrize("how", ["flag", "lowercase flag", "env"])
def test_with_debug_the_full_trace_comes_first(
    failing_eval: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    args = ["eval", str(tmp_path / "set.jsonl")]
    if how == "env":
        monkeypatch.setenv("RAGPULSE_LOG_LEVEL", "DEBUG")
    else:
        args += ["--log-level", "DEBUG" if how == "flag" else "debug"]
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):\n")
    assert 'raise RuntimeError("cannot reach redis://user:***@redis:6379/0' in err
    assert err.endswith(
        "ragpulse eval: unexpected error: RuntimeError: cannot reach redis://user:***@redis:6379/0 "
        "second line\n"
    )
    assert "s3cret" not in err


def test_a_configuration_error_names_the_setting_and_exits_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGPULSE_SAMPLE_RATE", "1.5")
    assert cli.main(["run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ragpulse run: invalid configuration:\n")
    assert "sample_rate (from environment; env RAGPULSE_SAMPLE_RATE)" in err


def test_a_bad_redis_url_is_a_configuration_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGPULSE_REDIS_URL", "redis+sentinel://:pw-secret@127.0.0.1:26379")
    assert cli.main(["run", "--metrics-listen", "127.0.0.1:0", "--otlp-listen", "127.0.0.1:0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ragpulse run: invalid configuration:\n")
    assert "redis_url (from environment; env RAGPULSE_REDIS_URL)" in err
    assert "pw-secret" not in err and err.count("\n") == 2  # the heading and the setting's line


def test_ctrl_c_exits_130_quietly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import agent.commands.eval_run

    def interrupted(args: object, settings: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(agent.commands.eval_run, "main", interrupted)
    assert cli.main(["eval", "set.jsonl"]) == 130
    assert capsys.readouterr().err == ""


def test_an_error_python_can_only_ignore_is_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    assert cli.main(["validate-config"]) == 0

    class Closing:
        def __del__(self) -> None:
            raise ValueError("Invalid file descriptor: -1")

    with caplog.at_level(logging.WARNING, logger="ragpulse"):
        sys.unraisablehook(_unraisable(Closing))
    assert [(r.levelname, r.getMessage(), r.exc_info) for r in caplog.records] == [
        (
            "WARNING",
            "ragpulse validate-config: ignored an error in "
            "test_an_error_python_can_only_ignore_is_one_log_line.<locals>.Closing.__del__: "
            "ValueError: Invalid file descriptor: -1",
            None,
        )
    ]


def _unraisable(cls: type) -> object:
    """What Python hands sys.unraisablehook when cls.__del__ raises (no instance is made)."""
    try:
        raise ValueError("Invalid file descriptor: -1")
    except ValueError as exc:
        error = exc

    class Unraisable:
        exc_type = type(error)
        exc_value = error
        exc_traceback = error.__traceback__
        err_msg = None
        object = cls.__del__  # type: ignore[attr-defined]

    return Unraisable()


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
def test_client_libraries_are_quiet_unless_debugging(level: str) -> None:
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
    configure_logging(load_settings(environ={}, overrides={"log_level": level}))
    levels = {name: logging.getLogger(name).level for name in ("kafka", "urllib3", "litellm", "asyncio")}
    if level == "DEBUG":
        assert set(levels.values()) == {logging.NOTSET}  # everything through, as the root logger says
    else:
        # kafka-python logs every failed connection attempt at ERROR: nothing of it at INFO.
        assert levels == {
            "kafka": logging.CRITICAL,
            "urllib3": logging.WARNING,
            "litellm": logging.WARNING,
            "asyncio": logging.ERROR,
        }
    # Prompt bodies stay out of the log either way (log_prompts is off).
    assert logging.getLogger("httpx").getEffectiveLevel() >= logging.INFO
