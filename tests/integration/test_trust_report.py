"""The calibrate report opens offline in a real browser: no console errors, one chart per metric."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from agent.cli import main

pytestmark = pytest.mark.integration

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser")) if p), None)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium missing: install Debian package chromium")
def test_calibrate_report_renders_offline_in_chromium(tmp_path: Path) -> None:
    rng = random.Random(6)
    labels = []
    for i in range(300):
        for metric in ("faithfulness", "context_relevancy"):
            good = rng.random() < 0.7
            score = round(min(1.0, max(0.0, rng.gauss(0.7 if good else 0.4, 0.2))), 3)
            labels.append(
                {"interaction_id": f"{i:032x}:{i:016x}", "metric": metric, "label": int(good), "score": score}
            )
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in labels))
    out = tmp_path / "out"
    assert main(["calibrate", str(path), "--out", str(out), "--bootstrap", "100"]) == 0
    report = out / "report.html"
    page = report.read_text()
    for fetch in ('src="http', "src='http", 'href="http', "url(http", "<script src", '<link rel="stylesheet'):
        assert fetch not in page  # self-contained: nothing fetched (the favicon is a data: URI)
    assert page.count("<link ") == page.count('<link rel="icon" href="data:,">') == 1
    result = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
         "--dump-dom", report.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    assert dom.count("<svg") == 2
    assert "faithfulness: reliability" in dom and "context_relevancy: reliability" in dom
    console = [line for line in result.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == []
