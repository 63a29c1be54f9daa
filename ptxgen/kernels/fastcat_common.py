"""What the fast channel-concat kernels share: argument checks, access widths, load hints,
and byte packing.

Every fastcat kernel moves *bytes*: its pointers are ``u8`` and the element size only
decides which access widths the alignment allows, so one kernel serves every dtype of
a given size.
"""

from __future__ import annotations

from ..args import Pointer, Scalar
from ..function import PtxFunction
from ..ptxtypes import Reg, Vec
from ..targets import target_capability

__all__ = [
    "BYTES_IN",
    "BYTES_OUT",
    "LAYOUTS",
    "LOAD_HINTS",
    "MAX_CHUNKS",
    "U32",
    "U64",
    "WIDTHS",
    "check_block",
    "check_choice",
    "check_hint",
    "data_regs",
    "ld_type",
    "pack_bytes",
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

# load_hint -> the ld qualifier it adds. Both qualifiers need PTX ISA 7.4; the builder's
# instruction table records that, and L2::256B's sm_80, so the module's .version follows.
LOAD_HINTS: dict[str | None, str] = {None: "", "L2::256B": ".L2::256B", "L1::no_allocate": ".L1::no_allocate"}
LAYOUTS = ("block", "grid")


def check_choice(value: object, what: str, allowed: tuple[object, ...]) -> object:
    """``value`` if it is one of ``allowed`` (bools are not ints here), else a ValueError naming both."""
    if isinstance(value, bool) != any(isinstance(a, bool) for a in allowed) or value not in allowed:
        raise ValueError(f"{what} = {value!r} is not accepted; accepted: {', '.join(map(repr, allowed))}")
    return value


def check_block(block: object) -> int:
    return check_choice(block, "block", (64, 128, 256, 512, 1024))  # type: ignore[return-value]


def check_hint(load_hint: object, target: str) -> str | None:
    """``load_hint`` if the target can have it: ``L2::256B`` prefetches need sm_80."""
    if load_hint not in LOAD_HINTS:
        raise ValueError(f"load_hint {load_hint!r}; accepted: {', '.join(map(repr, LOAD_HINTS))}")
    if load_hint == "L2::256B" and target_capability(target) < (8, 0):
        raise ValueError(f"load_hint 'L2::256B' needs sm_80 or newer, not {target}")
    return load_hint  # type: ignore[return-value]


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
