"""The ops' common call, checked quickly: the quick path of :mod:`runtime.ops`.

Most calls of ``channel_cat_backward`` and ``channel_cat_forward`` pass DeviceArrays or
plain CUDA torch tensors, all on one GPU, with or without ``out``, and repeat a few
shapes. Those are checked here in full, reading a few attributes of each array and
building no records. What the shape, dtype, device, addresses modulo 16 and stream
decide (the pieces' shapes and sizes, and the launch function) is looked up in one
table, :data:`_quick_calls`, which the same checks in C (``runtime._fastlaunch.QuickOps``,
made by :mod:`runtime.ops`) read too. At the first doubt (another array type, an empty
piece, a misaligned address, a shape or dtype that does not fit, overlap) nothing has
been launched and the general path takes the call over: it accepts it or raises the
error that names the problem.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ptxgen.dtypes import DType

from .arrays import dtype_of_torch
from .device import Device, device_of
from .memory import DeviceArray
from .op_arrays import torch_tensor_class
from .op_plans import _compiled, _Join, _join_shape, _remember, _Split, _split_shape
from .outputs import new_outputs


class _QuickCall(NamedTuple):
    """What a key of :data:`_quick_calls` decides."""

    device: Device  # the plan's; a call made after it closed plans again
    shapes: tuple[tuple[int, ...], ...]  # what the other arrays' shapes must be
    record: _Split | _Join
    launches: dict[int, Callable[..., None]]  # per alignment: launch(wide, *pieces)


_quick_calls: dict[tuple[Any, ...], _QuickCall] = {}


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
    bits each, the wide array's highest): remembered in ``call.launches``, made at the
    first call of those alignments from its plan (:func:`_compiled`), prepared on the stream."""
    found = call.launches.get(aligns)
    if found is not None:
        return found
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
    """:func:`channel_cat_backward` with ``out`` for the common call (see the module's docstring): True
    once launched; False, having done nothing, to leave the call to the general path."""
    if (out.__class__ is not list and out.__class__ is not tuple) or dim.__class__ is not int:
        return False
    if sizes.__class__ is not list and sizes.__class__ is not tuple:
        return False
    for s in sizes:  # exact ints: True equals 1 as a key, but a bool is refused
        if s.__class__ is not int:
            return False
    # Read here too, not only by the general path: the C lane's route for the call would
    # otherwise take every later one, and this table, the faster lane's, never be filled.
    tensor = torch_tensor_class()
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
    _quick_launch(call, dtype, aligns, handle)(ptr, *pieces)
    return True


def _forward_quick(xs: Any, dim: Any, out: Any, handle: int) -> bool:
    """:func:`channel_cat_forward` with ``out`` for the common call; as :func:`_backward_quick`."""
    if (xs.__class__ is not list and xs.__class__ is not tuple) or not xs or dim.__class__ is not int:
        return False
    tensor = torch_tensor_class()
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
    _quick_launch(call, dtype, aligns, handle)(ptr, *pieces)
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
    wide = _wide_facts(dy, torch_tensor_class())
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
    _quick_launch(call, dtype, aligns, handle)(ptr, *pieces)
    return results


def _forward_fresh(xs: Any, dim: Any, handle: int) -> Any:
    """:func:`channel_cat_forward` without ``out`` for the common call; as
    :func:`_backward_fresh` (None leaves the call to the general path)."""
    if (xs.__class__ is not list and xs.__class__ is not tuple) or not xs or dim.__class__ is not int:
        return None
    tensor = torch_tensor_class()
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
    _quick_launch(call, dtype, aligns, handle)(wide[0], *pieces)
    return made[0]
