"""What the ops check and plan for arrays the fused kernels cannot take: any strides.

:mod:`runtime.op_routes` takes this road for a call once it has read and checked every
argument's shape and dtype, when some array is neither row-major nor dense in the order
the others share nor a pitched wide array: a transposed or expanded input, a view with
a step, an ``out=`` of any strides, or arrays dense in different orders. Each piece is
then one strided copy (:mod:`ptxgen.kernels.plan_strided`): correct for any strides,
one element a thread, where the fused kernels move 16-byte vectors.

The checks here, all before anything is allocated or launched: no output gives two of
its elements one address (an expanded ``out=``: :func:`check_own_memory`), and no output
shares a byte with an input or another output (:func:`check_disjoint`, the ops' one
overlap test, for every route). Arrays of any strides are compared by the span from
their lowest byte to their highest (:func:`span`), so two outputs interleaved in one
buffer (``x[:, ::2]`` and ``x[:, 1::2]``) are refused too, though they share no element.
The op makes its results row-major, of the inputs' kind (torch, CuPy, DeviceArray).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ptxgen.kernels.plan_strided import StridedProblem, make_strided_plan

from .plan import DeviceTraits, Plan

__all__ = ["Strided", "check_disjoint", "check_own_memory", "row_major_strides", "span", "strided_plan"]


class Strided(NamedTuple):
    """One array as the strided path sees it: element 0's address, shape, strides in elements."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    itemsize: int


def row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def span(a: Strided) -> tuple[int, int]:
    """``(lowest byte, past the highest)`` of ``a``'s elements; ``(ptr, ptr)`` when empty."""
    if 0 in a.shape:
        return a.ptr, a.ptr
    low = sum(min(0, (e - 1) * s) for e, s in zip(a.shape, a.strides))
    high = sum(max(0, (e - 1) * s) for e, s in zip(a.shape, a.strides))
    return a.ptr + low * a.itemsize, a.ptr + (high + 1) * a.itemsize


def check_own_memory(op: str, what: str, a: Strided) -> None:
    """Refuse an output two of whose elements share an address (stride 0 on a dim of more
    than one, or dims that step into each other): which one the op wrote would be a race.
    Sufficient, not exact: dims by increasing step, each must step past all inside it."""
    if 0 in a.shape:
        return
    reach = 0  # elements the dims inside this one span, less one
    for extent, stride in sorted(
        ((e, abs(s)) for e, s in zip(a.shape, a.strides) if e > 1), key=lambda d: d[1]
    ):
        if stride <= reach:
            raise ValueError(
                f"{op}: {what} (shape {tuple(a.shape)}, strides {tuple(a.strides)}) gives more than one "
                "of its elements the same memory (an expanded or overlapping view); an output needs "
                "memory of its own for every element"
            )
        reach += (extent - 1) * stride


_BY_SPAN = " (arrays of any strides are compared by the span from their lowest byte to their highest)"


def check_disjoint(
    op: str, spans: Sequence[tuple[str, int, int]], first_output: int, any_strides: bool = False
) -> None:
    """No output shares a byte with an input or with another output (inputs may share
    memory with each other: they are only read). ``spans`` lists each array's name and
    bytes ``[lo, hi)``, the inputs first, the outputs from ``first_output``; pairs are
    checked in that order. ``any_strides``: the arrays were compared by their spans
    from their lowest byte to their highest (the strided copy's), which the error says."""
    for i, (what_a, lo_a, hi_a) in enumerate(spans):
        if lo_a >= hi_a:
            continue
        for what_b, lo_b, hi_b in spans[max(i + 1, first_output) :]:
            if lo_b < hi_b and lo_a < hi_b and lo_b < hi_a:
                low, high = max(lo_a, lo_b), min(hi_a, hi_b)
                raise ValueError(
                    f"{op}: {what_a} and {what_b} overlap (bytes {low:#x}..{high:#x}); an output may "
                    f"not share memory with an input or another output{_BY_SPAN if any_strides else ''}"
                )


_PLANS_KEPT = 1024
_plans: dict[tuple[Any, ...], Plan] = {}


def strided_plan(problem: StridedProblem, traits: DeviceTraits) -> Plan:
    """``make_strided_plan``, remembered per problem and traits."""
    key = (problem, traits)
    found = _plans.get(key)
    if found is None:
        if len(_plans) >= _PLANS_KEPT:
            _plans.clear()
        found = _plans[key] = make_strided_plan(problem, traits)
    return found
