"""Planning the channel-concat ops: which kernels, grids and arguments one shape needs.

The planner the Python ops run (``runtime.plan`` builds the device's traits and calls
:func:`make_plan`) and the one op bundles are written with (:mod:`ptxgen.bundle`): one
planner, so a runtime without Python launches exactly what the Python op launches.
Standard library only; it never touches a driver.

Which kernel runs is decided by a table, :data:`VARIANTS`, read in order of
preference. A variant of scope ``"op"`` plans the whole op in one go (a fused split or
concat); one of scope ``"chunk"`` plans one piece, and each piece takes the first
chunk variant that accepts it. A new kernel is added as one row: a predicate on the
shape, alignment, dtype and device, and a function that returns its launches.

What the fast kernels are, built for which target, on which grids, is decided by one rule,
:func:`ptxgen.kernels.fastcat.choose`, from the shape and the device's traits
(:class:`~ptxgen.kernels.fastcat.GpuTraits`); this module only asks it and turns its
launches into steps (:class:`Step`).

:func:`symbolic_plans` plans one op for every row count at once: the row count is a
:class:`Rows`, an int that keeps the expression it was computed by and records every
comparison the rule makes of it, so the rule's own conditions give the row ranges over
which its plan is one set of expressions of ``rows``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..dtypes import DType
from .fastcat import GpuTraits, choose

__all__ = [
    "H200",
    "MAX_STEPS",
    "OPS",
    "ROWS_LIMIT",
    "VARIANTS",
    "WIDE",
    "Chunk",
    "Plan",
    "Problem",
    "Ptr",
    "Rows",
    "RowsCase",
    "Step",
    "Variant",
    "make_plan",
    "seed_block_size",
    "symbolic_plans",
]

OPS = ("backward", "forward")
WIDE = -1  # Ptr.array of the wide array: dy (backward) or y (forward)
# A plan longer than this is refused rather than made: no array that fits in a GPU's
# memory needs more launches than this (see _seed_steps), so it means a mistake.
MAX_STEPS = 1 << 16

# The H200 the project's GPU records were made on (132 SMs of 2,048 threads and 228 KB
# of shared memory, a 60 MB L2: docs/perf/README.md's figure): runtime.plan.DeviceTraits'
# defaults, and the traits an op bundle is planned for unless told otherwise.
H200 = GpuTraits(
    arch="sm_90",
    sm_count=132,
    max_threads_per_sm=2048,
    l2_bytes=60 * 2**20,
    max_shared_memory_per_sm=228 * 1024,
    max_shared_memory_per_block=227 * 1024,
    # its specification's 4.8 TB/s (DeviceTraits.of reads the part's memory clock and bus
    # width: about 4.9 TB/s; the same plans either way)
    memory_bandwidth=4_800 * 10**9,
)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Problem:
    """One op on one shape: what a plan is made for.

    ``rows`` rows; the wide array (``dy`` of a split, ``y`` of a concat) has
    ``sum(extents)`` elements per row, piece ``i`` has ``extents[i]`` and sits at
    element ``offsets[i]`` of each wide row. Alignments are the arrays' addresses
    modulo 16 (a variant moving 16-byte vectors needs to know them). ``pitch``: the
    elements from one wide row's start to the next one's where the wide array is a view
    of part of every row of a wider one (``x[:, :96]``); 0 (or ``extent``) where its rows
    are packed.
    """

    op: str
    dtype: DType
    rows: int
    extents: tuple[int, ...]
    wide_align: int = 0
    piece_aligns: tuple[int, ...] = ()
    pitch: int = 0

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"op {self.op!r} is not one of {', '.join(OPS)}")
        if not self.piece_aligns:
            object.__setattr__(self, "piece_aligns", (0,) * len(self.extents))
        if len(self.piece_aligns) != len(self.extents):
            raise ValueError(f"{len(self.piece_aligns)} piece alignments for {len(self.extents)} pieces")
        if self.pitch == self.extent:
            object.__setattr__(self, "pitch", 0)  # packed, however it was said: one key
        if self.pitch and self.pitch < self.extent:
            raise ValueError(f"pitch {self.pitch} is less than the wide array's {self.extent} elements a row")

    @property
    def extent(self) -> int:
        """Elements per row of the wide array."""
        return sum(self.extents)

    @property
    def pieces(self) -> int:
        """How many pieces the wide array is cut into."""
        return len(self.extents)

    @property
    def row_pitch(self) -> int:
        """Elements from one wide row's start to the next one's."""
        return self.pitch or self.extent

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
            extent=self.row_pitch,
            width=self.extents[index],
            offset=self.offsets[index],
            index=index,
            wide_align=self.wide_align,
            piece_align=self.piece_aligns[index],
            pitched=bool(self.pitch),
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
    pitched: bool = False  # the wide array is a view: its last row ends before ``extent``


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
    accepts: Callable[[Any, GpuTraits], bool]
    build: Callable[[Any, GpuTraits], Sequence[Step]]
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
    from .channel_cat import ChannelCatBackward, ChannelCatForward

    cls = ChannelCatBackward if op == "backward" else ChannelCatForward
    return cls(dtype, block_size)


def _seed_steps(chunk: Chunk, traits: GpuTraits, scalar_max: int | None = None) -> list[Step]:
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
        if rows <= traits.max_grid_x // tiles:  # one launch (no range over rows: Rows plans it)
            return [step(rows, 0, 0, width, extent, offset)]
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

# --- the fast kernels (ptxgen.kernels.fastcat: rect, tile, rowpack, vec) -------------


def _fastcat_steps(op: str, problem: Problem | Chunk, traits: GpuTraits) -> list[Step]:
    """The steps of ``choose``'s launches: each kernel as the rule built it (target,
    dependent launch), its grid as the rule capped it, its arguments as Ptr and ints."""
    isz = problem.dtype.itemsize
    if isinstance(problem, Chunk):
        extents, aligns, index = _chunk_as_problem(problem)
        gap = 0
    else:
        extents, aligns, index = problem.extents, problem.piece_aligns, None
        gap = problem.row_pitch - problem.extent
    rows, wide_align = problem.rows, problem.wide_align
    launches = choose(op, rows, list(extents), isz, traits=traits, row_mod16=wide_align,
                      chunk_mod16=list(aligns), chunk=index, gap=gap)  # fmt: skip
    pitch = (sum(extents) + gap) * isz
    # a pitched view ends with its last row's elements, not at its last row's pitch
    row_bytes = ((rows - 1) * pitch + sum(extents) * isz) if gap and rows else None
    offs = [sum(extents[:i]) * isz for i in range(len(extents))]
    widths = [e * isz for e in extents]
    if isinstance(problem, Chunk):  # one piece, whose array is the chunk's own
        pieces = [Ptr(problem.index)] * len(extents)
    else:
        pieces = [Ptr(i) for i in range(len(extents))]
    steps = []
    for launch in launches:
        kernel = launch.kernel()
        args = launch.args(Ptr(WIDE), pieces, rows, pitch, offs, widths, row_bytes)
        steps.append(Step(kernel, (launch.grid, launch.grid_y, 1), kernel.block, tuple(args)))
    return steps


def _chunk_as_problem(chunk: Chunk) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """A gather or scatter of one piece, seen as the rule's (sizes, alignments, index):
    the columns before and after it as two neighbours."""
    before, after = chunk.offset, chunk.extent - chunk.offset - chunk.width
    extents = tuple(e for e in (before, chunk.width, after) if e)
    index = 1 if before else 0
    aligns = tuple(chunk.piece_align if i == index else 0 for i in range(len(extents)))
    return extents, aligns, index


def _fastcat_fits(problem: Problem | Chunk, traits: GpuTraits) -> bool:
    """Element sizes the byte kernels take, rows whose bytes fit their 30-bit pitch."""
    isz = problem.dtype.itemsize
    if isinstance(problem, Chunk) and problem.pitched:
        # A gather or scatter reads or writes whole rows of the wide side (rowpack does, and
        # the row side's extent is rows * pitch): past a view's last element. The seed
        # kernel touches only the piece's elements.
        return False
    pitch = problem.row_pitch if isinstance(problem, Problem) else problem.extent
    return isz in (1, 2, 4, 8) and 0 < pitch * isz < 1 << 30


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
#
# FASTCAT_CHUNK accepts exactly what FASTCAT_FUSED accepts (the same element sizes and
# rows), and an op-scope variant is asked first, so in this table it plans nothing: every
# split and concat it could take, the fused launch takes, and no measurement has a whole
# op run faster as a launch per piece (the benchmark's per-piece column trails the fused
# one on every split and concat, docs/perf/README.md). It is the per-piece planner for a
# table without the fused variant: the benchmark's gathers of one piece
# (scripts/bench_methods.py times every row of this table) and the per-piece GPU tests,
# which set ``VARIANTS = [FASTCAT_CHUNK, SEED]``.
VARIANTS: list[Variant] = [FASTCAT_FUSED, FASTCAT_CHUNK, SEED]


def make_plan(problem: Problem, traits: GpuTraits, variants: Sequence[Variant] | None = None) -> Plan:
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


# --- plans for every row count: the row count as a traced int ------------------------

# Row counts an op bundle covers at most: no GPU holds 2**48 rows of even one byte, so a
# plan valid up to here is valid for every array there can be.
ROWS_LIMIT = 2**48
# ... and the wide array's bytes stay below this, so that every expression of rows the
# plans hold (rows * pitch at most) is exact in the unsigned 64-bit arithmetic readers use.
_BYTES_LIMIT = 2**62


class RowsNotTraceable(ValueError):
    """The planner did something with the row count that :class:`Rows` cannot follow
    (a launch count that grows with rows, a subtraction): the rows from there on are not
    covered by one set of expressions."""


_COMPARE: dict[str, Callable[[int, int], bool]] = {
    "<": int.__lt__, "<=": int.__le__, ">": int.__gt__, ">=": int.__ge__, "==": int.__eq__, "!=": int.__ne__,
}  # fmt: skip


def _wrap(text: str) -> str:
    return text if text.isidentifier() or text.isdigit() else f"({text})"


class Rows(int):
    """A row count that remembers how each value was computed from it.

    It is the int it stands for, so the planner runs on it unchanged; arithmetic with
    plain non-negative ints gives another :class:`Rows` holding the C expression of
    ``rows`` that computes it (``text``, in the bundle grammar: unsigned, ``/``
    truncating) and the same as a Python function (``at``); negation is carried as a
    sign, so the rule's ``-(-a // b)`` is ``(a + b - 1) / b``. Every comparison is
    recorded in ``trace`` as ``(at, operator, constant, outcome)``: those are all the
    decisions the rule made of the row count. Everything else (a subtraction, a
    ``range``, ``int()``) raises :class:`RowsNotTraceable` rather than lose track.

    Every expression is built of ``+``, ``*`` and ``//`` by non-negative constants, so
    it never decreases as rows grow: each recorded inequality changes outcome at most
    once above a row count, which :func:`symbolic_plans` finds exactly.
    """

    text: str
    at: Callable[[int], int]
    negated: bool
    trace: list[tuple[Callable[[int], int], str, int, bool]]

    def __new__(
        cls, value: int, text: str = "rows", at: Callable[[int], int] | None = None, negated: bool = False,
        trace: list[Any] | None = None,
    ) -> Rows:  # fmt: skip
        self = super().__new__(cls, value)
        self.text = text
        self.at = at if at is not None else (lambda r: r)
        self.negated = negated
        self.trace = trace if trace is not None else []
        return self

    def _derive(self, value: int, text: str, at: Callable[[int], int], negated: bool) -> Rows:
        return Rows(value, text, at, negated, self.trace)

    def _constant(self, other: object, what: str) -> int:
        if isinstance(other, (Rows, bool)) or not isinstance(other, int) or other < 0:
            raise RowsNotTraceable(f"rows {what} {other!r}: only non-negative int constants are traced")
        return other

    def __add__(self, other: object) -> Rows:
        c = self._constant(other, "+")
        if self.negated:
            raise RowsNotTraceable("a negated row expression plus a constant is not traced")
        at, text = self.at, f"{self.text} + {c}" if c else self.text
        return self._derive(int(self.real) + c, text, lambda r: at(r) + c, False)

    __radd__ = __add__

    def __mul__(self, other: object) -> Rows:
        c = self._constant(other, "*")
        at, text = self.at, f"{_wrap(self.text)} * {c}"
        return self._derive(int(self.real) * c, text, lambda r: at(r) * c, self.negated)

    __rmul__ = __mul__

    def __neg__(self) -> Rows:
        return self._derive(-int(self.real), self.text, self.at, not self.negated)

    def __pos__(self) -> Rows:
        return self

    def __floordiv__(self, other: object) -> Rows:
        c = self._constant(other, "//")
        if c == 0:
            raise ZeroDivisionError("integer division or modulo by zero")
        at, value = self.at, int(self.real) // c
        if self.negated:  # -a // c == -ceil(a / c)
            return self._derive(value, f"({self.text} + {c - 1}) / {c}", lambda r: -(-at(r) // c), True)
        return self._derive(value, f"{_wrap(self.text)} / {c}", lambda r: at(r) // c, False)

    def _untraced(self, *_: object) -> Any:
        raise RowsNotTraceable(f"an operation on rows ({self.text}) that is not traced")

    __sub__ = __rsub__ = __truediv__ = __rtruediv__ = __rfloordiv__ = __mod__ = __rmod__ = _untraced
    __divmod__ = __rdivmod__ = __pow__ = __rpow__ = __lshift__ = __rshift__ = __rlshift__ = _untraced
    __rrshift__ = __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = __abs__ = _untraced
    __invert__ = __index__ = __int__ = __float__ = __round__ = __trunc__ = __floor__ = __ceil__ = _untraced

    def _compare(self, operator: str, other: object) -> bool:
        if self.negated:
            raise RowsNotTraceable(f"a comparison of a negated row expression ({self.text})")
        c = self._constant(other, operator)
        outcome = _COMPARE[operator](int(self.real), c)
        self.trace.append((self.at, operator, c, outcome))
        return outcome

    def __lt__(self, other: object) -> bool:
        return self._compare("<", other)

    def __le__(self, other: object) -> bool:
        return self._compare("<=", other)

    def __gt__(self, other: object) -> bool:
        return self._compare(">", other)

    def __ge__(self, other: object) -> bool:
        return self._compare(">=", other)

    def __eq__(self, other: object) -> bool:
        return self._compare("==", other)

    def __ne__(self, other: object) -> bool:
        return self._compare("!=", other)

    def __bool__(self) -> bool:
        return self._compare("!=", 0)

    __hash__ = int.__hash__

    def __repr__(self) -> str:
        return f"Rows({int(self.real)}: {self.text})"


def _first_where(holds: Callable[[int], bool], lo: int, hi: int) -> int | None:
    """The first r in (lo, hi] where ``holds`` (False, then True as r grows) is True."""
    if not holds(hi):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if holds(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _next_change(at: Callable[[int], int], operator: str, constant: int, lo: int, hi: int) -> int | None:
    """The first row count in (lo, hi] at which ``at(r) operator constant`` is not what it
    is at ``lo`` (``at`` never decreases), or None."""
    value = at(lo)
    if value > constant:  # stays above: no comparison with constant changes again
        return None
    if value == constant:  # == and != and the inclusive ones change where it rises past
        return _first_where(lambda r: at(r) > constant, lo, hi)
    # below: < and <= and != may change where it reaches the constant, the others past it
    reach = constant if operator in ("<", ">=", "==", "!=") else constant + 1
    return _first_where(lambda r: at(r) >= reach, lo, hi)


@dataclass(frozen=True)
class RowsCase:
    """The plan for every row count in ``rows_min..rows_max``: its steps' grids and
    scalar arguments are :class:`Rows` (expressions of ``rows``) or plain ints."""

    rows_min: int
    rows_max: int
    plan: Plan


def symbolic_plans(
    problem: Problem, traits: GpuTraits, variants: Sequence[Variant] | None = None
) -> list[RowsCase]:
    """``make_plan`` for every row count of ``problem``'s shape (its ``rows`` is not used),
    as consecutive row ranges from 0, each with one plan of expressions of ``rows``.

    Each range ends where one of the comparisons the planner made of the row count (a
    small-op threshold in bytes, a tile count against the SM count, a grid limit) would
    come out the other way, so the ranges are exactly those over which the rule takes the
    same path. A range also ends where a scalar argument would pass its parameter's
    maximum or a grid its limit; the ranges stop (the last ``rows_max`` is the most
    covered) at :data:`ROWS_LIMIT`, at a wide array of 2**62 bytes, or where the plan's
    launch count would grow with rows (the seed kernel's row groups past 2**31 CTAs).
    """
    if problem.pitch:
        raise ValueError("plans for every row count are of packed wide arrays; this one has a row pitch")
    pitch = sum(problem.extents) * problem.dtype.itemsize
    top = min(ROWS_LIMIT, _BYTES_LIMIT // max(pitch, 1))
    cases: list[RowsCase] = []
    lo = 0
    while lo <= top:
        rows = Rows(lo)
        try:
            traced = Problem(problem.op, problem.dtype, rows, problem.extents, problem.wide_align,
                             problem.piece_aligns)  # fmt: skip
            plan = make_plan(traced, traits, variants)
            fits = _within_limits(plan, traits)
        except RowsNotTraceable:
            break
        if not fits:
            break
        hi = top
        for at, operator, constant, _ in rows.trace:
            change = _next_change(at, operator, constant, lo, hi)
            if change is not None:
                hi = min(hi, change - 1)
        cases.append(RowsCase(lo, hi, plan))
        lo = hi + 1
    return cases


def _within_limits(plan: Plan, traits: GpuTraits) -> bool:
    """Whether every scalar argument is within its parameter's range and every grid within
    the device's limits (comparisons of Rows: where they hold is part of the range)."""
    ok = True
    for step in plan.steps:
        for value, t in zip(step.args, step.kernel.arg_types):
            if not isinstance(value, Ptr) and not t.is_pointer:
                ok = (value <= t.max) and ok
        limits = (traits.max_grid_x, traits.max_grid_y, 65535)
        for g, limit in zip(step.grid, limits):
            ok = (g <= limit) and (g >= 1) and ok
    return ok
