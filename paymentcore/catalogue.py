"""The catalogue: countries, currencies, providers and exchange rates (``paymentcore._domain.catalogue``)."""

from paymentcore._domain.catalogue import *  # noqa: F403
from paymentcore._domain.catalogue import __all__ as __all__
