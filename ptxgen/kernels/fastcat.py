"""Which fast kernel moves a channel-concat op, with which parameters: the selection rule.

The fast kernels move *bytes* (``fastcat_vec``, ``fastcat_tile``, ``fastcat_rowpack``);
this module decides, from the shape, the element size, the pointers' alignments and the
device, which of them run and with what arguments. The rule comes from measurements
on an H200 (``docs/perf/kernels.md``); it depends only on quantities a caller knows
before launching, so it also serves runtimes without Python (``choose`` is pure).

Terms: the **row side** is ``rows`` rows of ``pitch`` bytes (``dy`` of a split, ``y`` of
a concat); chunk ``k`` is ``rows`` rows of ``width_k`` bytes, packed, at byte ``off_k``
of each row. A split or concat moves every chunk (one launch per group of at most
:data:`MAX_CHUNKS` adjacent chunks); a gather or scatter moves one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..targets import resolve_target, target_capability
from .fastcat_common import MAX_CHUNKS, WIDTHS

__all__ = [
    "MAX_CHUNKS",
    "OPS",
    "RECT_GRANULE",
    "RECT_MAX_WINDOW",
    "WIDTHS",
    "Launch",
    "access_width",
    "choose",
]

OPS = ("gather", "scatter", "split", "concat")
# Splits and concats whose every chunk moves as accesses at least this wide copy directly
# (rect) instead of through shared-memory tiles.
RECT_GRANULE = 8
# ... and whose rows (of the group's window) are narrower than this many bytes. Wider
# rows ran faster as flat tiles (H200, docs/perf/kernels.md: tiles at 96-99% of the copy
# ceiling, rect at 87-96%, on 16,384 x (8,192+16,384) and 128 x (401,408+401,408)).
RECT_MAX_WINDOW = 8192
DIRECTION = {"gather": "backward", "split": "backward", "scatter": "forward", "concat": "forward"}


def access_width(row_mod16: int, pitch: int, off: int, width: int, chunk_mod16: int) -> int:
    """The widest access (16/8/4/2/1 bytes) that moves chunk bytes between both sides:
    it must divide the row-side address of the chunk's first column, the pitch, the
    chunk's width and the chunk pointer (all in bytes; addresses modulo 16)."""
    for w in WIDTHS:
        if (row_mod16 + off) % w == 0 and pitch % w == 0 and width % w == 0 and chunk_mod16 % w == 0:
            return w
    return 1


@dataclass(frozen=True)
class Launch:
    """One launch of a plan: the kernel family and its constructor arguments, the chunks
    of the op it moves, its grid (x, and y for rect) and why it was chosen."""

    family: str  # "rect", "vec", "tile" or "rowpack"
    spec: tuple[tuple[str, object], ...]  # the kernel class's keyword arguments
    chunk_ids: tuple[int, ...]
    grid: int  # CTAs in x
    why: str
    grid_y: int = 1  # CTAs in y (column tiles of a rect launch)

    def kernel(self, target: str) -> Any:
        """The kernel object (memoised: the same spec and target give the same object)."""
        from .fastcat_rect import FastcatRect
        from .fastcat_rowpack import FastcatRowpack
        from .fastcat_tile import FastcatTile
        from .fastcat_vec import FastcatVec

        families = {"rect": FastcatRect, "vec": FastcatVec, "tile": FastcatTile, "rowpack": FastcatRowpack}
        make = families[self.family]
        return make(target=target, **dict(self.spec))

    def args(
        self, row_ptr: Any, chunk_ptrs: list[Any], rows: int, pitch: int, offs: list[int], widths: list[int]
    ):
        """The argument values in the kernel's parameter order. Sizes are in bytes; the
        pointers may be ints or anything that adds an int byte offset (a planner's
        symbolic pointer)."""
        ids = self.chunk_ids
        if self.family == "rowpack":
            return (row_ptr, rows, *(chunk_ptrs[k] for k in ids))
        if self.family in ("vec", "rect"):  # the same window arguments (window_args)
            w = dict(self.spec)["width"]
            first = offs[ids[0]]
            window = offs[ids[-1]] + widths[ids[-1]] - first
            vals: list[Any] = [row_ptr + first, pitch, rows, window // w]
            for k in ids:
                vals += [chunk_ptrs[k], widths[k]]
                if len(ids) > 1:
                    vals.append((offs[k] - first) // w)
            return tuple(vals)
        vals = [row_ptr, rows * pitch, pitch, rows]
        for k in ids:
            vals += [chunk_ptrs[k], offs[k], widths[k]]
        return tuple(vals)


def _check(op: str, rows: int, sizes: Any, dtype_size: int, row_mod16: int, chunk_mod16: list[int]) -> None:
    if op not in OPS:
        raise ValueError(f"op {op!r}; accepted: {', '.join(OPS)}")
    if dtype_size not in (1, 2, 4, 8, 16):
        raise ValueError(f"dtype_size {dtype_size}; accepted: 1, 2, 4, 8, 16")
    if not sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in sizes):
        raise ValueError(f"sizes must be a non-empty list of ints >= 0, got {sizes!r}")
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
        raise ValueError(f"rows must be an int >= 0, got {rows!r}")
    if len(chunk_mod16) != len(sizes):
        raise ValueError(f"{len(chunk_mod16)} chunk addresses for {len(sizes)} sizes")
    for what, m in (("row_mod16", row_mod16), *(("chunk_mod16", m) for m in chunk_mod16)):
        if isinstance(m, bool) or not isinstance(m, int) or not 0 <= m < 16:
            raise ValueError(f"{what} must hold addresses modulo 16 (0..15), got {m!r}")


def choose(
    op: str,
    rows: int,
    sizes: list[int] | tuple[int, ...],
    dtype_size: int,
    *,
    row_mod16: int = 0,
    chunk_mod16: list[int] | tuple[int, ...] | None = None,
    target: str = "sm_90",
    chunk: int | None = None,
) -> list[Launch]:
    """The launches that perform ``op`` on ``rows`` rows split into ``sizes`` channels of
    ``dtype_size`` bytes (``chunk``: the chunk of a gather or scatter); addresses modulo 16.

    * gather with 8- or 16-byte accesses, or a chunk narrower than a third of the row,
      and every scatter -> ``rect``: 2-D tiles at the widest access the alignments allow;
      else (a wide chunk at a 1-, 2- or 4-byte granule) ``tile`` over its columns.
    * split/concat with a granule of 1, 2 or 4 bytes, every pointer 16-byte aligned and a
      few rows of both sides within 128 bytes -> ``rowpack`` (constant byte shuffles),
      staged through shared memory so that every global access is coalesced.
    * split/concat whose every chunk moves as accesses of :data:`RECT_GRANULE` bytes or
      more, in rows narrower than :data:`RECT_MAX_WINDOW` bytes -> ``rect`` over the
      chunks' window, in groups of at most :data:`MAX_CHUNKS` adjacent chunks (the same
      groups below).
    * split/concat otherwise -> ``tile`` over whole rows with the smallest granule;
      backward through registers, forward through cp.async staging (registers on sm_75).

    Every launch has one CTA per piece of work (a tile, a thread's rows): on an H200 a
    grid of small CTAs, which the hardware hands out as SMs free up, runs at the speed
    of the driver's copy, where one persistent wave tops out near 92% of it.
    """
    mods = list(chunk_mod16) if chunk_mod16 is not None else [0] * len(sizes)
    _check(op, rows, sizes, dtype_size, row_mod16, mods)
    pitch = sum(sizes) * dtype_size
    if pitch >= 1 << 30:
        raise ValueError(f"a row of {pitch} bytes is too wide; at most 2**30 - 1")
    offs, widths = [], []
    for s in sizes:
        offs.append(sum(widths))
        widths.append(s * dtype_size)
    cap = target_capability(resolve_target(target))
    direction = DIRECTION[op]
    per_chunk = op in ("gather", "scatter")
    if per_chunk:
        if chunk is None or not 0 <= chunk < len(sizes):
            raise ValueError(f"op {op!r} needs chunk in 0..{len(sizes) - 1}, got {chunk!r}")
        ids = [chunk]
    else:
        ids = list(range(len(sizes)))
    ids = [k for k in ids if widths[k] > 0]  # empty chunks: nothing to copy
    if rows == 0 or not ids:
        return []
    w = {k: access_width(row_mod16, pitch, offs[k], widths[k], mods[k]) for k in ids}
    block = 256

    if per_chunk:
        k = ids[0]
        # A wide chunk at a narrow granule moves faster as 16-byte vectors re-indexed
        # through shared memory (tile, below) than one narrow access at a time.
        if op == "scatter" or w[k] >= 8 or 3 * widths[k] < pitch:
            return [_rect(direction, w[k], rows, widths[k] // w[k], [k])]
    if not per_chunk and all(mods[k] == 0 for k in ids) and row_mod16 == 0 and len(ids) <= 8:
        from .fastcat_rowpack import rowpack_rows

        narrow = tuple(widths[k] for k in ids)
        # Measured on H200 (grid-study-h200.json, 256 MB): staged through shared memory, so
        # that every global access of a warp is 512 contiguous bytes, rowpack runs at
        # 97-99% of the copy ceiling on 67,108,864 x (1+3) u8 and (2+6) and (4+12) bytes,
        # where the tiles ran at 36-79% and rowpack's direct accesses at 65-81%. 8-byte
        # granules go to rect (99-100%).
        n = rowpack_rows(narrow)
        if min(w.values()) <= 4 and n * pitch <= 128:
            spec = (("direction", direction), ("widths", narrow), ("block", block), ("staged", True))
            threads = -(-rows // n)  # a thread moves n rows
            why = "short rows: constant byte shuffles, staged through shared memory"
            return [Launch("rowpack", spec, tuple(ids), -(-threads // block), why)]
    launches = []
    for start in range(0, len(ids), MAX_CHUNKS):
        group = ids[start : start + MAX_CHUNKS]
        granule = min(w[k] for k in group)
        window = offs[group[-1]] + widths[group[-1]] - offs[group[0]]
        if granule >= RECT_GRANULE and window < RECT_MAX_WINDOW:
            # Every chunk moves as whole vectors: copy directly, no shared memory.
            launches.append(_rect(direction, granule, rows, window // granule, group))
            continue
        whole = offs[group[0]] == 0 and offs[group[-1]] + widths[group[-1]] == pitch
        # Backward: register-staged loads matched cp.async and cp.async.bulk on H200.
        # Forward: the chunk side goes through cp.async staging (every chunk's loads in
        # flight at once); sm_75 has no cp.async: registers. Four 16-byte vectors a
        # thread: with one tile per CTA, more CTAs beat more loads per thread.
        loader = "cp.async" if direction == "forward" and cap >= (8, 0) else "regs"
        unroll = 4
        n_tiles = -(-(rows * pitch + 15) // (16 * unroll * block))
        spec = (
            ("direction", direction), ("chunks", len(group)), ("granule", granule), ("whole_rows", whole),
            ("unroll", unroll), ("block", block), ("loader", loader),
        )  # fmt: skip
        launches.append(
            Launch(
                "tile",
                spec,
                tuple(group),
                n_tiles,
                f"{granule}-byte granules: re-index through shared memory",
            )
        )
    return launches


def _rect(direction: str, width: int, rows: int, vectors: int, group: list[int]) -> Launch:
    """Adjacent chunks as 2-D tiles of ``width``-byte accesses over their window, one tile
    per CTA."""
    from .fastcat_rect import GRID_Y_MAX, rect_cols

    # Measured on H200 over gathers, scatters, splits and concats (docs/perf/kernels.md,
    # grid-study-h200.json): 16-byte accesses 2 a thread in 128-thread CTAs (4 KB) where
    # the window is short (96.8-100% of the copy ceiling), but 8 a thread in 256-thread
    # CTAs (32 KB) for windows of 512 vectors or more (the 4,096-vector gather: 99.2%,
    # against 93.7% at 4 KB); narrower accesses 32 bytes a thread in 128-thread CTAs.
    if width == 16:
        block, unroll = (256, 8) if vectors >= 512 else (128, 2)
    else:
        block, unroll = 128, min(8, 32 // width)
    cols = rect_cols(vectors, block, unroll)
    tile_rows = block * unroll // cols
    spec = (
        ("direction", direction), ("width", width), ("cols", cols), ("chunks", len(group)),
        ("unroll", unroll), ("block", block),
    )  # fmt: skip
    why = f"{width}-byte accesses, tiles of {tile_rows} rows x {cols} vectors"
    grid_y = min(-(-vectors // cols), GRID_Y_MAX)
    return Launch("rect", spec, tuple(group), -(-rows // tile_rows), why, grid_y)
