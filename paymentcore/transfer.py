"""Move a SQLite database to PostgreSQL (``paymentcore._root.transfer``)."""

from paymentcore._root.transfer import *  # noqa: F403
from paymentcore._root.transfer import __all__ as __all__
