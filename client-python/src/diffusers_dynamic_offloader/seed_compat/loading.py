"""Loading one component on its own, then (optionally) putting it on DDO: the seed's
``from_pretrained_with_dynamic_offload`` (docs/seed.md, "Phases, staged runs and loading one
component").

Typical use loads the transformer with ``device_map="cpu"`` before building the pipeline, so
that it never goes through the full pipeline first, and leaves routing to a later
:func:`~diffusers_dynamic_offloader.enable_offload` (``apply_dynamic=False``, the default).
``apply_dynamic=True`` streams it through ddod at once, on the DDO route without routing or
quantized detection, as the seed's hook did.

The load may use another safetensors backend (``load_safetensors_backend`` of the config, or
DDO_LOAD_SAFETENSORS_BACKEND): ``""`` (safetensors' default), ``mmap`` or ``pread``. It is
switched only for the duration of the load, in safetensors and in the accelerate,
transformers and diffusers modules that imported its functions.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

import torch
from torch import nn

# The safetensors backends this process can switch to for a load. Kept here: the load runs in
# this process before anything is resolved, and needs no daemon (ddod's catalog checks
# DDO_LOAD_SAFETENSORS_BACKEND against the same values when settings are resolved).
SAFETENSORS_BACKENDS = ("", "mmap", "pread")

# Modules that bind safetensors' functions at import time, and the attribute names they use.
_IMPORTERS = ("accelerate.utils.modeling", "transformers.modeling_utils",
              "diffusers.models.model_loading_utils")


@dataclass
class DynamicOffloadLoadResult:
    """The loaded module; with ``apply_dynamic=True`` also its streaming session (``hook``)."""

    module: nn.Module
    hook: Any = None
    should_move_to_execution_device: bool = True
    event_payload: Dict[str, Any] = field(default_factory=dict)
    _profile: Any = field(default=None, repr=False)

    def profile_run(self) -> contextlib.AbstractContextManager:
        """The seed's profiling context (see DynamicOffloadApplyResult.profile_run)."""
        from .named_profiles import profile_run_of

        return profile_run_of(self._profile)

    def release(self) -> None:
        """Closes the streaming session (``apply_dynamic=True``): ddod frees its device
        memory, the module's weights go back to host views. Idempotent."""
        from .offload_api import remove_dynamic_offload

        if self.hook is not None:
            remove_dynamic_offload(self.module)
            self.hook = None

    def __enter__(self) -> "DynamicOffloadLoadResult":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.release()


def from_pretrained_with_dynamic_offload(
    pretrained_model_name_or_path: Any,
    *,
    model_loader: Any = None,
    dynamic_offload_config: Any = None,
    apply_dynamic: bool = False,
    profile_name: Optional[str] = None,
    build_profile: Optional[bool] = None,
    component: str = "transformer",
    client=None,
    **from_pretrained_kwargs: Any,
) -> DynamicOffloadLoadResult:
    """Loads a component (``model_loader.from_pretrained(path, **kwargs)``, or
    ``model_loader(path, **kwargs)`` for a plain callable; default ``diffusers.AutoModel``)
    with the configured safetensors backend, and streams it through ddod when
    ``apply_dynamic``.

    Raises:
        ValueError: profile options without ``apply_dynamic=True``; an unknown safetensors
            backend.
    """
    if (profile_name or build_profile) and not apply_dynamic:
        raise ValueError("Pass profile options to enable_offload after staged loading, "
                         "or set apply_dynamic=True.")
    backend = getattr(dynamic_offload_config, "load_safetensors_backend", "") or os.environ.get(
        "DDO_LOAD_SAFETENSORS_BACKEND", os.environ.get("DDO_SAFETENSORS_BACKEND", ""))
    loader = _loader(model_loader)
    with temporary_safetensors_backend(backend):
        module = loader(pretrained_model_name_or_path, **from_pretrained_kwargs)
    if not apply_dynamic:
        return DynamicOffloadLoadResult(module)

    from .offload_api import enable_offload

    overrides: Dict[str, Any] = {}
    if profile_name is not None:
        overrides["profile_name"] = profile_name
    if build_profile is not None:
        overrides["build_profile"] = build_profile
    applied = enable_offload(
        module, component=component, route="dynamic_offload", config=dynamic_offload_config,
        execution_device=getattr(dynamic_offload_config, "execution_device", "cuda:0"),
        client=client, **overrides)
    return DynamicOffloadLoadResult(module, applied.hook, applied.should_move_to_execution_device,
                                    applied.event_payload, _profile=applied._profile)


@dataclass
class DdoLoadedComponent:
    """A component built from its config and bound to ddod's copy of its weights."""

    module: nn.Module
    cache_key: str
    warm: bool  # the weights were already in ddod's pool: no file was read
    seconds: float


def load_from_ddod(
    model_class: Any,
    pretrained_model_name_or_path: Any,
    *,
    subfolder: Optional[str] = None,
    torch_dtype: Any = None,
    cache_key: Optional[str] = None,
    client=None,
    progress: Optional[bool] = None,
    bind: bool = True,
) -> DdoLoadedComponent:
    """Builds ``model_class`` from its config with its parameters on the meta device (no
    memory, no checkpoint read by this process) and binds every weight, zero-copy, to ddod's
    copy. Warm (the component is in ddod's pool, e.g. under warm_process after an earlier
    runner): nothing is read. Cold: ddod reads the folder's ``*.safetensors`` itself first.

    ``model_class`` is a Diffusers model class (``load_config`` and ``from_config``, as
    ``ModelMixin``) or a transformers one (``config_class``, as ``PreTrainedModel``: the text
    encoders). Buffers that are not in the checkpoint (computed at construction) are
    built normally. The module reads ddod's copy through copy-on-write host memory (an edit stays
    in this process); route it
    with ``enable_offload(module, cache_key=loaded.cache_key, ...)``, which then uploads
    nothing.

    ``bind=False`` leaves the weights on the meta device, holding nothing of ddod's pool
    (ddod may then move the component to its files to make room, e.g. for the next
    component's load under a RAM budget); the module is bound when routed or first called.
    A staged run (``run_staged``) gives back the weights of every such module between its
    passes in the same way.

    ``torch_dtype="auto"`` gives every weight the dtype the checkpoint stores it in, as
    transformers' ``from_pretrained`` does: a checkpoint of mixed dtypes (fp8 weights beside
    bf16 norms, what ``enable_layerwise_casting`` saves) binds as it is, each tensor zero-copy.

    Raises:
        BindError: the checkpoint does not fit the class (names, shapes, or a ``torch_dtype``
            other than the checkpoint's: a zero-copy view cannot convert).
        ValueError: ``torch_dtype`` is a string other than ``"auto"``.
    """
    import time

    from ..errors import DaemonError
    from ..loaded_binding import mark_loaded, unbind

    started = time.perf_counter()
    _check_model_class(model_class)
    if isinstance(torch_dtype, str) and torch_dtype != "auto":
        raise ValueError(f"torch_dtype={torch_dtype!r}: a torch.dtype, or 'auto' for the "
                         "checkpoint's own dtypes")
    from ..default_client import client_or_default

    client = client_or_default(client)
    folder = os.path.join(os.fspath(pretrained_model_name_or_path), subfolder or "")
    key = cache_key or f"ddo-load:{os.path.abspath(folder)}"
    warm = True
    try:
        client.component(key)
    except DaemonError as error:
        if error.code.name != "NOT_FOUND":
            raise
        warm = False
        client.load_safetensors(key, [folder], progress=progress)
    with parameters_on_meta():
        module = _built_from_config(model_class, pretrained_model_name_or_path, subfolder)
    if torch_dtype is not None and torch_dtype != "auto":
        # torch's own cast of the meta parameters: Diffusers' ModelMixin.to warns about
        # fp32-kept modules, which matter for real weights only.
        module = nn.Module.to(module, torch_dtype)
    attached = client.attach(key)
    try:
        if torch_dtype == "auto":
            take_stored_dtypes(module, attached.tensors)
        attached.bind(module)
    except BaseException:
        attached.close()
        raise
    # The mapping lives as long as the module does, or until a staged run gives it back
    # (loaded_binding.unbind).
    mark_loaded(module, key, attached, client)
    if not bind:
        unbind(module)
    module.eval().requires_grad_(False)
    return DdoLoadedComponent(module, key, warm, time.perf_counter() - started)


def take_stored_dtypes(module: nn.Module, stored: Mapping[str, torch.Tensor]) -> None:
    """Gives each parameter and buffer of ``module`` that ``stored`` names the dtype stored
    there (``torch_dtype="auto"``). The parameters are on the meta device, so nothing is
    converted; a weight shared by several names stays shared."""
    owners = [(f"{path}." if path else "", owner)
              for path, owner in module.named_modules(remove_duplicate=False)]
    replaced: Dict[int, nn.Parameter] = {}
    for prefix, owner in owners:
        for name, param in owner._parameters.items():
            stored_tensor = stored.get(prefix + name)
            if (param is None or stored_tensor is None or id(param) in replaced
                    or param.dtype == stored_tensor.dtype):
                continue
            replaced[id(param)] = nn.Parameter(param.to(stored_tensor.dtype), requires_grad=False)
    # Every name of a replaced weight, the checkpoint's or not: a tied alias that the
    # checkpoint leaves out (T5's encoder.embed_tokens, saved as shared) stays the same weight.
    for prefix, owner in owners:
        for name, param in list(owner._parameters.items()):
            if param is not None and id(param) in replaced:
                owner._parameters[name] = replaced[id(param)]
        for name, buffer in list(owner._buffers.items()):
            stored_tensor = stored.get(prefix + name)
            if buffer is not None and stored_tensor is not None:
                if buffer.dtype != stored_tensor.dtype:
                    owner._buffers[name] = buffer.to(stored_tensor.dtype)


@contextlib.contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Modules built inside get their parameters on the meta device (no memory) and their
    buffers as usual (computed values that no checkpoint holds stay right)."""
    original = nn.Module.register_parameter

    def register_parameter(self: nn.Module, name: str, param: Optional[nn.Parameter]) -> None:
        original(self, name, param)
        if param is not None and not param.is_meta:
            self._parameters[name] = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)

    nn.Module.register_parameter = register_parameter  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = original  # type: ignore[method-assign]


def _check_model_class(model_class: Any) -> None:
    """TypeError unless ``model_class`` can be built from a config folder (before anything is
    asked of ddod)."""
    config_class = getattr(model_class, "config_class", None)
    if not hasattr(model_class, "load_config") and not hasattr(config_class, "from_pretrained"):
        raise TypeError(f"{getattr(model_class, '__name__', model_class)!r} is neither a "
                        "Diffusers model class (load_config) nor a transformers one "
                        "(config_class)")


def _built_from_config(model_class: Any, path: Any, subfolder: Optional[str]) -> nn.Module:
    """``model_class`` built from the config in ``path``/``subfolder``: a Diffusers model
    (``load_config`` and ``from_config``) or a transformers one (``config_class``, e.g. the
    text encoders T5EncoderModel and CLIPTextModel)."""
    if hasattr(model_class, "load_config"):
        return model_class.from_config(model_class.load_config(path, subfolder=subfolder))
    config_class = model_class.config_class
    folder = os.path.join(os.fspath(path), subfolder or "")
    return model_class(config_class.from_pretrained(folder))


def _loader(model_loader: Any) -> Callable[..., nn.Module]:
    if model_loader is None:
        from diffusers import AutoModel

        model_loader = AutoModel
    from_pretrained = getattr(model_loader, "from_pretrained", None)
    return from_pretrained if callable(from_pretrained) else model_loader


@contextlib.contextmanager
def temporary_safetensors_backend(backend: str) -> Iterator[None]:
    """Makes safetensors' ``safe_open`` and ``load_file`` use ``backend`` (unless a caller
    passes its own) until the block ends; nothing to do for ``""`` or without safetensors.

    Raises:
        ValueError: ``backend`` is not one of ``""``, ``mmap``, ``pread``.
    """
    backend = (backend or "").strip().lower()
    if backend not in SAFETENSORS_BACKENDS:
        raise ValueError(f"Invalid DDO_LOAD_SAFETENSORS_BACKEND={backend!r}. Valid values: "
                         f"'', mmap, pread")
    try:
        import safetensors
        import safetensors.torch
    except ImportError:
        backend = ""
    if not backend:
        yield
        return
    originals = {"safe_open": safetensors.safe_open, "load_file": safetensors.torch.load_file}

    def with_backend(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("backend", backend)
            return function(*args, **kwargs)
        return wrapper

    replacements = {name: with_backend(function) for name, function in originals.items()}
    swapped: List[Tuple[Any, str, Any]] = [
        (safetensors, "safe_open", originals["safe_open"]),
        (safetensors.torch, "load_file", originals["load_file"]),
    ]
    safetensors.safe_open = replacements["safe_open"]
    safetensors.torch.load_file = replacements["load_file"]
    try:
        for name in _IMPORTERS:
            try:
                importer = importlib.import_module(name)
            except ImportError:
                continue
            for attribute, original in (("safe_open", originals["safe_open"]),
                                        ("safe_load_file", originals["load_file"])):
                if getattr(importer, attribute, None) is original:
                    replacement = replacements["safe_open" if attribute == "safe_open" else "load_file"]
                    setattr(importer, attribute, replacement)
                    swapped.append((importer, attribute, original))
        yield
    finally:
        for owner, attribute, original in swapped:
            setattr(owner, attribute, original)
