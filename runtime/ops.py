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
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ptxgen.dtypes import DTYPES, DType, dtype_from_typestr

from . import launch as _launch
from .arrays import allocation_of, dtype_of_torch, torch_dtype_table
from .device import Device, device_of
from .interop import describe
from .memory import DeviceArray
from .outputs import array_kind, new_outputs
from .plan import WIDE, DeviceTraits, Plan, Problem, Ptr, make_plan
from .stream import order_after, stream_handle, trust_stream_handle
from .strides import describe_order, in_order, memory_order, permuted

__all__ = ["channel_cat_backward", "channel_cat_forward", "clear_plans", "plan_for"]


class _Array:
    """What an op needs to know of one array argument (a slotted class: an op reads
    two or more of these per call, and a frozen dataclass costs several times more)."""

    __slots__ = (
        "device", "dtype", "nbytes", "obj", "order", "ordinal", "ptr", "readonly", "shape", "stream",
        "strides",
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
        nbytes: int,
        stream: int | None = None,  # CAI v3: the producer's stream, to be ordered after
        strides: tuple[int, ...] | None = None,  # in elements, where not row-major
        order: tuple[int, ...] | None = None,  # its dims in memory order, where not row-major
    ) -> None:
        self.obj, self.shape, self.dtype, self.ptr = obj, shape, dtype, ptr
        self.readonly, self.device, self.ordinal, self.nbytes = readonly, device, ordinal, nbytes
        self.strides, self.order = strides, order
        self.stream = stream


_tensor_class: list[type | None] = [None]  # torch.Tensor, once torch has been imported


def _torch_tensor_class() -> type | None:
    """``torch.Tensor`` once torch has been imported (by anyone), remembered; else None."""
    torch = sys.modules.get("torch")
    if torch is not None:
        if _tensor_class[0] is None and _quick_c is not None:
            _quick_c.bind_torch(torch.Tensor, torch_dtype_table())
        _tensor_class[0] = torch.Tensor
    return _tensor_class[0]


def _torch_array(value: Any) -> _Array | None:
    """A CUDA tensor read through torch's own attributes (no interface dict built: torch's
    own exports cost tens of µs), or None when it is anything else: the general path then
    accepts it or says why not. Strides that are not dense in any order are kept (order
    None): a pitched wide array, or the not-dense error of :func:`_recognise`."""
    try:
        dtype = dtype_of_torch(value.dtype)
        if dtype is None or not value.is_cuda:
            return None
        strides = order = None
        if not value.is_contiguous():  # dense in another order (channels_last), or pitched, or not dense
            strides = tuple(value.stride())
            order = memory_order(value.shape, strides)
        # torch.Size is a tuple: kept as it is. A tensor that requires grad counts as
        # read-only: it may be read, but an op writing it would do so behind autograd.
        return _Array(
            value, value.shape, dtype, value.data_ptr(), value.requires_grad, None, value.get_device(),
            value.nbytes, None, strides, order,
        )  # fmt: skip
    except Exception:  # a meta, fake or sparse tensor: the general path names the problem
        return None


def _cupy_array(value: Any) -> _Array | None:
    """A CuPy array read through CuPy's own attributes, as Function.launch reads one:
    its device from the array (no driver query for where its address lives), and the
    stream its ``__cuda_array_interface__`` would name (CuPy's current one; its null
    stream is the legacy default). None for what this does not take (a dtype CAI
    cannot spell, such as bf16, or strides that are not dense): the interface, or
    DLPack, then reads it or says why not."""
    try:
        dtype = dtype_from_typestr(value.dtype.str)
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
        producer = sys.modules["cupy"].cuda.get_current_stream().ptr
        return _Array(
            value, shape, dtype, int(value.data.ptr), False, None, value.device.id, value.nbytes,
            trust_stream_handle(producer) if producer else 1, strides, order,
        )  # fmt: skip
    except Exception:  # an older CuPy, a subclass that behaves otherwise: the interface decides
        return None


def _not_dense(op: str, what: str, shape: tuple[int, ...], strides: Any) -> ValueError:
    return ValueError(
        f"{op}: {what} is not dense (shape {shape}, strides {strides}): the ops take row-major "
        "arrays, dense ones in another memory order (channels_last) and, for the wide array (dy "
        "of a split, out of a concat), a view of part of every row of a wider one (x[:, :96]); "
        "not general strides; pass a copy (.contiguous() in torch, cupy.ascontiguousarray in CuPy)"
    )


def _recognise(op: str, what: str, value: Any, stream: int, wide: bool = False) -> _Array:
    """Read an array argument, or raise naming it and what is accepted. ``wide``: the wide
    array, which may be pitched (its strides are kept, for :func:`_wide_pitch`)."""
    cls = value.__class__
    if cls is DeviceArray:
        key = value.launch_key  # (device, dtype) while open and not empty
        if key is not None:
            device, dtype = key
            return _Array(
                value, value.shape, dtype, value.address, False, device, device.ordinal, value.nbytes
            )
        if value.closed:
            raise ValueError(f"{op}: {what} is a closed DeviceArray")
        return _Array(
            value, value.shape, DTYPES[value.dtype], 0, False, value.device, value.device.ordinal, 0
        )
    tensor = _tensor_class[0]
    if tensor is None:
        tensor = _torch_tensor_class()
    if tensor is not None and (cls is tensor or isinstance(value, tensor)):  # nn.Parameter too
        found = _torch_array(value)
        if found is not None:
            if found.strides is not None and found.order is None and not wide:
                raise _not_dense(op, what, tuple(found.shape), found.strides)
            return found
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(value, cupy.ndarray):
        found = _cupy_array(value)
        if found is not None:
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
        order = memory_order(shape, info.strides) if info.strides is not None else None
        if order is None and not (wide and info.strides is not None):
            raise _not_dense(op, what, shape, info.strides)
    nbytes = math.prod(shape) * info.dtype.itemsize
    return _Array(
        value, shape, info.dtype, info.ptr, info.readonly, None, info.device_id, nbytes, info.stream,
        info.strides if not info.contiguous else None, order,
    )  # fmt: skip


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


def _wide_pitch(op: str, what: str, a: _Array, axis: int) -> int:
    """The row pitch of the wide array ``a`` split or joined along ``axis`` where it is a
    view of part of every row of a wider array (0 where its rows are packed or it is dense
    in another order), or the error saying it is not dense. A pitched ``a`` is made to
    read as row-major for the checks after, spanning every byte from its first element
    to its last (the overlap check takes the gaps too)."""
    if a.strides is None or a.order is not None:
        return 0
    pitch = _row_pitch(a.shape, a.strides, axis)
    if pitch is None:
        raise _not_dense(op, what, a.shape, a.strides)
    rows, extent = math.prod(a.shape[:axis]), math.prod(a.shape[axis:])
    a.strides = None
    if rows and extent:
        a.nbytes = ((rows - 1) * pitch + extent) * a.dtype.itemsize
    return pitch if pitch != extent else 0


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
            f"{op}: dim {dim} is out of range for {what} of rank {rank} (shape {tuple(shape)}); "
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
    _check_aligned(op, what, a)


def _common_order(op: str, named: Sequence[tuple[str, _Array]]) -> tuple[int, ...] | None:
    """The memory order every array lies in (None: row-major), or the error naming the
    first that lies otherwise. The kernels move them as the row-major arrays their
    memory holds. An extent of 1 lets an array fit several orders, so each array's own
    order is a candidate, and the first that all of them fit is taken."""
    if all(a.strides is None for _, a in named):  # every array row-major: the common call
        return None
    first = named[0][1].order
    if first is not None and all(a.order == first for _, a in named):
        return first  # each is dense in its own order (memory_order said so): all in one
    candidates = list(dict.fromkeys(a.order for _, a in named if a.order is not None))
    for order in (*candidates, None):
        if all(in_order(a.shape, a.strides, order) for _, a in named):
            return order
    # no order fits all: name a mismatch against the array whose order is least ambiguous
    model_what, model = min(
        ((w, a) for w, a in named if a.order is not None), key=lambda wa: sum(n == 1 for n in wa[1].shape)
    )
    what, a = next((w, a) for w, a in named if not in_order(a.shape, a.strides, model.order))
    raise ValueError(
        f"{op}: {what} is {describe_order(a.order, len(a.shape))} and {model_what} is "
        f"{describe_order(model.order, len(model.shape))}; give every array in one memory order"
    )


def _check_results_layout(op: str, what: str, a: _Array, order: tuple[int, ...] | None) -> None:
    """Results the op makes keep the inputs' memory order; a DeviceArray cannot hold another."""
    if order is not None and array_kind(a.obj) == "device_array":
        raise ValueError(
            f"{op}: {what} is {describe_order(order, len(a.shape))}, and its results would be "
            "runtime.DeviceArrays, which are row-major; pass out= arrays in its memory order"
        )


def _check_no_overlap(op: str, named: Sequence[tuple[str, _Array]], first_output: int) -> None:
    """No output may share a byte with an input or with another output (inputs may
    share memory with each other: they are only read). ``named`` lists the inputs,
    then the outputs from index ``first_output``; pairs are checked in that order."""
    count = len(named)
    for i in range(count):
        name_a, a = named[i]
        if not a.nbytes:
            continue
        start_a, end_a = a.ptr, a.ptr + a.nbytes
        for j in range(max(i + 1, first_output), count):
            name_b, b = named[j]
            if b.nbytes and start_a < b.ptr + b.nbytes and b.ptr < end_a:
                raise ValueError(
                    f"{op}: {name_a} and {name_b} overlap (bytes {max(start_a, b.ptr):#x}.."
                    f"{min(end_a, b.ptr + b.nbytes):#x}); an output may not share memory with an "
                    "input or another output"
                )


def _pointer_ordinal(op: str, what: str, ptr: int) -> int:
    """The GPU that ``ptr`` lives on (CAI does not say); refuses memory CUDA does not know."""
    try:
        return allocation_of(ptr, device_of(0))[2]
    except LookupError as err:
        raise TypeError(
            f"{op}: {what} points at {ptr:#x}, which CUDA does not know ({err}): host memory? "
            "Pass device memory (runtime.Device.to_device, torch's .cuda())"
        ) from None


def _device_for(op: str, named: Sequence[tuple[str, _Array]]) -> Device:
    """The one device every array lives on (device 0 where no array can say)."""
    where: dict[int, str] = {}
    device = None
    for name, a in named:
        ordinal = a.ordinal
        if a.device is not None:
            device = a.device
        elif ordinal is None:
            if not (a.nbytes and a.ptr):
                continue  # an empty array through CAI says nothing
            ordinal = _pointer_ordinal(op, name, a.ptr)
        if ordinal not in where:
            where[ordinal] = name
    if len(where) > 1:
        listed = ", ".join(f"{name} on device {o}" for o, name in where.items())
        raise ValueError(f"{op}: the arrays live on different devices ({listed}); all must share one")
    if device is not None:
        return device
    return device_of(next(iter(where), 0))


# --- what a shape decides, remembered ----------------------------------------------------
# The checks of dim and sizes and the shapes they give depend on the shapes alone: a
# model calls an op with the same few shapes again and again, so they are worked out
# once per shape and looked up after. Only exact ints make a key (a bool compares equal
# to 1 but is refused, so it always takes the checks).

_SHAPES_KEPT = 4096  # entries per op; past this the table starts over


class _Split(NamedTuple):
    axis: int
    pieces: tuple[int, ...]  # the sizes, checked
    out_shapes: tuple[tuple[int, ...], ...]  # each piece's shape
    rows: int  # the product of the dims before the axis
    extents: tuple[int, ...]  # each piece's elements per row


class _Join(NamedTuple):
    axis: int
    pieces: tuple[int, ...]  # each input's extent along the axis
    shape: tuple[int, ...]  # the result's
    rows: int
    extents: tuple[int, ...]


_split_shapes: dict[tuple[Any, ...], _Split] = {}
_join_shapes: dict[tuple[Any, ...], _Join] = {}


def _exact_ints(values: Any) -> bool:
    if values.__class__ is not tuple and values.__class__ is not list:
        return False
    for v in values:  # noqa: SIM110 -- a loop is a third of all()'s cost on a few items
        if v.__class__ is not int:
            return False
    return True


def _remember(table: dict[tuple[Any, ...], Any], key: tuple[Any, ...] | None, found: Any) -> Any:
    if key is not None:
        if len(table) >= _SHAPES_KEPT:
            table.clear()
        table[key] = found
    return found


def _split_shape(op: str, shape: tuple[int, ...], sizes: Any, dim: Any) -> _Split:
    """``dy``'s shape cut into ``sizes`` along ``dim``, or the error naming what is wrong."""
    key = None
    if dim.__class__ is int and _exact_ints(sizes):
        key = (shape, dim, *sizes)
        found = _split_shapes.get(key)
        if found is not None:
            return found
    axis = _check_dim(op, dim, "dy", shape)
    pieces = _check_sizes(op, sizes)
    if sum(pieces) != shape[axis]:
        raise ValueError(
            f"{op}: sizes {list(pieces)} sum to {sum(pieces)}, but dy has {shape[axis]} along dim "
            f"{dim} (shape {tuple(shape)}); they must sum to {shape[axis]}"
        )
    inner = math.prod(shape[axis + 1 :])
    out_shapes = tuple((*shape[:axis], s, *shape[axis + 1 :]) for s in pieces)
    found = _Split(axis, pieces, out_shapes, math.prod(shape[:axis]), tuple(s * inner for s in pieces))
    return _remember(_split_shapes, key, found)


def _join_shape(op: str, shapes: list[tuple[int, ...]], dim: Any) -> _Join:
    """The inputs' shapes joined along ``dim``, or the error naming the input whose shape
    does not fit."""
    key = None
    if dim.__class__ is int:
        key = (dim, *shapes)
        found = _join_shapes.get(key)
        if found is not None:
            return found
    first = shapes[0]
    axis = _check_dim(op, dim, "xs[0]", first)
    for i, shape in enumerate(shapes[1:], 1):
        same = len(shape) == len(first) and all(
            x == y for d, (x, y) in enumerate(zip(shape, first)) if d != axis
        )
        if not same:
            raise ValueError(
                f"{op}: xs[{i}] has shape {tuple(shape)}, xs[0] {tuple(first)}; every dim but dim {axis} "
                "must match"
            )
    pieces = tuple(shape[axis] for shape in shapes)
    inner = math.prod(first[axis + 1 :])
    shape = (*first[:axis], sum(pieces), *first[axis + 1 :])
    found = _Join(axis, pieces, shape, math.prod(first[:axis]), tuple(s * inner for s in pieces))
    return _remember(_join_shapes, key, found)


# --- plans, per device ----------------------------------------------------------------


class _Compiled:
    """A plan with its functions loaded on one device, and its launches prepared per stream."""

    _STREAMS = 8  # launch functions kept; more streams than this start over

    def __init__(self, device: Device, plan: Plan) -> None:
        self.device = device
        self.plan = plan
        self.steps = [(device.load(s.kernel).function, s) for s in plan.steps]
        self._launchers: dict[int, Callable[..., None]] = {}

    def launcher(self, stream: int) -> Callable[..., None]:
        """``launch(wide, piece_0, piece_1, ...)``: every step on the stream handle
        ``stream``, given the arrays' base addresses (see :func:`_launch_function`)."""
        found = self._launchers.get(stream)
        if found is None:
            if len(self._launchers) >= self._STREAMS:
                self._launchers.clear()
            found = self._launchers[stream] = _launch_function(self, stream)
        return found


class _Steps:
    """``launch(wide, piece_0, piece_1, ...)``: every step of a plan, as the raw launches
    it was prepared with, each given its arguments: the step's scalars as planned, and
    each pointer the base address of its array plus the step's byte offset.

    The op has checked every array and computed every scalar itself, so the steps take
    trusted ints (``PreparedLaunch.raw``). Streams went as raw handles at preparation,
    so a stream object closed since cannot be launched on by mistake."""

    __slots__ = ("_steps", "pieces")

    def __init__(self, pieces: int, steps: list[tuple[Callable[..., None], tuple[Any, ...]]]) -> None:
        self.pieces = pieces
        # Per step: its raw launch, its arguments with every pointer left at 0, and where
        # each pointer goes: (argument index, array, byte offset), array 0 the wide one.
        self._steps = []
        for raw, recipe in steps:
            args = [0 if a.__class__ is tuple else a for a in recipe]
            pointers = tuple((i, a[0], a[1]) for i, a in enumerate(recipe) if a.__class__ is tuple)
            self._steps.append((raw, args, pointers))

    def __call__(self, *bases: int) -> None:
        if len(bases) != self.pieces + 1:
            raise TypeError(f"launch takes the wide array and {self.pieces} pieces, not {len(bases)} arrays")
        for raw, template, pointers in self._steps:
            args = template.copy()
            for i, array, offset in pointers:
                args[i] = bases[array] + offset
            raw(*args)


def _launch_function(compiled: _Compiled, handle: int) -> Callable[..., None]:
    """Every step of ``compiled`` on the stream handle ``handle`` as one function of the
    arrays' base addresses, ``launch(wide, piece_0, piece_1, ...)``: a :class:`_Steps`,
    or where the raw launches are compiled, the same steps as data in
    ``runtime._fastlaunch.Steps`` (:func:`runtime.launch.compiled_steps`), which the ops'
    C path calls with the addresses as C values, the :class:`_Steps` behind it for
    arguments it does not take."""
    npieces = len(compiled.plan.problem.extents)
    recipes = []
    for fn, step in compiled.steps:
        recipe: list[Any] = []
        for a in step.args:
            if a.__class__ is Ptr:
                array = int(a.array)
                recipe.append((0 if array == WIDE else array + 1, int(a.byte_offset)))
            else:
                recipe.append(int(a))
        raw = fn.prepare(step.grid, step.block, stream=handle, shared_mem=step.shared_mem).raw
        recipes.append((raw, tuple(recipe)))
    python = _Steps(npieces, recipes)
    steps = _launch.compiled_steps(npieces, recipes, python)
    return python if steps is None else steps


_plans: weakref.WeakKeyDictionary[Device, dict[tuple[Any, ...], _Compiled]] = weakref.WeakKeyDictionary()
_plans_lock = threading.Lock()


def _compiled(
    device: Device,
    op: str,
    dtype: DType,
    rows: int,
    extents: tuple[int, ...],
    wide_align: int,
    aligns: tuple[int, ...],
    pitch: int = 0,
) -> _Compiled:
    """The plan for this problem on ``device``, made and loaded at its first call
    (``pitch``: the wide array's row pitch in elements where it is a view, else 0)."""
    key = (op, dtype.name, rows, extents, wide_align, aligns, pitch)
    per_device = _plans.get(device)
    if per_device is not None:
        found = per_device.get(key)
        if found is not None:
            return found
    with _plans_lock:
        per_device = _plans.setdefault(device, {})
        found = per_device.get(key)
        if found is None:
            problem = Problem(op, dtype, rows, extents, wide_align, aligns, pitch)
            found = per_device[key] = _Compiled(device, make_plan(problem, DeviceTraits.of(device)))
        return found


def plan_for(op: str, dtype: Any, rows: int, extents: Sequence[int], device: Device | None = None) -> Plan:
    """The plan the op would use for ``rows`` rows of pieces ``extents`` elements wide
    (arrays at 16-byte aligned addresses), to see which kernels run where."""
    from ptxgen.dtypes import resolve_dtype

    traits = DeviceTraits.of(device) if device is not None else DeviceTraits()
    return make_plan(Problem(op, resolve_dtype(dtype), rows, tuple(extents)), traits)


def clear_plans() -> None:
    """Forget every plan and remembered shape: the next call of each shape plans again
    (after the planner's settings changed, say). Loaded modules stay with their device."""
    with _plans_lock:
        _plans.clear()
        _split_shapes.clear()
        _join_shapes.clear()
        _quick_calls.clear()


# --- the common call, checked quickly ---------------------------------------------------
# Most calls pass DeviceArrays or plain CUDA torch tensors, all on one GPU, with ``out``
# given, and repeat a few shapes. Those are checked here in full, reading a few
# attributes of each array and building no records. What the shape, dtype, device,
# addresses modulo 16 and stream decide (the pieces' shapes and sizes, and the launch
# function) is looked up in one table, :data:`_quick_calls`. At the first doubt (another
# array type, an empty piece, a misaligned address, a shape or dtype that does not fit,
# overlap) nothing has been launched and the general path takes the call over: it
# accepts it or raises the error that names the problem.


class _QuickCall(NamedTuple):
    """What a key of :data:`_quick_calls` decides."""

    device: Device  # the plan's; a call made after it closed plans again
    shapes: tuple[tuple[int, ...], ...]  # what the other arrays' shapes must be
    record: _Split | _Join
    launches: dict[int, Callable[..., None]]  # per alignment: launch(wide, *pieces)


_quick_calls: dict[tuple[Any, ...], _QuickCall] = {}
# The same checks in C (runtime._fastlaunch.QuickOps), for calls whose entries this table
# and its launch functions already hold; None where the extension is not built.
_quick_c = _launch.compiled_ops(_quick_calls)


def _torch_facts(value: Any) -> tuple[int, int, tuple[int, ...], DType, int, bool] | None:
    """``(address, nbytes, shape, dtype, device ordinal, writable)`` of a contiguous,
    non-empty CUDA ``torch.Tensor``; None for any other (the general path says why)."""
    try:
        nbytes = value.nbytes
        if not nbytes or not value.is_cuda or not value.is_contiguous():
            return None
        dtype = dtype_of_torch(value.dtype)
        if dtype is None:
            return None
        # a tensor that requires grad is not written behind autograd's back
        return value.data_ptr(), nbytes, value.shape, dtype, value.get_device(), not value.requires_grad
    except Exception:  # sparse, nested, an older torch: the general path says what it is
        return None


def _wide_facts(value: Any, tensor: type | None) -> tuple[Any, ...] | None:
    """``(address, nbytes, shape, dtype, device ordinal, writable, launch key)`` of the
    wide array (``dy`` of a split, ``y`` of a concat) when it is an open, non-empty
    DeviceArray (its ``launch_key``, which every piece of the same device and dtype
    shares) or a plain CUDA tensor (launch key None); None for anything else."""
    if value.__class__ is DeviceArray:
        key = value.launch_key  # (device, dtype) while open and not empty
        if key is None:
            return None
        return value.address, value.nbytes, value.shape, key[1], key[0].ordinal, True, key
    if value.__class__ is tensor:
        found = _torch_facts(value)
        return None if found is None else (*found, None)
    return None


def _disjoint(spans: list[tuple[int, int]]) -> bool:
    """Whether no two of the ``(start, end)`` byte ranges share a byte."""
    spans.sort()
    end = spans[0][1]
    for i in range(1, len(spans)):
        start, stop = spans[i]
        if start < end:
            return False
        end = stop
    return True


def _quick_call(
    key: tuple[Any, ...], record: _Split | _Join, ordinal: int, shapes: Sequence[tuple[int, ...]]
) -> _QuickCall:
    """Made at a key's first call (or once the device it was made on closed). Entries of
    closed devices are dropped here, so that none keeps a closed device's modules."""
    for old_key, old in list(_quick_calls.items()):  # list(): one step, safe beside other threads
        if old.device.closed and _quick_calls.get(old_key) is old:  # not one made again since
            _quick_calls.pop(old_key, None)
    found = _QuickCall(device_of(ordinal), tuple(tuple(s) for s in shapes), record, {})
    return _remember(_quick_calls, key, found)


def _split_call(
    shape: tuple[int, ...], sizes: Sequence[int], dim: int, dtype: DType, ordinal: int, handle: int
) -> _QuickCall:
    """The quick-call entry of a split (made at its first call; an error is the general path's)."""
    key = (shape, dim, dtype.name, ordinal, handle, *sizes)
    call = _quick_calls.get(key)
    if call is None or call.device.closed:
        split = _split_shape("channel_cat_backward", shape, sizes, dim)
        call = _quick_call(key, split, ordinal, split.out_shapes)
    return call


def _join_call(
    shapes: list[tuple[int, ...]], dim: int, dtype: DType, ordinal: int, handle: int
) -> _QuickCall:
    """The quick-call entry of a concat (made at its first call; an error is the general path's)."""
    key = (dim, dtype.name, ordinal, handle, *shapes)
    call = _quick_calls.get(key)
    if call is None or call.device.closed:
        join = _join_shape("channel_cat_forward", shapes, dim)
        call = _quick_call(key, join, ordinal, [join.shape])
    return call


def _quick_launch(call: _QuickCall, dtype: DType, aligns: int, handle: int) -> Callable[..., None]:
    """The launch function of ``call`` for the arrays' addresses modulo 16 (``aligns``, 4
    bits each, the wide array's highest): its plan through :func:`_compiled`, prepared
    on the stream."""
    record = call.record
    n = len(record.pieces)
    each = tuple((aligns >> 4 * (n - 1 - i)) & 15 for i in range(n))
    op = "backward" if record.__class__ is _Split else "forward"
    compiled = _compiled(call.device, op, dtype, record.rows, record.extents, aligns >> 4 * n, each)
    if len(call.launches) >= _ALIGNMENTS_KEPT:
        call.launches.clear()
    found = call.launches[aligns] = compiled.launcher(handle)
    return found


_ALIGNMENTS_KEPT = 64  # launch functions per quick call; more alignments start over


def _backward_quick(dy: Any, sizes: Any, dim: Any, out: Any, handle: int) -> bool:
    """:func:`channel_cat_backward` with ``out`` for the common call (see above): True
    once launched; False, having done nothing, to leave the call to the general path."""
    if (out.__class__ is not list and out.__class__ is not tuple) or dim.__class__ is not int:
        return False
    if sizes.__class__ is not list and sizes.__class__ is not tuple:
        return False
    for s in sizes:  # exact ints: True equals 1 as a key, but a bool is refused
        if s.__class__ is not int:
            return False
    tensor = _tensor_class[0]
    wide = _wide_facts(dy, tensor)
    if wide is None:
        return False
    ptr, end, shape, dtype, ordinal, _, same = wide
    call = _split_call(shape, sizes, dim, dtype, ordinal, handle)
    wants = call.shapes
    if len(out) != len(wants):
        return False
    end += ptr
    mask = dtype.itemsize - 1
    aligns = ptr & 15
    pieces = []
    last = 0  # where the previous output ends
    ordered = True  # outputs in address order: each need only clear the one before
    for o, want in zip(out, wants):
        cls = o.__class__
        if cls is DeviceArray:
            k = o.launch_key  # None: closed or empty; the same device and dtype as dy: dy's key
            if k is None or (k is not same and (k[1] is not dtype or k[0].ordinal != ordinal)):
                return False
            if o.shape != want:
                return False
            p, n = o.address, o.nbytes
        elif cls is tensor:
            found = _torch_facts(o)
            if found is None:
                return False
            p, n, got, d, where, writable = found
            if got != want or d is not dtype or where != ordinal or not writable:
                return False
        else:
            return False
        if p & mask or (p < end and ptr < p + n):  # misaligned, or shares bytes with dy
            return False
        if p < last:
            ordered = False
        last = p + n
        pieces.append(p)
        aligns = aligns << 4 | (p & 15)
    if ptr & mask:
        return False
    if not ordered and not _disjoint([(p, p + math.prod(s) * (mask + 1)) for p, s in zip(pieces, wants)]):
        return False
    launch = call.launches.get(aligns)
    if launch is None:
        launch = _quick_launch(call, dtype, aligns, handle)
    launch(ptr, *pieces)
    return True


def _forward_quick(xs: Any, dim: Any, out: Any, handle: int) -> bool:
    """:func:`channel_cat_forward` with ``out`` for the common call; as :func:`_backward_quick`."""
    if (xs.__class__ is not list and xs.__class__ is not tuple) or not xs or dim.__class__ is not int:
        return False
    tensor = _tensor_class[0]
    wide = _wide_facts(out, tensor)
    if wide is None or not wide[5]:  # y is written
        return False
    ptr, end, shape, dtype, ordinal, _, same = wide
    end += ptr
    mask = dtype.itemsize - 1
    if ptr & mask:
        return False
    aligns = ptr & 15
    pieces = []
    shapes = []
    for x in xs:  # inputs may share memory with each other, not with the output
        cls = x.__class__
        if cls is DeviceArray:
            k = x.launch_key
            if k is None or (k is not same and (k[1] is not dtype or k[0].ordinal != ordinal)):
                return False
            p, n = x.address, x.nbytes
            shapes.append(x.shape)
        elif cls is tensor:
            found = _torch_facts(x)
            if found is None:
                return False
            p, n, got, d, where, _ = found
            if d is not dtype or where != ordinal:
                return False
            shapes.append(got)
        else:
            return False
        if p & mask or (p < end and ptr < p + n):
            return False
        pieces.append(p)
        aligns = aligns << 4 | (p & 15)
    call = _join_call(shapes, dim, dtype, ordinal, handle)
    if shape != call.shapes[0]:
        return False
    launch = call.launches.get(aligns)
    if launch is None:
        launch = _quick_launch(call, dtype, aligns, handle)
    launch(ptr, *pieces)
    return True


def _backward_fresh(dy: Any, sizes: Any, dim: Any, handle: int) -> list[Any] | None:
    """:func:`channel_cat_backward` without ``out`` for the common call: the results made
    (of dy's kind, on the op's stream) and launched; None, having done nothing, to leave
    the call to the general path. Fresh arrays share no byte with dy or each other."""
    if dim.__class__ is not int or (sizes.__class__ is not list and sizes.__class__ is not tuple):
        return None
    for s in sizes:
        if s.__class__ is not int or s <= 0:  # a bool, or an empty piece: the general path
            return None
    wide = _wide_facts(dy, _tensor_class[0])
    if wide is None:
        return None
    ptr, _, shape, dtype, ordinal, _, _ = wide
    if ptr & (dtype.itemsize - 1):
        return None
    call = _split_call(shape, sizes, dim, dtype, ordinal, handle)
    results, pieces = new_outputs(dy, call.device, handle, call.shapes, dtype)
    aligns = ptr & 15
    for p in pieces:
        aligns = aligns << 4 | (p & 15)
    launch = call.launches.get(aligns)
    if launch is None:
        launch = _quick_launch(call, dtype, aligns, handle)
    launch(ptr, *pieces)
    return results


def _forward_fresh(xs: Any, dim: Any, handle: int) -> Any:
    """:func:`channel_cat_forward` without ``out`` for the common call; as
    :func:`_backward_fresh` (None leaves the call to the general path)."""
    if (xs.__class__ is not list and xs.__class__ is not tuple) or not xs or dim.__class__ is not int:
        return None
    tensor = _tensor_class[0]
    first = _wide_facts(xs[0], tensor)
    if first is None:
        return None
    dtype, ordinal, same = first[3], first[4], first[6]
    mask = dtype.itemsize - 1
    aligns = 0
    pieces = []
    shapes = []
    for x in xs:
        facts = _wide_facts(x, tensor)  # open, non-empty, a DeviceArray or a plain CUDA tensor
        if facts is None or facts[3] is not dtype or facts[4] != ordinal:
            return None
        if x.__class__ is not xs[0].__class__ or (same is not None and facts[6] is not same):
            return None  # one kind of array, so the result's kind is not a guess
        p = facts[0]
        if p & mask:
            return None
        pieces.append(p)
        shapes.append(facts[2])
        aligns = aligns << 4 | (p & 15)
    call = _join_call(shapes, dim, dtype, ordinal, handle)
    made, wide = new_outputs(xs[0], call.device, handle, call.shapes, dtype)
    aligns |= (wide[0] & 15) << 4 * len(pieces)
    launch = call.launches.get(aligns)
    if launch is None:
        launch = _quick_launch(call, dtype, aligns, handle)
    launch(wide[0], *pieces)
    return made[0]


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
    if out is not None and _quick_c is not None and _quick_c.split(dy, sizes, dim, out, stream):
        return list(out)
    handle = stream_handle(stream)
    if out is not None and _backward_quick(dy, sizes, dim, out, handle):
        return list(out)
    if out is None:
        made = _backward_fresh(dy, sizes, dim, handle)
        if made is not None:
            return made
    src = _recognise(op, "dy", dy, handle, wide=True)
    split = _split_shape(op, src.shape, sizes, dim)
    pitch = _wide_pitch(op, "dy", src, split.axis)
    dtype = src.dtype
    if src.nbytes and src.ptr % dtype.itemsize:
        _check_aligned(op, "dy", src)
    named = [("dy", src)]
    if out is not None:
        if (out.__class__ is not list and out.__class__ is not tuple) and (
            isinstance(out, (str, bytes)) or not isinstance(out, Sequence)
        ):
            raise TypeError(f"{op}: out must be a list or tuple of arrays, not {type(out).__name__}")
        if len(out) != len(split.pieces):
            raise ValueError(
                f"{op}: out has {len(out)} arrays for {len(split.pieces)} sizes; give one per size"
            )
        for i, o in enumerate(out):
            what = f"out[{i}]"
            a = _recognise(op, what, o, handle)
            shape = split.out_shapes[i]
            if (
                a.shape != shape
                or a.dtype is not dtype
                or a.readonly
                or (a.nbytes and a.ptr % dtype.itemsize)
            ):
                reason = f"dy's shape with {split.pieces[i]} along dim {split.axis}"
                _check_out(op, what, a, shape, dtype, reason)
            named.append((what, a))
        _check_no_overlap(op, named, 1)
    order = _common_order(op, named)
    if out is None:
        _check_results_layout(op, "dy", src, order)
    device = _device_for(op, named)
    for _, a in named:
        if a.stream is not None:
            order_after(device, handle, a.stream)

    if out is None:  # every check made: the results, of dy's kind, on the op's stream
        results, bases = new_outputs(src.obj, device, handle, split.out_shapes, dtype, order)
    else:
        results = list(out)
        bases = [a.ptr for _, a in named[1:]]
    # Dense in another order (channels_last): the same copy as the row-major array its
    # memory holds, split along the same dim's place in that order.
    moved = split if order is None else _split_shape(
        op, permuted(src.shape, order), sizes, order.index(split.axis)
    )  # fmt: skip
    # the addresses modulo 16 the plan is made for
    aligns = tuple([b & 15 for b in bases])
    compiled = _compiled(device, "backward", dtype, moved.rows, moved.extents, src.ptr & 15, aligns, pitch)
    compiled.launcher(handle)(src.ptr, *bases)
    return results


def channel_cat_forward(xs: Sequence[Any], dim: int = 1, *, out: Any = None, stream: Any = None) -> Any:
    """Concatenate ``xs`` along ``dim``: ``y`` with every input's channels in order.

    All inputs share dtype, device and every extent but ``dim``'s (which may be 0).
    Returns a ``runtime.DeviceArray``, or ``out`` as given. Nothing is allocated or
    launched unless every argument is valid; the launches are queued on ``stream``.
    """
    op = "channel_cat_forward"
    if out is not None and _quick_c is not None and _quick_c.join(xs, dim, out, stream):
        return out
    handle = stream_handle(stream)
    if (xs.__class__ is not list and xs.__class__ is not tuple) and (
        isinstance(xs, (str, bytes)) or not isinstance(xs, Sequence)
    ):
        raise TypeError(f"{op}: xs must be a list or tuple of arrays, not {type(xs).__name__}")
    if not xs:
        raise ValueError(f"{op}: xs is empty; give at least one array to concatenate")
    if out is not None and _forward_quick(xs, dim, out, handle):
        return out
    if out is None:
        made = _forward_fresh(xs, dim, handle)
        if made is not None:
            return made
    named = [(f"xs[{i}]", _recognise(op, f"xs[{i}]", x, handle)) for i, x in enumerate(xs)]
    first = named[0][1]
    dtype = first.dtype
    for what, a in named:
        if a.dtype is not dtype:
            raise TypeError(f"{op}: {what} is {a.dtype.name}, xs[0] is {dtype.name}; all must match")
    join = _join_shape(op, [a.shape for _, a in named], dim)
    for what, a in named:
        if a.nbytes and a.ptr % dtype.itemsize:
            _check_aligned(op, what, a)
    dst = None
    pitch = 0
    if out is not None:
        dst = _recognise(op, "out", out, handle, wide=True)
        _check_out(op, "out", dst, join.shape, dtype, f"the inputs joined along dim {join.axis}")
        pitch = _wide_pitch(op, "out", dst, join.axis)
        named.append(("out", dst))
        _check_no_overlap(op, named, len(named) - 1)
    order = _common_order(op, named)
    if dst is None:
        _check_results_layout(op, "xs[0]", first, order)
    device = _device_for(op, named)
    for _, a in named:
        if a.stream is not None:
            order_after(device, handle, a.stream)

    inputs = len(join.pieces)
    aligns = tuple([a.ptr & 15 for _, a in named[:inputs]])
    if dst is None:  # every check made: the result, of xs[0]'s kind, on the op's stream
        made, addresses = new_outputs(first.obj, device, handle, [join.shape], dtype, order)
        result, wide = made[0], addresses[0]
    else:
        result, wide = out, dst.ptr
    # dense in another order (channels_last): the row-major arrays the memory holds
    moved = join if order is None else _join_shape(
        op, [permuted(a.shape, order) for _, a in named[:inputs]], order.index(join.axis)
    )  # fmt: skip
    compiled = _compiled(device, "forward", dtype, moved.rows, moved.extents, wide & 15, aligns, pitch)
    bases = [a.ptr for _, a in named[:inputs]]
    compiled.launcher(handle)(wide, *bases)
    return result
