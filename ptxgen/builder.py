"""A small typed PTX builder.

Every instruction goes through :meth:`Function.inst`, which parses the opcode, works
out what type each operand must have (``mad.wide.u32`` takes a 64-bit destination,
two 32-bit factors and a 64-bit addend) and refuses a mismatch before any text is
written. Registers are declared through the builder, named for what they hold, and
the declarations are rendered grouped by type from the builder's own records.

Rendering lines opcodes, operands and ``// comments`` up in columns and keeps
section banners (``// --- ... ---``), so the emitted PTX reads like a lesson.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "SPECIAL_REGS",
    "Addr",
    "Function",
    "Label",
    "Module",
    "Param",
    "PtxTypeError",
    "Reg",
    "Special",
]


class PtxTypeError(TypeError):
    """An instruction whose operands do not fit its opcode."""


# Bit width of every fundamental PTX type a register or instruction may carry.
BITS: dict[str, int] = {
    "pred": 1,
    "b8": 8, "u8": 8, "s8": 8,
    "b16": 16, "u16": 16, "s16": 16, "f16": 16, "bf16": 16,
    "b32": 32, "u32": 32, "s32": 32, "f32": 32,
    "b64": 64, "u64": 64, "s64": 64, "f64": 64,
}  # fmt: skip

# Types a register may be declared with: PTX has no 8-bit registers.
REG_TYPES = frozenset(t for t, bits in BITS.items() if bits != 8)

# The lowest PTX ISA each feature needs, for the module's .version.
FEATURE_ISA: dict[str, str] = {
    "ld.global.nc": "3.1",  # the read-only (non-coherent) data path
    ".reqntid": "2.1",
}

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Names of PTX special registers: a register %tid would make "%tid.x" read as a
# video selector on it, so the builder refuses these names.
RESERVED_REG_NAMES = frozenset(
    (
        "tid", "ntid", "ctaid", "nctaid", "laneid", "warpid", "nwarpid", "smid", "nsmid",
        "gridid", "clock", "clock64", "lanemask_eq", "lanemask_le", "lanemask_lt",
        "lanemask_ge", "lanemask_gt", "pm0", "pm1", "pm2", "pm3", "envreg", "globaltimer",
        "dynamic_smem_size", "total_smem_size",
    )
)  # fmt: skip


def _check_name(name: str, what: str) -> str:
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
class Special:
    """A read-only special register such as ``%ctaid.x``."""

    name: str
    type: str = "u32"

    def __str__(self) -> str:
        return "%" + self.name


SPECIAL_REGS: dict[str, Special] = {
    name: Special(name) for name in ("tid.x", "ntid.x", "ctaid.x", "nctaid.x", "laneid")
}


@dataclass(frozen=True)
class Param:
    """A kernel parameter in the ``.param`` state space."""

    name: str
    type: str
    comment: str = ""

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Addr:
    """A memory operand: ``[%reg]``, ``[%reg+8]`` or ``[param]``."""

    base: Reg | Param
    offset: int = 0

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


Operand = Reg | Special | Addr | Label | int


# --- operand slots: what each position of an instruction accepts --------------------


@dataclass(frozen=True)
class _Slot:
    kind: str  # "dst", "src", "addr", "label"
    type: str = ""
    widen: bool = False  # 8-bit ld/st may use a 16-bit or wider register
    special: bool = False  # mov may read a special register
    space: str = ""  # for "addr": the state space


def _wide(t: str) -> str:
    """The type twice as wide: the result of ``mul.wide`` / ``mad.wide``."""
    bits = BITS[t]
    if t[0] not in "us" or bits > 32:
        raise PtxTypeError(f".wide needs a 16- or 32-bit integer type, not .{t}")
    return f"{t[0]}{bits * 2}"


def _type_of(mods: list[str], opcode: str) -> str:
    if not mods or mods[-1] not in BITS:
        raise PtxTypeError(f"{opcode}: the last modifier must be a type")
    return mods[-1]


_SPACES = ("global", "param", "shared", "local", "const")


def _signature(opcode: str) -> tuple[list[_Slot], str | None]:
    """The operand slots of ``opcode`` and the ISA feature it needs (if any)."""
    op, *mods = opcode.split(".")
    if op in ("add", "sub", "min", "max", "div", "rem", "and", "or", "xor"):
        t = _type_of(mods, opcode)
        return [_Slot("dst", t), _Slot("src", t), _Slot("src", t)], None
    if op in ("mul", "mad"):
        if len(mods) != 2 or mods[0] not in ("lo", "hi", "wide"):
            raise PtxTypeError(f"{opcode}: expected {op}.lo/.hi/.wide.<type>")
        t = mods[1]
        if t not in BITS:
            raise PtxTypeError(f"{opcode}: unknown type .{t}")
        d = _wide(t) if mods[0] == "wide" else t
        slots = [_Slot("dst", d), _Slot("src", t), _Slot("src", t)]
        if op == "mad":
            slots.append(_Slot("src", d))
        return slots, None
    if op == "mov":
        t = _type_of(mods, opcode)
        return [_Slot("dst", t), _Slot("src", t, special=True)], None
    if op in ("shl", "shr"):
        t = _type_of(mods, opcode)
        return [_Slot("dst", t), _Slot("src", t), _Slot("src", "u32")], None
    if op == "cvt":
        types = [m for m in mods if m in BITS]
        if len(types) != 2:
            raise PtxTypeError(f"{opcode}: expected cvt.<dst type>.<src type>")
        return [_Slot("dst", types[0], widen=True), _Slot("src", types[1], widen=True)], None
    if op == "setp":
        t = _type_of(mods, opcode)
        if len(mods) != 2 or mods[0] not in (
            "eq",
            "ne",
            "lt",
            "le",
            "gt",
            "ge",
            "lo",
            "ls",
            "hi",
            "hs",
        ):
            raise PtxTypeError(f"{opcode}: expected setp.<comparison>.<type>")
        return [_Slot("dst", "pred"), _Slot("src", t), _Slot("src", t)], None
    if op in ("ld", "st"):
        t = _type_of(mods, opcode)
        space = mods[0] if mods and mods[0] in _SPACES else ""
        if not space:
            raise PtxTypeError(f"{opcode}: name the state space ({', '.join(_SPACES)})")
        qualifiers = set(mods[1:-1])
        feature = None
        if "nc" in qualifiers:
            if op != "ld" or space != "global":
                raise PtxTypeError(f"{opcode}: .nc is only for ld.global")
            feature = "ld.global.nc"
        unknown = qualifiers - {"nc", "v2", "v4"}
        if unknown:
            raise PtxTypeError(f"{opcode}: the builder does not know .{', .'.join(sorted(unknown))}")
        value = _Slot("dst" if op == "ld" else "src", t, widen=BITS[t] == 8)
        address = _Slot("addr", space=space)
        return ([value, address] if op == "ld" else [address, value]), feature
    if op == "bra":
        if mods not in ([], ["uni"]):
            raise PtxTypeError(f"{opcode}: expected bra or bra.uni")
        return [_Slot("label")], None
    if op == "ret":
        return [], None
    raise PtxTypeError(f"the builder does not know the opcode {opcode!r}")


def _fits(inst_type: str, reg_type: str, widen: bool) -> bool:
    """PTX's operand type rules: same size, and a kind the instruction type admits."""
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
    return reg_type[0] == "b" or reg_type == inst_type  # floats: same float or bits


def _imm_fits(value: int, t: str) -> bool:
    bits = BITS[t]
    if t[0] == "s":
        return -(1 << (bits - 1)) <= value < (1 << (bits - 1))
    if t[0] == "u":
        return 0 <= value < (1 << bits)
    if t[0] == "b":
        return -(1 << (bits - 1)) <= value < (1 << bits)
    return False  # no float immediates from this builder


# --- functions and modules ---------------------------------------------------------


@dataclass
class _Line:
    kind: str  # "inst", "banner", "label", "blank"
    text: str = ""
    operands: str = ""
    comment: str = ""
    guard: str = ""


@dataclass
class Function:
    """One ``.entry`` or ``.func``: its parameters, registers and instructions.

    ``kind="entry"`` takes ``.param`` parameters (what the launcher fills);
    ``kind="func"`` takes register parameters (what a ``call`` passes).
    """

    name: str
    kind: str = "entry"
    visible: bool = True
    params: list[Param] = field(default_factory=list)
    reg_params: list[Reg] = field(default_factory=list)
    directives: list[str] = field(default_factory=list)
    features: set[str] = field(default_factory=set)
    _regs: dict[str, Reg] = field(default_factory=dict)
    _lines: list[_Line] = field(default_factory=list)
    _labels_used: set[str] = field(default_factory=set)
    _labels_placed: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        _check_name(self.name, "function")
        if self.kind not in ("entry", "func"):
            raise ValueError(f"kind must be 'entry' or 'func', not {self.kind!r}")

    # declarations

    def param(self, name: str, ptx_type: str, comment: str = "") -> Param:
        """Declare an ``.entry`` parameter."""
        if self.kind != "entry":
            raise ValueError(".param parameters belong to an .entry; a .func takes reg_param()")
        if ptx_type not in BITS or ptx_type == "pred":
            raise PtxTypeError(f"parameter {name!r}: unknown type .{ptx_type}")
        p = Param(_check_name(name, "parameter"), ptx_type, comment)
        if any(q.name == name for q in self.params):
            raise ValueError(f"parameter {name!r} is declared twice")
        self.params.append(p)
        return p

    def reg_param(self, name: str, ptx_type: str) -> Reg:
        """Declare a register parameter of a ``.func``."""
        if self.kind != "func":
            raise ValueError("register parameters belong to a .func")
        r = self._new_reg(name, ptx_type)
        self.reg_params.append(r)
        return r

    def reg(self, name: str, ptx_type: str) -> Reg:
        """Declare a register named for what it holds."""
        return self._new_reg(name, ptx_type)

    def _new_reg(self, name: str, ptx_type: str) -> Reg:
        _check_name(name, "register")
        if name in RESERVED_REG_NAMES:
            raise ValueError(f"register %{name} would shadow the special register of that name")
        if ptx_type not in REG_TYPES:
            raise PtxTypeError(
                f"register %{name}: .{ptx_type} is no register type (PTX has no 8-bit registers; use .b16)"
                if BITS.get(ptx_type) == 8
                else f"register %{name}: unknown type .{ptx_type}"
            )
        if name in self._regs:
            raise ValueError(f"register %{name} is declared twice in {self.name}")
        r = Reg(name, ptx_type)
        self._regs[name] = r
        return r

    def directive(self, text: str, feature: str | None = None) -> None:
        """A performance directive such as ``.reqntid 128, 1, 1``."""
        self.directives.append(text)
        if feature:
            self.features.add(feature)

    # body

    def banner(self, text: str) -> None:
        """A section banner that says what the next instructions are for."""
        if self._lines:
            self._lines.append(_Line("blank"))
        self._lines.append(_Line("banner", text=f"// --- {text} ---"))

    def label(self, name: str) -> Label:
        return Label(_check_name(name, "label"))

    def place(self, label: Label) -> None:
        if label.name in self._labels_placed:
            raise ValueError(f"label {label} is placed twice in {self.name}")
        self._labels_placed.add(label.name)
        self._lines.append(_Line("label", text=f"{label}:"))

    def inst(
        self,
        opcode: str,
        *operands: Operand,
        comment: str = "",
        guard: Reg | None = None,
        negate: bool = False,
    ) -> None:
        """Append one instruction after checking every operand against ``opcode``."""
        slots, feature = _signature(opcode)
        if len(operands) != len(slots):
            raise PtxTypeError(f"{opcode} takes {len(slots)} operands, got {len(operands)}")
        for i, (slot, operand) in enumerate(zip(slots, operands)):
            self._check_operand(opcode, i, slot, operand)
        if guard is not None:
            self._check_owned(guard, opcode)
            if guard.type != "pred":
                raise PtxTypeError(f"{opcode}: guard {guard} is .{guard.type}, not .pred")
        if feature:
            self.features.add(feature)
        for operand in operands:
            if isinstance(operand, Label):
                self._labels_used.add(operand.name)
        self._lines.append(
            _Line(
                "inst",
                text=opcode,
                operands=", ".join(str(o) for o in operands),
                comment=comment,
                guard=f"@{'!' if negate else ''}{guard} " if guard is not None else "",
            )
        )

    def call(self, callee: Function, args: list[Reg], comment: str = "") -> None:
        """``call.uni callee, (args)``: every thread of the CTA makes the call."""
        if callee.kind != "func":
            raise PtxTypeError(f"call: {callee.name} is an .entry; only a .func can be called")
        if len(args) != len(callee.reg_params):
            raise PtxTypeError(
                f"call {callee.name}: takes {len(callee.reg_params)} arguments, got {len(args)}"
            )
        for arg, want in zip(args, callee.reg_params):
            self._check_owned(arg, "call")
            if not _fits(want.type, arg.type, widen=False):
                raise PtxTypeError(f"call {callee.name}: {arg} is .{arg.type}, {want} wants .{want.type}")
        self._lines.append(
            _Line(
                "inst",
                text="call.uni",
                operands=f"{callee.name}, ({', '.join(str(a) for a in args)})",
                comment=comment,
            )
        )

    def _check_owned(self, reg: Reg, opcode: str) -> None:
        if self._regs.get(reg.name) != reg:
            raise PtxTypeError(f"{opcode}: register {reg} is not declared in {self.name}")

    def _check_operand(self, opcode: str, i: int, slot: _Slot, operand: Operand) -> None:
        where = f"{opcode} operand {i + 1}"
        if slot.kind == "label":
            if not isinstance(operand, Label):
                raise PtxTypeError(f"{where}: expected a label, got {operand!r}")
            return
        if slot.kind == "addr":
            if not isinstance(operand, Addr):
                raise PtxTypeError(f"{where}: expected an address [..], got {operand!r}")
            base = operand.base
            if slot.space == "param":
                if not isinstance(base, Param) or base not in self.params:
                    raise PtxTypeError(f"{where}: ld.param reads a parameter of {self.name}")
                want = opcode.rsplit(".", 1)[1]
                if BITS[base.type] != BITS[want]:
                    raise PtxTypeError(f"{where}: parameter {base} is .{base.type}, not .{want}")
            else:
                if not isinstance(base, Reg):
                    raise PtxTypeError(f"{where}: a {slot.space} address is a 64-bit register")
                self._check_owned(base, opcode)
                if BITS[base.type] != 64:
                    raise PtxTypeError(f"{where}: address {base} is .{base.type}, not 64-bit")
            return
        if isinstance(operand, (bool, float)):
            raise PtxTypeError(f"{where}: {operand!r} is no PTX operand")
        if isinstance(operand, int):
            if slot.kind == "dst":
                raise PtxTypeError(f"{where}: cannot write to the immediate {operand}")
            if not _imm_fits(operand, slot.type):
                raise PtxTypeError(f"{where}: immediate {operand} does not fit .{slot.type}")
            return
        if isinstance(operand, Special):
            if not slot.special:
                raise PtxTypeError(f"{where}: read {operand} with mov first")
            if not _fits(slot.type, operand.type, widen=False):
                raise PtxTypeError(f"{where}: {operand} is .{operand.type}, not .{slot.type}")
            return
        if not isinstance(operand, Reg):
            raise PtxTypeError(f"{where}: expected a register, got {operand!r}")
        self._check_owned(operand, opcode)
        if not _fits(slot.type, operand.type, slot.widen):
            raise PtxTypeError(f"{where}: {operand} is .{operand.type}, {opcode} needs .{slot.type}")

    # rendering

    def render(self) -> str:
        unplaced = self._labels_used - self._labels_placed
        if unplaced:
            raise ValueError(f"{self.name}: labels used but never placed: {sorted(unplaced)}")
        out: list[str] = []
        linkage = ".visible " if self.visible else ""
        if self.kind == "entry":
            out.append(f"{linkage}.entry {self.name}(")
            width = max((len(f".param .{p.type} {p.name}") for p in self.params), default=0)
            for n, p in enumerate(self.params):
                sep = "," if n < len(self.params) - 1 else ""
                text = f"    .param .{p.type} {p.name}{sep}"
                out.append(f"{text:<{width + 6}}// {p.comment}".rstrip() if p.comment else text)
            out.append(")")
        else:
            args = ", ".join(f".reg .{r.type} {r}" for r in self.reg_params)
            out.append(f"{linkage}.func {self.name}({args})")
        out.extend(self.directives)
        out.append("{")
        out.extend(self._render_declarations())
        if self._lines:
            out.append("")
        out.extend(self._render_body())
        out.append("}")
        return "\n".join(out) + "\n"

    def _render_declarations(self) -> list[str]:
        params = {r.name for r in self.reg_params}
        groups: dict[str, list[Reg]] = {}
        for r in self._regs.values():
            if r.name not in params:
                groups.setdefault(r.type, []).append(r)
        width = max((len(t) for t in groups), default=0) + 1
        out = []
        for t, regs in groups.items():
            names = [str(r) for r in regs]
            while names:  # at most 8 registers a line keeps declarations readable
                chunk, names = names[:8], names[8:]
                out.append(f"    .reg {'.' + t:<{width}} {', '.join(chunk)};")
        return out

    def _render_body(self) -> list[str]:
        insts = [line for line in self._lines if line.kind == "inst"]
        # A guard sits in front of its opcode; the operand column starts after the widest.
        ow = max((len(line.guard + line.text) for line in insts), default=0)
        # Operand columns are capped so one long call does not push every comment right.
        aw = min(max((len(line.operands) + 1 for line in insts), default=0), 36)
        out = []
        for line in self._lines:
            if line.kind == "blank":
                out.append("")
            elif line.kind == "banner":
                out.append(f"    {line.text}")
            elif line.kind == "label":
                out.append(line.text)
            elif not line.operands:
                head = f"    {line.guard}{line.text};"
                out.append(f"{head:<{ow + aw + 6}}  // {line.comment}" if line.comment else head)
            else:
                head = f"    {line.guard + line.text:<{ow}}  {line.operands + ';':<{aw}}"
                out.append(f"{head}  // {line.comment}" if line.comment else head.rstrip())
        return out


@dataclass
class Module:
    """A PTX module header: the ``.version``, ``.target`` and a comment block."""

    target: str
    version: str
    comment: list[str] = field(default_factory=list)
    address_size: int = 64

    def header(self) -> str:
        lines = ["//"] + [f"// {c}".rstrip() for c in self.comment] + ["//"]
        lines += [
            f".version {self.version}",
            f".target {self.target}",
            f".address_size {self.address_size}",
        ]
        return "\n".join(lines) + "\n"
