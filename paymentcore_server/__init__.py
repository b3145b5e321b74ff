"""paymentcore_server: the HTTP API (Starlette) and the ``paymentcore`` command around a PaymentCore.

``create_app(core)`` is the whole API and the hosted checkout pages; ``checkout_app(core)`` is the
checkout pages alone, for an application that embeds the library and serves its own routes.
"""

from paymentcore_server.app import create_app
from paymentcore_server.page import checkout_app

__all__ = ["checkout_app", "create_app"]
