"""The console's HTML: one stylesheet, the page frame, and helpers that escape everything they are given.

Every value that reaches a page goes through :func:`text` (untrusted text: escaped, its control
characters shown as visible escapes, wrapped in ``<bdi>`` so that a bidi override cannot reorder the
rest of the line) or :func:`attr` (an attribute value, quoted and escaped). Markup is only ever built
here and in ``paymentcore_server.console`` from literals. The pages load nothing but their own icon:
no script at all, the style inline and allowed by its hash (:data:`CSP`).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from html import escape
from typing import Any

from paymentcore_server._charts import CHART_STYLE
from paymentcore_server._console_text import json_line, visible

__all__ = [
    "CSP",
    "HEADERS",
    "ICON",
    "NAV",
    "STYLE",
    "amount",
    "attr",
    "button_form",
    "definition_list",
    "hidden_fields",
    "json_block",
    "moment",
    "page",
    "table",
    "text",
    "yes_no",
]

STYLE = """
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
background:#f4f6f8;color:#1b1f24}
header{background:#1b1f24;color:#fff;padding:.6rem 1.25rem;display:flex;flex-wrap:wrap;align-items:center;
gap:.5rem 1.5rem}
.brand{font-weight:700;letter-spacing:.02em}
nav ul{list-style:none;margin:0;padding:0;display:flex;flex-wrap:wrap;gap:.25rem}
nav a{color:#d0d7de;text-decoration:none;padding:.35rem .6rem;border-radius:.4rem;display:block}
nav a:hover{background:#32383f;color:#fff}nav a[aria-current=page]{background:#0969da;color:#fff}
.who{margin-left:auto;display:flex;align-items:center;gap:.6rem;color:#d0d7de}
.who button{background:transparent;border:1px solid #6e7781;color:#fff;padding:.25rem .7rem}
main{max-width:76rem;margin:0 auto;padding:1.25rem}
h1{font-size:1.5rem;margin:.25rem 0 1rem}h2{font-size:1.15rem;margin:1.5rem 0 .6rem}
.card{background:#fff;border:1px solid #d0d7de;border-radius:.6rem;padding:1rem 1.1rem;margin-bottom:1rem}
table{border-collapse:collapse;width:100%;background:#fff;border:1px solid #d0d7de;border-radius:.6rem;
overflow:hidden}
th,td{text-align:left;padding:.5rem .6rem;border-bottom:1px solid #eaeef2;vertical-align:top}
th{background:#f6f8fa;font-weight:600;font-size:.85rem;color:#424a53}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr:last-child td{border-bottom:0}
.muted{color:#6e7781}.mono{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:.85rem}
bdi{overflow-wrap:anywhere}.nowrap,.nowrap bdi{white-space:nowrap;overflow-wrap:normal}
form.inline{display:inline-block;margin:0 .25rem .25rem 0}
.actions{white-space:nowrap}
button{font:inherit;font-weight:600;padding:.4rem .9rem;border-radius:.4rem;border:1px solid #1a7f37;
background:#1a7f37;color:#fff;cursor:pointer}
button:hover{filter:brightness(.92)}
button.danger{background:#cf222e;border-color:#cf222e}
button.plain{background:#fff;color:#1b1f24;border-color:#8c959f}
button:focus-visible,a:focus-visible,input:focus-visible,select:focus-visible{outline:3px solid #0969da;
outline-offset:2px}
label{font-weight:600;display:block;margin:.5rem 0 .2rem}
label.check{display:inline-flex;gap:.35rem;align-items:center;font-weight:400;margin-right:1rem}
input[type=text],input[type=password],input[type=number],select{font:inherit;padding:.45rem .55rem;
border:1px solid #8c959f;border-radius:.4rem;background:#fff;min-width:12rem}
input.wide{min-width:24rem}input.small{min-width:0;width:7.5rem}
.fields{display:flex;flex-wrap:wrap;gap:.25rem 1rem;align-items:flex-end}
.notice{background:#dafbe1;border-left:4px solid #1a7f37;padding:.6rem .8rem;border-radius:.4rem;
margin-bottom:1rem}
.error{background:#ffebe9;border-left:4px solid #cf222e;padding:.6rem .8rem;border-radius:.4rem;
margin-bottom:1rem}
.secret{font-family:ui-monospace,"DejaVu Sans Mono",monospace;background:#fff8c5;border:1px solid #d4a72c;
padding:.6rem;border-radius:.4rem;word-break:break-all;user-select:all}
.status{display:inline-block;font-size:.8rem;font-weight:700;padding:.05rem .5rem;border-radius:1rem;
background:#eaeef2}
.status.good{background:#dafbe1;color:#116329}.status.bad{background:#ffebe9;color:#a40e26}
.status.wait{background:#fff1c2;color:#7d4e00}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.3rem 1rem;margin:0}
dt{color:#57606a}dd{margin:0}
details pre{white-space:pre-wrap;overflow-wrap:anywhere;font-size:.8rem;background:#f6f8fa;padding:.5rem;
border-radius:.4rem;margin:.3rem 0 0}
.signin{max-width:24rem;margin:4rem auto}
.signin input{width:100%}.signin button{margin-top:1rem;width:100%}
.more{margin-top:.75rem}
:root{color-scheme:light dark}
@media (prefers-color-scheme:dark){
body{background:#0d1117;color:#e6edf3}
a{color:#58a6ff}
.card,table{background:#161b22;border-color:#30363d}
th{background:#1c2128;color:#adbac7}th,td{border-bottom-color:#30363d}
.muted,dt{color:#8b949e}
input[type=text],input[type=password],input[type=number],select{background:#0d1117;color:#e6edf3;
border-color:#484f58}
button.plain{background:#21262d;color:#e6edf3;border-color:#484f58}
.notice{background:#0f2d1a}.error{background:#3c1618}
.status{background:#30363d}.status.good{background:#0f2d1a;color:#7ee787}
.status.bad{background:#3c1618;color:#ffa198}.status.wait{background:#3a2a05;color:#e3b341}
details pre{background:#1c2128}.secret{background:#3a2a05;border-color:#9e6a03}
}
""" + CHART_STYLE

STYLE_HASH = base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()
#: No script at all; the style by its hash; forms only to this origin; never framed.
CSP = (
    f"default-src 'none'; style-src 'sha256-{STYLE_HASH}'; img-src 'self'; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "Cache-Control": "no-store",
    # same-origin, not no-referrer: with no-referrer a browser sends "Origin: null" on the console's own form
    # POSTs, and the console refuses a POST whose Origin is not its own
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}
ICON = (
    "<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 32 32'><rect width='32' height='32' rx='7'"
    " fill='#1b1f24'/><path d='M8 22V10h8a4 4 0 010 8H8' fill='none' stroke='#fff' stroke-width='3'"
    " stroke-linejoin='round'/></svg>"
)
#: The navigation: (link name, path). The names are what an operator (and a test) looks for.
NAV: tuple[tuple[str, str], ...] = (
    ("Overview", "/console"),
    ("Review queue", "/console/review"),
    ("Failed payouts", "/console/failed"),
    ("Merchants", "/console/merchants"),
    ("Keys", "/console/keys"),
    ("Webhooks", "/console/webhooks"),
    ("Platform", "/console/platform"),
    ("Audit log", "/console/audit"),
)


def text(value: object, *, empty: str = "—") -> str:
    """Untrusted text for an element's content: visible escapes, HTML-escaped, bidi-isolated."""
    if value is None or value == "":
        return f"<span class='muted'>{escape(empty)}</span>"
    return f"<bdi>{escape(visible(str(value)), quote=True)}</bdi>"


def attr(value: object) -> str:
    """A value for a double-quoted attribute."""
    return escape(str(value), quote=True)


def amount(value: Decimal, decimals: int) -> str:
    """An amount for people: the currency's decimals, thousands grouped (``6,000``, ``12.50``)."""
    return f"{value:,.{decimals}f}"


def moment(value: datetime) -> str:
    """A moment as UTC (an aware time in another zone is converted first; a naive one is taken as UTC)."""
    shown = value.astimezone(UTC) if value.tzinfo is not None else value
    return shown.strftime("%Y-%m-%d %H:%M:%S UTC")


def yes_no(value: bool, *, yes: str = "on", no: str = "off") -> str:
    css = "good" if value else "bad"
    return f"<span class='status {css}'>{escape(yes if value else no)}</span>"


def hidden_fields(fields: Iterable[tuple[str, str]]) -> str:
    return "".join(
        f'<input type=\'hidden\' name="{attr(name)}" value="{attr(value)}">' for name, value in fields
    )


def button_form(
    action: str,
    label: str,
    csrf: str,
    *,
    css: str = "",
    fields: Iterable[tuple[str, str]] = (),
) -> str:
    """A one-button form that POSTs to ``action`` with the session's CSRF token."""
    klass = f' class="{attr(css)}"' if css else ""
    return (
        f"<form method='post' action=\"{attr(action)}\" class='inline'>"
        f"{hidden_fields([('csrf', csrf), *fields])}"
        f"<button type='submit'{klass}>{escape(label)}</button></form>"
    )


def table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], *, empty: str, numeric: Sequence[int] = ()
) -> str:
    """A table of already-rendered cells (each built with :func:`text` or from literals)."""
    body = []
    for row in rows:
        cells = "".join(
            f"<td class='num'>{cell}</td>" if i in numeric else f"<td>{cell}</td>"
            for i, cell in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    if not body:
        return f"<p class='muted'>{escape(empty)}</p>"
    head = "".join(f"<th scope='col'>{escape(h)}</th>" for h in headers)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def definition_list(items: Mapping[str, str]) -> str:
    """A list of (label, already-rendered value)."""
    return "<dl>" + "".join(f"<dt>{escape(k)}</dt><dd>{v}</dd>" for k, v in items.items()) + "</dl>"


def page(
    title: str,
    content: str,
    *,
    operator: str | None = None,
    csrf: str | None = None,
    current: str | None = None,
    notice: str | None = None,
    error: str | None = None,
) -> str:
    """A whole page: the navigation and the sign-out button when signed in (``csrf`` given)."""
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width,initial-scale=1'>",
        "<meta name='color-scheme' content='light dark'>",
        "<link rel='icon' href='/console/assets/icon.svg' type='image/svg+xml'>",
        f"<title>{escape(title)} · paymentcore console</title><style>{STYLE}</style></head><body>",
        "<header><span class='brand'>paymentcore console</span>",
    ]
    if csrf is not None:
        links = "".join(
            f"<li><a href='{path}'{' aria-current=page' if path == current else ''}>{escape(name)}</a></li>"
            for name, path in NAV
        )
        parts.append(f"<nav aria-label='Console'><ul>{links}</ul></nav>")
        parts.append(
            f"<div class='who'><span>Signed in as {text(operator)}</span>"
            f"{button_form('/console/sign-out', 'Sign out', csrf)}</div>"
        )
    parts.append(f"</header><main><h1>{escape(title)}</h1>")
    if notice:
        parts.append(f"<p class='notice' role='status'>{escape(notice)}</p>")
    if error:
        parts.append(f"<p class='error' role='alert'>{text(error)}</p>")
    parts.append(content)
    parts.append("</main></body></html>")
    return "".join(parts)


def json_block(value: Mapping[str, Any] | None) -> str:
    """A JSON object for reading (inside ``<pre>``), escaped."""
    if value is None:
        return "<span class='muted'>—</span>"
    return f"<pre>{escape(json_line(dict(value)), quote=True)}</pre>"
