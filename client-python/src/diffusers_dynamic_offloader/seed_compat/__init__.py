"""The seed's API, on top of the client: what a runner written for the seed
(docs/seed.md) calls, with the seed's names, arguments, result objects and events.

What belongs here: the modules that exist only to give the seed's API:

- ``offload_api``: ``enable_offload`` and the other entry points; ``route``: their steps
  (resolve, choose the route, apply) and result objects, below both offload_api and the hook;
- ``offload_settings``: ``DynamicOffloadConfig``, ``DynamicOffloadSettings``;
- ``offload_hook``, ``offload_state``, ``plan_tools``, ``event_payload``: the seed's hook,
  state, plan helpers and event payload of the DDO route;
- ``presets``, ``profiles``, ``named_profiles``: the seed's preset functions, capacity and
  named profiles;
- ``phases``, ``staged``, ``loading``: phases and the standby purge, staged runs, loading one
  component.
- ``dynamic_offload``: the seed's module of that name, its API in one place.

What does not: the client these modules use, which a program may use without the seed's API
(``DdoClient``, the component store, streaming, ``resolved_settings`` for ``ResolveSettings``,
quantized detection, ``runner_log``, ``default_client``). Modules outside this package never
import it (tests/python/test_import_graph.py). Every rule ddod owns (presets, settings,
component prefixes, routes) is ddod's answer here, not a copy.

The module paths runners import (``diffusers_dynamic_offloader.offload_api``, ``.presets``,
``.profiles``...) are these modules under their old names, and the seed's own
``diffusers_dynamic_offloader.dynamic_offload`` is ``dynamic_offload`` here (its names, gathered);
the package root exports the same names as before.
"""
