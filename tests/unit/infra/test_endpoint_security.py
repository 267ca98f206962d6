"""Auth and TLS helpers of agent/infra/endpoint_security.py: bearer tokens, basic auth, web config files."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import bcrypt
import pytest

from agent.config import ConfigError
from agent.infra.endpoint_security import (
    BasicAuthUsers,
    bearer_matches,
    load_web_config,
    otlp_bearer_token,
    otlp_security,
    parse_basic_auth,
)
from tests.support.tls import make_pki


def test_bearer_tokens_match_exactly_with_any_case_of_the_scheme() -> None:
    assert bearer_matches("Bearer s3cret", "s3cret")
    assert bearer_matches("bearer  s3cret ", "s3cret")
    for header in (None, "", "Bearer", "Bearer s3cre", "Bearer s3cret2", "Basic s3cret", "s3cret"):
        assert not bearer_matches(header, "s3cret"), header


def test_basic_auth_checks_bcrypt_hashes_including_htpasswd_2y() -> None:
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$", 1)
    users = BasicAuthUsers({"prometheus": hashed})

    async def checks() -> list[bool]:
        return [
            await users.check("prometheus", "pw"),
            await users.check("prometheus", "pw"),  # remembered
            await users.check("prometheus", "wrong"),
            await users.check("nobody", "pw"),
        ]

    assert asyncio.run(checks()) == [True, True, False, False]
    encoded = base64.b64encode(b"prometheus:p:w").decode()
    assert parse_basic_auth(f"Basic {encoded}") == ("prometheus", "p:w")
    assert parse_basic_auth("Basic !!!") is None and parse_basic_auth("Bearer x") is None


def test_web_config_files_are_read_like_prometheus_and_checked_at_start(tmp_path: Path) -> None:
    make_pki(tmp_path)  # server.pem, server-key.pem, ca.pem beside the file
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()
    good = tmp_path / "web.yml"
    good.write_text(
        f"tls_server_config:\n  cert_file: server.pem\n  key_file: server-key.pem\n"
        f"  client_ca_file: ca.pem\nbasic_auth_users:\n  prometheus: '{hashed}'\n"
    )
    config = load_web_config(good)
    security = config.security()
    assert security.scheme == "https" and len(security.middlewares) == 1

    cases = {
        "http_server_config:\n  http2: false\n": "unsupported key",
        "tls_server_config:\n  cert_file: server.pem\n": "needs cert_file and key_file",
        "tls_server_config:\n  cert_file: server.pem\n  key_file: missing.pem\n": "cannot load TLS",
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server-key.pem\n  cipher_suites: [x]\n": (
            "unsupported tls_server_config"
        ),
        "basic_auth_users:\n  prometheus: plaintext\n": "bcrypt hash",
        "- a list\n": "must hold a mapping",
    }
    for text, message in cases.items():
        bad = tmp_path / "bad.yml"
        bad.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_web_config(bad)
    with pytest.raises(ConfigError, match="metrics_web_config_file"):
        load_web_config(tmp_path / "absent.yml")


def test_otlp_settings_are_validated_and_the_token_file_is_read(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    with pytest.raises(ConfigError, match="must be set together"):
        otlp_security(cert_file=str(pki.server_cert))
    with pytest.raises(ConfigError, match="needs otlp_tls_cert_file"):
        otlp_security(client_ca_file=str(pki.ca))
    token_file = tmp_path / "token"
    token_file.write_text("tok-from-file\n")
    assert otlp_bearer_token(None, str(token_file)) == "tok-from-file"
    token_file.write_text("  \n")
    with pytest.raises(ConfigError, match="is empty"):
        otlp_bearer_token(None, str(token_file))
    plain = otlp_security()
    assert plain.ssl_context is None and plain.middlewares == ()
    mtls = otlp_security(
        cert_file=str(pki.server_cert),
        key_file=str(pki.server_key),
        client_ca_file=str(pki.ca),
        token=otlp_bearer_token("t0ken", None),
    )
    assert mtls.scheme == "https" and len(mtls.middlewares) == 1
