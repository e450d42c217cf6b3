"""Element types: torch dtypes and the protocol's ``DType`` codes, both ways, with item sizes.

Every dtype a component can hold has a code in ``ddo.v1.DType``. Some codes have no torch dtype
in older torch releases (``float8_e4m3fn`` and ``float8_e5m2`` appeared in torch 2.1, ``uint16``,
``uint32`` and ``uint64`` in torch 2.3); those map only when the running torch has them.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch

from ._proto import components_pb2
from .errors import TensorTableError

# (protocol code, torch attribute name, item size in bytes, safetensors name)
_TABLE: Tuple[Tuple[int, str, int, str], ...] = (
    (components_pb2.DTYPE_F64, "float64", 8, "F64"),
    (components_pb2.DTYPE_F32, "float32", 4, "F32"),
    (components_pb2.DTYPE_F16, "float16", 2, "F16"),
    (components_pb2.DTYPE_BF16, "bfloat16", 2, "BF16"),
    (components_pb2.DTYPE_F8_E4M3, "float8_e4m3fn", 1, "F8_E4M3"),
    (components_pb2.DTYPE_F8_E5M2, "float8_e5m2", 1, "F8_E5M2"),
    (components_pb2.DTYPE_I64, "int64", 8, "I64"),
    (components_pb2.DTYPE_I32, "int32", 4, "I32"),
    (components_pb2.DTYPE_I16, "int16", 2, "I16"),
    (components_pb2.DTYPE_I8, "int8", 1, "I8"),
    (components_pb2.DTYPE_U8, "uint8", 1, "U8"),
    (components_pb2.DTYPE_BOOL, "bool", 1, "BOOL"),
    (components_pb2.DTYPE_U16, "uint16", 2, "U16"),
    (components_pb2.DTYPE_U32, "uint32", 4, "U32"),
    (components_pb2.DTYPE_U64, "uint64", 8, "U64"),
)

_ITEMSIZE: Dict[int, int] = {code: size for code, _, size, _ in _TABLE}
_SAFETENSORS_NAME: Dict[int, str] = {code: st for code, _, _, st in _TABLE}
_TO_TORCH: Dict[int, torch.dtype] = {}
_FROM_TORCH: Dict[torch.dtype, int] = {}
for _code, _attribute, _, _ in _TABLE:
    _dtype = getattr(torch, _attribute, None)
    if isinstance(_dtype, torch.dtype):
        _TO_TORCH[_code] = _dtype
        _FROM_TORCH[_dtype] = _code


def proto_name(code: int) -> str:
    """``"DTYPE_BF16"`` for a code; ``"DType(99)"`` for a code this client does not know."""
    try:
        return components_pb2.DType.Name(code)
    except ValueError:
        return f"DType({code})"


def itemsize(code: int) -> int:
    """The size in bytes of one element of a protocol dtype.

    Raises:
        TensorTableError: the code is unspecified or unknown.
    """
    try:
        return _ITEMSIZE[code]
    except KeyError:
        raise TensorTableError(f"{proto_name(code)} has no element size") from None


def safetensors_name(code: int) -> str:
    """The dtype's name in a safetensors header (``"BF16"``)."""
    try:
        return _SAFETENSORS_NAME[code]
    except KeyError:
        raise TensorTableError(f"{proto_name(code)} has no safetensors name") from None


def to_proto(dtype: torch.dtype, *, tensor_name: Optional[str] = None) -> int:
    """The protocol code of a torch dtype.

    Raises:
        TensorTableError: the protocol has no code for ``dtype`` (complex, quantized, ...);
            the message names ``tensor_name`` when given.
    """
    try:
        return _FROM_TORCH[dtype]
    except KeyError:
        where = f"tensor {tensor_name!r} has dtype {dtype}" if tensor_name else f"dtype {dtype}"
        supported = ", ".join(str(d) for d in _FROM_TORCH)
        raise TensorTableError(
            f"{where}, which ddod cannot store; supported: {supported}"
        ) from None


def to_torch(code: int, *, tensor_name: Optional[str] = None) -> torch.dtype:
    """The torch dtype of a protocol code.

    Raises:
        TensorTableError: the code is unknown, or this torch has no such dtype (e.g. float8
            before torch 2.1); the message names ``tensor_name`` when given.
    """
    try:
        return _TO_TORCH[code]
    except KeyError:
        where = f"tensor {tensor_name!r} is {proto_name(code)}" if tensor_name else proto_name(code)
        if code in _ITEMSIZE:
            reason = f"torch {torch.__version__} has no such dtype"
        else:
            reason = "this client does not know that dtype (is it older than ddod?)"
        raise TensorTableError(f"{where}: {reason}") from None


def supported_torch_dtypes() -> Tuple[torch.dtype, ...]:
    """The torch dtypes of this torch that have a protocol code."""
    return tuple(_FROM_TORCH)
