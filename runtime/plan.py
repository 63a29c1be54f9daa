"""Planning the channel_cat ops: which kernels, grids and arguments one shape needs.

A plan is made once per shape (:func:`make_plan`) and replayed on every call with the
same shape, dtype, device and pointer alignments: the op only recognises the arrays,
checks them and launches the plan's steps.

Which kernel runs is decided by a table, :data:`VARIANTS`, read in order of
preference. A variant of scope ``"op"`` plans the whole op in one go (a fused split or
concat); one of scope ``"chunk"`` plans one piece, and each piece takes the first
chunk variant that accepts it. A new kernel is added as one row: a predicate on the
shape, alignment, dtype and device, and a function that returns its launches.

Nothing here touches the driver, so plans can be checked without a GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import ptxgen
from ptxgen.dtypes import DType
from ptxgen.kernels.fastcat_common import dependent_launch_supported

from ._env import env_flag

__all__ = [
    "MAX_STEPS",
    "VARIANTS",
    "Chunk",
    "DeviceTraits",
    "Plan",
    "Problem",
    "Ptr",
    "Step",
    "Variant",
    "make_plan",
    "seed_block_size",
]

OPS = ("backward", "forward")
WIDE = -1  # Ptr.array of the wide array: dy (backward) or y (forward)
# A plan longer than this is refused rather than made: no array that fits in a GPU's
# memory needs more launches than this (see _seed_steps), so it means a mistake.
MAX_STEPS = 1 << 16


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


_DEPENDENT_ENV = "PTXGEN_DEPENDENT_LAUNCH"


@dataclass(frozen=True)
class DeviceTraits:
    """What planning needs to know of a GPU (a plain record, so plans can be made
    and tested without one)."""

    ordinal: int = 0
    arch: str = "sm_90"
    max_grid_x: int = 2**31 - 1
    max_grid_y: int = 65535
    max_shared_memory_per_block: int = 227 * 1024
    # Build the fast kernels for programmatic dependent launch where the GPU has it
    # (sm_90+): each waits for the previous grid in the kernel, so the launches of a
    # plan, of consecutive ops and of a captured graph overlap their launch latency.
    # PTXGEN_DEPENDENT_LAUNCH=0 turns it off in the traits DeviceTraits.of reads from a device.
    dependent_launch: bool = True

    @classmethod
    def of(cls, device: Any) -> DeviceTraits:
        """The traits of a :class:`runtime.Device`, read from its public attributes."""
        return cls(
            ordinal=device.ordinal,
            arch=device.arch,
            max_grid_x=device.max_grid[0],
            max_grid_y=device.max_grid[1],
            max_shared_memory_per_block=device.max_shared_memory_per_block,
            dependent_launch=env_flag(_DEPENDENT_ENV, True),
        )


@dataclass(frozen=True)
class Problem:
    """One op on one shape: what a plan is made for.

    ``rows`` rows; the wide array (``dy`` of a split, ``y`` of a concat) has
    ``sum(extents)`` elements per row, piece ``i`` has ``extents[i]`` and sits at
    element ``offsets[i]`` of each wide row. Alignments are the arrays' addresses
    modulo 16 (a variant moving 16-byte vectors needs to know them).
    """

    op: str
    dtype: DType
    rows: int
    extents: tuple[int, ...]
    wide_align: int = 0
    piece_aligns: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"op {self.op!r} is not one of {', '.join(OPS)}")
        if not self.piece_aligns:
            object.__setattr__(self, "piece_aligns", (0,) * len(self.extents))
        if len(self.piece_aligns) != len(self.extents):
            raise ValueError(f"{len(self.piece_aligns)} piece alignments for {len(self.extents)} pieces")

    @property
    def extent(self) -> int:
        """Elements per row of the wide array."""
        return sum(self.extents)

    @property
    def offsets(self) -> tuple[int, ...]:
        out, at = [], 0
        for e in self.extents:
            out.append(at)
            at += e
        return tuple(out)

    def chunk(self, index: int) -> Chunk:
        return Chunk(
            op=self.op,
            dtype=self.dtype,
            rows=self.rows,
            extent=self.extent,
            width=self.extents[index],
            offset=self.offsets[index],
            index=index,
            wide_align=self.wide_align,
            piece_align=self.piece_aligns[index],
        )


@dataclass(frozen=True)
class Chunk:
    """One piece of a :class:`Problem`: ``width`` elements at ``offset`` of each of
    ``rows`` wide rows of ``extent`` elements; piece number ``index``."""

    op: str
    dtype: DType
    rows: int
    extent: int
    width: int
    offset: int
    index: int
    wide_align: int = 0
    piece_align: int = 0


@dataclass(frozen=True)
class Ptr:
    """A pointer argument: the address of array ``array`` (``-1``: the wide array,
    ``i``: piece ``i``) plus ``byte_offset``. Offsets let one shape be cut into
    several launches without any launch seeing an index past its limits."""

    array: int
    byte_offset: int = 0

    def __add__(self, offset: int) -> Ptr:
        """The same array, ``offset`` bytes further: kernel rules compute with these."""
        return Ptr(self.array, self.byte_offset + offset)


@dataclass(frozen=True)
class Step:
    """One launch: a kernel, its geometry and its arguments in ``kernel.arg_names``
    order (a :class:`Ptr` for each pointer, an int for each scalar)."""

    kernel: Any  # a ptxgen.Kernel
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[Ptr | int, ...]
    shared_mem: int = 0


@dataclass(frozen=True)
class Variant:
    """One row of the variant table.

    ``accepts(problem_or_chunk, traits)`` says whether it can and should run that
    shape; ``build(problem_or_chunk, traits)`` returns its launches. ``scope`` is
    ``"op"`` (given the whole :class:`Problem`) or ``"chunk"`` (given one
    :class:`Chunk` at a time). ``when`` is one line for the docs.
    """

    name: str
    scope: str
    ops: frozenset[str]
    accepts: Callable[[Any, DeviceTraits], bool]
    build: Callable[[Any, DeviceTraits], Sequence[Step]]
    when: str = ""

    def __post_init__(self) -> None:
        if self.scope not in ("op", "chunk"):
            raise ValueError(f"variant {self.name}: scope must be 'op' or 'chunk', not {self.scope!r}")


@dataclass(frozen=True)
class Plan:
    """The launches of one :class:`Problem`, and which variant planned each part."""

    problem: Problem
    steps: tuple[Step, ...]
    variants: tuple[str, ...] = field(default=())


# --- the seed kernels: one element per thread, one launch per piece ------------------


def seed_block_size(width: int) -> int:
    """The block for a piece ``width`` elements wide: the smallest multiple of 32 that
    holds the row, at most 256.

    The seed contract gives each CTA one row's tile, so a block much wider than the
    row leaves most threads idle; past 256 the tiles of a wide row are many anyway.
    """
    return min(256, max(32, 32 * _cdiv(width, 32)))


@functools.cache
def _seed_kernel(op: str, dtype: str, block_size: int) -> Any:
    cls = ptxgen.ChannelCatBackward if op == "backward" else ptxgen.ChannelCatForward
    return cls(dtype, block_size)


def _seed_steps(chunk: Chunk, traits: DeviceTraits, scalar_max: int | None = None) -> list[Step]:
    """Launches of the seed kernel for one piece, cut where the seed's limits need it.

    The kernel's scalars (``chunk_c``, ``c_total``, ``chunk_offset``) are i32 read as
    u32, so each must be below 2**31 (``scalar_max``); its grid is
    ``n_spatial * cdiv(chunk_c, block)`` CTAs, at most ``traits.max_grid_x``. Rows are
    therefore launched in groups, each with its pointers moved to its first row. Where a
    wide row itself is past the scalar limit, each row is launched on its own, in
    pieces, as a one-row copy whose ``c_total`` does not matter.
    """
    kernel = _seed_kernel(chunk.op, chunk.dtype.name, seed_block_size(chunk.width))
    if scalar_max is None:
        scalar_max = min(t.max for t in kernel.arg_types if not t.is_pointer)
    bs, isz = kernel.block_size, chunk.dtype.itemsize
    rows, extent, width, offset = chunk.rows, chunk.extent, chunk.width, chunk.offset
    if rows == 0 or width == 0:
        return []

    def step(n_rows: int, wide_byte: int, piece_byte: int, c: int, total: int, off: int) -> Step:
        wide, piece = Ptr(WIDE, wide_byte), Ptr(chunk.index, piece_byte)
        src, dst = (wide, piece) if chunk.op == "backward" else (piece, wide)
        return Step(kernel, (n_rows * _cdiv(c, bs), 1, 1), kernel.block, (src, dst, c, total, off))

    tiles = _cdiv(width, bs)
    if extent <= scalar_max and tiles <= traits.max_grid_x:
        per_launch = min(rows, traits.max_grid_x // tiles)
        _check_step_count(_cdiv(rows, per_launch), chunk)
        return [
            step(min(per_launch, rows - r0), r0 * extent * isz, r0 * width * isz, width, extent, offset)
            for r0 in range(0, rows, per_launch)
        ]
    # One row per launch, in pieces of at most `piece` elements (a multiple of the block).
    piece = min(scalar_max // bs, traits.max_grid_x) * bs
    _check_step_count(rows * _cdiv(width, piece), chunk)
    return [
        step(1, (r * extent + offset + s) * isz, (r * width + s) * isz, n, n, 0)
        for r in range(rows)
        for s in range(0, width, piece)
        for n in (min(piece, width - s),)
    ]


def _check_step_count(count: int, chunk: Chunk) -> None:
    if count > MAX_STEPS:
        raise ValueError(
            f"channel_cat_{chunk.op}: {chunk.rows} rows of {chunk.extent} elements would need "
            f"{count} launches for piece {chunk.index}; more than {MAX_STEPS} is refused "
            "(no array that fits in a GPU's memory needs that many)"
        )


SEED = Variant(
    name="seed",
    scope="chunk",
    ops=frozenset(OPS),
    accepts=lambda chunk, traits: True,
    build=_seed_steps,
    when="the seed's kernel (one element per thread, one launch per piece); takes any piece",
)

# --- the fast kernels (ptxgen.kernels.fastcat: vec, tile, rowpack) --------------------


def _fastcat_target(traits: DeviceTraits) -> str:
    """The newest target of ptxgen's table the device runs (sm_90 on an H200): the rule
    picks cp.async and bulk copies by target."""
    from ptxgen.targets import TARGETS, target_sm

    have = target_sm(traits.arch)
    fitting = [t for t in TARGETS if target_sm(t) <= have]
    return max(fitting, key=target_sm) if fitting else "sm_75"


def _fastcat_steps(op: str, problem: Problem | Chunk, traits: DeviceTraits) -> list[Step]:
    from ptxgen.kernels.fastcat import choose

    isz = problem.dtype.itemsize
    if isinstance(problem, Chunk):
        extents, aligns, index = _chunk_as_problem(problem)
    else:
        extents, aligns, index = problem.extents, problem.piece_aligns, None
    rows, wide_align = problem.rows, problem.wide_align
    target = _fastcat_target(traits)
    dependent = traits.dependent_launch and dependent_launch_supported(target)
    launches = choose(op, rows, list(extents), isz, row_mod16=wide_align, chunk_mod16=list(aligns),
                      target=target, chunk=index)  # fmt: skip
    pitch = sum(extents) * isz
    offs = [sum(extents[:i]) * isz for i in range(len(extents))]
    widths = [e * isz for e in extents]
    if isinstance(problem, Chunk):  # one piece, whose array is the chunk's own
        pieces = [Ptr(problem.index)] * len(extents)
    else:
        pieces = [Ptr(i) for i in range(len(extents))]
    steps = []
    for launch in launches:
        kernel = launch.kernel(target, dependent)
        args = launch.args(Ptr(WIDE), pieces, rows, pitch, offs, widths)
        # The kernels stride over their grid: any size does the work, so it may be capped.
        grid = (min(launch.grid, traits.max_grid_x), min(launch.grid_y, traits.max_grid_y), 1)
        steps.append(Step(kernel, grid, kernel.block, tuple(args)))
    return steps


def _chunk_as_problem(chunk: Chunk) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """A gather or scatter of one piece, seen as the rule's (sizes, alignments, index):
    the columns before and after it as two neighbours."""
    before, after = chunk.offset, chunk.extent - chunk.offset - chunk.width
    extents = tuple(e for e in (before, chunk.width, after) if e)
    index = 1 if before else 0
    aligns = tuple(chunk.piece_align if i == index else 0 for i in range(len(extents)))
    return extents, aligns, index


def _fastcat_fits(problem: Problem | Chunk, traits: DeviceTraits) -> bool:
    """Element sizes the byte kernels take, rows whose bytes fit their 30-bit pitch."""
    isz = problem.dtype.itemsize
    extent = problem.extent
    return isz in (1, 2, 4, 8) and 0 < extent * isz < 1 << 30


FASTCAT_FUSED = Variant(
    name="fused",
    scope="op",
    ops=frozenset(OPS),
    accepts=_fastcat_fits,
    build=lambda problem, traits: _fastcat_steps(
        "split" if problem.op == "backward" else "concat", problem, traits
    ),
    when="one launch reads the wide array once and writes every piece (split), or writes whole "
    "rows from every piece (concat): direct 2-D tiles where every piece moves as 8- or 16-byte "
    "accesses in rows under 8 KB, shared-memory tiles at any other alignment, byte shuffles for short rows",
)
FASTCAT_CHUNK = Variant(
    name="vector",
    scope="chunk",
    ops=frozenset(OPS),
    accepts=_fastcat_fits,
    build=lambda chunk, traits: _fastcat_steps(
        "gather" if chunk.op == "backward" else "scatter", chunk, traits
    ),
    when="one piece: 2-D tiles of the widest access the alignments allow, one tile per CTA; "
    "from short rows, byte shuffles over whole rows (every sector of them holds bytes of the piece); "
    "a narrow piece at a 1-byte granule, byte accesses on a persistent grid; "
    "shared-memory tiles for a wide piece at a narrow granule",
)

# In order of preference. Kernel variants are added here, one row each.
VARIANTS: list[Variant] = [FASTCAT_FUSED, FASTCAT_CHUNK, SEED]


def make_plan(problem: Problem, traits: DeviceTraits, variants: Sequence[Variant] | None = None) -> Plan:
    """The launches for ``problem``: the first op-scope variant that accepts it, else
    for each non-empty piece the first chunk-scope variant that accepts that piece."""
    table = [v for v in (VARIANTS if variants is None else variants) if problem.op in v.ops]
    if problem.rows == 0 or problem.extent == 0:
        return Plan(problem, (), ())
    for variant in table:
        if variant.scope == "op" and variant.accepts(problem, traits):
            return Plan(problem, tuple(variant.build(problem, traits)), (variant.name,))
    steps: list[Step] = []
    chosen: list[str] = []
    for index, width in enumerate(problem.extents):
        if width == 0:
            chosen.append("")
            continue
        chunk = problem.chunk(index)
        for variant in table:
            if variant.scope == "chunk" and variant.accepts(chunk, traits):
                steps.extend(variant.build(chunk, traits))
                chosen.append(variant.name)
                break
        else:
            raise ValueError(
                f"channel_cat_{problem.op}: no kernel variant accepts piece {index} "
                f"({width} of {problem.extent} elements per row, {problem.dtype.name}) on {traits.arch}"
            )
    return Plan(problem, tuple(steps), tuple(chosen))
