"""What the fast channel-concat kernels share: argument checks, access widths, load hints,
and byte packing.

Every fastcat kernel moves *bytes*: its pointers are ``u8`` and the element size only
decides which access widths the alignment allows, so one kernel serves every dtype of
a given size.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

from ..args import ArgType, Pointer, Scalar
from ..footprint import Footprint, FootprintError
from ..function import PtxFunction
from ..ptxtypes import SPECIAL_REGS, Addr, Param, Reg, Vec
from ..targets import target_capability

__all__ = [
    "BYTES_IN",
    "BYTES_OUT",
    "DEPENDENT_TRIGGER_CTAS",
    "MAX_CHUNKS",
    "U32",
    "U64",
    "WIDTHS",
    "check_block",
    "check_choice",
    "check_dependent_launch",
    "data_regs",
    "dependent_launch_supported",
    "emit_dependent_launch",
    "ld_type",
    "pack_bytes",
    "select_chunk",
    "window_args",
    "window_chunk_vectors",
    "window_footprints",
]

# Chunks per launch: each costs 16 bytes of parameters and one unrolled copy of the
# per-chunk code; 32 keeps a kernel under ~4K SASS instructions and the parameters far
# under the 4 KB classic limit.
MAX_CHUNKS = 32

# Access widths in bytes, widest first: the planner takes the first the alignment allows.
WIDTHS = (16, 8, 4, 2, 1)
U64 = Scalar("u64")
U32 = Scalar("u32")
BYTES_IN = Pointer("u8", writes=False)
BYTES_OUT = Pointer("u8")

# One access of `width` bytes: (ld/st type with its vector qualifier, registers it fills).
# 1- and 2-byte data sits in 16-bit registers (PTX has no 8-bit arithmetic worth having).
_ACCESS = {16: ("v4.u32", 4), 8: ("v2.u32", 2), 4: ("u32", 1), 2: ("b16", 1), 1: ("b8", 1)}


def check_choice(value: object, what: str, allowed: tuple[object, ...]) -> object:
    """``value`` if it is one of ``allowed`` (bools are not ints here), else a ValueError naming both."""
    if isinstance(value, bool) != any(isinstance(a, bool) for a in allowed) or value not in allowed:
        raise ValueError(f"{what} = {value!r} is not accepted; accepted: {', '.join(map(repr, allowed))}")
    return value


def check_block(block: object) -> int:
    return check_choice(block, "block", (64, 128, 256, 512, 1024))  # type: ignore[return-value]


# --- programmatic dependent launch (sm_90+) ------------------------------------------------
# A kernel built with ``dependent_launch=True`` may be launched with programmatic stream
# serialization: the next kernel of the stream (or graph) is then scheduled while this one
# still runs, and this one may start before the previous one has finished. Each waits in
# ``griddepcontrol.wait`` (every thread, before its first memory access) until the
# previous grid has completed and its writes are visible, so results are the same in any
# order; what is saved is the launch latency between them (H200, graph of 100 dependent
# 4 KB launches: 0.84 -> 0.52 us a launch, docs/perf/kernels.md).
#
# The trigger that lets the next grid be scheduled is not free: on an H200 a grid of
# 32,768 one-element CTAs that each issued it ran twice as long, with or without the
# launch attribute. The next grid is scheduled once every CTA has triggered or exited,
# so only the grid's tail needs to: the last DEPENDENT_TRIGGER_CTAS CTAs in launch
# order (x fastest, then y) trigger, and the rest count on exit. The count is compiled
# in, the same for every part: a tail short against the grids that paid for the trigger
# (a quarter of a full wave of 256-thread CTAs on the H200 it was measured on, 132 SMs;
# a third on 108, a fifth on 170 of as many threads), and a smaller grid triggers in all.
DEPENDENT_TRIGGER_CTAS = 256


def dependent_launch_supported(target: str) -> bool:
    """Whether ``target`` has ``griddepcontrol`` (sm_90 and newer)."""
    return target_capability(target) >= (9, 0)


def check_dependent_launch(value: object, target: str) -> bool:
    """``value`` if it is a bool the target can have: ``griddepcontrol`` needs sm_90."""
    if not isinstance(value, bool):
        raise ValueError(f"dependent_launch = {value!r} is not accepted; accepted: True, False")
    if value and not dependent_launch_supported(target):
        raise ValueError(
            f"dependent_launch=True needs sm_90 or newer (griddepcontrol), not {target}; "
            "build the kernel with dependent_launch=False for it"
        )
    return value


def emit_dependent_launch(fn: PtxFunction) -> None:
    """The prologue of a ``dependent_launch`` kernel: the tail CTAs let the next grid be
    scheduled, then every thread waits for the previous grid (see above). Emitted before
    any global memory access; without the launch attribute both instructions do nothing."""
    fn.banner("programmatic dependent launch: let the next grid start, wait for the previous one")
    cta, n_x, n_y = fn.reg("pdl_cta", "u32"), fn.reg("pdl_ctas_x", "u32"), fn.reg("pdl_ctas_y", "u32")
    order, total = fn.reg("pdl_order", "u64"), fn.reg("pdl_total", "u64")
    tail = fn.reg("pdl_in_tail", "pred")
    fn.inst("mov.u32", cta, SPECIAL_REGS["ctaid.x"])
    fn.inst("mov.u32", n_x, SPECIAL_REGS["nctaid.x"])
    fn.inst("mov.u32", n_y, SPECIAL_REGS["nctaid.y"])
    fn.inst("add.u32", cta, cta, DEPENDENT_TRIGGER_CTAS, comment="no wrap: ctaid.x < 2**31")
    fn.inst("cvt.u64.u32", order, cta)
    fn.inst("mov.u32", cta, SPECIAL_REGS["ctaid.y"])
    fn.inst("mad.wide.u32", order, cta, n_x, order, comment="its place in launch order, + the tail")
    fn.inst("mul.wide.u32", total, n_y, n_x, comment="CTAs in the grid (64-bit: may pass 2**32)")
    fn.inst("setp.ge.u64", tail, order, total, comment=f"one of the last {DEPENDENT_TRIGGER_CTAS} CTAs")
    fn.inst("griddepcontrol.launch_dependents", guard=tail, comment="the next grid may be scheduled")
    fn.inst("griddepcontrol.wait", comment="the previous grid has finished, its writes are visible")


def ld_type(width: int) -> str:
    """The ld/st type suffix that moves ``width`` bytes in one access (``v4.u32`` for 16)."""
    return _ACCESS[width][0]


def data_regs(fn: PtxFunction, stem: str, width: int) -> Reg | Vec:
    """The registers one access of ``width`` bytes fills: ``%stem_0`` or ``{%stem_0, ...}``."""
    count = _ACCESS[width][1]
    rtype = "b16" if width <= 2 else "b32"
    if count == 1:
        return fn.reg(f"{stem}_0", rtype)
    return fn.vec(f"{stem}_", rtype, count)


def pack_bytes(fn: PtxFunction, word: Reg, parts: list[Reg], lo: Reg, hi: Reg) -> None:
    """word = parts[0] | parts[1] << 8 | parts[2] << 16 | parts[3] << 24 (each part one byte
    in the low byte of a 32-bit register); ``lo``/``hi`` are scratch."""
    fn.inst("prmt.b32", lo, parts[0], parts[1], 0x0040, comment="bytes 0,1")
    fn.inst("prmt.b32", hi, parts[2], parts[3], 0x0040, comment="bytes 2,3")
    fn.inst("prmt.b32", word, lo, hi, 0x5410)


# --- the window contract of the direct-copy kernels (vec, rect) ---------------------------


def window_args(chunks: int, backward: bool) -> tuple[tuple[str, ...], tuple[ArgType, ...]]:
    """The argument names and types of a direct copy between a window of the row side and
    ``chunks`` adjacent chunks: ``row_base, row_pitch, rows, window_vectors``, then per
    chunk ``chunk{k}_ptr, chunk{k}_pitch`` and, with several chunks, ``chunk{k}_start``.
    Backward reads the row side and writes the chunks; forward the other way round."""
    row_side, chunk_side = (BYTES_IN, BYTES_OUT) if backward else (BYTES_OUT, BYTES_IN)
    names: list[str] = ["row_base", "row_pitch", "rows", "window_vectors"]
    types: list[ArgType] = [row_side, U64, U64, U32]
    for k in range(chunks):
        names += [f"chunk{k}_ptr", f"chunk{k}_pitch"]
        types += [chunk_side, U64]
        if chunks > 1:
            names.append(f"chunk{k}_start")
            types.append(U32)
    return tuple(names), tuple(types)


@dataclass(frozen=True)
class ChunkScratch:
    """The registers :func:`select_chunk` works in (several chunks only)."""

    start: Reg  # u32: the start of the chunk picked so far
    k_start: Reg  # u32: chunk k's start
    k_val: Reg  # u64: chunk k's pointer or pitch
    in_chunk: Reg  # pred: the column has reached chunk k


def select_chunk(
    fn: PtxFunction,
    params: Mapping[str, Param],
    chunks: int,
    col: Reg,
    c_ptr: Reg,
    c_pitch: Reg,
    c_col: Reg,
    scratch: ChunkScratch | None,
    comment: str,
) -> None:
    """Emit: ``c_ptr``, ``c_pitch`` = the (generic) pointer and pitch of the chunk that holds
    window column ``col`` and ``c_col`` = the column in that chunk. Chunk parameters are
    read where used: they live in the constant bank, so ptxas folds them into the
    instructions instead of holding registers per chunk. With several chunks, a chain of
    ``selp`` keeps the last chunk whose start ``col`` has reached (starts ascend)."""
    fn.inst("ld.param.u64", c_ptr, Addr(params["chunk0_ptr"]))
    fn.inst("ld.param.u64", c_pitch, Addr(params["chunk0_pitch"]))
    if chunks == 1:
        fn.inst("mov.u32", c_col, col)
        return
    assert scratch is not None, "several chunks need scratch registers"
    start, k_start, k_val, in_chunk = scratch.start, scratch.k_start, scratch.k_val, scratch.in_chunk
    fn.inst("mov.u32", start, 0, comment=comment)
    for k in range(1, chunks):
        fn.inst("ld.param.u32", k_start, Addr(params[f"chunk{k}_start"]))
        fn.inst("setp.ge.u32", in_chunk, col, k_start)
        fn.inst("ld.param.u64", k_val, Addr(params[f"chunk{k}_ptr"]))
        fn.inst("selp.b64", c_ptr, k_val, c_ptr, in_chunk)
        fn.inst("ld.param.u64", k_val, Addr(params[f"chunk{k}_pitch"]))
        fn.inst("selp.b64", c_pitch, k_val, c_pitch, in_chunk)
        fn.inst("selp.b32", start, k_start, start, in_chunk)
    fn.inst("sub.u32", c_col, col, start, comment="its column in its chunk")


def window_chunk_vectors(name: str, chunks: int, scalars: Mapping[str, int]) -> tuple[int, ...]:
    """How many vectors of each row each of ``chunks`` adjacent chunks receives (backward)
    or gives (forward): the window's vectors ``[start_k, start_{k+1})``, the last chunk's
    up to ``window_vectors``. Raises :class:`FootprintError` for starts that do not ascend."""
    n = scalars["window_vectors"]
    if chunks == 1:
        return (n,)
    starts = [0] + [scalars[f"chunk{k}_start"] for k in range(1, chunks)]
    if any(b < a for a, b in itertools.pairwise(starts)):
        raise FootprintError(
            f"{name}: chunk starts {starts[1:]} (chunk1_start..) must ascend; "
            "the kernel picks the last chunk whose start a vector has reached"
        )
    ends = [*starts[1:], n]
    return tuple(max(0, min(e, n) - min(s, n)) for s, e in zip(starts, ends))


def window_footprints(
    name: str, width: int, chunks: int, scalars: Mapping[str, int], live: bool, backward: bool
) -> tuple[Footprint, ...]:
    """The footprints of a direct copy between a window of the row side (``row_base``,
    ``row_pitch``, ``rows``, ``window_vectors`` accesses of ``width`` bytes) and
    ``chunks`` adjacent chunks (``chunk{k}_ptr``, ``chunk{k}_pitch``, ``chunk{k}_start``);
    ``live``: the grid has CTAs. Raises :class:`FootprintError` for a pitch ``width`` does
    not divide, ``window_vectors`` above 2**31 (or 0 with rows), a window wider than the row
    pitch or a chunk's vectors wider than its pitch (rows would overlap)."""
    w, rows, n = width, scalars["rows"], scalars["window_vectors"]
    pitches = [scalars["row_pitch"]] + [scalars[f"chunk{k}_pitch"] for k in range(chunks)]
    bad = [p for p in pitches if p % w]
    if bad:
        raise FootprintError(f"{name}: pitch {bad[0]} is not a multiple of the access width {w}")
    # Column indices are 32-bit and a column tile steps past the window before it stops:
    # beyond 2**31 that step could wrap and the loop would never end, rows or no rows.
    if n > 1 << 31 or (rows > 0 and n < 1):
        raise FootprintError(
            f"{name}: window_vectors = {n} is not accepted; "
            "accepted: 1..2**31 when rows > 0 (0..2**31 without)"
        )
    if rows > 1 and n * w > pitches[0]:
        raise FootprintError(
            f"{name}: the window ({n} vectors of {w} bytes) is wider than row_pitch {pitches[0]}"
        )
    counts = window_chunk_vectors(name, chunks, scalars)
    for k, (c, p) in enumerate(zip(counts, pitches[1:])):
        if rows > 1 and c * w > p:
            raise FootprintError(
                f"{name}: chunk {k} gets {c} vectors of {w} bytes a row, wider than its pitch {p}"
            )
    live = live and rows > 0

    def extent(pitch: int, vectors: int) -> int:
        return (rows - 1) * pitch + vectors * w if live and vectors else 0

    out = [Footprint("row_base", extent(pitches[0], n), 1, w, writes=not backward)]
    for k, c in enumerate(counts):
        out.append(Footprint(f"chunk{k}_ptr", extent(pitches[k + 1], c), 1, w, writes=backward))
    return tuple(out)
