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

__all__ = ["MAX_CHUNKS", "OPS", "WIDTHS", "Launch", "access_width", "choose"]

OPS = ("gather", "scatter", "split", "concat")
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
    of the op it moves, its grid (x) and why it was chosen."""

    family: str  # "vec", "tile" or "rowpack"
    spec: tuple[tuple[str, object], ...]  # the kernel class's keyword arguments
    chunk_ids: tuple[int, ...]
    grid: int
    why: str

    def kernel(self, target: str) -> Any:
        """The kernel object (memoised: the same spec and target give the same object)."""
        from .fastcat_rowpack import FastcatRowpack
        from .fastcat_tile import FastcatTile
        from .fastcat_vec import FastcatVec

        make = {"vec": FastcatVec, "tile": FastcatTile, "rowpack": FastcatRowpack}[self.family]
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
        if self.family == "vec":
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
    sm_count: int = 132,
    target: str = "sm_90",
    chunk: int | None = None,
) -> list[Launch]:
    """The launches that perform ``op`` on ``rows`` rows split into ``sizes`` channels of
    ``dtype_size`` bytes (``chunk``: the chunk of a gather or scatter); addresses modulo 16.

    * gather with 8- or 16-byte accesses -> ``vec``, 8 loads in flight; a chunk narrower
      than a third of the row -> ``vec`` at its granule, 4 in flight (prefetching 256-byte
      blocks only where every sector holds needed bytes); else ``tile`` over its columns.
    * scatter -> ``vec`` at its granule, the source prefetched by 256-byte blocks.
    * split/concat with a granule of 1 or 2 bytes, every pointer 16-byte aligned and a few
      rows of both sides within 128 bytes -> ``rowpack`` (constant byte shuffles).
    * split/concat otherwise -> ``tile`` over whole rows with the smallest granule, in
      groups of at most :data:`MAX_CHUNKS` adjacent chunks; backward through registers
      (8 loads in flight where the granule is >= 8, else 4), forward through cp.async
      staging (registers on sm_75).
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
    grid = sm_count * (2048 // block)  # grid-stride kernels: one full wave of 256-thread blocks
    hint = "L2::256B" if cap >= (8, 0) else None

    def vec(width: int, unroll: int, load_hint: str | None, why: str) -> Launch:
        spec: list[tuple[str, object]] = [
            ("direction", direction), ("width", width), ("chunks", 1), ("unroll", unroll), ("block", block),
        ]  # fmt: skip
        if load_hint:
            spec.append(("load_hint", load_hint))
        return Launch("vec", tuple(spec), tuple(ids), grid, why)

    if op == "gather":
        k = ids[0]
        if w[k] >= 8:
            return [
                vec(w[k], 8, None, f"{w[k]}-byte accesses on both sides: copy directly, 8 loads in flight")
            ]
        if 3 * widths[k] < pitch:
            # A narrow chunk of a wide row: a tile would carry mostly other columns through
            # shared memory. Prefetch whole 256-byte blocks only where every sector holds
            # needed bytes (else the prefetch reads what is not needed).
            dense = pitch - widths[k] < 32
            return [vec(w[k], 4, hint if dense else None, f"narrow chunk: {w[k]}-byte accesses")]
    if op == "scatter":
        # The source (x_k) is read whole: prefetching 256-byte blocks never wastes.
        return [vec(w[ids[0]], 4, hint, f"{w[ids[0]]}-byte accesses, source prefetched by 256-byte blocks")]
    if not per_chunk and all(mods[k] == 0 for k in ids) and row_mod16 == 0 and len(ids) <= 8:
        from .fastcat_rowpack import rowpack_rows

        narrow = tuple(widths[k] for k in ids)
        # Measured: ahead of tiles for 1- and 2-byte granules (71% vs 40%, 73% vs 66% of the
        # ceiling on 4,194,304 x (1+3)), behind them for 4 and 8 (72% vs 89%): its warps
        # are not coalesced (each thread owns 64 contiguous bytes).
        if min(w.values()) <= 2 and rowpack_rows(narrow) * pitch <= 128:
            spec = (("direction", direction), ("widths", narrow), ("block", block))
            return [
                Launch("rowpack", spec, tuple(ids), grid, "short rows: constant byte shuffles in registers")
            ]
    launches = []
    for start in range(0, len(ids), MAX_CHUNKS):
        group = ids[start : start + MAX_CHUNKS]
        granule = min(w[k] for k in group)
        whole = offs[group[0]] == 0 and offs[group[-1]] + widths[group[-1]] == pitch
        if direction == "forward":
            # The chunk side goes through cp.async staging (every chunk's loads in flight at
            # once); sm_75 has no cp.async: registers.
            loader, unroll = ("cp.async", 4) if cap >= (8, 0) else ("regs", 4)
        else:
            # Register-staged loads matched cp.async and cp.async.bulk on H200; 8 in flight
            # per thread paid off where the re-indexing is cheap (granule >= 8).
            loader, unroll = "regs", (8 if granule >= 8 and whole else 4)
        tile_bytes = 16 * unroll * block
        n_tiles = -(-(rows * pitch + 15) // tile_bytes)
        spec = (
            ("direction", direction), ("chunks", len(group)), ("granule", granule), ("whole_rows", whole),
            ("unroll", unroll), ("block", block), ("loader", loader),
        )  # fmt: skip
        launches.append(
            Launch(
                "tile",
                spec,
                tuple(group),
                max(1, min(n_tiles, sm_count * 4)),
                f"{granule}-byte granules: re-index through shared memory",
            )
        )
    return launches
