"""Device memory: :class:`DeviceArray`, a typed, compact, row-major block of GPU memory."""

from __future__ import annotations

import math
import sys
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from ptxgen.dtypes import DType, resolve_dtype

from ._driver import check, driver
from .interop import KDL_CUDA, to_dlpack_capsule
from .pool import GraphMemory, Waits
from .stream import Stream, owning_stream, same_stream, stream_handle

if TYPE_CHECKING:
    import numpy as np

    from .device import Device

__all__ = ["DeviceArray", "empty_group", "launch_key", "numpy_dtype"]

# One key object per (device, dtype): a launcher recognises an open, non-empty array
# of the right device and dtype by one identity comparison with it.
_launch_keys: dict[tuple[Any, DType], tuple[Any, DType]] = {}


def launch_key(device: Device, dtype: DType) -> tuple[Device, DType]:
    """The :attr:`DeviceArray.launch_key` of open, non-empty arrays of ``dtype`` on ``device``."""
    key = (device, dtype)
    return _launch_keys.setdefault(key, key)


def check_byte_order(host: np.ndarray) -> None:
    """Refuse a big-endian host array: its bytes are copied as they are, so they would
    land swapped on the (little-endian) device."""
    if host.dtype.byteorder == ">":
        raise ValueError(
            f"host array dtype {host.dtype.str!r} is big-endian; convert it first with "
            f"array.astype(array.dtype.newbyteorder('<'))"
        )


def numpy_dtype(dtype: DType, bits: bool = False) -> np.dtype:
    """The numpy dtype for ``dtype``; ``bits=True`` gives the unsigned int of its width.

    bf16 and the fp8 formats need ml_dtypes (numpy has none of its own).
    """
    import numpy as np

    if bits:
        return np.dtype(f"uint{dtype.itemsize * 8}")
    try:
        return np.dtype(dtype.numpy_name)
    except TypeError:
        pass
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError(
            f"numpy has no {dtype.name}; install ml_dtypes for it, or pass bits=True "
            f"for the raw uint{dtype.itemsize * 8} bit patterns"
        ) from None
    return np.dtype(getattr(ml_dtypes, dtype.numpy_name))


def _shape_of(shape: Any) -> tuple[int, ...]:
    if type(shape) is tuple:  # what the ops hand: a tuple of ints, taken as it is
        for d in shape:
            if type(d) is not int or d < 0:
                break
        else:
            return shape
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a tuple of ints, not {shape!r}") from None
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            raise ValueError(f"shape {shape!r}: every extent must be an int >= 0")
    return dims


class DeviceArray:
    """GPU memory holding ``shape`` elements of ``dtype``, row-major and compact.

    Made by :meth:`Device.empty`, :meth:`Device.to_device` and the ops, from the
    device's stream-ordered pool (:mod:`runtime.pool`) on ``stream`` (a handle; 0, the
    legacy default stream, unless one was named). Freed exactly once, on that stream,
    without waiting for the device: on :meth:`close`, when the array is
    garbage-collected, or when its device closes. Arrays made together in one allocation
    (:meth:`Device.empty_group`, an op's results) free it with the last of them. Work on
    other streams that uses it is ordered by the caller, or named with
    :meth:`record_stream`. Offers
    ``__cuda_array_interface__`` and ``__dlpack__`` (bf16 and fp8 included), so torch,
    CuPy and Numba can view it without a copy.

    For launchers: ``address`` is the device address (0 once closed, where ``ptr``
    raises instead) and ``launch_key`` is ``launch_key(device, dtype)`` while the array
    is open and holds at least one element, else None.
    """

    address: int
    launch_key: tuple[Device, DType] | None

    def __init__(self, device: Device, shape: Any, dtype: Any, *, stream: Any = None) -> None:
        self._allocate(device, _shape_of(shape), resolve_dtype(dtype), stream_handle(stream))

    def _allocate(self, device: Device, dims: tuple[int, ...], dtype: DType, handle: int) -> None:
        """Make the array of checked values: its memory from the pool, then its fields."""
        nbytes = math.prod(dims) * dtype.itemsize
        owner = owning_stream(handle)
        describe = lambda: f"a {dims} {dtype.name} array"  # noqa: E731 (formatted only for an error)
        memory = _Allocation(device, nbytes, handle, owner, describe) if nbytes else None
        if memory is not None:  # before _fill tracks it: a close from then on must find it a holder
            memory.holders.add(id(self))
        self._fill(device, dims, dtype, nbytes, handle, owner, memory, memory.base if memory else 0)

    def _fill(
        self, device: Device, shape: tuple[int, ...], dtype: DType, nbytes: int, stream: int,
        owner: Stream | None, memory: _Allocation | None, ptr: int,
    ) -> None:  # fmt: skip
        self.device = device
        self.shape = shape
        self._dtype = dtype
        self.size = math.prod(shape)
        self.nbytes = nbytes
        self.stream = stream  # where it was allocated, and is freed
        # A runtime.Stream of the runtime's own is kept: closed before the array is freed,
        # it leaves an event that orders the free after its work.
        self._owner = owner
        self._memory = memory  # None: no element, or closed
        self._open = True
        self._ptr = ptr
        self.address = ptr
        self.launch_key = launch_key(device, dtype) if nbytes else None
        device.context.track(self)

    # --- what it is -------------------------------------------------------------------

    @property
    def dtype(self) -> str:
        """The canonical element type name, e.g. ``'f32'``."""
        return self._dtype.name

    @property
    def itemsize(self) -> int:
        return self._dtype.itemsize

    @property
    def ptr(self) -> int:
        """The device address; raises once the array is closed."""
        if not self._open:
            raise ValueError("this DeviceArray is closed")
        return self._ptr

    @property
    def closed(self) -> bool:
        return not self._open

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d DeviceArray")
        return self.shape[0]

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"ptr={self._ptr:#x}"
        return f"<runtime.DeviceArray shape={self.shape} dtype={self.dtype} {state}>"

    # --- copies -----------------------------------------------------------------------

    def _host_stream(self) -> int:
        """The stream a host copy or memset of this array is issued on, made current: the
        array's own, or, once its runtime.Stream is closed, the legacy default stream after
        the event that stream recorded as its last work."""
        self.device.context.activate()
        owner = self._owner
        if owner is not None and owner.closed:
            if owner.final_event is not None:
                check("cuEventSynchronize", driver().cuEventSynchronize(owner.final_event))
            return 0
        return self.stream

    def copy_from_host(self, array: Any) -> DeviceArray:
        """Copy a numpy array of the same size in bytes into this array (synchronous: on the
        array's stream, waited for)."""
        import numpy as np

        host = np.asarray(array, order="C")  # ascontiguousarray would make 0-d arrays 1-d
        check_byte_order(host)
        if host.nbytes != self.nbytes:
            raise ValueError(f"host array has {host.nbytes} bytes, this DeviceArray {self.nbytes}")
        if self.nbytes:
            stream, drv = self._host_stream(), driver()
            check("cuMemcpyHtoDAsync", drv.cuMemcpyHtoDAsync(self.ptr, host.ctypes.data, self.nbytes, stream))
            check("cuStreamSynchronize", drv.cuStreamSynchronize(stream))
        return self

    def to_numpy(self, bits: bool = False) -> np.ndarray:
        """Copy to a new numpy array (synchronous: on the array's stream, waited for; on the
        legacy default stream that also waits for the work of every blocking stream).

        ``bits=True`` returns the raw bit patterns as unsigned integers, which needs
        no ml_dtypes for bf16 and fp8.
        """
        import numpy as np

        out = np.empty(self.shape, dtype=numpy_dtype(self._dtype, bits))
        if self.nbytes:
            stream, drv = self._host_stream(), driver()
            check("cuMemcpyDtoHAsync", drv.cuMemcpyDtoHAsync(out.ctypes.data, self.ptr, self.nbytes, stream))
            check("cuStreamSynchronize", drv.cuStreamSynchronize(stream))
        return out

    def fill_bytes(self, value: int) -> DeviceArray:
        """Set every byte to ``value`` (0..255), e.g. to poison an output before a test."""
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
            raise ValueError(f"fill_bytes takes a byte value 0..255, not {value!r}")
        if self.nbytes:
            stream, drv = self._host_stream(), driver()
            check("cuMemsetD8Async", drv.cuMemsetD8Async(self.ptr, value, self.nbytes, stream))
            check("cuStreamSynchronize", drv.cuStreamSynchronize(stream))
        return self

    # --- interop ----------------------------------------------------------------------

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        typestr = self._dtype.typestr or f"|V{self.itemsize}"
        return {
            "shape": self.shape,
            "typestr": typestr,
            "data": (self.ptr, False),
            "strides": None,
            "version": 3,
            # an array made on a stream of its own names it, so a consumer orders after it
            "stream": self._interface_stream(),
        }

    def _interface_stream(self) -> int | None:
        """CAI's ``stream``: the array's own, where it is not the legacy default stream and
        is still open (a closed one's handle may name another stream by now: its last
        work is waited for instead, and nothing is named)."""
        owner = self._owner
        if owner is not None and owner.closed:
            self._host_stream()
            return None
        return self.stream if self.stream not in (0, 1) else None

    def __dlpack_device__(self) -> tuple[int, int]:
        return (KDL_CUDA, self.device.ordinal)

    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """A DLPack capsule viewing this memory (legacy ``dltensor``, no copy).

        The runtime does not track which streams wrote the array, so when the
        consumer names a stream it waits for the whole device to be idle first.
        """
        if copy:
            raise BufferError("DeviceArray.__dlpack__ does not copy; pass copy=None or False")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"DeviceArray lives on {self.__dlpack_device__()}, not {dl_device}")
        if stream is not None and stream != -1:
            self.device.synchronize()
        return to_dlpack_capsule(self, self.ptr, self.shape, self._dtype, self.device.ordinal)

    # --- lifetime ---------------------------------------------------------------------

    def record_stream(self, stream: Any) -> None:
        """Say that work on ``stream`` (not the array's own) uses this array: its memory
        is reused only after that work, as well as its own stream's, is done (PyTorch's
        ``Tensor.record_stream``). Work on the array's own stream needs no such word."""
        handle = stream_handle(stream)
        if self.closed:
            raise ValueError("this DeviceArray is closed")
        memory = self._memory
        if memory is not None and not same_stream(handle, self.stream):
            memory.record(handle)

    def close(self) -> None:
        """Give the memory back now; idempotent. Views handed to other libraries become
        invalid. An array made in one allocation with others (:meth:`Device.empty_group`,
        an op's results) gives it back with the last of them to be closed or collected."""
        self.launch_key = None  # first: no launch may pick up the address once it is freed
        self.address = 0
        memory, self._memory = self._memory, None
        self._open = False
        if memory is not None:
            # Idempotent without a lock: this array leaves the set once however often it is
            # closed (two threads, a finalizer inside a close), and the free is a
            # finalizer, which runs once whoever calls it first.
            memory.holders.discard(id(self))
            if not memory.holders:
                memory.free()

    def __copy__(self) -> NoReturn:
        # A copy would be a second owner of the same memory that never learns it was freed.
        raise TypeError(
            "a DeviceArray owns its device memory and is not copied by copy.copy or "
            "copy.deepcopy: pass the array itself, or make another with Device.empty(shape, "
            "dtype) and copy into it"
        )

    def __deepcopy__(self, memo: dict[int, Any]) -> NoReturn:
        self.__copy__()

    def __enter__(self) -> DeviceArray:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def empty_group(
    device: Device, shapes: Sequence[Any], dtype: Any, *, stream: Any = None
) -> list[DeviceArray]:
    """One array per shape (see :meth:`Device.empty_group`), all in one allocation.
    Every shape is checked before anything is allocated."""
    # A list or a tuple (what an op hands) without the abstract Sequence check's cost.
    if type(shapes) not in (list, tuple) and (
        not isinstance(shapes, Sequence) or isinstance(shapes, (str, bytes))
    ):
        raise TypeError(f"empty_group takes a list of shapes, one per array, not {shapes!r}")
    dims = []
    for i, shape in enumerate(shapes):
        if not isinstance(shape, (tuple, list)):
            raise TypeError(
                f"empty_group: shapes[{i}] is {shape!r}; each shape is a tuple of ints, one per "
                "array (e.g. [(64, 32), (64, 16)]; for one array, Device.empty)"
            )
        dims.append(_shape_of(shape))
    dtype, handle = resolve_dtype(dtype), stream_handle(stream)
    if len(dims) == 1:  # one array (a concat's result): the allocation Device.empty makes
        array = DeviceArray.__new__(DeviceArray)
        array._allocate(device, dims[0], dtype, handle)
        return [array]
    itemsize = dtype.itemsize
    sizes = [math.prod(d) * itemsize for d in dims]
    starts, total = [], 0
    for nbytes in sizes:
        starts.append(total)
        total += -(-nbytes // _ALIGNMENT) * _ALIGNMENT
    owner = owning_stream(handle)
    describe = lambda: f"{len(dims)} {dtype.name} arrays"  # noqa: E731
    memory = _Allocation(device, total, handle, owner, describe) if any(sizes) else None
    arrays = [DeviceArray.__new__(DeviceArray) for _ in dims]
    if memory is not None:
        # Every holder before the first array is tracked: a Device.close() closing that one
        # while the rest are being made must not find the group empty and free it.
        memory.holders.update(id(a) for a, nbytes in zip(arrays, sizes) if nbytes)
    for a, d, nbytes, start in zip(arrays, dims, sizes, starts):
        held = memory if nbytes else None
        a._fill(device, d, dtype, nbytes, handle, owner, held, held.base + start if held else 0)
    return arrays


# Where each array of a shared allocation starts: 256-byte aligned, as cuMemAlloc's are.
_ALIGNMENT = 256


class _Allocation:
    """One allocation from a device's pool, held by the arrays made in it (one array, or
    an op's results): given back on its stream, after the streams recorded for any of
    them, when the last is closed (``holders``: the ids of the arrays not closed yet), or
    when all of them are collected (its finalizer, which runs once whichever comes
    first)."""

    __slots__ = ("__weakref__", "base", "free", "holders", "other_streams")

    def __init__(
        self, device: Device, nbytes: int, stream: int, owner: Stream | None, what: Callable[[], str]
    ) -> None:
        self.base, captured, memory = device.memory_pool.allocate(nbytes, stream, what)
        self.holders: set[int] = set()  # filled by the arrays made in it
        # record_stream's (handle, runtime.Stream or None): the free waits for them
        self.other_streams: list[tuple[int, Any]] = []
        self.free = weakref.finalize(
            self, _free, device, self.base, stream, owner, captured, memory, self.other_streams
        )

    def record(self, handle: int) -> None:
        if all(h != handle for h, _ in self.other_streams):
            # a runtime.Stream is kept: closed before the free, it is waited for by its last event
            self.other_streams.append((handle, owning_stream(handle)))


def _free(
    device: Device,
    ptr: int,
    stream: int,
    owner: Stream | None,
    captured: bool,
    memory: GraphMemory | None,
    other_streams: list[tuple[int, Any]],
) -> None:
    """Give an array's memory back on its stream, after the streams it was recorded on.
    A finalizer: it never raises (a failure is reported, as Python reports one there)."""
    if not ptr or not device.context.usable:
        return
    try:
        device.context.activate()
        device.memory_pool.free(ptr, Waits(stream, owner, tuple(other_streams)), captured, memory)
    except Exception as err:  # the interpreter would print it anyway, with a traceback
        print(f"runtime: freeing a DeviceArray of device {device.ordinal} failed: {err}", file=sys.stderr)
