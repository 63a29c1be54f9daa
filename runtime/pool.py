"""Stream-ordered device memory: one pool per device, as the driver offers it.

Every :class:`runtime.DeviceArray` takes its memory from its device's
:class:`MemoryPool`: ``cuMemAllocFromPoolAsync`` on the array's stream when it is made,
``cuMemFreeAsync`` on the same stream when it is dropped. Neither waits for the device.
The pool's release threshold is the largest there is, so memory freed by one array is
kept for the next instead of going back to the driver at every synchronisation (the
driver's default of 0 makes an allocation after a synchronise as slow as ``cuMemAlloc``,
about 70 µs on an H200). ``trim()`` gives unused memory back (for another library, say).

The order is the stream's, as in every stream-ordered allocator (PyTorch's caching
allocator, cuda.core, RMM): an array is ready for work queued on its stream after it
was made, and its memory is reused only after what its stream had queued before the
free. Work on another stream that uses the array must be ordered too: make that
stream wait (an event), or call :meth:`runtime.DeviceArray.record_stream` so the free
waits for it.

Under graph capture: an array made on a capturing stream becomes an allocation node
of the graph, and freeing it in the same capture a free node. Kept past the capture,
its memory is the graph's (:class:`GraphMemory`): given back once the
:class:`runtime.Graph` and every array made in its capture are gone, after the graph's
last launch. (Memory made while another library captures is that library's graph's,
and stays until the process ends.) Allocations and frees on other streams are made in
relaxed capture mode, so that a global-mode capture elsewhere (torch's default) does
not see them as unsafe calls and end invalid. A free that would join or break a
capture (one on a capturing stream, or waiting for one, or on the legacy default stream
while a blocking stream captures) is kept and made once no capture stands in its way:
at the pool's next allocation, when a runtime.Graph's capture ends, or when its device
closes.

A device without memory pools (``CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED`` 0) gets
``cuMemAlloc`` and ``cuMemFree`` instead: correct, and as slow as they are.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

from ._driver import check, driver, error_strings, raise_error
from .errors import CudaError
from .stream import order_after

if TYPE_CHECKING:
    from .device import Device

__all__ = [
    "DeviceOutOfMemory",
    "GraphMemory",
    "MemoryPool",
    "Waits",
    "relax",
    "relaxed_capture_mode",
    "restore",
]

_KEEP_EVERYTHING = (1 << 64) - 1  # CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: never hand memory back unasked


class DeviceOutOfMemory(CudaError, MemoryError):
    """An allocation the device could not satisfy, even after the pool's pending frees
    completed. Raised before anything was launched or written."""


def _gib(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):.2f} GiB" if nbytes >= 1 << 30 else f"{nbytes / (1 << 20):.1f} MiB"


class Waits(NamedTuple):
    """Where a free is made and what it waits for, as the array knew them when it was
    dropped. Resolved when the free is made: a runtime.Stream closed by then is waited
    for by the event it recorded as its last work, on the legacy default stream."""

    stream: int
    owner: Any = None  # the runtime.Stream of ``stream``, where the runtime made it
    recorded: tuple[tuple[int, Any], ...] = ()  # (handle, runtime.Stream or None) per recorded stream

    def resolve(self) -> tuple[int, list[int], list[Any]]:
        """``(stream, streams to wait for, events to wait for)``."""
        stream, streams, events = self.stream, [], []
        if self.owner is not None and self.owner.closed:
            stream = 0
            if self.owner.final_event is not None:
                events.append(self.owner.final_event)
        for handle, owner in self.recorded:
            if owner is not None and owner.closed:
                if owner.final_event is not None:
                    events.append(owner.final_event)
            elif handle != stream:
                streams.append(handle)
        return stream, streams, events


class GraphMemory:
    """What one :class:`runtime.Graph`'s capture allocated from the pool and did not free
    in it. The graph and every array made in the capture hold it; once all are gone it
    gives the memory back, ordered after the graph's last launch (a graph never launched
    allocated nothing). Each replay frees and makes it again at the same addresses (the
    graph is instantiated to free on launch), so the arrays see every replay's results."""

    def __init__(self, pool: MemoryPool) -> None:
        self.addresses: list[int] = []
        self.last_launch: list[Waits | None] = [None]  # set by the graph at each launch
        weakref.finalize(self, pool.free_graph_memory, self.addresses, self.last_launch)


class MemoryPool:
    """The stream-ordered pool of one :class:`runtime.Device` (``device.memory_pool``)."""

    def __init__(self, device: Device) -> None:
        drv = driver()
        self.device = device
        self._lock = threading.RLock()  # a finalizer run by the GC may free while the pool is busy
        self._deferred: list[tuple[int, Waits]] = []  # the frees a capture held back
        self._captures: dict[int, GraphMemory] = {}  # stream -> the runtime.Graph capturing it
        # the driver's enum values, read once: every allocation and free compares with them
        self._not_capturing = drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE
        self._out_of_memory = drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY
        device.context.activate()
        supported = check(
            "cuDeviceGetAttribute",
            drv.cuDeviceGetAttribute(
                drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, device.context.device
            ),
        )
        self.stream_ordered = bool(supported)
        self._pool: Any = None
        if self.stream_ordered:
            props = drv.CUmemPoolProps()
            props.allocType = drv.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
            props.handleTypes = drv.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
            props.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            props.location.id = device.ordinal
            self._pool = check("cuMemPoolCreate", drv.cuMemPoolCreate(props))
            threshold = drv.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
            check(
                "cuMemPoolSetAttribute",
                drv.cuMemPoolSetAttribute(self._pool, threshold, drv.cuuint64_t(_KEEP_EVERYTHING)),
            )

    # --- captures -------------------------------------------------------------------------

    def begin_capture(self, stream: int) -> GraphMemory:
        """A runtime.Graph starts capturing ``stream``: what is allocated there until
        :meth:`end_capture` is its memory (returned; the graph keeps it)."""
        memory = GraphMemory(self)
        with self._lock:
            self._captures[stream] = memory
        return memory

    def end_capture(self, stream: int) -> None:
        with self._lock:
            self._captures.pop(stream, None)
        self.release_deferred()  # what the capture held back can go now

    # --- allocation -----------------------------------------------------------------------

    def allocate(
        self, nbytes: int, stream: int, what: str | Callable[[], str] = ""
    ) -> tuple[int, bool, GraphMemory | None]:
        """``(address, captured, memory)``: ``nbytes`` bytes (> 0) ordered on ``stream`` (a
        handle); whether the stream is being captured (the memory is then an allocation
        node of its graph); and, for a runtime.Graph's capture, that graph's memory, which
        the array must hold. ``what`` names the array in the out-of-memory error (or makes
        that name when called: an array's description is formatted only then)."""
        drv = driver()
        self.device.context.activate()
        if self._deferred:
            self.release_deferred()
        captured, memory = False, None
        if self.stream_ordered:
            # The legacy default stream while a blocking stream captures: an allocation
            # there would join that capture, or break it. Refused, in the driver's words.
            err, status = drv.cuStreamIsCapturing(stream)
            if err:
                raise_error("cuStreamIsCapturing", err)
            captured = status != self._not_capturing
        err, address = self._try(drv, nbytes, stream, captured)
        if err == self._out_of_memory and not captured:
            # Frees queued on the stream hold memory the pool has back once they run:
            # wait for them (only here, where the alternative is to fail), then retry. The
            # stream alone: a context-wide wait would break any capture under way.
            with relaxed_capture_mode(drv):
                check("cuStreamSynchronize", drv.cuStreamSynchronize(stream))
            err, address = self._try(drv, nbytes, stream, captured)
        if err:
            self._refuse(drv, err, nbytes, what() if callable(what) else what)
        if captured:
            memory = self._captures.get(stream)  # None: another library's capture
            if memory is not None:
                memory.addresses.append(int(address))
        return int(address), captured, memory

    def _refuse(self, drv: Any, err: Any, nbytes: int, what: str) -> NoReturn:
        """Raise for a failed allocation: out of memory with the size and what is free."""
        call = "cuMemAllocFromPoolAsync" if self.stream_ordered else "cuMemAlloc"
        if err != self._out_of_memory:
            raise_error(call, err)
        free, total = check("cuMemGetInfo", drv.cuMemGetInfo())
        name, _ = error_strings(drv, err)
        raise DeviceOutOfMemory(
            call,
            int(err),
            name,
            f"out of device memory: cannot allocate {nbytes:,} bytes ({_gib(nbytes)})"
            + (f" for {what}" if what else "")
            + f" on {self.device.name} (device {self.device.ordinal}): {_gib(int(free))} of "
            f"{_gib(int(total))} free; drop arrays you no longer need, or pass out=",
        )

    def _try(self, drv: Any, nbytes: int, stream: int, captured: bool) -> tuple[Any, Any]:
        if not self.stream_ordered:
            return drv.cuMemAlloc(nbytes)
        if captured:  # an allocation node of the capture
            return drv.cuMemAllocFromPoolAsync(nbytes, self._pool, stream)
        old = relax(drv)
        try:
            return drv.cuMemAllocFromPoolAsync(nbytes, self._pool, stream)
        finally:
            restore(drv, old)

    # --- frees ------------------------------------------------------------------------------

    def free(
        self, address: int, waits: Waits, captured: bool = False, memory: GraphMemory | None = None
    ) -> None:
        """Give ``address`` back on ``waits.stream`` after what ``waits`` names. Memory a
        capture allocated (``captured``) is freed here only while that same capture goes
        on (a free node of its graph); past it, it is its graph's (``memory``, given back
        when the graph and its arrays are gone), or, made in another library's capture,
        that graph's. A free a capture forbids is kept for later (see the module's
        text). The device's context must be current."""
        drv = driver()
        if not self.stream_ordered:
            # cuMemFree does not wait for the kernels that may still use the memory.
            check("cuCtxSynchronize", drv.cuCtxSynchronize())
            check("cuMemFree", drv.cuMemFree(address))
            return
        if captured:
            if memory is not None and self._captures.get(waits.stream) is memory:
                check("cuMemFreeAsync", drv.cuMemFreeAsync(address, waits.stream))  # a free node
                memory.addresses.remove(address)
            return
        self._free_or_hold(drv, address, waits)

    def _free_or_hold(self, drv: Any, address: int, waits: Waits) -> None:
        stream, streams, events = waits.resolve()
        for s in (stream, *streams):
            if _capturing(drv, s, self._not_capturing):  # it would join or break a capture
                with self._lock:
                    self._deferred.append((address, waits))
                return
        old = relax(drv)
        try:
            for other in streams:
                order_after(self.device, stream, other)
            for event in events:
                check("cuStreamWaitEvent", drv.cuStreamWaitEvent(stream, event, 0))
            check("cuMemFreeAsync", drv.cuMemFreeAsync(address, stream))
        finally:
            restore(drv, old)

    def release_deferred(self) -> None:
        """Make the frees a capture held back, where none stands in their way now. Never
        raises: a free that fails is reported on stderr, as a finalizer's would be, and
        the others are still made."""
        drv = driver()
        with self._lock:
            waiting, self._deferred = self._deferred, []
        for address, waits in waiting:
            try:
                self._free_or_hold(drv, address, waits)
            except Exception as err:  # reported, not raised into an unrelated call
                ordinal = self.device.ordinal
                print(f"runtime: a held-back free on device {ordinal} failed: {err}", file=sys.stderr)

    def free_graph_memory(self, addresses: list[int], last_launch: list[Waits | None]) -> None:
        """A :class:`GraphMemory`'s finalizer: give back what its graph allocated, after its
        last launch (never launched: nothing was allocated). Never raises."""
        waits = last_launch[0]
        if waits is None or not addresses or not self.device.context.usable or self._pool is None:
            return
        try:
            self.device.context.activate()
            drv = driver()
            for address in addresses:
                self._free_or_hold(drv, address, waits)
        except Exception as err:
            ordinal = self.device.ordinal
            print(f"runtime: freeing a graph's memory on device {ordinal} failed: {err}", file=sys.stderr)

    @property
    def deferred(self) -> int:
        """How many frees wait for a capture to end."""
        return len(self._deferred)

    # --- what it holds ------------------------------------------------------------------

    def _attribute(self, name: str) -> int:
        drv = driver()
        self.device.context.activate()
        attr = getattr(drv.CUmemPool_attribute, name)
        return int(check("cuMemPoolGetAttribute", drv.cuMemPoolGetAttribute(self._pool, attr)))

    @property
    def reserved_bytes(self) -> int:
        """Device memory the pool holds, in use or kept for reuse (0 without pools)."""
        return self._attribute("CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT") if self.stream_ordered else 0

    @property
    def used_bytes(self) -> int:
        """Device memory of the pool's live allocations (0 without pools)."""
        return self._attribute("CU_MEMPOOL_ATTR_USED_MEM_CURRENT") if self.stream_ordered else 0

    def trim(self, keep: int = 0) -> None:
        """Hand the driver back the pool's unused memory beyond ``keep`` bytes (memory
        whose frees have completed), for other allocators to use."""
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise ValueError(f"trim keeps a byte count >= 0, not {keep!r}")
        if self.stream_ordered:
            self.device.context.activate()
            check("cuMemPoolTrimTo", driver().cuMemPoolTrimTo(self._pool, keep))

    def close(self) -> None:
        """Destroy the pool (its device closes). Memory still in flight is released by the
        driver once the frees queued for it have run."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            drv = driver()
            if self._deferred:  # the device is closing: no capture outlives it
                drv.cuCtxSynchronize()  # cuMemFree does not wait for kernels still using it
                for address, _ in self._deferred:
                    drv.cuMemFree(address)
            self._deferred = []
            check("cuMemPoolDestroy", drv.cuMemPoolDestroy(pool))

    def __repr__(self) -> str:
        kind = "stream-ordered" if self.stream_ordered else "cuMemAlloc"
        return f"<runtime.MemoryPool of device {self.device.ordinal} ({kind})>"


def relax(drv: Any) -> Any:
    """Put the calling thread in relaxed capture mode; the mode it was in is returned, for
    :func:`restore`. While another stream captures in global mode (torch's default), any
    stream-ordered allocation or free on a stream outside that capture is refused as
    unsafe and invalidates the capture; in relaxed mode the thread may make them (they
    touch no capturing stream). A pair of calls, not a context manager, on the paths
    every allocation and free takes: ``old = relax(drv)``, ``try: ... finally:
    restore(drv, old)``."""
    return check(
        "cuThreadExchangeStreamCaptureMode",
        drv.cuThreadExchangeStreamCaptureMode(drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED),
    )


def restore(drv: Any, old: Any) -> None:
    """Put the calling thread back in the capture mode :func:`relax` returned."""
    drv.cuThreadExchangeStreamCaptureMode(old)


class relaxed_capture_mode:  # lower case: used as a function, ``with relaxed_capture_mode(drv):``
    """:func:`relax` and :func:`restore` around a block, for the paths taken seldom."""

    __slots__ = ("_drv", "_old")

    def __init__(self, drv: Any) -> None:
        self._drv = drv

    def __enter__(self) -> None:
        self._old = relax(self._drv)

    def __exit__(self, *exc: object) -> None:
        restore(self._drv, self._old)


def _capturing(drv: Any, stream: int, not_capturing: Any) -> bool:
    """Whether a stream-ordered call on ``stream`` must wait: the stream is being
    captured, or it is the legacy default stream while another stream captures in
    global mode (the driver then answers with an error rather than a status)."""
    err, status = drv.cuStreamIsCapturing(stream)
    return bool(err) or status != not_capturing
