"""diffusers_dynamic_offloader: run Diffusers models larger than VRAM, with weights served by ddod.

This package is the Python client of ddod, the DDO daemon. Importing it is cheap: it loads
gRPC and the protocol stubs, never torch.
"""

from ._version import __version__
from .client import DdoClient
from .errors import (
    ConfigurationError,
    DaemonError,
    DaemonUnavailableError,
    DdoError,
    EmbeddedDaemonError,
)

__all__ = [
    "__version__",
    "DdoClient",
    "DdoError",
    "ConfigurationError",
    "DaemonError",
    "DaemonUnavailableError",
    "EmbeddedDaemonError",
]
