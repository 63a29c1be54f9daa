"""The ``vec`` family: direct copies with one thread's accesses spread over a persistent grid.

``FastcatVec``: direct copy between the row side (``rows`` rows of ``row_pitch`` bytes) and
``chunks`` adjacent chunks (each ``rows`` rows of its own pitch), ``width`` bytes an access
(the widest that every pointer, pitch, offset and width allows; the planner checks).
Backward gathers row side -> chunks, forward scatters chunks -> row side. Neither reads
nor writes a byte outside the ranges :meth:`FastcatVec.footprints` gives.

The planner launches it for one case, where it measured fastest: a gather of a piece
narrower than a third of its row at a 1-byte granule, four byte accesses in flight a
thread on two waves of the part (``ptxgen.kernels.fastcat``); everything else direct goes
to ``rect``, which a one-piece-of-work-a-CTA grid suits (each of its threads divides
nothing, where this kernel divides once per slot before its loop).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from ..footprint import Footprint, check_launch_block
from ..function import PtxFunction, PtxModule
from ..kernel import KernelBase
from ..ptxtypes import SPECIAL_REGS, Addr, Reg
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

__all__ = ["FastcatVec"]

_DIRECTIONS = ("backward", "forward")


def _read_thread_ids(fn: PtxFunction) -> tuple[Reg, Reg, Reg, Reg]:
    thread, block_id = fn.reg("thread", "u32"), fn.reg("block_id", "u32")
    block_dim, grid_dim = fn.reg("block_dim", "u32"), fn.reg("grid_dim", "u32")
    fn.inst("mov.u32", thread, SPECIAL_REGS["tid.x"])
    fn.inst("mov.u32", block_id, SPECIAL_REGS["ctaid.x"])
    fn.inst("mov.u32", block_dim, SPECIAL_REGS["ntid.x"])
    fn.inst("mov.u32", grid_dim, SPECIAL_REGS["nctaid.x"])
    return thread, block_id, block_dim, grid_dim


class FastcatVec(KernelBase):
    """Direct copy between the row side and ``chunks`` adjacent chunks, ``width`` bytes an access.

    The work is the ``rows x window_vectors`` grid of (row, vector) items of the window
    ``[off_0, off_{K-1} + width_{K-1})`` of each row (``row_base`` points at its start).
    Item ``i`` is at row ``i // n``, vector ``i % n``; each thread owns ``unroll`` slots and
    keeps (row, vector) per slot, stepping it by a (rows, vectors) increment divided once,
    so the loop divides nothing. All loads of a round are issued before the first store.
    A block's slots of one round are one contiguous run of ``unroll * block`` items, a
    thread's slots a block apart (the id's ``block`` tag; the studies' other layout, slots
    a grid apart, measured the same and went to lab/ with the flat copy).

    Arguments: ``row_base, row_pitch, rows, window_vectors``, then per chunk ``k``
    ``chunk{k}_ptr, chunk{k}_pitch`` and, with several chunks, ``chunk{k}_start`` (its
    first vector in the window; ascending; chunk 0's is not read). ``width`` must divide
    ``row_base``, ``row_pitch`` and every chunk's pointer and pitch (the planner checks;
    :meth:`footprints` refuses pitches it does not divide).
    """

    @classmethod
    def cache_key(
        cls,
        *,
        direction: str,
        width: int,
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
        check_choice(unroll, "unroll", (1, 2, 4, 8, 16))
        if isinstance(chunks, bool) or not isinstance(chunks, int) or not 1 <= chunks <= MAX_CHUNKS:
            raise ValueError(f"chunks = {chunks!r} is not accepted; accepted: an int in 1..{MAX_CHUNKS}")
        pdl = check_dependent_launch(dependent_launch, target)
        return (direction, width, chunks, unroll, block, target, pdl)

    def __init__(
        self,
        *,
        direction: str,
        width: int,
        chunks: int = 1,
        unroll: int = 4,
        block: int = 256,
        target: str = "sm_90",
        dependent_launch: bool = False,
    ) -> None:
        (self.direction, self.width, self.chunks, self.unroll, self.block_size, self.target,
         self.dependent_launch) = self.cache_key(
            direction=direction, width=width, chunks=chunks, unroll=unroll, block=block, target=target,
            dependent_launch=dependent_launch,
        )  # fmt: skip
        self.name = f"fastcat_vec_{direction}"  # type: ignore[misc]
        tag = "__block" + ("__pdl" if dependent_launch else "")  # block: the slot layout
        self.id = f"{self.name}__w{width}__k{chunks}__u{unroll}__b{block}{tag}__{self.target}"
        self.arg_names, self.arg_types = window_args(chunks, direction == "backward")
        self.block = (block, 1, 1)
        self.shared_bytes = 0
        self.info: dict[str, Any] = {
            "family": "vec",
            "direction": direction,
            "width": width,
            "chunks": chunks,
            "unroll": unroll,
            "block": block,
            **({"dependent_launch": True} if dependent_launch else {}),
        }
        self._emit()

    def __repr__(self) -> str:
        return (
            f"FastcatVec(direction={self.direction!r}, width={self.width}, chunks={self.chunks}, "
            f"unroll={self.unroll}, block={self.block_size}, target={self.target!r}, "
            f"dependent_launch={self.dependent_launch})"
        )

    # --- what a launch touches ----------------------------------------------------------

    def chunk_vectors(self, scalars: Mapping[str, int]) -> tuple[int, ...]:
        """How many vectors of each row each chunk receives (backward) or gives (forward):
        the window's vectors ``[start_k, start_{k+1})``, the last chunk's up to
        ``window_vectors``. Raises :class:`FootprintError` for starts that do not ascend."""
        return window_chunk_vectors(self.name, self.chunks, scalars)

    def footprints(
        self, grid: tuple[int, int, int], block: tuple[int, int, int], scalars: Mapping[str, int]
    ) -> tuple[Footprint, ...]:
        """Exact bytes from each pointer: the row side touches ``(rows - 1) * row_pitch +
        window_vectors * width``, chunk ``k`` ``(rows - 1) * chunk{k}_pitch + n_k * width``
        (``n_k`` from :meth:`chunk_vectors`; 0 when ``n_k`` or ``rows`` is 0); every pointer
        ``width``-aligned. Grid-stride: any non-empty grid covers every item.

        Raises :class:`FootprintError` where the kernel would misbehave: a pitch ``width``
        does not divide, ``window_vectors`` of 0 (it is a divisor) or above 2**31 (the
        vector index is 32-bit and carries), a window wider than the row pitch, a chunk's
        vectors wider than its pitch (its rows would overlap), or another block shape."""
        check_launch_block(self.name, block, self.block)
        live = all(g > 0 for g in grid)
        return window_footprints(
            self.name, self.width, self.chunks, scalars, live, self.direction == "backward"
        )

    # --- emission ------------------------------------------------------------------------

    def _emit(self) -> None:
        width, unroll, block, chunks = self.width, self.unroll, self.block_size, self.chunks
        module = PtxModule(
            self.target,
            comment=[
                f"{self.name}: {width}-byte accesses between the row side and {chunks} adjacent chunk(s).",
                "Item (row, vector) of the window; each thread keeps `unroll` slots a grid apart,",
                "issues all their loads, then all their stores. 64-bit rows and addresses.",
            ],
        )
        fn = module.entry(self.entry_point_name)
        params = {}
        for name, t in zip(self.arg_names, self.arg_types):
            params[name] = fn.param(name, t.ptx_type, comment=str(t))
        fn.directive(".maxntid", block, 1, 1)
        if self.dependent_launch:
            emit_dependent_launch(fn)
        row_base, pitch, rows = fn.reg("row_base", "u64"), fn.reg("pitch", "u64"), fn.reg("rows", "u64")
        n_vec64, gtid, stride = fn.reg("n_vec64", "u64"), fn.reg("gtid", "u64"), fn.reg("stride", "u64")
        step, step_rows, tmp64 = fn.reg("step", "u64"), fn.reg("step_rows", "u64"), fn.reg("tmp64", "u64")
        n_vec, step_vecs = fn.reg("n_vec", "u32"), fn.reg("step_vecs", "u32")

        fn.banner("arguments")
        fn.inst("ld.param.u64", row_base, Addr(params["row_base"]), comment="row side + window start")
        fn.inst("cvta.to.global.u64", row_base, row_base)
        fn.inst("ld.param.u64", pitch, Addr(params["row_pitch"]), comment="row-side bytes per row")
        fn.inst("ld.param.u64", rows, Addr(params["rows"]))
        fn.inst(
            "ld.param.u32", n_vec, Addr(params["window_vectors"]), comment="accesses per row in the window"
        )
        fn.inst("cvt.u64.u32", n_vec64, n_vec)
        thread, block_id, _block_dim, grid_dim = _read_thread_ids(fn)  # the block is compiled in

        fn.banner("this thread's first item, the gap between its slots, and a round's step")
        fn.inst("cvt.u64.u32", tmp64, thread)
        fn.inst("mul.wide.u32", gtid, block_id, unroll * block,
                comment="this block's run of unroll*block items")  # fmt: skip
        fn.inst("add.u64", gtid, gtid, tmp64, comment="this thread's first item")
        fn.inst("mov.u64", stride, block, comment="slots of one thread are a block apart")
        fn.inst("mul.wide.u32", step, grid_dim, unroll * block,
                comment="a round moves every slot by unroll*grid*block")  # fmt: skip
        fn.inst(
            "div.u64", step_rows, step, n_vec64, comment="the step as (rows, vectors): divided once here,"
        )
        fn.inst("rem.u64", tmp64, step, n_vec64, comment="never in the loop")
        fn.inst("cvt.u32.u64", step_vecs, tmp64)

        fn.banner("each slot's (row, vector)")
        row, col = [], []
        for u in range(unroll):
            r, c = fn.reg(f"row_{u}", "u64"), fn.reg(f"col_{u}", "u32")
            fn.inst("mad.lo.u64", tmp64, stride, u, gtid)
            fn.inst("div.u64", r, tmp64, n_vec64, comment=f"slot {u}: its row ...")
            fn.inst("rem.u64", tmp64, tmp64, n_vec64)
            fn.inst("cvt.u32.u64", c, tmp64, comment="... and its vector in the row")
            row.append(r)
            col.append(c)
        # Chunk parameters are read where used: they live in the constant bank, so ptxas
        # folds them into the instructions instead of holding 5 registers per chunk.
        c_ptr, c_pitch = fn.reg("c_ptr", "u64"), fn.reg("c_pitch", "u64")
        row_addr, chunk_addr = fn.reg("row_addr", "u64"), fn.reg("chunk_addr", "u64")
        c_col = fn.reg("c_col", "u32")
        in_chunk = fn.reg("in_chunk", "pred")
        scratch = None
        if chunks > 1:
            start, k_start, k_val = fn.reg("c_start", "u32"), fn.reg("k_start", "u32"), fn.reg("k_val", "u64")
            scratch = ChunkScratch(start, k_start, k_val, in_chunk)

        top, done = fn.label("LOOP"), fn.label("DONE")
        fn.banner(f"a round: {unroll} slots, all loads before the first store")
        fn.place(top)
        fn.inst(
            "setp.ge.u64",
            in_chunk,
            row[0],
            rows,
            comment="slot 0 is the furthest behind: past the end, all are",
        )
        fn.inst("bra", done, guard=in_chunk)
        kind = ld_type(width)
        live, srcs, dsts, data = [], [], [], []
        for u in range(unroll):
            ok = fn.reg(f"live_{u}", "pred")
            s, d = fn.reg(f"src_{u}", "u64"), fn.reg(f"dst_{u}", "u64")
            fn.inst("setp.lt.u64", ok, row[u], rows)
            fn.inst("mad.lo.u64", row_addr, row[u], pitch, row_base)
            fn.inst("mul.wide.u32", tmp64, col[u], width)
            fn.inst("add.u64", row_addr, row_addr, tmp64)
            select_chunk(fn, params, chunks, col[u], c_ptr, c_pitch, c_col, scratch,
                         comment=f"slot {u}: which chunk holds this vector (starts ascend)")  # fmt: skip
            fn.inst("cvta.to.global.u64", c_ptr, c_ptr)
            fn.inst("mad.lo.u64", chunk_addr, row[u], c_pitch, c_ptr)
            fn.inst("mul.wide.u32", tmp64, c_col, width)
            fn.inst("add.u64", chunk_addr, chunk_addr, tmp64)
            src, dst = (row_addr, chunk_addr) if self.direction == "backward" else (chunk_addr, row_addr)
            fn.inst("mov.u64", s, src)
            fn.inst("mov.u64", d, dst)
            live.append(ok)
            srcs.append(s)
            dsts.append(d)
            data.append(data_regs(fn, f"v{u}", width))
        for u in range(unroll):
            fn.inst(f"ld.global.nc.{kind}", data[u], Addr(srcs[u]), guard=live[u],
                    comment="all loads in flight first")  # fmt: skip
        for u in range(unroll):
            fn.inst(f"st.global.{kind}", Addr(dsts[u]), data[u], guard=live[u])

        fn.banner("step every slot by (step_rows, step_vecs), carrying vectors into rows")
        wrap = fn.reg("wrap", "pred")
        for u in range(unroll):
            fn.inst("add.u64", row[u], row[u], step_rows)
            fn.inst("add.u32", col[u], col[u], step_vecs)
            fn.inst("setp.ge.u32", wrap, col[u], n_vec, comment="carry the vector index into the row")
            fn.inst("sub.u32", col[u], col[u], n_vec, guard=wrap)
            fn.inst("add.u64", row[u], row[u], 1, guard=wrap)
        fn.inst("bra.uni", top)
        fn.place(done)
        fn.inst("ret")
        self.ptx_version = module.version
        self.kernel_source = module.header()
        self.entry_point_source = fn.render()
