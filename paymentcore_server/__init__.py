"""paymentcore_server: the HTTP API (Starlette) and the ``paymentcore`` command around a PaymentCore."""

from paymentcore_server.app import create_app

__all__ = ["create_app"]
