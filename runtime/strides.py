"""Dense arrays in another memory order than row-major: channels_last, and the rest.

An array is dense when its elements fill one block of memory, each once: its strides
are a row-major array's strides for some order of its dims (PyTorch's
``is_non_overlapping_and_dense``). A channels_last (N, C, H, W) tensor is the
row-major (N, H, W, C) array in memory: order (0, 2, 3, 1). Splitting it along C is
then the same copy as splitting that row-major array along its last dim, so the fused
kernels move it at the contiguous speed, and the results keep the order.

Orders list dims outermost first. Dims of extent 1 may have any stride; they are
placed where their logical position puts them, so a row-major array always gets the
identity order.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "dense_strides",
    "describe_order",
    "in_order",
    "inverse",
    "is_row_major",
    "memory_order",
    "permuted",
]


_ORDERS_KEPT = 4096  # remembered (shape, strides); past this the table starts over
_orders: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[int, ...] | None] = {}


def memory_order(shape: Sequence[int], strides: Sequence[int]) -> tuple[int, ...] | None:
    """The order of a dense array's dims in memory (outermost first), or None where the
    strides (in elements) leave gaps, overlap or repeat (a sliced, expanded or
    pitched array). Remembered per shape and strides: a model passes a few, every call."""
    key = (tuple(shape), tuple(strides))
    try:
        return _orders[key]
    except KeyError:
        pass
    if len(_orders) >= _ORDERS_KEPT:
        _orders.clear()
    found = _orders[key] = _memory_order(*key)
    return found


def _memory_order(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, ...] | None:
    if len(shape) != len(strides):
        return None
    if 0 in shape:
        return tuple(range(len(shape)))  # nothing in memory: any order, the logical one
    # Larger strides first; a dim of extent 1 sorts by its position among the others.
    keyed = [(strides[d] if shape[d] != 1 else None, d) for d in range(len(shape))]
    order = _order_of(keyed)
    return order if tuple(strides[d] for d in order if shape[d] != 1) == _expected(shape, order) else None


def _order_of(keyed: list[tuple[int | None, int]]) -> tuple[int, ...]:
    moving = sorted((k for k in keyed if k[0] is not None), key=lambda k: (-k[0], k[1]))
    order = [d for _, d in moving]
    for stride, d in keyed:  # extent-1 dims: just before the first dim logically after them
        if stride is None:
            after = [i for i, o in enumerate(order) if o > d]
            order.insert(after[0] if after else len(order), d)
    return tuple(order)


def _expected(shape: Sequence[int], order: Sequence[int]) -> tuple[int, ...]:
    """The strides a dense array in ``order`` has, for its dims of extent above 1."""
    out, step = [], 1
    for d in reversed(order):
        if shape[d] != 1:
            out.append(step)
        step *= shape[d]
    return tuple(reversed(out))


def dense_strides(shape: Sequence[int], order: Sequence[int]) -> tuple[int, ...]:
    """The element strides of a dense array of ``shape`` laid out in ``order``; an
    extent of 0 steps as 1, as torch's own strides do."""
    strides = [0] * len(shape)
    step = 1
    for d in reversed(order):
        strides[d] = step
        step *= max(shape[d], 1)
    return tuple(strides)


def permuted(shape: Sequence[int], order: Sequence[int]) -> tuple[int, ...]:
    """``shape`` in memory order: the row-major array the memory holds."""
    return tuple(shape[d] for d in order)


def is_row_major(order: Sequence[int]) -> bool:
    return all(d == i for i, d in enumerate(order))


def inverse(order: Sequence[int]) -> tuple[int, ...]:
    """The permutation that takes an array in memory order back to its logical dims."""
    out = [0] * len(order)
    for i, d in enumerate(order):
        out[d] = i
    return tuple(out)


def in_order(shape: Sequence[int], strides: Sequence[int] | None, order: Sequence[int] | None) -> bool:
    """Whether an array of ``shape`` and ``strides`` (None: row-major) is dense in
    ``order`` (None: row-major). Dims of extent 1 may have any stride, and an empty
    array is in every order (nothing of it is in memory)."""
    if 0 in shape:
        return True
    have = strides if strides is not None else dense_strides(shape, range(len(shape)))
    want = dense_strides(shape, order if order is not None else range(len(shape)))
    return all(h == w for n, h, w in zip(shape, have, want) if n != 1)


def describe_order(order: Sequence[int] | None, rank: int) -> str:
    """How an error names a memory order: "row-major", "channels_last", or the order."""
    if order is None or is_row_major(order):
        return "row-major"
    if rank == 4 and tuple(order) == (0, 2, 3, 1):
        return "channels_last (memory order (0, 2, 3, 1))"
    return f"memory order {tuple(order)}"
