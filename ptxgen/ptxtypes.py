"""PTX's fundamental types and the operands an instruction can take.

Every operand is a small immutable object that knows how it is written in PTX
(``str()``) and what it is (a register of one type, a vector of registers, an
address in a state space, a label, an immediate). The instruction table in
:mod:`ptxgen.isa` checks instructions against these, never against text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "BITS",
    "REG_TYPES",
    "RESERVED_REG_NAMES",
    "SPECIAL_REGS",
    "Addr",
    "Label",
    "Operand",
    "Pair",
    "Param",
    "ParamArray",
    "PtxTargetError",
    "PtxTypeError",
    "Reg",
    "SharedArray",
    "Sink",
    "Special",
    "Vec",
    "check_name",
    "fits",
    "imm_fits",
]


class PtxTypeError(TypeError):
    """An instruction whose qualifiers or operands do not fit its opcode."""


class PtxTargetError(ValueError):
    """An instruction, type or directive the function's target or PTX ISA cannot have."""


# Bit width of every fundamental PTX type a register or instruction may carry.
BITS: dict[str, int] = {
    "pred": 1,
    "b8": 8, "u8": 8, "s8": 8,
    "b16": 16, "u16": 16, "s16": 16, "f16": 16, "bf16": 16,
    "b32": 32, "u32": 32, "s32": 32, "f32": 32,
    "b64": 64, "u64": 64, "s64": 64, "f64": 64,
    "b128": 128,
}  # fmt: skip

# Types a register may be declared with. 8-bit registers exist (``.reg .b8`` assembles),
# but ld/st of 8-bit data is usually clearer through 16-bit registers; both are allowed.
REG_TYPES = frozenset(BITS)

# The PTX ISA and SM a register *type* needs: 128-bit registers came with PTX ISA 8.3.
TYPE_MINIMUM: dict[str, tuple[str, int]] = {"b128": ("8.3", 70)}

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")

# Names of PTX special registers: a register %tid would make "%tid.x" read as a
# video selector on it, so the builder refuses these names.
RESERVED_REG_NAMES = frozenset(
    (
        "tid", "ntid", "ctaid", "nctaid", "laneid", "warpid", "nwarpid", "smid", "nsmid",
        "gridid", "clock", "clock64", "lanemask_eq", "lanemask_le", "lanemask_lt",
        "lanemask_ge", "lanemask_gt", "pm0", "pm1", "pm2", "pm3", "envreg", "globaltimer",
        "dynamic_smem_size", "total_smem_size", "clusterid", "nclusterid", "cluster_ctaid",
        "cluster_nctaid", "cluster_ctarank", "cluster_nctarank", "is_explicit_cluster",
    )
)  # fmt: skip


def check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"{what} name {name!r} is not a PTX identifier")
    return name


@dataclass(frozen=True)
class Reg:
    """A virtual register: ``%name`` of one PTX type."""

    name: str
    type: str

    def __str__(self) -> str:
        return "%" + self.name


@dataclass(frozen=True)
class Vec:
    """A vector operand ``{%a, %b, %c, %d}`` of 2, 4 or 8 registers of one type."""

    regs: tuple[Reg, ...]

    def __post_init__(self) -> None:
        if len(self.regs) not in (2, 4, 8) or not all(isinstance(r, Reg) for r in self.regs):
            raise PtxTypeError(f"a vector holds 2, 4 or 8 registers, not {self.regs!r}")
        if len({r.type for r in self.regs}) != 1:
            raise PtxTypeError(f"a vector's registers share one type: {', '.join(map(repr, self.regs))}")

    @property
    def type(self) -> str:
        return self.regs[0].type

    def __len__(self) -> int:
        return len(self.regs)

    def __str__(self) -> str:
        return "{" + ", ".join(str(r) for r in self.regs) + "}"


@dataclass(frozen=True)
class Special:
    """A read-only special register such as ``%ctaid.x``."""

    name: str
    type: str = "u32"

    def __str__(self) -> str:
        return "%" + self.name


SPECIAL_REGS: dict[str, Special] = {
    **{
        f"{reg}.{axis}": Special(f"{reg}.{axis}")
        for reg in ("tid", "ntid", "ctaid", "nctaid")
        for axis in "xyz"
    },
    "laneid": Special("laneid"),
    "warpid": Special("warpid"),
    "smid": Special("smid"),
    "nsmid": Special("nsmid"),
    "clock64": Special("clock64", "u64"),
    "globaltimer": Special("globaltimer", "u64"),
}


@dataclass(frozen=True)
class Sink:
    """``_``: a destination whose value is thrown away (``mbarrier.arrive``, ``elect.sync``)."""

    def __str__(self) -> str:
        return "_"


@dataclass(frozen=True)
class Pair:
    """``%r|%p``: the two destinations of ``elect.sync`` (either may be ``_``)."""

    first: Reg | Sink
    second: Reg | Sink

    def __str__(self) -> str:
        return f"{self.first}|{self.second}"


@dataclass(frozen=True)
class Param:
    """A kernel parameter in the ``.param`` state space, of one fundamental type."""

    name: str
    type: str
    comment: str = ""

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class ParamArray:
    """A byte-array kernel parameter: ``.param .align A .b8 name[size]``.

    Holds a small struct passed by value (several pointers, say); fields are read
    with ``ld.param`` at byte offsets: ``Addr(array, 8)``.
    """

    name: str
    size: int
    align: int
    comment: str = ""

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class SharedArray:
    """A ``.shared`` array of the CTA: ``.shared .align A .b8 name[size]``."""

    name: str
    size: int
    align: int
    type: str = "b8"

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Addr:
    """A memory operand: ``[%reg]``, ``[%reg+8]``, ``[param+8]`` or ``[shared_array]``."""

    base: Reg | Param | ParamArray | SharedArray
    offset: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.offset, bool) or not isinstance(self.offset, int):
            raise PtxTypeError(f"an address offset is an int, not {self.offset!r}")

    def __str__(self) -> str:
        if self.offset:
            sign = "+" if self.offset > 0 else "-"
            return f"[{self.base}{sign}{abs(self.offset)}]"
        return f"[{self.base}]"


@dataclass(frozen=True)
class Label:
    name: str

    def __str__(self) -> str:
        return self.name


Operand = Reg | Vec | Special | Sink | Pair | Addr | Label | SharedArray | int


def fits(inst_type: str, reg_type: str, widen: bool = False) -> bool:
    """PTX's operand type rules: same size, and a kind the instruction type admits.

    ``widen``: 8-bit loads and stores and ``cvt`` may use a wider register.
    """
    if reg_type == inst_type:
        return True
    if "pred" in (inst_type, reg_type):
        return False
    want, have = BITS[inst_type], BITS[reg_type]
    if have != want and not (widen and want == 8 and have >= 16):
        return False
    if inst_type[0] == "b":
        return True  # bit-size instructions take any register of the size
    if inst_type[0] in "us":
        return reg_type[0] in "usb"
    return reg_type[0] == "b"  # floats: the same float (above), or bits


def imm_fits(value: int, t: str) -> bool:
    bits = BITS[t]
    if t[0] == "s":
        return -(1 << (bits - 1)) <= value < (1 << (bits - 1))
    if t[0] == "u":
        return 0 <= value < (1 << bits)
    if t[0] == "b":
        return -(1 << (bits - 1)) <= value < (1 << bits)
    return False  # no float immediates from this builder
