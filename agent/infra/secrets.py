"""Secrets never shown: masking of passwords, keys and tokens in anything ragpulse prints.

Two nets, both needed:
- the *known* secret values (judge API key, SASL password, the password of the Redis URL, the
  receiver's bearer token…) are collected from the settings once at start-up and replaced
  wherever they appear, whoever wrote the text (our code, redis-py, litellm, aiohttp);
- any URL userinfo (`scheme://user:password@host`) is masked even when its value is unknown.

HTTP headers a setting holds (the probe endpoints', results_otlp_headers) are credentials when
their name says so (`is_secret_header`): shown as *** wherever settings are shown, and their
values are known secrets for the masker; requests still send them in clear.

`install_log_masking` puts both on every log record at creation (a LogRecord factory), so that
no handler, whichever library added it, ever sees the clear text; `mask` is for the other
outputs (error messages printed by the CLI, validate-config).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Mapping
from urllib.parse import quote, unquote, urlsplit

MASK = "***"
# Shorter values are too likely to appear by chance in ordinary text to be masked by value.
_MIN_SECRET_LENGTH = 4
_URL_USERINFO = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:/?#@\s]*):(?P<password>[^/?#@\s]+)@"
)


def mask_url(url: str) -> str:
    """`redis://user:pw@host/0` → `redis://user:***@host/0`; URLs without a password unchanged."""
    return _URL_USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", url)


# A header whose lower-cased name contains one of these carries a credential: authorization,
# proxy-authorization, cookie, x-api-key, api-key, x-auth-token, x-client-secret, x-session-id...
SECRET_HEADER_WORDS = (
    "auth", "cookie", "token", "secret", "key", "password", "passwd", "credential", "session",
)  # fmt: skip


def is_secret_header(name: str) -> bool:
    """Whether a header's value is a credential, by its name (SECRET_HEADER_WORDS, any case)."""
    lowered = name.lower()
    return any(word in lowered for word in SECRET_HEADER_WORDS)


def shown_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers to show: the values of credential headers as ***."""
    return {name: MASK if is_secret_header(name) else value for name, value in headers.items()}


def header_secrets(headers: Mapping[str, str]) -> list[str]:
    """The credentials among `headers`, for the masker: each credential header's value and, when
    it has a scheme (`Bearer abc`, `Basic abc`), the credential alone, which a line may quote."""
    values = []
    for name, value in headers.items():
        if is_secret_header(name):
            values.append(value)
            scheme, _, credential = value.strip().partition(" ")
            if scheme and credential.strip():
                values.append(credential.strip())
    return values


def url_password(url: str | None) -> str | None:
    """The password in a URL's userinfo, decoded (redis://:pw@host), or None."""
    if not url:
        return None
    try:
        password = urlsplit(url).password
    except ValueError:
        return None
    return unquote(password) if password else None


class SecretMasker:
    """Replaces registered secret values and URL passwords in text; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: tuple[str, ...] = ()
        self._pattern: re.Pattern[str] | None = None

    def add(self, values: Iterable[str | None]) -> None:
        with self._lock:
            known = set(self._values)
            for value in values:
                if value and len(value) >= _MIN_SECRET_LENGTH:
                    known.add(value)
                    known.add(quote(value, safe=""))  # the form a password takes inside a URL
            # Longest first, so a secret that contains another is masked whole.
            self._values = tuple(sorted(known, key=len, reverse=True))
            self._pattern = re.compile("|".join(map(re.escape, self._values))) if self._values else None

    def clear(self) -> None:
        with self._lock:
            self._values = ()
            self._pattern = None

    def mask(self, text: str) -> str:
        pattern = self._pattern
        if pattern is not None:
            text = pattern.sub(MASK, text)
        if "://" in text:
            text = mask_url(text)
        return text


MASKER = SecretMasker()


def mask(text: str) -> str:
    """Text with every known secret and every URL password replaced by ***."""
    return MASKER.mask(text)


_installed = False
_formatter = logging.Formatter()


def install_log_masking(secrets: Iterable[str | None] = ()) -> None:
    """Register `secrets` and mask them (and URL passwords) in every log record from now on."""
    global _installed
    MASKER.add(secrets)
    if _installed:
        return
    _installed = True
    previous = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        _mask_record(record)
        return record

    logging.setLogRecordFactory(factory)


def _mask_record(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a bad format string: let the handler report it as usual
        return
    masked = MASKER.mask(message)
    if masked != message or record.args:
        record.msg, record.args = masked, None
    if record.exc_info and not record.exc_text:
        # Tracebacks carry exception messages (e.g. a connection URL); format and mask them now.
        record.exc_text = MASKER.mask(_formatter.formatException(record.exc_info))
    if record.stack_info:
        record.stack_info = MASKER.mask(record.stack_info)
