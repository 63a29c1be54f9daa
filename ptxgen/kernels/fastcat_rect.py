"""The ``rect`` family: direct copies in 2-D tiles, one tile per CTA, no division.

``FastcatRect`` copies a window of ``rows x window_vectors`` accesses of ``width`` bytes
between the row side (``rows`` rows of ``row_pitch`` bytes; ``row_base`` points at the
window's first byte in row 0) and ``chunks`` adjacent chunks (each ``rows`` rows of its own
pitch) that share the window's columns between them. Backward gathers (one chunk) or
splits (several) row side -> chunks; forward scatters or concatenates chunks -> row side.

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

from ..footprint import Footprint, FootprintError, check_launch_block
from ..function import PtxModule
from ..kernel import KernelBase
from ..ptxtypes import SPECIAL_REGS, Addr
from ..targets import resolve_target
from .fastcat_common import (
    MAX_CHUNKS,
    WIDTHS,
    ChunkScratch,
    check_block,
    check_choice,
    check_dependent_launch,
    data_regs,
    emit_dependent_launch,
    ld_type,
    select_chunk,
    window_args,
    window_chunk_vectors,
    window_footprints,
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
    """A window of ``rows x window_vectors`` accesses of ``width`` bytes between the row
    side and ``chunks`` adjacent chunks, in 2-D tiles of ``block * unroll / cols`` rows by
    ``cols`` vectors, one tile per CTA.

    Arguments: ``row_base, row_pitch, rows, window_vectors``, then per chunk ``k``
    ``chunk{k}_ptr, chunk{k}_pitch`` and, with several chunks, ``chunk{k}_start`` (its
    first vector in the window; ascending; chunk 0's is not read) - the arguments of
    :class:`FastcatVec`. ``width`` must divide ``row_base``, ``row_pitch`` and every
    chunk's pointer and pitch (the planner checks; :meth:`footprints` refuses pitches it
    does not divide). A vector's chunk is found once per column tile, out of the row loop.
    """

    @classmethod
    def cache_key(
        cls,
        *,
        direction: str,
        width: int,
        cols: int,
        chunks: int = 1,
        unroll: int = 4,
        block: int = 256,
        target: str = "sm_90",
        dependent_launch: bool = False,
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
        if isinstance(chunks, bool) or not isinstance(chunks, int) or not 1 <= chunks <= MAX_CHUNKS:
            raise ValueError(f"chunks = {chunks!r} is not accepted; accepted: an int in 1..{MAX_CHUNKS}")
        pdl = check_dependent_launch(dependent_launch, target)
        return (direction, width, cols, chunks, unroll, block, target, pdl)

    def __init__(
        self,
        *,
        direction: str,
        width: int,
        cols: int,
        chunks: int = 1,
        unroll: int = 4,
        block: int = 256,
        target: str = "sm_90",
        dependent_launch: bool = False,
    ) -> None:
        (self.direction, self.width, self.cols, self.chunks, self.unroll, self.block_size, self.target,
         self.dependent_launch) = self.cache_key(
            direction=direction, width=width, cols=cols, chunks=chunks, unroll=unroll, block=block,
            target=target, dependent_launch=dependent_launch,
        )  # fmt: skip
        self.tile_rows = block * unroll // cols
        self.name = f"fastcat_rect_{direction}"  # type: ignore[misc]
        tag = "__pdl" if dependent_launch else ""
        self.id = f"{self.name}__w{width}__c{cols}__k{chunks}__u{unroll}__b{block}{tag}__{self.target}"
        self.arg_names, self.arg_types = window_args(chunks, direction == "backward")
        self.block = (block, 1, 1)
        self.shared_bytes = 0
        self.info: dict[str, Any] = {
            "family": "rect",
            "direction": direction,
            "width": width,
            "cols": cols,
            "tile_rows": self.tile_rows,
            "chunks": chunks,
            "unroll": unroll,
            "block": block,
            **({"dependent_launch": True} if dependent_launch else {}),
        }
        self._emit()

    def __repr__(self) -> str:
        return (
            f"FastcatRect(direction={self.direction!r}, width={self.width}, cols={self.cols}, "
            f"chunks={self.chunks}, unroll={self.unroll}, block={self.block_size}, target={self.target!r}, "
            f"dependent_launch={self.dependent_launch})"
        )

    def grid(self, rows: int, window_vectors: int) -> tuple[int, int, int]:
        """One CTA per tile (what the planner launches), within the driver's grid limits;
        the kernel strides over both dimensions, so a capped grid still does everything."""
        row_tiles = -(-rows // self.tile_rows)
        col_tiles = -(-window_vectors // self.cols)
        return (max(1, min(row_tiles, 2**31 - 1)), max(1, min(col_tiles, GRID_Y_MAX)), 1)

    # --- what a launch touches ----------------------------------------------------------

    def chunk_vectors(self, scalars: Mapping[str, int]) -> tuple[int, ...]:
        """How many vectors of each row each chunk receives (backward) or gives (forward),
        as for :class:`FastcatVec`."""
        return window_chunk_vectors(self.name, self.chunks, scalars)

    def footprints(
        self, grid: tuple[int, int, int], block: tuple[int, int, int], scalars: Mapping[str, int]
    ) -> tuple[Footprint, ...]:
        """Exact bytes from each pointer: the row side touches ``(rows - 1) * row_pitch +
        window_vectors * width``, chunk ``k`` ``(rows - 1) * chunk{k}_pitch + n_k * width``
        (``n_k`` from :meth:`chunk_vectors`; 0 when ``n_k`` or ``rows`` is 0); every pointer
        ``width``-aligned. Any grid with one CTA in z covers every access.

        Raises :class:`FootprintError` where the kernel would misbehave: a pitch ``width``
        does not divide, ``window_vectors`` above 2**31 (column indices are 32-bit) or 0
        with rows to copy, a window wider than the row pitch, a chunk's vectors wider than its pitch (rows
        would overlap), starts that do not ascend, a grid with more than one CTA in z
        (each z slice would repeat the copy), or another block shape."""
        check_launch_block(self.name, block, self.block)
        if grid[2] != 1:
            raise FootprintError(f"{self.name}: grid {tuple(grid)} must have 1 CTA in z")
        live = grid[0] > 0 and grid[1] > 0
        return window_footprints(
            self.name, self.width, self.chunks, scalars, live, self.direction == "backward"
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
        chunks = self.chunks
        log_cols = cols.bit_length() - 1
        backward = self.direction == "backward"
        module = PtxModule(
            self.target,
            comment=[
                f"{self.name}: a rows x window_vectors window of {w}-byte accesses and {chunks} chunk(s),",
                f"in tiles of {tile_rows} rows x {cols} vectors, one tile per CTA (ctaid.x: row tile,",
                "ctaid.y: column tile, both grid-stride). A thread's slot u is tile element",
                "u*block + tid: its row and column are shifts and masks of constants. Each slot's",
                "addresses are set once per column tile and stepped by the row loop. All loads first.",
            ],
        )
        fn = module.entry(self.entry_point_name)
        params = {n: fn.param(n, t.ptx_type, comment=str(t)) for n, t in zip(self.arg_names, self.arg_types)}
        fn.directive(".maxntid", block, 1, 1)
        if self.dependent_launch:
            emit_dependent_launch(fn)
        reg = fn.reg
        row_base, pitch, rows = reg("row_base", "u64"), reg("row_pitch", "u64"), reg("rows", "u64")
        n_vec, thread = reg("window_vectors", "u32"), reg("thread", "u32")
        t_row, t_col = reg("t_row", "u32"), reg("t_col", "u32")
        col0, col_step = reg("col0", "u32"), reg("col_step", "u32")
        first_row, row0, row_step = reg("first_row", "u64"), reg("row0", "u64"), reg("row_step", "u64")
        left, left32, row_jump = reg("left", "u64"), reg("left32", "u32"), reg("row_jump", "u64")
        tmp32, tmp64, r64 = reg("tmp32", "u32"), reg("tmp64", "u64"), reg("r64", "u64")
        c_ptr, c_pitch, col, c_col = (
            reg("c_ptr", "u64"),
            reg("c_pitch", "u64"),
            reg("col", "u32"),
            reg("c_col", "u32"),
        )
        done = reg("done", "pred")

        fn.banner("arguments")
        fn.inst("ld.param.u64", row_base, Addr(params["row_base"]), comment="row side + window start")
        fn.inst("cvta.to.global.u64", row_base, row_base)
        fn.inst("ld.param.u64", pitch, Addr(params["row_pitch"]), comment="row-side bytes per row")
        fn.inst("ld.param.u64", rows, Addr(params["rows"]))
        fn.inst(
            "ld.param.u32", n_vec, Addr(params["window_vectors"]), comment="accesses per row in the window"
        )

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
        fn.inst("mov.u32", tmp32, SPECIAL_REGS["ctaid.x"])
        fn.inst("mul.wide.u32", first_row, tmp32, tile_rows, comment="this CTA's first row tile")
        fn.inst("mov.u32", tmp32, SPECIAL_REGS["nctaid.y"])
        fn.inst("shl.b32", col_step, tmp32, log_cols, comment="vectors a grid of column tiles covers")
        fn.inst("mov.u32", tmp32, SPECIAL_REGS["ctaid.y"])
        fn.inst("shl.b32", col0, tmp32, log_cols, comment="this CTA's first column tile")

        r_u = [reg(f"slot_row_{u}", "u32") for u in range(unroll)]
        col_live = [reg(f"col_live_{u}", "pred") for u in range(unroll)]
        row_addr = [reg(f"row_addr_{u}", "u64") for u in range(unroll)]
        chunk_addr = [reg(f"chunk_addr_{u}", "u64") for u in range(unroll)]
        # One chunk: one row step for every slot. Several: each slot's chunk has its own pitch.
        chunk_jump = [reg(f"chunk_jump_{u}", "u64") for u in range(unroll if chunks > 1 else 1)]
        scratch = None
        if chunks > 1:
            scratch = ChunkScratch(tmp32, reg("k_start", "u32"), reg("k_val", "u64"), reg("in_chunk", "pred"))
        col_loop, row_loop, next_col, finish = (
            fn.label("COLUMNS"), fn.label("ROWS"), fn.label("NEXT"), fn.label("DONE")
        )  # fmt: skip

        fn.banner("column tiles (ctaid.y, grid-stride): each slot's addresses in its first row tile")
        fn.place(col_loop)
        fn.inst("setp.ge.u32", done, col0, n_vec)
        fn.inst("bra.uni", finish, guard=done, comment="uniform: the same for the whole CTA")
        for u in range(unroll):
            if slot_row[u]:
                fn.inst("add.u32", r_u[u], t_row, slot_row[u], comment=f"slot {u}: its row in the tile ...")
            else:
                fn.inst("mov.u32", r_u[u], t_row, comment=f"slot {u}: its row in the tile ...")
            fn.inst("add.u32", col, t_col, col0, comment="... and its column in the window")
            if slot_col[u]:
                fn.inst("add.u32", col, col, slot_col[u])
            fn.inst("setp.lt.u32", col_live[u], col, n_vec)
            fn.inst("cvt.u64.u32", r64, r_u[u])
            fn.inst("add.u64", r64, r64, first_row, comment="its row in the window")
            fn.inst("mul.wide.u32", tmp64, col, w)
            fn.inst("add.u64", tmp64, tmp64, row_base)
            fn.inst("mad.lo.u64", row_addr[u], r64, pitch, tmp64, comment="its row-side address")
            select_chunk(fn, params, chunks, col, c_ptr, c_pitch, c_col, scratch,
                         comment="which chunk holds this column (starts ascend)")  # fmt: skip
            fn.inst("cvta.to.global.u64", c_ptr, c_ptr)
            fn.inst("mul.wide.u32", tmp64, c_col, w)
            fn.inst("add.u64", tmp64, tmp64, c_ptr)
            fn.inst("mad.lo.u64", chunk_addr[u], r64, c_pitch, tmp64, comment="its chunk address")
            if chunks > 1 or u == 0:
                fn.inst("mul.lo.u64", chunk_jump[u], row_step, c_pitch, comment="a row step in its chunk")
        fn.inst("mov.u64", row0, first_row)

        fn.banner(f"row tiles (ctaid.x, grid-stride): {unroll} slot(s), all loads before the first store")
        fn.place(row_loop)
        fn.inst("setp.ge.u64", done, row0, rows)
        fn.inst("bra.uni", next_col, guard=done, comment="uniform")
        fn.inst("sub.u64", left, rows, row0, comment="rows left from this tile on")
        fn.inst("min.u64", left, left, 0xFFFFFFFF, comment="a tile has fewer: compare in 32 bits")
        fn.inst("cvt.u32.u64", left32, left)
        live, data = [], []
        for u in range(unroll):
            ok = reg(f"live_{u}", "pred")
            fn.inst(
                "setp.lt.and.u32", ok, r_u[u], left32, col_live[u], comment=f"slot {u}: inside the window"
            )
            live.append(ok)
            data.append(data_regs(fn, f"v{u}", w))
        srcs, dsts = (row_addr, chunk_addr) if backward else (chunk_addr, row_addr)
        kind = ld_type(w)
        for u in range(unroll):
            # Plain loads: on H200 the read-only path (.nc) was as fast or slower, and up
            # to 37% slower at 4 slots of 128 threads (docs/perf/kernels.md).
            fn.inst(
                f"ld.global.{kind}",
                data[u],
                Addr(srcs[u]),
                guard=live[u],
                comment="all loads in flight first",
            )
        for u in range(unroll):
            fn.inst(f"st.global.{kind}", Addr(dsts[u]), data[u], guard=live[u])
        fn.inst("add.u64", row0, row0, row_step)
        for u in range(unroll):
            fn.inst("add.u64", row_addr[u], row_addr[u], row_jump)
            fn.inst("add.u64", chunk_addr[u], chunk_addr[u], chunk_jump[u if chunks > 1 else 0])
        fn.inst("bra.uni", row_loop)
        fn.place(next_col)
        fn.inst("add.u32", col0, col0, col_step)
        fn.inst("bra.uni", col_loop)
        fn.place(finish)
        fn.inst("ret")
        self.ptx_version = module.version
        self.kernel_source = module.header()
        self.entry_point_source = fn.render()
