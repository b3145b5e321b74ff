"""The hosted checkout page at ``/checkout/{reference}`` (CONTRACT §4).

Server-rendered HTML with a plain form (provider, phone, submit) that works without JavaScript; a
small script served by us (no CDN, no build step) polls the status and updates ``data-status`` until
the payment is final. Expired and paid payments show no form.
"""

from __future__ import annotations

from html import escape
from urllib.parse import parse_qs

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from paymentcore import wire
from paymentcore.bootstrap import PaymentCore
from paymentcore.collect import CheckoutView
from paymentcore.errors import NotFoundError, PaymentError
from paymentcore.models import CollectionStatus
from paymentcore.money import to_decimal
from paymentcore_server.app import read_body

MESSAGES = {
    "SUCCESS": "Payment received. Thank you!",
    "PAYER_DECLINED": "The payment was declined on the phone. No money was taken.",
    "INSUFFICIENT_FUNDS": "The wallet does not hold enough money. No money was taken.",
    "TIMEOUT": "The prompt was not answered in time. No money was taken.",
    "EXPIRED": "This payment link has expired.",
}
PENDING_MESSAGE = "Check your phone and approve the payment prompt."
LIGHTNING_MESSAGE = "Pay the invoice below with a Lightning wallet."

STYLE = """
*{box-sizing:border-box}body{margin:0;font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
background:#f4f5f7;color:#1b1f24}main{max-width:26rem;margin:0 auto;padding:1rem}
.card{background:#fff;border-radius:.75rem;padding:1.25rem;box-shadow:0 1px 3px rgba(0,0,0,.12)}
h1{font-size:1.1rem;margin:0 0 .25rem}.amount{font-size:2rem;font-weight:700;margin:.25rem 0}
.muted{color:#59636e;font-size:.9rem}label{display:block;font-weight:600;margin:.9rem 0 .3rem}
select,input{width:100%;font:inherit;padding:.65rem;border:1px solid #8c959f;border-radius:.5rem}
select:focus,input:focus,button:focus{outline:3px solid #0969da;outline-offset:1px}
button{margin-top:1.1rem;width:100%;font:inherit;font-weight:700;padding:.8rem;border:0;border-radius:.5rem;
background:#1f6f43;color:#fff;cursor:pointer}.status{margin-top:1rem;padding:.8rem;border-radius:.5rem;
background:#eef1f4}.status[data-status=SUCCESS]{background:#dafbe1}.status[data-status=FAILED]{background:#ffebe9}
.error{background:#ffebe9;padding:.6rem;border-radius:.5rem;margin-top:.8rem}
code{word-break:break-all;display:block;background:#eef1f4;padding:.6rem;border-radius:.5rem;font-size:.8rem}
"""

SCRIPT = """
(function(){var el=document.getElementById('status');if(!el)return;
function done(s){return s==='SUCCESS'||s==='FAILED';}
if(done(el.getAttribute('data-status'))&&!el.hasAttribute('data-submitted'))return;
function poll(){fetch(el.getAttribute('data-src'),{cache:'no-store'}).then(function(r){return r.json();})
.then(function(d){el.setAttribute('data-status',d.status);
document.getElementById('status-text').textContent=d.message;
if(!done(d.status)){setTimeout(poll,1500);}}).catch(function(){setTimeout(poll,3000);});}
if(!done(el.getAttribute('data-status')))setTimeout(poll,1000);})();
"""


def status_message(view: CheckoutView) -> str:
    collection = view.collection
    if collection.status is CollectionStatus.SUCCESS:
        return MESSAGES["SUCCESS"]
    if collection.status is CollectionStatus.FAILED:
        return MESSAGES.get(collection.failure_category or "", "The payment did not go through.")
    if collection.provider == "lightning":
        return LIGHTNING_MESSAGE
    if collection.submitted_at is not None:
        return PENDING_MESSAGE
    return "Choose how to pay."


def render_page(view: CheckoutView, core: PaymentCore, error: str | None = None) -> str:
    c = view.collection
    cat = core.catalogue
    price = to_decimal(c.requested_amount, cat.currencies[c.requested_currency])
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width,initial-scale=1'>",
        f"<title>Pay {escape(view.merchant.name)}</title><style>{STYLE}</style></head><body><main>",
        "<div class='card'>",
        f"<h1>{escape(view.merchant.name)}</h1>",
        f"<p class='muted' id='description'>{escape(c.description)}</p>",
        f"<p class='amount' id='amount'>{escape(str(price))} {escape(c.requested_currency)}</p>",
    ]
    if error:
        parts.append(f"<p class='error' role='alert' id='error'>{escape(error)}</p>")
    if view.payable:
        parts.append(_form(view))
    else:
        status = c.status.value
        submitted = " data-submitted" if c.submitted_at is not None else ""
        expired = c.status is CollectionStatus.PENDING and c.submitted_at is None
        if (
            c.charged_amount is not None
            and c.charged_currency is not None
            and c.charged_currency != c.requested_currency
        ):
            charged = to_decimal(c.charged_amount, cat.currencies[c.charged_currency])
            parts.append(f"<p class='muted' id='charged'>Charged: {charged} {escape(c.charged_currency)}</p>")
        if view.invoice and c.status is not CollectionStatus.SUCCESS:
            parts.append(f"<p>Lightning invoice:</p><code id='invoice'>{escape(view.invoice)}</code>")
        message = status_message(view)
        if expired:
            message = MESSAGES["EXPIRED"]
        parts.append(
            "<div class='status' id='status' role='status' aria-live='polite'"
            f" data-status='{status}'{submitted}"
            f" data-src='/checkout/{escape(c.reference)}/status'>"
            f"<strong>Status:</strong> <span id='status-text'>{escape(message)}</span></div>"
        )
    parts.append("</div></main><script src='/checkout-assets/page.js'></script></body></html>")
    return "".join(parts)


def _form(view: CheckoutView) -> str:
    c = view.collection
    options = []
    for option in view.options:
        label = f"{option.provider.name}"
        if option.provider.country:
            label += f" ({option.provider.country})"
        label += f" — {to_decimal(option.amount, option.currency)} {option.currency.code}"
        options.append(f"<option value='{escape(option.provider.code)}'>{escape(label)}</option>")
    return (
        f"<form method='post' action='/checkout/{escape(c.reference)}' id='pay-form'>"
        "<label for='provider'>Pay with</label>"
        f"<select id='provider' name='provider' required>{''.join(options)}</select>"
        "<label for='phone'>Mobile money number</label>"
        "<input id='phone' name='phone' type='tel' inputmode='numeric' autocomplete='tel-national'"
        " placeholder='Local number, e.g. 670000000'>"
        "<p class='muted'>Leave the number empty for Bitcoin Lightning.</p>"
        "<button type='submit' id='pay'>Pay now</button></form>"
    )


def page_routes(core: PaymentCore) -> list[Route]:
    async def show(request: Request) -> Response:
        reference = request.path_params["reference"]
        try:
            view = await run_in_threadpool(core.collect.view, reference)
        except NotFoundError:
            return HTMLResponse("<!doctype html><title>Not found</title><p>No such payment.</p>", 404)
        return HTMLResponse(render_page(view, core))

    async def submit(request: Request) -> Response:
        reference = request.path_params["reference"]
        try:
            raw = await read_body(request)
            form = parse_qs(raw.decode("utf-8", "replace"))
            provider = (form.get("provider") or [""])[0]
            phone = (form.get("phone") or [""])[0]
            await run_in_threadpool(
                core.collect.pay, reference, provider, phone if provider != "lightning" else None
            )
        except NotFoundError:
            return HTMLResponse("<!doctype html><title>Not found</title><p>No such payment.</p>", 404)
        except PaymentError as error:
            try:
                view = await run_in_threadpool(core.collect.view, reference)
            except NotFoundError:
                return HTMLResponse("<!doctype html><title>Not found</title><p>No such payment.</p>", 404)
            return HTMLResponse(render_page(view, core, error=error.message), 400)
        return RedirectResponse(f"/checkout/{reference}", status_code=303)

    async def status(request: Request) -> Response:
        reference = request.path_params["reference"]
        try:
            view = await run_in_threadpool(core.collect.view, reference)
        except NotFoundError:
            return Response(wire.dumps({"status": "NOT_FOUND"}), 404, media_type="application/json")
        return Response(
            wire.dumps({"status": view.collection.status.value, "message": status_message(view)}),
            media_type="application/json",
            headers={"Cache-Control": "no-store"},
        )

    async def script(request: Request) -> Response:
        return Response(
            SCRIPT, media_type="text/javascript", headers={"Cache-Control": "public, max-age=300"}
        )

    return [
        Route("/checkout/{reference}", show, methods=["GET"]),
        Route("/checkout/{reference}", submit, methods=["POST"]),
        Route("/checkout/{reference}/status", status, methods=["GET"]),
        Route("/checkout-assets/page.js", script, methods=["GET"]),
    ]
