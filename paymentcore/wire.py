"""JSON on the wire with exact numbers (``paymentcore._domain.wire``)."""

from paymentcore._domain.wire import *  # noqa: F403
from paymentcore._domain.wire import __all__ as __all__
