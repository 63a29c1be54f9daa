"""Streams and events."""

from __future__ import annotations

import sys
import weakref
from typing import TYPE_CHECKING, Any

from ._driver import check, driver

if TYPE_CHECKING:
    from .device import Device

__all__ = ["Event", "Stream", "order_after", "same_stream", "stream_handle", "trust_stream_handle"]


# Stream handles a launch may use. A CUstream is a pointer the driver dereferences: an
# arbitrary int (``stream=12345``) would crash the process inside cuLaunchKernel, so a
# plain int is accepted only if it names a stream the runtime has seen: the default
# streams, one it created, one a library object handed over (torch, CuPy, anything with
# ``__cuda_stream__``), or one a caller vouched for with ``Stream.from_handle`` or
# :func:`trust_stream_handle`.
_DEFAULT_STREAMS = (0, 1, 2)  # the legacy default stream, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD
_known_streams: set[int] = set(_DEFAULT_STREAMS)


def trust_stream_handle(handle: int) -> int:
    """Vouch for ``handle`` (a ``CUstream`` made elsewhere): later launches accept it as an
    int. The stream must outlive every launch on it; nothing can check that."""
    if isinstance(handle, bool) or not isinstance(handle, int):
        raise TypeError(f"a stream handle is an int, not {type(handle).__name__} {handle!r}")
    if not 0 <= handle < 1 << 64:
        raise ValueError(f"stream handle {handle} is not a 64-bit address")
    _known_streams.add(handle)
    return handle


def known_stream_handles() -> set[int]:
    """The live set of the handles :func:`stream_handle` accepts as ints (the default
    streams, those seen through stream objects or vouched for; a closed Stream's handle
    leaves it), for the compiled launch path, which re-checks a remembered handle in it."""
    return _known_streams


def _forget_stream_handle(handle: int) -> None:
    if handle not in _DEFAULT_STREAMS:
        _known_streams.discard(handle)


def stream_handle(stream: Any) -> int:
    """The raw ``CUstream`` of anything that names a stream; ``None`` is the default stream.

    Accepts :class:`Stream`, an object with ``__cuda_stream__`` (the CUDA stream
    protocol), one with ``cuda_stream`` (``torch.cuda.Stream``), a cuda-bindings
    ``CUstream``, or an int handle the runtime knows (0, 1 and 2, and handles of streams
    seen through the above or vouched for with :func:`trust_stream_handle`).
    """
    global _last_stream
    if stream is None:
        return 0
    if type(stream) is Stream:
        return stream.handle
    last, handle = _last_stream
    if stream is last and handle in _known_streams:  # the object of the last call: its handle
        return handle
    if isinstance(stream, bool):
        raise TypeError("stream must be a Stream, an int handle or None, not a bool")
    if isinstance(stream, int):
        if stream in _known_streams:
            return stream
        if stream < 0:
            raise ValueError(f"stream handle {stream} is negative")
        raise ValueError(
            f"stream handle {stream:#x} is not a stream this runtime knows, and launching on it "
            "could crash the process: pass a runtime.Stream, a torch or CuPy stream object, or "
            "vouch for the handle with runtime.Stream.from_handle(handle) (0, 1 and 2 are the "
            "default streams)"
        )
    handle = _handle_of_object(stream)
    _last_stream = (stream, handle)  # one tuple: a thread reads a whole pair, never a torn one
    return handle


# The last stream object stream_handle read and its handle: a model passes the same torch
# stream call after call, and torch's cuda_stream costs about 0.4 µs a read on an H200's
# host. Kept while the handle is known (a closed runtime.Stream's leaves the set), as the
# compiled launch path keeps its last one; the object is held, so no other takes its id.
_last_stream: tuple[Any, int] = (None, 0)


def _handle_of_object(stream: Any) -> int:
    """The handle of a stream object other than a runtime.Stream (see stream_handle)."""
    # torch's attribute first: it is one read, where torch's __cuda_stream__ (which says
    # the same) builds a tuple in Python, about a microsecond a call in all
    failed = None
    try:
        handle = getattr(stream, "cuda_stream", None)
    except Exception as err:  # a property of some other object that fails: try the protocol
        handle, failed = None, err
    if handle.__class__ is int:
        return handle if handle in _known_streams else trust_stream_handle(handle)
    protocol = getattr(stream, "__cuda_stream__", None)
    if callable(protocol):
        _version, handle = protocol()
        return trust_stream_handle(int(handle))
    if isinstance(handle, int):
        return trust_stream_handle(handle)
    bindings = sys.modules.get("cuda.bindings.driver")  # a CUstream implies it is imported
    if bindings is not None and isinstance(stream, bindings.CUstream):
        return trust_stream_handle(int(stream))
    raise TypeError(
        f"expected a runtime.Stream, an int stream handle, an object with __cuda_stream__ or "
        f"cuda_stream, or None; got {type(stream).__name__}"
        + (f" (its cuda_stream raised {type(failed).__name__}: {failed})" if failed is not None else "")
    ) from failed


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
        self.device.context.activate()
        drv = driver()
        flags = (
            drv.CUstream_flags.CU_STREAM_NON_BLOCKING
            if non_blocking
            else drv.CUstream_flags.CU_STREAM_DEFAULT
        )
        self._handle = check("cuStreamCreate", drv.cuStreamCreate(int(flags)))
        self.handle = trust_stream_handle(int(self._handle))
        self.owned = True
        self.final_event: Any = None  # recorded at close: what arrays made on it wait for
        self._finalizer = weakref.finalize(self, _destroy_stream, self.device, self._handle)
        _owned_streams[self.handle] = weakref.ref(self)
        self.device.context.track(self)

    @classmethod
    def from_handle(cls, handle: Any, device: Device | None = None) -> Stream:
        """Wrap a stream someone else owns; :meth:`close` will not destroy it."""
        from .device import Device

        self = cls.__new__(cls)
        self.device = device if device is not None else Device(0)
        # The caller vouches for a plain int: this is how a foreign handle becomes launchable.
        self.handle = trust_stream_handle(handle) if isinstance(handle, int) else stream_handle(handle)
        self._handle = driver().CUstream(self.handle)
        self.owned = False
        self.final_event = None
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
        self.device.context.activate()
        check("cuStreamSynchronize", driver().cuStreamSynchronize(self._handle))

    def close(self) -> None:
        """Destroy the stream if this object created it; idempotent. Arrays made on it
        (:class:`runtime.DeviceArray`) are then freed after ``final_event``, an event
        recorded as the stream's last work."""
        handle = self.__dict__.pop("handle", None)  # first: no launch may pick up the handle once gone
        if self._finalizer is not None:
            if handle is not None and self._finalizer.alive and self.device.context.usable:
                self.final_event = _final_event(self, handle)
            self._finalizer()
            if handle is not None:
                _forget_stream_handle(handle)  # destroyed: the int no longer names a stream
                _owned_streams.pop(handle, None)

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else hex(self.handle)
        return f"<runtime.Stream {state}{'' if self.owned else ' (borrowed)'}>"


# The streams this runtime created, by handle, while they are open: an array made on one
# keeps it (and can still order its free after the stream's work once it is closed).
_owned_streams: dict[int, weakref.ref[Stream]] = {}


def owning_stream(handle: int) -> Stream | None:
    """The open :class:`Stream` this runtime created with ``handle``, or None."""
    ref = _owned_streams.get(handle)
    return ref() if ref is not None else None


def _final_event(stream: Stream, handle: int) -> Any:
    drv = driver()
    stream.device.context.activate()
    flags = int(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    event = check("cuEventCreate", drv.cuEventCreate(flags))
    check("cuEventRecord", drv.cuEventRecord(event, handle))
    # Not at exit: the arrays that wait for it are freed then too, after it would be
    # (finalizers left at exit run newest first); the process ending frees it anyway.
    weakref.finalize(stream, _destroy_event, stream.device, event).atexit = False
    return event


def _destroy_stream(device: Device, handle: Any) -> None:
    if device.context.usable:
        device.context.activate()
        check("cuStreamDestroy", driver().cuStreamDestroy(handle))


def same_stream(a: int, b: int) -> bool:
    # 0 and 1 both name the legacy default stream (CAI and DLPack spell it 1).
    return a == b or (a in (0, 1) and b in (0, 1))


def order_after(device: Device, consumer: int, producer: int | None) -> None:
    """Make work queued next on ``consumer`` wait for what is queued now on ``producer``
    (stream handles), as ``__cuda_array_interface__`` v3 asks of whoever consumes an
    array that names a stream. ``device``'s context is made current.

    - ``None`` (the producer asks for nothing) or the same stream: nothing to do.
    - ``consumer`` being captured into a graph: nothing is done. An event from outside
      the capture cannot join it, and a graph's replays are ordered by the stream the
      graph is launched on.
    - a handle the runtime knows (:func:`trust_stream_handle`; CuPy's streams are
      vouched for when read): an event recorded there, waited on by ``consumer``, no
      host synchronization.
    - any other handle: the driver would dereference it, and a made-up one would crash
      the process, so the host waits for the whole device instead (``cuCtxSynchronize``):
      slower, never wrong. Vouch for a producer's handle to get the event.
    """
    if producer is None or same_stream(consumer, producer):
        return
    drv = driver()
    device.context.activate()
    if int(check("cuStreamIsCapturing", drv.cuStreamIsCapturing(consumer))):  # 0: not capturing
        return
    if producer not in _known_streams:
        check("cuCtxSynchronize", drv.cuCtxSynchronize())
        return
    flags = int(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    event = check("cuEventCreate", drv.cuEventCreate(flags))
    try:
        check("cuEventRecord", drv.cuEventRecord(event, producer))
        check("cuStreamWaitEvent", drv.cuStreamWaitEvent(consumer, event, 0))
    finally:
        drv.cuEventDestroy(event)  # the wait keeps what it needs; a failure above is the one to report


class Event:
    """A CUDA event, for timing and ordering work between streams."""

    def __init__(self, device: Device | None = None, *, timing: bool = True) -> None:
        from .device import Device

        self.device = device if device is not None else Device(0)
        self.device.context.activate()
        drv = driver()
        flags = drv.CUevent_flags.CU_EVENT_DEFAULT if timing else drv.CUevent_flags.CU_EVENT_DISABLE_TIMING
        self._handle = check("cuEventCreate", drv.cuEventCreate(int(flags)))
        self._closed = False
        self._finalizer = weakref.finalize(self, _destroy_event, self.device, self._handle)
        self.device.context.track(self)

    def record(self, stream: Any = None) -> Event:
        """Record the event on ``stream`` (default: the default stream)."""
        self._check()
        self.device.context.activate()
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
    if device.context.usable:
        device.context.activate()
        check("cuEventDestroy", driver().cuEventDestroy(handle))
