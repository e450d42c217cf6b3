"""An fp8 weight cast to its compute dtype by DDO's own kernel (``DDO_CLIENT_CAST_KERNEL``).

A Linear whose weight is stored in fp8 (Diffusers' layerwise casting, fp8 checkpoints) casts
it to the input's dtype at every forward. torch runs that cast with its generic, unvectorized
copy kernel: on an H100, a FLUX.1-dev-size transformer's 852 casts per step (8.65 G elements)
take 29.5 ms, about 880 GB/s (bench/probes/fp8_step_profile.py, runs 47-49), where a
vectorized kernel takes 13-14 ms. DDO's kernel (``client-cpp/src/consumer/kernels/byte_cast.cu``,
shipped as PTX in ``kernels/byte_cast.ptx``, loaded with the CUDA driver: no compiler, no CUDA
runtime) reads 16 bytes per thread and looks each up in a 256-entry table that torch builds on
the device from the two dtypes (``arange(256, uint8).view(src).to(dst)``), so its result is
bitwise torch's own conversion, NaNs included, for every 1-byte float format.

:func:`cast` is ``tensor.to(dtype)``: through the C++ extension of :mod:`.cpp_consumer` when
it is loaded (the extension's streamed Linears use the same kernel, installed by
:func:`install`), else through libcuda with ctypes; torch's own cast for anything else: a
tensor not on a CUDA device, not contiguous, not 1-byte floating, a destination other than
bf16, fp16 and fp32, a tensor that requires grad in grad mode, a stream capturing a CUDA graph,
and code that ``torch.compile`` traces.

``DDO_CLIENT_CAST_KERNEL`` (read once per process): ``auto`` (default) or ``torch`` (torch's
cast always). A failure to load or launch the kernel logs one line and turns it off for the
process.

Thread-safety: :func:`cast` may be called from any thread.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

import torch

from .compile_support import compiling
from .errors import ConfigurationError, DdoError
from .runner_log import logger

__all__ = ["MODES", "MODE_ENV_VAR", "PTX_PATH", "cast", "install", "kernel_mode"]

MODE_ENV_VAR = "DDO_CLIENT_CAST_KERNEL"
MODES = ("auto", "torch")
#: The kernels' PTX (tools/gen_byte_cast_ptx.sh), package data.
PTX_PATH = Path(__file__).resolve().parent / "kernels" / "byte_cast.ptx"

#: The destinations, by their element size (which kernel).
_OUTPUT_BYTES = {torch.bfloat16: 2, torch.float16: 2, torch.float32: 4}
_THREADS = 256  # per block (the kernels load the table with them)
_BLOCKS_PER_SM = 8
_ELEMENTS_PER_THREAD = 16

Caster = Callable[[torch.Tensor, torch.dtype], torch.Tensor]

_lock = threading.Lock()
#: The process's caster once chosen (None: not yet).
_caster: Optional[Caster] = None
#: The C++ extension given the PTX by :func:`install` (None: none loaded).
_extension = None


def kernel_mode() -> str:
    """``DDO_CLIENT_CAST_KERNEL``, lower-cased; ConfigurationError for another value."""
    value = os.environ.get(MODE_ENV_VAR, "")
    mode = value.strip().lower() or "auto"
    if mode not in MODES:
        raise ConfigurationError(f"{MODE_ENV_VAR}={value!r} is not one of {', '.join(MODES)}")
    return mode


def _torch_cast(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return tensor.to(dtype)


def handles(tensor: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether the kernel may cast ``tensor`` to ``dtype`` (see the module documentation)."""
    return (tensor.is_cuda and tensor.element_size() == 1 and tensor.is_floating_point()
            and dtype in _OUTPUT_BYTES and tensor.is_contiguous()
            and not (tensor.requires_grad and torch.is_grad_enabled()))


def cast(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``tensor.to(dtype)``, bitwise, through DDO's kernel where it applies."""
    if compiling() or not handles(tensor, dtype):
        return tensor.to(dtype)
    caster = _caster or _choose()
    return caster(tensor, dtype)


def _report(reason: str) -> None:
    """The one line said when the kernel is turned off."""
    logger.warning("[ddo] %s (%s=torch keeps torch's casts without trying the kernel)",
                   reason, MODE_ENV_VAR)


def _read_ptx() -> str:
    """The PTX text; DdoError when the package lacks it."""
    try:
        return PTX_PATH.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as error:
        raise DdoError(f"the fp8 cast kernel's PTX is unreadable ({PTX_PATH}): {error}") \
            from None


def install(module) -> None:
    """Gives the C++ extension ``module`` the kernel's PTX (its streamed Linears and
    :func:`cast` use it), unless ``DDO_CLIENT_CAST_KERNEL=torch`` or the PTX is missing (one
    log line)."""
    global _caster, _extension
    if kernel_mode() == "torch" or not hasattr(module, "byte_cast_install"):
        return
    try:
        ptx = _read_ptx()
    except DdoError as error:
        _turn_off(str(error))
        return
    module.byte_cast_install(ptx, _report)
    with _lock:
        _extension = module
        if _caster is not None and _caster is not _torch_cast:
            _caster = module.byte_cast  # the ctypes caster's casts go through it from now on


def _choose() -> Caster:
    """The process's caster: torch's when turned off, the loaded extension's, else ctypes'."""
    global _caster
    with _lock:
        if _caster is None:
            if kernel_mode() == "torch":
                _caster = _torch_cast
            elif _extension is not None:
                _caster = _extension.byte_cast
            else:
                _caster = _DriverCaster().cast
        return _caster


def _turn_off(reason: str) -> None:
    global _caster
    with _lock:
        if _caster is not _torch_cast:
            _caster = _torch_cast
            _report(f"DDO's fp8 cast kernel is off for this process, casts are torch's: "
                    f"{reason}")


def reset() -> None:
    """Forgets the process's choice and extension (tests: the next cast chooses again)."""
    global _caster, _extension
    with _lock:
        _caster = None
        _extension = None


class _DriverCaster:
    """The kernel launched through libcuda with ctypes (no extension): the PTX loaded once per
    CUDA context, the tables made once per device and dtype pair, all kept for the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ptx: Optional[bytes] = None
        self._kernels: Dict[int, Tuple[ctypes.c_void_p, ctypes.c_void_p, int]] = {}
        self._tables: Dict[Tuple[int, torch.dtype, torch.dtype], torch.Tensor] = {}
        self._driver = None

    def cast(self, tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        try:
            out = self._launch(tensor, dtype)
        except (DdoError, AttributeError, OSError) as error:  # AttributeError: an old libcuda
            _turn_off(str(error))
            return tensor.to(dtype)
        return out if out is not None else tensor.to(dtype)

    def _launch(self, tensor: torch.Tensor, dtype: torch.dtype) -> Optional[torch.Tensor]:
        """The kernel's cast; None: not now (a graph capture, no current context)."""
        device = tensor.device
        if device.index != torch.cuda.current_device():
            with torch.cuda.device(device):
                return self._launch(tensor, dtype)
        if torch.cuda.is_current_stream_capturing():
            return None
        stream = torch.cuda.current_stream(device).cuda_stream
        with self._lock:
            driver = self._load_driver()
            context = ctypes.c_void_p()
            _check(driver, driver.cuCtxGetCurrent(ctypes.byref(context)), "cuCtxGetCurrent")
            if not context.value:
                return None
            u16, u32, max_blocks = self._kernels_of(driver, context.value)
            table = self._table_of(device, tensor.dtype, dtype)
        out = torch.empty(tensor.shape, dtype=dtype, device=device)
        count = tensor.numel()
        if count == 0:
            return out
        if out.data_ptr() % 16:
            return None
        values = (ctypes.c_uint64 * 4)(tensor.data_ptr(), out.data_ptr(), table.data_ptr(),
                                       count)
        base = ctypes.addressof(values)
        arguments = (ctypes.c_void_p * 4)(*(base + 8 * i for i in range(4)))
        chunks = count // _ELEMENTS_PER_THREAD
        blocks = max(1, min((chunks + _THREADS - 1) // _THREADS, max_blocks))
        function = u32 if _OUTPUT_BYTES[dtype] == 4 else u16
        _check(driver, driver.cuLaunchKernel(function, blocks, 1, 1, _THREADS, 1, 1, 0,
                                             ctypes.c_void_p(stream), arguments, None),
               "cuLaunchKernel(byte_cast)")
        return out

    def _load_driver(self):
        if self._driver is None:
            from .cuda_ipc import _driver  # noqa: PLC0415 - libcuda, once it is needed

            driver = _driver()
            driver.cuCtxGetCurrent.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
            driver.cuModuleLoadData.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p]
            driver.cuModuleGetFunction.argtypes = [ctypes.POINTER(ctypes.c_void_p),
                                                   ctypes.c_void_p, ctypes.c_char_p]
            driver.cuLaunchKernel.argtypes = [
                ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p,
                ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
            self._driver = driver
        return self._driver

    def _kernels_of(self, driver, context: int) -> Tuple[ctypes.c_void_p, ctypes.c_void_p, int]:
        """The current context's kernels, loaded on first use."""
        found = self._kernels.get(context)
        if found is not None:
            return found
        if self._ptx is None:
            self._ptx = _read_ptx().encode("ascii")
        module = ctypes.c_void_p()
        _check(driver, driver.cuModuleLoadData(ctypes.byref(module), self._ptx),
               "cuModuleLoadData(byte_cast)")
        functions = []
        for name in (b"ddo_byte_cast_u16", b"ddo_byte_cast_u32"):
            function = ctypes.c_void_p()
            _check(driver, driver.cuModuleGetFunction(ctypes.byref(function), module, name),
                   f"cuModuleGetFunction({name.decode()})")
            functions.append(function)
        sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
        kernels = (functions[0], functions[1], max(1, sms) * _BLOCKS_PER_SM)
        self._kernels[context] = kernels
        return kernels

    def _table_of(self, device: torch.device, source: torch.dtype,
                  dtype: torch.dtype) -> torch.Tensor:
        """The 256 output bit patterns of ``source`` -> ``dtype`` on ``device``, made by torch
        on first use."""
        key = (device.index, source, dtype)
        table = self._tables.get(key)
        if table is None:
            table = torch.arange(256, dtype=torch.uint8, device=device).view(source).to(dtype)
            # Made on this stream, used later on any: wait for it once.
            torch.cuda.current_stream(device).synchronize()
            self._tables[key] = table
        return table


def _check(driver, result: int, what: str) -> None:
    if result != 0:
        name = ctypes.c_char_p()
        driver.cuGetErrorName(result, ctypes.byref(name))
        label = name.value.decode() if name.value else f"CUresult {result}"
        raise DdoError(f"{what} failed: {label}")
