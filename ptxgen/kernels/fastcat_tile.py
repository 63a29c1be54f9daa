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
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

from ..args import Pointer, Scalar
from ..footprint import Footprint, FootprintError, check_launch_block
from ..function import PtxFunction, PtxModule
from ..kernel import KernelBase
from ..ptxtypes import SPECIAL_REGS, Addr, Label, Reg, Sink, Vec
from ..targets import resolve_target, target_capability
from .fastcat_common import check_dependent_launch, emit_dependent_launch

__all__ = ["LOADERS", "MAX_CHUNKS", "FastcatTile"]

# Chunks per launch: each costs 16 bytes of parameters and one unrolled copy of the
# per-chunk code; 32 keeps the kernel under ~4K SASS instructions.
MAX_CHUNKS = 32
LOADERS = ("regs", "cp.async", "bulk")
_GRANULES = (16, 8, 4, 2, 1)
_BLOCKS = (64, 128, 256, 512, 1024)
_UNROLLS = (1, 2, 4, 8)
_SHARED_LIMIT = 48 * 1024  # static shared memory a kernel may declare
_U64, _U32 = Scalar("u64"), Scalar("u32")
_BYTES_IN, _BYTES_OUT = Pointer("u8", writes=False), Pointer("u8")
# One access of `width` bytes: (ld/st type, registers, register type).
_ACCESS = {16: ("v4.u32", 4, "b32"), 8: ("v2.u32", 2, "b32"), 4: ("u32", 1, "b32"),
           2: ("b16", 1, "b16"), 1: ("b8", 1, "b16")}  # fmt: skip


def _pick(value: object, what: str, allowed: tuple[int, ...]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
        raise ValueError(f"{what} = {value!r} is not accepted; accepted: {', '.join(map(str, allowed))}")
    return value


class _Emitter:
    """Registers by name (declared once, on first use, with their type) and instructions
    through the typed builder. Operands are register names, ints, or builder objects."""

    def __init__(self, fn: PtxFunction) -> None:
        self.fn = fn
        self.regs: dict[str, Reg] = {}

    def reg(self, ptx_type: str, *names: str) -> list[Reg]:
        out = []
        for name in names:
            known = self.regs.get(name)
            if known is None:
                known = self.regs[name] = self.fn.reg(name, ptx_type)
            elif known.type != ptx_type:
                raise ValueError(f"register %{name} is .{known.type}, asked for .{ptx_type}")
            out.append(known)
        return out

    def _operand(self, x: Any) -> Any:
        if isinstance(x, str):
            return self.regs[x]
        if isinstance(x, list):
            regs = [self.regs[n] for n in x]
            return regs[0] if len(regs) == 1 else Vec(tuple(regs))
        return x

    def at(self, name: str, offset: int = 0) -> Addr:
        return Addr(self.regs[name], offset)

    def __call__(
        self, opcode: str, *ops: Any, why: str = "", guard: str | None = None, neg: bool = False
    ) -> None:
        self.fn.inst(
            opcode,
            *(self._operand(x) for x in ops),
            comment=why,
            guard=self.regs[guard] if guard else None,
            negate=neg,
        )

    def bra(
        self, label: Label, guard: str | None = None, neg: bool = False, why: str = "", uniform: bool = False
    ) -> None:
        """Branch to ``label`` (if ``guard``). ``.uni`` promises that every active thread of
        the warp branches alike: true of an unconditional branch, and of a guard the caller
        marks ``uniform`` (the same in every thread of the warp: a CTA-wide value, a loop
        count every thread shares, or a vote's answer); any other guard may diverge."""
        self("bra.uni" if guard is None or uniform else "bra", label, guard=guard, neg=neg, why=why)

    def label(self, stem: str) -> Label:
        return self.fn.label(stem)

    def place(self, label: Label) -> None:
        self.fn.place(label)

    def note(self, text: str) -> None:
        self.fn.banner(text)

    def data(self, stem: str, width: int) -> list[str]:
        """Registers for one access of ``width`` bytes, named ``stem_0 ..``."""
        _, count, rtype = _ACCESS[width]
        names = [f"{stem}_{i}" for i in range(count)]
        self.reg(rtype, *names)
        return names

    # --- arithmetic helpers ------------------------------------------------------------
    def divmod_u32(self, quot: str, rem: str, num: str, den: str, den_rcp: str) -> None:
        """quot, rem = divmod(num, den) for num < 2**31: a float estimate, then one
        correction each way. The estimate is within 1: quotients here are at most ~T/den + 2."""
        self.reg("f32", "div_f")
        self.reg("pred", "div_fix")
        self("cvt.rn.f32.u32", "div_f", num)
        self("mul.f32", "div_f", "div_f", den_rcp)
        self("cvt.rzi.u32.f32", quot, "div_f")
        self("mul.lo.u32", rem, quot, den)
        self("sub.u32", rem, num, rem)
        self("setp.lt.s32", "div_fix", rem, 0, why="estimate one too high")
        self("sub.u32", quot, quot, 1, guard="div_fix")
        self("add.u32", rem, rem, den, guard="div_fix")
        self("setp.ge.u32", "div_fix", rem, den, why="estimate one too low")
        self("add.u32", quot, quot, 1, guard="div_fix")
        self("sub.u32", rem, rem, den, guard="div_fix")

    def divmod_u64(self, quot: str, rem: str, num: str, den64: str, den_rcp: str) -> None:
        """quot, rem = divmod(num, den) for a u64 num (s64 results): a float estimate, then
        exact correction loops. div.u64 would become a CALL whose ABI spills live
        registers; this stays inline. The loops run a few times while the quotient is < 2**24.
        Both callers divide CTA-wide values (where the CTA's tile starts), so every thread
        loops alike and the branches are ``.uni``; a per-thread ``num`` would need plain ones."""
        self.reg("f32", "div_f")
        self.reg("pred", "div_fix")
        down, up, done = self.label("DIV_DOWN"), self.label("DIV_UP"), self.label("DIV_DONE")
        self("cvt.rn.f32.u64", "div_f", num)
        self("mul.f32", "div_f", "div_f", den_rcp)
        self("cvt.rzi.u64.f32", quot, "div_f")
        self("mul.lo.u64", rem, quot, den64)
        self("sub.s64", rem, num, rem)
        self.place(down)
        self("setp.ge.s64", "div_fix", rem, 0)
        self.bra(up, guard="div_fix", uniform=True)
        self("sub.s64", quot, quot, 1)
        self("add.s64", rem, rem, den64)
        self.bra(down)
        self.place(up)
        self("setp.lt.s64", "div_fix", rem, den64)
        self.bra(done, guard="div_fix", uniform=True)
        self("add.s64", quot, quot, 1)
        self("sub.s64", rem, rem, den64)
        self.bra(up)
        self.place(done)

    def pack_bytes(self, word: str, parts: list[str]) -> None:
        """word = parts[0] | parts[1] << 8 | parts[2] << 16 | parts[3] << 24 (one byte each)."""
        self.reg("b32", "pk_lo", "pk_hi")
        self("prmt.b32", "pk_lo", parts[0], parts[1], 0x0040, why="bytes 0,1")
        self("prmt.b32", "pk_hi", parts[2], parts[3], 0x0040, why="bytes 2,3")
        self("prmt.b32", word, "pk_lo", "pk_hi", 0x5410)


class FastcatTile(KernelBase):
    """Shared-memory tile kernel for channel concatenation at any alignment.

    ``FastcatTile(direction=, chunks=, granule=, whole_rows=True, unroll=4, block=256,
    loader="regs", target="sm_90", dependent_launch=False)`` (the prototype's
    ``tile_kernel`` arguments, and programmatic dependent launch, see
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
        tile_bytes = 16 * unroll * block
        stages = 2 if (direction == "backward" and loader != "regs") else 1
        staging = tile_bytes + 32 * chunks if (direction == "forward" and loader == "cp.async") else 0
        if tile_bytes * stages + staging > _SHARED_LIMIT:
            raise ValueError(
                f"{tile_bytes * stages + staging} bytes of static shared memory; at most {_SHARED_LIMIT} "
                "(16*unroll*block per stage, plus staging for forward cp.async)"
            )
        pdl = check_dependent_launch(dependent_launch, target)
        return (direction, chunks, granule, whole_rows, unroll, block, loader, target, pdl)

    def __init__(self, **kwargs: Any) -> None:
        key = self.cache_key(**kwargs)
        (self.direction, self.chunks, self.granule, self.whole_rows, self.unroll, self.block_size,
         self.loader, self.target, self.dependent_launch) = key  # fmt: skip
        self.name = f"fastcat_tile_{self.direction}"  # type: ignore[misc]
        self.tile_bytes = 16 * self.unroll * self.block_size
        self.stages = 2 if (self.direction == "backward" and self.loader != "regs") else 1
        staging = self.tile_bytes + 32 * self.chunks if self._fwd_async else 0
        self.shared_bytes = self.tile_bytes * self.stages + staging + (16 if self.loader == "bulk" else 0)
        self.block = (self.block_size, 1, 1)
        rows_tag = "rows" if self.whole_rows else "cols"
        self.id = (
            f"{self.name}__g{self.granule}__k{self.chunks}__{rows_tag}__u{self.unroll}"
            f"__b{self.block_size}__{self.loader}{'__pdl' if self.dependent_launch else ''}__{self.target}"
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
            "tile_bytes": self.tile_bytes,
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
        # Several resident blocks keep loads in flight while others re-index; it also
        # steadies ptxas, which otherwise spilled a few bytes in small configurations.
        # Forward holds `unroll` loaded vectors across the scatter: ask for fewer.
        fwd = 1 if self.direction == "backward" else 2
        fn.directive(".minnctapersm", max(1, min(1024 // B, 16 // self.unroll) // fwd))
        if self.dependent_launch:
            emit_dependent_launch(fn)
        self.smem = fn.shared("tile_smem", T * self.stages, align=16)
        self.staging_arr = fn.shared("tile_staging", staging, align=16) if staging else None
        self.mbar_arr = fn.shared("tile_mbar", 16, align=8) if self.loader == "bulk" else None
        self.e = _Emitter(fn)
        self.exit = fn.label("EXIT")
        self._body()
        self.ptx_version = module.version
        self.kernel_source = module.header()
        self.entry_point_source = fn.render()

    def _param(self, reg: str, name: str, why: str = "") -> None:
        p = self.params[name]
        self.e(f"ld.param.{p.type}", reg, Addr(p), why=why)

    # ---- prologue -----------------------------------------------------------------------
    def _prologue(self) -> None:
        e, T = self.e, self.tile_bytes
        e.reg(
            "u64", "row_ptr", "row_bytes", "rows", "head", "tiles_abs", "tmp64", "pitch64", "q0", "tile_abs"
        )
        e.reg("s64", "R", "R1", "dR", "tR", "row_bytes_s")
        e.reg("u32", "pitch", "C", "C1", "dC", "tC", "thread", "tile", "grid", "n_tiles", "smem", "tmp32")
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
        e("mov.u32", "smem", self.smem, why="shared address of stage 0")
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
        e.note("(R, C) = floor-divmod(tile*T - head, pitch), divided once, then kept by adding")
        e("mul.wide.u32", "tmp64", "tile", T)
        e.divmod_u64("R", "rem64", "tmp64", "pitch64", "pitch_rcp")
        e("cvt.u32.u64", "C", "rem64")
        e("cvt.u32.u64", "tmp32", "head")
        e("sub.s32", "C", "C", "tmp32")
        borrow, borrow_done = e.label("BORROW"), e.label("BORROW_DONE")
        e.place(borrow)  # runs at most ceil(15 / pitch) times, in tile 0 only
        e("setp.ge.s32", "pr", "C", 0)
        e.bra(borrow_done, guard="pr", uniform=True)
        e("add.s32", "C", "C", "pitch")
        e("sub.s64", "R", "R", 1)
        e.bra(borrow)
        e.place(borrow_done)
        e("mul.wide.u32", "tmp64", "grid", T, why="the grid step, as (rows, columns)")
        e.divmod_u64("dR", "rem64", "tmp64", "pitch64", "pitch_rcp")
        e("cvt.u32.u64", "dC", "rem64")
        e("mov.u32", "tmp32", T)
        e("div.u32", "tC", "tmp32", "pitch", why="one tile, as (rows, columns)")
        e("rem.u32", "tC", "tmp32", "pitch")
        e("div.u32", "tmp32", "tmp32", "pitch")
        e("cvt.u64.u32", "tR", "tmp32")
        if not self.whole_rows:
            e.reg("u32", "win_lo", "win_hi", "win_lo_next", "c_last_off", "c_last_w")
            self._param("win_lo", "chunk0_off", why="the group's columns: [win_lo, win_hi)")
            self._param("c_last_off", f"chunk{self.chunks - 1}_off")
            self._param("c_last_w", f"chunk{self.chunks - 1}_width")
            e("add.u32", "win_hi", "c_last_off", "c_last_w")
            e("add.u32", "win_lo_next", "win_lo", "pitch", why="the window again, one row on")

    # ---- the vector u of this thread in the tile ------------------------------------------
    def _row_vector(self, u: int) -> None:
        """%q_u = offset in the array of this thread's vector u, %off_u its offset in the
        tile, %full_u: its 16 bytes lie in the array (and, for a group narrower than the
        row, wholly inside its columns when writing, or touch them when reading)."""
        e = self.e
        e.reg("u32", f"off_{u}")
        e.reg("s64", f"q_{u}")
        e.reg("pred", f"full_{u}", f"any_{u}")
        e("mad.lo.u32", f"off_{u}", "thread", 16, 16 * u * self.block_size, why=f"vector {u}*block + thread")
        e("cvt.u64.u32", "tmp64", f"off_{u}")
        e("add.s64", f"q_{u}", "q0", "tmp64")
        e("setp.ge.s64", f"full_{u}", f"q_{u}", 0)
        e("add.s64", "tmp64", f"q_{u}", 16)
        e("setp.le.s64", "pr", "tmp64", "row_bytes_s")
        e("and.pred", f"full_{u}", f"full_{u}", "pr", why="all 16 bytes inside the array")
        e("mov.pred", f"any_{u}", f"full_{u}")
        if self.whole_rows:
            return
        e.reg("u32", "col", "col_q", "col_end")
        e.reg("pred", "touch", "inside")
        e("add.u32", "tmp32", "C", f"off_{u}")
        e.divmod_u32("col_q", "col", "tmp32", "pitch", "pitch_rcp")
        e("add.u32", "col_end", "col", 16)
        e("setp.lt.u32", "touch", "col", "win_hi")
        e("setp.gt.u32", "pr", "col_end", "win_lo")
        e("and.pred", "touch", "touch", "pr")
        e("setp.gt.u32", "pr", "col_end", "win_lo_next", why="reaches into the next row's window")
        e("or.pred", f"any_{u}", "touch", "pr", why="holds bytes of the group")
        e("setp.ge.u32", "inside", "col", "win_lo")
        e("setp.le.u32", "pr", "col_end", "win_hi")
        e("and.pred", "inside", "inside", "pr", why="holds only bytes of the group")
        if self.direction == "backward":
            e("and.pred", f"full_{u}", f"full_{u}", f"any_{u}", why="read only vectors the group needs")
        else:
            e("and.pred", f"full_{u}", f"full_{u}", "inside", why="write whole only vectors it owns")

    # ---- backward row phase: dy tile -> shared ---------------------------------------------
    def _load_rows(self, stage: str) -> None:
        """Read the tile into the shared stage whose address %stage holds."""
        e, U = self.e, self.unroll
        for u in range(U):
            self._row_vector(u)
        if self.loader == "regs":
            data = []
            for u in range(U):
                e.reg("u64", f"gaddr_{u}")
                e("cvt.u64.u32", "tmp64", f"off_{u}")
                e("add.u64", f"gaddr_{u}", "tile_abs", "tmp64")
                data.append(e.data(f"v{u}", 16))
                e(
                    "ld.global.nc.v4.u32",
                    data[u],
                    e.at(f"gaddr_{u}"),
                    guard=f"full_{u}",
                    why="all loads first",
                )
            for u in range(U):
                e.reg("u32", f"saddr_{u}")
                e("add.u32", f"saddr_{u}", stage, f"off_{u}")
                e("st.shared.v4.u32", e.at(f"saddr_{u}"), data[u], guard=f"full_{u}")
        else:  # bulk: thread 0 copies the run of full vectors in one instruction
            self._bulk_issue(stage)
        self._partial_loads(stage)

    def _bulk_issue(self, stage: str) -> None:
        e, T = self.e, self.tile_bytes
        e.reg("s64", "bk_lo", "bk_hi")
        e.reg("u32", "bk_bytes", "bk_mbar", "bk_dst")
        e.reg("u64", "bk_src")
        e.reg("pred", "leader")
        skip = e.label("BULK_SKIP")
        e("setp.eq.u32", "leader", "thread", 0)
        e.bra(skip, guard="leader", neg=True)
        e.note("full vectors of this tile: offsets [bk_lo, bk_hi), bk_lo = 16*ceil(-q0/16) if q0 < 0")
        e("neg.s64", "bk_lo", "q0")
        e("add.s64", "bk_lo", "bk_lo", 15)
        e("and.b64", "bk_lo", "bk_lo", -16)
        e("max.s64", "bk_lo", "bk_lo", 0)
        e("sub.s64", "bk_hi", "row_bytes_s", "q0", why="bytes of the array from the tile start")
        e("and.b64", "bk_hi", "bk_hi", -16)
        e("min.s64", "bk_hi", "bk_hi", T)
        e("max.s64", "bk_hi", "bk_hi", "bk_lo")
        e("sub.s64", "tmp64", "bk_hi", "bk_lo")
        e("cvt.u32.u64", "bk_bytes", "tmp64")
        e("sub.u32", "bk_mbar", stage, "smem")
        e("shr.u32", "bk_mbar", "bk_mbar", T.bit_length() - 1 - 3, why="stage s -> mbarrier 8*s")
        e("add.u32", "bk_mbar", "bk_mbar", "mbar")
        e("fence.proxy.async.shared::cta", why="earlier generic reads of this stage before the async write")
        e("mbarrier.arrive.expect_tx.shared::cta.b64", Sink(), e.at("bk_mbar"), "bk_bytes",
          why="the bytes to wait for")  # fmt: skip
        e("setp.eq.u32", "pr", "bk_bytes", 0)
        e.bra(skip, guard="pr", uniform=True, why="thread 0 alone runs this")
        e("cvt.u32.u64", "tmp32", "bk_lo")
        e("add.u32", "bk_dst", stage, "tmp32")
        e("add.u64", "bk_src", "tile_abs", "bk_lo")
        e("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes",
          e.at("bk_dst"), e.at("bk_src"), "bk_bytes", e.at("bk_mbar"))  # fmt: skip
        e.place(skip)

    def _partial_loads(self, stage: str) -> None:
        """Vectors that straddle the array's ends (tiles 0 and last only): byte loads."""
        e = self.e
        skip = e.label("EDGE_LOADS_DONE")
        e.reg("u32", "last_tile")
        e.reg("pred", "edge")
        e("sub.u32", "last_tile", "n_tiles", 1)
        e("setp.eq.u32", "edge", "tile", 0)
        e("setp.eq.or.u32", "edge", "tile", "last_tile", "edge")
        e.bra(
            skip,
            guard="edge",
            neg=True,
            why="interior tiles: no vector straddles the array's ends",
            uniform=True,
        )
        e.reg("u32", "b", "sb")
        e.reg("s64", "qb")
        e.reg("u64", "gb")
        e.reg("b16", "byte")
        # Only the warps holding a vector that straddles an end run the byte loops; in
        # them every thread runs the loops, its own vectors' bytes predicated off, so the
        # loop count is the same in every thread and no branch diverges.
        e.reg("pred", "part")
        for u in range(self.unroll):
            loop, done = e.label("EDGE_BYTE"), e.label("EDGE_BYTES_DONE")
            self._straddles(u, "was not loaded whole", done)
            e("mov.u32", "b", 0)
            e.place(loop)
            e("cvt.u64.u32", "tmp64", "b")
            e("add.s64", "qb", f"q_{u}", "tmp64")
            e("setp.ge.and.s64", "pr", "qb", 0, "part")
            e("setp.lt.and.s64", "pr", "qb", "row_bytes_s", "pr", why="this byte is in the array")
            e("add.u32", "tmp32", f"off_{u}", "b")
            e("cvt.u64.u32", "gb", "tmp32")
            e("add.u64", "gb", "gb", "tile_abs")
            e("add.u32", "sb", stage, "tmp32")
            e("ld.global.nc.b8", "byte", e.at("gb"), guard="pr")
            e("st.shared.b8", e.at("sb"), "byte", guard="pr")
            e("add.u32", "b", "b", 1)
            e("setp.lt.u32", "pr", "b", 16)
            e.bra(loop, guard="pr", uniform=True, why="the same count in every thread")
            e.place(done)
        e.place(skip)

    def _straddles(self, u: int, what: str, done: Label) -> None:
        """%part: this thread's vector u holds bytes of the array but not all 16 (only at
        the array's ends). A warp in which no thread's does goes on to ``done``: the vote
        gives every thread of the warp the same answer, so that branch is uniform."""
        e = self.e
        e.reg("pred", "any_part")
        e("not.pred", "part", f"full_{u}", why=f"this vector {what}")
        e("setp.lt.and.s64", "part", f"q_{u}", "row_bytes_s", "part")
        e("add.s64", "tmp64", f"q_{u}", 16)
        e("setp.gt.and.s64", "part", "tmp64", 0, "part", why="and it holds bytes of the array")
        e("vote.sync.any.pred", "any_part", "part", 0xFFFFFFFF, why="asks all 32 threads of the warp")
        e.bra(done, guard="any_part", neg=True, uniform=True, why="no thread of this warp has such a vector")

    # ---- forward row phase: shared -> y tile -----------------------------------------------
    def _store_rows(self, stage: str) -> None:
        e, U = self.e, self.unroll
        for u in range(U):
            self._row_vector(u)
            e.reg("u64", f"gaddr_{u}")
            e.reg("u32", f"saddr_{u}")
            e("cvt.u64.u32", "tmp64", f"off_{u}")
            e("add.u64", f"gaddr_{u}", "tile_abs", "tmp64")
            e("add.u32", f"saddr_{u}", stage, f"off_{u}")
            data = e.data(f"v{u}", 16)
            e("ld.shared.v4.u32", data, e.at(f"saddr_{u}"), guard=f"full_{u}")
            e("st.global.v4.u32", e.at(f"gaddr_{u}"), data, guard=f"full_{u}")
        # Vectors not written whole: at the array's ends, and (for a group narrower than
        # the row) those that straddle the group's columns. Granule by granule, each
        # written only if it belongs to the array and the group.
        g = self.granule if not self.whole_rows else 1
        e.reg("u32", "m", "sg")
        e.reg("s64", "qg")
        e.reg("u64", "gg")
        part = e.data("part", g)
        kind = _ACCESS[g][0]
        skip_all = e.label("EDGE_STORES_DONE")
        if self.whole_rows:
            e.reg("u32", "last_tile")
            e.reg("pred", "edge")
            e("sub.u32", "last_tile", "n_tiles", 1)
            e("setp.eq.u32", "edge", "tile", 0)
            e("setp.eq.or.u32", "edge", "tile", "last_tile", "edge")
            e.bra(skip_all, guard="edge", neg=True, uniform=True)
        else:
            e.reg("u32", "colg")
        # Whole rows: edge tiles only, and only the warps holding a straddling vector;
        # there every thread runs the loops, its whole vectors predicated off, so no
        # branch diverges. Column groups: every tile, so a thread skips its whole vectors
        # (a branch that may diverge).
        e.reg("pred", "part")
        for u in range(U):
            done, loop = e.label("EDGE_VEC_DONE"), e.label("EDGE_GRANULE")
            if self.whole_rows:
                self._straddles(u, "was not stored whole", done)
            else:
                e("not.pred", "part", f"full_{u}", why="this vector was not stored whole")
                e.bra(done, guard=f"full_{u}")
                e.bra(done, guard=f"any_{u}", neg=True, why="no byte of the group here")
                e("add.u32", "tmp32", "C", f"off_{u}")
                e.divmod_u32("col_q", "colg", "tmp32", "pitch", "pitch_rcp")
            e("mov.u32", "m", 0)
            e.place(loop)
            e("cvt.u64.u32", "tmp64", "m")
            e("add.s64", "qg", f"q_{u}", "tmp64")
            e("setp.ge.and.s64", "pr", "qg", 0, "part")
            e("setp.lt.and.s64", "pr", "qg", "row_bytes_s", "pr", why="in the array")
            if not self.whole_rows:
                e("setp.ge.and.u32", "pr", "colg", "win_lo", "pr")
                e("setp.lt.and.u32", "pr", "colg", "win_hi", "pr", why="in the group's columns")
            e("add.u32", "tmp32", f"off_{u}", "m")
            e("cvt.u64.u32", "gg", "tmp32")
            e("add.u64", "gg", "gg", "tile_abs")
            e("add.u32", "sg", stage, "tmp32")
            e(f"ld.shared.{kind}", part, e.at("sg"), guard="pr")
            e(f"st.global.{kind}", e.at("gg"), part, guard="pr")
            if not self.whole_rows:
                e("add.u32", "colg", "colg", g, why="granules never straddle a row: one carry")
                e("setp.ge.u32", "carry", "colg", "pitch")
                e("sub.u32", "colg", "colg", "pitch", guard="carry")
            e("add.u32", "m", "m", g)
            e("setp.lt.u32", "pr", "m", 16)
            e.bra(loop, guard="pr", uniform=True, why="the same count in every thread that came in")
            e.place(done)
        e.place(skip_all)

    # ---- chunk phase ------------------------------------------------------------------------
    def _chunk_range(self, k: int) -> Label:
        """Chunk k's registers: pointer, width, offset, its bytes from this tile
        [c_dlo, c_dhi), and the absolute 16-byte vectors spanning them. Returns the label
        to go to when done with the chunk (not yet placed)."""
        e = self.e
        e.reg("u64", "c_ptr", "c_w64", "c_lim", "c_vstart", "c_vend")
        e.reg("s64", "c_RW", "c_R1W", "c_dlo", "c_dhi")
        e.reg("s32", "c_clo", "c_chi")
        e.reg("u32", "c_w", "c_off", "c_nvec", "c_jump")
        e.reg("f32", "c_rcp")
        done = e.label(f"CHUNK{k}_DONE")
        e.note(f"chunk {k}: the bytes this tile holds")
        self._param("c_ptr", f"chunk{k}_ptr")
        e("cvta.to.global.u64", "c_ptr", "c_ptr")
        self._param("c_off", f"chunk{k}_off")
        self._param("c_w", f"chunk{k}_width")
        e("cvt.u64.u32", "c_w64", "c_w")
        e("mul.lo.s64", "c_RW", "R", "c_w64", why="chunk bytes before the tile's first row")
        e("sub.s32", "c_clo", "C", "c_off")
        e("max.s32", "c_clo", "c_clo", 0)
        e("min.s32", "c_clo", "c_clo", "c_w")
        e("cvt.s64.s32", "tmp64", "c_clo")
        e("add.s64", "c_dlo", "c_RW", "tmp64", why="first chunk byte from this tile")
        e("mul.lo.s64", "c_R1W", "R1", "c_w64")
        e("sub.s32", "c_chi", "C1", "c_off")
        e("max.s32", "c_chi", "c_chi", 0)
        e("min.s32", "c_chi", "c_chi", "c_w")
        e("cvt.s64.s32", "tmp64", "c_chi")
        e("add.s64", "c_dhi", "c_R1W", "tmp64", why="first chunk byte from the next tile")
        e("mul.lo.u64", "c_lim", "rows", "c_w64")
        e("max.s64", "c_dlo", "c_dlo", 0)
        e("min.s64", "c_dlo", "c_dlo", "c_lim")
        e("min.s64", "c_dhi", "c_dhi", "c_lim")
        e("mov.u32", "c_nvec", 0, why="(read after `done` by the staging offsets)")
        e("setp.le.s64", "pr", "c_dhi", "c_dlo")
        e.bra(done, guard="pr", why="nothing of this chunk here", uniform=True)
        e("add.u64", "c_vstart", "c_ptr", "c_dlo")
        e("and.b64", "c_vstart", "c_vstart", -16, why="first 16-byte vector of the range (absolute)")
        e("add.u64", "c_vend", "c_ptr", "c_dhi")
        e("add.u64", "c_vend", "c_vend", 15)
        e("and.b64", "c_vend", "c_vend", -16)
        e("sub.u64", "tmp64", "c_vend", "c_vstart")
        e("shr.u64", "tmp64", "tmp64", 4)
        e("cvt.u32.u64", "c_nvec", "tmp64")
        e(
            "sub.u32",
            "c_jump",
            "pitch",
            "c_w",
            why="from the end of the chunk in one row to its start in the next",
        )
        e("cvt.rn.f32.u32", "c_rcp", "c_w")
        e("rcp.approx.ftz.f32", "c_rcp", "c_rcp")
        return done

    def _source_of(self, dreg: str, sreg: str, rem: str, stage: str) -> None:
        """%sreg = shared address of chunk byte %dreg (s64); %rem = its column in the chunk."""
        e = self.e
        e.reg("u32", "e", "qq")
        e("sub.s64", "tmp64", dreg, "c_RW")
        e("cvt.u32.u64", "e", "tmp64", why="chunk bytes from the tile's first row")
        e.divmod_u32("qq", rem, "e", "c_w", "c_rcp")
        e("mad.lo.u32", sreg, "qq", "pitch", "c_off")
        e("add.u32", sreg, sreg, rem)
        e("sub.u32", sreg, sreg, "C")
        e("add.u32", sreg, sreg, stage)

    def _granule_walk(self, sreg: str, rem: str, access: Callable[[int, Addr], None]) -> None:
        """Visit the 16/g granules of one chunk vector: access(m, shared address). %sreg
        carries only the row jumps; the g-steps are immediate offsets."""
        e, g = self.e, self.granule
        e.reg("pred", "wrap")
        for m in range(16 // g):
            if m:
                e("add.u32", rem, rem, g)
                e("setp.eq.u32", "wrap", rem, "c_w", why="end of this row's piece")
                e("add.u32", sreg, sreg, "c_jump", guard="wrap")
                e("mov.u32", rem, 0, guard="wrap")
            access(m, e.at(sreg, m * g))

    def _gather_chunks(self, stage: str) -> None:
        """Backward: write every chunk's bytes of this tile, 16-byte stores."""
        e = self.e
        for k in range(self.chunks):
            done = self._chunk_range(k)
            e.reg("u32", "j", "s", "rem")
            e.reg("u64", "a")
            e.reg("s64", "d", "dm")
            e.reg("pred", "vfull")
            loop, partial, nxt = e.label(f"C{k}_LOOP"), e.label(f"C{k}_PARTIAL"), e.label(f"C{k}_NEXT")
            out = e.data("o", 16)
            e("mov.u32", "j", "thread")
            e.place(loop)
            e("setp.ge.u32", "pr", "j", "c_nvec")
            e.bra(done, guard="pr")
            e("mul.wide.u32", "tmp64", "j", 16)
            e("add.u64", "a", "c_vstart", "tmp64", why="the absolute 16-byte vector this thread writes")
            e("sub.s64", "d", "a", "c_ptr")
            e("setp.ge.s64", "vfull", "d", "c_dlo")
            e("add.s64", "tmp64", "d", 16)
            e("setp.le.and.s64", "vfull", "tmp64", "c_dhi", "vfull", why="all 16 bytes come from this tile")
            e.bra(partial, guard="vfull", neg=True)
            self._source_of("d", "s", "rem", stage)
            self._gather_vector(out)
            e("st.global.v4.u32", e.at("a"), out)
            e.bra(nxt)
            e.place(partial)
            self._partial_chunk_vector(store=True, stage=stage)
            e.place(nxt)
            e("add.u32", "j", "j", self.block_size)
            e.bra(loop)
            e.place(done)

    def _gather_vector(self, out: list[str]) -> None:
        """A chunk vector from the tile, granule by granule, carrying into the next row's
        piece. (Realigning whole words with funnel shifts where the vector lies in one
        row's piece measured slower twice: lab/kernels-history.md, lab/README.md.)"""
        e, g = self.e, self.granule
        if g == 16:
            self._granule_walk("s", "rem", lambda m, addr: e("ld.shared.v4.u32", out, addr))
            return
        self._gather_granules(out)

    def _gather_granules(self, out: list[str]) -> None:
        """A chunk vector granule by granule, carrying into the next row's piece."""
        e, g = self.e, self.granule
        if g == 8:
            self._granule_walk(
                "s", "rem", lambda m, addr: e("ld.shared.v2.u32", out[2 * m : 2 * m + 2], addr)
            )
        elif g == 4:
            self._granule_walk("s", "rem", lambda m, addr: e("ld.shared.u32", out[m], addr))
        elif g == 2:
            halves = [f"h{m}" for m in range(8)]
            e.reg("b16", *halves)
            self._granule_walk("s", "rem", lambda m, addr: e("ld.shared.b16", halves[m], addr))
            for w in range(4):
                e("mov.b32", out[w], halves[2 * w : 2 * w + 2])
        else:
            bytes_ = [f"by{m}" for m in range(16)]
            e.reg("b32", *bytes_)
            self._granule_walk("s", "rem", lambda m, addr: e("ld.shared.u8", bytes_[m], addr))
            for w in range(4):
                e.pack_bytes(out[w], bytes_[4 * w : 4 * w + 4])

    def _owned_walk(
        self, stage: str, access: Callable[[], None], after: Callable[[], None] | None = None
    ) -> None:
        """Visit the granules of the chunk vector at chunk byte %d (address %a) whose bytes
        this tile holds, one a round (16 / granule rounds): ``access()`` with %s their
        place in the tile and %am their address. They are consecutive, so %s is found by
        one division, at the first of them, and then carried as :meth:`_granule_walk`
        carries it. ``after()`` ends every round (a shift of the registers, say)."""
        e, g = self.e, self.granule
        e.reg("u32", "m")
        e.reg("u64", "am")
        e.reg("pred", "found", "wrap")
        loop, skip, have = e.label("PG_LOOP"), e.label("PG_SKIP"), e.label("PG_HAVE")
        e("mov.u32", "m", 0)
        e("setp.ne.u32", "found", "m", 0, why="no granule of this tile seen yet")
        e.place(loop)
        e("cvt.u64.u32", "tmp64", "m")
        e("add.s64", "dm", "d", "tmp64")
        e("add.u64", "am", "a", "tmp64")
        e("setp.ge.s64", "pr", "dm", "c_dlo")
        e("setp.lt.and.s64", "pr", "dm", "c_dhi", "pr")
        e.bra(skip, guard="pr", neg=True, why="not this tile's")
        e.bra(have, guard="found")
        self._source_of("dm", "s", "rem", stage)
        e("setp.eq.u32", "found", "m", "m", why="the rest follow in order: carried, not divided")
        e.place(have)
        access()
        e("add.u32", "s", "s", g)
        e("add.u32", "rem", "rem", g)
        e("setp.eq.u32", "wrap", "rem", "c_w", why="end of this row's piece")
        e("add.u32", "s", "s", "c_jump", guard="wrap")
        e("mov.u32", "rem", 0, guard="wrap")
        e.place(skip)
        if after is not None:
            after()
        e("add.u32", "m", "m", g)
        e("setp.lt.u32", "pr", "m", 16)
        # .uni speaks of the threads active here: those that came in (a plain branch may
        # have left others out), and each of them runs 16 / granule rounds.
        e.bra(loop, guard="pr", uniform=True, why="the same count in every thread that came in")

    def _partial_chunk_vector(self, *, store: bool, stage: str) -> None:
        """A chunk vector that straddles the tile's range: granule by granule, each only if
        its bytes come from (backward) / go to (forward) this tile."""
        e = self.e
        kind = _ACCESS[self.granule][0]
        regs = e.data("pg", self.granule)

        def access() -> None:
            if store:
                e(f"ld.shared.{kind}", regs, e.at("s"))
                e(f"st.global.{kind}", e.at("am"), regs)
            else:
                e(f"ld.global.nc.{kind}", regs, e.at("am"))
                e(f"st.shared.{kind}", e.at("s"), regs)

        self._owned_walk(stage, access)

    def _scatter_chunks(self, stage: str) -> None:
        """Forward: read every chunk's bytes for this tile (16-byte loads, `unroll` in
        flight) and place them in the shared tile."""
        e, U, B = self.e, self.unroll, self.block_size
        for k in range(self.chunks):
            done = self._chunk_range(k)
            e.reg("u32", "j0", "j", "s", "rem")
            e.reg("u64", "a")
            e.reg("s64", "d", "dm")
            loop = e.label(f"C{k}_LOOP")
            e("mov.u32", "j0", "thread")
            e.place(loop)
            e("setp.ge.u32", "pr", "j0", "c_nvec")
            e.bra(done, guard="pr")
            vals = []
            for u in range(U):
                e.reg("u64", f"ca_{u}")
                e.reg("s64", f"cd_{u}")
                e.reg("pred", f"cvalid_{u}", f"cfull_{u}")
                e("add.u32", "j", "j0", u * B)
                e("setp.lt.u32", f"cvalid_{u}", "j", "c_nvec")
                e("mul.wide.u32", "tmp64", "j", 16)
                e("add.u64", f"ca_{u}", "c_vstart", "tmp64")
                e("sub.s64", f"cd_{u}", f"ca_{u}", "c_ptr")
                e("setp.ge.and.s64", f"cfull_{u}", f"cd_{u}", "c_dlo", f"cvalid_{u}")
                e("add.s64", "tmp64", f"cd_{u}", 16)
                e("setp.le.and.s64", f"cfull_{u}", "tmp64", "c_dhi", f"cfull_{u}")
                vals.append(e.data(f"x{u}", 16))
                e("ld.global.nc.v4.u32", vals[u], e.at(f"ca_{u}"), guard=f"cfull_{u}", why="all loads first")
            for u in range(U):
                part, nxt = e.label(f"C{k}_PART"), e.label(f"C{k}_NEXT")
                e.bra(part, guard=f"cfull_{u}", neg=True)
                e("mov.s64", "d", f"cd_{u}")
                self._source_of("d", "s", "rem", stage)
                self._scatter_vector(vals[u])
                e.bra(nxt)
                e.place(part)
                e.bra(nxt, guard=f"cvalid_{u}", neg=True)
                e("mov.s64", "d", f"cd_{u}")
                e("mov.u64", "a", f"ca_{u}")
                self._partial_chunk_vector(store=False, stage=stage)
                e.place(nxt)
            e("add.u32", "j0", "j0", U * B)
            e.bra(loop)
            e.place(done)

    def _scatter_chunks_async(self, stage: str) -> None:
        """Forward on sm_80+: first every chunk's vectors of this tile go to a staging area
        with cp.async (all in flight at once, no registers held), then they are scattered
        from there into the tile. A vector only part of which this tile holds (at the
        tile's ends) is staged whole too, as long as it lies inside the chunk: loaded a
        granule at a time from global memory instead, a thread waited out one load's
        latency per granule, and its CTA with it. Only the vectors at the array's ends
        are loaded granule by granule, once an op."""
        e, B = self.e, self.block_size
        e.reg("u32", "j", "s", "rem", "st_off", "st_addr")
        e.reg("u64", "a")
        e.reg("s64", "d", "dm")
        e.reg("pred", "vfull", "vin")
        for phase in ("issue", "scatter"):
            e("mov.u32", "st_off", "staging", why="chunk k's vectors follow chunk k-1's")
            for k in range(self.chunks):
                done = self._chunk_range(k)
                loop, nxt = e.label(f"A{k}_LOOP"), e.label(f"A{k}_NEXT")
                e("mov.u32", "j", "thread")
                e.place(loop)
                e("setp.ge.u32", "pr", "j", "c_nvec")
                e.bra(done, guard="pr")
                e("mul.wide.u32", "tmp64", "j", 16)
                e("add.u64", "a", "c_vstart", "tmp64")
                e("sub.s64", "d", "a", "c_ptr")
                e("setp.ge.s64", "vin", "d", 0)
                e("add.s64", "tmp64", "d", 16)
                e("setp.le.and.s64", "vin", "tmp64", "c_lim", "vin", why="all 16 bytes inside the chunk")
                e("mad.lo.u32", "st_addr", "j", 16, "st_off")
                if phase == "issue":
                    part = e.label(f"A{k}_PART")
                    e.bra(part, guard="vin", neg=True)
                    e(
                        "cp.async.cg.shared.global",
                        e.at("st_addr"),
                        e.at("a"),
                        16,
                        why="in flight; no register held",
                    )
                    e.bra(nxt)
                    e.place(part)
                    self._partial_chunk_vector(store=False, stage=stage)
                else:
                    e.bra(nxt, guard="vin", neg=True, why="edge vectors of the array went to the tile")
                    vals = e.data("x0", 16)
                    e("ld.shared.v4.u32", vals, e.at("st_addr"))
                    e("setp.ge.s64", "vfull", "d", "c_dlo")
                    e("add.s64", "tmp64", "d", 16)
                    e("setp.le.and.s64", "vfull", "tmp64", "c_dhi", "vfull", why="all 16 bytes for this tile")
                    edge = e.label(f"A{k}_EDGE")
                    e.bra(edge, guard="vfull", neg=True)
                    self._source_of("d", "s", "rem", stage)
                    self._scatter_vector(vals)
                    e.bra(nxt)
                    e.place(edge)
                    self._scatter_owned_granules(vals, stage)
                e.place(nxt)
                e("add.u32", "j", "j", B)
                e.bra(loop)
                e.place(done)
                e("mad.lo.u32", "st_off", "c_nvec", 16, "st_off")
            if phase == "issue":
                e("cp.async.commit_group")
                e("cp.async.wait_group", 0, why="this thread's copies have landed")
                e("bar.sync", 0, why="... and everyone's")

    def _scatter_owned_granules(self, vals: list[str], stage: str) -> None:
        """A staged vector of which this tile holds only part: the granules whose bytes
        are in the tile's range [c_dlo, c_dhi) go to the tile; the vector's registers
        shift down a granule each round, so granule m is always in the lowest."""
        e, g = self.e, self.granule
        kind = _ACCESS[g][0]
        regs = e.data("pg", g)
        e.reg("b16", "og_high")

        def access() -> None:
            if g == 16:
                e(f"st.shared.{kind}", e.at("s"), vals)
            elif g == 8:
                e(f"st.shared.{kind}", e.at("s"), vals[:2])
            elif g == 2:
                e("mov.b32", [regs[0], "og_high"], vals[0], why="the lowest granule")
                e(f"st.shared.{kind}", e.at("s"), regs[0])
            else:
                e(f"st.shared.{kind}", e.at("s"), vals[0])

        def shift() -> None:
            if g == 8:
                e("mov.b32", vals[0], vals[2], why="the next granule down")
                e("mov.b32", vals[1], vals[3])
            elif g == 4:
                for i in range(3):
                    e("mov.b32", vals[i], vals[i + 1], why="the next granule down" if i == 0 else "")
            elif g < 4:
                for i in range(3):
                    why = "the next granule down" if i == 0 else ""
                    e("shf.r.clamp.b32", vals[i], vals[i], vals[i + 1], 8 * g, why=why)
                e("shr.b32", vals[3], vals[3], 8 * g)

        self._owned_walk(stage, access, shift)

    def _scatter_vector(self, val: list[str]) -> None:
        """A chunk vector into the tile, granule by granule, carrying into the next row's piece."""
        e, g = self.e, self.granule
        if g == 16:
            self._granule_walk("s", "rem", lambda m, addr: e("st.shared.v4.u32", addr, val))
            return
        self._scatter_granules(val)

    def _scatter_granules(self, val: list[str]) -> None:
        """A chunk vector granule by granule into the tile, carrying into the next row's piece."""
        e, g = self.e, self.granule
        if g == 8:
            self._granule_walk(
                "s", "rem", lambda m, addr: e("st.shared.v2.u32", addr, val[2 * m : 2 * m + 2])
            )
        elif g == 4:
            self._granule_walk("s", "rem", lambda m, addr: e("st.shared.u32", addr, val[m]))
        elif g == 2:
            halves = [f"h{m}" for m in range(8)]
            e.reg("b16", *halves)
            for w in range(4):
                e("mov.b32", halves[2 * w : 2 * w + 2], val[w])
            self._granule_walk("s", "rem", lambda m, addr: e("st.shared.b16", addr, halves[m]))
        else:
            e.reg("b32", "byte_w")

            def one(m: int, addr: Addr) -> None:
                if m % 4:
                    e("shr.b32", "byte_w", val[m // 4], 8 * (m % 4))
                    e("st.shared.u8", addr, "byte_w")
                else:
                    e("st.shared.u8", addr, val[m // 4])

            self._granule_walk("s", "rem", one)

    # ---- main loop ----------------------------------------------------------------------------
    def _body(self) -> None:
        e = self.e
        self._prologue()
        e.reg("u32", "stage", "other")
        e("mov.u32", "stage", "smem")
        if self._fwd_async:
            e.reg("u32", "staging")
            e("mov.u32", "staging", self.staging_arr)
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
        if self.stages == 1:
            top = e.label("TILE_LOOP")
            e.place(top)
            e("setp.ge.u32", "pr", "tile", "n_tiles")
            e.bra(self.exit, guard="pr", uniform=True)
            self._tile_setup()
            if self.direction == "backward":
                self._load_rows("stage")
                e("bar.sync", 0, why="the whole tile is in shared memory")
                self._next_row_state()
                self._gather_chunks("stage")
            else:
                self._next_row_state()
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

    def _advance(self) -> None:
        e = self.e
        e("add.u32", "tile", "tile", "grid")
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
        e("bar.sync", 0, why="the edge bytes other threads stored into this stage")
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
        self._gather_chunks("stage")
        e("mov.u32", "tile", "nxt_tile")
        e("mov.u32", "C", "nxt_C")
        e("mov.s64", "R", "nxt_R")
        e("bar.sync", 0, why="the stage is free again")
        e("mov.u32", "stage", "other")
        e("setp.lt.u32", "pr", "tile", "n_tiles")
        e.bra(top, guard="pr", uniform=True)
