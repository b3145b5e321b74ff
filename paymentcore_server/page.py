"""The hosted checkout page at ``/checkout/{reference}`` (CONTRACT §4).

Server-rendered HTML with a plain form (provider, phone, submit) that works without JavaScript: it
POSTs to its own action and is answered 303 back to the page. A small script served by us (no CDN, no
build step, no third-party asset of any kind) adds what needs script: the amount due for the chosen
provider, hiding the phone field for Lightning, and polling the status so that ``#status[data-status]``
follows the payment without a reload until it is final. Without script, a pending page refreshes itself.
Expired and paid payments show no form.
"""

from __future__ import annotations

import base64
import hashlib
import re
from html import escape
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from paymentcore import CheckoutView, CollectionStatus, PaymentCore, PaymentOption, wire
from paymentcore.adapters.sandbox import SandboxNetwork
from paymentcore.catalogue import Catalogue, Currency
from paymentcore.errors import NotFoundError, PaymentError
from paymentcore_server._edge import error_response, read_body
from paymentcore_server.errors import BodyTooLargeError

__all__ = [
    "EXPIRED",
    "FAILED_MESSAGE",
    "HTML_HEADERS",
    "ICON",
    "LIGHTNING",
    "LIGHTNING_MESSAGE",
    "MESSAGES",
    "NOT_FOUND_PAGE",
    "PENDING_MESSAGE",
    "SCRIPT",
    "STYLE",
    "STYLE_HASH",
    "TITLES",
    "checkout_app",
    "is_expired",
    "money",
    "page_routes",
    "readable_error",
    "render_page",
    "status_json",
    "status_key",
    "status_message",
]

LIGHTNING = "lightning"
EXPIRED = "EXPIRED"  # the failure category of a checkout whose link ran out
MESSAGES = {
    "SUCCESS": "Payment received. Thank you! You can close this page.",
    "PAYER_DECLINED": "The payment was declined on the phone. No money was taken.",
    "INSUFFICIENT_FUNDS": "The wallet does not hold enough money. No money was taken.",
    "TIMEOUT": "The prompt was not answered in time. No money was taken.",
    EXPIRED: "This payment link has expired. Ask the merchant for a new one.",
}
FAILED_MESSAGE = "The payment did not go through. No money was taken."
PENDING_MESSAGE = "Check your phone and approve the payment prompt."
LIGHTNING_MESSAGE = "Pay the invoice below with a Lightning wallet."
TITLES = {
    "PENDING": "Waiting for your approval",
    "LIGHTNING": "Waiting for the Lightning payment",
    "SUCCESS": "Paid",
    "FAILED": "Payment failed",
    EXPIRED: "Link expired",
}

STYLE = """
*{box-sizing:border-box}[hidden]{display:none!important}
body{margin:0;font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
background:#eef1f4;color:#1b1f24}
main{max-width:28rem;margin:0 auto;padding:.75rem}
.card{background:#fff;border-radius:.75rem;padding:1.25rem 1rem;box-shadow:0 1px 3px rgba(0,0,0,.14)}
.merchant{font-size:1rem;font-weight:600;color:#424a53;margin:0;overflow-wrap:anywhere}
.amount{font-size:2rem;line-height:1.2;margin:.35rem 0 .2rem;font-weight:700;overflow-wrap:anywhere}
.amount .cur{font-size:1.1rem;font-weight:600;color:#424a53}
.description{margin:0 0 .5rem;overflow-wrap:anywhere}
.charged{margin:.25rem 0;color:#424a53}
.sandbox{display:inline-block;font-size:.75rem;font-weight:700;letter-spacing:.04em;text-transform:uppercase;
color:#7d4e00;background:#fff1c2;border-radius:1rem;padding:.1rem .6rem;margin-bottom:.6rem}
label{display:block;font-weight:600;margin:1rem 0 .3rem}
select,input{width:100%;font:inherit;color:inherit;padding:.7rem .6rem;border:1px solid #6e7781;
border-radius:.5rem;background:#fff}
[aria-invalid=true]{border-color:#cf222e;border-width:2px}
select:focus-visible,input:focus-visible,button:focus-visible{outline:3px solid #0969da;outline-offset:2px}
.hint{color:#57606a;font-size:.875rem;margin:.35rem 0 0}
.you-pay{margin:.9rem 0 0;padding:.6rem .75rem;background:#f6f8fa;border-radius:.5rem}
button{margin-top:1.25rem;width:100%;font:inherit;font-weight:700;padding:.85rem;border:0;
border-radius:.5rem;background:#1a7f37;color:#fff;cursor:pointer}
button:hover{background:#116329}button:disabled{background:#6e7781;cursor:progress}
.error{background:#ffebe9;border-left:4px solid #cf222e;padding:.6rem .75rem;border-radius:.5rem;
margin:.8rem 0 0}
.status{margin-top:1rem;padding:.9rem 1rem .9rem 3.4rem;border-radius:.6rem;background:#ddf4ff;
position:relative;min-height:3.6rem}
.status::before{content:"";position:absolute;left:1rem;top:1rem;width:1.6rem;height:1.6rem;
border-radius:50%;border:3px solid #54aeff;border-top-color:transparent;animation:spin 1s linear infinite}
.status[data-status=SUCCESS]{background:#dafbe1}
.status[data-status=SUCCESS]::before{content:"\\2713";border:0;background:#1a7f37;color:#fff;
text-align:center;font-weight:700;line-height:1.6rem;animation:none}
.status[data-status=FAILED],.status.expired{background:#ffebe9}
.status[data-status=FAILED]::before,.status.expired::before{content:"!";border:0;background:#cf222e;
color:#fff;text-align:center;font-weight:700;line-height:1.6rem;animation:none}
.status-title{font-weight:700;margin:0}.status-text{margin:.15rem 0 0}
@keyframes spin{to{transform:rotate(360deg)}}
@media (prefers-reduced-motion:reduce){.status::before{animation:none}}
dl{margin:1rem 0 0;display:grid;grid-template-columns:auto 1fr;gap:.2rem .75rem;font-size:.9rem}
dt{color:#57606a}dd{margin:0;overflow-wrap:anywhere}
.invoice{margin-top:1rem}.invoice p{margin:0 0 .4rem}
code{display:block;word-break:break-all;background:#f6f8fa;border:1px solid #d0d7de;padding:.6rem;
border-radius:.5rem;font-size:.8rem;user-select:all}
footer{text-align:center;color:#57606a;font-size:.8rem;margin:.9rem 0;overflow-wrap:anywhere}
@media (min-width:40rem){main{padding-top:3rem}}
"""

SCRIPT = """
(function(){
'use strict';
var form=document.getElementById('pay-form');
if(form){
  var sel=document.getElementById('provider'),field=document.getElementById('phone-field'),
      phone=document.getElementById('phone'),hint=document.getElementById('phone-hint'),
      youPay=document.getElementById('you-pay'),youPayAmount=document.getElementById('you-pay-amount'),
      button=document.getElementById('pay'),plainHint=hint.textContent;
  var sync=function(){
    var o=sel.options[sel.selectedIndex],code=o?o.value:'',lightning=code==='lightning';
    field.hidden=lightning;phone.disabled=lightning;phone.required=code!==''&&!lightning;
    hint.textContent=(o&&o.getAttribute('data-hint'))||plainHint;
    if(code){youPayAmount.textContent=o.getAttribute('data-amount');youPay.hidden=false;}
    else{youPay.hidden=true;}
  };
  sel.addEventListener('change',sync);sync();
  form.addEventListener('submit',function(){button.disabled=true;button.textContent='Sending\\u2026';});
  window.addEventListener('pageshow',function(){button.disabled=false;button.textContent='Pay now';});
}
var el=document.getElementById('status');
if(!el||!el.hasAttribute('data-live'))return;
var done=function(s){return s==='SUCCESS'||s==='FAILED';};
var show=function(d){
  el.setAttribute('data-status',d.status);
  document.getElementById('status-title').textContent=d.title;
  document.getElementById('status-text').textContent=d.message;
  var invoice=document.getElementById('invoice-box');
  if(invoice&&done(d.status))invoice.hidden=true;
};
if(!window.fetch){setTimeout(function(){location.reload();},5000);return;}
var poll=function(){
  fetch(el.getAttribute('data-src'),{cache:'no-store',headers:{Accept:'application/json'}})
  .then(function(r){if(r.status===404)return null;if(!r.ok)throw new Error(r.status);return r.json();})
  .then(function(d){if(!d)return;show(d);if(!done(d.status))setTimeout(poll,1500);})
  .catch(function(){setTimeout(poll,3000);});
};
setTimeout(poll,1000);
})();
"""

STYLE_HASH = base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()
# Everything the page loads comes from this server; the policy makes the browser enforce it.
HTML_HEADERS = {
    "Content-Security-Policy": (
        f"default-src 'none'; script-src 'self'; style-src 'sha256-{STYLE_HASH}'; connect-src 'self'; "
        "img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}
ICON = (
    "<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 32 32'><rect width='32' height='32' rx='7'"
    " fill='#1a7f37'/><path d='M9 16.5l4.5 4.5L23 11.5' fill='none' stroke='#fff' stroke-width='3.5'"
    " stroke-linecap='round' stroke-linejoin='round'/></svg>"
)
NOT_FOUND_PAGE = (
    "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Not found</title></head>"
    "<body><p>No such payment.</p></body></html>"
)


def money(minor: int, currency: Currency) -> str:
    """An amount for people: the currency's own decimals, thousands grouped (``7,544``, ``12.50``)."""
    return f"{currency.render(minor):,.{currency.decimals}f}"


def is_expired(view: CheckoutView) -> bool:
    c = view.collection
    if c.status is CollectionStatus.FAILED:
        return c.failure_category == EXPIRED
    return c.status is CollectionStatus.PENDING and c.submitted_at is None and not view.payable


def status_key(view: CheckoutView) -> str:
    """Which title the status shows: PENDING, LIGHTNING, SUCCESS, FAILED or EXPIRED."""
    c = view.collection
    if is_expired(view):
        return EXPIRED
    if c.status in (CollectionStatus.SUCCESS, CollectionStatus.FAILED):
        return str(c.status.value)
    return "LIGHTNING" if c.provider == LIGHTNING else "PENDING"


def status_message(view: CheckoutView) -> str:
    collection = view.collection
    if is_expired(view):
        return MESSAGES[EXPIRED]
    if collection.status is CollectionStatus.SUCCESS:
        return MESSAGES["SUCCESS"]
    if collection.status is CollectionStatus.FAILED:
        return MESSAGES.get(collection.failure_category or "", FAILED_MESSAGE)
    if collection.provider == LIGHTNING:
        return LIGHTNING_MESSAGE
    if collection.submitted_at is not None:
        return PENDING_MESSAGE
    return "Choose how to pay."


def status_json(view: CheckoutView) -> dict[str, str]:
    return {
        "status": view.collection.status.value,
        "title": TITLES[status_key(view)],
        "message": status_message(view),
    }


def readable_error(message: str, cat: Catalogue) -> str:
    """An API error message for a payer: provider codes (``orange_cm``) become their names."""
    names = {code: provider.name for code, provider in cat.providers.items()}
    pattern = re.compile(r"\b(" + "|".join(re.escape(code) for code in names) + r")\b")
    return pattern.sub(lambda m: names[m.group(1)], message) if names else message


def render_page(
    view: CheckoutView,
    core: PaymentCore,
    error: PaymentError | None = None,
    chosen: tuple[str, str] = ("", ""),
) -> str:
    c = view.collection
    cat = core.catalogue
    merchant = escape(view.merchant.name)
    final = c.status in (CollectionStatus.SUCCESS, CollectionStatus.FAILED)
    head = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width,initial-scale=1'>",
        "<link rel='icon' href='/checkout-assets/icon.svg' type='image/svg+xml'>",
        f"<title>Pay {merchant}</title><style>{STYLE}</style>",
    ]
    if not view.payable and not final:
        # Without script the page cannot update itself, so it reloads until the payment is final.
        head.append("<noscript><meta http-equiv='refresh' content='5'></noscript>")
    body = [
        "</head><body><main><div class='card'>",
    ]
    if isinstance(core.network, SandboxNetwork):
        body.append("<span class='sandbox'>Sandbox · no real money moves</span>")
    requested = cat.currencies[c.requested_currency]
    body += [
        f"<h1 class='merchant' id='merchant'>{merchant}</h1>",
        f"<p class='amount' id='amount'>{money(c.requested_amount, requested)} "
        f"<span class='cur'>{escape(requested.code)}</span></p>",
        f"<p class='description' id='description'>{escape(c.description)}</p>",
    ]
    if error is not None:
        message = readable_error(error.message, cat)
        body.append(f"<p class='error' role='alert' id='error'>{escape(message)}</p>")
    if view.payable:
        body.append(_form(view, cat, chosen, error.param if error is not None else None))
    else:
        body.append(_status(view, cat))
    body.append(
        f"</div><footer>Reference {escape(c.reference)}</footer></main>"
        "<script src='/checkout-assets/page.js'></script></body></html>"
    )
    return "".join(head + body)


def _status(view: CheckoutView, cat: Catalogue) -> str:
    c = view.collection
    key = status_key(view)
    live = "" if c.status in (CollectionStatus.SUCCESS, CollectionStatus.FAILED) else " data-live"
    css = "status expired" if key == EXPIRED else "status"
    parts = [
        f"<section class='{css}' id='status' role='status' aria-live='polite'"
        f" data-status='{c.status.value}'{live}"
        f" data-src='/checkout/{escape(c.reference)}/status'>"
        f"<p class='status-title' id='status-title'>{escape(TITLES[key])}</p>"
        f"<p class='status-text' id='status-text'>{escape(status_message(view))}</p></section>"
    ]
    if view.invoice and c.status is not CollectionStatus.SUCCESS and c.status is not CollectionStatus.FAILED:
        parts.append(
            "<div class='invoice' id='invoice-box'><p>Lightning invoice (sandbox: it is paid by itself in a"
            f" moment):</p><code id='invoice'>{escape(view.invoice)}</code></div>"
        )
    details: list[tuple[str, str]] = []
    if c.provider is not None:
        provider = cat.providers.get(c.provider)
        name = provider.name if provider is not None else c.provider
        country = cat.countries.get(provider.country) if provider and provider.country else None
        if country is not None:
            name += f" ({country.name})"
        details.append(("Paying with", name))
    if c.phone:
        details.append(("Number", c.phone))
    if c.charged_amount is not None and c.charged_currency is not None:
        charged = cat.currencies[c.charged_currency]
        details.append(("Amount", f"{money(c.charged_amount, charged)} {charged.code}"))
    if details:
        rows = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in details)
        parts.append(f"<dl id='details'>{rows}</dl>")
    return "".join(parts)


def _option(option: PaymentOption, cat: Catalogue, selected: bool) -> str:
    provider = option.provider
    amount = f"{money(option.amount, option.currency)} {option.currency.code}"
    country = cat.countries.get(provider.country) if provider.country else None
    if country is not None:
        digits = country.phone_digits or len(country.phone_example or "")
        # The shortest prefix is the network's main range: 67 for MTN Cameroon, 69 for Orange.
        prefix = min(provider.prefixes, key=len, default="")
        sample = prefix.ljust(digits, "0") if prefix and digits else None
        example = f" (for example {sample})" if sample else ""
        hint = f"Your {country.name} number without {country.dial_code}{example}."
    else:
        hint = "No phone number needed: you will be shown an invoice to pay."
    mark = " selected" if selected else ""
    return (
        f"<option value='{escape(provider.code)}' data-amount='{escape(amount)}'"
        f" data-hint='{escape(hint)}'{mark}>{escape(provider.name)} — {escape(amount)}</option>"
    )


def _form(view: CheckoutView, cat: Catalogue, chosen: tuple[str, str], wrong: str | None) -> str:
    c = view.collection
    provider_chosen, phone_chosen = chosen
    if len(view.options) == 1:
        provider_chosen = view.options[0].provider.code
    groups: dict[str, list[str]] = {}
    for option in view.options:
        country = cat.countries.get(option.provider.country) if option.provider.country else None
        group = country.name if country is not None else "Anywhere"
        selected = option.provider.code == provider_chosen
        groups.setdefault(group, []).append(_option(option, cat, selected))
    placeholder = "" if provider_chosen else " selected"
    options = [f"<option value='' disabled{placeholder}>Choose your provider</option>"]
    options += [
        f"<optgroup label='{escape(group)}'>{''.join(items)}</optgroup>" for group, items in groups.items()
    ]
    # After a refusal, the field at fault is marked and takes the focus, for keyboard and screen readers.
    provider_flag = " aria-invalid='true' autofocus" if wrong == "provider" else ""
    phone_flag = " aria-invalid='true' autofocus" if wrong == "phone" else ""
    return (
        f"<form method='post' action='/checkout/{escape(c.reference)}' id='pay-form'>"
        "<label for='provider'>Pay with</label>"
        f"<select id='provider' name='provider' required{provider_flag}>{''.join(options)}</select>"
        "<div id='phone-field'><label for='phone'>Mobile money number</label>"
        "<input id='phone' name='phone' type='tel' inputmode='numeric' autocomplete='tel-national'"
        f" aria-describedby='phone-hint' value='{escape(phone_chosen)}'{phone_flag}>"
        "<p class='hint' id='phone-hint'>The local number, without the country code."
        " Leave it empty for Bitcoin Lightning.</p></div>"
        "<p class='you-pay' id='you-pay' hidden>You pay <strong id='you-pay-amount'></strong></p>"
        "<button type='submit' id='pay'>Pay now</button></form>"
    )


def _html(text: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status, headers=HTML_HEADERS)


def page_routes(core: PaymentCore) -> list[Route]:
    async def show(request: Request) -> Response:
        reference = request.path_params["reference"]
        try:
            view = await run_in_threadpool(core.collect.view, reference)
        except NotFoundError:
            return _html(NOT_FOUND_PAGE, 404)
        return _html(render_page(view, core))

    async def submit(request: Request) -> Response:
        reference = request.path_params["reference"]
        provider = phone = ""
        try:
            raw = await read_body(request)
            form = parse_qs(raw.decode("utf-8", "replace"))
            provider = (form.get("provider") or [""])[0]
            phone = (form.get("phone") or [""])[0]
            await run_in_threadpool(
                core.collect.pay, reference, provider, phone if provider != LIGHTNING else None
            )
        except NotFoundError:
            return _html(NOT_FOUND_PAGE, 404)
        except BodyTooLargeError as error:
            return error_response(request, error)
        except PaymentError as error:
            try:
                view = await run_in_threadpool(core.collect.view, reference)
            except NotFoundError:
                return _html(NOT_FOUND_PAGE, 404)
            return _html(render_page(view, core, error=error, chosen=(provider, phone)), 400)
        return RedirectResponse(f"/checkout/{reference}", status_code=303)

    async def status(request: Request) -> Response:
        reference = request.path_params["reference"]
        try:
            view = await run_in_threadpool(core.collect.view, reference)
        except NotFoundError as error:
            return error_response(request, error)
        return Response(
            wire.dumps(status_json(view)),
            media_type="application/json",
            headers={"Cache-Control": "no-store"},
        )

    async def script(request: Request) -> Response:
        return Response(
            SCRIPT, media_type="text/javascript", headers={"Cache-Control": "public, max-age=300"}
        )

    async def icon(request: Request) -> Response:
        return Response(ICON, media_type="image/svg+xml", headers={"Cache-Control": "public, max-age=86400"})

    return [
        Route("/checkout/{reference}", show, methods=["GET"]),
        Route("/checkout/{reference}", submit, methods=["POST"]),
        Route("/checkout/{reference}/status", status, methods=["GET"]),
        Route("/checkout-assets/page.js", script, methods=["GET"]),
        Route("/checkout-assets/icon.svg", icon, methods=["GET"]),
    ]


def checkout_app(core: PaymentCore) -> Starlette:
    """The hosted checkout pages alone, as an ASGI app an embedding application mounts at its root.

    The pages live at ``/checkout/{reference}`` (with ``/checkout/{reference}/status`` and
    ``/checkout-assets/...``), which is where a collection's ``checkout_url`` points when
    ``Config.public_url`` is the embedding app's own address::

        app = Starlette(routes=[Route("/shop", shop), Mount("/", app=checkout_app(core))])

    No API route is served and no background work is started: the embedding app runs the worker
    (``core.start_worker()``) or calls ``core.tick()`` itself.
    """
    from paymentcore_server._edge import RequestIdMiddleware, http_error_handler
    from paymentcore_server._routing import install_routing

    app = Starlette(routes=page_routes(core), exception_handlers={HTTPException: http_error_handler})
    install_routing(app)
    app.add_middleware(RequestIdMiddleware)
    return app
