"""What a call's arrays decide, worked out once per kind of call: the ops' routes.

The ops' general path (:mod:`runtime.ops`) takes two steps. This module is the first:
from the arrays' shapes, dtypes, strides and kinds alone it checks everything that
depends on them and says how the call runs, as a :class:`Route`: the fused kernels (on
the row-major arrays the memory holds, with a row pitch where the wide array is a view)
or the strided copy (its problem made), the results' shapes and memory order, and each
array's byte span around its address for the overlap check. The second step, the same
for every call, checks what depends on the addresses (alignment, overlap, one device),
makes the results the caller did not pass, and launches.

A model calls an op with the same few kinds of call again and again, so a route is
remembered by its key (:func:`key_of`): the op's scalars and, per array, its class,
shape, strides, dtype and writability. A call whose key is known skips every check
here; a new one makes its route, and raises on bad input before anything is allocated
or launched.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

from ptxgen.dtypes import DType
from ptxgen.kernels.plan_strided import StridedProblem

from .op_arrays import (
    MIXED,
    OpArray,
    array_key,
    check_out,
    common_order,
    is_sequence,
    keeps_order,
    recognise,
    strided_of,
    wide_pitch,
)
from .op_plans import exact_ints, join_shape, split_shape
from .strided_ops import Strided, check_own_memory, row_major_strides, span
from .strides import dense_strides, permuted

__all__ = [
    "Route", "clear_routes", "join_route", "key_of", "remembered", "route_key", "split_route",
]  # fmt: skip


class Route:
    """How one kind of call runs. ``spans[i]``: array ``i``'s bytes, from its address,
    that no output may share (its lowest byte's offset, and its highest's plus one),
    arrays listed as the op names them: inputs first, outputs from ``first_output``.
    ``strided``: the strided copy runs ``problem``; else the fused kernels run the
    row-major problem of ``rows`` rows of pieces ``extents`` elements wide, the wide
    array's row pitch ``pitch`` (0: packed). ``results``: each result made where ``out``
    is not given, as ``(shape, strides)``, dense in the input's memory ``order`` (row-major
    where ``order`` is None): what the C lane allocates, as new_outputs does. ``entry``:
    what the C lane keeps of it (runtime/_fastlaunch.c, entry_of): the element size, the
    spans as native int64 pairs, the results and whether they are row-major; None where a
    span is past int64 (the lane then leaves such calls to this path)."""

    __slots__ = (
        "dtype", "entry", "extents", "first_output", "launches", "op", "order", "out_shapes", "pitch",
        "problem", "results", "rows", "spans", "strided",
    )  # fmt: skip

    def __init__(
        self,
        op: str,
        dtype: DType,
        out_shapes: tuple[tuple[int, ...], ...],
        spans: tuple[tuple[int, int], ...],
        first_output: int,
        *,
        problem: StridedProblem | None = None,
        order: tuple[int, ...] | None = None,
        rows: int = 0,
        extents: tuple[int, ...] = (),
        pitch: int = 0,
    ) -> None:
        self.op, self.dtype, self.out_shapes = op, dtype, out_shapes  # op: "backward" or "forward"
        self.spans, self.first_output = spans, first_output
        self.strided, self.problem = problem is not None, problem
        self.order, self.rows, self.extents, self.pitch = order, rows, extents, pitch
        self.results = tuple((s, dense_strides(s, order or range(len(s)))) for s in out_shapes)
        try:
            packed = array("q", [offset for pair in spans for offset in pair]).tobytes()
        except OverflowError:
            self.entry = None
        else:
            self.entry = (dtype.itemsize, packed, self.results, order is None)
        # The launch function last used per stream and addresses modulo 16, with its device:
        # runtime.ops fills it, so that a call of a known route asks no plan table.
        self.launches: dict[tuple[int, ...], tuple[Any, Any]] = {}


# --- the remembered routes -------------------------------------------------------------

_ROUTES_KEPT = 4096  # past this the table starts over
_routes: dict[tuple[Any, ...], Route] = {}


def route_key(
    op: str, ints: tuple[Any, ...], flags: tuple[bool, ...], arrays: Sequence[OpArray]
) -> tuple[Any, ...] | None:
    """The key a call's route is remembered by (:func:`key_of`), of its arrays as read.
    None where an int argument is not an exact int (a bool equals 1 as a key but is
    refused: such a call always takes the checks)."""
    if not exact_ints(ints):
        return None
    facts = [array_key(a.obj.__class__, a.shape, a.strides, a.dtype, a.readonly) for a in arrays]
    return key_of(op, ints, flags, facts)


def key_of(op: str, ints: tuple[int, ...], flags: tuple[bool, ...], facts: Sequence[Any]) -> tuple[Any, ...]:
    """A route's key: the op, its int arguments (dim, sizes: exact ints), its flags
    (whether ``out`` was given) and each array's part (:func:`runtime.op_arrays.array_key`:
    class, shape, strides, dtype and writability). :func:`route_key` makes it of the
    arrays read; the ops' known step of the plain values ``known_facts`` reads."""
    return (op, ints, flags, *facts)


def remembered(key: tuple[Any, ...] | None) -> Route | None:
    return _routes.get(key) if key is not None else None


def _remember(key: tuple[Any, ...] | None, route: Route) -> Route:
    if key is not None:
        if len(_routes) >= _ROUTES_KEPT:
            _routes.clear()
        _routes[key] = route
    return route


def clear_routes() -> None:
    _routes.clear()


def _offsets(view: Strided) -> tuple[int, int]:
    """The span of ``view``'s elements around its address: the offsets of its lowest
    byte and of its highest plus one."""
    lo, hi = span(view)
    return lo - view.ptr, hi - view.ptr


# --- the routes ------------------------------------------------------------------------


def split_route(
    op: str,
    key: tuple[Any, ...] | None,
    src: OpArray,
    sizes: Any,
    dim: Any,
    out: Any,
    outs: list[OpArray] | None,
    stream: int,
) -> Route:
    """The route of ``channel_cat_backward(dy, sizes, dim, out=out)``, ``src`` being dy
    read; ``outs`` the arrays of ``out`` read (None: read here, each where its turn comes,
    so that an argument's error is the first of its call). Remembered under ``key``."""
    split = split_shape(op, src.shape, sizes, dim)
    dy_view = strided_of(src)  # before wide_pitch reads a pitched dy as row-major
    pitch = wide_pitch(src, split.axis)
    strided = pitch is None  # strides no fused kernel takes: the strided copy's
    dtype = src.dtype
    named = [("dy", src)]
    if out is not None:
        if not is_sequence(out):
            raise TypeError(f"{op}: out must be a list or tuple of arrays, not {type(out).__name__}")
        if len(out) != len(split.pieces):
            raise ValueError(
                f"{op}: out has {len(out)} arrays for {len(split.pieces)} sizes; give one per size"
            )
        for i, o in enumerate(out):
            what = f"out[{i}]"
            a = outs[i] if outs is not None else recognise(op, what, o, stream)
            shape = split.out_shapes[i]
            check_out(op, what, a, shape, dtype, f"dy's shape with {split.pieces[i]} along dim {split.axis}")
            strided = strided or (a.strides is not None and a.order is None)
            named.append((what, a))
    order = None if strided else common_order(named)
    if strided or order is MIXED or (out is None and order is not None and not keeps_order(src)):
        pieces = [(what, strided_of(a)) for what, a in named[1:]]
        for what, p in pieces:
            check_own_memory(op, what, p)
        if out is not None:
            strides = tuple(p.strides for _, p in pieces)
        else:
            strides = tuple(row_major_strides(shape) for shape in split.out_shapes)
        problem = StridedProblem(
            "backward", dy_view.itemsize, dy_view.shape, split.axis, split.pieces, dy_view.strides, strides
        )
        spans = (_offsets(dy_view), *(_offsets(p) for _, p in pieces))
        return _remember(key, Route("backward", dtype, split.out_shapes, spans, 1, problem=problem))
    # Dense in another order (channels_last): the same copy as the row-major array its
    # memory holds, split along the same dim's place in that order.
    moved = split if order is None else split_shape(
        op, permuted(src.shape, order), sizes, order.index(split.axis)
    )  # fmt: skip
    spans = tuple((0, a.nbytes) for _, a in named)  # a pitched dy's spans its rows' gaps too
    route = Route("backward", dtype, split.out_shapes, spans, 1, order=order, rows=moved.rows,
                  extents=moved.extents, pitch=pitch)  # fmt: skip
    return _remember(key, route)


def join_route(
    op: str,
    key: tuple[Any, ...] | None,
    xs: list[OpArray],
    dim: Any,
    out: Any,
    dst: OpArray | None,
    stream: int,
) -> Route:
    """The route of ``channel_cat_forward(xs, dim, out=out)``, ``xs`` read; ``dst`` the
    array of ``out`` read (None: read here, after the inputs' checks). As :func:`split_route`."""
    named = [(f"xs[{i}]", a) for i, a in enumerate(xs)]
    first = xs[0]
    dtype = first.dtype
    for what, a in named:
        if a.dtype is not dtype:
            raise TypeError(f"{op}: {what} is {a.dtype.name}, xs[0] is {dtype.name}; all must match")
    join = join_shape(op, [a.shape for a in xs], dim)
    inputs = len(xs)
    views = [strided_of(a) for a in xs]
    pitch: int | None = 0
    strided = any(a.strides is not None and a.order is None for a in xs)
    out_view = None
    if out is not None:
        dst = dst if dst is not None else recognise(op, "out", out, stream)
        check_out(op, "out", dst, join.shape, dtype, f"the inputs joined along dim {join.axis}")
        out_view = strided_of(dst)  # before wide_pitch reads a pitched out as row-major
        pitch = wide_pitch(dst, join.axis)
        strided = strided or pitch is None
        named.append(("out", dst))
    order = None if strided else common_order(named)
    if strided or order is MIXED or (out is None and order is not None and not keeps_order(first)):
        if out_view is not None:
            check_own_memory(op, "out", out_view)
            out_strides = out_view.strides
        else:
            out_strides = row_major_strides(join.shape)
        problem = StridedProblem(
            "forward", views[0].itemsize, join.shape, join.axis, join.pieces, out_strides,
            tuple(v.strides for v in views),
        )  # fmt: skip
        spans = tuple(_offsets(v) for v in (*views, *([out_view] if out_view is not None else [])))
        return _remember(key, Route("forward", dtype, (join.shape,), spans, inputs, problem=problem))
    # dense in another order (channels_last): the row-major arrays the memory holds
    moved = join if order is None else join_shape(
        op, [permuted(a.shape, order) for a in xs], order.index(join.axis)
    )  # fmt: skip
    spans = tuple((0, a.nbytes) for _, a in named)  # a pitched out's spans its rows' gaps too
    route = Route("forward", dtype, (join.shape,), spans, inputs, order=order, rows=moved.rows,
                  extents=moved.extents, pitch=pitch or 0)  # fmt: skip
    return _remember(key, route)
