"""What the benchmark measures: shapes, cases and the traffic each case must move.

Pure Python (no GPU, no numpy), so the shape syntax and the traffic count are
tested anywhere (tests/test_bench_cases.py).

Shape syntax, rows first (commas and underscores in numbers are ignored):

    1048576x256->128@64      one piece: 128 of 256 channels, starting at channel 64
    524288x(32+48)           all pieces: a split (or concat) into 32 and 48 channels
    102400x(64*3)            three pieces of 64; terms mix: (16*2+32)
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

__all__ = [
    "DTYPE_SIZES",
    "OPS",
    "Case",
    "all_cases",
    "format_shape",
    "parse_shape",
    "quick_cases",
    "rotated",
    "sector_bytes",
    "sweep_cases",
]

SECTOR = 32  # bytes: the unit in which the memory system reads
# bytes: the L2's DRAM fetch unit at most (its fetch granularity is a hint of up to 64
# bytes here). Sparse reads pay it: one 32-byte sector of every 64 bytes takes as long as
# reading them all (lab/fastcat_grid_study.py --sectors: ~62 bytes a row for one sector in
# rows of 64). Denser gathers do not: 80 -> 48 @ 32 runs above 100% of the ceiling when
# counted in these units (docs/perf/README.md), so counted in them a gather's traffic is an
# upper estimate of what DRAM moved, and the 32-byte count is its floor.
DRAM_GRANULE = 64
OPS = ("gather", "split", "concat")
DTYPE_SIZES = {"u8": 1, "i8": 1, "e4m3": 1, "e5m2": 1, "bf16": 2, "f16": 2, "i16": 2, "u16": 2}
DTYPE_SIZES |= {"f32": 4, "i32": 4, "u32": 4, "f64": 8, "i64": 8, "u64": 8}

_NUMBER = r"\d[\d,_]*"


def rotated(items: list, shift: int) -> list:
    """``items`` rotated left by ``shift`` (modulo their count): the order of timing round
    ``shift``, so that over as many rounds as there are items each one runs first, second,
    ... equally often, and no place in the round favours one."""
    if not items:
        return []
    shift %= len(items)
    return items[shift:] + items[:shift]


def _int(text: str) -> int:
    return int(text.replace(",", "").replace("_", ""))


def parse_shape(text: str) -> tuple[int, tuple[int, ...], int | None]:
    """``(rows, sizes, pick)``: the channels of every piece, and which piece a one-piece
    shape (``R x C -> W @ O``) means; ``pick`` is None for a whole split."""
    s = text.strip().replace("×", "x").replace("→", "->").replace("·", "*").replace(" ", "")
    m = re.fullmatch(rf"({_NUMBER})x({_NUMBER})->({_NUMBER})@({_NUMBER})", s)
    if m:
        rows, total, width, offset = (_int(g) for g in m.groups())
        if width <= 0 or offset + width > total:
            raise ValueError(
                f"shape {text!r}: a piece of {width} channels at {offset} must lie inside "
                f"the {total} channels, and be at least 1 wide"
            )
        sizes = [n for n in (offset, width, total - offset - width) if n]
        return rows, tuple(sizes), 1 if offset else 0
    m = re.fullmatch(rf"({_NUMBER})x\(([\d,_*+]+)\)", s)
    if not m:
        raise ValueError(
            f"shape {text!r} is not understood; write ROWSxCHANNELS->WIDTH@OFFSET "
            "(1048576x256->128@64) or ROWSx(A+B+...) (524288x(32+48), 102400x(64*3))"
        )
    sizes: list[int] = []
    for term in m.group(2).split("+"):
        parts = term.split("*")
        if len(parts) > 2 or not all(re.fullmatch(_NUMBER, p) for p in parts):
            raise ValueError(f"shape {text!r}: term {term!r} is not N or N*COUNT")
        count = _int(parts[1]) if len(parts) == 2 else 1
        sizes += [_int(parts[0])] * count
    if not sizes or any(n <= 0 for n in sizes):
        raise ValueError(f"shape {text!r}: every piece needs at least 1 channel")
    return _int(m.group(1)), tuple(sizes), None


def format_shape(rows: int, sizes: tuple[int, ...], pick: int | None, pretty: bool = False) -> str:
    """The inverse of :func:`parse_shape`; ``pretty`` adds thousands separators and
    typographic signs, for tables."""
    n = (lambda v: f"{v:,}") if pretty else str
    if pick is not None:
        total, width, offset = sum(sizes), sizes[pick], sum(sizes[:pick])
        if pretty:
            return f"{n(rows)} × {n(total)} → {n(width)} @ {n(offset)}"
        return f"{rows}x{total}->{width}@{offset}"
    runs: list[list[int]] = []  # [size, count]: runs of one size read as size*count
    for size in sizes:
        if runs and runs[-1][0] == size:
            runs[-1][1] += 1
        else:
            runs.append([size, 1])
    times = "·" if pretty else "*"
    terms = "+".join(n(size) + (f"{times}{count}" if count > 1 else "") for size, count in runs)
    return f"{n(rows)} × ({terms})" if pretty else f"{rows}x({terms})"


def sector_bytes(rows: int, pitch: int, start: int, width: int, base: int = 0, sector: int = SECTOR) -> int:
    """Bytes of every ``sector``-byte sector (32 unless told) holding at least one of the bytes
    ``[base + r*pitch + start, base + r*pitch + start + width)`` for ``r < rows``.

    Exact, in time independent of ``rows``: where a row begins within its sector
    repeats every ``sector / gcd(pitch, sector)`` rows, and both the sectors a row touches and
    whether it shares its first sector with the row before depend only on that.
    """
    if rows <= 0 or width <= 0:
        return 0
    if width > pitch and rows > 1:
        raise ValueError(f"rows of {width} bytes cannot repeat every {pitch} bytes")
    first = base + start

    def touched(r: int) -> int:
        """Sectors of row r, minus one if its first is row r-1's last."""
        a = (first + r * pitch) % sector
        count = (a + width - 1) // sector + 1
        if r > 0:
            prev = (first + (r - 1) * pitch) % sector
            # row r-1 ends in the sector where row r begins
            if (prev + width - 1) // sector == (prev + pitch) // sector:
                count -= 1
        return count

    period = sector // _gcd(pitch % sector or sector, sector)
    total = touched(0)
    if rows > 1:
        per_period = [touched(r) for r in range(1, period + 1)]
        full, rest = divmod(rows - 1, period)
        total += full * sum(per_period) + sum(per_period[:rest])
    return total * sector


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


@dataclass(frozen=True)
class Case:
    """One measurement: an op on ``rows`` rows of pieces ``sizes`` channels wide.

    ``gather`` copies piece ``pick`` out of the wide array (one piece of a split);
    ``split`` writes every piece from the wide array; ``concat`` writes the wide
    array from every piece.
    """

    op: str
    rows: int
    sizes: tuple[int, ...]
    dtype: str
    pick: int | None = None
    group: str = "issue"

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"op {self.op!r} is not one of {', '.join(OPS)}")
        if (self.op == "gather") != (self.pick is not None):
            raise ValueError("a gather names its piece (pick); a split or concat does not")
        if self.dtype not in DTYPE_SIZES:
            raise ValueError(f"dtype {self.dtype!r} is not one of {', '.join(DTYPE_SIZES)}")

    @property
    def itemsize(self) -> int:
        return DTYPE_SIZES[self.dtype]

    @property
    def channels(self) -> int:
        return sum(self.sizes)

    @property
    def offsets(self) -> tuple[int, ...]:
        return tuple(sum(self.sizes[:i]) for i in range(len(self.sizes)))

    @property
    def shape(self) -> str:
        return format_shape(self.rows, self.sizes, self.pick)

    @property
    def pretty_shape(self) -> str:
        return format_shape(self.rows, self.sizes, self.pick, pretty=True)

    @property
    def name(self) -> str:
        """What ``--only`` patterns are matched against: ``"split 524288x(32+48) f32"``."""
        return f"{self.op} {self.shape} {self.dtype}"

    @property
    def wide_bytes(self) -> int:
        return self.rows * self.channels * self.itemsize

    def traffic(self) -> int:
        """Bytes written plus the bytes of every 32-byte sector of the source holding data
        the op needs (arrays start 256-byte aligned, as the allocators give them)."""
        isz, pitch = self.itemsize, self.channels * self.itemsize
        if self.op == "gather":
            width = self.sizes[self.pick] * isz
            read = sector_bytes(self.rows, pitch, self.offsets[self.pick] * isz, width)
            return self.rows * width + read
        if self.op == "split":
            return self.wide_bytes + sector_bytes(1, self.wide_bytes, 0, self.wide_bytes)
        pieces = [self.rows * s * isz for s in self.sizes]
        return self.wide_bytes + sum(sector_bytes(1, p, 0, p) for p in pieces)

    def dram_traffic(self) -> int:
        """:meth:`traffic` with :data:`DRAM_GRANULE`-byte units of the source in place of
        32-byte sectors: what DRAM moves if it fetches whole 64-byte units, an upper
        estimate (the same as ``traffic`` for splits and concats, whose sources are read
        whole)."""
        if self.op != "gather":
            return self.traffic()
        isz, pitch = self.itemsize, self.channels * self.itemsize
        width = self.sizes[self.pick] * isz
        read = sector_bytes(self.rows, pitch, self.offsets[self.pick] * isz, width, sector=DRAM_GRANULE)
        return self.rows * width + read


# The issue's shapes: one piece (gather), and whole splits (and concats)
ISSUE_GATHER = ("1048576x256->128@64", "16384x16384->8192@4096", "524288x80->48@32", "4194304x4->3@1")
ISSUE_SPLIT = ("200704x(256+256)", "16384x(8192+16384)", "524288x(32+48)", "4194304x(1+3)", "128x(401408*2)")
# at most 1 MB per array in every dtype: launch latency more than bandwidth
SMALL = ("512x(64+64)", "2048x(3+5+24)")
# teenygrad's YOLO C2f/C3k2 backward: 3-4 pieces of 16-256 channels over batch*H*W rows, bf16
YOLO = ("102400x(64*3)", "409600x(16+16+32)", "51200x(128*4)", "25600x(256*3)")
DTYPES = ("u8", "bf16", "f32", "f64")


def all_cases(dtypes: tuple[str, ...] = DTYPES) -> list[Case]:
    cases = []
    for shape in ISSUE_GATHER:
        rows, sizes, pick = parse_shape(shape)
        cases += [Case("gather", rows, sizes, d, pick) for d in dtypes]
    for group, shapes, kinds in (
        ("issue", ISSUE_SPLIT, dtypes),
        ("small", SMALL, dtypes),
        ("yolo", YOLO, ("bf16",)),
    ):
        for shape in shapes:
            rows, sizes, _ = parse_shape(shape)
            cases += [Case(op, rows, sizes, d, None, group) for op in ("split", "concat") for d in kinds]
    return cases


# The random sweep (--sweep N --seed S): shapes no one tuned on. Each shape is measured
# as a split and as a concat; dtypes of 1, 2, 4 and 8 bytes in turn.
SWEEP_DTYPES = ("u8", "bf16", "f32", "f64")
SWEEP_PIECES = (2, 6)  # pieces per shape, inclusive
SWEEP_WIDTHS = (1, 300)  # elements per piece, inclusive
SWEEP_BYTES = (64 << 20, 192 << 20)  # bytes of the wide array


def sweep_cases(count: int, seed: int, pieces: tuple[int, int] = SWEEP_PIECES) -> list[Case]:
    """``count`` random shapes, each as a split and a concat (group ``sweep``), drawn
    from ``seed`` alone: the same seed gives the same cases on any machine. ``pieces``
    (inclusive) is the benchmark's 2-6 unless a study asks for others."""
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        dtype = SWEEP_DTYPES[i % len(SWEEP_DTYPES)]
        sizes = tuple(rng.randint(*SWEEP_WIDTHS) for _ in range(rng.randint(*pieces)))
        row_bytes = sum(sizes) * DTYPE_SIZES[dtype]
        rows = -(-rng.randint(*SWEEP_BYTES) // row_bytes)
        cases += [Case(op, rows, sizes, dtype, None, "sweep") for op in ("split", "concat")]
    return cases


QUICK = (
    "gather 524288x80->48@32 (f32|u8)",
    "split 4194304x\\(1\\+3\\) f32",
    "split 524288x\\(32\\+48\\) bf16",
    "concat 200704x\\(256\\*2\\) f32",
    "split 512x\\(64\\*2\\) f32",
    "split 102400x\\(64\\*3\\) bf16",
)


def quick_cases() -> list[Case]:
    """A few cases of every kind, for a first look (--quick)."""
    return [c for c in all_cases() if any(re.fullmatch(q, c.name) for q in QUICK)]
