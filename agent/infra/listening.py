"""Listening sockets that fail as an operator's mistake: one line naming the setting to change.

A port already taken (another agent, or an OpenTelemetry Collector on 4317/4318, its own
defaults), a privileged port or an address the machine does not have is a configuration error,
not a defect: `ListenError` is a `ConfigError`, so the CLI prints its one line and exits 2.
"""

from __future__ import annotations

import errno
import os
import socket
import ssl

from aiohttp import web

from agent.config import ENV_PREFIX, ConfigError

_HINTS = {
    errno.EADDRINUSE: "another process listens there",
    errno.EACCES: "ports below 1024 need privileges",
    errno.EADDRNOTAVAIL: "this machine has no such address",
}
# The OpenTelemetry Collector's own default ports, ragpulse's defaults too (README, "Beside a Collector").
_COLLECTOR_PORTS = (4317, 4318)


class ListenError(ConfigError):
    """A listener could not bind its address; the message names the setting and its variable."""


def listen_error(setting: str, host: str, port: int, exc: OSError) -> ListenError:
    """The one line for a failed bind of `setting` (e.g. `otlp_listen`) on host:port."""
    # The system's words for the errno (asyncio wraps them in a longer message of its own).
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    hint = _HINTS.get(exc.errno or 0)
    if exc.errno == errno.EADDRINUSE and port in _COLLECTOR_PORTS:
        hint = f"{hint}, perhaps an OpenTelemetry Collector (4317 and 4318 are its defaults)"
    variable = f"{ENV_PREFIX}{setting.upper()}"
    return ListenError(
        f"cannot listen on {host}:{port} ({setting}, {variable}): {reason}"
        + (f"; {hint}" if hint else "")
        + f"; choose another HOST:PORT with {variable} or --set {setting}=HOST:PORT"
    )


def check_bindable(setting: str, host: str, port: int) -> None:
    """Raise ListenError unless every address of host:port can be bound now.

    For servers that do not report a failed bind as an OSError (gRPC raises a RuntimeError and
    logs from its C++ core): try the bind first with the options they use (SO_REUSEADDR), then
    release it. Port 0 always binds.
    """
    try:
        addresses = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise listen_error(setting, host, port, OSError(errno.EADDRNOTAVAIL, exc.strerror)) from None
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                raise listen_error(setting, host, port, exc) from None


async def start_site(
    runner: web.AppRunner, setting: str, host: str, port: int, ssl_context: ssl.SSLContext | None
) -> int:
    """Serve a set-up aiohttp `runner` on host:port and return the port bound (port 0: any free
    one); a failed bind cleans the runner up and is the one line of `listen_error`."""
    site = web.TCPSite(runner, host, port, reuse_address=True, ssl_context=ssl_context)
    try:
        await site.start()
    except OSError as exc:  # a busy port is the operator's to fix: one line naming the setting
        await runner.cleanup()
        raise listen_error(setting, host, port, exc) from None
    bound: int = runner.addresses[0][1]
    return bound


def base_url(scheme: str, host: str, port: int) -> str:
    """scheme://host:port, an IPv6 host in brackets."""
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"
