"""The old path of :mod:`diffusers_dynamic_offloader.seed_compat.event_payload`: this name is that module
(one module object under both names, so its attributes, caches and patches are shared)."""

import sys

from .seed_compat import event_payload

sys.modules[__name__] = event_payload
