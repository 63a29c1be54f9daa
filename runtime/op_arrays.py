"""How the ops read their array arguments, and the checks on them.

:func:`recognise` reads any array an op is given (a :class:`runtime.DeviceArray`, a
torch tensor or CuPy array through its own attributes, anything else through
``__cuda_array_interface__`` or DLPack) into an :class:`OpArray`, or raises naming the
argument; the checks after it (alignment, an output's shape, dtype and writability, one
memory order, overlap, one device) raise naming the argument too, before anything is
allocated or launched. The ops' path (:mod:`runtime.ops`) runs them.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ptxgen.dtypes import DTYPES, DType

from .arrays import allocation_of, cupy_current_stream, dtype_of_cupy, dtype_of_torch, torch_dtype_table
from .device import Device, device_of
from .interop import describe
from .memory import DeviceArray
from .outputs import array_kind
from .strided_ops import Strided, row_major_strides
from .strides import in_order, memory_order


class OpArray:
    """What an op needs to know of one array argument (a slotted class: an op reads
    two or more of these per call, and a frozen dataclass costs several times more)."""

    __slots__ = (
        "_nbytes", "device", "dtype", "obj", "order", "ordinal", "ptr", "readonly", "shape", "stream",
        "strides", "what",
    )  # fmt: skip

    def __init__(
        self,
        obj: Any,
        shape: tuple[int, ...],
        dtype: DType,
        ptr: int,
        readonly: bool,
        device: Device | None,  # known for a DeviceArray
        ordinal: int | None,  # known for a DeviceArray, torch and DLPack; CAI does not say
        nbytes: int | None,  # None: its elements' bytes, worked out where asked (rarely)
        stream: int | None = None,  # CAI v3: the producer's stream, to be ordered after
        strides: tuple[int, ...] | None = None,  # in elements, where not row-major
        order: tuple[int, ...] | None = None,  # its dims in memory order, where not row-major
        what: str = "",  # the argument's name in messages: "dy", "out[1]", "xs[0]"
    ) -> None:
        # one assignment a field: a multiple assignment would build and unpack a tuple
        self.obj = obj
        self.shape = shape
        self.dtype = dtype
        self.ptr = ptr
        self.readonly = readonly
        self.device = device
        self.ordinal = ordinal
        self._nbytes = nbytes
        self.stream = stream
        self.strides = strides
        self.order = order
        self.what = what

    @property
    def nbytes(self) -> int:
        """The bytes it spans: its elements' (a pitched array's rows and the gaps between
        them, once :func:`wide_pitch` has read it as row-major). Worked out where asked:
        a call of a known route asks only for a misaligned address."""
        n = self._nbytes
        return n if n is not None else math.prod(self.shape) * self.dtype.itemsize

    @nbytes.setter
    def nbytes(self, value: int) -> None:
        self._nbytes = value


_torch_dtypes = torch_dtype_table()  # torch dtype -> ours (None: none), filled by dtype_of_torch
_binding = threading.Lock()


class FirstSeen:
    """An array library's array class (``torch.Tensor``, ``cupy.ndarray``), remembered
    when the ops first read one of its arrays. What waits for the library (runtime.ops
    binds its C lane to it, which this module, imported by ops, cannot name) registers
    with :meth:`when_seen` and is called with the class then, once: the first callers of
    two threads bind it once."""

    __slots__ = ("_waiting", "array_class")

    def __init__(self, array_class: type | None = None) -> None:
        self.array_class = array_class  # read on every call: a plain attribute
        self._waiting: list[Callable[[type], None]] = []

    def when_seen(self, callback: Callable[[type], None]) -> None:
        """Calls ``callback(array_class)`` when the class is first seen (now, where it has been)."""
        with _binding:
            self._waiting.append(callback)
            if self.array_class is not None:
                callback(self.array_class)

    def seen(self, array_class: type) -> type:
        """Remembers ``array_class``, telling what waits the first time (and again for
        another class: a test's stand-in); returns the class remembered."""
        with _binding:
            if self.array_class is not array_class:
                for callback in self._waiting:
                    callback(array_class)
                self.array_class = array_class
            return self.array_class


TORCH = FirstSeen()  # torch.Tensor, once torch has been imported (torch_tensor_class)
CUPY = FirstSeen()  # cupy.ndarray, once a CuPy array has been read


def torch_tensor_class() -> type | None:
    """``torch.Tensor`` once torch has been imported (by anyone), remembered; else None.
    The one way every path asks: a module that bound the class at import time would keep
    the None it saw before torch came."""
    tensor = TORCH.array_class
    if tensor is not None:
        return tensor
    # A torch another thread is still importing is in sys.modules without its Tensor yet:
    # not torch until it has one (and not remembered).
    tensor = getattr(sys.modules.get("torch"), "Tensor", None)
    if not isinstance(tensor, type):
        return None
    return TORCH.seen(tensor)


def _torch_array(value: Any, what: str, written: bool) -> OpArray | None:
    """A CUDA tensor read through torch's own attributes (no interface dict built: torch's
    own exports cost tens of µs), or None when it is anything else: the general path then
    accepts it or says why not. Strides that are not dense in any order are kept (order
    None): a pitched wide array, or the not-dense error of :func:`recognise`. Whether
    it may be written is read only where it is ``written`` (an output), as the C lane does."""
    try:
        torch_dtype = value.dtype
        dtype = _torch_dtypes.get(torch_dtype) or dtype_of_torch(torch_dtype)  # a miss: looked up once
        if dtype is None or not value.is_cuda:
            return None
        strides = order = None
        if not value.is_contiguous():  # dense in another order (channels_last), or pitched, or not dense
            strides = tuple(value.stride())
            order = memory_order(value.shape, strides)
        # torch.Size is a tuple: kept as it is. A tensor that requires grad counts as
        # read-only: it may be read, but an op writing it would do so behind autograd.
        return OpArray(
            value, value.shape, dtype, value.data_ptr(), written and value.requires_grad, None,
            value.get_device(), None, None, strides, order, what,
        )  # fmt: skip
    except Exception:  # a meta, fake or sparse tensor: the general path names the problem
        return None


def array_key(
    cls: type, shape: tuple[int, ...], strides: tuple[int, ...] | None, dtype: DType, readonly: bool
) -> tuple[Any, ...]:
    """One array's part of a route's key (:func:`runtime.op_routes.route_key`): its class,
    shape, strides (None: row-major), dtype and whether it may not be written. Both ways a
    call is keyed make it here, so that they find the same route: route_key from an
    :class:`OpArray`, :func:`known_facts` from the plain values it reads."""
    return (cls, shape, strides, dtype, readonly)


def known_facts(
    values: Sequence[Any], first_output: int
) -> tuple[list[tuple[Any, ...]], list[int], int, Device | None] | None:
    """What a call of a known kind needs of its arrays (outputs from ``first_output``),
    as plain values: ``(facts, ptrs, ordinal, device)``, each array's part of the route's
    key (:func:`array_key`) and address, the GPU they share and the device a DeviceArray
    names (None where none does). Only row-major torch tensors of a dtype we have and
    open, non-empty DeviceArrays are read here, as the C lane reads them, and only where
    they name one device (each DeviceArray the same object, as :func:`device_for` asks);
    for anything else None, and the call goes the whole way (:func:`recognise`), which
    accepts it or says why not."""
    facts, ptrs = [], []
    ordinal = device = None
    tensor = TORCH.array_class
    for i, value in enumerate(values):
        cls = value.__class__
        if cls is DeviceArray:
            key = value.launch_key  # (device, dtype) while open and not empty
            if key is None:
                return None
            own_device, dtype = key
            if device is not None and own_device is not device:
                return None
            device = own_device
            own_ordinal = own_device.ordinal
            facts.append(array_key(cls, value.shape, None, dtype, False))
            ptrs.append(value.address)
        elif cls is tensor:
            try:
                dtype = _torch_dtypes.get(value.dtype)
                if dtype is None or not value.is_cuda or not value.is_contiguous():
                    return None
                readonly = i >= first_output and value.requires_grad  # as _torch_array reads an output
                facts.append(array_key(cls, value.shape, None, dtype, readonly))
                ptrs.append(value.data_ptr())
                own_ordinal = value.get_device()
            except Exception:  # a meta or fake tensor: the whole way says what it is
                return None
        else:
            return None
        if i == 0:
            ordinal = own_ordinal
        elif own_ordinal != ordinal:
            return None
    return facts, ptrs, ordinal, device


def _cupy_array(value: Any, what: str) -> OpArray | None:
    """A CuPy array read through CuPy's own attributes, as Function.launch reads one:
    its device from its memory (no driver query for where its address lives), and the
    stream its ``__cuda_array_interface__`` would name (CuPy's current one; its null
    stream is the legacy default). Its dtype by :func:`runtime.arrays.dtype_of_cupy`,
    which knows bf16 and fp8 by ml_dtypes' names. None for what this does not take (a
    dtype of no such name, or strides that are not dense): the interface, or DLPack,
    then reads it or says why not."""
    try:
        dtype = dtype_of_cupy(value.dtype)
        if dtype is None:
            return None
        shape = value.shape
        strides = order = None
        if not value.flags.c_contiguous and value.size:
            itemsize = dtype.itemsize
            if any(s % itemsize for s in value.strides):
                return None
            strides = tuple(s // itemsize for s in value.strides)
            order = memory_order(shape, strides)
            if order is None:
                return None
        memory = value.data
        return OpArray(
            value, shape, dtype, int(memory.ptr), False, None, memory.device_id, None,
            cupy_current_stream(), strides, order, what,
        )  # fmt: skip
    except Exception:  # an older CuPy, a subclass that behaves otherwise: the interface decides
        return None


def recognise(op: str, what: str, value: Any, stream: int, written: bool = True) -> OpArray:
    """Read an array argument, or raise naming it and what is accepted. Arrays of any
    strides are read: where not row-major, ``strides`` holds them and ``order`` their
    memory order where they are dense in one (None otherwise). An input (not ``written``)
    is not asked whether it may be written."""
    cls = value.__class__
    if cls is DeviceArray:
        key = value.launch_key  # (device, dtype) while open and not empty
        if key is not None:
            device, dtype = key
            return OpArray(
                value, value.shape, dtype, value.address, False, device, device.ordinal, None,
                None, None, None, what,
            )  # fmt: skip
        if value.closed:
            raise ValueError(f"{op}: {what} is a closed DeviceArray")
        return OpArray(
            value, value.shape, DTYPES[value.dtype], 0, False, value.device, value.device.ordinal, 0,
            what=what,
        )  # fmt: skip
    tensor = TORCH.array_class or torch_tensor_class()
    if tensor is not None and (cls is tensor or isinstance(value, tensor)):  # nn.Parameter too
        found = _torch_array(value, what, written)
        if found is not None:
            return found
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(value, cupy.ndarray):
        found = _cupy_array(value, what)
        if found is not None:
            if CUPY.array_class is not cupy.ndarray:
                CUPY.seen(cupy.ndarray)
            return found
    if value is None or isinstance(value, (int, float, str, bytes, list, tuple)):
        raise TypeError(
            f"{op}: {what} must be a device array (runtime.DeviceArray, or an object with "
            f"__cuda_array_interface__ or __dlpack__ such as a CUDA torch tensor or CuPy array), "
            f"not {type(value).__name__}"
        )
    try:
        info = describe(value, stream)
    except TypeError as err:
        raise TypeError(f"{op}: {what}: {err}") from None
    except Exception as err:  # the exporter's own error (BufferError, a malformed interface dict)
        raise TypeError(
            f"{op}: {what}: the {type(value).__name__} could not describe its memory "
            f"({type(err).__name__}: {err})"
        ) from None
    if info.dtype is None:
        raise TypeError(
            f"{op}: {what} has element type {info.dtype_text}, which is not one of {', '.join(DTYPES)}"
        )
    shape = tuple(info.shape)
    order = None
    if not info.contiguous:
        if info.strides is None:  # byte strides that are not whole elements
            raise ValueError(
                f"{op}: {what} (shape {shape}) has strides that are not a whole number of its "
                f"{info.dtype.itemsize}-byte elements; pass a copy (cupy.ascontiguousarray, say)"
            )
        order = memory_order(shape, info.strides)
    nbytes = math.prod(shape) * info.dtype.itemsize
    return OpArray(
        value, shape, info.dtype, info.ptr, info.readonly, None, info.device_id, nbytes, info.stream,
        info.strides if not info.contiguous else None, order, what,
    )  # fmt: skip


def is_sequence(value: Any) -> bool:
    """Whether ``value`` is taken as a sequence of arrays (a list or tuple, or another
    sequence that is not text)."""
    if value.__class__ is list or value.__class__ is tuple:
        return True
    return value is not None and not isinstance(value, (str, bytes)) and isinstance(value, Sequence)


def _row_pitch(shape: tuple[int, ...], strides: tuple[int, ...], axis: int) -> int | None:
    """The elements from one row to the next of an array whose dims from ``axis`` on are
    dense row-major and whose dims before it step as the rows of one row-major array of
    that pitch; 0 for a single row; None for any other strides."""
    inner = 1
    for i in reversed(range(axis, len(shape))):
        if shape[i] != 1 and strides[i] != inner:
            return None
        inner *= shape[i]
    pitch = step = None  # the first outer dim above extent 1 sets the pitch; the rest follow it
    for i in reversed(range(axis)):
        if shape[i] == 1:
            continue
        if step is None:
            pitch = step = strides[i]
        elif strides[i] != step:
            return None
        step *= shape[i]
    if pitch is None:
        return 0
    # a row must start past the one before it ends: no broadcast (stride 0), no overlap
    return pitch if pitch >= max(inner, 1) else None


def wide_pitch(a: OpArray, axis: int) -> int | None:
    """The row pitch of the wide array ``a`` split or joined along ``axis`` where it is a
    view of part of every row of a wider array (0 where its rows are packed or it is dense
    in another order); None for other strides (the strided path's). A pitched ``a`` is
    made to read as row-major for the checks after, spanning every byte from its first
    element to its last (the overlap check takes the gaps too)."""
    if a.strides is None or a.order is not None:
        return 0
    pitch = _row_pitch(a.shape, a.strides, axis)
    if pitch is None:
        return None
    rows, extent = math.prod(a.shape[:axis]), math.prod(a.shape[axis:])
    a.strides = None
    if rows and extent:
        a.nbytes = ((rows - 1) * pitch + extent) * a.dtype.itemsize
    return pitch if pitch != extent else 0


def check_aligned(op: str, what: str, a: OpArray) -> None:
    # A pointer off its element boundary faults on the GPU; refuse it here instead.
    if a.nbytes and a.ptr % a.dtype.itemsize:
        raise ValueError(
            f"{op}: {what} starts at address {a.ptr:#x}, not a multiple of its element size "
            f"({a.dtype.itemsize} bytes for {a.dtype.name})"
        )


def check_out(op: str, what: str, a: OpArray, shape: tuple[int, ...], dtype: DType, reason: str) -> None:
    if a.shape != shape:
        raise ValueError(f"{op}: {what} has shape {tuple(a.shape)}, expected {tuple(shape)} ({reason})")
    if a.dtype is not dtype:
        raise TypeError(f"{op}: {what} is {a.dtype.name}, expected {dtype.name} (the input's dtype)")
    if a.readonly:
        if getattr(a.obj, "requires_grad", False):
            raise ValueError(
                f"{op}: {what} is a torch tensor that requires grad; the op would write it behind "
                "autograd's back (pass one that does not, e.g. made under torch.no_grad() or detached)"
            )
        raise ValueError(f"{op}: {what} is read-only; the op writes it")


MIXED = ("mixed",)  # common_order's answer where no one order fits every array


def common_order(named: Sequence[tuple[str, OpArray]]) -> tuple[int, ...] | None:
    """The memory order every array lies in (None: row-major), or :data:`MIXED` where
    they lie in different ones (the strided path's). The kernels move them as the
    row-major arrays their memory holds. An extent of 1 lets an array fit several
    orders, so each array's own order is a candidate, and the first that all of them
    fit is taken."""
    if all(a.strides is None for _, a in named):  # every array row-major: the common call
        return None
    first = named[0][1].order
    if first is not None and all(a.order == first for _, a in named):
        return first  # each is dense in its own order (memory_order said so): all in one
    candidates = list(dict.fromkeys(a.order for _, a in named if a.order is not None))
    for order in (*candidates, None):
        if all(in_order(a.shape, a.strides, order) for _, a in named):
            return order
    return MIXED


def keeps_order(a: OpArray) -> bool:
    """Whether results made of ``a``'s kind can keep a memory order other than row-major:
    torch tensors and CuPy arrays can; a DeviceArray is row-major, so results of a
    DeviceArray (or any other) input in another order are made row-major, by the strided copy."""
    return array_kind(a.obj) != "device_array"


def _pointer_ordinal(op: str, what: str, ptr: int) -> int:
    """The GPU that ``ptr`` lives on (CAI does not say); refuses memory CUDA does not know."""
    try:
        return allocation_of(ptr, device_of(0))[2]
    except LookupError as err:
        raise TypeError(
            f"{op}: {what} points at {ptr:#x}, which CUDA does not know ({err}): host memory? "
            "Pass device memory (runtime.Device.to_device, torch's .cuda())"
        ) from None


def device_for(op: str, arrays: Sequence[OpArray]) -> Device:
    """The one device every array lives on (device 0 where no array can say)."""
    first = arrays[0]
    ordinal, device = first.ordinal, first.device
    if ordinal is not None:
        for a in arrays:
            if a.ordinal != ordinal or a.device is not device:
                break
        else:  # every array names the same device (the common call): no table
            return device if device is not None else device_of(ordinal)
    where: dict[int, str] = {}
    device = None
    for a in arrays:
        ordinal = a.ordinal
        if a.device is not None:
            device = a.device
        elif ordinal is None:
            if not (a.nbytes and a.ptr):
                continue  # an empty array through CAI says nothing
            ordinal = _pointer_ordinal(op, a.what, a.ptr)
        if ordinal not in where:
            where[ordinal] = a.what
    if len(where) > 1:
        listed = ", ".join(f"{name} on device {o}" for o, name in where.items())
        raise ValueError(f"{op}: the arrays live on different devices ({listed}); all must share one")
    if device is not None:
        return device
    return device_of(next(iter(where), 0))


def strided_of(a: OpArray) -> Strided:
    """``a`` as the strided copy reads it (:mod:`runtime.strided_ops`), row-major where it has no strides."""
    return Strided(a.ptr, tuple(a.shape), a.strides or row_major_strides(a.shape), a.dtype.itemsize)
