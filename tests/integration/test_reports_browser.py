"""The HTML reports in a real browser (Debian's chromium, headless): they load with no console
error, fetch nothing from the network, and their charts are drawn.

Set REPORT_SCREENSHOT_DIR to keep the screenshots for a look.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.report.demo import demo_page
from tests.support.browser import chromium_path, visit_page
from tests.support.llm_server import FakeLLMServer
from tests.support.repo import ROOT

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(chromium_path() is None, reason="needs a browser: install Debian package chromium"),
]

CHECKS = {
    "charts": "document.querySelectorAll('figure.chart svg').length",
    "names": "[...document.querySelectorAll('figure.chart')].map(f => f.dataset.chart)",
    "drawn": "[...document.querySelectorAll('figure.chart svg')].every(s => {"
    " const r = s.getBoundingClientRect(); return r.width > 150 && r.height > 80"
    " && s.querySelectorAll('path, rect, line, use').length > 10; })",
    "fetched": "performance.getEntriesByType('resource').map(e => e.name)",
    "sections": "[...document.querySelectorAll('section')].map(s => s.id)",
    # Nothing wider than the window (no sideways scrolling), and numeric headers over their numbers.
    "fits": "document.documentElement.scrollWidth <= document.documentElement.clientWidth",
    "headers_aligned": "[...document.querySelectorAll('td.num')].every(td => {"
    " const th = td.closest('table').querySelectorAll('th')[td.cellIndex];"
    " return th && getComputedStyle(th).textAlign === 'right'; })",
    # No histogram bar runs past the highest gridline of its count axis (it would read as cut).
    "bars_inside": "[...document.querySelectorAll('figure.chart svg')].every(svg => {"
    " const grid = [...svg.querySelectorAll('line[stroke=\"#e3e6ee\"]')]"
    ".filter(l => l.getAttribute('y1') === l.getAttribute('y2')).map(l => +l.getAttribute('y1'));"
    " if (!grid.length) return true; const top = Math.min(...grid);"
    " return [...svg.querySelectorAll('rect')].every(r => +r.getAttribute('y') >= top - 0.01); })",
}


def _keep(name: str, png: bytes) -> None:
    keep = os.environ.get("REPORT_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / name).write_bytes(png)


def test_eval_report_with_comparison(tmp_path: Path) -> None:
    rows_a, rows_b = [], []
    facts = [
        (
            "Which river flows through Paris?",
            "The Seine flows through Paris.",
            "The Loire flows through Paris.",
        ),
        ("When was the tower built?", "The tower was built in 1889.", "The tower was built in 1925."),
        ("Who designed the tower?", "Gustave Eiffel designed the tower.", "Le Corbusier designed the tower."),
    ]
    for i in range(24):
        question, right, wrong = facts[i % 3]
        base = {"id": str(i), "question": question, "contexts": [right, "Lyon sits on the Rhone."],
                "reference": right}  # fmt: skip
        rows_a.append({**base, "response": right})
        rows_b.append({**base, "response": wrong if i % 2 else right})
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(json.dumps(r) + "\n" for r in rows_a))
    b.write_text("".join(json.dumps(r) + "\n" for r in rows_b) + "{not json\n")
    run = subprocess.run(
        [sys.executable, "-m", "agent", "eval", str(a), str(b), "--compare", "--out", str(tmp_path / "out")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    visit = visit_page(tmp_path / "out" / "report.html", CHECKS)
    _keep("eval-report.png", visit.screenshot)
    assert visit.console_errors == []
    assert visit.results["fetched"] == []
    assert visit.results["charts"] >= 5
    assert "differences" in visit.results["names"] and "faithfulness" in visit.results["names"]
    assert visit.results["drawn"] is True
    assert {"comparison", "summary", "distributions", "weakest", "bad-lines"} <= set(
        visit.results["sections"]
    )
    assert visit.results["fits"] is True
    assert visit.results["headers_aligned"] is True
    assert visit.results["bars_inside"] is True
    assert visit.screenshot.startswith(b"\x89PNG")


# Per criterion row of the weakest items: (item, question, the verdict as shown, its colour class, score).
CRITERION_ROWS = (
    "[...document.querySelectorAll('#weakest details')].flatMap(d => [...d.querySelectorAll('tr')]"
    ".filter(tr => tr.cells[0] && tr.cells[0].textContent.startsWith('criterion '))"
    ".map(tr => [d.querySelector('summary b').textContent, tr.cells[0].textContent,"
    " tr.cells[1].innerText, tr.cells[1].querySelector('span').className, tr.cells[2].textContent,"
    " getComputedStyle(tr.cells[1].querySelector('span')).color]))"
)


def test_eval_report_shows_each_criterion_verdict(tmp_path: Path) -> None:
    """A custom criterion's answers in the weakest items, as Chromium draws them: the judge's
    own answer (yes / no, the point of 1-5), coloured by whether it counts for the score."""
    criteria = [
        {"name": "capital_described", "question": "Is Paris described as the capital of France?",
         "reads": ["response"], "scale": "1-5", "anchors": {1: "not at all", 5: "exactly so"}},
        {"name": "mentions_fruit", "question": "Does the response mention bananas or potassium?",
         "reads": ["response"], "higher_is_better": False},
    ]  # fmt: skip
    config = tmp_path / "ragpulse.yaml"
    config.write_text(json.dumps({"criteria": criteria}))  # JSON is YAML
    data = tmp_path / "set.jsonl"
    data.write_text(
        json.dumps({"id": "paris", "question": "Capital of France?", "contexts": ["Paris is the capital."],
                    "response": "Paris is the capital of France."}) + "\n"
        + json.dumps({"id": "fruit", "question": "Capital of France?", "contexts": ["Paris is the capital."],
                      "response": "Bananas are rich in potassium."}) + "\n"
    )  # fmt: skip
    with FakeLLMServer() as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_")}
        env |= {"RAGPULSE_CONFIG": str(config), "RAGPULSE_JUDGE_MODEL": "openai/ragpulse-test-judge",
                "RAGPULSE_JUDGE_API_BASE": server.api_base, "RAGPULSE_JUDGE_API_KEY": "test-key"}  # fmt: skip
        run = subprocess.run(
            [sys.executable, "-m", "agent", "eval", str(data), "--out", str(tmp_path / "out"),
             "--metrics", "faithfulness,capital_described,mentions_fruit"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    assert run.returncode == 0, run.stderr
    visit = visit_page(tmp_path / "out" / "report.html", {**CHECKS, "criteria": CRITERION_ROWS})
    _keep("eval-report-criteria.png", visit.screenshot)
    assert visit.console_errors == [] and visit.results["fetched"] == []
    assert visit.results["fits"] is True and visit.results["headers_aligned"] is True
    green, red = "rgb(16, 120, 47)", "rgb(179, 38, 30)"  # .yes and .no (agent/report/html.py)
    assert visit.results["criteria"] == [
        # The weakest first: 1 of 5, and a "yes" to a lower-is-better question, both in red.
        ["fruit", "criterion capital_described", "1 of 5", "no", "0.00", red],
        ["fruit", "criterion mentions_fruit", "yes", "no", "0.00", red],
        ["paris", "criterion capital_described", "4 of 5", "yes", "0.75", green],
        ["paris", "criterion mentions_fruit", "no", "yes", "1.00", green],
    ]


def test_demo_report(tmp_path: Path) -> None:
    times = [1.0 + 2 * i for i in range(30)]
    data = {
        "judge": "lexical",
        "phases": {"healthy": 0.0, "irrelevant chunks ranked first": 24.0, "missing facts": 42.0},
        "regression_injected_at": 24.0,
        "detections": [
            {
                "service": "docs-search",
                "route": "/api/install",
                "metric": "context_precision",
                "at": 31.5,
                "phase": "irrelevant chunks ranked first",
                "after_phase_start": 7.5,
            },
        ],
        "timeline": {
            "t": times,
            "context_precision": [0.95 if t < 24 else 0.35 for t in times],
            "faithfulness": [0.9 if t < 42 else 0.3 for t in times],
        },
    }
    path = tmp_path / "report.html"
    path.write_text(demo_page(data, "first score after 1.2s"))
    visit = visit_page(path, CHECKS)
    _keep("demo-report.png", visit.screenshot)
    assert visit.console_errors == []
    assert visit.results["fetched"] == []
    assert visit.results["names"] == ["timeline"]
    assert visit.results["drawn"] is True
