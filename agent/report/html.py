"""Self-contained HTML reports: inline CSS and SVG charts, no script, no external resource."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2433;
background:#f6f7fb}
main{max-width:1180px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 10px}
.meta{color:#5b6475;margin-bottom:16px}
section{background:#fff;border:1px solid #e3e6ee;border-radius:8px;padding:16px 18px;margin-bottom:18px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid #eceef4;vertical-align:top}
th{background:#f0f2f7;font-weight:600;white-space:nowrap}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.text{overflow-wrap:anywhere;width:100%}td:first-child{white-space:nowrap}
code,p,summary,li{overflow-wrap:anywhere}
h3{font-size:15px;margin:22px 0 8px}h4{font-size:14px;margin:0 0 6px}
.sides{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:14px;margin:8px 0 14px}
.side{border:1px solid #e3e6ee;border-radius:6px;padding:8px 10px;min-width:0}
.scores{color:#5b6475;font-size:13px}
.grid{display:flex;flex-wrap:wrap;gap:12px}
figure.chart{margin:0;background:#fff}
figure.chart svg{max-width:100%;height:auto}
.yes{color:#10782f;font-weight:600}.no{color:#b3261e;font-weight:600}
.better{color:#10782f;font-weight:600}.worse{color:#b3261e;font-weight:600}
.muted{color:#7a8294}
details{margin:4px 0}summary{cursor:pointer}
.callout{border-left:4px solid #b3261e;padding:6px 10px;background:#fff5f4}
.ok{border-left-color:#10782f;background:#f3fbf5}
"""


def fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    numeric: Sequence[int] = (),
    text: Sequence[int] = (),
) -> str:
    """An HTML table; cells are already-escaped HTML. `numeric` columns align right under right-
    aligned headers; `text` columns (free text: chunks, reasons) take the spare width and break
    anywhere, so a long URL never makes the page scroll sideways."""
    # Numeric headers align like their cells, over the numbers they name.
    head = "".join(f'<th class="num">{escape(h)}</th>' if i in numeric else f"<th>{escape(h)}</th>"
                   for i, h in enumerate(headers))  # fmt: skip

    def cell(i: int, content: str) -> str:
        kind = "num" if i in numeric else "text" if i in text else ""
        return f'<td class="{kind}">{content}</td>' if kind else f"<td>{content}</td>"

    body = "".join("<tr>" + "".join(cell(i, c) for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def chart(svg: str, name: str) -> str:
    return f'<figure class="chart" data-chart="{escape(name)}">{svg}</figure>'


class Page:
    def __init__(self, title: str, subtitle: str = "") -> None:
        self._title = title
        self._subtitle = subtitle
        self._sections: list[str] = []

    def section(self, heading: str, body: str, *, section_id: str = "") -> None:
        attribute = f' id="{escape(section_id)}"' if section_id else ""
        self._sections.append(f"<section{attribute}><h2>{escape(heading)}</h2>{body}</section>")

    def render(self) -> str:
        return (
            "<!DOCTYPE html>\n"
            '<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            # A data: favicon, so a browser does not ask a server for /favicon.ico and log a 404.
            '<link rel="icon" href="data:,">'
            f"<title>{escape(self._title)}</title><style>{_STYLE}</style></head>"
            f"<body><main><h1>{escape(self._title)}</h1>"
            f'<div class="meta">{self._subtitle}</div>' + "".join(self._sections) + "</main></body></html>\n"
        )
