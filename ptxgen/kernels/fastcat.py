"""Which fast kernel moves a channel-concat op, with which parameters: the selection rule.

The fast kernels move *bytes* (``fastcat_rect``, ``fastcat_tile``, ``fastcat_rowpack``,
``fastcat_vec``); this module decides, from the shape, the element size, the pointers'
alignments and the device's traits (:class:`GpuTraits`: its SM version, SM count,
resident threads, shared memory, L2 and grid limits), which of them run, built for which
target, with what grids and arguments. The rule comes from measurements on an H200
(``docs/perf/kernels.md``); what depends on the part (how many CTAs fill it) is read from
the traits, never assumed, and it depends only on quantities a caller knows before
launching, so it also serves runtimes without Python (``choose`` is pure).

Terms: the **row side** is ``rows`` rows of ``pitch`` bytes (``dy`` of a split, ``y`` of
a concat); chunk ``k`` is ``rows`` rows of ``width_k`` bytes, packed, at byte ``off_k``
of each row. A split or concat moves every chunk (one launch per group of at most
:data:`MAX_CHUNKS` adjacent chunks); a gather or scatter moves one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..targets import TARGETS, target_capability, target_sm
from .fastcat_common import MAX_CHUNKS, WIDTHS, dependent_launch_supported

__all__ = [
    "BIG_TILE_BANDWIDTH_PER_SM",
    "MAX_CHUNKS",
    "OPS",
    "RECT_GRANULE",
    "RECT_MAX_WINDOW",
    "SMALL_OP_BYTES",
    "WIDTHS",
    "GpuTraits",
    "Launch",
    "access_width",
    "choose",
    "newest_target",
]

OPS = ("gather", "scatter", "split", "concat")
# Splits and concats whose every chunk moves as accesses at least this wide copy directly
# (rect) instead of through shared-memory tiles.
RECT_GRANULE = 8
# ... and whose rows (of the group's window) are narrower than this many bytes. Wider
# rows ran faster as flat tiles (H200, docs/perf/kernels.md: tiles at 96-99% of the copy
# ceiling, rect at 87-96%, on 16,384 x (8,192+16,384) and 128 x (401,408+401,408)).
RECT_MAX_WINDOW = 8192
# Splits and concats of at most this many bytes a side copy directly (rect) at any granule:
# what they cost is latency, and a tile's trip through shared memory is latency.
SMALL_OP_BYTES = 1 << 20
# ... and where a group of rows that is whole 16-byte vectors of the row side is at most this
# many bytes, they go as direct rowpack instead (each chunk in the widest access its group
# allows): a thread moves its rows' bytes as vectors after a short prologue, where rect
# moves them a narrow access at a time. Measured on H100 (lab/data/small-rowpack.json, two
# runs of two passes): 2,048 x (3+5+24) u8 split / concat 4.3-6.8% faster than rect (0.98-
# 0.99 of the flat copy), bf16 split 4.4-5.2%, bf16 concat level; f32's 128-byte rows 12-13%
# slower (a warp's 16-byte loads then span 4 KB), hence 64.
SMALL_ROWPACK_GROUP = 64
SMALL_ROWPACK_BLOCK = 128  # threads of its CTAs
# ... and where a group makes at most this many accesses of its pieces (3+5+24 in u8 and
# bf16: 11). Each narrow access of a warp touches up to 32 sectors; many of them, as in
# (1+63) u8's 64 one-byte stores a row, are untried and likely slower than rect.
SMALL_ROWPACK_ACCESSES = 16
DIRECTION = {"gather": "backward", "split": "backward", "scatter": "forward", "concat": "forward"}
# Threads of the CTAs a byte-wide gather (vec) launches; its grid is VEC_GATHER_WAVES full
# waves of them on the device at hand (GpuTraits.resident_ctas).
VEC_GATHER_BLOCK = 256
VEC_GATHER_WAVES = 2


@dataclass(frozen=True)
class GpuTraits:
    """What the rule knows of the GPU it plans for, and all it assumes of it.

    ``arch`` is the device's SM version (``"sm_90"``): kernels are built for the newest
    target of ptxgen's table it runs (:attr:`target`), with programmatic dependent launch
    where that target has it and ``dependent_launch`` asks for it. ``sm_count`` and
    ``max_threads_per_sm`` say how many CTAs fill the part (the 2 KB small-op tiles, the
    byte-wide gather's waves); the grid limits cap every launch (the kernels stride over
    their grid, so a capped grid still does all the work). The shared-memory and L2 sizes
    are the part's own, for rules that weigh them: none of today's does (every kernel's
    static shared memory fits the 48 KB any part gives a CTA, and no rule sizes work to the
    L2). ``memory_bandwidth`` is the part's peak DRAM bandwidth in bytes a second (twice
    the memory clock times the bus width, as the driver reports them), or None where it is
    not known: the row gather's tile size follows it (:data:`BIG_TILE_BANDWIDTH_PER_SM`).
    ``runtime.plan.DeviceTraits.of`` reads all of these from a device; a test makes them up
    to plan for parts it does not have.
    """

    arch: str
    sm_count: int
    max_threads_per_sm: int
    l2_bytes: int
    max_shared_memory_per_sm: int
    max_shared_memory_per_block: int  # the opt-in maximum of one CTA
    memory_bandwidth: int | None  # peak DRAM bytes a second; None: not known (given, never assumed)
    max_grid_x: int = 2**31 - 1  # CUDA's limits on every part since sm_30
    max_grid_y: int = 65535
    dependent_launch: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.arch, str):
            raise ValueError(f"arch must be an SM version such as 'sm_90', got {self.arch!r}")
        target_capability(self.arch)  # readable as one, or a ValueError
        for what in (
            "sm_count", "max_threads_per_sm", "l2_bytes", "max_shared_memory_per_sm",
            "max_shared_memory_per_block", "max_grid_x", "max_grid_y",
        ):  # fmt: skip
            value = getattr(self, what)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{what} must be an int >= 1, got {value!r}")
        if not isinstance(self.dependent_launch, bool):
            raise ValueError(f"dependent_launch must be True or False, got {self.dependent_launch!r}")
        bandwidth = self.memory_bandwidth
        if bandwidth is not None and (
            isinstance(bandwidth, bool) or not isinstance(bandwidth, int) or not 1 <= bandwidth < 2**63
        ):
            raise ValueError(
                "memory_bandwidth must be bytes a second (an int from 1 to 2**63 - 1) or None, "
                f"got {bandwidth!r}"
            )

    @property
    def target(self) -> str:
        """The target the fast kernels are built for: :func:`newest_target` of ``arch``."""
        return newest_target(self.arch)

    @property
    def builds_dependent_launch(self) -> bool:
        """Whether the fast kernels are built for programmatic dependent launch."""
        return self.dependent_launch and dependent_launch_supported(self.target)

    def resident_ctas(self, block: int) -> int:
        """One full wave: CTAs of ``block`` threads that the whole part holds at once (as
        its threads allow; a kernel's registers may allow fewer)."""
        return self.sm_count * max(1, self.max_threads_per_sm // block)


# The row gather's tiles are 32 KB where the part moves at least this many DRAM bytes a
# second an SM, else 16 KB. A tile waits for all of its loads at one barrier and stores
# only then, so the bytes a part keeps in flight are its resident tiles: a part that moves
# more an SM needs larger tiles to hide the same latency, and one that moves less loses
# more to each barrier's slowest load. Measured: on an H200 (4.8 TB/s, 132 SMs: 36 GB/s an
# SM) 32 KB tiles ahead on 31 of 35 sweep concats above five waves of tiles (16 KB ahead on
# 14 of 16 below), median of the flat copy 0.893 against 0.879 (lab/data/
# tile-variants-13.json); on an H100 (3.35 TB/s: 25 GB/s an SM) 16 KB ahead on 284 of 316
# (median 0.959 -> 0.971, lab/data/tile-unroll-h100-*.json).
# The line lies between the two parts measured.
BIG_TILE_BANDWIDTH_PER_SM = 30 * 10**9


def _big_tiles(traits: GpuTraits) -> bool:
    """Whether the row gather takes 32 KB tiles on this part (a part of unknown bandwidth:
    no). In whole bytes: bandwidth / SMs >= the line, without rounding."""
    bandwidth = traits.memory_bandwidth
    return bandwidth is not None and bandwidth >= BIG_TILE_BANDWIDTH_PER_SM * traits.sm_count


def newest_target(arch: str) -> str:
    """The newest target of ptxgen's table that a device of SM version ``arch`` runs (sm_90
    on an H200, sm_86 on an RTX 3090, sm_100 on a part newer than the table knows; sm_75,
    the oldest, below it): the rule picks cp.async and dependent launch by it."""
    have = target_sm(arch)
    fitting = [t for t in TARGETS if target_sm(t) <= have]
    return max(fitting, key=target_sm) if fitting else "sm_75"


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
    of the op it moves, its grid (x, and y for rect; within the device's limits), why it
    was chosen, and the target and dependent launch :func:`choose` builds it for."""

    family: str  # "rect", "vec", "tile" or "rowpack"
    spec: tuple[tuple[str, object], ...]  # the kernel class's keyword arguments
    chunk_ids: tuple[int, ...]
    grid: int  # CTAs in x
    why: str
    grid_y: int = 1  # CTAs in y (column tiles of a rect launch)
    target: str | None = None  # the planned target (GpuTraits.target); None: the caller says
    dependent_launch: bool = False  # built for programmatic dependent launch (sm_90+)

    def kernel(self, target: str | None = None, dependent_launch: bool | None = None) -> Any:
        """The kernel object (memoised: the same spec and target give the same object),
        built for the planned target and dependent launch unless ``target`` or
        ``dependent_launch`` says otherwise (a launch made by hand has no target)."""
        from .fastcat_rect import FastcatRect
        from .fastcat_rowpack import FastcatRowpack
        from .fastcat_tile import FastcatTile
        from .fastcat_vec import FastcatVec

        target = self.target if target is None else target
        if target is None:
            raise ValueError(f"this {self.family} launch was not planned for a target: pass one")
        pdl = self.dependent_launch if dependent_launch is None else dependent_launch
        families = {"rect": FastcatRect, "vec": FastcatVec, "tile": FastcatTile, "rowpack": FastcatRowpack}
        make = families[self.family]
        return make(target=target, dependent_launch=pdl, **dict(self.spec))

    def args(
        self,
        row_ptr: Any,
        chunk_ptrs: list[Any],
        rows: int,
        pitch: int,
        offs: list[int],
        widths: list[int],
        row_bytes: Any = None,
    ):
        """The argument values in the kernel's parameter order. Sizes are in bytes; the
        pointers may be ints or anything that adds an int byte offset (a planner's
        symbolic pointer). ``row_bytes``: the wide array's bytes from ``row_ptr``, where
        its last row ends before ``pitch`` (a pitched view); ``rows * pitch`` if None."""
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
        vals = [row_ptr, rows * pitch if row_bytes is None else row_bytes, pitch, rows]
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
    traits: GpuTraits,
    row_mod16: int = 0,
    chunk_mod16: list[int] | tuple[int, ...] | None = None,
    chunk: int | None = None,
    gap: int = 0,
) -> list[Launch]:
    """The launches that perform ``op`` on ``rows`` rows split into ``sizes`` channels of
    ``dtype_size`` bytes (``chunk``: the chunk of a gather or scatter; addresses modulo 16;
    ``gap``: elements after the last size in each wide row that the op leaves alone, the
    wide array being a view of every row's first ``sum(sizes)`` of ``sum(sizes) + gap``)
    on the GPU ``traits`` describes: each built for ``traits.target``, with programmatic
    dependent launch where that has it and the traits ask for it, its grid within the
    device's limits.

    * gather at a 1-, 2- or 4-byte granule from short rows (a group of rows within 128
      bytes, 16-byte aligned pointers) where every 32-byte sector of the row side holds
      bytes of the chunk -> ``rowpack`` over whole rows, writing that chunk only.
    * gather of a chunk narrower than a third of the row at a 1-byte granule -> ``vec``
      (byte accesses, four in flight a thread, a persistent grid of two waves of the part).
    * gather with 8- or 16-byte accesses, or a chunk narrower than a third of the row,
      and every scatter -> ``rect``: 2-D tiles at the widest access the alignments allow;
      else (a wide chunk at a 1-, 2- or 4-byte granule) ``tile`` over its columns.
    * split/concat with a granule of 1, 2 or 4 bytes, every pointer 16-byte aligned and a
      few rows of both sides within 128 bytes -> ``rowpack`` (constant byte shuffles),
      staged through shared memory so that every global access is coalesced.
    * concat whose every chunk moves as accesses of :data:`RECT_GRANULE` bytes or more,
      in rows narrower than :data:`RECT_MAX_WINDOW` bytes -> ``rect`` over the chunks'
      window, in groups of at most :data:`MAX_CHUNKS` adjacent chunks (the same groups
      below), unless most of rect's columns would idle (then ``tile``); a split there,
      faster as tiles, -> ``tile``.
    * split/concat of at most :data:`SMALL_OP_BYTES` a side at a granule under 8 bytes,
      whose rows make whole 16-byte vectors in groups of at most
      :data:`SMALL_ROWPACK_GROUP` bytes, each chunk pointer aligned to its access and at most
      :data:`SMALL_ROWPACK_ACCESSES` accesses a group -> ``rowpack``, direct, each chunk in
      the widest access its group allows (``narrow_chunks``).
    * split/concat of at most :data:`SMALL_OP_BYTES` a side, in rows under
      :data:`RECT_MAX_WINDOW` -> ``rect`` at the smallest granule, directly.
    * split/concat otherwise -> ``tile`` over whole rows with the smallest granule;
      backward through registers, forward through cp.async staging (registers on sm_75);
      16 KB tiles, or 2 KB ones where there would be fewer 16 KB tiles than the part has
      SMs (``traits.sm_count``). Forward over whole rows, the row vectors are read straight
      out of the staging area (``row_gather``), in 32 KB tiles where there are at least as
      many of them as SMs and the part moves at least :data:`BIG_TILE_BANDWIDTH_PER_SM`
      DRAM bytes a second an SM.

    Every launch but vec's has one CTA per piece of work (a tile, a thread's rows): on an
    H200 a grid of small CTAs, which the hardware hands out as SMs free up, runs at the
    speed of the driver's copy, where one persistent wave tops out near 92% of it.
    """
    launches = _choose(op, rows, sizes, dtype_size, traits, row_mod16, chunk_mod16, chunk, gap)
    # The kernels stride over their grid (any size does the work), so it may be capped.
    return [
        dataclasses.replace(
            launch,
            grid=min(launch.grid, traits.max_grid_x),
            grid_y=min(launch.grid_y, traits.max_grid_y),
            target=traits.target,
            dependent_launch=traits.builds_dependent_launch,
        )
        for launch in launches
    ]


def _choose(
    op: str,
    rows: int,
    sizes: list[int] | tuple[int, ...],
    dtype_size: int,
    traits: GpuTraits,
    row_mod16: int,
    chunk_mod16: list[int] | tuple[int, ...] | None,
    chunk: int | None,
    gap: int = 0,
) -> list[Launch]:
    """:func:`choose`'s launches before their grids are capped and their target set."""
    if not isinstance(traits, GpuTraits):
        raise TypeError(f"traits must be a GpuTraits (the device's), not {type(traits).__name__}")
    mods = list(chunk_mod16) if chunk_mod16 is not None else [0] * len(sizes)
    _check(op, rows, sizes, dtype_size, row_mod16, mods)
    if isinstance(gap, bool) or not isinstance(gap, int) or gap < 0:
        raise ValueError(f"gap must be an int >= 0, got {gap!r}")
    if gap and op in ("gather", "scatter"):
        raise ValueError(f"gap is for split and concat; a {op} names its neighbours as sizes")
    pitch = (sum(sizes) + gap) * dtype_size
    if pitch >= 1 << 30:
        raise ValueError(f"a row of {pitch} bytes is too wide; at most 2**30 - 1")
    offs, widths = [], []
    for s in sizes:
        offs.append(sum(widths))
        widths.append(s * dtype_size)
    cap = target_capability(traits.target)
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
        short = _rowpack_gather(op, pitch, widths, k, w[k], row_mod16 == 0 and mods[k] == 0, rows, block)
        if short is not None:
            return [short]
        if op == "gather" and w[k] == 1 and 3 * widths[k] < pitch:
            return [_vec_gather(rows, widths[k], k, traits)]
        # A wide chunk at a narrow granule moves faster as 16-byte vectors re-indexed
        # through shared memory (tile, below) than one narrow access at a time.
        if op == "scatter" or w[k] >= 8 or 3 * widths[k] < pitch:
            return [_rect(direction, w[k], rows, widths[k] // w[k], [k])]
    if not per_chunk and not gap and all(mods[k] == 0 for k in ids) and row_mod16 == 0 and len(ids) <= 8:
        from .fastcat_rowpack import rowpack_rows

        narrow = tuple(widths[k] for k in ids)
        # Measured on H200 (lab/data/grid-study-h200.json, 256 MB): staged through shared memory, so
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
    small = (
        None if per_chunk else _small_rowpack(direction, rows, pitch, widths, ids, w, mods, row_mod16, gap)
    )
    if small is not None:
        return [small]
    launches = []
    for start in range(0, len(ids), MAX_CHUNKS):
        group = ids[start : start + MAX_CHUNKS]
        granule = min(w[k] for k in group)
        window = offs[group[-1]] + widths[group[-1]] - offs[group[0]]
        # Copy directly, no shared memory, where every chunk moves as whole vectors, or
        # where the op is small: a small op costs its latency, one trip to memory and
        # back, where a tile adds the shared-memory staging and its barriers. Measured on
        # H200 (the benchmark's timing, L2 flushed with reads, 60 runs; events resolve
        # about 0.5 us): 2,048 x (3+5+24) concat u8 / bf16 / f32 6.2-6.6 / 5.6-6.0 /
        # 6.2-6.8 us as 2 KB tiles, 4.5-4.9 / 4.7-5.8 / 4.6-5.7 here (torch.cat 5.1-5.9),
        # split 5.5-5.7 as tiles, 4.5-5.0 here; at 16,384 rows (0.5-2 MB) a tie, at
        # 65,536 rows (2-8 MB) the tiles ahead again.
        small_op = not per_chunk and rows * pitch <= SMALL_OP_BYTES
        whole = offs[group[0]] == 0 and offs[group[-1]] + widths[group[-1]] == pitch
        if window < RECT_MAX_WINDOW and (granule >= RECT_GRANULE or small_op):
            # Whole rows at 8- and 16-byte granules, measured on H200 against the tile
            # (lab/data/rect-vs-tile.json, the sweeps of seeds 20261203-05, 52 shapes a
            # direction): splits ran faster as tiles on every one (median 0.917 -> 0.996 of
            # the flat copy, lowest 0.603 -> 0.950); concats faster as rect (0.920 against
            # 0.857) except where most of rect's columns idle (a row just past a power of
            # two of vectors: 4,160-4,736-byte f64 rows 0.61-0.76 -> 0.83-0.88). Those
            # splits were at 8-byte granules but three, where rect moves 8-byte accesses
            # and the tile 16-byte vectors; at 16-byte granules (the three: ties; and
            # lab/data/rect-vs-tile-client.json, YOLO's pieces at batch 1-64, 2-315 MB,
            # every one faster as rect: median 0.964 -> 0.980 of the flat copy, lowest
            # 0.844 -> 0.942) splits stay rect.
            # Rect's idle columns, measured again against today's tile (lab/data/
            # rect-vs-tile-3.json: the 34 sweep cells of seeds 20261213, 14 and 16 planned
            # as rect): of rows over 64 accesses whose tiles use under 70% of their columns,
            # the tile was ahead on all 12 (+0.2 to +11 points; bf16 99,591 x (288+48+196)
            # 0.883 -> 0.982), on none of the 14 above 85%, and on four of the six between
            # (+0.2 to +3.1). YOLO's pieces (75% or 100%) and rows of at most 64 accesses
            # (f32 259,465 x (40+44), 21 accesses: rect 1.037 against 0.992) stay rect.
            vectors = window // granule
            idle = vectors > 64 and _rect_columns_used(granule, vectors, len(group)) < 0.7
            # Concats at an 8-byte granule in rows over 4 KB (rect's column tiles of 1,024
            # vectors) go to the row gather: in one run (lab/data/rect-vs-tile-2.json, three
            # sweep seeds) it beat rect on 12 of 13 such f64 concats (rect 0.72-0.96, the
            # row gather 0.94-0.98 of the flat copy), while rect led on rows up to 4 KB.
            long_rows = direction == "forward" and granule == 8 and vectors > 512
            keep = not (idle or long_rows) and (direction == "forward" or granule == 16)
            if small_op or not whole or keep:
                launches.append(_rect(direction, granule, rows, vectors, group))
                continue
        # Backward: register-staged loads matched cp.async and cp.async.bulk on H200.
        # Forward: the chunk side goes through cp.async staging (every chunk's loads in
        # flight at once); sm_75 has no cp.async: registers. Four 16-byte vectors a
        # thread: with one tile per CTA, more CTAs beat more loads per thread.
        loader = "cp.async" if direction == "forward" and cap >= (8, 0) else "regs"
        unroll, tile_block = 4, block
        n_tiles = -(-(rows * pitch + 15) // (16 * unroll * tile_block))
        if n_tiles < traits.sm_count:
            # Too few 16 KB tiles to give every SM one: the op costs one CTA's latency
            # (loads, barriers, the re-indexing), so cut it into 2 KB tiles, eight times as
            # many CTAs each doing an eighth. Measured on H200 (132 SMs, docs/perf/kernels.md):
            # 2,048 x (3+5+24) concat 7.5/6.5/6.4 -> 6.1/5.8/5.8 us (u8/bf16/f32),
            # split 6.8/6.1/5.9 -> 5.7/5.5/5.5 us.
            unroll, tile_block = 1, 128
            n_tiles = -(-(rows * pitch + 15) // (16 * unroll * tile_block))
        # A chunk of 16 bytes or more spans at most two rows' pieces a vector, so its code
        # takes the two-piece paths; a narrower one keeps the carried walk for itself only
        # (one flag for the whole group sent every chunk of (127+248+170+7) u8 through the
        # byte walk: 0.48 of the flat copy, lab/README.md).
        from .fastcat_tile import wide_chunks_option

        flags = tuple(widths[k] >= 16 for k in group)
        # Forward, whole rows: each row vector read straight out of the cp.async staging
        # area as two word windows (a window a piece beside a chunk under 16 bytes), no
        # tile image, and 32 KB tiles in the room that leaves where the part moves enough
        # bytes an SM to want them (_big_tiles) and there is at least one a SM. Measured on H200
        # (lab/data/tile-variants-10a/b.json, seeds 20261203 and 20261204): concat medians
        # of the flat copy u8 0.62/0.63 -> 0.89/0.89, bf16 0.73/0.75 -> 0.86/0.88, f32
        # 0.81/0.85 -> 0.86/0.89; beside narrow chunks (tile-variants-11.json, seed
        # 20261206) the lowest concat 0.53 -> 0.80, u8 with a 1- to 13-byte chunk 0.53-0.62
        # -> 0.81-0.86.
        row_gather = direction == "forward" and loader == "cp.async" and whole
        if row_gather and unroll == 4 and _big_tiles(traits):
            big = -(-(rows * pitch + 15) // (16 * 8 * tile_block))
            if big >= traits.sm_count:
                unroll, n_tiles = 8, big
        spec = (
            ("direction", direction), ("chunks", len(group)), ("granule", granule), ("whole_rows", whole),
            ("unroll", unroll), ("block", tile_block), ("loader", loader),
            ("wide_chunks", wide_chunks_option(flags)), *((("row_gather", True),) if row_gather else ()),
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


def _small_rowpack(
    direction: str,
    rows: int,
    pitch: int,
    widths: list[int],
    ids: list[int],
    w: dict[int, int],
    mods: list[int],
    row_mod16: int,
    gap: int,
) -> Launch | None:
    """A small split or concat (at most :data:`SMALL_OP_BYTES` a side) at a granule under 8
    bytes as direct ``rowpack`` with narrow chunks, where its rows make whole 16-byte vectors
    in groups of at most :data:`SMALL_ROWPACK_GROUP` bytes, every chunk's pointer is aligned
    to its access and a group makes at most :data:`SMALL_ROWPACK_ACCESSES` of them; else
    None. ``ids``: every non-empty chunk (rowpack compiles in the whole row)."""
    from .fastcat_rowpack import chunk_access, rowpack_rows

    if gap or row_mod16 or len(ids) > 8 or rows * pitch > SMALL_OP_BYTES or min(w.values()) >= 8:
        return None
    narrow = tuple(widths[k] for k in ids)
    n = rowpack_rows(narrow, ())
    units = {k: chunk_access(n, widths[k]) for k in ids}  # each piece's access, as the kernel takes it
    if n * pitch > SMALL_ROWPACK_GROUP or any(mods[k] % units[k] for k in ids):
        return None
    if sum(n * widths[k] // units[k] for k in ids) > SMALL_ROWPACK_ACCESSES:
        return None
    block = SMALL_ROWPACK_BLOCK
    spec = (("direction", direction), ("widths", narrow), ("block", block), ("narrow_chunks", True))
    threads = -(-rows // n)  # a thread moves n rows
    why = f"small op: {n} row(s) a thread, rows as 16-byte vectors, chunks in the widest access they allow"
    return Launch("rowpack", spec, tuple(ids), -(-threads // block), why)


def _rowpack_gather(
    op: str, pitch: int, widths: list[int], k: int, granule: int, aligned: bool, rows: int, block: int
) -> Launch | None:
    """A gather of chunk ``k`` from short rows as ``rowpack`` over whole rows, writing chunk
    ``k`` only, or None where that does not apply: a granule under 8 bytes (8 and 16 go to
    rect at full speed), 16-byte aligned pointers, rows whose group fits rowpack, and
    fewer than 32 bytes of other chunks between two of its rows, so that every 32-byte
    sector of the row side holds some of its bytes and reading whole rows costs nothing
    the gather would not pay anyway.

    Measured on H200 (docs/perf/kernels.md, 256 MB ops, % of the copy ceiling): piece 1
    of (1+3) in u8 / bf16 / f32 100.1 / 101.1 / 100.7 against the tiles' 61.2 / 85.2 /
    97.1; piece 0 (rect before) 103.4 / 103.4 / 103.9 against 79.0 / 104.2 / 103.6;
    (3+5) u8 piece 1 83.9 against 55.5; (1+1+2) bf16 piece 2 103.0 against 94.3.
    Staged through shared memory: direct, each thread's own rows, ran at 74-78%."""
    from .fastcat_rowpack import rowpack_rows

    if op != "gather" or granule >= 8 or not aligned or pitch - widths[k] >= 32:
        return None
    # rowpack's chunks: the bytes before the piece, the piece, the bytes after it (the
    # neighbours it does not write merge; empty ones drop), so any number of chunks fits
    before, after = sum(widths[:k]), sum(widths[k + 1 :])
    layout = [x for x in (before, widths[k], after) if x > 0]
    index = 1 if before else 0
    n = rowpack_rows(tuple(layout), (index,))
    if n * pitch > 128:
        return None
    spec = (
        ("direction", "backward"), ("widths", tuple(layout)), ("block", block), ("staged", True),
        ("outputs", (index,)),
    )  # fmt: skip
    threads = -(-rows // n)  # a thread moves n rows
    why = "short rows: whole rows read, this chunk's bytes shuffled out, staged through shared memory"
    return Launch("rowpack", spec, (k,), -(-threads // block), why)


def _vec_gather(rows: int, width: int, k: int, traits: GpuTraits) -> Launch:
    """A narrow gather at a 1-byte granule as ``vec``: 1-byte accesses, 4 in flight a
    thread, on a persistent grid. Measured on H200 (docs/perf/kernels.md, % of the copy
    ceiling): 4,194,304 x (5+27) u8 piece 0 89.7 against rect's 70.9; (7+9+48) piece 1
    54.3 against 41.4; (33+11+20) piece 1 53.2 against 43.2; 1,000,003 x (17+200+39)
    piece 2, misaligned, 50.8 against 36.3; (3+61) piece 0 53.1 against 56.3. rect's
    tiles of 1-byte accesses are small (1 KB a CTA) and CTAs cost more than they move;
    the lone-sector gathers sit near what DRAM's 64-byte granules allow (about 55%).

    The grid: two full waves of 256-thread CTAs (on the H200 measured, 132 SMs of 8 such
    CTAs: 2,112), or one CTA per 1 KB of the piece where that is fewer."""
    unroll, block = 4, VEC_GATHER_BLOCK
    spec = (("direction", "backward"), ("width", 1), ("chunks", 1), ("unroll", unroll), ("block", block))
    grid = min(-(-rows * width // (unroll * block)), VEC_GATHER_WAVES * traits.resident_ctas(block))
    return Launch("vec", spec, (k,), grid, "1-byte accesses, 4 in flight a thread, persistent grid")


def _rect_shape(width: int, vectors: int, chunks: int) -> tuple[int, int, int]:
    """(block, unroll, cols) of the rect launch for a window of ``vectors`` accesses of
    ``width`` bytes over ``chunks`` chunks."""
    from .fastcat_rect import rect_cols

    # Measured on H200 over gathers, scatters, splits and concats (docs/perf/kernels.md,
    # lab/data/grid-study-h200.json): 16-byte accesses 2 a thread in 128-thread CTAs (4 KB) where
    # the window is short (96.8-100% of the copy ceiling), but 8 a thread in 256-thread
    # CTAs (32 KB) for windows of 512 vectors or more (the 4,096-vector gather: 99.2%,
    # against 93.7% at 4 KB); narrower accesses 32 bytes a thread in 128-thread CTAs.
    # One chunk (a gather or scatter) whose short window is a power of two of vectors
    # (every column of the tile busy): one 16-byte access a thread in 256-thread CTAs
    # (the same study: 1,048,576 x (64+128+64) piece 1, 8 vectors in u8, 99.9 against
    # 96.4, 32 in f32 98.5 against 96.7; (64+64+64) bf16 piece 1 97.2 against 94.1; the
    # benchmark's 1,048,576 x 256 -> 128 @ 64 u8 90.4 against 89.6). With idle columns it
    # lost: 12 vectors 92.3 against 99.9, and in the benchmark 524,288 x 80 -> 48 @ 32
    # (6, 12, 24 vectors) 1.8-6.6 points. Splits and concats lose 10 points that way.
    if width == 16:
        if vectors >= 512:
            block, unroll = 256, 8
        elif chunks == 1 and vectors & (vectors - 1) == 0:
            block, unroll = 256, 1
        else:
            block, unroll = 128, 2
    else:
        block, unroll = 128, min(8, 32 // width)
    return block, unroll, rect_cols(vectors, block, unroll)


def _rect_columns_used(width: int, vectors: int, chunks: int) -> float:
    """The share of rect's columns that hold a vector: a row of ``vectors`` in column
    tiles of a power of two of them."""
    cols = _rect_shape(width, vectors, chunks)[2]
    return vectors / (cols * -(-vectors // cols))


def _rect(direction: str, width: int, rows: int, vectors: int, group: list[int]) -> Launch:
    """Adjacent chunks as 2-D tiles of ``width``-byte accesses over their window, one tile
    per CTA."""
    from .fastcat_rect import GRID_Y_MAX

    block, unroll, cols = _rect_shape(width, vectors, len(group))
    tile_rows = block * unroll // cols
    spec = (
        ("direction", direction), ("width", width), ("cols", cols), ("chunks", len(group)),
        ("unroll", unroll), ("block", block),
    )  # fmt: skip
    why = f"{width}-byte accesses, tiles of {tile_rows} rows x {cols} vectors"
    grid_y = min(-(-vectors // cols), GRID_Y_MAX)
    return Launch("rect", spec, tuple(group), -(-rows // tile_rows), why, grid_y)
