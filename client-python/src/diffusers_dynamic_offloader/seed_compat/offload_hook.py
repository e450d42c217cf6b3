"""The seed's ``DynamicOffloadHook``: what ``enable_offload`` (and ``apply_dynamic_offload``)
returns as ``hook`` on the DDO route.

As in the seed it is a Diffusers ``ModelHook`` when ``diffusers.hooks.hooks`` is importable,
and constructs from a ``DynamicOffloadConfig`` alone: ``DynamicOffloadHook(config)`` validates
the config and carries the seed's attributes (``execution_device``, ``offload_device``,
``execution_mode``, ``linear_runtime_strategy`` and the ``*_bytes`` budgets). Without diffusers
(the seed required it) the base is a plain object with the same pass-through methods, so a
runner's code that only reads the hook works either way.

The work is ddod's: ``initialize_hook(module)`` routes the module as ``enable_dynamic_offload``
does (route.py's steps, which this module and offload_api both import, handing them the hook
class). In ``linear_runtime`` the hook holds the module's streaming session and answers for it
(``stats()``, ``resources``, ``plan``, ``close()``, ...); in ``plan`` mode it is the seed's
plan-only hook: the plan is recorded in ``state``, execution is unchanged.

Thread-safety: as the streaming session it holds (one runner thread at a time).
"""

from __future__ import annotations

from typing import Any

import torch

from .offload_state import DynamicOffloadState
from .route import refuse_swap

try:  # The seed's base class; diffusers is optional here (CI runs without it).
    from diffusers.hooks.hooks import ModelHook as _HookBase  # type: ignore
except Exception:  # noqa: BLE001 - missing, or a stand-in module without hooks.hooks

    class _HookBase:  # type: ignore[no-redef]
        """The methods of diffusers' ModelHook that a registry calls, as pass-throughs."""

        _is_stateful = False

        def __init__(self) -> None:
            self.fn_ref = None

        def initialize_hook(self, module: torch.nn.Module) -> torch.nn.Module:
            return module

        def deinitalize_hook(self, module: torch.nn.Module) -> torch.nn.Module:
            return module

        def pre_forward(self, module: torch.nn.Module, *args: Any, **kwargs: Any):
            return args, kwargs

        def post_forward(self, module: torch.nn.Module, output: Any) -> Any:
            return output

        def detach_hook(self, module: torch.nn.Module) -> torch.nn.Module:
            return module

        def reset_state(self, module: torch.nn.Module) -> torch.nn.Module:
            return module

_GIB = 2**30
# The seed's constructor checks its config with no daemon at hand, so these choices are kept
# here too; ddod's setting catalog has the same ones and checks them again whenever the config
# is resolved (enable_offload, initialize_hook).
_STRATEGIES = ("functional", "swap")
_POLICIES = ("off", "balanced")
_SELECTIONS = ("first", "spread", "largest")
# DDO adds auto (its default: compute once a forward was seen, else spread) and compute.
_RESIDENT_SELECTIONS = ("auto", "compute") + _SELECTIONS
_MODES = ("plan", "linear_runtime", "sdnq_runtime")


def _check(name: str, value: str, valid) -> None:
    if value not in valid:
        raise ValueError(f"Invalid {name}={value!r}. Valid values: {', '.join(valid)}")


class DynamicOffloadHook(_HookBase):
    """The seed's hook (see the module docstring). ``state`` is the module's
    DynamicOffloadState once set up; ``session`` its streaming session (None in plan mode)."""

    def __init__(self, config: Any = None) -> None:
        """Validates ``config`` (default ``DynamicOffloadConfig()``) as the seed did.

        Raises:
            ValueError: an invalid strategy, policy, selection or execution mode; the
                ``swap`` strategy, which ddod's streaming has no counterpart of.
        """
        super().__init__()
        from .offload_settings import DynamicOffloadConfig

        config = config if config is not None else DynamicOffloadConfig()
        _check("linear_runtime_strategy", config.linear_runtime_strategy, _STRATEGIES)
        _check("auto_budget_policy", config.auto_budget_policy, _POLICIES)
        _check("pin_weight_selection", config.pin_weight_selection, _SELECTIONS)
        _check("resident_module_selection", config.resident_module_selection,
               _RESIDENT_SELECTIONS)
        _check("execution_mode", config.execution_mode, _MODES)
        if config.execution_mode != "plan":
            refuse_swap(config.linear_runtime_strategy)
        self.config = config
        self.execution_device = torch.device(config.execution_device)
        self.offload_device = torch.device(config.offload_device)
        self.execution_mode = config.execution_mode
        self.linear_runtime_strategy = config.linear_runtime_strategy
        self.small_tensor_threshold_bytes = int(config.small_tensor_threshold_bytes)
        self.resident_module_budget_bytes = int(config.resident_module_budget_gb * _GIB)
        self.max_resident_module_budget_bytes = int(config.max_resident_module_budget_gb * _GIB)
        self.pin_weight_budget_bytes = int(config.pin_weight_budget_gb * _GIB)
        self.max_pin_weight_budget_bytes = int(config.max_pin_weight_budget_gb * _GIB)
        self.available_system_ram_bytes = int(config.available_system_ram_gb * _GIB)
        self.system_ram_headroom_bytes = int(config.system_ram_headroom_gb * _GIB)
        self.pin_weight_budget_ratio = min(1.0, max(0.0, float(config.pin_weight_budget_ratio)))
        self.state = DynamicOffloadState()
        self.session: Any = None

    @classmethod
    def for_session(cls, config: Any, session: Any, state: DynamicOffloadState) -> "DynamicOffloadHook":
        """The hook of a module ``enable_offload`` set up: ``session`` (None in plan mode)."""
        hook = cls(config)
        hook.session = session
        hook.state = state
        return hook

    def initialize_hook(self, module: torch.nn.Module) -> torch.nn.Module:
        """Sets ``module`` up as the config says (the seed's registration step)."""
        # enable_dynamic_offload(module, config=self.config), with this hook's class.
        from .offload_call import ComponentArguments
        from .route import ApplyOptions, route_component

        options = ApplyOptions(dynamic_event_name="setup_dynamic_offload", hook_type=type(self))
        result = route_component(module, options, config=self.config,
                                 arguments=ComponentArguments(route="dynamic_offload"))
        if result.hook is not None:
            self.session, self.state = result.hook.session, result.hook.state
        return module

    def deinitalize_hook(self, module: torch.nn.Module) -> torch.nn.Module:  # the seed's spelling
        self.close()
        return module

    def detach_hook(self, module: torch.nn.Module) -> torch.nn.Module:
        self.close()
        return module

    def close(self) -> None:
        """Closes the streaming session (ddod frees its device memory). Idempotent."""
        if self.session is not None:
            self.session.close()

    @property
    def closed(self) -> bool:
        return self.session is None or self.session.closed

    def print_profile_summary(self, top_n: int = 8) -> None:
        """The seed's summary, printed (the seed printed it): the session's, or the plan's."""
        if self.session is not None:
            self.session.print_profile_summary(top_n)
            return
        placed = ", ".join(f"{name}={size / _GIB:.4f} GB"
                           for name, size in sorted(self.state.bytes_by_placement.items()))
        print(f"[ddo] plan only ({self.execution_mode}): {placed or 'nothing planned'}")

    def __getattr__(self, name: str) -> Any:
        # Everything else is the streaming session's (stats, resources, plan, sync_edits...).
        session = self.__dict__.get("session")
        if session is None or name.startswith("__"):
            raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}"
                                 + ("" if session is not None else " (no streaming session: "
                                    "plan mode, or not set up)"))
        return getattr(session, name)

    def __repr__(self) -> str:
        return (f"DynamicOffloadHook(execution_mode={self.execution_mode!r}, "
                f"execution_device={str(self.execution_device)!r}, session={self.session!r})")
