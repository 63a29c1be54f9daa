"""The ``rect`` family: one chunk moved as 2-D tiles, one tile per CTA, no division.

``FastcatRect`` copies a rectangle of ``rows x vectors`` accesses of ``width`` bytes
between the row side (``rows`` rows of ``row_pitch`` bytes; ``row_base`` points at the
chunk's first byte in row 0) and the chunk (``rows`` rows of ``chunk_pitch`` bytes).
Backward gathers row side -> chunk, forward scatters chunk -> row side.

Why it exists: ``FastcatVec`` spreads the work over one persistent wave of CTAs and
finds each slot's (row, vector) with a 64-bit division. On an H200 a persistent wave
tops out near 92% of ``cuMemcpyDtoD`` whatever its shape, while a grid of small CTAs,
one piece of work each, reaches the driver's copy (docs/perf/kernels.md); with one
piece of work per CTA, the vec kernel's nine divisions a thread cost more than the copy.

So here a CTA owns a tile of ``tile_rows x cols`` accesses: ``cols`` (a power of two)
consecutive vectors of ``tile_rows = block * unroll / cols`` consecutive rows. A
thread's slot ``u`` is tile element ``u * block + thread``: its row and column are that
index shifted and masked by constants, so nothing divides. ``ctaid.x`` walks row
tiles and ``ctaid.y`` column tiles, both grid-stride, so any grid does the whole job
(the planner launches one CTA per tile). 64-bit rows and addresses.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from ..footprint import Footprint, FootprintError
from ..function import PtxModule
from ..kernel import KernelBase
from ..ptxtypes import SPECIAL_REGS, Addr
from ..targets import resolve_target
from .fastcat_common import (
    BYTES_IN,
    BYTES_OUT,
    U32,
    U64,
    WIDTHS,
    check_block,
    check_choice,
    data_regs,
    ld_type,
)

__all__ = ["COLS", "GRID_Y_MAX", "FastcatRect", "rect_cols"]

_DIRECTIONS = ("backward", "forward")
# Vectors a tile row may span: powers of two up to the most accesses a CTA makes.
COLS = tuple(1 << k for k in range(14))  # 1 .. 8192
GRID_Y_MAX = 65535


def rect_cols(vectors: int, block: int, unroll: int) -> int:
    """The tile width the planner uses: the smallest power of two that holds a row's
    ``vectors``, at most one tile's ``block * unroll`` accesses (wider rows take
    several column tiles)."""
    c = 1
    while c < vectors and c < block * unroll:
        c *= 2
    return c


class FastcatRect(KernelBase):
    """A ``rows x vectors`` rectangle of ``width``-byte accesses, 2-D tiles of
    ``block * unroll / cols`` rows by ``cols`` vectors, one tile per CTA.

    Arguments: ``row_base, row_pitch, rows, vectors, chunk_ptr, chunk_pitch``. ``width``
    must divide ``row_base``, ``row_pitch``, ``chunk_ptr`` and ``chunk_pitch`` (the
    planner checks; :meth:`footprints` refuses pitches it does not divide).
    """

    name = "fastcat_rect"

    @classmethod
    def cache_key(
        cls,
        *,
        direction: str,
        width: int,
        cols: int,
        unroll: int = 4,
        block: int = 256,
        target: str = "sm_90",
    ) -> Hashable:
        if direction not in _DIRECTIONS:
            raise ValueError(f"direction {direction!r}; accepted: 'backward', 'forward'")
        target = resolve_target(target)
        check_choice(width, "width", WIDTHS)
        check_block(block)
        check_choice(unroll, "unroll", (1, 2, 4, 8))
        check_choice(cols, "cols", COLS)
        if cols > block * unroll:
            raise ValueError(
                f"cols = {cols} is not accepted with block {block} and unroll {unroll}; "
                f"accepted: a power of two up to block * unroll = {block * unroll}"
            )
        return (direction, width, cols, unroll, block, target)

    def __init__(
        self,
        *,
        direction: str,
        width: int,
        cols: int,
        unroll: int = 4,
        block: int = 256,
        target: str = "sm_90",
    ) -> None:
        (self.direction, self.width, self.cols, self.unroll, self.block_size, self.target) = self.cache_key(
            direction=direction, width=width, cols=cols, unroll=unroll, block=block, target=target
        )
        self.tile_rows = block * unroll // cols
        self.name = f"fastcat_rect_{direction}"  # type: ignore[misc]
        self.id = f"{self.name}__w{width}__c{cols}__u{unroll}__b{block}__{self.target}"
        row_side, chunk_side = (BYTES_IN, BYTES_OUT) if direction == "backward" else (BYTES_OUT, BYTES_IN)
        self.arg_names = ("row_base", "row_pitch", "rows", "vectors", "chunk_ptr", "chunk_pitch")
        self.arg_types = (row_side, U64, U64, U32, chunk_side, U64)
        self.block = (block, 1, 1)
        self.shared_bytes = 0
        self.info: dict[str, Any] = {
            "family": "rect",
            "direction": direction,
            "width": width,
            "cols": cols,
            "tile_rows": self.tile_rows,
            "unroll": unroll,
            "block": block,
        }
        self._emit()

    def __repr__(self) -> str:
        return (
            f"FastcatRect(direction={self.direction!r}, width={self.width}, cols={self.cols}, "
            f"unroll={self.unroll}, block={self.block_size}, target={self.target!r})"
        )

    def grid(self, rows: int, vectors: int) -> tuple[int, int, int]:
        """One CTA per tile (what the planner launches), within the driver's grid limits;
        the kernel strides over both dimensions, so a capped grid still does everything."""
        row_tiles = -(-rows // self.tile_rows)
        col_tiles = -(-vectors // self.cols)
        return (max(1, min(row_tiles, 2**31 - 1)), max(1, min(col_tiles, GRID_Y_MAX)), 1)

    # --- what a launch touches ----------------------------------------------------------

    def footprints(
        self, grid: tuple[int, int, int], block: tuple[int, int, int], scalars: Mapping[str, int]
    ) -> tuple[Footprint, ...]:
        """Exact bytes from each pointer: the row side touches ``(rows - 1) * row_pitch +
        vectors * width``, the chunk ``(rows - 1) * chunk_pitch + vectors * width`` (0 when
        ``rows`` is 0); both pointers ``width``-aligned. Any grid with one CTA in z covers
        every access.

        Raises :class:`FootprintError` where the kernel would misbehave: a pitch ``width``
        does not divide, ``vectors`` outside 1..2**31 (column indices are 32-bit), a row
        of the rectangle wider than either pitch (rows would overlap), a grid with more
        than one CTA in z (each z slice would repeat the copy), or another block shape."""
        if tuple(block) != self.block:
            raise FootprintError(f"{self.name} is built for block {self.block}, not {tuple(block)}")
        if grid[2] != 1:
            raise FootprintError(f"{self.name}: grid {tuple(grid)} must have 1 CTA in z")
        w, rows, n = self.width, scalars["rows"], scalars["vectors"]
        pitches = {"row_pitch": scalars["row_pitch"], "chunk_pitch": scalars["chunk_pitch"]}
        for what, p in pitches.items():
            if p % w:
                raise FootprintError(f"{self.name}: {what} = {p} is not a multiple of the access width {w}")
        if rows > 0 and not 1 <= n <= 1 << 31:
            raise FootprintError(
                f"{self.name}: vectors = {n} is not accepted; accepted: 1..2**31 when rows > 0"
            )
        for what, p in pitches.items():
            if rows > 1 and n * w > p:
                raise FootprintError(
                    f"{self.name}: a row of {n} vectors of {w} bytes is wider than {what} {p}"
                )
        live = rows > 0 and grid[0] > 0 and grid[1] > 0

        def extent(pitch: int) -> int:
            return (rows - 1) * pitch + n * w if live else 0

        backward = self.direction == "backward"
        return (
            Footprint("row_base", extent(pitches["row_pitch"]), 1, w, writes=not backward),
            Footprint("chunk_ptr", extent(pitches["chunk_pitch"]), 1, w, writes=backward),
        )

    # --- emission ------------------------------------------------------------------------

    def _emit(self) -> None:
        w, unroll, block, cols, tile_rows = (
            self.width,
            self.unroll,
            self.block_size,
            self.cols,
            self.tile_rows,
        )
        log_cols = cols.bit_length() - 1
        module = PtxModule(
            self.target,
            comment=[
                f"{self.name}: a rows x vectors rectangle of {w}-byte accesses, in tiles of",
                f"{tile_rows} rows x {cols} vectors, one tile per CTA (ctaid.x: row tile, ctaid.y:",
                "column tile, both grid-stride). A thread's slot u is tile element u*block + tid:",
                "its row and column are shifts and masks of constants. All loads, then all stores.",
            ],
        )
        fn = module.entry(self.entry_point_name)
        params = {n: fn.param(n, t.ptx_type, comment=str(t)) for n, t in zip(self.arg_names, self.arg_types)}
        fn.directive(".maxntid", block, 1, 1)
        reg = fn.reg
        row_base, chunk_base = reg("row_base", "u64"), reg("chunk_base", "u64")
        pitch, chunk_pitch, rows = reg("row_pitch", "u64"), reg("chunk_pitch", "u64"), reg("rows", "u64")
        n_vec, thread = reg("vectors", "u32"), reg("thread", "u32")
        t_row, t_col = reg("t_row", "u32"), reg("t_col", "u32")
        col0, col_step = reg("col0", "u32"), reg("col_step", "u32")
        row0, row_step = reg("row0", "u64"), reg("row_step", "u64")
        left, left32 = reg("left", "u64"), reg("left32", "u32")
        row_tile, chunk_tile = reg("row_tile", "u64"), reg("chunk_tile", "u64")
        row_jump, chunk_jump = reg("row_jump", "u64"), reg("chunk_jump", "u64")
        tmp32, tmp64, r64 = reg("tmp32", "u32"), reg("tmp64", "u64"), reg("r64", "u64")
        done = reg("done", "pred")

        fn.banner("arguments")
        for r, name in ((row_base, "row_base"), (chunk_base, "chunk_ptr")):
            fn.inst("ld.param.u64", r, Addr(params[name]))
            fn.inst("cvta.to.global.u64", r, r)
        fn.inst("ld.param.u64", pitch, Addr(params["row_pitch"]), comment="row-side bytes per row")
        fn.inst("ld.param.u64", chunk_pitch, Addr(params["chunk_pitch"]), comment="chunk bytes per row")
        fn.inst("ld.param.u64", rows, Addr(params["rows"]))
        fn.inst("ld.param.u32", n_vec, Addr(params["vectors"]), comment="accesses per row")

        fn.banner(f"this thread's place in a tile of {tile_rows} rows x {cols} vectors")
        fn.inst("mov.u32", thread, SPECIAL_REGS["tid.x"])
        if cols <= block:
            # A warp covers whole tile rows; every slot of a thread is in the same column.
            fn.inst("shr.u32", t_row, thread, log_cols, comment=f"tid / {cols}: its row in the tile ...")
            fn.inst("and.b32", t_col, thread, cols - 1, comment=f"tid % {cols}: ... and its column")
        else:
            fn.inst("mov.u32", t_row, 0, comment="a tile row is wider than the block: slots move along it")
            fn.inst("mov.u32", t_col, thread)
        # slot u = tile element u*block + tid: (row, column) = (u*block + tid) >> log2(cols), & (cols - 1)
        slot_row = [(u * block) >> log_cols for u in range(unroll)]
        slot_col = [(u * block) & (cols - 1) for u in range(unroll)]
        fn.inst("mov.u32", tmp32, SPECIAL_REGS["nctaid.x"])
        fn.inst("mul.wide.u32", row_step, tmp32, tile_rows, comment="rows a grid of row tiles covers")
        fn.inst("mul.lo.u64", row_jump, row_step, pitch, comment="... as row-side bytes")
        fn.inst("mul.lo.u64", chunk_jump, row_step, chunk_pitch, comment="... as chunk bytes")
        fn.inst("mov.u32", tmp32, SPECIAL_REGS["nctaid.y"])
        fn.inst("shl.b32", col_step, tmp32, log_cols, comment="vectors a grid of column tiles covers")
        fn.inst("mov.u32", tmp32, SPECIAL_REGS["ctaid.y"])
        fn.inst("shl.b32", col0, tmp32, log_cols, comment="this CTA's first column tile")

        col_live = [reg(f"col_live_{u}", "pred") for u in range(unroll)]
        row_off = [reg(f"row_off_{u}", "u64") for u in range(unroll)]
        chunk_off = [reg(f"chunk_off_{u}", "u64") for u in range(unroll)]
        r_u = [reg(f"slot_row_{u}", "u32") for u in range(unroll)]
        col_loop, row_loop, next_col, finish = (
            fn.label("COLUMNS"),
            fn.label("ROWS"),
            fn.label("NEXT"),
            fn.label("DONE"),
        )

        fn.banner("column tiles (ctaid.y, grid-stride)")
        fn.place(col_loop)
        fn.inst("setp.ge.u32", done, col0, n_vec)
        fn.inst("bra", finish, guard=done)
        for u in range(unroll):
            if slot_row[u]:
                fn.inst("add.u32", r_u[u], t_row, slot_row[u], comment=f"slot {u}: its row in the tile ...")
            else:
                fn.inst("mov.u32", r_u[u], t_row, comment=f"slot {u}: its row in the tile ...")
            fn.inst("add.u32", tmp32, t_col, col0, comment="... and its column in the row")
            if slot_col[u]:
                fn.inst("add.u32", tmp32, tmp32, slot_col[u])
            fn.inst("setp.lt.u32", col_live[u], tmp32, n_vec)
            fn.inst("mul.wide.u32", tmp64, tmp32, w)
            fn.inst("cvt.u64.u32", r64, r_u[u])
            fn.inst("mad.lo.u64", row_off[u], r64, pitch, tmp64, comment="its offset in a row-side tile")
            fn.inst("mad.lo.u64", chunk_off[u], r64, chunk_pitch, tmp64, comment="... and in a chunk tile")
        fn.inst("mov.u32", tmp32, SPECIAL_REGS["ctaid.x"])
        fn.inst("mul.wide.u32", row0, tmp32, tile_rows, comment="this CTA's first row tile")
        fn.inst("mad.lo.u64", row_tile, row0, pitch, row_base)
        fn.inst("mad.lo.u64", chunk_tile, row0, chunk_pitch, chunk_base)

        fn.banner(f"row tiles (ctaid.x, grid-stride): {unroll} slots, all loads before the first store")
        fn.place(row_loop)
        fn.inst("setp.ge.u64", done, row0, rows)
        fn.inst("bra", next_col, guard=done)
        fn.inst("sub.u64", left, rows, row0, comment="rows left from this tile on")
        fn.inst("min.u64", left, left, 0xFFFFFFFF, comment="a tile has fewer: compare in 32 bits")
        fn.inst("cvt.u32.u64", left32, left)
        live, srcs, dsts, data = [], [], [], []
        for u in range(unroll):
            ok = reg(f"live_{u}", "pred")
            a, b = reg(f"row_addr_{u}", "u64"), reg(f"chunk_addr_{u}", "u64")
            fn.inst(
                "setp.lt.and.u32", ok, r_u[u], left32, col_live[u], comment=f"slot {u}: inside the rectangle"
            )
            fn.inst("add.u64", a, row_tile, row_off[u])
            fn.inst("add.u64", b, chunk_tile, chunk_off[u])
            live.append(ok)
            srcs.append(a if self.direction == "backward" else b)
            dsts.append(b if self.direction == "backward" else a)
            data.append(data_regs(fn, f"v{u}", w))
        kind = ld_type(w)
        for u in range(unroll):
            fn.inst(
                f"ld.global.nc.{kind}",
                data[u],
                Addr(srcs[u]),
                guard=live[u],
                comment="all loads in flight first",
            )
        for u in range(unroll):
            fn.inst(f"st.global.{kind}", Addr(dsts[u]), data[u], guard=live[u])
        fn.inst("add.u64", row0, row0, row_step)
        fn.inst("add.u64", row_tile, row_tile, row_jump)
        fn.inst("add.u64", chunk_tile, chunk_tile, chunk_jump)
        fn.inst("bra.uni", row_loop)
        fn.place(next_col)
        fn.inst("add.u32", col0, col0, col_step)
        fn.inst("bra.uni", col_loop)
        fn.place(finish)
        fn.inst("ret")
        self.ptx_version = module.version
        self.kernel_source = module.header()
        self.entry_point_source = fn.render()
