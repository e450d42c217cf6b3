"""The old path of :mod:`diffusers_dynamic_offloader.seed_compat.phases`: this name is that module
(one module object under both names, so its attributes, caches and patches are shared)."""

import sys

from .seed_compat import phases

sys.modules[__name__] = phases
