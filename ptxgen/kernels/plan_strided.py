"""Planning a split or concat of arrays of any strides: the launches of the strided family.

The fused kernels take arrays whose pieces are rows of byte ranges in memory: row-major,
dense in another order (channels_last), or the wide array pitched. Anything else (a
transposed or expanded input, a view with a step, an ``out=`` of any strides) is planned
here, each piece a box for :class:`~ptxgen.kernels.strided.StridedCopy`:

1. The piece's box: the wide array's shape with the piece's extent along the axis, its
   wide-side pointer moved to the piece's first element.
2. Dims of extent 1 go; the rest are ordered by the destination's stride, largest first,
   so the innermost dim is the destination's smallest step and a warp's stores land on
   neighbouring elements (what TensorIterator does for torch's copies, for the same reason:
   a store that fills part of a sector costs a read of the rest).
3. Neighbouring dims that step alike on both sides merge into one: a row-major piece
   of a row-major array is one dim, whatever its rank.
4. What one launch cannot take is cut: more than ``MAX_RANK`` dims, one outer index a
   launch; more than ``COUNT_MAX`` elements (indices are 32-bit), a range of outer rows a
   launch. Strides past 32 bits take the kernel's 64-bit form.
5. The pieces left whole (one box each, nearly always all of them) share launches, a
   grid row a piece (:func:`fused_boxes`): a split or concat of 2-8 small pieces is one
   launch, as torch's copy is, not one a piece.

Like :mod:`ptxgen.kernels.plan`, standard library only; the plan is a :class:`Plan` of
:class:`Step`\\ s whose pointers are :class:`Ptr`\\ s: ``WIDE`` for ``dy`` of a split or ``y``
of a concat, ``i`` for piece ``i``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..arith import runtime_divisor
from .fastcat import GpuTraits
from .plan import MAX_STEPS, OPS, WIDE, Plan, Ptr, Step
from .strided import (
    COUNT_MAX,
    MAX_ARGS,
    MAX_RANK,
    PIECES_PER_LAUNCH,
    UNROLL,
    WIDTHS,
    StridedCopy,
    args_per_piece,
)

__all__ = ["Box", "Dim", "StridedProblem", "copy_boxes", "fused_boxes", "make_strided_plan", "merged_dims"]

Dim = tuple[int, int, int]  # (extent, source stride, destination stride), strides in elements
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1


@dataclass(frozen=True)
class StridedProblem:
    """A split (``op="backward"``: the wide array is read) or a concat (``"forward"``: it
    is written) of arrays of any strides, in elements: the wide array of ``shape`` and
    ``wide_strides``, cut along ``axis`` into pieces of ``sizes``, piece ``i`` with
    ``piece_strides[i]``. ``itemsize``: the element's bytes."""

    op: str
    itemsize: int
    shape: tuple[int, ...]
    axis: int
    sizes: tuple[int, ...]
    wide_strides: tuple[int, ...]
    piece_strides: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"op {self.op!r} is not one of {', '.join(OPS)}")
        if self.itemsize not in WIDTHS:
            raise ValueError(f"itemsize {self.itemsize!r} is not one of {', '.join(map(str, WIDTHS))}")
        rank = len(self.shape)
        if not 0 <= self.axis < rank:
            raise ValueError(f"axis {self.axis} is out of range for rank {rank}")
        if sum(self.sizes) != self.shape[self.axis]:
            raise ValueError(f"sizes {list(self.sizes)} do not sum to the axis's {self.shape[self.axis]}")
        strides = (self.wide_strides, *self.piece_strides)
        if len(self.piece_strides) != len(self.sizes) or any(len(s) != rank for s in strides):
            raise ValueError(
                f"give {rank} strides for the wide array and for each of {len(self.sizes)} pieces"
            )

    @property
    def pieces(self) -> int:
        return len(self.sizes)

    def piece_shape(self, index: int) -> tuple[int, ...]:
        return (*self.shape[: self.axis], self.sizes[index], *self.shape[self.axis + 1 :])


def make_strided_plan(problem: StridedProblem, traits: GpuTraits) -> Plan:
    """The launches of ``problem``: each non-empty piece copied by the strided family,
    the pieces one launch takes (:func:`fused_boxes`) copied by one."""
    boxes: list[list[Box]] = []  # each piece's launches
    chosen: list[str] = []
    first = 0  # the piece's first index along the axis
    step = problem.wide_strides[problem.axis] * problem.itemsize
    for i, size in enumerate(problem.sizes):
        wide, piece = Ptr(WIDE, first * step), Ptr(i, 0)
        if problem.op == "backward":
            ends = (wide, piece, problem.wide_strides, problem.piece_strides[i])
        else:
            ends = (piece, wide, problem.piece_strides[i], problem.wide_strides)
        found = copy_boxes(*ends, problem.piece_shape(i), problem.itemsize, traits)
        boxes.append(found)
        chosen.append("strided" if found else "")
        if sum(map(len, boxes)) > MAX_STEPS:
            raise ValueError(
                f"channel_cat_{problem.op}: shape {problem.shape} would need more than {MAX_STEPS} "
                "launches of the strided copy; refused (no array that fits in a GPU's memory needs that many)"
            )
        first += size
    steps = [_launch(group, problem.itemsize, traits) for group in fused_boxes(boxes)]
    return Plan(problem, tuple(steps), tuple(chosen))  # type: ignore[arg-type]


def fused_boxes(boxes: Sequence[Sequence[Box]]) -> list[list[Box]]:
    """Each piece's boxes (``boxes[i]``: piece ``i``'s) grouped into the plan's launches.
    The pieces copied by one box each share launches, in order, as many a launch as its
    arguments allow (:data:`~ptxgen.kernels.strided.MAX_ARGS`: fewer as the launch's
    rank grows), a box of fewer dims than the launch's padded to its rank; a piece cut
    into several boxes keeps a launch a box."""
    launches: list[list[Box]] = []
    group: list[Box] = []
    for box in (piece[0] for piece in boxes if len(piece) == 1):
        rank = max(box.rank, *(b.rank for b in group)) if group else box.rank
        if group and (len(group) == PIECES_PER_LAUNCH or (len(group) + 1) * args_per_piece(rank) > MAX_ARGS):
            launches.append(group)
            group = []
        group.append(box)
    if group:
        launches.append(group)
    return launches + [[box] for piece in boxes if len(piece) > 1 for box in piece]


def merged_dims(shape: Sequence[int], src_strides: Sequence[int], dst_strides: Sequence[int]) -> list[Dim]:
    """The box of a copy as few dims as it can be: extent-1 dims dropped, the rest ordered
    by the destination's stride (largest first), neighbours that step alike on both sides
    merged. An empty list for one element."""
    dims = sorted(
        ((e, s, d) for e, s, d in zip(shape, src_strides, dst_strides) if e != 1),
        key=lambda dim: (abs(dim[2]), abs(dim[1])),
        reverse=True,
    )
    merged: list[Dim] = []
    for extent, src, dst in dims:
        if merged:
            outer, outer_src, outer_dst = merged[-1]
            if outer_src == extent * src and outer_dst == extent * dst:
                merged[-1] = (outer * extent, src, dst)
                continue
        merged.append((extent, src, dst))
    return merged


@dataclass(frozen=True)
class Box:
    """What one piece's launch copies: ``dims`` (outermost first; none for one element)
    between ``src`` and ``dst``, each the address of element 0."""

    dims: tuple[Dim, ...]
    src: Ptr
    dst: Ptr

    @property
    def rank(self) -> int:
        return len(self.dims) or 1

    def padded(self, rank: int) -> tuple[Dim, ...]:
        """The dims as ``rank`` of them: dims of extent 1 outermost (they move nothing)."""
        dims = self.dims or ((1, 0, 0),)
        return ((1, 0, 0),) * (rank - len(dims)) + dims


def copy_boxes(
    src: Ptr,
    dst: Ptr,
    src_strides: Sequence[int],
    dst_strides: Sequence[int],
    shape: Sequence[int],
    itemsize: int,
    traits: GpuTraits,
) -> list[Box]:
    """The boxes, a launch each, that copy the box ``shape`` from ``src`` to ``dst`` (each
    the address of element 0, strides in elements); none for an empty box."""
    if 0 in shape:
        return []
    dims = merged_dims(shape, src_strides, dst_strides)
    # at most this many elements a launch: 32-bit indices, and the part's grid limit
    limit = min(COUNT_MAX, traits.max_grid_x * StridedCopy(width=itemsize, rank=1).block_size * UNROLL)
    return list(_cut(dims, src, dst, itemsize, limit))


def _cut(dims: list[Dim], src: Ptr, dst: Ptr, itemsize: int, limit: int) -> Iterator[Box]:
    count = math.prod(e for e, _, _ in dims)
    if len(dims) > 1 and (len(dims) > MAX_RANK or math.prod(e for e, _, _ in dims[1:]) > limit):
        # too many dims, or too much inside one outer index: one launch per outer index
        extent, src_step, dst_step = dims[0]
        for c in range(extent):
            yield from _cut(dims[1:], src + c * src_step * itemsize, dst + c * dst_step * itemsize,
                            itemsize, limit)  # fmt: skip
    elif count > limit:  # a range of outer rows a launch
        extent, src_step, dst_step = dims[0]
        rows = limit // math.prod(e for e, _, _ in dims[1:])
        for r in range(0, extent, rows):
            n = min(rows, extent - r)
            yield Box(((n, src_step, dst_step), *dims[1:]), src + r * src_step * itemsize,
                      dst + r * dst_step * itemsize)  # fmt: skip
    else:
        yield Box(tuple(dims), src, dst)


def _launch(boxes: Sequence[Box], itemsize: int, traits: GpuTraits) -> Step:
    """One launch over ``boxes``, a grid row each, all at the rank of the one of most
    dims: each pointer moved to the lowest element its side touches (a negative stride
    reaches below element 0), the offset back to element 0 passed as the origin."""
    rank = max(box.rank for box in boxes)
    wide = any(
        not _I32_MIN <= s <= _I32_MAX for box in boxes for _, src_s, dst_s in box.dims for s in (src_s, dst_s)
    )
    kernel = StridedCopy(
        width=itemsize, rank=rank, wide_strides=wide, pieces=len(boxes), target=traits.target
    )
    scalars: dict[str, int | Ptr] = {}
    counts = []
    for i, box in enumerate(boxes):
        dims = box.padded(rank)
        src_origin = -sum(min(0, (e - 1) * s) for e, s, _ in dims)
        dst_origin = -sum(min(0, (e - 1) * d) for e, _, d in dims)
        counts.append(math.prod(e for e, _, _ in dims))
        given: dict[str, int | Ptr] = {
            "src": box.src + -src_origin * itemsize,
            "dst": box.dst + -dst_origin * itemsize,
            "count": counts[-1],
            "src_origin": src_origin,
            "dst_origin": dst_origin,
        }
        for k, (extent, src_stride, dst_stride) in enumerate(dims):
            if k:
                magic, shift = runtime_divisor(extent)
                given.update({f"extent{k}": extent, f"magic{k}": magic, f"shift{k}": shift})
            given.update({f"src_stride{k}": src_stride, f"dst_stride{k}": dst_stride})
        scalars.update({kernel.arg_name(name, i): value for name, value in given.items()})
    return Step(kernel, kernel.grid(*counts), kernel.block, tuple(scalars[name] for name in kernel.arg_names))
