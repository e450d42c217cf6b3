"""The context-manager protocol for objects that are released with ``close()``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Optional, Type, TypeVar

_Self = TypeVar("_Self", bound="Closeable")


class Closeable(ABC):
    """Base for objects released by ``close()``: ``with obj: ...`` closes it on exit."""

    @abstractmethod
    def close(self) -> None:
        """Releases what the object holds; safe to call more than once."""

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        self.close()
