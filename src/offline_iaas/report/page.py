"""The report page: self-contained HTML (inline CSS, images as base64 PNG data URIs, no script)."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass, field

STYLE = """
body { font-family: sans-serif; margin: 2em auto; max-width: 1060px; color: #222; }
h1 { border-bottom: 2px solid #444; padding-bottom: .2em; }
h2 { margin-top: 2em; border-bottom: 1px solid #aaa; }
img { display: block; max-width: 100%; margin: .5em 0; }
table { border-collapse: collapse; margin: .5em 0; font-size: 90%; }
th, td { border: 1px solid #ccc; padding: .2em .6em; text-align: left; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f7f7f7; padding: .8em; overflow-x: auto; font-size: 85%; }
p.absent { color: #777; font-style: italic; }
p.problem { color: #a00; }
nav a { margin-right: 1em; }
figure { margin: .5em 0; }
figcaption { font-size: 90%; color: #444; }
"""


@dataclass
class Section:
    """One ``<h2>`` section; ``parts`` are HTML fragments made by the functions below."""

    anchor: str
    title: str
    parts: list[str] = field(default_factory=list)


def escape(text: object) -> str:
    return html.escape(str(text), quote=True)


def image(png: bytes, alt: str) -> str:
    """An ``<img>`` holding the PNG itself."""
    data = base64.b64encode(png).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{escape(alt)}">'


def figure(png: bytes, alt: str, caption: str) -> str:
    """An image with its caption below it."""
    return f"<figure>{image(png, alt)}<figcaption>{escape(caption)}</figcaption></figure>"


def heading(text: str) -> str:
    return f"<h3>{escape(text)}</h3>"


def paragraph(text: str, kind: str = "") -> str:
    """A paragraph; ``kind`` ``absent`` (an input not in this campaign) or ``problem``."""
    css = f' class="{kind}"' if kind else ""
    return f"<p{css}>{escape(text)}</p>"


def preformatted(text: str) -> str:
    return f"<pre>{escape(text)}</pre>"


def number(value: float) -> str:
    """A float for a table: 6 significant digits, GPS-sized values to the millisecond."""
    return f"{value:.3f}" if abs(value) >= 1e6 else f"{value:.6g}"


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A table; numbers are right-aligned, floats shortened by ``number``."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{escape(number(c) if isinstance(c, float) else c)}</td>'
            if isinstance(c, int | float) and not isinstance(c, bool) else f"<td>{escape(c)}</td>"
            for c in row
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def render(title: str, subtitle: str, sections: Sequence[Section],
           warnings: Sequence[str] = ()) -> str:
    """The whole page; each of ``warnings`` one problem line under the subtitle, above
    everything else (what the analyst must read before trusting the page)."""
    nav = " ".join(f'<a href="#{escape(s.anchor)}">{escape(s.title)}</a>' for s in sections)
    body = "\n".join(
        f'<section id="{escape(s.anchor)}"><h2>{escape(s.title)}</h2>\n' + "\n".join(s.parts)
        + "</section>"
        for s in sections
    )
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{escape(title)}</title>"
        # an empty icon: the browser does not ask for /favicon.ico (a console error on file://)
        '<link rel="icon" href="data:,">'
        f"<style>{STYLE}</style></head>\n<body><h1>{escape(title)}</h1>"
        f"<p>{escape(subtitle)}</p>{''.join(paragraph(w, 'problem') for w in warnings)}"
        f"<nav>{nav}</nav>\n{body}\n</body></html>\n"
    )
