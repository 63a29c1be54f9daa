"""PTX modules and the functions in them: the typed builder.

A :class:`PtxModule` knows its target; each :class:`PtxFunction` is built inside
one, so every instruction is checked as it is added: its opcode against the
instruction table (:mod:`ptxgen.isa`), its operands against the opcode, and its
qualifiers against what the target and PTX ISA can have. A mistake raises before
any text exists, naming the instruction and what it needs. Instructions stay
objects until :meth:`PtxFunction.render`.

Structure helpers keep kernels readable: registers named for what they hold (a
second ``reg("value")`` is ``%value_1``), vectors, ``.shared`` arrays, ``.param``
byte arrays, predicated blocks (``with fn.unless(p):``) and counted loops, all
rendered as the labelled branches a person would write.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from . import isa
from .ptxtypes import (
    BITS,
    REG_TYPES,
    RESERVED_REG_NAMES,
    TYPE_MINIMUM,
    Addr,
    Label,
    Operand,
    Pair,
    Param,
    ParamArray,
    PtxTargetError,
    PtxTypeError,
    Reg,
    SharedArray,
    Sink,
    Special,
    Vec,
    check_name,
    fits,
    imm_fits,
)
from .render import Banner, Blank, Instruction, Item, LabelMark, render_body, render_declarations
from .targets import TARGETS, isa_key, resolve_target, target_sm

__all__ = ["PtxFunction", "PtxModule"]

# Performance directives: (minimum PTX ISA, minimum SM).
DIRECTIVES: dict[str, tuple[str, int]] = {
    ".reqntid": ("2.1", 20),
    ".maxntid": ("1.3", 20),
    ".minnctapersm": ("2.0", 20),
    ".maxnreg": ("1.3", 20),
}

_parse = functools.lru_cache(maxsize=4096)(isa.parse)


class PtxModule:
    """A PTX module: its target, the PTX ISA it needs, a header comment and functions.

    ``ptx_version=None`` (the default) writes the lowest ISA that has everything the
    functions use; a given version is a ceiling, and using anything newer raises.
    """

    def __init__(self, target: str | None = None, *, ptx_version: str | None = None,
                 comment: Sequence[str] = ()) -> None:  # fmt: skip
        self.target = resolve_target(target)
        self.sm = target_sm(self.target)
        self._floor = TARGETS[self.target]
        if ptx_version is not None and isa_key(ptx_version) < isa_key(self._floor):
            raise PtxTargetError(
                f"PTX ISA {ptx_version} cannot name .target {self.target} (needs {self._floor})"
            )
        self.fixed_version = ptx_version
        self.comment = list(comment)
        self.functions: list[PtxFunction] = []
        self._needs: dict[str, str] = {}  # what -> isa

    # --- what the module needs ---------------------------------------------------------

    def require(self, isa_version: str, sm: int, what: str, where: str) -> None:
        """Record that ``what`` (used by ``where``) needs ``isa_version`` and ``sm``; raise if
        the target or a fixed PTX version cannot have it."""
        if sm > self.sm:
            raise PtxTargetError(
                f"{where}: {what} needs sm_{sm} or newer (PTX ISA {isa_version}); "
                f"this module targets {self.target}"
            )
        if isa_key(isa_version) > isa_key(self._floor):
            if self.fixed_version is not None and isa_key(isa_version) > isa_key(self.fixed_version):
                raise PtxTargetError(
                    f"{where}: {what} needs PTX ISA {isa_version}; "
                    f"this module is fixed at {self.fixed_version}"
                )
            self._needs.setdefault(what, isa_version)

    @property
    def version(self) -> str:
        """The ``.version`` to write: the fixed one, or the lowest that has everything used."""
        if self.fixed_version is not None:
            return self.fixed_version
        return max([self._floor, *self._needs.values()], key=isa_key)

    # --- functions ---------------------------------------------------------------------

    def entry(self, name: str, *, visible: bool = True) -> PtxFunction:
        """A new ``.entry`` (a kernel the launcher can call) in this module."""
        return self._add(PtxFunction(self, name, "entry", visible))

    def func(self, name: str, *, visible: bool = False) -> PtxFunction:
        """A new ``.func`` (a device function ``call`` can reach) in this module."""
        return self._add(PtxFunction(self, name, "func", visible))

    def _add(self, fn: PtxFunction) -> PtxFunction:
        if any(f.name == fn.name for f in self.functions):
            raise ValueError(f"a function named {fn.name!r} is already in this module")
        self.functions.append(fn)
        return fn

    def header(self) -> str:
        lines = ["//"] + [f"// {c}".rstrip() for c in self.comment] + ["//"] if self.comment else []
        lines += [f".version {self.version}", f".target {self.target}", ".address_size 64"]
        return "\n".join(lines) + "\n"

    def render(self) -> str:
        """The whole module: header, then every function, in the order they were made."""
        return "\n".join([self.header(), *(fn.render() for fn in self.functions)])


@dataclass(frozen=True)
class _CallTarget:
    callee: str
    args: tuple[Reg, ...]

    def __str__(self) -> str:
        return f"{self.callee}, ({', '.join(str(a) for a in self.args)})"


class PtxFunction:
    """One ``.entry`` or ``.func``: its parameters, registers, shared arrays and body.

    Made by :meth:`PtxModule.entry` / :meth:`PtxModule.func`. ``.entry`` parameters are
    ``.param`` (what the launcher fills); ``.func`` parameters are registers (what a
    ``call`` passes).
    """

    def __init__(self, module: PtxModule, name: str, kind: str, visible: bool) -> None:
        self.module = module
        self.name = check_name(name, "function")
        self.kind = kind
        self.visible = visible
        self.params: list[Param | ParamArray] = []
        self.reg_params: list[Reg] = []
        self.directives: list[str] = []
        self.shared_arrays: list[SharedArray] = []
        self._regs: dict[str, Reg] = {}
        self._items: list[Item] = []
        self._labels: set[str] = set()
        self._labels_used: set[str] = set()
        self._labels_placed: set[str] = set()

    @property
    def target(self) -> str:
        return self.module.target

    # --- declarations ------------------------------------------------------------------

    def param(self, name: str, ptx_type: str, comment: str = "") -> Param:
        """Declare an ``.entry`` parameter of a fundamental type."""
        self._entry_only("param")
        if ptx_type not in BITS or ptx_type in ("pred", "b128"):
            raise PtxTypeError(f"parameter {name!r}: .{ptx_type} is no parameter type")
        return self._add_param(Param(check_name(name, "parameter"), ptx_type, comment))

    def param_array(self, name: str, size: int, align: int = 8, comment: str = "") -> ParamArray:
        """Declare ``.param .align A .b8 name[size]``: a struct passed by value."""
        self._entry_only("param_array")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"parameter array {name!r}: size must be an int >= 1, not {size!r}")
        if align not in (1, 2, 4, 8, 16):
            raise ValueError(f"parameter array {name!r}: align must be 1, 2, 4, 8 or 16, not {align!r}")
        return self._add_param(ParamArray(check_name(name, "parameter"), size, align, comment))

    def _entry_only(self, what: str) -> None:
        if self.kind != "entry":
            raise ValueError(f"{what}(): .param parameters belong to an .entry; a .func takes reg_param()")

    def _add_param(self, p: Param | ParamArray) -> Param | ParamArray:
        if any(q.name == p.name for q in self.params):
            raise ValueError(f"parameter {p.name!r} is declared twice")
        self.params.append(p)
        return p

    def reg_param(self, name: str, ptx_type: str) -> Reg:
        """Declare a register parameter of a ``.func``."""
        if self.kind != "func":
            raise ValueError("register parameters belong to a .func")
        if name in self._regs:
            raise ValueError(f"parameter %{name} is declared twice")
        r = self.reg(name, ptx_type)
        self.reg_params.append(r)
        return r

    def reg(self, name: str, ptx_type: str) -> Reg:
        """A register named for what it holds. A name already taken gets a suffix:
        the second ``reg("value", ...)`` is ``%value_1``."""
        check_name(name, "register")
        if name in RESERVED_REG_NAMES:
            raise ValueError(f"register %{name} would shadow the special register of that name")
        if ptx_type not in REG_TYPES:
            raise PtxTypeError(f"register %{name}: unknown type .{ptx_type}")
        if ptx_type in TYPE_MINIMUM:
            version, sm = TYPE_MINIMUM[ptx_type]
            self.module.require(version, sm, f".reg .{ptx_type}", f"register %{name}")
        unique, n = name, 0
        while unique in self._regs:
            n += 1
            unique = f"{name}_{n}"
        r = Reg(unique, ptx_type)
        self._regs[unique] = r
        return r

    def vec(self, name: str, ptx_type: str, lanes: int) -> Vec:
        """``lanes`` registers ``%name0 .. %nameN`` as one vector operand."""
        if lanes not in (2, 4, 8):
            raise ValueError(f"vector {name!r}: lanes must be 2, 4 or 8, not {lanes!r}")
        return Vec(tuple(self.reg(f"{name}{i}", ptx_type) for i in range(lanes)))

    def shared(self, name: str, size: int, align: int = 16) -> SharedArray:
        """``.shared .align A .b8 name[size]``: memory every thread of the CTA sees."""
        check_name(name, "shared array")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"shared array {name!r}: size must be an int >= 1, not {size!r}")
        if align < 1 or align & (align - 1) or align > 128:
            raise ValueError(f"shared array {name!r}: align must be a power of two up to 128, not {align!r}")
        if any(a.name == name for a in self.shared_arrays):
            raise ValueError(f"shared array {name!r} is declared twice")
        array = SharedArray(name, size, align)
        self.shared_arrays.append(array)
        return array

    def directive(self, name: str, *values: int) -> None:
        """A performance directive: ``directive(".reqntid", 128, 1, 1)``."""
        if name not in DIRECTIVES:
            raise ValueError(f"unknown directive {name!r}; known: {', '.join(DIRECTIVES)}")
        if self.kind != "entry":
            raise ValueError(f"{name} belongs to an .entry")
        version, sm = DIRECTIVES[name]
        self.module.require(version, sm, name, self.name)
        self.directives.append(f"{name} {', '.join(str(v) for v in values)}".rstrip())

    # --- labels and structure ----------------------------------------------------------

    def label(self, name: str) -> Label:
        """A new label; a name already taken gets a suffix (``done_1``)."""
        check_name(name, "label")
        unique, n = name, 0
        while unique in self._labels:
            n += 1
            unique = f"{name}_{n}"
        self._labels.add(unique)
        return Label(unique)

    def place(self, label: Label) -> None:
        if label.name not in self._labels:
            raise ValueError(f"label {label} was not made by {self.name}.label()")
        if label.name in self._labels_placed:
            raise ValueError(f"label {label} is placed twice in {self.name}")
        self._labels_placed.add(label.name)
        self._items.append(LabelMark(label.name))

    def banner(self, text: str) -> None:
        """A section banner that says what the next instructions are for."""
        if self._items:
            self._items.append(Blank())
        self._items.append(Banner(text))

    def load_params(self, banner: str = "read the launch arguments") -> dict[str, Reg]:
        """Each ``.param`` declared so far loaded into a register of its own name and type,
        under ``banner``: the registers by parameter name (an ``.entry``'s first lines)."""
        self._entry_only("load_params")
        regs = {p.name: self.reg(p.name, p.type) for p in self.params}  # type: ignore[union-attr]
        self.banner(banner)
        for p in self.params:
            self.inst(f"ld.param.{p.type}", regs[p.name], Addr(p))  # type: ignore[union-attr]
        return regs

    @contextmanager
    def unless(self, predicate: Reg, label: str = "skip") -> Iterator[Label]:
        """The block runs only in threads where ``predicate`` is false:
        ``@%p bra skip; <block> skip:``."""
        end = self.label(label)
        self.inst("bra", end, guard=predicate)
        yield end
        self.place(end)

    @contextmanager
    def when(self, predicate: Reg, label: str = "skip") -> Iterator[Label]:
        """The block runs only in threads where ``predicate`` is true."""
        end = self.label(label)
        self.inst("bra", end, guard=predicate, negate=True)
        yield end
        self.place(end)

    @contextmanager
    def loop(self, index: Reg, stop: Reg | int, step: Reg | int, name: str = "loop") -> Iterator[Label]:
        """``while index < stop: <block>; index += step``, rotated as compilers do: one test
        before the first pass, then one at the bottom of each."""
        t = index.type
        more, top, end = self.reg(f"{name}_more", "pred"), self.label(name), self.label(f"{name}_end")
        self.inst(f"setp.lt.{t}", more, index, stop)
        self.inst("bra", end, guard=more, negate=True, comment="nothing to do")
        self.place(top)
        yield end
        self.inst(f"add.{t}", index, index, step)
        self.inst(f"setp.lt.{t}", more, index, stop)
        self.inst("bra", top, guard=more)
        self.place(end)

    def unrolled_loop(
        self,
        index: Reg,
        stop: Reg | int,
        step: Reg | int,
        body: Callable[[Reg], None],
        unroll: int,
        name: str = "loop",
    ) -> None:
        """``body(i)`` for ``i = index, index + step, ... < stop``, ``unroll`` bodies per pass
        (their loads can all be in flight at once), then one at a time for the rest."""
        if isinstance(unroll, bool) or not isinstance(unroll, int) or unroll < 1:
            raise ValueError(f"unroll must be an int >= 1, not {unroll!r}")
        t = index.type
        if unroll > 1:
            span, stride = self.reg(f"{name}_span", t), self.reg(f"{name}_stride", t)
            last, more = self.reg(f"{name}_last", t), self.reg(f"{name}_more", "pred")
            top, end = self.label(f"{name}_x{unroll}"), self.label(f"{name}_x{unroll}_end")
            if isinstance(step, Reg):
                self.inst(f"mul.lo.{t}", span, step, unroll - 1)
            else:
                self.inst(f"mov.{t}", span, step * (unroll - 1))
            self.inst(f"add.{t}", stride, span, step, comment=f"{unroll} steps a pass")
            self.inst(f"add.{t}", last, index, span, comment="the last index of this pass")
            self.inst(f"setp.lt.{t}", more, last, stop)
            self.inst("bra", end, guard=more, negate=True, comment=f"fewer than {unroll} left")
            self.place(top)
            body(index)
            for u in range(1, unroll):
                at = self.reg(f"{name}_at", t)
                if isinstance(step, Reg):
                    self.inst(f"mad.lo.{t}", at, step, u, index)
                else:
                    self.inst(f"add.{t}", at, index, step * u)
                body(at)
            self.inst(f"add.{t}", index, index, stride)
            self.inst(f"add.{t}", last, last, stride)
            self.inst(f"setp.lt.{t}", more, last, stop)
            self.inst("bra", top, guard=more)
            self.place(end)
        with self.loop(index, stop, step, name=f"{name}_rest" if unroll > 1 else name):
            body(index)

    # --- instructions ------------------------------------------------------------------

    def inst(
        self,
        opcode: str,
        *operands: Operand,
        comment: str = "",
        guard: Reg | None = None,
        negate: bool = False,
    ) -> Instruction:
        """Append one instruction after checking it against the instruction table, the
        operands against the opcode, and its needs against the target."""
        parsed = _parse(opcode)
        for version, sm, what in parsed.requirements():
            self.module.require(version, sm, what, opcode)
        slots = parsed.slots()
        required = sum(1 for s in slots if not s.optional)
        if not required <= len(operands) <= len(slots):
            count = str(required) if required == len(slots) else f"{required} to {len(slots)}"
            raise PtxTypeError(f"{opcode} takes {count} operands, got {len(operands)}")
        for i, (slot, operand) in enumerate(zip(slots, operands)):
            self._check_operand(parsed, i, slot, operand)
        if guard is not None:
            self._check_owned(guard, opcode)
            if guard.type != "pred":
                raise PtxTypeError(f"{opcode}: guard {guard} is .{guard.type}, not .pred")
        for operand in operands:
            if isinstance(operand, Label):
                self._labels_used.add(operand.name)
        instruction = Instruction(opcode, tuple(operands), comment, guard, negate)
        self._items.append(instruction)
        return instruction

    def call(self, callee: PtxFunction, args: Sequence[Reg], comment: str = "") -> Instruction:
        """``call.uni callee, (args)``: every thread of the CTA makes the call."""
        if callee.kind != "func":
            raise PtxTypeError(f"call: {callee.name} is an .entry; only a .func can be called")
        if callee.module is not self.module:
            raise PtxTypeError(f"call: {callee.name} is in another module")
        if len(args) != len(callee.reg_params):
            raise PtxTypeError(
                f"call {callee.name}: takes {len(callee.reg_params)} arguments, got {len(args)}"
            )
        for arg, want in zip(args, callee.reg_params):
            self._check_owned(arg, "call")
            if not fits(want.type, arg.type):
                raise PtxTypeError(f"call {callee.name}: {arg} is .{arg.type}, {want} wants .{want.type}")
        instruction = Instruction("call.uni", (_CallTarget(callee.name, tuple(args)),), comment)
        self._items.append(instruction)
        return instruction

    def _check_owned(self, reg: Reg, opcode: str) -> None:
        if not isinstance(reg, Reg) or self._regs.get(reg.name) != reg:
            raise PtxTypeError(f"{opcode}: register {reg} is not declared in {self.name}")

    def _check_operand(self, p: isa.Parsed, i: int, slot: isa.Slot, operand: Operand) -> None:
        where = f"{p.opcode} operand {i + 1}"
        kind = slot.kind
        if kind == "l":
            if not isinstance(operand, Label):
                raise PtxTypeError(f"{where}: expected a label, got {operand!r}")
            return
        if kind == "a":
            self._check_address(p, where, slot, operand)
            return
        if kind == "pair":
            if not isinstance(operand, Pair):
                raise PtxTypeError(f"{where}: expected Pair(%r or _, %p or _), got {operand!r}")
            for part, t in ((operand.first, "b32"), (operand.second, "pred")):
                if not isinstance(part, Sink):
                    self._check_owned(part, p.opcode)
                    if part.type != t and not fits(t, part.type):
                        raise PtxTypeError(f"{where}: {part} is .{part.type}, not .{t}")
            return
        want = p.resolve_type(slot.type)
        if kind == "v":
            if p.vector > 1:
                if not isinstance(operand, Vec) or len(operand) != p.vector:
                    raise PtxTypeError(
                        f"{where}: .v{p.vector} needs a vector of {p.vector} registers, got {operand!r}"
                    )
                for reg in operand.regs:
                    self._check_reg(where, reg, want, slot.widen, p.opcode)
                return
            if isinstance(operand, Vec):
                raise PtxTypeError(f"{where}: a vector operand needs .v{len(operand)} in the opcode")
            self._check_reg(where, operand, want, slot.widen, p.opcode)
            return
        if isinstance(operand, Vec) and slot.pack:
            # mov.b32 {%lo, %hi}, %r and back: the parts fill the register exactly, low first.
            if want[0] != "b" or BITS[operand.type] * len(operand) != BITS[want]:
                raise PtxTypeError(
                    f"{where}: {operand} ({len(operand)} x .{operand.type}) does not pack into .{want}"
                )
            for reg in operand.regs:
                self._check_owned(reg, p.opcode)
            return
        if isinstance(operand, (bool, float)):
            raise PtxTypeError(f"{where}: {operand!r} is no PTX operand")
        if isinstance(operand, Sink):
            if not slot.sink:
                raise PtxTypeError(f"{where}: _ is not accepted here")
            return
        if isinstance(operand, int):
            if kind in ("d", "r"):
                raise PtxTypeError(f"{where}: expected a register, got the immediate {operand}")
            if not imm_fits(operand, want):
                raise PtxTypeError(f"{where}: immediate {operand} does not fit .{want}")
            return
        if isinstance(operand, Special):
            if not slot.special:
                raise PtxTypeError(f"{where}: read {operand} with mov first")
            if not fits(want, operand.type):
                raise PtxTypeError(f"{where}: {operand} is .{operand.type}, not .{want}")
            return
        if isinstance(operand, SharedArray):
            # mov / cvta take a variable's address: 32 bits in the shared window, or 64.
            if p.family.opcode not in ("mov", "cvta") or BITS[want] not in (32, 64) or want[0] not in "ub":
                raise PtxTypeError(f"{where}: the address of {operand} is read with mov.u32/u64 or cvta")
            self._check_shared(operand, p.opcode)
            return
        self._check_reg(where, operand, want, slot.widen, p.opcode)

    def _check_reg(self, where: str, operand: object, want: str, widen: bool, opcode: str) -> None:
        if not isinstance(operand, Reg):
            raise PtxTypeError(f"{where}: expected a register, got {operand!r}")
        self._check_owned(operand, opcode)
        if not fits(want, operand.type, widen):
            raise PtxTypeError(f"{where}: {operand} is .{operand.type}, {opcode} needs .{want}")

    def _check_shared(self, array: SharedArray, opcode: str) -> None:
        if array not in self.shared_arrays:
            raise PtxTypeError(f"{opcode}: shared array {array} is not declared in {self.name}")

    def _check_address(self, p: isa.Parsed, where: str, slot: isa.Slot, operand: Operand) -> None:
        if not isinstance(operand, Addr):
            raise PtxTypeError(f"{where}: expected an address [..], got {operand!r}")
        space = p.get("space") if slot.space == "@space" else slot.space
        base = operand.base
        if space == "param":
            if not isinstance(base, (Param, ParamArray)) or base not in self.params:
                raise PtxTypeError(f"{where}: ld.param reads a parameter of {self.name}")
            width = BITS[p.resolve_type("T")] * p.vector // 8
            if isinstance(base, Param):
                if operand.offset or BITS[base.type] // 8 != width:
                    raise PtxTypeError(f"{where}: parameter {base} is .{base.type}, not {width} bytes")
            elif not (
                operand.offset >= 0 and operand.offset + width <= base.size and operand.offset % width == 0
            ):
                raise PtxTypeError(
                    f"{where}: {width} bytes at offset {operand.offset} of {base}[{base.size}] "
                    "are out of range or not aligned to their size"
                )
            return
        if isinstance(base, SharedArray):
            if not space.startswith("shared"):
                raise PtxTypeError(f"{where}: {base} is a shared array, not in the {space} space")
            self._check_shared(base, p.opcode)
            if not 0 <= operand.offset < base.size:
                raise PtxTypeError(f"{where}: offset {operand.offset} is outside {base}[{base.size}]")
            return
        if not isinstance(base, Reg):
            raise PtxTypeError(f"{where}: a {space} address is a register, got {base!r}")
        self._check_owned(base, p.opcode)
        bits = BITS[base.type]
        if space.startswith("shared"):
            if bits not in (32, 64) or base.type[0] not in "ub":
                raise PtxTypeError(
                    f"{where}: shared address {base} is .{base.type}, not a 32- or 64-bit integer"
                )
        elif bits != 64 or base.type[0] not in "ubs":
            raise PtxTypeError(f"{where}: address {base} is .{base.type}, not 64-bit")

    # --- rendering ---------------------------------------------------------------------

    def render(self) -> str:
        unplaced = self._labels_used - self._labels_placed
        if unplaced:
            raise ValueError(f"{self.name}: labels used but never placed: {sorted(unplaced)}")
        out: list[str] = []
        linkage = ".visible " if self.visible else ""
        if self.kind == "entry":
            out.append(f"{linkage}.entry {self.name}(")
            decls = [_param_declaration(p) for p in self.params]
            width = max((len(d) for d in decls), default=0)
            for n, (p, decl) in enumerate(zip(self.params, decls)):
                text = f"    {decl}{',' if n < len(self.params) - 1 else ''}"
                out.append(f"{text:<{width + 6}}// {p.comment}".rstrip() if p.comment else text)
            out.append(")")
        else:
            args = ", ".join(f".reg .{r.type} {r}" for r in self.reg_params)
            out.append(f"{linkage}.func {self.name}({args})")
        out.extend(self.directives)
        out.append("{")
        params = set(self.reg_params)
        groups: dict[str, list[str]] = {}
        for r in self._regs.values():
            if r not in params:
                groups.setdefault(r.type, []).append(str(r))
        out.extend(render_declarations(groups))
        out.extend(f"    .shared .align {a.align} .b8 {a.name}[{a.size}];" for a in self.shared_arrays)
        if self._items:
            out.append("")
        out.extend(render_body(self._items))
        out.append("}")
        return "\n".join(out) + "\n"


def _param_declaration(p: Param | ParamArray) -> str:
    if isinstance(p, ParamArray):
        return f".param .align {p.align} .b8 {p.name}[{p.size}]"
    return f".param .{p.type} {p.name}"
