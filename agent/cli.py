"""`ragpulse` command line: run the agent, check a configuration.

No command ends in a Python traceback: `main` turns a ConfigError into its message (exit 2), any
other exception into one line naming it (exit 1; the full trace with `--log-level DEBUG` or
RAGPULSE_LOG_LEVEL=DEBUG), and Ctrl-C into exit 130.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from agent import __version__
from agent.commands.calibrate import add_commands as add_trust_commands
from agent.commands.logs import configure_logging
from agent.config import (
    CONFIG_ENV,
    ENV_PREFIX,
    HTTP_HEADERS,
    SECTIONS,
    ConfigError,
    Settings,
    describe_settings,
    load_settings,
    setting_names,
)
from agent.infra.secrets import MASK, is_secret_header, mask, mask_url, shown_headers
from agent.infra.stopping import stop_on_signals, unless_stopped

log = logging.getLogger("ragpulse")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ragpulse", description="Monitor RAG quality from OpenTelemetry spans."
    )
    parser.add_argument("--version", action="version", version=f"ragpulse {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    def with_settings(p: argparse.ArgumentParser, *, agent_flags: bool = True) -> argparse.ArgumentParser:
        """The settings flags; `agent_flags=False` leaves out those of the running agent (listen
        addresses, judge model, sample rate) for a command that has its own or uses none."""
        p.add_argument("--config", metavar="FILE", help="YAML settings file (or RAGPULSE_CONFIG)")
        p.add_argument(
            "--set",
            metavar="NAME=VALUE",
            action="append",
            default=[],
            help="override any setting, e.g. --set sample_rate=0.1 (repeatable)",
        )
        if agent_flags:
            p.add_argument("--otlp-listen", metavar="HOST:PORT")
            p.add_argument("--metrics-listen", metavar="HOST:PORT")
            p.add_argument("--judge-model", metavar="MODEL")
            p.add_argument("--sample-rate", type=float, metavar="RATE")
        p.add_argument("--log-level", type=str.upper, choices=["DEBUG", "INFO", "WARNING", "ERROR"])
        return p

    # One style for every subcommand: a parser whose `handler(args, settings)` runs the command
    # once the settings are loaded and checked; those of other modules register themselves.
    run = with_settings(commands.add_parser("run", help="run the agent (embedded defaults without config)"))
    run.add_argument(
        "--live", action="store_true",
        help="show means, drift and the lowest-scored recent interactions (plain lines when not a terminal)",
    )  # fmt: skip
    run.set_defaults(handler=_run_command)
    validate = with_settings(
        commands.add_parser(
            "validate-config", help="check the settings and print those set, with where they came from"
        )
    )
    validate.add_argument("--list", action="store_true", help="list every setting with its env var")
    shown = validate.add_mutually_exclusive_group()
    shown.add_argument(
        "--all", action="store_true", help="print every setting, not only those set (marked with where from)"
    )
    shown.add_argument("--json", action="store_true", help="print every setting as JSON, by section")
    validate.set_defaults(handler=_validate_command)
    from agent.commands.canary import register as register_canary
    from agent.commands.capture import register as register_capture
    from agent.commands.demo import register as register_demo
    from agent.commands.eval import register as register_eval
    from agent.commands.probe import register as register_probe
    from agent.commands.testset import register as register_testset

    register_demo(commands, with_settings)
    register_eval(commands, with_settings)
    register_probe(commands, with_settings)
    register_canary(commands, with_settings)
    register_testset(commands, with_settings)
    register_capture(commands, with_settings)
    # calibrate, label-queue (agent/commands/calibrate.py) read their settings themselves.
    add_trust_commands(commands)
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    # A command's parser may leave some of these flags out (with_settings' agent_flags).
    flags = ("otlp_listen", "metrics_listen", "judge_model", "sample_rate", "log_level")
    overrides: dict[str, Any] = {name: getattr(args, name, None) for name in flags}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects NAME=VALUE, got {item!r}")
        overrides[name.strip().replace("-", "_")] = value
    settings = load_settings(config_file=args.config, overrides=overrides)
    # What only the rest of ragpulse can check (metric names, keep rules, ...), before any command.
    from agent.build import check_settings

    check_settings(settings)
    return settings


def display_settings(settings: Settings) -> str:
    """Every setting as JSON, by section (`validate-config --json`), shown as `_shown` shows it."""
    return json.dumps(_shown(settings), indent=2)


def _shown(value: Any, field: FieldInfo | None = None) -> Any:
    """A setting's value for people to read: secrets as ***, passwords in URLs masked, and the
    values of credential headers (authorization, x-api-key, ...) as ***."""
    if isinstance(value, SecretStr):
        return MASK
    if field is not None and HTTP_HEADERS in field.metadata:
        return _shown_headers(value)
    if isinstance(value, BaseModel):
        return {name: _shown(getattr(value, name), f) for name, f in type(value).model_fields.items()}
    if isinstance(value, str):
        return mask_url(value)
    if isinstance(value, tuple | list):
        return [_shown(v) for v in value]
    return value


def settings_listing(settings: Settings, *, everything: bool = False, config_file: str | None = None) -> str:
    """The settings as YAML, nested by section as a config file may be (secrets masked as in
    `_shown`): those the user set, each with where it came from, or with `everything` all of them.

    A first comment line says how many were set and how many kept their defaults, so that a short
    listing is never mistaken for the whole configuration."""
    origins = {
        "config file": f"config file {config_file}" if config_file else "config file",
        "command line": "command line",
    }

    def line(indent: str, attribute: str, flat: str, value: Any, field: FieldInfo) -> str | None:
        origin = settings.origin(flat)
        if origin == "default" and not everything:
            return None
        text = f"{indent}{attribute}: {json.dumps(_shown(value, field))}"
        if origin == "default":
            return text
        where = (
            f"environment {ENV_PREFIX}{flat.upper()}"
            if origin == "environment"
            else origins.get(origin, origin)
        )
        return f"{text:<48} # from {where}"

    top: list[str] = []
    sections: list[str] = []
    total = 0
    for attribute, field in Settings.model_fields.items():
        if attribute in SECTIONS:
            section = getattr(settings, attribute)
            rows = []
            for inner, inner_field in type(section).model_fields.items():
                total += 1
                row = line("  ", inner, inner_field.alias or inner, getattr(section, inner), inner_field)
                rows += [row] if row is not None else []
            sections += [f"{attribute}:", *rows] if rows else []
        else:
            total += 1
            row = line("", attribute, attribute, getattr(settings, attribute), field)
            top += [row] if row is not None else []
    given = sum(1 for name in setting_names() if settings.origin(name) != "default")
    counted = f"{given} setting{'' if given == 1 else 's'} set"
    hints = "--all: every setting; --list: what each means"
    if everything:
        heading = f"# every setting ({total}); {counted}, each marked with where it came from"
    elif given:
        heading = (
            f"# {counted}, each with where it came from; {total - given} others have their defaults ({hints})"
        )
    else:
        heading = f"# no setting set: all {total} have their defaults ({hints})"
    return "\n".join([heading, *top, *sections])


def _shown_headers(headers: Mapping[str, str] | Sequence[str]) -> dict[str, str] | list[str]:
    if isinstance(headers, Mapping):
        return shown_headers(headers)
    entries = [entry.partition("=") for entry in headers]  # NAME=VALUE
    return [name + sep + (MASK if is_secret_header(name) else value) for name, sep, value in entries]


def _check_protobuf_backend() -> None:
    from google.protobuf.internal import api_implementation

    backend = api_implementation.Type()
    if backend != "upb":
        log.warning(
            "protobuf is using its %r backend, which decodes spans ~17x slower than 'upb'; "
            "unset PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION and install protobuf>=4.21 wheels",
            backend,
        )


async def _run(settings: Settings, live: bool = False) -> None:
    from prometheus_client import CollectorRegistry

    from agent.build import build_agent

    registry = CollectorRegistry()
    watching = None
    if live:
        from agent.commands.live import LiveRun

        watching = LiveRun(settings, registry)
    agent = build_agent(settings, registry, observers=[watching.board] if watching else ())
    stop = stop_on_signals()
    # A signal while start-up still waits for a dependency (Kafka, Redis) stops it there; a
    # start-up failure ends the command here (reported by main).
    await unless_stopped(stop, agent.start())
    if not stop.is_set():
        awaited = ", ".join(f"{d.name} at {d.endpoint}" for d in agent.dependencies.awaited())
        log.info(
            "ragpulse %s running (judge=%s, sample_rate=%s)%s",
            __version__,
            settings.judge.model,
            settings.sampling.rate,
            f"; waiting for {awaited} before taking spans" if awaited else "",
        )
        if watching is not None:
            await watching.show(stop)
        await stop.wait()
    log.info(
        "stopping: finishing in-flight evaluations (up to %.0fs)", settings.pipeline.shutdown_timeout_seconds
    )
    await agent.shutdown()
    log.info("stopped")


def _debugging(args: argparse.Namespace, settings: Settings | None) -> bool:
    """True when the full trace of an unexpected error is wanted (--log-level DEBUG or its env var)."""
    if settings is not None:
        return settings.log_level == "DEBUG"
    level = getattr(args, "log_level", None) or os.environ.get("RAGPULSE_LOG_LEVEL", "")
    return level.upper() == "DEBUG"


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    command = f"ragpulse {args.command}"
    loaded: list[Settings] = []  # once read: whether to show the full trace of an unexpected error

    def debugging() -> bool:
        return _debugging(args, loaded[0] if loaded else None)

    sys.unraisablehook = functools.partial(_unraisable, command, debugging)
    try:
        return _main(args, loaded)
    except ConfigError as exc:
        print(f"{command}: {mask(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the one place that turns a defect into a line instead of a traceback
        if debugging():
            print(mask("".join(traceback.format_exception(exc))).rstrip(), file=sys.stderr)
            hint = ""
        else:
            hint = "; run again with --log-level DEBUG for the full trace"
        print(f"{command}: unexpected error: {_one_line(exc)}{hint}", file=sys.stderr)
        return 1


def _unraisable(command: str, debugging: Callable[[], bool], unraisable: Any) -> None:
    """An error Python can only ignore (raised in a __del__, often at exit): one log line, the
    trace only when debugging."""
    where = getattr(unraisable.object, "__qualname__", type(unraisable.object).__name__)
    exc = unraisable.exc_value
    error = _one_line(exc) if exc is not None else getattr(unraisable.exc_type, "__name__", "?")
    trace = (unraisable.exc_type, exc, unraisable.exc_traceback) if debugging() else None
    log.warning("%s: ignored an error in %s: %s", command, where, error, exc_info=trace)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())  # one line, whatever the message holds
    return mask(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def _main(args: argparse.Namespace, loaded: list[Settings]) -> int:
    if getattr(args, "trust_handler", None) is not None:  # calibrate, label-queue: own settings handling
        level = "DEBUG" if _debugging(args, None) else "WARNING"
        logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
        return int(args.trust_handler(args))
    if args.command == "validate-config" and args.list:
        print(describe_settings())
        return 0
    settings = _settings(args)
    loaded.append(settings)
    configure_logging(settings)  # from here on, known secrets are masked in every log line
    return int(args.handler(args, settings))


def _validate_command(args: argparse.Namespace, settings: Settings) -> int:
    from agent.build import metric_choice

    # The metrics shown are those the agent would score; why, on stderr (stdout stays parseable).
    choice = metric_choice(settings)
    shown = settings.model_copy(update={"metrics": choice.metrics})
    if args.json:
        print(display_settings(shown))
    else:
        config_file = args.config or os.environ.get(CONFIG_ENV)
        print(settings_listing(shown, everything=args.all, config_file=config_file))
    print(f"ragpulse validate-config: {choice.describe()}", file=sys.stderr)
    return 0


def _run_command(args: argparse.Namespace, settings: Settings) -> int:
    _check_protobuf_backend()
    try:
        asyncio.run(_run(settings, live=args.live))
    except OSError as exc:
        # A port in use, a certificate file missing: the agent could not start.
        print(f"ragpulse run: cannot start: {mask(str(exc))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
