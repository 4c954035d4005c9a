"""A self-contained HTML page from sections (pure: strings in, one string out; no templates, no JS).

Shared by the canary report (:mod:`ccab.report.build`) and the lab's report: both are a title, a
short summary and a list of sections made of paragraphs, tables and figures. Everything is escaped
here (``esc``) unless it was built by these helpers (:class:`Html`), the CSS is inline, and figures
are referenced by relative path, so the folder holding ``index.html`` and its PNGs can be moved or
attached as a whole.

API
---
``render_page(title, sections, subtitle="", generated="") -> str``
    ``sections`` are :class:`Section` (``title``, ``body``: Html or str, ``id``: anchor, ``lead``:
    one-sentence summary under the heading). A table of contents links the section ids.
``table(columns, rows, *, row_class=None, numeric=(), caption="") -> Html``
    ``rows`` are sequences of cells (str, number, None, Html, or :class:`Cell` with its own class:
    ``cell-good|bad|warn|info|neutral``); ``row_class(i, row)`` returns a
    CSS class per row (e.g. ``"outcome-regression"``), ``numeric`` are right-aligned column indices; ``groups``: an optional header row of
    ``(label, column span)`` above the column names.
``figure(src, caption, alt="", cls="") -> Html``, ``badge(text, kind) -> Html``, ``para(text) -> Html``,
``ul(items) -> Html``, ``details(summary, body) -> Html``, ``join(*parts) -> Html``.
``write_page(path, html) -> Path`` writes atomically (temp file + rename).
Kinds of badges and row classes: ``good`` (green), ``bad`` (red), ``warn`` (amber), ``neutral``
(grey), ``info`` (blue).
"""

from __future__ import annotations

import html as _html
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ccab.base import atomicfile


class Html(str):
    """A string that is already HTML (not escaped again)."""


def esc(value) -> Html:
    """``value`` as HTML text: Html passes through, None is an en dash, the rest is escaped."""
    if isinstance(value, Html):
        return value
    if value is None:
        return Html("–")
    return Html(_html.escape(str(value), quote=True))


def join(*parts) -> Html:
    return Html("".join(esc(p) for p in parts))


def para(text, cls: str = "") -> Html:
    return Html(f'<p{f" class={chr(34)}{cls}{chr(34)}" if cls else ""}>{esc(text)}</p>')


def ul(items: Iterable) -> Html:
    return Html("<ul>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>")


def badge(text, kind: str = "neutral") -> Html:
    return Html(f'<span class="badge badge-{esc(kind)}">{esc(text)}</span>')


def details(summary, body) -> Html:
    return Html(f"<details><summary>{esc(summary)}</summary>{esc(body)}</details>")


def figure(src: str, caption, alt: str = "", cls: str = "") -> Html:
    """An image referenced by a relative path (keep the PNG next to the page); ``cls="wide"`` for
    full-width figures."""
    return Html(f'<figure{f" class={chr(34)}{esc(cls)}{chr(34)}" if cls else ""}><a href="{esc(src)}"><img src="{esc(src)}" alt="{esc(alt or caption)}" loading="eager"></a>'
                f"<figcaption>{esc(caption)}</figcaption></figure>")


def table(columns: Sequence, rows: Iterable[Sequence], *, row_class: Callable[[int, Sequence], str] | None = None,
          numeric: Iterable[int] = (), caption="", cls: str = "",
          groups: Sequence[tuple[str, int]] = ()) -> Html:
    num = set(numeric)
    group_row = ("<tr>" + "".join(f'<th class="group" colspan="{int(span)}">{esc(label)}</th>' for label, span in groups)
                 + "</tr>") if groups else ""
    head = "".join(f'<th{" class=num" if i in num else ""}>{esc(c)}</th>' for i, c in enumerate(columns))
    body = []
    for ri, row in enumerate(rows):
        rc = row_class(ri, row) if row_class else ""
        cells = "".join(_td(v, i in num) for i, v in enumerate(row))
        body.append(f'<tr{f" class={chr(34)}{esc(rc)}{chr(34)}" if rc else ""}>{cells}</tr>')
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return Html(f'<div class="table-wrap"><table class="{esc(cls)}">{cap}<thead>{group_row}<tr>{head}</tr></thead>'
                f"<tbody>{''.join(body)}</tbody></table></div>")


@dataclass(frozen=True)
class Cell:
    """A table cell with its own CSS class (e.g. ``Cell("+12%", "cell-bad")``)."""

    value: object
    cls: str = ""


def _td(value, numeric: bool) -> str:
    classes = (["num"] if numeric else []) + ([value.cls] if isinstance(value, Cell) and value.cls else [])
    inner = esc(value.value if isinstance(value, Cell) else value)
    return f'<td{f" class={chr(34)}{esc(chr(32).join(classes))}{chr(34)}" if classes else ""}>{inner}</td>'


@dataclass
class Section:
    title: str
    body: Html | str
    id: str = ""
    lead: str = ""


CSS = """
:root { --fg:#1d2433; --muted:#5b6577; --line:#d9dee7; --bg:#ffffff; --alt:#f6f8fb;
        --good:#1e7b34; --good-bg:#e3f4e7; --bad:#b4232c; --bad-bg:#fbe5e6; --warn:#8a5a00; --warn-bg:#fff3d6;
        --info:#1f5fa8; --info-bg:#e4eefa; --neutral:#4a5363; --neutral-bg:#eceff3; }
* { box-sizing: border-box; }
body { margin:0; font:15px/1.5 -apple-system, "Segoe UI", "DejaVu Sans", Helvetica, Arial, sans-serif;
       color:var(--fg); background:var(--bg); }
header.page { padding:20px 32px 12px; border-bottom:1px solid var(--line); background:var(--alt); }
header.page h1 { margin:0 0 4px; font-size:24px; }
header.page .subtitle { color:var(--muted); }
nav.toc { padding:8px 32px; border-bottom:1px solid var(--line); font-size:13px; }
nav.toc a { margin-right:14px; color:var(--info); text-decoration:none; }
main { padding:8px 32px 40px; max-width:1500px; }
section { margin-top:26px; }
section h2 { font-size:19px; border-bottom:2px solid var(--line); padding-bottom:4px; margin-bottom:6px; }
section h3 { font-size:16px; margin:18px 0 6px; }
p.lead { color:var(--muted); margin-top:0; }
.table-wrap { overflow-x:auto; }
table { border-collapse:collapse; margin:8px 0 14px; font-size:13px; }
caption { text-align:left; color:var(--muted); padding-bottom:4px; }
th, td { border:1px solid var(--line); padding:4px 8px; vertical-align:top; }
th { background:var(--alt); text-align:left; white-space:nowrap; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; white-space:nowrap; }
tr.row-bad td { background:var(--bad-bg); } tr.row-good td { background:var(--good-bg); }
tr.row-warn td { background:var(--warn-bg); } tr.row-info td { background:var(--info-bg); }
tr.row-neutral td { color:var(--neutral); }
table.hosts td:nth-child(-n+4) { white-space:nowrap; }  /* host names on one line; headers wrap instead */
table.hosts th { white-space:normal; }
td.cell-bad { background:var(--bad-bg); } td.cell-good { background:var(--good-bg); }
td.cell-warn { background:var(--warn-bg); } td.cell-info { background:var(--info-bg); }
td.cell-neutral { color:var(--neutral); }
.sub { display:block; font-size:11px; color:var(--muted); font-weight:normal; }
th.group { text-align:center; border-bottom:2px solid var(--line); }
.badge { display:inline-block; padding:1px 8px; border-radius:10px; font-size:12px; font-weight:600;
         white-space:nowrap; }
.badge-good { color:var(--good); background:var(--good-bg); } .badge-bad { color:var(--bad); background:var(--bad-bg); }
.badge-warn { color:var(--warn); background:var(--warn-bg); } .badge-info { color:var(--info); background:var(--info-bg); }
.badge-neutral { color:var(--neutral); background:var(--neutral-bg); }
.cards { display:flex; flex-wrap:wrap; gap:14px; }
.card { border:1px solid var(--line); border-radius:8px; padding:12px 16px; min-width:320px; flex:1 1 420px; }
.card.bad { border-left:6px solid var(--bad); } .card.good { border-left:6px solid var(--good); }
.card.warn { border-left:6px solid var(--warn); } .card.neutral { border-left:6px solid var(--neutral); }
.card.info { border-left:6px solid var(--info); }
.card h3 { margin:0 0 6px; }
.decision { font-size:20px; font-weight:700; text-transform:uppercase; letter-spacing:.03em; }
.figures { display:flex; flex-wrap:wrap; gap:12px; }
figure { margin:0; border:1px solid var(--line); border-radius:6px; padding:6px; background:#fff; }
figure img { max-width:100%; display:block; }
.figures figure { flex:1 1 560px; max-width:740px; }
figure.wide { max-width:none; }
figcaption { font-size:12px; color:var(--muted); padding-top:4px; }
details { margin:6px 0; } summary { cursor:pointer; color:var(--info); }
.muted { color:var(--muted); } code { background:var(--alt); padding:0 3px; border-radius:3px; }
footer { color:var(--muted); font-size:12px; padding:16px 32px; border-top:1px solid var(--line); }
@media print { nav.toc { display:none; } }
"""


def render_page(title: str, sections: Sequence[Section], subtitle: str = "", generated: str = "") -> str:
    """The whole page: header, table of contents, sections, footer (``generated``: who/when)."""
    ids, toc, parts = set(), [], []
    for i, s in enumerate(sections):
        sid = s.id or f"s{i + 1}"
        if sid in ids:
            raise ValueError(f"render_page: duplicate section id {sid!r}")
        ids.add(sid)
        toc.append(f'<a href="#{esc(sid)}">{esc(s.title)}</a>')
        lead = f'<p class="lead">{esc(s.lead)}</p>' if s.lead else ""
        parts.append(f'<section id="{esc(sid)}"><h2>{esc(s.title)}</h2>{lead}{esc(s.body)}</section>')
    sub = f'<div class="subtitle">{esc(subtitle)}</div>' if subtitle else ""
    foot = f"<footer>{esc(generated)}</footer>" if generated else ""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
            f'<header class="page"><h1>{esc(title)}</h1>{sub}</header>'
            f'<nav class="toc">{"".join(toc)}</nav><main>{"".join(parts)}</main>{foot}</body></html>\n')


def write_page(path: Path, page: str) -> Path:
    """Write ``page`` to ``path`` atomically (temp file + rename), world-readable."""
    return atomicfile.write_text(path, page)

