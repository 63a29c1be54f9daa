"""The ``strided`` family: a copy between two arrays of any strides, one element a thread.

What the fused kernels cannot take goes here: a transposed or expanded input, a view
with a step, any strides a caller's array has. Both sides are described alike, as a box
of ``rank`` dims (outermost first) with a stride per dim on each side, in elements:

    dst[dst_origin + sum(c[k] * dst_stride[k])] = src[src_origin + sum(c[k] * src_stride[k])]

for every coordinate ``c`` of the box. The planner
(:func:`~ptxgen.kernels.plan_strided.make_strided_plan`) merges the dims it can, puts the
destination's smallest stride innermost (consecutive threads then write consecutive
elements), and cuts what a launch cannot index into several launches.

**Launch contract.** ``count = extent_0 * extent_1 * ... * extent_{rank-1}`` elements,
``cdiv(count, block * UNROLL)`` CTAs of ``block`` threads; element ``i`` (row-major over
the box) goes to thread ``i % block`` of CTA ``i // (block * UNROLL)``, which copies the
elements ``i, i + block, ...`` of its CTA's span: ``UNROLL`` loads in flight a thread,
each warp's stores on consecutive destination elements. A thread finds its coordinates
by dividing its index by the inner extents, innermost first, with the multiply-high
pairs of :func:`ptxgen.arith.runtime_divisor` (``magic{k}``, ``shift{k}``) instead of a
divide instruction; :meth:`StridedCopy.footprints` refuses a launch whose pairs do not
match its extents. Indices stay below 2**31 (``count <= COUNT_MAX``), so the quotient's
33-bit sum fits 32 bits. Negative strides are allowed: the origins say where element 0
lies from the pointers, which point at the lowest element each side touches.

Strides are 32-bit (``mad.wide.s32``, one multiply-add a dim) unless ``wide_strides``,
for a stride past 2**31 elements (64-bit multiply-adds).

**Several pieces a launch** (``pieces > 1``). A split or concat copies each piece by its
own box; launched one at a time, a small op pays a launch and a grid's tail per piece
(2-4 launches where torch's copy takes one). With ``pieces = P`` the kernel holds P
boxes of the same rank, each with its own arguments (``piece{i}_src``, ...), and the
grid has P rows: CTA ``(x, i)`` copies elements ``x * block * UNROLL ...`` of piece
``i``'s box, and the CTAs past a shorter piece's end do nothing. Each piece's code is
its own section of the kernel, which the CTAs of grid row ``i`` reach past ``i`` compares
of ``%ctaid.y`` (one compare-and-branch a section before theirs): no piece loads another's
arguments. The pieces must not overlap one another: one launch reads its sources through
the non-coherent path (``ld.global.nc``), so a piece cannot read what another writes
(the ops refuse overlapping arrays before planning). A launch holds at most
:data:`MAX_ARGS` arguments, the most the runtime's compiled launcher packs
(``MAX_PARAMS`` in runtime/_fastlaunch.c), so the planner
(:func:`~ptxgen.kernels.plan_strided.fused_boxes`) puts ``MAX_ARGS //
args_per_piece(rank)`` pieces (at most :data:`PIECES_PER_LAUNCH`) in one launch.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Mapping
from typing import Any

from ..args import ArgType, Scalar
from ..arith import runtime_divisor
from ..footprint import Footprint, FootprintError, check_launch_block
from ..function import PtxFunction, PtxModule
from ..kernel import KernelBase
from ..ptxtypes import SPECIAL_REGS, Addr, Reg
from ..targets import resolve_target
from .fastcat_common import BYTES_IN, BYTES_OUT, U32, U64, check_block, check_choice, data_regs, ld_type

__all__ = [
    "COUNT_MAX",
    "MAX_ARGS",
    "MAX_RANK",
    "PIECES_PER_LAUNCH",
    "UNROLL",
    "WIDTHS",
    "StridedCopy",
    "args_per_piece",
]

MAX_RANK = 6  # dims after merging; more are launched one outer index at a time
UNROLL = 4  # elements a thread, their loads all in flight before the first store
WIDTHS = (1, 2, 4, 8, 16)  # element sizes: the copy moves bits, so one kernel per size
# The most elements one launch copies: every thread's index, up to the grid's last one,
# stays below 2**31 (block * UNROLL <= 4,096 past count).
COUNT_MAX = (1 << 31) - 4096
PIECES_PER_LAUNCH = 8  # boxes one launch copies (its grid's rows); not the C launcher's MAX_PIECES
MAX_ARGS = 64  # the arguments one launch takes: the runtime's compiled launcher's MAX_PARAMS
I32, I64 = Scalar("i32"), Scalar("i64")


def args_per_piece(rank: int) -> int:
    """A box's arguments: src, dst, count, two origins, three a dim inside dim 0, two strides a dim."""
    return 5 + 3 * (rank - 1) + 2 * rank


class StridedCopy(KernelBase):
    """Copies a box of ``rank`` dims between two arrays of any strides, ``width``-byte elements.

    Arguments, in order: ``src``, ``dst`` (byte pointers to the lowest element each side
    touches), ``count`` (elements), ``src_origin``, ``dst_origin`` (element 0's offset
    from each pointer, in elements), then ``extent{k}, magic{k}, shift{k}`` for each
    inner dim ``k = 1 .. rank-1``, then ``src_stride{k}, dst_stride{k}`` for each dim
    ``k = 0 .. rank-1`` (``i64`` where ``wide_strides``, else ``i32``). Dim 0's extent
    is ``count`` over the others'. With ``pieces > 1``, that list once a piece, each name
    prefixed ``piece{i}_`` (:meth:`arg_name`).
    """

    name = "strided_copy"

    @classmethod
    def cache_key(
        cls,
        *,
        width: int,
        rank: int,
        wide_strides: bool = False,
        pieces: int = 1,
        block: int = 256,
        target: str = "sm_90",
    ) -> Hashable:
        check_choice(width, "width", WIDTHS)
        check_choice(rank, "rank", tuple(range(1, MAX_RANK + 1)))
        check_choice(wide_strides, "wide_strides", (False, True))
        most = min(PIECES_PER_LAUNCH, MAX_ARGS // args_per_piece(rank))
        check_choice(
            pieces,
            f"pieces (of rank {rank}: {args_per_piece(rank)} arguments each)",
            tuple(range(1, most + 1)),
        )
        check_block(block)
        return (width, rank, wide_strides, pieces, block, resolve_target(target))

    def __init__(
        self,
        *,
        width: int,
        rank: int,
        wide_strides: bool = False,
        pieces: int = 1,
        block: int = 256,
        target: str = "sm_90",
    ) -> None:
        self.width, self.rank, self.wide_strides, self.pieces, self.block_size, self.target = self.cache_key(
            width=width, rank=rank, wide_strides=wide_strides, pieces=pieces, block=block, target=target
        )
        self.id = (
            f"{self.name}__w{width}__r{rank}{'__wide' if wide_strides else ''}"
            f"{f'__p{pieces}' if pieces > 1 else ''}__b{block}__{self.target}"
        )
        stride = I64 if wide_strides else I32
        names: list[str] = []
        types: list[ArgType] = []
        for i in range(pieces):
            names += [self.arg_name(base, i) for base in ("src", "dst", "count", "src_origin", "dst_origin")]
            types += [BYTES_IN, BYTES_OUT, U32, U64, U64]
            for k in range(1, rank):
                names += [self.arg_name(f"{base}{k}", i) for base in ("extent", "magic", "shift")]
                types += [U32, U32, U32]
            for k in range(rank):
                names += [self.arg_name(f"src_stride{k}", i), self.arg_name(f"dst_stride{k}", i)]
                types += [stride, stride]
        self.arg_names, self.arg_types = tuple(names), tuple(types)
        self.block = (block, 1, 1)
        self.info: dict[str, Any] = {
            "family": "strided", "width": width, "rank": rank, "wide_strides": wide_strides,
            "pieces": pieces, "block": block,
        }  # fmt: skip
        self._emit()

    def __repr__(self) -> str:
        return (
            f"StridedCopy(width={self.width}, rank={self.rank}, wide_strides={self.wide_strides}, "
            f"pieces={self.pieces}, block={self.block_size}, target={self.target!r})"
        )

    def arg_name(self, base: str, piece: int = 0) -> str:
        """Piece ``piece``'s argument ``base`` (``"count"``, ``"src_stride0"``...): the
        name itself where the kernel copies one piece, else ``piece{i}_`` before it."""
        return base if self.pieces == 1 else f"piece{piece}_{base}"

    def grid(self, *counts: int) -> tuple[int, int, int]:
        """``(cdiv(max(counts), block * UNROLL), pieces, 1)``: the CTAs that cover each
        piece's ``count`` elements, a grid row a piece."""
        if len(counts) != self.pieces:
            raise ValueError(f"{self.name}: give {self.pieces} counts, one a piece, not {len(counts)}")
        return (max(1, -(-max(counts) // (self.block_size * UNROLL))), self.pieces, 1)

    # --- what a launch touches ----------------------------------------------------------

    def extents(self, scalars: Mapping[str, int], piece: int = 0) -> tuple[int, ...]:
        """Every dim of piece ``piece``'s box, dim 0's from its ``count``; raises
        :class:`FootprintError` for scalars the kernel cannot copy safely: a count past
        :data:`COUNT_MAX`, an inner extent of 0, a divisor pair that does not divide by
        its extent, a count that is not a whole number of dim-0 rows."""
        name = functools.partial(self.arg_name, piece=piece)
        count = scalars[name("count")]
        if count > COUNT_MAX:
            raise FootprintError(
                f"{self.name}: {name('count')} = {count} is more than {COUNT_MAX} elements a launch"
            )
        inner = []
        for k in range(1, self.rank):
            extent, magic, shift = (scalars[name(f"{base}{k}")] for base in ("extent", "magic", "shift"))
            if extent < 1:
                raise FootprintError(
                    f"{self.name}: {name(f'extent{k}')} = {extent}; every inner extent must be >= 1"
                )
            if (magic, shift) != runtime_divisor(extent):
                raise FootprintError(
                    f"{self.name}: {name(f'magic{k}')}, {name(f'shift{k}')} = {magic}, {shift} "
                    f"do not divide by {name(f'extent{k}')} = {extent}; "
                    f"pass ptxgen.arith.runtime_divisor({extent})"
                )
            inner.append(extent)
        rows, rest = divmod(count, math.prod(inner))
        if rest:
            raise FootprintError(
                f"{self.name}: {name('count')} = {count} is not a whole number of rows "
                f"of {math.prod(inner)} elements"
            )
        return (rows, *inner)

    def footprints(
        self, grid: tuple[int, int, int], block: tuple[int, int, int], scalars: Mapping[str, int]
    ) -> tuple[Footprint, ...]:
        """What a launch touches through each piece's ``src`` and ``dst``, in that order:
        from each pointer, the elements up to the largest offset of the box. Raises
        :class:`FootprintError` where an offset would fall below the pointer (an origin
        too small for a negative stride), or for scalars :meth:`extents` refuses, or a
        grid past the 2**31 indices, short of a piece's count, or not of one row a piece."""
        check_launch_block(self.name, block, self.block)
        if grid[0] * self.block_size * UNROLL > 1 << 31:
            raise FootprintError(f"{self.name}: grid.x = {grid[0]} gives thread indices past 2**31")
        if self.pieces > 1 and tuple(grid[1:]) != (self.pieces, 1):
            raise FootprintError(f"{self.name}: grid {tuple(grid)} is not of {self.pieces} rows, one a piece")
        found = []
        for piece in range(self.pieces):
            name = functools.partial(self.arg_name, piece=piece)
            extents = self.extents(scalars, piece)
            count, per_cta = scalars[name("count")], self.block_size * UNROLL
            if grid[0] * per_cta < count:  # a short grid would copy the start of the box, silently
                raise FootprintError(
                    f"{self.name}: grid.x = {grid[0]} covers {grid[0] * per_cta} elements and "
                    f"{name('count')} = {count} needs {-(-count // per_cta)} CTAs of {per_cta}"
                )
            for side, writes in (("src", False), ("dst", True)):
                elements = 0
                if count:
                    strides = [scalars[name(f"{side}_stride{k}")] for k in range(self.rank)]
                    origin = scalars[name(f"{side}_origin")]
                    low = origin + sum(min(0, (e - 1) * s) for e, s in zip(extents, strides))
                    if low < 0:
                        raise FootprintError(
                            f"{self.name}: {name(f'{side}_origin')} = {origin} leaves element offsets "
                            f"down to {low}, below the pointer; the pointer must be the lowest element "
                            "the copy touches"
                        )
                    elements = origin + sum(max(0, (e - 1) * s) for e, s in zip(extents, strides)) + 1
                found.append(Footprint(name(side), elements, self.width, self.width, writes=writes))
        return tuple(found)

    # --- emission --------------------------------------------------------------------

    def _emit(self) -> None:
        block, rank, width, pieces = self.block_size, self.rank, self.width, self.pieces
        per_cta = block * UNROLL
        launch = (
            f"Launch: grid (cdiv(count, {per_cta}), 1, 1), block ({block}, 1, 1)."
            if pieces == 1
            else f"Launch: grid (cdiv(the largest count, {per_cta}), {pieces}, 1), block ({block}, 1, 1):"
        )
        module = PtxModule(
            self.target,
            comment=[
                f"{self.name}: {width}-byte elements, a box of {rank} dim{'s' * (rank > 1)}"
                f"{f' for each of {pieces} pieces' if pieces > 1 else ''}, "
                f"{'64' if self.wide_strides else '32'}-bit strides, block {block},",
                f"for {self.target} and newer.",
                "Written by ptxgen; regenerate rather than edit.",
                "",
                "dst[dst_origin + sum(c[k] * dst_stride[k])] = src[src_origin + sum(c[k] * src_stride[k])]",
                "for every coordinate c of the box, element i (row-major) by thread i % block",
                f"of CTA i / {per_cta}, {UNROLL} elements a thread.",
                "",
                launch,
                *(["grid row i copies piece i's box, its arguments named piece<i>_."] if pieces > 1 else []),
            ],
        )
        fn = module.entry(self.entry_point_name)
        what = {
            "src": "the lowest source element the copy reads",
            "dst": "the lowest destination element the copy writes",
            "count": f"elements to copy, at most {COUNT_MAX}",
            "src_origin": "element 0's offset from src, in elements",
            "dst_origin": "element 0's offset from dst, in elements",
        }
        for name, t in zip(self.arg_names, self.arg_types):
            base = name.split("_", 1)[1] if pieces > 1 else name
            fn.param(name, t.ptx_type, comment=f"{t}: {what[base] if base in what else _describe(base)}")
        fn.directive(".reqntid", block, 1, 1)

        if pieces == 1:
            p = fn.load_params()
            self._negate_extents(fn, p)
            self._emit_elements(fn, p, self._first_element(fn))
            return self._finish(module, fn)
        first = self._first_element(fn)
        piece = fn.reg("piece", "u32")
        fn.inst("mov.u32", piece, SPECIAL_REGS["ctaid.y"], comment="grid row i copies piece i")
        for i in range(pieces):
            fn.banner(f"piece {i}: the CTAs of grid row {i}, with piece {i}'s arguments")
            other = fn.reg(f"not_piece{i}", "pred")
            fn.inst("setp.ne.u32", other, piece, i)
            with fn.unless(other, f"after_piece{i}"):
                regs = {}
                for param, arg_type in zip(fn.params, self.arg_types):
                    if param.name.startswith(f"piece{i}_"):
                        regs[param.name.split("_", 1)[1]] = reg = fn.reg(param.name, arg_type.ptx_type)
                        fn.inst(f"ld.param.{reg.type}", reg, Addr(param))
                self._negate_extents(fn, regs)
                self._emit_elements(fn, regs, first)
        fn.inst("ret", comment="a grid row past the pieces: nothing to copy")
        return self._finish(module, fn)

    def _finish(self, module: PtxModule, fn: PtxFunction) -> None:
        self.ptx_version = module.version
        self.kernel_source = module.header()
        self.entry_point_source = fn.render()

    def _negate_extents(self, fn: PtxFunction, p: dict[str, Reg]) -> None:
        """``minus_extent{k}`` beside each inner extent in ``p``: a coordinate is then
        ``rest + quotient * -extent``, one multiply-add."""
        for k in range(1, self.rank):
            neg = fn.reg(f"minus_extent{k}", "u32")
            fn.inst("sub.u32", neg, 0, p[f"extent{k}"], comment=f"-extent{k}: c{k} = rest + q * -extent{k}")
            p[f"minus_extent{k}"] = neg

    def _first_element(self, fn: PtxFunction) -> Reg:
        """The index in its box of this thread's first element."""
        block = self.block_size
        cta, thread, first = fn.reg("cta", "u32"), fn.reg("thread", "u32"), fn.reg("first", "u32")
        fn.banner(f"this thread's {UNROLL} elements: first, first + {block}, ...")
        fn.inst("mov.u32", cta, SPECIAL_REGS["ctaid.x"])
        fn.inst("mov.u32", thread, SPECIAL_REGS["tid.x"])
        fn.inst("mad.lo.u32", first, cta, block * UNROLL, thread, comment=f"ctaid * {block * UNROLL} + tid")
        return first

    def _emit_elements(self, fn: PtxFunction, p: dict[str, Reg], first: Reg) -> None:
        """One box's copy by this thread: its ``UNROLL`` elements from ``first``, every
        load issued before the first store, then ``ret``. ``p``: the box's arguments'
        registers by their names without a piece's prefix."""
        block, width = self.block_size, self.width
        values, addresses, live = [], [], []
        for u in range(UNROLL):
            fn.banner(f"element {u}: its coordinates, then both offsets, then its load")
            is_live = fn.reg(f"live{u}", "pred")
            index = first
            if u:
                index = fn.reg(f"index{u}", "u32")
                fn.inst("add.u32", index, first, u * block, comment=f"first + {u * block}")
            fn.inst("setp.lt.u32", is_live, index, p["count"], comment="past the end: no load, no store")
            src_addr, dst_addr = self._emit_offsets(fn, p, index, u)
            value = data_regs(fn, f"value{u}", width)
            fn.inst(f"ld.global.nc.{ld_type(width)}", value, Addr(src_addr), guard=is_live)
            values.append(value)
            addresses.append(dst_addr)
            live.append(is_live)
        fn.banner(f"the {UNROLL} stores, after every load was issued")
        for value, dst_addr, is_live in zip(values, addresses, live):
            fn.inst(f"st.global.{ld_type(width)}", Addr(dst_addr), value, guard=is_live)
        fn.inst("ret")

    def _emit_offsets(self, fn: PtxFunction, p: dict[str, Reg], index: Reg, u: int) -> tuple[Reg, Reg]:
        """Both byte addresses of element ``index``: divide it by the inner extents,
        innermost first, each remainder a coordinate; add coordinate times stride each side."""
        rank, width = self.rank, self.width
        offsets = {side: fn.reg(f"{side}_offset{u}", "u64") for side in ("src", "dst")}
        for side, off in offsets.items():
            fn.inst("mov.u64", off, p[f"{side}_origin"])
        rest = index  # the index with the dims inner to k divided out: c0 .. ck row-major
        for k in reversed(range(rank)):
            if k == 0:
                coord = rest  # what is left after every inner dim is dim 0's coordinate
            else:
                high, total = fn.reg(f"high{u}_{k}", "u32"), fn.reg(f"sum{u}_{k}", "u32")
                quotient, coord = fn.reg(f"rest{u}_{k - 1}", "u32"), fn.reg(f"c{u}_{k}", "u32")
                fn.inst("mul.hi.u32", high, rest, p[f"magic{k}"], comment=f"rest / extent{k}, as")
                fn.inst("add.u32", total, high, rest, comment="  (mulhi(rest, magic) + rest) >> shift")
                fn.inst("shr.b32", quotient, total, p[f"shift{k}"], comment="  (rest < 2**31: no carry)")
                fn.inst(
                    "mad.lo.u32",
                    coord,
                    quotient,
                    p[f"minus_extent{k}"],
                    rest,
                    comment=f"c{k} = rest % extent{k}",
                )
            for side, off in offsets.items():
                stride = p[f"{side}_stride{k}"]
                if self.wide_strides:
                    wide = fn.reg(f"{side}_c{u}_{k}", "u64")
                    fn.inst("cvt.u64.u32", wide, coord)
                    fn.inst("mad.lo.s64", off, wide, stride, off, comment=f"+= c{k} * {side}_stride{k}")
                else:
                    fn.inst("mad.wide.s32", off, coord, stride, off, comment=f"+= c{k} * {side}_stride{k}")
            if k:
                rest = quotient
        addresses = []
        for side, off in offsets.items():
            addr = fn.reg(f"{side}_addr{u}", "u64")
            if width == 1:
                fn.inst("add.u64", addr, p[side], off, comment=f"&{side}[{side}_offset]")
            else:
                fn.inst(
                    "mad.lo.u64",
                    addr,
                    off,
                    width,
                    p[side],
                    comment=f"&{side}[{side}_offset], {width} bytes each",
                )
            addresses.append(addr)
        return addresses[0], addresses[1]


def _describe(name: str) -> str:
    """The comment of a per-dim argument (no parentheses: readers split the list on them)."""
    for stem, text in (
        ("extent", "its extent"),
        ("magic", "the multiplier runtime_divisor gives for its extent"),
        ("shift", "the shift runtime_divisor gives for its extent"),
        ("src_stride", "the source's step along it, in elements"),
        ("dst_stride", "the destination's step along it, in elements"),
    ):
        if name.startswith(stem) and name[len(stem) :].isdigit():
            return f"dim {name[len(stem) :]}: {text}"
    raise ValueError(f"no description for argument {name!r}")
