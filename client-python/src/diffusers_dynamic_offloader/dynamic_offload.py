"""The seed's module path of its API, :mod:`diffusers_dynamic_offloader.seed_compat.dynamic_offload`:
this name is that module (one module object under both names)."""

import sys

from .seed_compat import dynamic_offload

sys.modules[__name__] = dynamic_offload
