"""What the ops work out once and keep: per shape, and per device.

Per shape: the checks of ``dim`` and ``sizes`` and the shapes they give (:func:`split_shape`,
:func:`join_shape`). Per device: the plan of a problem (:mod:`runtime.plan`, or
:mod:`runtime.strided_ops` for the strided copy) with its kernels loaded and its launches
prepared per stream as one function of the arrays' base addresses (:class:`_Compiled`).
:func:`plan_for` shows a plan without a call; :func:`runtime.ops.clear_plans` forgets
everything kept here, the remembered routes and the C lane's entries.
"""

from __future__ import annotations

import math
import operator
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from ptxgen.dtypes import DType
from ptxgen.kernels.plan_strided import StridedProblem

from . import launch as _launch
from .device import Device
from .plan import WIDE, DeviceTraits, Plan, Problem, Ptr, make_plan
from .strided_ops import strided_plan

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


def exact_ints(values: Any) -> bool:
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


def split_shape(op: str, shape: tuple[int, ...], sizes: Any, dim: Any) -> _Split:
    """``dy``'s shape cut into ``sizes`` along ``dim``, or the error naming what is wrong."""
    key = None
    if dim.__class__ is int and exact_ints(sizes):
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


def join_shape(op: str, shapes: list[tuple[int, ...]], dim: Any) -> _Join:
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
    npieces = compiled.plan.problem.pieces
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


@contextmanager
def cleared_plans() -> Iterator[None]:
    """Forget every plan and remembered shape; the body runs under the same lock, so that
    what was made from them (the ops' routes, the C lane's entries) is forgotten with them
    and no call in between plans from half-cleared tables."""
    with _plans_lock:
        _plans.clear()
        _split_shapes.clear()
        _join_shapes.clear()
        yield


def compiled_for(
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


def compiled_strided_for(device: Device, problem: StridedProblem) -> _Compiled:
    """The strided plan for ``problem`` on ``device``, made and loaded at its first call."""
    key = ("strided", problem)
    per_device = _plans.get(device)
    found = per_device.get(key) if per_device is not None else None
    if found is None:
        plan = strided_plan(problem, DeviceTraits.of(device))
        with _plans_lock:
            found = _plans.setdefault(device, {}).setdefault(key, _Compiled(device, plan))
    return found


def plan_for(op: str, dtype: Any, rows: int, extents: Sequence[int], device: Device | None = None) -> Plan:
    """The plan the op would use for ``rows`` rows of pieces ``extents`` elements wide
    (arrays at 16-byte aligned addresses), to see which kernels run where."""
    from ptxgen.dtypes import resolve_dtype

    traits = DeviceTraits.of(device) if device is not None else DeviceTraits()
    return make_plan(Problem(op, resolve_dtype(dtype), rows, tuple(extents)), traits)
