"""The agent as a subprocess (`python -m agent run`) on free ports, stopped with a signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tests.support.net import Scrape, free_port, http_get, scrape
from tests.support.repo import ROOT


class AgentProcess:
    """`python -m agent run` in a subprocess on free ports, stopped with a signal."""

    def __init__(self, args: Sequence[str] = (), env: Mapping[str, str] | None = None) -> None:
        self.otlp_port = free_port()
        self.grpc_port = free_port()
        self.metrics_port = free_port()
        command = [
            sys.executable, "-m", "agent", "run",
            "--otlp-listen", f"127.0.0.1:{self.otlp_port}",
            "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
            *args,
        ]  # fmt: skip
        environment = {k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_")}
        # The OTLP/gRPC receiver on a free port too (its default 4317 is one per machine).
        environment["RAGPULSE_OTLP_GRPC_LISTEN"] = f"127.0.0.1:{self.grpc_port}"
        environment.update(env or {})
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"ragpulse-agent-{self.otlp_port}.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=environment, stdout=self._log, stderr=subprocess.STDOUT
        )

    @property
    def traces_url(self) -> str:
        return f"http://127.0.0.1:{self.otlp_port}/v1/traces"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"agent exited with {self.process.returncode}:\n{self.log()}")
            try:
                if http_get(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=1)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"agent not ready after {timeout}s:\n{self.log()}")

    def scrape(self) -> Scrape:
        return scrape(self.metrics_url)

    def wait_for(self, predicate: Callable[[Scrape], object], timeout: float = 15.0) -> Scrape:
        """Scrape until predicate(scrape) holds and return that scrape; fails when it does not hold
        within `timeout`, so a condition that can no longer come true is not waited out silently."""
        deadline = time.monotonic() + timeout
        while not predicate(result := self.scrape()):
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {timeout}s: {predicate}; agent log:\n{self.log()[-4000:]}")
            time.sleep(0.05)
        return result

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signum)
        try:
            return self.process.wait(timeout)
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._log.close()
