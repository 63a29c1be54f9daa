"""Probe kernels for the instruction table: one small ``.entry`` per qualifier choice.

For every family of :data:`ptxgen.isa.FAMILIES` and every qualifier choice in it,
:func:`probes` builds an opcode that uses that choice (with the first acceptable
choice of each other required group), works out the lowest target and PTX ISA the
table says it needs, and :func:`probe_source` emits a kernel that uses it once,
through the builder, with operands made from the operand slots.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ptxgen import isa
from ptxgen.function import PtxModule
from ptxgen.ptxtypes import Addr, Pair, PtxTypeError
from ptxgen.targets import PTX_ISA_CUDA, TARGETS, isa_key, target_sm

# Operands that must be immediates with particular values: (family, operand index) -> value.
IMMEDIATES = {
    ("cp.async", 2): 16,
    ("cp.async.wait_group", 0): 0,
    ("cp.async.bulk.wait_group", 0): 0,
    ("bar", 0): 0,
    ("elect.sync", 1): 0xFFFFFFFF,
    ("vote.sync", 2): 0xFFFFFFFF,
}
ISA_ORDER = sorted(PTX_ISA_CUDA, key=isa_key)
TARGET_ORDER = sorted(TARGETS, key=target_sm)


@dataclass(frozen=True)
class Probe:
    opcode: str
    target: str  # the lowest target of the table with the SM the opcode needs
    version: str  # the PTX ISA it needs on that target
    isa_below: str | None  # one ISA step below its need, where that is above the target's floor
    target_below: str | None  # the next lower target, where the SM need is above the table's lowest

    @property
    def id(self) -> str:
        return self.opcode


def _candidates(family: isa.Family, group_index: int, choice: isa.Q, optional: bool = False) -> list[str]:
    """Opcodes using ``choice`` in its group and one choice of each other required group
    (``optional``: and of each optional group too, or none, for choices that need one)."""
    pools: list[list[str | None]] = []
    for i, g in enumerate(family.groups):
        if i == group_index:
            pools.append([choice.name])
        elif g.required:
            pools.append([q.name for q in g.choices])
        else:
            pools.append([None, *(q.name for q in g.choices)] if optional else [None])
    out = []
    for combo in itertools.product(*pools):
        out.append(".".join([family.opcode, *(c for c in combo if c is not None)]))
    return out


def _needs(parsed: isa.Parsed) -> tuple[str, int]:
    reqs = parsed.requirements()
    return max((r[0] for r in reqs), key=isa_key), max(r[1] for r in reqs)


def _probe_for(opcode: str) -> Probe:
    parsed = isa.parse(opcode)
    need_isa, need_sm = _needs(parsed)
    target = next(t for t in TARGET_ORDER if target_sm(t) >= need_sm)
    version = max(TARGETS[target], need_isa, key=isa_key)
    below = ISA_ORDER[ISA_ORDER.index(version) - 1] if version != TARGETS[target] else None
    lower = TARGET_ORDER.index(target)
    target_below = TARGET_ORDER[lower - 1] if lower > 0 and need_sm > target_sm(TARGET_ORDER[0]) else None
    return Probe(opcode, target, version, below, target_below)


def probes() -> list[Probe]:
    """One probe per (family, qualifier choice), plus one per family without qualifiers."""
    found: dict[str, Probe] = {}
    for family in isa.FAMILIES.values():
        wanted = [(i, q) for i, g in enumerate(family.groups) for q in g.choices] or [(-1, None)]
        for index, choice in wanted:
            best = None
            # Optional groups stay empty where they can; a choice that needs one of them
            # (an integer mul needs .lo/.hi/.wide, a float cvt a rounding) gets it.
            for optional in (False, True):
                options = [family.opcode] if choice is None else _candidates(family, index, choice, optional)
                for opcode in options:
                    try:
                        probe = _probe_for(opcode)
                    except PtxTypeError:
                        continue  # a combination the family's rules refuse
                    key = (target_sm(probe.target), isa_key(probe.version))
                    if best is None or key < (target_sm(best.target), isa_key(best.version)):
                        best = probe
                if best is not None:
                    break
            assert best is not None, f"no valid opcode uses {family.opcode} .{choice.name if choice else ''}"
            found.setdefault(best.opcode, best)
    return list(found.values())


def probe_source(opcode: str, target: str, version: str | None = None) -> str:
    """A kernel that executes ``opcode`` once, built (and so checked) by the builder."""
    parsed = isa.parse(opcode)
    module = PtxModule(target, ptx_version=version)
    fn = module.entry("probe_entry_point")
    out = fn.param("out", "u64")
    word = fn.param("word", "u64")
    tile = fn.shared("tile", 256, align=16)
    end = fn.label("end")
    ops = []
    for i, slot in enumerate(parsed.slots()):
        if slot.optional:
            break
        imm = IMMEDIATES.get((parsed.family.opcode, i))
        if imm is not None:
            ops.append(imm)
            continue
        kind = slot.kind
        if kind == "l":
            ops.append(end)
        elif kind == "pair":
            ops.append(Pair(fn.reg("elected", "b32"), fn.reg("is_leader", "pred")))
        elif kind == "a":
            space = parsed.get("space") if slot.space == "@space" else slot.space
            if space == "param":
                t = parsed.resolve_type("T")
                bits = {8: "u8", 16: "u16", 32: "u32", 64: "u64"}.get(int(t[1:]) if t[1:].isdigit() else 0)
                p = fn.param(f"value_{t}", bits or "u64")
                ops.append(Addr(p))
            elif space and space.startswith("shared"):
                ops.append(Addr(tile))
            else:
                ops.append(Addr(fn.reg("address", "u64")))
        else:
            t = parsed.resolve_type(slot.type)
            if kind == "v" and parsed.vector > 1:
                ops.append(fn.vec("lane", t if int(t[1:] or 0) > 8 else "b16", parsed.vector))
            elif kind == "v" and t[1:] == "8":
                ops.append(fn.reg("byte", "b16"))
            else:
                ops.append(fn.reg("operand", t))
    fn.inst(opcode, *ops)
    fn.place(end)
    # Keep the probe's effect observable so ptxas cannot drop the whole body.
    out_addr, value = fn.reg("out_addr", "u64"), fn.reg("word", "u64")
    fn.inst("ld.param.u64", out_addr, Addr(out))
    fn.inst("ld.param.u64", value, Addr(word))
    fn.inst("st.global.u64", Addr(out_addr), value)
    fn.inst("ret")
    return module.render()
