from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import ConfigError, describe_settings, load_settings


def test_embedded_defaults() -> None:
    settings = load_settings(environ={})
    assert settings.source == "otlp-http"
    assert settings.otlp_address == ("127.0.0.1", 4318)
    assert settings.metrics_address == ("127.0.0.1", 9464)
    assert settings.judge_model == "lexical" and settings.judge_is_local
    assert settings.redis_url is None
    assert settings.metrics == ("context_precision", "context_relevancy", "faithfulness", "answer_relevancy")


def test_precedence_is_flags_over_env_over_file(tmp_path: Path) -> None:
    config = tmp_path / "ragpulse.yaml"
    config.write_text(
        "sample_rate: 0.2\nmax_label_values: 7\nroute: {attributes: [http.route, rpc.method]}\n"
    )
    settings = load_settings(
        config_file=config,
        environ={"RAGPULSE_SAMPLE_RATE": "0.3", "RAGPULSE_EVAL_CONCURRENCY": "3"},
        overrides={"eval_concurrency": "5", "otlp_listen": None},
    )
    assert settings.sample_rate == 0.3  # env beats file
    assert settings.eval_concurrency == 5  # flag beats env
    assert settings.max_label_values == 7  # file beats default
    assert settings.route_attributes == ("http.route", "rpc.method")  # nested YAML section
    assert settings.otlp_listen == "127.0.0.1:4318"  # a flag left unset does not override


def test_config_file_named_by_env(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("log_level: DEBUG\n")
    assert load_settings(environ={"RAGPULSE_CONFIG": str(config)}).log_level == "DEBUG"


def test_list_settings_from_env_are_comma_separated() -> None:
    settings = load_settings(environ={"RAGPULSE_ROUTE_ATTRIBUTES": "http.route, gen_ai.agent.name"})
    assert settings.route_attributes == ("http.route", "gen_ai.agent.name")


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
        load_settings(environ=environ)
    for fragment in fragments:
        assert fragment in str(error.value)


def test_bad_yaml_and_missing_file_are_config_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("sample_rate: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(config_file=bad, environ={})
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings(config_file=tmp_path / "missing.yaml", environ={})
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_settings(config_file=listed, environ={})


def test_secrets_are_not_printed() -> None:
    settings = load_settings(environ={"RAGPULSE_JUDGE_API_KEY": "sk-secret"})
    assert "sk-secret" not in settings.model_dump_json()
    assert settings.judge_api_key is not None and settings.judge_api_key.get_secret_value() == "sk-secret"


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
        settings = load_settings(environ=environ)
    assert settings.sample_rate == 0.25
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    for name in ("RAGPULSE_SERVICE_HOST", "RAGPULSE_PORT,", "RAGPULSE_PORT_4318_TCP_ADDR"):
        assert name in warnings[0]
    assert "RAGPULSE_SAMPEL_RATE (did you mean RAGPULSE_SAMPLE_RATE?)" in warnings[0]


def test_known_env_vars_alone_log_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="agent.config"):
        load_settings(environ={"RAGPULSE_SAMPLE_RATE": "0.5", "OTHER": "x"})
    assert caplog.records == []


def test_unknown_keys_in_a_config_file_stay_errors(tmp_path: Path) -> None:
    config = tmp_path / "ragpulse.yaml"
    config.write_text("sampel_rate: 0.5\n")
    with pytest.raises(ConfigError, match=r"sampel_rate.*unknown setting"):
        load_settings(config_file=config, environ={})
