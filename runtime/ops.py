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
the same shape, dtype and pointer alignments only checks and launches. The common call
takes the quick path (:mod:`runtime.op_quick`, and its checks in C); any other is read
and checked by :mod:`runtime.op_arrays`, with what a shape decides and the plans kept by
:mod:`runtime.op_plans`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ptxgen.kernels.plan_strided import StridedProblem

from . import launch as _launch
from .arrays import torch_dtype_table
from .op_arrays import (
    _MIXED,
    _Array,
    _as_strided,
    _check_aligned,
    _check_no_overlap,
    _check_out,
    _common_order,
    _device_for,
    _keeps_order,
    _order_after_producers,
    _recognise,
    _torch_seen,
    _wide_pitch,
)
from .op_plans import (
    _compiled,
    _compiled_strided,
    _Join,
    _join_shape,
    _join_shapes,
    _plans,
    _plans_lock,
    _Split,
    _split_shape,
    _split_shapes,
    plan_for,
)
from .op_quick import _backward_fresh, _backward_quick, _forward_fresh, _forward_quick, _quick_calls
from .outputs import new_outputs
from .stream import stream_handle
from .strided_ops import Strided, check_disjoint, check_own_memory, row_major_strides
from .strides import permuted

__all__ = ["channel_cat_backward", "channel_cat_forward", "clear_plans", "plan_for"]

# The quick path's checks in C (runtime._fastlaunch.QuickOps), which the ops try first,
# for calls whose entries the quick path's table and its launch functions already hold;
# None where the extension is not built.
_quick_c = _launch.compiled_ops(_quick_calls)


def _bind_torch(tensor: type) -> None:
    """Lets the C path read torch tensors, once the array reader has seen torch imported."""
    if _quick_c is not None:
        _quick_c.bind_torch(tensor, torch_dtype_table())


_torch_seen.append(_bind_torch)


def clear_plans() -> None:
    """Forget every plan and remembered shape: the next call of each shape plans again
    (after the planner's settings changed, say). Loaded modules stay with their device."""
    with _plans_lock:
        _plans.clear()
        _split_shapes.clear()
        _join_shapes.clear()
        _quick_calls.clear()


# --- the strided copy ------------------------------------------------------------------


def _strided_split(op: str, dy: Strided, like: Any, split: _Split, named: list[tuple[str, _Array]],
                   out: Any, handle: int) -> list[Any]:  # fmt: skip
    """The split by the strided copy (see :mod:`runtime.strided_ops`) of ``dy`` (``like``
    the object passed): every check made but the outputs' memory, which is checked here
    before anything is allocated or launched."""
    if out is not None:
        pieces = [(what, _as_strided(a)) for what, a in named[1:]]
        for what, p in pieces:
            check_own_memory(op, what, p)
        check_disjoint(op, [("dy", dy), *pieces], 1)
    device = _device_for(op, named)
    _order_after_producers(device, handle, named)
    if out is not None:
        results, bases = list(out), [p.ptr for _, p in pieces]
        strides = tuple(p.strides for _, p in pieces)
    else:
        results, bases = new_outputs(like, device, handle, split.out_shapes, named[0][1].dtype)
        strides = tuple(row_major_strides(shape) for shape in split.out_shapes)
    problem = StridedProblem("backward", dy.itemsize, dy.shape, split.axis, split.pieces, dy.strides, strides)
    _compiled_strided(device, problem).launcher(handle)(dy.ptr, *bases)
    return results


def _strided_join(op: str, join: _Join, named: list[tuple[str, _Array]], out: Any, y: Strided | None,
                  handle: int) -> Any:  # fmt: skip
    """The concat by the strided copy into ``out`` (``y`` its view); as :func:`_strided_split`."""
    inputs = [(what, _as_strided(a)) for what, a in named[: len(join.pieces)]]
    isz = inputs[0][1].itemsize
    if y is not None:
        check_own_memory(op, "out", y)
        check_disjoint(op, [*inputs, ("out", y)], len(inputs))
    device = _device_for(op, named)
    _order_after_producers(device, handle, named)
    if y is not None:
        result = out
    else:
        made, addresses = new_outputs(named[0][1].obj, device, handle, [join.shape], named[0][1].dtype)
        result = made[0]
        y = Strided(addresses[0], join.shape, row_major_strides(join.shape), isz)
    strides = tuple(x.strides for _, x in inputs)
    problem = StridedProblem("forward", isz, y.shape, join.axis, join.pieces, y.strides, strides)
    _compiled_strided(device, problem).launcher(handle)(y.ptr, *[x.ptr for _, x in inputs])
    return result


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
    src = _recognise(op, "dy", dy, handle)
    split = _split_shape(op, src.shape, sizes, dim)
    view = _as_strided(src)  # before _wide_pitch reads a pitched dy as row-major
    pitch = _wide_pitch(src, split.axis)
    strided = pitch is None  # strides no fused kernel takes: the strided copy's
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
            strided = strided or (a.strides is not None and a.order is None)
            named.append((what, a))
    order = None if strided else _common_order(named)
    if strided or order is _MIXED or (out is None and order is not None and not _keeps_order(src)):
        return _strided_split(op, view, src.obj, split, named, out, handle)
    if out is not None:
        _check_no_overlap(op, named, 1)
    device = _device_for(op, named)
    _order_after_producers(device, handle, named)

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
    pitch: int | None = 0
    strided = any(a.strides is not None and a.order is None for _, a in named)
    if out is not None:
        dst = _recognise(op, "out", out, handle)
        _check_out(op, "out", dst, join.shape, dtype, f"the inputs joined along dim {join.axis}")
        view = _as_strided(dst)  # before _wide_pitch reads a pitched out as row-major
        pitch = _wide_pitch(dst, join.axis)
        strided = strided or pitch is None
        named.append(("out", dst))
    order = None if strided else _common_order(named)
    if strided or order is _MIXED or (dst is None and order is not None and not _keeps_order(first)):
        return _strided_join(op, join, named, out, view if dst is not None else None, handle)
    if dst is not None:
        _check_no_overlap(op, named, len(named) - 1)
    device = _device_for(op, named)
    _order_after_producers(device, handle, named)

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
