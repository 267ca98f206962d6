from __future__ import annotations

from pathlib import Path

import pytest

from agent.build import load_checked_settings
from agent.config import ConfigError, describe_settings
from tests.support.repo import ROOT


def test_embedded_defaults() -> None:
    settings = load_checked_settings(environ={})
    assert settings.source == "otlp-http"
    assert settings.otlp.address == ("127.0.0.1", 4318)
    assert settings.server.address == ("127.0.0.1", 9464)
    assert settings.judge.model == "lexical" and settings.judge.is_local
    assert settings.redis.url is None
    # Unset: the judge's default set (tests/unit/test_default_metrics.py).
    assert settings.metrics is None


def test_precedence_is_flags_over_env_over_file(tmp_path: Path) -> None:
    config = tmp_path / "ragpulse.yaml"
    config.write_text(
        "sample_rate: 0.2\nmax_label_values: 7\nroute: {attributes: [http.route, rpc.method]}\n"
    )
    settings = load_checked_settings(
        config_file=config,
        environ={"RAGPULSE_SAMPLE_RATE": "0.3", "RAGPULSE_EVAL_CONCURRENCY": "3"},
        overrides={"eval_concurrency": "5", "otlp_listen": None},
    )
    assert settings.sampling.rate == 0.3  # env beats file
    assert settings.pipeline.eval_concurrency == 5  # flag beats env
    assert settings.series.max_routes == 7  # file beats default
    assert settings.assembly.route_attributes == ("http.route", "rpc.method")  # nested YAML section
    assert settings.otlp.listen == "127.0.0.1:4318"  # a flag left unset does not override


def test_config_file_named_by_env(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("log_level: DEBUG\n")
    assert load_checked_settings(environ={"RAGPULSE_CONFIG": str(config)}).log_level == "DEBUG"


def test_list_settings_from_env_are_comma_separated() -> None:
    settings = load_checked_settings(environ={"RAGPULSE_ROUTE_ATTRIBUTES": "http.route, gen_ai.agent.name"})
    assert settings.assembly.route_attributes == ("http.route", "gen_ai.agent.name")


@pytest.mark.parametrize(
    ("environ", "fragments"),
    [
        ({"RAGPULSE_SAMPLE_RATE": "1.5"}, ["sample_rate", "from environment", "RAGPULSE_SAMPLE_RATE"]),
        ({"RAGPULSE_OTLP_LISTEN": "4318"}, ["otlp_listen", "HOST:PORT"]),
        ({"RAGPULSE_METRICS": "context_precision,bogus"}, ["metrics", "bogus"]),
        ({"RAGPULSE_EVAL_CONCURRENCY": "0"}, ["eval_concurrency", "greater than 0"]),
    ],
)
def test_errors_name_the_bad_setting(environ: dict[str, str], fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as error:
        load_checked_settings(environ=environ)
    for fragment in fragments:
        assert fragment in str(error.value)


def test_bad_yaml_and_missing_file_are_config_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("sample_rate: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_checked_settings(config_file=bad, environ={})
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_checked_settings(config_file=tmp_path / "missing.yaml", environ={})
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_checked_settings(config_file=listed, environ={})


def test_secrets_are_not_printed() -> None:
    settings = load_checked_settings(environ={"RAGPULSE_JUDGE_API_KEY": "sk-secret"})
    assert "sk-secret" not in settings.model_dump_json()
    assert settings.judge.api_key is not None and settings.judge.api_key.get_secret_value() == "sk-secret"


def test_every_setting_is_listed_with_its_env_var() -> None:
    listing = describe_settings()
    for name in ("sample_rate", "redis_url", "judge_model", "otlp_listen"):
        assert f"RAGPULSE_{name.upper()}" in listing


def test_unknown_env_vars_are_a_warning_naming_them_not_an_error(caplog: pytest.LogCaptureFixture) -> None:
    # What Kubernetes injects for a Service named ragpulse, plus a typo of a real setting.
    environ = {
        "RAGPULSE_SERVICE_HOST": "10.0.0.7",
        "RAGPULSE_PORT": "tcp://10.0.0.7:4318",
        "RAGPULSE_PORT_4318_TCP_ADDR": "10.0.0.7",
        "RAGPULSE_SAMPEL_RATE": "0.5",
        "RAGPULSE_SAMPLE_RATE": "0.25",
    }
    with caplog.at_level("WARNING", logger="agent.config"):
        settings = load_checked_settings(environ=environ)
    assert settings.sampling.rate == 0.25
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    for name in ("RAGPULSE_SERVICE_HOST", "RAGPULSE_PORT,", "RAGPULSE_PORT_4318_TCP_ADDR"):
        assert name in warnings[0]
    assert "RAGPULSE_SAMPEL_RATE (did you mean RAGPULSE_SAMPLE_RATE?)" in warnings[0]


def test_known_env_vars_alone_log_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="agent.config"):
        load_checked_settings(environ={"RAGPULSE_SAMPLE_RATE": "0.5", "OTHER": "x"})
    assert caplog.records == []


def test_unknown_keys_in_a_config_file_stay_errors(tmp_path: Path) -> None:
    config = tmp_path / "ragpulse.yaml"
    config.write_text("sampel_rate: 0.5\n")
    with pytest.raises(ConfigError, match=r"sampel_rate.*unknown setting"):
        load_checked_settings(config_file=config, environ={})


@pytest.mark.parametrize(
    ("yaml_text", "written", "meant"),
    [
        # Nested: the key as written (section.key), the suggestion in the same spelling.
        ("judge: {modle: openai/gpt-4o-mini}\n", "judge.modle", "judge.model"),
        ("kafka:\n  topc: spans\n", "kafka.topc", "kafka.topic"),
        ("sampling: {rat: 0.1}\n", "sampling.rat", "sampling.rate"),
        # A legacy prefix keeps its nesting; a section's name guessed as a flat prefix gets the flat name.
        ("sample: {rat: 0.1}\n", "sample.rat", "sample.rate"),
        ("sampling_rat: 0.1\n", "sampling_rat", "sample_rate"),
        ("judge-modle: x\n", "judge-modle", "judge_model"),
        # Nothing close: no guess.
        ("zzz: {qqq: 1}\n", "zzz.qqq", None),
    ],
)
def test_a_config_file_typo_is_named_as_written_with_a_suggestion(
    tmp_path: Path, yaml_text: str, written: str, meant: str | None
) -> None:
    config = tmp_path / "ragpulse.yaml"
    config.write_text(yaml_text)
    with pytest.raises(ConfigError) as raised:
        load_checked_settings(config_file=config, environ={})
    hint = f"; did you mean {meant}?" if meant else ""
    assert str(raised.value).splitlines() == [
        "invalid configuration:",
        f"  {written} (from config file): unknown setting{hint} "
        "(`ragpulse validate-config --list` lists every setting)",
    ]


def test_a_suggested_key_is_one_the_loader_accepts(tmp_path: Path) -> None:
    """Following the suggestion works: the key it names is a setting."""
    config = tmp_path / "ragpulse.yaml"
    for typo, fixed in (
        ("judge: {modle: x}", "judge: {model: x}"),
        ("sample: {rat: 0.1}", "sample: {rate: 0.1}"),
    ):
        config.write_text(typo + "\n")
        with pytest.raises(ConfigError, match="did you mean"):
            load_checked_settings(config_file=config, environ={})
        config.write_text(fixed + "\n")
        load_checked_settings(config_file=config, environ={})


def test_an_unknown_set_flag_is_named_with_a_suggestion() -> None:
    with pytest.raises(ConfigError) as raised:
        load_checked_settings(environ={}, overrides={"sampel_rate": "0.5"})
    assert (
        str(raised.value)
        .splitlines()[1]
        .startswith("  sampel_rate (from command line): unknown setting; did you mean sample_rate?")
    )


# -- First contact: each mistake an operator can make is one error naming the setting -----------


@pytest.mark.parametrize(
    ("environ", "setting", "says"),
    [
        ({"RAGPULSE_METRICS": "shop/faithfulness"}, "metrics", "name a service"),
        ({"RAGPULSE_METRICS": "faithfulness,bogus"}, "metrics", "unknown metric"),
        ({"RAGPULSE_REDIS_URL": "http://cache.local:6379"}, "redis_url", "redis://"),
        ({"RAGPULSE_REDIS_URL": "redis://cache.local:port/0"}, "redis_url", "port"),
        ({"RAGPULSE_REDIS_URL": "redis://cache.local:6379/zero"}, "redis_url", "database"),
        ({"RAGPULSE_REDIS_URL": "redis://"}, "redis_url", "no host"),
        ({"RAGPULSE_SOURCE": "kafka", "RAGPULSE_KAFKA_BOOTSTRAP": ""}, "kafka_bootstrap", "no bootstrap"),
        ({"RAGPULSE_KAFKA_BOOTSTRAP": "broker-without-port"}, "kafka_bootstrap", "HOST:PORT"),
        ({"RAGPULSE_RESULTS_OTLP_ENDPOINT": "collector:4318"}, "results_otlp_endpoint", "http(s)://"),
        ({"RAGPULSE_SAMPLE_KEEP_RULES": "feedback.score"}, "sample_keep_rules", "OP one of"),
        ({"RAGPULSE_DOCUMENTS_KEY": "source,url"}, "documents_key", "one metadata key"),
        ({"RAGPULSE_DOCUMENTS_KEY": "k" * 101}, "documents_key", "at most 100 characters"),
        ({"RAGPULSE_DOCUMENTS_KEY": "source\x00"}, "documents_key", "control characters"),
        (
            {"RAGPULSE_LABEL_UNCERTAIN_LOW": "0.8", "RAGPULSE_LABEL_UNCERTAIN_HIGH": "0.2"},
            "label_uncertain_high",
            "label_uncertain_low",
        ),
    ],
)
def test_a_bad_setting_is_one_error_naming_it_its_source_and_its_variable(
    environ: dict[str, str], setting: str, says: str
) -> None:
    with pytest.raises(ConfigError) as error:
        load_checked_settings(environ=environ)
    message = str(error.value)
    assert f"{setting} (from environment; env RAGPULSE_{setting.upper()})" in message
    assert says in message
    assert len(message.splitlines()) == 2  # the heading and one line about the setting


def test_validate_config_rejects_what_run_would_reject(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent.cli import main

    monkeypatch.setenv("RAGPULSE_METRICS", "shop/faithfulness")
    assert main(["validate-config"]) == 2
    err = capsys.readouterr().err
    assert "metrics (from environment; env RAGPULSE_METRICS)" in err and "Traceback" not in err
    monkeypatch.setenv("RAGPULSE_METRICS", "faithfulness,nonsense")
    assert main(["validate-config"]) == 2
    assert "unknown metric(s) ['nonsense']" in capsys.readouterr().err


def test_the_readme_names_every_section_in_order() -> None:
    """README, "Configuration": the sections a setting sits in, as the code has them."""
    import re

    from agent.config import SECTIONS

    readme = " ".join((ROOT / "README.md").read_text().split())
    listed = re.search(r"sits in a section \(([a-z, ]+)\) that YAML may nest", readme)
    assert listed, "README.md no longer lists the settings sections"
    assert listed[1].split(", ") == list(SECTIONS)


def test_settings_are_read_by_section_and_written_flat_or_nested(tmp_path: Path) -> None:
    config = tmp_path / "ragpulse.yaml"
    config.write_text(
        "kafka: {topic: spans, sasl: {username: me}}\n"
        "sampling: {rate: 0.25, keep_rules: ['feedback.score < 0']}\n"
        "sample: {keep_max_per_minute: 10}\n"
        "security: {pii: on}\n"
        "series: {max_label_pairs: 50}\n"
        "judge_model: openai/gpt-4o-mini\n"
    )
    settings = load_checked_settings(config_file=config, environ={})
    assert settings.kafka.topic == "spans" and settings.kafka.sasl_username == "me"
    assert settings.sampling.rate == 0.25 and settings.sampling.keep_rules == ("feedback.score < 0",)
    assert settings.sampling.keep_max_per_minute == 10
    assert settings.security.pii == "on" and settings.series.max_pairs == 50
    assert settings.judge.model == "openai/gpt-4o-mini" and not settings.judge.is_local
    assert settings.origin("kafka_topic") == "config file" and settings.origin("redis_url") == "default"
    from agent.config import Settings

    flat = Settings(kafka_topic="spans", sample_rate=0.25)
    nested = Settings(kafka={"topic": "spans"}, sampling={"rate": 0.25})
    assert flat == nested


def test_documents_key_names_the_metadata_the_conventions_read() -> None:
    """documents_key reaches the conventions, which then read that key of a document's metadata;
    unset (or blank), they read none."""
    import json

    from agent.build import build_conventions
    from tests.support.otlp import Recorder, decoded

    recorder = Recorder()
    with recorder.tracer.start_as_current_span("retriever") as span:
        span.set_attribute("openinference.span.kind", "RETRIEVER")
        span.set_attribute("retrieval.documents.0.document.content", "text")
        span.set_attribute("retrieval.documents.0.document.metadata", json.dumps({"source": "a.md"}))
    (span,) = decoded(recorder.spans())

    def metadata(environ: dict[str, str]) -> object:
        conventions = build_conventions(load_checked_settings(environ=environ))
        parts = next(p for c in conventions if (p := c.extract(span)) is not None)
        return parts.chunks[0].metadata  # type: ignore[index]

    assert load_checked_settings(environ={"RAGPULSE_DOCUMENTS_KEY": " source "}).documents.key == "source"
    assert metadata({"RAGPULSE_DOCUMENTS_KEY": "source"}) == (("source", "a.md"),)
    assert metadata({}) == () and metadata({"RAGPULSE_DOCUMENTS_KEY": " "}) == ()
    assert "RAGPULSE_DOCUMENTS_KEY" in describe_settings()


# -- custom criteria (docs/criteria.md) ------------------------------------------------------------


def _doc_blocks(language: str) -> list[str]:
    text = (ROOT / "docs" / "criteria.md").read_text()
    return [block.split("\n", 1)[1] for block in text.split("```")[1::2] if block.startswith(language)]


def test_the_documented_criteria_example_is_valid(tmp_path: Path) -> None:
    (example,) = _doc_blocks("yaml")
    config = tmp_path / "ragpulse.yaml"
    config.write_text(example)
    settings = load_checked_settings(config_file=config, environ={})
    tone = {c.name: c for c in settings.criteria}["tone"]
    assert [c.name for c in settings.criteria] == ["cites_policy", "tone", "speculation"]
    assert tone.scale == "1-5" and tone.anchors[3] == "neutral" and tone.reads == ("query", "response")
    assert settings.criteria[2].higher_is_better is False and settings.criteria[2].scale == "binary"


def test_the_documented_criteria_errors_are_what_ragpulse_says(tmp_path: Path) -> None:
    (example,) = _doc_blocks("yaml")
    anchors_line, local_line = [b.strip() for b in _doc_blocks("\n") if "invalid configuration" in b]
    config = tmp_path / "ragpulse.yaml"
    config.write_text(example.replace("      3: neutral\n      5: warm and professional\n", ""))
    with pytest.raises(ConfigError) as caught:
        load_checked_settings(config_file=config, environ={})
    assert str(caught.value) == anchors_line
    config.write_text(example.replace("model: openai/gpt-4o-mini", "model: lexical"))
    with pytest.raises(ConfigError) as caught:
        load_checked_settings(config_file=config, environ={})
    assert str(caught.value) == local_line


@pytest.mark.parametrize(
    ("name", "message"),
    [("faithfulness", "name built-in metrics"), ("recall_at_5", "name built-in metrics"),
     ("supported", "keys of the judge's answers")],
)  # fmt: skip
def test_a_criterion_may_not_take_a_name_ragpulse_uses(name: str, message: str) -> None:
    environ = {"RAGPULSE_JUDGE_MODEL": "openai/gpt-4o-mini",
               "RAGPULSE_CRITERIA": f'[{{"name": "{name}", "question": "Q?"}}]'}  # fmt: skip
    with pytest.raises(ConfigError, match=message) as caught:
        load_checked_settings(environ=environ)
    assert str(caught.value).count("\n") == 1  # the header and one line naming the setting


def test_an_alert_threshold_may_name_a_criterion() -> None:
    environ = {"RAGPULSE_JUDGE_MODEL": "openai/gpt-4o-mini", "RAGPULSE_ALERT_THRESHOLDS": "tone=0.6",
               "RAGPULSE_CRITERIA": '[{"name": "tone", "question": "Is it polite?"}]'}  # fmt: skip
    assert load_checked_settings(environ=environ).alerts.thresholds == {"tone": 0.6}


def test_the_documented_prompt_is_what_the_judge_receives(tmp_path: Path) -> None:
    from agent.judges.questions import criteria_instruction

    (example,) = _doc_blocks("yaml")
    config = tmp_path / "ragpulse.yaml"
    config.write_text(example)
    criteria = load_checked_settings(config_file=config, environ={}).criteria
    (shown,) = [b.strip() for b in _doc_blocks("\n") if b.startswith("CRITERIA")]
    assert shown == criteria_instruction(criteria[:2])


@pytest.mark.parametrize(
    ("model", "self_check", "checked"),
    [
        ("gpt-4o-mini", True, True),
        ("gpt-4o-mini", False, False),
        ("lexical", True, False),
        ("embedding", True, False),
    ],
)
def test_only_an_llm_judge_is_checked_at_start_and_only_when_asked(
    model: str, self_check: bool, checked: bool
) -> None:
    from agent.config import JudgeSettings

    assert JudgeSettings(model=model, self_check=self_check).checked_at_start is checked
