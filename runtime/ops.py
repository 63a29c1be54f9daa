"""High-level ops: the split of a concatenation's gradient, and the concatenation.

    runtime.channel_cat_backward(dy, sizes, dim=1)  ->  [dx_0, dx_1, ...]
    runtime.channel_cat_forward([x_0, x_1, ...], dim=1)  ->  y

Any rank: the dims before ``dim`` are rows, ``dim`` and the dims after it make one
row's channel extent, so a piece of ``s`` along ``dim`` is ``s * prod(shape[dim+1:])``
contiguous elements of each row. Arrays may be :class:`runtime.DeviceArray` or
anything with ``__cuda_array_interface__`` or DLPack (PyTorch, CuPy, Numba), compact
and row-major.

Every argument is checked before anything is allocated or launched. A shape is
planned once (:mod:`runtime.plan`) and the plan is kept per device; a later call with
the same shape, dtype and pointer alignments only checks and launches.
"""

from __future__ import annotations

import math
import operator
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ptxgen.dtypes import DTYPES, DType

from ._driver import driver
from .device import Device
from .interop import describe
from .memory import DeviceArray
from .plan import DeviceTraits, Plan, Problem, Ptr, make_plan
from .stream import stream_handle

__all__ = ["channel_cat_backward", "channel_cat_forward", "plan_for"]


@dataclass(frozen=True)
class _Array:
    """What an op needs to know of one array argument."""

    obj: Any
    shape: tuple[int, ...]
    dtype: DType
    ptr: int
    readonly: bool
    device: Device | None  # known for a DeviceArray
    ordinal: int | None  # known for a DeviceArray and DLPack; CAI does not say

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def _recognise(op: str, what: str, value: Any, stream: int) -> _Array:
    """Read an array argument, or raise naming it and what is accepted."""
    if type(value) is DeviceArray:
        if value.closed:
            raise ValueError(f"{op}: {what} is a closed DeviceArray")
        return _Array(
            value, value.shape, DTYPES[value.dtype], value.ptr, False, value.device, value.device.ordinal
        )
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
    if not info.contiguous:
        raise ValueError(
            f"{op}: {what} is not contiguous; pass a compact row-major array (.contiguous() in "
            "torch, cupy.ascontiguousarray in CuPy)"
        )
    return _Array(value, tuple(info.shape), info.dtype, info.ptr, info.readonly, None, info.device_id)


def _check_dim(op: str, dim: Any, what: str, shape: tuple[int, ...]) -> int:
    try:
        if isinstance(dim, bool):
            raise TypeError
        dim = operator.index(dim)
    except TypeError:
        raise TypeError(f"{op}: dim must be an int, not {type(dim).__name__} {dim!r}") from None
    rank = len(shape)
    if rank == 0:
        raise ValueError(f"{op}: {what} is 0-d (shape ()); it needs at least one dim to split or join")
    if not -rank <= dim < rank:
        raise ValueError(
            f"{op}: dim {dim} is out of range for {what} of rank {rank} (shape {shape}); "
            f"accepted: {-rank}..{rank - 1}"
        )
    return dim % rank


def _check_sizes(op: str, sizes: Any) -> tuple[int, ...]:
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence):
        raise TypeError(f"{op}: sizes must be a list or tuple of ints, not {type(sizes).__name__} {sizes!r}")
    if not sizes:
        raise ValueError(f"{op}: sizes is empty; give at least one piece")
    out = []
    for i, s in enumerate(sizes):
        if isinstance(s, bool):
            raise TypeError(f"{op}: sizes[{i}] = {s!r} is a bool; every size must be an int >= 0")
        try:
            n = operator.index(s)
        except TypeError:
            raise TypeError(
                f"{op}: sizes[{i}] = {s!r} ({type(s).__name__}); every size must be an int >= 0"
            ) from None
        if n < 0:
            raise ValueError(f"{op}: sizes[{i}] = {n}; every size must be an int >= 0")
        out.append(n)
    return tuple(out)


def _check_aligned(op: str, what: str, a: _Array) -> None:
    # A pointer off its element boundary faults on the GPU; refuse it here instead.
    if a.nbytes and a.ptr % a.dtype.itemsize:
        raise ValueError(
            f"{op}: {what} starts at address {a.ptr:#x}, not a multiple of its element size "
            f"({a.dtype.itemsize} bytes for {a.dtype.name})"
        )


def _check_out(op: str, what: str, a: _Array, shape: tuple[int, ...], dtype: DType, reason: str) -> None:
    if a.shape != shape:
        raise ValueError(f"{op}: {what} has shape {a.shape}, expected {shape} ({reason})")
    if a.dtype is not dtype:
        raise TypeError(f"{op}: {what} is {a.dtype.name}, expected {dtype.name} (the input's dtype)")
    if a.readonly:
        raise ValueError(f"{op}: {what} is read-only; the op writes it")
    _check_aligned(op, what, a)


def _check_no_overlap(op: str, named: Sequence[tuple[str, _Array]], outputs: set[str]) -> None:
    """No output may share a byte with an input or with another output (inputs may
    share memory with each other: they are only read)."""
    spans = [(name, a.ptr, a.ptr + a.nbytes) for name, a in named if a.nbytes]
    for i, (name_a, start_a, end_a) in enumerate(spans):
        for name_b, start_b, end_b in spans[i + 1 :]:
            if (name_a in outputs or name_b in outputs) and start_a < end_b and start_b < end_a:
                raise ValueError(
                    f"{op}: {name_a} and {name_b} overlap (bytes {max(start_a, start_b):#x}.."
                    f"{min(end_a, end_b):#x}); an output may not share memory with an input or "
                    "another output"
                )


def _pointer_ordinal(op: str, what: str, ptr: int) -> int:
    """The GPU that ``ptr`` lives on (CAI does not say); refuses memory CUDA does not know."""
    drv = driver()
    Device(0)._activate()  # the query needs a context; unified addressing answers for every GPU
    err, ordinal = drv.cuPointerGetAttribute(drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
    if err != drv.CUresult.CUDA_SUCCESS or int(ordinal) < 0:
        name = getattr(err, "name", str(err)) if err != drv.CUresult.CUDA_SUCCESS else f"ordinal {ordinal}"
        raise TypeError(
            f"{op}: {what} points at {ptr:#x}, which no CUDA context knows ({name}): host memory? "
            "Pass device memory (runtime.Device.to_device, torch's .cuda())"
        )
    return int(ordinal)


def _device_for(op: str, named: Sequence[tuple[str, _Array]]) -> Device:
    """The one device every array lives on (device 0 where no array can say)."""
    where: dict[int, str] = {}
    device = None
    for name, a in named:
        if a.device is not None:
            device = a.device
            ordinal = a.ordinal
        elif a.ordinal is not None:
            ordinal = a.ordinal
        elif a.nbytes and a.ptr:
            ordinal = _pointer_ordinal(op, name, a.ptr)
        else:
            continue  # an empty array through CAI says nothing
        where.setdefault(ordinal, name)
    if len(where) > 1:
        listed = ", ".join(f"{name} on device {o}" for o, name in where.items())
        raise ValueError(f"{op}: the arrays live on different devices ({listed}); all must share one")
    if device is not None:
        return device
    return Device(next(iter(where), 0))


# --- plans, per device ----------------------------------------------------------------


class _Compiled:
    """A plan with its functions loaded on one device, and its launches prepared per stream."""

    _STREAMS = 8  # prepared launch sets kept; more streams than this start over

    def __init__(self, device: Device, plan: Plan) -> None:
        self.plan = plan
        self.steps = [(device.load(s.kernel).function, s) for s in plan.steps]
        self._prepared: dict[int, list[Any]] = {}

    def launch(self, bases: Sequence[int], stream: int) -> None:
        """Launch every step on the stream handle ``stream``, pointers rebased on
        ``bases`` (piece i at index i, the wide array last)."""
        prepared = self._prepared.get(stream)
        if prepared is None:
            if len(self._prepared) >= self._STREAMS:
                self._prepared.clear()
            prepared = self._prepared[stream] = [_prepare(fn, step, stream) for fn, step in self.steps]
        for launch, (_fn, step) in zip(prepared, self.steps):
            launch(*[bases[a.array] + a.byte_offset if a.__class__ is Ptr else a for a in step.args])


def _prepare(fn: Any, step: Any, stream: int) -> Any:
    """The step's launch on the stream handle ``stream``, geometry checked once. The op has
    checked every array and computed every address and scalar itself, so the launch takes
    them as trusted ints (``PreparedLaunch.raw``). Streams go as raw handles, so a stream
    object closed since cannot be launched on by mistake."""
    return fn.prepare(step.grid, step.block, stream=stream, shared_mem=step.shared_mem).raw


_plans: weakref.WeakKeyDictionary[Device, dict[tuple[Any, ...], _Compiled]] = weakref.WeakKeyDictionary()
_plans_lock = threading.Lock()


def _compiled(device: Device, key: tuple[Any, ...], problem: Any) -> _Compiled:
    per_device = _plans.get(device)
    if per_device is not None:
        found = per_device.get(key)
        if found is not None:
            return found
    with _plans_lock:
        per_device = _plans.setdefault(device, {})
        found = per_device.get(key)
        if found is None:
            found = per_device[key] = _Compiled(device, make_plan(problem(), DeviceTraits.of(device)))
        return found


def plan_for(op: str, dtype: Any, rows: int, extents: Sequence[int], device: Device | None = None) -> Plan:
    """The plan the op would use for ``rows`` rows of pieces ``extents`` elements wide
    (arrays at 16-byte aligned addresses), to see which kernels run where."""
    from ptxgen.dtypes import resolve_dtype

    traits = DeviceTraits.of(device) if device is not None else DeviceTraits()
    return make_plan(Problem(op, resolve_dtype(dtype), rows, tuple(extents)), traits)


# --- the ops ----------------------------------------------------------------------------


def channel_cat_backward(
    dy: Any, sizes: Sequence[int], dim: int = 1, *, out: Sequence[Any] | None = None, stream: Any = None
) -> list[Any]:
    """Split ``dy`` along ``dim`` into pieces of ``sizes``: the gradient of each input
    of ``cat(inputs, dim)``.

    Returns one array per size (``runtime.DeviceArray``, or the arrays of ``out`` as
    given). A size of 0 gives an empty array. Nothing is allocated or launched unless
    every argument is valid; the launches are queued on ``stream`` and not waited for.
    """
    op = "channel_cat_backward"
    handle = stream_handle(stream)
    src = _recognise(op, "dy", dy, handle)
    axis = _check_dim(op, dim, "dy", src.shape)
    pieces = _check_sizes(op, sizes)
    shape = src.shape
    if sum(pieces) != shape[axis]:
        raise ValueError(
            f"{op}: sizes {list(pieces)} sum to {sum(pieces)}, but dy has {shape[axis]} along dim "
            f"{dim} (shape {shape}); they must sum to {shape[axis]}"
        )
    _check_aligned(op, "dy", src)
    out_shapes = [(*shape[:axis], s, *shape[axis + 1 :]) for s in pieces]
    named = [("dy", src)]
    outs: list[_Array] = []
    if out is not None:
        if isinstance(out, (str, bytes)) or not isinstance(out, Sequence):
            raise TypeError(f"{op}: out must be a list or tuple of arrays, not {type(out).__name__}")
        if len(out) != len(pieces):
            raise ValueError(f"{op}: out has {len(out)} arrays for {len(pieces)} sizes; give one per size")
        for i, (o, s) in enumerate(zip(out, out_shapes)):
            a = _recognise(op, f"out[{i}]", o, handle)
            _check_out(op, f"out[{i}]", a, s, src.dtype, f"dy's shape with {pieces[i]} along dim {axis}")
            outs.append(a)
            named.append((f"out[{i}]", a))
        _check_no_overlap(op, named, {name for name, _ in named[1:]})
    device = _device_for(op, named)

    inner = math.prod(shape[axis + 1 :])
    rows = math.prod(shape[:axis])
    extents = tuple(s * inner for s in pieces)
    dtype = src.dtype
    aligns = tuple(a.ptr % 16 for a in outs) if outs else (0,) * len(pieces)  # fresh memory: 256-aligned
    key = ("backward", dtype.name, rows, extents, src.ptr % 16, aligns)
    compiled = _compiled(device, key, lambda: Problem("backward", dtype, rows, extents, src.ptr % 16, aligns))

    if out is None:
        results: list[Any] = [device.empty(s, dtype) for s in out_shapes]
        bases = [r.ptr for r in results]
    else:
        results = list(out)
        bases = [a.ptr for a in outs]
    bases.append(src.ptr)  # last, so that Ptr(WIDE == -1) finds it
    compiled.launch(bases, handle)
    return results


def channel_cat_forward(xs: Sequence[Any], dim: int = 1, *, out: Any = None, stream: Any = None) -> Any:
    """Concatenate ``xs`` along ``dim``: ``y`` with every input's channels in order.

    All inputs share dtype, device and every extent but ``dim``'s (which may be 0).
    Returns a ``runtime.DeviceArray``, or ``out`` as given. Nothing is allocated or
    launched unless every argument is valid; the launches are queued on ``stream``.
    """
    op = "channel_cat_forward"
    handle = stream_handle(stream)
    if isinstance(xs, (str, bytes)) or not isinstance(xs, Sequence):
        raise TypeError(f"{op}: xs must be a list or tuple of arrays, not {type(xs).__name__}")
    if not xs:
        raise ValueError(f"{op}: xs is empty; give at least one array to concatenate")
    srcs = [_recognise(op, f"xs[{i}]", x, handle) for i, x in enumerate(xs)]
    first = srcs[0]
    axis = _check_dim(op, dim, "xs[0]", first.shape)
    for i, a in enumerate(srcs[1:], 1):
        if a.dtype is not first.dtype:
            raise TypeError(f"{op}: xs[{i}] is {a.dtype.name}, xs[0] is {first.dtype.name}; all must match")
        same = len(a.shape) == len(first.shape) and all(
            x == y for d, (x, y) in enumerate(zip(a.shape, first.shape)) if d != axis
        )
        if not same:
            raise ValueError(
                f"{op}: xs[{i}] has shape {a.shape}, xs[0] {first.shape}; every dim but dim {axis} must match"
            )
    for i, a in enumerate(srcs):
        _check_aligned(op, f"xs[{i}]", a)
    pieces = tuple(a.shape[axis] for a in srcs)
    shape = (*first.shape[:axis], sum(pieces), *first.shape[axis + 1 :])
    named = [(f"xs[{i}]", a) for i, a in enumerate(srcs)]
    dst = None
    if out is not None:
        dst = _recognise(op, "out", out, handle)
        _check_out(op, "out", dst, shape, first.dtype, f"the inputs joined along dim {axis}")
        named.append(("out", dst))
        _check_no_overlap(op, named, {"out"})
    device = _device_for(op, named)

    inner = math.prod(shape[axis + 1 :])
    rows = math.prod(shape[:axis])
    extents = tuple(s * inner for s in pieces)
    dtype = first.dtype
    aligns = tuple(a.ptr % 16 for a in srcs)
    wide_align = dst.ptr % 16 if dst is not None else 0
    key = ("forward", dtype.name, rows, extents, wide_align, aligns)
    compiled = _compiled(device, key, lambda: Problem("forward", dtype, rows, extents, wide_align, aligns))

    result = device.empty(shape, dtype) if out is None else out
    bases = [a.ptr for a in srcs]
    bases.append(result.ptr if out is None else dst.ptr)  # last: Ptr(WIDE == -1)
    compiled.launch(bases, handle)
    return result
