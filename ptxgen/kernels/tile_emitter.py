"""The emitter the tile kernel (:class:`~ptxgen.kernels.fastcat_tile.FastcatTile`) writes
through: registers by name, instructions through the typed builder, and its arithmetic
helpers (two divisions by a float estimate, byte packing); and ``_ACCESS``, the ld/st
type and registers of one access of 1 to 16 bytes.
"""

from __future__ import annotations

from typing import Any

from ..function import PtxFunction
from ..ptxtypes import Addr, Label, Reg, Vec

__all__ = ["_ACCESS", "_Emitter"]

# One access of `width` bytes: (ld/st type, registers, register type).
_ACCESS = {16: ("v4.u32", 4, "b32"), 8: ("v2.u32", 2, "b32"), 4: ("u32", 1, "b32"),
           2: ("b16", 1, "b16"), 1: ("b8", 1, "b16")}  # fmt: skip


class _Emitter:
    """Registers by name (declared once, on first use, with their type) and instructions
    through the typed builder. Operands are register names, ints, or builder objects."""

    def __init__(self, fn: PtxFunction) -> None:
        self.fn = fn
        self.regs: dict[str, Reg] = {}

    def reg(self, ptx_type: str, *names: str) -> list[Reg]:
        out = []
        for name in names:
            known = self.regs.get(name)
            if known is None:
                known = self.regs[name] = self.fn.reg(name, ptx_type)
            elif known.type != ptx_type:
                raise ValueError(f"register %{name} is .{known.type}, asked for .{ptx_type}")
            out.append(known)
        return out

    def _operand(self, x: Any) -> Any:
        if isinstance(x, str):
            return self.regs[x]
        if isinstance(x, list):
            regs = [self.regs[n] for n in x]
            return regs[0] if len(regs) == 1 else Vec(tuple(regs))
        return x

    def at(self, name: str, offset: int = 0) -> Addr:
        return Addr(self.regs[name], offset)

    def __call__(
        self, opcode: str, *ops: Any, why: str = "", guard: str | None = None, neg: bool = False
    ) -> None:
        self.fn.inst(
            opcode,
            *(self._operand(x) for x in ops),
            comment=why,
            guard=self.regs[guard] if guard else None,
            negate=neg,
        )

    def bra(
        self, label: Label, guard: str | None = None, neg: bool = False, why: str = "", uniform: bool = False
    ) -> None:
        """Branch to ``label`` (if ``guard``). ``.uni`` promises that every active thread of
        the warp branches alike: true of an unconditional branch, and of a guard the caller
        marks ``uniform`` (the same in every thread of the warp: a CTA-wide value, a loop
        count every thread shares, or a vote's answer); any other guard may diverge."""
        self("bra.uni" if guard is None or uniform else "bra", label, guard=guard, neg=neg, why=why)

    def label(self, stem: str) -> Label:
        return self.fn.label(stem)

    def place(self, label: Label) -> None:
        self.fn.place(label)

    def note(self, text: str) -> None:
        self.fn.banner(text)

    def data(self, stem: str, width: int) -> list[str]:
        """Registers for one access of ``width`` bytes, named ``stem_0 ..``."""
        _, count, rtype = _ACCESS[width]
        names = [f"{stem}_{i}" for i in range(count)]
        self.reg(rtype, *names)
        return names

    # --- arithmetic helpers ------------------------------------------------------------
    def divmod_u32(self, quot: str, rem: str, num: str, den: str, den_rcp: str) -> None:
        """quot, rem = divmod(num, den) for num < 2**31: a float estimate, then one
        correction each way. The estimate is within 1: quotients here are at most ~T/den + 2."""
        self.reg("f32", "div_f")
        self.reg("pred", "div_fix")
        self("cvt.rn.f32.u32", "div_f", num)
        self("mul.f32", "div_f", "div_f", den_rcp)
        self("cvt.rzi.u32.f32", quot, "div_f")
        self("mul.lo.u32", rem, quot, den)
        self("sub.u32", rem, num, rem)
        self("setp.lt.s32", "div_fix", rem, 0, why="estimate one too high")
        self("sub.u32", quot, quot, 1, guard="div_fix")
        self("add.u32", rem, rem, den, guard="div_fix")
        self("setp.ge.u32", "div_fix", rem, den, why="estimate one too low")
        self("add.u32", quot, quot, 1, guard="div_fix")
        self("sub.u32", rem, rem, den, guard="div_fix")

    def divmod_u64(self, quot: str, rem: str, num: str, den64: str, den_rcp: str) -> None:
        """quot, rem = divmod(num, den) for a u64 num (s64 results): a float estimate, then
        exact correction loops. div.u64 would become a CALL whose ABI spills live
        registers; this stays inline. The loops run a few times while the quotient is < 2**24.
        Both callers divide CTA-wide values (where the CTA's tile starts), so every thread
        loops alike and the branches are ``.uni``; a per-thread ``num`` would need plain ones."""
        self.reg("f32", "div_f")
        self.reg("pred", "div_fix")
        down, up, done = self.label("DIV_DOWN"), self.label("DIV_UP"), self.label("DIV_DONE")
        self("cvt.rn.f32.u64", "div_f", num)
        self("mul.f32", "div_f", "div_f", den_rcp)
        self("cvt.rzi.u64.f32", quot, "div_f")
        self("mul.lo.u64", rem, quot, den64)
        self("sub.s64", rem, num, rem)
        self.place(down)
        self("setp.ge.s64", "div_fix", rem, 0)
        self.bra(up, guard="div_fix", uniform=True)
        self("sub.s64", quot, quot, 1)
        self("add.s64", rem, rem, den64)
        self.bra(down)
        self.place(up)
        self("setp.lt.s64", "div_fix", rem, den64)
        self.bra(done, guard="div_fix", uniform=True)
        self("add.s64", quot, quot, 1)
        self("sub.s64", rem, rem, den64)
        self.bra(up)
        self.place(done)

    def pack_bytes(self, word: str, parts: list[str]) -> None:
        """word = parts[0] | parts[1] << 8 | parts[2] << 16 | parts[3] << 24 (one byte each)."""
        self.reg("b32", "pk_lo", "pk_hi")
        self("prmt.b32", "pk_lo", parts[0], parts[1], 0x0040, why="bytes 0,1")
        self("prmt.b32", "pk_hi", parts[2], parts[3], 0x0040, why="bytes 2,3")
        self("prmt.b32", word, "pk_lo", "pk_hi", 0x5410)
