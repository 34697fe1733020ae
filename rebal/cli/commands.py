"""Imports every command module, so each registers its commands on the app (in this order in --help)."""

from . import status_cmd  # noqa: F401,I001
from . import rebalance_cmd  # noqa: F401
from . import replicate_cmd  # noqa: F401
from . import service_cmd  # noqa: F401
from . import config_cmd  # noqa: F401
from . import gate_cmd  # noqa: F401
