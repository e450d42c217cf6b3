"""The device memory of a streaming session: its resident slab or its ring.

On the host backend both are shared-memory segments ddod names; on a GPU, CUDA memory ddod
exports with an IPC handle. Views of them are zero-copy tensors. The slab is mapped
copy-on-write on the host (ddod fills it once); the ring, which ddod keeps refilling, is mapped
shared and read-only.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from .errors import DdoError
from .shm import SegmentMapping, SegmentOpener

__all__ = ["DeviceMemory"]


class DeviceMemory:
    """The slab or the ring: a shared-memory segment (host) or CUDA IPC memory (GPU)."""

    def __init__(
        self,
        what: str,
        size: int,
        shm_name: str,
        handle: bytes,
        device: torch.device,
        opener: Optional[SegmentOpener] = None,
        copy_on_write: bool = True,
    ) -> None:
        self.what = what
        self.size = size
        self._segment: Optional[SegmentMapping] = None
        self._ipc = None
        self._whole: Optional[torch.Tensor] = None  # CUDA: one uint8 tensor over the memory
        if size == 0:
            return
        if device.type == "cpu":
            if not shm_name:
                raise DdoError(f"ddod sent no shared-memory name for the session's {what}")
            self._segment = SegmentMapping(shm_name, size, writable=False, opener=opener,
                                          copy_on_write=copy_on_write)
        else:
            from .cuda_ipc import IpcDeviceMemory

            self._ipc = IpcDeviceMemory(handle, device.index)

    def view(self, offset: int, byte_size: int, dtype: torch.dtype, shape: Sequence[int],
             name: str) -> torch.Tensor:
        """A zero-copy tensor over ``byte_size`` bytes at ``offset``."""
        if offset < 0 or offset + byte_size > self.size:
            raise DdoError(
                f"ddod placed {name!r} at bytes [{offset}, {offset + byte_size}) of the "
                f"{self.what}, which has {self.size} bytes"
            )
        if self._segment is not None:
            return self._segment.tensor(offset, byte_size, dtype, shape)
        if self._ipc is not None:
            from .cuda_ipc import tensor_view

            expected = _byte_size(dtype, shape)
            if expected != byte_size:
                raise DdoError(
                    f"{byte_size} bytes of the {self.what} cannot hold {name!r}, {dtype} "
                    f"{list(shape)} ({expected} bytes)"
                )
            if byte_size == 0:
                return torch.empty(tuple(shape), dtype=dtype, device=f"cuda:{self._ipc.device}")
            # Slices of one tensor: a view through __cuda_array_interface__ per tensor costs
            # tens of microseconds, and a session makes thousands.
            if self._whole is None:
                self._whole = tensor_view(self._ipc, 0, (self.size,), torch.uint8)
            return self._whole[offset : offset + byte_size].view(dtype).reshape(tuple(shape))
        raise DdoError(f"ddod placed {name!r} in the session's {self.what}, which is empty")

    def whole(self) -> torch.Tensor:
        """The whole memory as one uint8 tensor."""
        if self._segment is not None:
            return self._segment.tensor(0, self.size, torch.uint8, (self.size,))
        if self._ipc is not None:
            from .cuda_ipc import tensor_view

            if self._whole is None:
                self._whole = tensor_view(self._ipc, 0, (self.size,), torch.uint8)
            return self._whole
        raise DdoError(f"the session's {self.what} is empty")

    def close(self) -> None:
        self._whole = None
        if self._segment is not None:
            self._segment.close()
            self._segment = None
        if self._ipc is not None:
            self._ipc.close()
            self._ipc = None


def _byte_size(dtype: torch.dtype, shape: Sequence[int]) -> int:
    count = 1
    for dim in shape:
        count *= int(dim)
    return count * torch.empty((), dtype=dtype).element_size()
