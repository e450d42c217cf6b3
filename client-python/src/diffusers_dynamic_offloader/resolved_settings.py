"""Settings resolution, asked of ddod: the DDO_* values one API call runs with.

ddod makes the decision (docs/configuration.md, "Precedence") so that every client, Python or
C++, gets the same answer for the same inputs: explicit overrides > the client's DDO_*
environment > ddod's own DDO_* environment > the preset > built-in defaults, with DDO_PRESET in
the environment overriding the ``preset`` argument, per-component values looked up as in the
seed (component policy, ``DDO_<C>_*``, ``DDO_RUNNER_<C>_*``), and platform rules last.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Dict, Iterable, Mapping, Optional, Tuple

import grpc

from ._proto import settings_pb2
from .errors import DaemonError, DdoError, InvalidSettingError
from .rpc_channel import RpcChannel

#: SettingSource enum value -> the word ``source`` carries.
_SOURCES = {
    settings_pb2.SETTING_SOURCE_DEFAULT: "default",
    settings_pb2.SETTING_SOURCE_PRESET: "preset",
    settings_pb2.SETTING_SOURCE_DAEMON_FLAG: "daemon",
    settings_pb2.SETTING_SOURCE_ENVIRONMENT: "environment",
    settings_pb2.SETTING_SOURCE_REQUEST: "override",
    settings_pb2.SETTING_SOURCE_COMPONENT_POLICY: "component_policy",
    settings_pb2.SETTING_SOURCE_PROFILE: "profile",
    settings_pb2.SETTING_SOURCE_PLATFORM: "platform",
}


@dataclass(frozen=True)
class ResolvedValue:
    """One setting's value (normalised: booleans are ``"1"``/``"0"``) and where it came from:
    ``default``, ``preset``, ``daemon``, ``environment``, ``override``, ``component_policy`` or
    ``platform``."""

    value: str
    source: str


@dataclass(frozen=True)
class ResolvedSettings:
    """ddod's answer. ``values`` by DDO_* name; ``components[name]`` by DDO_<C>_* name, whose
    ``DDO_<C>_ROUTE`` is the route the component takes (``dynamic_offload``,
    ``diffusers_group_offload`` or ``none``); ``variable_prefixes[name]`` is that ``DDO_<C>_``,
    as ddod derives it from the component's name."""

    requested_preset: str
    effective_preset: str
    values: Dict[str, ResolvedValue]
    components: Dict[str, Dict[str, ResolvedValue]] = field(default_factory=dict)
    variable_prefixes: Dict[str, str] = field(default_factory=dict)
    #: What was asked: resolving again with other components or more overrides starts here.
    inputs: "ResolveInputs" = field(default_factory=lambda: ResolveInputs())

    def value(self, name: str) -> str:
        """The value of a library setting; KeyError for a name ddod did not resolve."""
        return self.values[name].value

    def variable_prefix(self, component: str) -> str:
        """ddod's ``DDO_<C>_`` prefix of a resolved component (``"Text-Encoder 2"`` ->
        ``"DDO_TEXT_ENCODER_2_"``); KeyError for a component ddod did not resolve.

        Raises:
            DdoError: ddod answered none (a ddod older than ComponentSettings.variable_prefix).
        """
        prefix = self.variable_prefixes[component]
        if not prefix:
            raise DdoError(f"ddod answered no DDO_<C>_ prefix for the component {component!r}: "
                           f"it is older than this client; update ddod")
        return prefix

    def component_variables(self, component: str) -> Tuple[str, ...]:
        """The names a resolved component's own values are read from: ``DDO_<C>_<NAME>`` for
        every per-component setting ddod answered, then the ``DDO_RUNNER_<C>_<NAME>`` form
        ddod reads after it. KeyError for a component ddod did not resolve."""
        own = tuple(self.components[component])
        prefix = self.variable_prefix(component)
        runner = "DDO_RUNNER_" + prefix[len("DDO_"):]
        return own + tuple(runner + name[len(prefix):] for name in own)

    @classmethod
    def from_proto(cls, message: settings_pb2.ResolvedSettings) -> "ResolvedSettings":
        def convert(values) -> Dict[str, ResolvedValue]:
            return {v.name: ResolvedValue(v.value, _SOURCES.get(v.source, "unknown")) for v in values}

        return cls(
            requested_preset=message.requested_preset,
            effective_preset=message.effective_preset,
            values=convert(message.values),
            components={c.component: convert(c.values) for c in message.components},
            variable_prefixes={c.component: c.variable_prefix for c in message.components},
        )


def environment_settings(environ: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The DDO_* variables of ``environ`` (default: this process's environment)."""
    source = os.environ if environ is None else environ
    return {name: value for name, value in source.items() if name.startswith("DDO_")}


@dataclass(frozen=True)
class ResolveInputs:
    """The inputs of one ResolveSettings call (the environment as its DDO_* variables)."""

    preset: str = ""
    environ: Mapping[str, str] = field(default_factory=dict)
    overrides: Mapping[str, str] = field(default_factory=dict)
    component_policies: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


def resolve_settings(
    rpc: RpcChannel,
    preset: str = "",
    *,
    environ: Optional[Mapping[str, str]] = None,
    overrides: Optional[Mapping[str, object]] = None,
    components: Iterable[str] = (),
    component_policies: Optional[Mapping[str, Mapping[str, object]]] = None,
) -> ResolvedSettings:
    """Asks ddod for the settings of one call (``client.resolve_settings(...)``).

    Args:
        rpc: The channel of a connected client (``client.rpc``).
        preset: the ``preset=`` argument ("" for none; DDO_PRESET in ``environ`` wins).
        environ: the environment to read DDO_* variables from (default ``os.environ``; pass
            ``{}`` to ignore it, as the seed's ``use_environment=False``).
        overrides: explicit values by DDO_* name (or ``DDO_<C>_<NAME>``); they win over all.
        components: component names to resolve routes and group-offload arguments for.
        component_policies: the seed's ``component_policies={"transformer": {...}}``.

    Raises:
        InvalidSettingError: (a ValueError) INVALID_ARGUMENT naming the variable, its value,
            where it came from and what is valid (an unknown preset lists the presets).
        DaemonError: another failure of the call.
    """
    request = settings_pb2.ResolveSettingsRequest(
        preset=preset or "",
        environment=_seed_clamped(environment_settings(environ)),
        overrides=_seed_clamped({name: setting_text(value)
                                 for name, value in (overrides or {}).items()}),
        components=list(components),
    )
    for component, policy in (component_policies or {}).items():
        request.component_policies[component].values.update(
            {str(key): setting_text(value) for key, value in policy.items()}
        )
    try:
        resolved = ResolvedSettings.from_proto(rpc.unary("ResolveSettings", request))
    except DaemonError as error:
        if error.code != grpc.StatusCode.INVALID_ARGUMENT:
            raise
        raise InvalidSettingError(error.rpc, error.cause) from error
    return dataclasses.replace(resolved, inputs=ResolveInputs(
        preset=request.preset,
        environ=dict(request.environment),
        overrides=dict(request.overrides),
        component_policies={name: dict(policy.values)
                            for name, policy in request.component_policies.items()},
    ))


#: Settings the seed clamps instead of refusing: ``max(1, int(value))``.
_CLAMPED_TO_ONE = ("DDO_PIN_CPU_WORKERS",)


def _seed_clamped(values: Dict[str, str]) -> Dict[str, str]:
    """``values`` with the seed's clamps applied: a whole number below 1 of
    DDO_PIN_CPU_WORKERS is 1 (the seed's resolver did ``max(1, int(value))``); anything that is
    no whole number is left for ddod to refuse with a message naming it."""
    for name in _CLAMPED_TO_ONE:
        text = values.get(name, "").strip()
        try:
            number = int(text)
        except ValueError:
            continue
        if number < 1:
            values[name] = "1"
    return values


def setting_text(value: object) -> str:
    """Python values as the seed's parsers read them: booleans as 1/0, the rest as str."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return ",".join(str(item) for item in value)
    return "" if value is None else str(value)
