"""Open a page in Debian's headless Chromium over the DevTools protocol: console errors, DOM
queries and a screenshot. aiohttp is the websocket client (already a dependency)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-extensions", "--hide-scrollbars", "--window-size=1280,1600",
)  # fmt: skip


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class PageVisit:
    console_errors: list[str] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    screenshot: bytes = b""


async def _visit(port: int, url: str, expressions: dict[str, str], timeout: float) -> PageVisit:
    visit = PageVisit()
    ids = itertools.count(1)
    async with aiohttp.ClientSession() as session:
        async with session.put(f"http://127.0.0.1:{port}/json/new?about:blank") as response:
            target = await response.json()
        async with session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            pending: dict[int, asyncio.Future[Any]] = {}
            loaded = asyncio.Event()

            async def reader() -> None:
                async for message in ws:
                    data = json.loads(message.data)
                    if "id" in data and data["id"] in pending:
                        pending.pop(data["id"]).set_result(data)
                        continue
                    method, params = data.get("method"), data.get("params", {})
                    if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                        visit.console_errors.append(json.dumps(params.get("args")))
                    elif method == "Runtime.exceptionThrown":
                        visit.console_errors.append(json.dumps(params.get("exceptionDetails")))
                    elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                        visit.console_errors.append(params["entry"].get("text", ""))
                    elif method == "Page.loadEventFired":
                        loaded.set()

            async def call(method: str, **params: Any) -> Any:
                message_id = next(ids)
                future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                pending[message_id] = future
                await ws.send_str(json.dumps({"id": message_id, "method": method, "params": params}))
                answer = await asyncio.wait_for(future, timeout)
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})

            listening = asyncio.create_task(reader())
            for domain in ("Runtime", "Log", "Page"):
                await call(f"{domain}.enable")
            await call("Page.navigate", url=url)
            await asyncio.wait_for(loaded.wait(), timeout)
            await asyncio.sleep(0.3)  # late console messages
            for name, expression in expressions.items():
                result = await call("Runtime.evaluate", expression=expression, returnByValue=True)
                visit.results[name] = result["result"].get("value")
            shot = await call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
            visit.screenshot = base64.b64decode(shot["data"])
            listening.cancel()
    return visit


def visit_page(path: Path, expressions: dict[str, str], timeout: float = 60.0) -> PageVisit:
    """Load `path` in headless Chromium, evaluate `expressions` (JS, JSON-returnable values)."""
    binary = chromium_path()
    if binary is None:
        raise RuntimeError("chromium not found")
    # Chromium's helper processes (zygote, renderers) may outlive the browser process and still
    # write into the profile: they run in a process group of their own, stopped as a whole, and
    # what one of them wrote after that is not a failure of the page.
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        process = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            deadline = time.monotonic() + timeout
            while not (port_file.is_file() and port_file.read_text().strip()):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"chromium did not start (exit {process.returncode})")
                time.sleep(0.1)
            port = int(port_file.read_text().split()[0])
            return asyncio.run(_visit(port, path.resolve().as_uri(), expressions, timeout))
        finally:
            _stop_group(process)


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """Stop Chromium and every helper process it started (its process group)."""
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # helpers that outlived the browser process
