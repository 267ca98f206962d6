"""Authentication and TLS for the endpoints ragpulse serves (OTLP receivers, /metrics).

- OTLP: optional TLS (`otlp_tls_cert_file`, `otlp_tls_key_file`), mutual TLS
  (`otlp_tls_client_ca_file`: clients must present a certificate that CA signed) and a bearer
  token (`otlp_bearer_token` or `otlp_bearer_token_file`), as the Collector's OTLP receiver
  offers them (`tls`, `client_ca_file`, the `bearertokenauth` extension).
- /metrics: a web configuration file in the format of Prometheus' own (`--web.config.file`,
  exporter-toolkit): `tls_server_config` and `basic_auth_users` with bcrypt hashes.

Refusals answer 401, are counted by the caller's `refused` callback
(`ragpulse_requests_refused_total{source,reason="unauthorized"}`) and logged at a bounded rate.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import hashlib
import hmac
import logging
import secrets
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from agent.config import ConfigError
from agent.infra.secrets import MASKER

log = logging.getLogger(__name__)

Refused = Callable[[], None]

_REFUSAL_LOG_INTERVAL = 10.0
# Prometheus' exporter-toolkit names; the Go TLS client-auth modes mapped to Python's.
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}


def server_ssl_context(
    cert_file: str | Path,
    key_file: str | Path,
    client_ca_file: str | Path | None = None,
    *,
    client_auth: str | None = None,
    min_version: str = "TLS12",
) -> ssl.SSLContext:
    """A server TLS context; with `client_ca_file`, clients must present a certificate it signed.

    Raises ConfigError naming the file when a certificate or key cannot be loaded.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.minimum_version = _TLS_VERSIONS[min_version]
    except KeyError:
        raise ConfigError(f"TLS min_version {min_version!r}: choose from {sorted(_TLS_VERSIONS)}") from None
    try:
        context.load_cert_chain(str(cert_file), str(key_file))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load TLS certificate {cert_file} / key {key_file}: {exc}") from None
    mode = client_auth or ("RequireAndVerifyClientCert" if client_ca_file else "NoClientCert")
    if mode not in _CLIENT_AUTH:
        raise ConfigError(f"client_auth_type {mode!r}: choose from {sorted(_CLIENT_AUTH)}")
    if client_ca_file:
        try:
            context.load_verify_locations(cafile=str(client_ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load client CA file {client_ca_file}: {exc}") from None
    elif _CLIENT_AUTH[mode] != ssl.CERT_NONE:
        raise ConfigError(f"client_auth_type {mode} needs client_ca_file")
    context.verify_mode = _CLIENT_AUTH[mode]
    return context


class RefusalLog:
    """Counts every refusal, logs one line per interval (a scanner must not flood the log)."""

    def __init__(self, what: str, refused: Refused | None) -> None:
        self._what = what
        self._refused = refused
        self._last = float("-inf")
        self._since_last = 0

    def __call__(self, request: web.Request, why: str) -> None:
        if self._refused is not None:
            self._refused()
        self._since_last += 1
        now = time.monotonic()
        if now - self._last >= _REFUSAL_LOG_INTERVAL:
            log.warning(
                "%s: refused %d unauthenticated request(s), last from %s (%s); check the client's "
                "credentials",
                self._what,
                self._since_last,
                request.remote,
                why,
            )
            self._last, self._since_last = now, 0


def _unauthorized(challenge: str) -> web.Response:
    return web.Response(status=401, text="unauthorized\n", headers={"WWW-Authenticate": challenge})


# -- Bearer tokens (OTLP) -----------------------------------------------------------------------


def bearer_matches(header: str | None, token: str) -> bool:
    """Whether an Authorization header carries `token`, compared in constant time."""
    if not header:
        return False
    scheme, _, given = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


def bearer_middleware(token: str, refuse: Callable[[web.Request, str], None]) -> Middleware:
    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not bearer_matches(request.headers.get("Authorization"), token):
            refuse(request, "missing or wrong bearer token")
            return _unauthorized('Bearer realm="ragpulse"')
        return await handler(request)

    return check


def otlp_bearer_token(token: str | None, token_file: str | None) -> str | None:
    """The OTLP bearer token from its setting (`otlp_bearer_token`) or its file
    (`otlp_bearer_token_file`, whitespace stripped), registered with the log masker."""
    if token is None and token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"otlp_bearer_token_file {token_file}: {exc.strerror}") from None
        if not token:
            raise ConfigError(f"otlp_bearer_token_file {token_file} is empty")
    if token is not None:
        MASKER.add([token])
    return token


def check_otlp_tls(cert_file: str | None, key_file: str | None, client_ca_file: str | None) -> bool:
    """True when the OTLP receivers serve TLS; a ConfigError for an incomplete set of files."""
    if cert_file or key_file:
        if not (cert_file and key_file):
            raise ConfigError("otlp_tls_cert_file and otlp_tls_key_file must be set together")
        return True
    if client_ca_file:
        raise ConfigError("otlp_tls_client_ca_file needs otlp_tls_cert_file and otlp_tls_key_file (TLS)")
    return False


@dataclass(frozen=True)
class EndpointSecurity:
    """TLS and authentication for one served endpoint; all off by default."""

    ssl_context: ssl.SSLContext | None = None
    middlewares: tuple[Middleware, ...] = ()

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"


def otlp_security(
    *,
    cert_file: str | None = None,
    key_file: str | None = None,
    client_ca_file: str | None = None,
    token: str | None = None,
    refused: Refused | None = None,
) -> EndpointSecurity:
    """The OTLP/HTTP receiver's TLS (mTLS with a client CA) and bearer-token check."""
    context = None
    if check_otlp_tls(cert_file, key_file, client_ca_file):
        assert cert_file and key_file
        context = server_ssl_context(cert_file, key_file, client_ca_file)
    middlewares = (bearer_middleware(token, RefusalLog("OTLP receiver", refused)),) if token else ()
    return EndpointSecurity(context, middlewares)


# -- Prometheus web configuration (/metrics) ----------------------------------------------------

_AUTH_CACHE_SIZE = 1024


@functools.cache
def _dummy_hash() -> bytes:
    """A bcrypt hash of a random password: an unknown user costs as much time as a known one."""
    import bcrypt

    return bcrypt.hashpw(secrets.token_bytes(16), bcrypt.gensalt(10))


class BasicAuthUsers:
    """Checks HTTP basic credentials against bcrypt hashes, as Prometheus' web config does.

    bcrypt is slow on purpose (tens of ms per check); a successful check is remembered (a keyed
    hash of the credentials, never the password) so that a scrape every few seconds costs one
    lookup, and checks run off the event loop.
    """

    def __init__(self, users: Mapping[str, str]) -> None:
        self._hashes = {user: hashed.encode() for user, hashed in users.items()}
        self._key = hashlib.sha256(repr(sorted(users.items())).encode()).digest()
        self._verified: OrderedDict[bytes, None] = OrderedDict()

    def _fingerprint(self, user: str, password: str) -> bytes:
        return hmac.new(self._key, f"{user}\0{password}".encode(), hashlib.sha256).digest()

    def check_sync(self, user: str, password: str) -> bool:
        import bcrypt

        hashed = self._hashes.get(user)
        try:
            ok = bcrypt.checkpw(password.encode(), hashed or _dummy_hash())
        except ValueError:  # a malformed hash in the file
            ok = False
        return ok and hashed is not None

    async def check(self, user: str, password: str) -> bool:
        fingerprint = self._fingerprint(user, password)
        if fingerprint in self._verified:
            self._verified.move_to_end(fingerprint)
            return True
        if not await asyncio.to_thread(self.check_sync, user, password):
            return False
        self._verified[fingerprint] = None
        if len(self._verified) > _AUTH_CACHE_SIZE:
            self._verified.popitem(last=False)
        return True


def parse_basic_auth(header: str | None) -> tuple[str, str] | None:
    if not header:
        return None
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else None


def basic_auth_middleware(users: BasicAuthUsers, refuse: Callable[[web.Request, str], None]) -> Middleware:
    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        credentials = parse_basic_auth(request.headers.get("Authorization"))
        if credentials is None or not await users.check(*credentials):
            refuse(request, "missing or wrong basic-auth credentials")
            return _unauthorized('Basic realm="ragpulse"')
        return await handler(request)

    return check


@dataclass(frozen=True)
class WebConfig:
    """A parsed Prometheus web configuration file."""

    tls: dict[str, Any] = field(default_factory=dict)
    basic_auth_users: dict[str, str] = field(default_factory=dict)
    base: Path = Path(".")

    def security(self, refused: Refused | None = None) -> EndpointSecurity:
        context = None
        if self.tls:
            path = self._path
            context = server_ssl_context(
                path(self.tls["cert_file"]),
                path(self.tls["key_file"]),
                path(self.tls["client_ca_file"]) if self.tls.get("client_ca_file") else None,
                client_auth=self.tls.get("client_auth_type"),
                min_version=self.tls.get("min_version", "TLS12"),
            )
        middlewares: tuple[Middleware, ...] = ()
        if self.basic_auth_users:
            refuse = RefusalLog("metrics endpoint", refused)
            middlewares = (basic_auth_middleware(BasicAuthUsers(self.basic_auth_users), refuse),)
        return EndpointSecurity(context, middlewares)

    def _path(self, value: str) -> Path:
        # Relative paths are relative to the file, as in Prometheus.
        path = Path(value)
        return path if path.is_absolute() else self.base / path


_TLS_KEYS = {"cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version"}


def load_web_config(path: str | Path) -> WebConfig:
    """Read a Prometheus web configuration file (the subset ragpulse serves; unknown keys fail)."""
    path = Path(path)
    try:
        loaded = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"metrics_web_config_file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"metrics_web_config_file {path} is not valid YAML: {exc}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"metrics_web_config_file {path} must hold a mapping")
    unknown = set(loaded) - {"tls_server_config", "basic_auth_users"}
    if unknown:
        raise ConfigError(
            f"metrics_web_config_file {path}: unsupported key(s) {sorted(unknown)}; "
            "ragpulse reads tls_server_config and basic_auth_users"
        )
    tls = loaded.get("tls_server_config") or {}
    users = loaded.get("basic_auth_users") or {}
    if not isinstance(tls, dict) or not isinstance(users, dict):
        raise ConfigError(f"metrics_web_config_file {path}: sections must be mappings")
    if set(tls) - _TLS_KEYS:
        raise ConfigError(
            f"metrics_web_config_file {path}: unsupported tls_server_config key(s) "
            f"{sorted(set(tls) - _TLS_KEYS)}; supported: {sorted(_TLS_KEYS)}"
        )
    if tls and not (tls.get("cert_file") and tls.get("key_file")):
        raise ConfigError(f"metrics_web_config_file {path}: tls_server_config needs cert_file and key_file")
    for user, hashed in users.items():
        if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")):
            raise ConfigError(f"metrics_web_config_file {path}: user {user!r} needs a bcrypt hash")
    config = WebConfig(dict(tls), {str(u): h for u, h in users.items()}, path.parent)
    config.security()  # load certificates now: a bad file fails at start-up, not at first scrape
    return config
