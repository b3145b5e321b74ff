"""An application that embeds the library serves the hosted checkout page by mounting ``checkout_app``."""

from __future__ import annotations

from decimal import Decimal

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from paymentcore import CollectionStatus, Config, FakeClock, PaymentCore, SandboxNetwork
from paymentcore_server import checkout_app


def shop_app(core: PaymentCore, merchant_id: str) -> Starlette:
    async def order(request: Request) -> Response:
        collection = core.collect.checkout(merchant_id, amount=Decimal(2500), currency="XAF")
        return JSONResponse({"pay_at": collection.checkout_url, "reference": collection.reference})

    return Starlette(routes=[Route("/order", order, methods=["POST"]), Mount("/", app=checkout_app(core))])


def test_an_embedding_app_serves_the_checkout_page_its_records_point_to() -> None:
    clock = FakeClock()
    core = PaymentCore.memory(
        clock=clock,
        config=Config(public_url="https://shop.example", sandbox_delay=0),
        network=SandboxNetwork(delay_seconds=0),
    )
    merchant = core.operator.create_merchant("Corner Shop", settlement_currency="XAF")
    http = TestClient(shop_app(core, merchant.id), base_url="https://shop.example")

    answer = http.post("/order").json()
    assert answer["pay_at"] == f"https://shop.example/checkout/{answer['reference']}"
    page = http.get(answer["pay_at"])
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "Corner Shop" in page.text and "x-request-id" in page.headers

    paid = http.post(
        answer["pay_at"], data={"provider": "mtn_cm", "phone": "670000000"}, follow_redirects=False
    )
    assert paid.status_code == 303 and paid.headers["location"] == f"/checkout/{answer['reference']}"
    core.run_until_idle()
    assert core.collect.get(merchant.id, answer["reference"]).status is CollectionStatus.SUCCESS
    status = http.get(f"/checkout/{answer['reference']}/status").json()
    assert status["status"] == "SUCCESS"


def test_the_checkout_app_serves_no_api_and_answers_unknown_pages_in_the_error_shape() -> None:
    core = PaymentCore.memory(clock=FakeClock(), config=Config(sandbox_delay=0))
    http = TestClient(checkout_app(core))
    api = http.get("/v1/countries")
    assert api.status_code == 404 and api.json()["code"] == "NOT_FOUND"
    assert http.get("/checkout/REQ-1-NOPE").status_code == 404
    slash = http.get("/checkout/REQ-1-NOPE/", follow_redirects=False)
    assert slash.status_code == 404 and "location" not in slash.headers
