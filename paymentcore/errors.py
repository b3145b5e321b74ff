"""The exception tree of paymentcore (defined in ``paymentcore._domain.errors``)."""

from paymentcore._domain.errors import *  # noqa: F403
from paymentcore._domain.errors import __all__ as __all__
