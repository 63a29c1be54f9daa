"""The shared-memory tile kernel of the fast channel concatenation, for any alignment.

Two layouts meet in a concatenation (every size in bytes; the pointers are u8):

* the **row side**: ``rows`` rows of ``pitch`` bytes (``dy`` backward, ``y`` forward);
* the **chunk side**: chunk ``k`` is ``rows`` rows of ``width_k`` bytes, packed
  (``dx_k`` backward, ``x_k`` forward), sitting at byte ``off_k`` of each row-side row.

Backward gathers row side -> chunk side, forward scatters chunk side -> row side.

The row side is cut into tiles of ``T = 16 * unroll * block`` bytes at *absolute*
16-byte boundaries (tile 0 starts at ``row_ptr & ~15``), so it always moves as aligned
16-byte vectors; the bytes of chunk ``k`` that come from one tile are one contiguous
range of the chunk, so that side moves as 16-byte vectors too. The re-indexing happens
in shared memory, in granules of ``granule`` bytes. Only vectors that straddle a range
end (the array's ends, a tile's ends on the chunk side, a group's columns) move granule
by granule or byte by byte, each access guarded to lie inside the range, so although
tiles start before ``row_ptr``, no byte outside the arrays is ever touched (see
:meth:`FastcatTile.footprints`).

The kernel is written in seven modules: this one holds the class (its memory contract,
prologue and main loop); :mod:`.tile_options` the values its options take and its
shared-memory layout; :mod:`.tile_rows` the row-side phases, :mod:`.tile_chunks` the
chunk table and the walks over chunk vectors, :mod:`.tile_gather_scatter` the chunk
side's gathers and scatters, :mod:`.tile_row_gather` the forward row vectors read
straight out of the staging area (mixins of :class:`FastcatTile`), and
:mod:`.tile_emitter` the emitter they all write through.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from ..args import Pointer, Scalar
from ..footprint import Footprint, FootprintError, check_launch_block
from ..function import PtxModule
from ..kernel import KernelBase
from ..ptxtypes import SPECIAL_REGS, Addr
from ..targets import resolve_target, target_capability
from .fastcat_common import check_dependent_launch, emit_dependent_launch
from .tile_chunks import _TABLE_ENTRY
from .tile_emitter import _Emitter
from .tile_options import (
    _BLOCKS,
    _GRANULES,
    _SHARED_LIMIT,
    _UNROLLS,
    _pick,
    _resident_ctas,
    _shared_layout,
    _wide_flags,
    _word_windows,
    wide_chunks_option,
)  # fmt: skip
from .tile_row_gather import ROW_GATHER_PAD, TileRowGather
from .tile_rows import TileRows

__all__ = [
    "LOADERS", "MAX_CHUNKS", "SEARCHED_LOCATE_CHUNKS", "TABLE_FREE_CHUNKS",
    "FastcatTile", "wide_chunks_option",
]  # fmt: skip

# Chunks per launch: each costs 16 bytes of parameters and one unrolled copy of the
# per-chunk code; 32 keeps the kernel under ~4K SASS instructions.
MAX_CHUNKS = 32
# The most chunks whose ranges the row gather's staging works out in every thread rather
# than reading them from the table (staging_without_table), by granule; at 16 bytes it
# always reads the table. Each chunk costs a thread about 30 more instructions a tile
# (lab/chunk_cost.py), which the first wave's saved wait pays for only up to here.
# Measured on an H100 (lab/data/many-pieces-h100-20261207/, and ab-no-table-h100-20261207/
# for two to six pieces), without the table against with it: six pieces 0.989x at a 1-byte
# granule, 0.995x at 2, 1.008x at 4 and 1.004-1.006x at 8; seven pieces 0.960x, 0.960x,
# 0.994x and 0.987x; two to five faster at every granule.
TABLE_FREE_CHUNKS = MappingProxyType({1: 5, 2: 5, 4: 6, 8: 6})
# The fewest chunks for which the row gather finds a row vector's chunk by a binary search
# over the table's offsets rather than by testing every chunk's offset in turn (two
# instructions a chunk, a vector): five steps of six at 32 chunks, against 62.
SEARCHED_LOCATE_CHUNKS = 12
LOADERS = ("regs", "cp.async", "bulk")
_U64, _U32 = Scalar("u64"), Scalar("u32")
_BYTES_IN, _BYTES_OUT = Pointer("u8", writes=False), Pointer("u8")


# The phases live in mixins: the row side in TileRows (tile_rows.py), the chunk side in
# TileGatherScatter over TileChunks (tile_gather_scatter.py, tile_chunks.py).
class FastcatTile(TileRows, TileRowGather, KernelBase):
    """Shared-memory tile kernel for channel concatenation at any alignment.

    ``FastcatTile(direction=, chunks=, granule=, whole_rows=True, unroll=4, block=256,
    loader="regs", wide_chunks=False, row_gather=False, target="sm_90",
    dependent_launch=False)`` (the prototype's ``tile_kernel`` arguments, and
    programmatic dependent launch, see
    :func:`~ptxgen.kernels.fastcat_common.emit_dependent_launch`).
    ``chunks`` adjacent chunks (a group) are written (backward) or read (forward) in one
    pass over the row side. ``whole_rows``: the group covers every column (fused
    split/concat), so every row-side vector moves whole; otherwise only vectors touching
    the group's columns are read (backward), and vectors the group owns only in part are
    written granule by granule (forward). ``loader``: ``regs`` (sm_75+), ``cp.async``
    (forward, sm_80+: a staging area every chunk's loads fly into at once) or ``bulk``
    (backward, whole rows, ``cp.async.bulk`` + mbarrier, sm_90+, two stages). Backward
    tiles through ``cp.async`` (two stages) measured no faster than through registers on
    aligned rows and slower on unaligned ones; they went to lab/ with the prototype.
    ``wide_chunks``: the chunk is at least 16 bytes wide (:meth:`footprints` checks it),
    so a chunk vector spans at most two rows' pieces and its granules' shared addresses
    are found independently (:meth:`_two_piece_walk`, or at a byte granule backward the
    word windows of :meth:`_word_gather`) rather than carried one by one. True or False
    for every chunk, or a tuple of one flag a chunk: the per-chunk code is written chunk
    by chunk, so one narrow chunk keeps the carried walk for itself alone.
    ``row_gather`` (forward through cp.async, whole rows): no tile image; each row-side
    vector is read straight out of the staging area as windows of aligned words, two
    where every chunk is wide, else one a piece (:mod:`.tile_row_gather`), where the
    scatter stored a chunk vector into the tile a granule at a time and the tile was read
    back after one more barrier. Below a 16-byte granule its staging does not wait for the
    chunk table either (:attr:`staging_without_table`).

    Arguments: ``row_ptr, row_bytes, row_pitch, rows``, then per chunk
    ``chunk{k}_ptr, chunk{k}_off, chunk{k}_width``.

    Launch conditions (:meth:`footprints` checks the scalar ones, :meth:`safe_for` the
    pointer ones): ``granule`` divides every chunk's width, the pitch, every chunk
    pointer, and ``row_ptr + off_k`` (the shared-memory image of a tile is the absolute
    16-byte-aligned bytes, so those sums, not ``row_ptr`` alone, place the granules);
    the chunks are adjacent (``off_{k+1} = off_k + width_k``) inside a row; with
    ``whole_rows`` they cover the whole row. Any grid of at least one CTA does the whole
    job (tiles are handed out grid-stride).

    Memory outside the arrays: none. Tiles start at ``row_ptr & ~15`` and the last ends
    past ``row_ptr + row_bytes``, but a 16-byte vector is moved whole only when all its
    bytes lie in ``[row_ptr, row_ptr + row_bytes)`` (chunk side: in the chunk's range);
    the others move byte (row side, backward) or granule (otherwise) at a time, each
    guarded to lie in the range. Proved on the CPU by tests/test_fastcat_tile.py, which
    records every global address the kernel touches.
    """

    name = "fastcat_tile"  # overwritten per instance with the direction
    # the limits above, as class attributes that a study's subclass may move
    table_free_chunks: ClassVar[Mapping[int, int]] = TABLE_FREE_CHUNKS
    searched_locate_chunks: ClassVar[int] = SEARCHED_LOCATE_CHUNKS

    @classmethod
    def cache_key(
        cls,
        *,
        direction: str,
        chunks: int,
        granule: int,
        whole_rows: bool = True,
        unroll: int = 4,
        block: int = 256,
        loader: str = "regs",
        wide_chunks: bool | tuple[bool, ...] = False,
        row_gather: bool = False,
        target: str | None = "sm_90",
        dependent_launch: bool = False,
    ) -> Hashable:
        if direction not in ("backward", "forward"):
            raise ValueError(f"direction {direction!r}; accepted: 'backward', 'forward'")
        target = resolve_target(target)
        _pick(granule, "granule", _GRANULES)
        _pick(block, "block", _BLOCKS)
        _pick(unroll, "unroll", _UNROLLS)
        if isinstance(chunks, bool) or not isinstance(chunks, int) or not 1 <= chunks <= MAX_CHUNKS:
            raise ValueError(f"chunks = {chunks!r} is outside 1..{MAX_CHUNKS}")
        if not isinstance(whole_rows, bool):
            raise TypeError(f"whole_rows must be True or False, not {whole_rows!r}")
        wide = _wide_flags(wide_chunks, chunks)
        wide_chunks = wide_chunks_option(wide)
        if loader not in LOADERS:
            raise ValueError(f"loader {loader!r}; accepted: 'regs', 'cp.async', 'bulk'")
        cap = target_capability(target)
        if loader == "cp.async" and direction != "forward":
            raise ValueError("loader 'cp.async' is for direction 'forward' only (backward: 'regs' or 'bulk')")
        if loader == "bulk" and direction != "backward":
            raise ValueError("loader 'bulk' is for direction 'backward' only")
        if loader == "cp.async" and cap < (8, 0):
            raise ValueError(f"loader 'cp.async' needs sm_80 or newer, not {target}")
        if loader == "bulk" and cap < (9, 0):
            raise ValueError(f"loader 'bulk' needs sm_90 or newer, not {target}")
        if loader == "bulk" and not whole_rows:
            raise ValueError("loader 'bulk' copies whole tiles: it needs whole_rows=True")
        if not isinstance(row_gather, bool):
            raise TypeError(f"row_gather must be True or False, not {row_gather!r}")
        if row_gather and not (direction == "forward" and loader == "cp.async" and whole_rows):
            raise ValueError(
                "row_gather reads the row side's vectors out of the cp.async staging area: it needs "
                "direction 'forward', loader 'cp.async' and whole_rows=True"
            )
        shared = _shared_layout(direction, chunks, granule, 16 * unroll * block, loader, wide, row_gather)[-1]
        if shared > _SHARED_LIMIT:
            raise ValueError(
                f"{shared} bytes of static shared memory; at most {_SHARED_LIMIT} (16*unroll*block per "
                f"stage, staging for forward cp.async, {_TABLE_ENTRY} a chunk for the chunk table)"
            )
        pdl = check_dependent_launch(dependent_launch, target)
        options = (unroll, block, loader, wide_chunks, row_gather)
        return (direction, chunks, granule, whole_rows, *options, target, pdl)

    def __init__(self, **kwargs: Any) -> None:
        key = self.cache_key(**kwargs)
        (self.direction, self.chunks, self.granule, self.whole_rows, self.unroll, self.block_size,
         self.loader, self.wide_chunks, self.row_gather, self.target,
         self.dependent_launch) = key  # fmt: skip
        self.name = f"fastcat_tile_{self.direction}"  # type: ignore[misc]
        self.tile_bytes = 16 * self.unroll * self.block_size
        self.wide = _wide_flags(self.wide_chunks, self.chunks)
        self.chunk_wide = False  # the flag of the chunk whose code is being written
        self.word_windows = _word_windows(self.direction, self.granule, self.wide, self.loader)
        layout = (self.direction, self.chunks, self.granule, self.tile_bytes, self.loader, self.wide)
        self.stages, staging, self.window_pad, self.shared_bytes = _shared_layout(*layout, self.row_gather)
        self.block = (self.block_size, 1, 1)
        rows_tag = "rows" if self.whole_rows else "cols"
        self.id = (
            f"{self.name}__g{self.granule}__k{self.chunks}__{rows_tag}__u{self.unroll}"
            f"__b{self.block_size}__{self.loader}{self._wide_tag()}{'__rg' if self.row_gather else ''}"
            f"{'__pdl' if self.dependent_launch else ''}__{self.target}"
        )
        self.info = {
            "family": "tile",
            "direction": self.direction,
            "chunks": self.chunks,
            "granule": self.granule,
            "whole_rows": self.whole_rows,
            "unroll": self.unroll,
            "block": self.block_size,
            "loader": self.loader,
            "wide_chunks": self.wide_chunks,
            "tile_bytes": self.tile_bytes,
            **({"row_gather": True} if self.row_gather else {}),
            **({"dependent_launch": True} if self.dependent_launch else {}),
        }
        backward = self.direction == "backward"
        names: list[str] = ["row_ptr", "row_bytes", "row_pitch", "rows"]
        types: list[Pointer | Scalar] = [_BYTES_IN if backward else _BYTES_OUT, _U64, _U32, _U64]
        for k in range(self.chunks):
            names += [f"chunk{k}_ptr", f"chunk{k}_off", f"chunk{k}_width"]
            types += [_BYTES_OUT if backward else _BYTES_IN, _U32, _U32]
        self.arg_names, self.arg_types = tuple(names), tuple(types)
        self._emit(staging)

    @property
    def staging_without_table(self) -> bool:
        """Whether the row gather's staging works out each chunk's range in every thread
        (:meth:`TileRowGather._stage_for_rows`) instead of waiting for warp 0's table: at
        granules under 16 bytes and up to :data:`TABLE_FREE_CHUNKS` chunks (by granule).
        At 16 the gather's whole-vector windows leave no room for it at 48 registers (4-36
        bytes spilled, against none with the table); past that many chunks every thread's
        share of the ranges costs more than the table's barrier."""
        return self.row_gather and self.chunks <= self.table_free_chunks.get(self.granule, 0)

    @property
    def searched_locate(self) -> bool:
        """Whether the row gather finds a row vector's chunk by a binary search over the
        table's offsets (:meth:`TileRowGather._locate`): from
        :data:`SEARCHED_LOCATE_CHUNKS` chunks on, where the table is filled."""
        wanted = self.row_gather and self.chunks >= self.searched_locate_chunks
        return wanted and not self.staging_without_table

    @property
    def _fwd_async(self) -> bool:
        return self.direction == "forward" and self.loader == "cp.async"

    def grid(self, rows: int, row_pitch: int) -> tuple[int, int, int]:
        """One CTA per tile (what the planner launches), within the driver's grid limit:
        the row side's ``rows * row_pitch`` bytes from its 16-byte boundary, at most 15
        bytes before ``row_ptr``. Tiles are handed out grid-stride, so any grid of at least
        one CTA does the whole job."""
        tiles = -(-(rows * row_pitch + 15) // self.tile_bytes)
        return (max(1, min(tiles, 2**31 - 1)), 1, 1)

    # --- memory contract ---------------------------------------------------------------

    def _check_scalars(self, scalars: Mapping[str, int]) -> tuple[int, int, int, int, int]:
        """(rows, pitch, row_bytes, window start, window end) after checking the layout."""
        rows, pitch, row_bytes = scalars["rows"], scalars["row_pitch"], scalars["row_bytes"]
        g = self.granule
        if pitch < 1 or pitch % g:
            raise FootprintError(
                f"{self.name}: row_pitch = {pitch} must be >= 1 and a multiple of granule {g}"
            )
        offs = [scalars[f"chunk{k}_off"] for k in range(self.chunks)]
        widths = [scalars[f"chunk{k}_width"] for k in range(self.chunks)]
        for k, (off, w) in enumerate(zip(offs, widths)):
            if w < 1 or w % g:
                raise FootprintError(f"{self.name}: chunk{k}_width = {w} must be >= 1 and a multiple of {g}")
            if self.wide[k] and w < 16:
                raise FootprintError(
                    f"{self.name}: chunk{k}_width = {w}; built with wide_chunks for chunk {k}, "
                    "which is then at least 16 bytes"
                )
            if k and off != offs[k - 1] + widths[k - 1]:
                raise FootprintError(
                    f"{self.name}: chunk{k}_off = {off} must follow chunk{k - 1} "
                    f"(at {offs[k - 1] + widths[k - 1]}): a group's chunks are adjacent"
                )
        lo, hi = offs[0], offs[-1] + widths[-1]
        if hi > pitch:
            raise FootprintError(f"{self.name}: the chunks end at byte {hi} of a row of row_pitch = {pitch}")
        # The array ends after its last row's chunks at the earliest (a view of part of
        # every row of a wider one), and after its last whole row at the latest.
        least = (rows - 1) * pitch + hi if rows else 0
        if not least <= row_bytes <= rows * pitch:
            raise FootprintError(
                f"{self.name}: row_bytes = {row_bytes} is outside [{least}, {rows * pitch}]: from the end "
                "of the last row's chunks to rows * row_pitch"
            )
        if self.whole_rows and (lo, hi) != (0, pitch):
            raise FootprintError(
                f"{self.name}: whole_rows needs the chunks to cover [0, {pitch}); they cover [{lo}, {hi})"
            )
        return rows, pitch, row_bytes, lo, hi

    def footprints(
        self, grid: tuple[int, int, int], block: tuple[int, int, int], scalars: Mapping[str, int]
    ) -> tuple[Footprint, ...]:
        """Exact bytes touched through every pointer (u8 elements) by one launch.

        Row side: backward reads all of ``[0, row_bytes)`` (the first and last tiles read
        every byte of the array they hold, byte by byte where no vector fits; with
        ``whole_rows=False`` interior tiles skip vectors outside the group's columns, but
        the extent is still the whole array); forward writes only the group's bytes, so
        ``(rows - 1) * pitch + off_last + width_last``. Chunk ``k``: ``rows * width_k``.
        Alignment: each chunk pointer ``granule``; ``row_ptr`` 1 here, since what the
        kernel needs is ``(row_ptr + off_k) % granule == 0`` (:meth:`safe_for`).
        """
        check_launch_block(self.name, block, self.block)
        rows, pitch, row_bytes, _, hi = self._check_scalars(scalars)
        run = grid[0] >= 1 and rows > 0
        backward = self.direction == "backward"
        row_extent = (row_bytes if backward else (rows - 1) * pitch + hi) if run else 0
        out = [Footprint("row_ptr", row_extent, 1, 1, writes=not backward)]
        for k in range(self.chunks):
            n = rows * scalars[f"chunk{k}_width"] if run else 0
            out.append(Footprint(f"chunk{k}_ptr", n, 1, self.granule, writes=backward))
        return tuple(out)

    def safe_for(
        self, row_ptr: int, chunk_ptrs: tuple[int, ...] | list[int], offs: tuple[int, ...] | list[int]
    ) -> bool:
        """Whether the pointers suit this kernel's granule: ``row_ptr + off_k`` and every
        chunk pointer are multiples of ``granule``. (No byte outside the arrays is touched
        whatever the alignment; a wrong granule gives misaligned shared accesses.)"""
        g = self.granule
        if len(chunk_ptrs) != self.chunks or len(offs) != self.chunks:
            raise ValueError(f"{self.name}: {self.chunks} chunk pointers and offsets expected")
        return all((row_ptr + o) % g == 0 and c % g == 0 for c, o in zip(chunk_ptrs, offs))

    # --- emission ----------------------------------------------------------------------

    def _emit(self, staging: int) -> None:
        T, B = self.tile_bytes, self.block_size
        module = PtxModule(
            self.target,
            comment=[
                f"{self.name}: {self.chunks} chunk(s) through shared-memory tiles of {T} bytes",
                f"({self.stages} stage(s), loads via {self.loader}); "
                f"re-indexing in {self.granule}-byte granules.",
                "Row side and chunk side both move as 16-byte vectors whatever the alignment;",
                "only the vectors that straddle a range end move granule by granule.",
                "Written by ptxgen; regenerate rather than edit.",
            ],
        )
        fn = module.entry(self.entry_point_name)
        self.params = {n: fn.param(n, t.ptx_type) for n, t in zip(self.arg_names, self.arg_types)}
        fn.directive(".maxntid", B, 1, 1)
        # Several resident CTAs keep loads in flight while others re-index (tile_options).
        resident = _resident_ctas(self.direction, self.loader, self.unroll, B, self.target, self.row_gather)
        fn.directive(".minnctapersm", resident)
        if self.dependent_launch:
            emit_dependent_launch(fn)
        tile_image = T * self.stages + self.window_pad  # none for the row gather
        self.smem = fn.shared("tile_smem", tile_image, align=16) if tile_image else None
        self.staging_arr = fn.shared("tile_staging", staging, align=16) if staging else None
        self.mbar_arr = fn.shared("tile_mbar", 16, align=8) if self.loader == "bulk" else None
        self.table_arr = fn.shared("tile_chunks", _TABLE_ENTRY * self.chunks, align=16)
        self.e = _Emitter(fn)
        self.exit = fn.label("EXIT")
        self._body()
        self.ptx_version = module.version
        self.kernel_source = module.header()
        self.entry_point_source = fn.render()

    def _wide_tag(self) -> str:
        """The id's mark of the wide chunks: ``__w16`` for all, ``__w`` and a digit a chunk
        (1: wide) for some, nothing for none."""
        if all(self.wide):
            return "__w16"
        return "__w" + "".join("1" if w else "0" for w in self.wide) if any(self.wide) else ""

    def _param(self, reg: str, name: str, why: str = "", guard: str | None = None) -> None:
        p = self.params[name]
        self.e(f"ld.param.{p.type}", reg, Addr(p), why=why, guard=guard)

    # ---- prologue -----------------------------------------------------------------------
    def _prologue(self) -> None:
        e, T = self.e, self.tile_bytes
        e.reg(
            "u64", "row_ptr", "row_bytes", "rows", "head", "tiles_abs", "tmp64", "pitch64", "q0", "tile_abs"
        )
        # the grid step (dR, dC), which _advance adds; the table-free staging works each tile out again
        dR, dC = ((), ()) if self.staging_without_table else (("dR",), ("dC",))
        e.reg("s64", "R", "R1", *dR, "tR", "row_bytes_s")
        e.reg("u32", "pitch", "C", "C1", *dC, "tC", "thread", "tile", "grid", "n_tiles", "smem", "tmp32")
        e.reg("pred", "pr", "carry")
        e.note("the row side, and this CTA's first tile")
        self._param("row_ptr", "row_ptr")
        e("cvta.to.global.u64", "row_ptr", "row_ptr")
        self._param("row_bytes", "row_bytes", why="the array's bytes: rows * pitch, or less for a view")
        e("mov.b64", "row_bytes_s", "row_bytes")
        self._param("pitch", "row_pitch")
        e("cvt.u64.u32", "pitch64", "pitch")
        self._param("rows", "rows")
        e("mov.u32", "thread", SPECIAL_REGS["tid.x"])
        e("mov.u32", "tile", SPECIAL_REGS["ctaid.x"], why="tiles are handed out grid-stride")
        e("mov.u32", "grid", SPECIAL_REGS["nctaid.x"])
        if self.smem is not None:
            e("mov.u32", "smem", self.smem, why="shared address of stage 0")
        e.reg("u32", "ctab", "warp", "lane")
        e("mov.u32", "ctab", self.table_arr, why="the chunk table: where each chunk's bytes of the tile are")
        e("shr.u32", "warp", "thread", 5)
        e("and.b32", "lane", "thread", 31)
        e("and.b64", "head", "row_ptr", 15, why="bytes from the 16-byte boundary to the array")
        e("sub.u64", "tiles_abs", "row_ptr", "head", why="tile 0 starts here (absolute, 16-aligned)")
        e("add.u64", "tmp64", "row_bytes", "head")
        e("add.u64", "tmp64", "tmp64", T - 1)
        e("shr.u64", "tmp64", "tmp64", T.bit_length() - 1)
        e("cvt.u32.u64", "n_tiles", "tmp64", why=f"tiles of {T} bytes")
        e.reg("f32", "pitch_rcp")
        e.reg("s64", "rem64")
        e("cvt.rn.f32.u32", "pitch_rcp", "pitch")
        e("rcp.approx.ftz.f32", "pitch_rcp", "pitch_rcp")
        if self.staging_without_table:
            e.note("(R, C) = floor-divmod(tile*T - head, pitch), divided again each tile")
        else:
            e.note("(R, C) = floor-divmod(tile*T - head, pitch), divided once, then kept by adding")
        self._tile_start()
        e("mov.u32", "tmp32", T)
        e.reg("u32", "tR32")
        e.divmod_u32("tR32", "tC", "tmp32", "pitch", "pitch_rcp")
        e("cvt.u64.u32", "tR", "tR32", why="one tile, as (rows, columns)")
        if self.staging_without_table:
            return
        # The grid step is needed only where a CTA has a second tile: the planner's grids
        # give one a tile, and its 64-bit division was a tenth of a small tile's work.
        step_done = e.label("STEP_DONE")
        e("mov.u32", "dC", 0)
        e("mov.s64", "dR", 0)
        e("setp.ge.u32", "pr", "grid", "n_tiles")
        e.bra(step_done, guard="pr", uniform=True, why="one tile a CTA: no grid step")
        e("mul.wide.u32", "tmp64", "grid", T, why="the grid step, as (rows, columns)")
        e.divmod_u64("dR", "rem64", "tmp64", "pitch64", "pitch_rcp")
        e("cvt.u32.u64", "dC", "rem64")
        e.place(step_done)
        if not self.whole_rows:
            e.reg("u32", "win_lo", "win_hi", "win_lo_next", "c_last_off", "c_last_w")
            self._param("win_lo", "chunk0_off", why="the group's columns: [win_lo, win_hi)")
            self._param("c_last_off", f"chunk{self.chunks - 1}_off")
            self._param("c_last_w", f"chunk{self.chunks - 1}_width")
            e("add.u32", "win_hi", "c_last_off", "c_last_w")
            e("add.u32", "win_lo_next", "win_lo", "pitch", why="the window again, one row on")

    # ---- main loop ----------------------------------------------------------------------------
    def _body(self) -> None:
        e = self.e
        self._prologue()
        e.reg("u32", "stage", "other")
        if self.smem is not None:
            e("mov.u32", "stage", "smem")
        if self._fwd_async:
            e.reg("u32", "staging")
            e("mov.u32", "staging", self.staging_arr)
            if self.row_gather:
                e("add.u32", "staging", "staging", ROW_GATHER_PAD, why="past the windows' padding")
        if self.loader == "bulk":
            e.reg("u32", "mbar", "phase", "mb_now")
            e.reg("pred", "leader0", "ready")
            e("mov.u32", "mbar", self.mbar_arr)
            e("mov.u32", "phase", 0, why="bit s: the parity stage s's barrier completes next")
            e("setp.eq.u32", "leader0", "thread", 0)
            e("mbarrier.init.shared::cta.b64", e.at("mbar"), 1, guard="leader0",
              why="one arrival (the leader's expect_tx)")  # fmt: skip
            e("add.u32", "tmp32", "mbar", 8)
            e("mbarrier.init.shared::cta.b64", e.at("tmp32"), 1, guard="leader0")
            e("fence.proxy.async.shared::cta", why="make the initialised barriers visible to the copy engine")
            e("bar.sync", 0)
        if self.stages <= 1:
            top = e.label("TILE_LOOP")
            e.place(top)
            e("setp.ge.u32", "pr", "tile", "n_tiles")
            e.bra(self.exit, guard="pr", uniform=True)
            self._tile_setup()
            if self.direction == "backward":
                self._load_rows("stage")
                self._next_row_state()
                self._fill_chunk_table()
                e("bar.sync", 0, why="the whole tile, and the chunk table, are in shared memory")
                self._gather_chunks("stage")
            elif self.row_gather:  # no tile image: the row vectors straight from staging
                if not self.staging_without_table:
                    self._next_row_state()
                    self._fill_chunk_table()
                    e("bar.sync", 0, why="the chunk table is in shared memory")
                self._stage_for_rows()
                self._gather_rows()
            else:
                self._next_row_state()
                self._fill_chunk_table()
                e("bar.sync", 0, why="the chunk table is in shared memory")
                if self.loader == "cp.async":
                    self._scatter_chunks_async("stage")
                else:
                    self._scatter_chunks("stage")
                e("bar.sync", 0, why="every chunk's bytes are in the tile")
                self._store_rows("stage")
            e("bar.sync", 0, why="everyone is done with the tile before it is refilled")
            self._advance()
            e.bra(top)
        else:
            self._pipelined()
        e.place(self.exit)
        e("ret")

    def _tile_setup(self) -> None:
        e, T = self.e, self.tile_bytes
        e("mul.wide.u32", "tmp64", "tile", T)
        e("add.u64", "tile_abs", "tiles_abs", "tmp64", why="absolute address of the tile's first byte")
        e("sub.s64", "q0", "tmp64", "head", why="its offset in the array (negative in tile 0)")

    def _next_row_state(self) -> None:
        """(R1, C1): where the next tile starts (the end of this one)."""
        e = self.e
        e("add.u32", "C1", "C", "tC")
        e("add.s64", "R1", "R", "tR")
        e("setp.ge.u32", "carry", "C1", "pitch")
        e("sub.u32", "C1", "C1", "pitch", guard="carry")
        e("add.s64", "R1", "R1", 1, guard="carry")

    def _tile_start(self) -> None:
        """(R, C) of this CTA's tile: where its first byte lies in the array, as a row and
        a column in [0, pitch) (R < 0 where the tile starts before the array, in tile 0)."""
        e, T = self.e, self.tile_bytes
        e("mul.wide.u32", "tmp64", "tile", T)
        e.divmod_u64("R", "rem64", "tmp64", "pitch64", "pitch_rcp")
        e("cvt.u32.u64", "C", "rem64")
        e("cvt.u32.u64", "tmp32", "head")
        e("sub.s32", "C", "C", "tmp32")
        borrow, borrow_done = e.label("BORROW"), e.label("BORROW_DONE")
        e.place(borrow)  # the floor: at most ceil(15 / pitch) times, where tile*T mod pitch < head
        e("setp.ge.s32", "pr", "C", 0)
        e.bra(borrow_done, guard="pr", uniform=True)
        e("add.s32", "C", "C", "pitch")
        e("sub.s64", "R", "R", 1)
        e.bra(borrow)
        e.place(borrow_done)

    def _advance(self) -> None:
        e = self.e
        e("add.u32", "tile", "tile", "grid")
        if self.staging_without_table:
            # Worked out again, not stepped: the grid step's (dR, dC), carried through the
            # tile beside everything the staging works out for itself, spilled at 48
            # registers; the planner gives each CTA one tile, so this never runs there.
            top = e.label("NEXT_TILE")
            e("setp.ge.u32", "pr", "tile", "n_tiles")
            e.bra(top, guard="pr", uniform=True, why="no next tile: the loop's test exits")
            e("cvt.u64.u32", "pitch64", "pitch", why="from what the loop keeps: nothing more held")
            self._tile_start()
            e.place(top)
            return
        e("add.u32", "C", "C", "dC")
        e("add.s64", "R", "R", "dR")
        e("setp.ge.u32", "carry", "C", "pitch")
        e("sub.u32", "C", "C", "pitch", guard="carry")
        e("add.s64", "R", "R", 1, guard="carry")

    def _pipelined(self) -> None:
        """Two stages (backward, bulk copies): the next tile's loads fly while this one is written."""
        e, T = self.e, self.tile_bytes
        e.reg("u32", "cur_tile", "cur_C")
        e.reg("s64", "cur_R")
        e.reg("u64", "cur_abs", "cur_q0")
        e("setp.ge.u32", "pr", "tile", "n_tiles")
        e.bra(self.exit, guard="pr", uniform=True)
        e.note("prologue: the first tile's loads into stage 0")
        self._tile_setup()
        self._load_rows("stage")
        top = e.label("TILE_LOOP")
        e.place(top)
        e.note("keep this tile's state; move to the next one and start its loads in the other stage")
        e("mov.u32", "cur_tile", "tile")
        e("mov.u32", "cur_C", "C")
        e("mov.s64", "cur_R", "R")
        self._advance()
        e("add.u32", "other", "smem", "smem", why="the other stage: smem + T - (stage - smem)")
        e("add.u32", "other", "other", T)
        e("sub.u32", "other", "other", "stage")
        e.reg("pred", "has_next")
        e("setp.lt.u32", "has_next", "tile", "n_tiles")
        nxt = e.label("NO_NEXT")
        e.bra(nxt, guard="has_next", neg=True, uniform=True)
        self._tile_setup()
        self._load_rows("other")
        e.place(nxt)
        wait = e.label("WAIT")
        e("sub.u32", "mb_now", "stage", "smem")
        e("shr.u32", "mb_now", "mb_now", T.bit_length() - 1)
        e("shr.b32", "tmp32", "phase", "mb_now")
        e("and.b32", "tmp32", "tmp32", 1)
        e("shl.b32", "mb_now", "mb_now", 3)
        e("add.u32", "mb_now", "mb_now", "mbar")
        e.place(wait)
        e("mbarrier.try_wait.parity.shared::cta.b64", "ready", e.at("mb_now"), "tmp32")
        e.bra(wait, guard="ready", neg=True)
        e("sub.u32", "tmp32", "stage", "smem")
        e("shr.u32", "tmp32", "tmp32", T.bit_length() - 1)
        e("shl.b32", "tmp32", 1, "tmp32")
        e("xor.b32", "phase", "phase", "tmp32", why="this stage's next completion has the other parity")
        e.note("write the current tile from its stage; the state registers name it again")
        e.reg("u32", "nxt_tile", "nxt_C")
        e.reg("s64", "nxt_R")
        e("mov.u32", "nxt_tile", "tile")
        e("mov.u32", "nxt_C", "C")
        e("mov.s64", "nxt_R", "R")
        e("mov.u32", "tile", "cur_tile")
        e("mov.u32", "C", "cur_C")
        e("mov.s64", "R", "cur_R")
        self._next_row_state()
        self._fill_chunk_table()
        e("bar.sync", 0, why="the edge bytes other threads stored into this stage, and the chunk table")
        self._gather_chunks("stage")
        e("mov.u32", "tile", "nxt_tile")
        e("mov.u32", "C", "nxt_C")
        e("mov.s64", "R", "nxt_R")
        e("bar.sync", 0, why="the stage is free again")
        e("mov.u32", "stage", "other")
        e("setp.lt.u32", "pr", "tile", "n_tiles")
        e.bra(top, guard="pr", uniform=True)
