"""The old path of :mod:`diffusers_dynamic_offloader.seed_compat.offload_api`: this name is that module
(one module object under both names, so its attributes, caches and patches are shared)."""

import sys

from .seed_compat import offload_api

sys.modules[__name__] = offload_api
