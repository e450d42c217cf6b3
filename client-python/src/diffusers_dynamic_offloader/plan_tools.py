"""The old path of :mod:`diffusers_dynamic_offloader.seed_compat.plan_tools`: this name is that module
(one module object under both names, so its attributes, caches and patches are shared)."""

import sys

from .seed_compat import plan_tools

sys.modules[__name__] = plan_tools
