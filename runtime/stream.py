"""Streams and events."""

from __future__ import annotations

import sys
import weakref
from typing import TYPE_CHECKING, Any

from ._driver import check, driver

if TYPE_CHECKING:
    from .device import Device

__all__ = ["Event", "Stream", "stream_handle"]


def stream_handle(stream: Any) -> int:
    """The raw ``CUstream`` of anything that names a stream; ``None`` is the default stream.

    Accepts :class:`Stream`, an int handle, an object with ``__cuda_stream__`` (the
    CUDA stream protocol), one with ``cuda_stream`` (``torch.cuda.Stream``,
    ``cupy.cuda.Stream.ptr`` is passed as int), or a cuda-bindings ``CUstream``.
    """
    if stream is None:
        return 0
    if type(stream) is Stream:
        return stream.handle
    if isinstance(stream, bool):
        raise TypeError("stream must be a Stream, an int handle or None, not a bool")
    if isinstance(stream, int):
        if stream < 0:
            raise ValueError(f"stream handle {stream} is negative")
        return stream
    protocol = getattr(stream, "__cuda_stream__", None)
    if callable(protocol):
        _version, handle = protocol()
        return int(handle)
    handle = getattr(stream, "cuda_stream", None)
    if isinstance(handle, int):
        return handle
    bindings = sys.modules.get("cuda.bindings.driver")  # a CUstream implies it is imported
    if bindings is not None and isinstance(stream, bindings.CUstream):
        return int(stream)
    raise TypeError(
        f"expected a runtime.Stream, an int stream handle, an object with __cuda_stream__ or "
        f"cuda_stream, or None; got {type(stream).__name__}"
    )


class Stream:
    """A CUDA stream. ``Stream(device)`` creates one it owns; :meth:`from_handle`
    wraps a foreign handle (torch's current stream, say) without taking ownership.

    ``handle`` is the ``CUstream`` as an int; reading it raises ``ValueError`` once the
    stream is closed. (It is a plain attribute, removed on close, so a launch reads it
    at the cost of an attribute lookup.)
    """

    handle: int

    def __init__(self, device: Device | None = None, *, non_blocking: bool = False) -> None:
        from .device import Device

        self.device = device if device is not None else Device(0)
        self.device._activate()
        drv = driver()
        flags = (
            drv.CUstream_flags.CU_STREAM_NON_BLOCKING
            if non_blocking
            else drv.CUstream_flags.CU_STREAM_DEFAULT
        )
        self._handle = check("cuStreamCreate", drv.cuStreamCreate(int(flags)))
        self.handle = int(self._handle)
        self.owned = True
        self._finalizer = weakref.finalize(self, _destroy_stream, self.device, self._handle)
        self.device._track(self)

    @classmethod
    def from_handle(cls, handle: Any, device: Device | None = None) -> Stream:
        """Wrap a stream someone else owns; :meth:`close` will not destroy it."""
        from .device import Device

        self = cls.__new__(cls)
        self.device = device if device is not None else Device(0)
        self.handle = stream_handle(handle)
        self._handle = driver().CUstream(self.handle)
        self.owned = False
        self._finalizer = None
        return self

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes the instance lacks: ``handle`` after close().
        if name == "handle":
            raise ValueError("this Stream is closed")
        raise AttributeError(f"'Stream' object has no attribute {name!r}")

    @property
    def closed(self) -> bool:
        return "handle" not in self.__dict__

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)

    def synchronize(self) -> None:
        """Wait until all work queued on this stream has finished."""
        _ = self.handle  # raises once closed: the CUstream below would be a destroyed one
        self.device._activate()
        check("cuStreamSynchronize", driver().cuStreamSynchronize(self._handle))

    def close(self) -> None:
        """Destroy the stream if this object created it; idempotent."""
        self.__dict__.pop("handle", None)  # first: no launch may pick up the handle once it is gone
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else hex(self.handle)
        return f"<runtime.Stream {state}{'' if self.owned else ' (borrowed)'}>"


def _destroy_stream(device: Device, handle: Any) -> None:
    if device._closing_or_open():
        device._activate()
        check("cuStreamDestroy", driver().cuStreamDestroy(handle))


class Event:
    """A CUDA event, for timing and ordering work between streams."""

    def __init__(self, device: Device | None = None, *, timing: bool = True) -> None:
        from .device import Device

        self.device = device if device is not None else Device(0)
        self.device._activate()
        drv = driver()
        flags = drv.CUevent_flags.CU_EVENT_DEFAULT if timing else drv.CUevent_flags.CU_EVENT_DISABLE_TIMING
        self._handle = check("cuEventCreate", drv.cuEventCreate(int(flags)))
        self._closed = False
        self._finalizer = weakref.finalize(self, _destroy_event, self.device, self._handle)
        self.device._track(self)

    def record(self, stream: Any = None) -> Event:
        """Record the event on ``stream`` (default: the default stream)."""
        self._check()
        self.device._activate()
        check("cuEventRecord", driver().cuEventRecord(self._handle, stream_handle(stream)))
        return self

    def synchronize(self) -> None:
        self._check()
        check("cuEventSynchronize", driver().cuEventSynchronize(self._handle))

    def elapsed_ms(self, end: Event) -> float:
        """Milliseconds from this event to ``end``; both must have completed."""
        self._check()
        end._check()
        return float(check("cuEventElapsedTime", driver().cuEventElapsedTime(self._handle, end._handle)))

    def _check(self) -> None:
        if self._closed:
            raise ValueError("this Event is closed")

    def close(self) -> None:
        self._finalizer()
        self._closed = True

    def __repr__(self) -> str:
        return f"<runtime.Event{' closed' if self._closed else ''}>"


def _destroy_event(device: Device, handle: Any) -> None:
    if device._closing_or_open():
        device._activate()
        check("cuEventDestroy", driver().cuEventDestroy(handle))
