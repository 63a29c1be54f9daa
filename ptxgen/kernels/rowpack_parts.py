"""The parts of a ``rowpack`` kernel that are not its layout of groups: the words built
from picked bytes with constant ``prmt`` selectors, the registers every part uses, and
the tail that moves the rows left over after the whole groups a byte a thread."""

from __future__ import annotations

from ..function import PtxFunction
from ..ptxtypes import Addr, Label, Reg

__all__ = ["RowpackRegs", "WordBuilder", "emit_tail"]


class WordBuilder:
    """Emits ``dst = 4 picked bytes`` with constant ``prmt`` selectors; the two scratch
    words are declared the first time a word needs bytes of more than two registers."""

    def __init__(self, fn: PtxFunction) -> None:
        self.fn = fn
        self._scratch: tuple[Reg, Reg] | None = None

    def word(self, dst: Reg, picks: list[tuple[Reg, int]]) -> None:
        """dst byte i = byte picks[i][1] of register picks[i][0]."""
        fn = self.fn
        words = list(dict.fromkeys(w for w, _ in picks))
        if len(words) <= 2:
            a, b = words[0], words[-1]
            sel = sum(((0 if w == a else 4) + byte) << (4 * i) for i, (w, byte) in enumerate(picks))
            fn.inst("prmt.b32", dst, a, b, sel)
            return
        # three or four source words: two pairs, then one prmt merging them
        if self._scratch is None:
            self._scratch = (fn.reg("pk_lo", "b32"), fn.reg("pk_hi", "b32"))
        lo, hi = self._scratch
        first, second = words[:2], words[2:] + words[2:][:1]
        sel_lo = sel_hi = merge = 0
        for i, (w, byte) in enumerate(picks):
            if w in first:
                sel_lo |= ((0 if w == first[0] else 4) + byte) << (4 * i)
                merge |= i << (4 * i)
            else:
                sel_hi |= ((0 if w == second[0] else 4) + byte) << (4 * i)
                merge |= (4 + i) << (4 * i)
        fn.inst("prmt.b32", lo, first[0], first[1], sel_lo)
        fn.inst("prmt.b32", hi, second[0], second[1], sel_hi)
        fn.inst("prmt.b32", dst, lo, hi, merge)


class RowpackRegs:
    """The registers every part of a rowpack kernel uses, declared once."""

    def __init__(self, fn: PtxFunction) -> None:
        self.row_ptr, self.rows = fn.reg("row_ptr", "u64"), fn.reg("rows", "u64")
        self.n_groups, self.stride = fn.reg("n_groups", "u64"), fn.reg("stride", "u64")
        self.thread, self.block_id = fn.reg("thread", "u32"), fn.reg("block_id", "u32")
        self.block_dim, self.grid_dim = fn.reg("block_dim", "u32"), fn.reg("grid_dim", "u32")
        self.tmp64, self.pr = fn.reg("tmp64", "u64"), fn.reg("pr", "pred")
        self.raddr, self.caddr = fn.reg("raddr", "u64"), fn.reg("caddr", "u64")
        self.cptr: dict[int, Reg] = {}  # chunk index -> its pointer (the chunks moved)


def emit_tail(
    fn: PtxFunction,
    r: RowpackRegs,
    tail: Label,
    widths: tuple[int, ...],
    n: int,
    outputs: tuple[int, ...],
    backward: bool,
) -> None:
    """At ``tail``: the last ``rows % n`` rows of rows split as ``widths``, one thread per
    byte (at most 127 of them), writing the chunks in ``outputs``; then ``ret``."""
    pitch = sum(widths)
    group = n * pitch
    offs = [sum(widths[:k]) for k in range(len(widths))]
    row_ptr, cptr, rows, n_groups, stride = r.row_ptr, r.cptr, r.rows, r.n_groups, r.stride
    tmp64, pr, raddr, caddr = r.tmp64, r.pr, r.raddr, r.caddr
    thread, block_id, block_dim = r.thread, r.block_id, r.block_dim
    if n == 1:  # a group is one row: no rows are left over
        fn.place(tail)
        fn.inst("ret")
        return
    fn.banner(f"the last rows % {n} rows, a byte a thread")
    fn.place(tail)
    tail_row, tail_byte, gt = fn.reg("tail_row", "u64"), fn.reg("tail_byte", "u64"), fn.reg("gt", "u64")
    col, byte = fn.reg("col", "u32"), fn.reg("byte", "b16")
    all_bytes, tail_start = fn.reg("all_bytes", "u64"), fn.reg("tail_start", "u64")
    in_tail, tail_r = fn.reg("in_tail", "u32"), fn.reg("tail_r", "u32")
    fn.inst("mul.wide.u32", gt, block_id, block_dim)
    fn.inst("cvt.u64.u32", tmp64, thread)
    fn.inst("add.u64", gt, gt, tmp64)
    fn.inst("mul.lo.u64", tail_byte, n_groups, group)
    fn.inst("add.u64", tail_byte, tail_byte, gt, comment="this thread's first byte of the row side")
    fn.inst("mul.lo.u64", all_bytes, rows, pitch)
    fn.inst("mul.lo.u64", tail_start, n_groups, n, comment="first tail row")
    tail_loop, done, next_byte = fn.label("TAIL_LOOP"), fn.label("DONE"), fn.label("TAIL_NEXT_BYTE")
    fn.place(tail_loop)
    fn.inst("setp.ge.u64", pr, tail_byte, all_bytes)
    fn.inst("bra", done, guard=pr, comment="threads of a warp may differ from here on")
    fn.inst("mul.lo.u64", tmp64, n_groups, group)
    fn.inst("sub.u64", tmp64, tail_byte, tmp64)
    fn.inst("cvt.u32.u64", in_tail, tmp64, comment=f"< {group}: 32-bit division by a constant is inline")
    fn.inst("div.u32", tail_r, in_tail, pitch)
    fn.inst("mul.lo.u32", col, tail_r, pitch)
    fn.inst("sub.u32", col, in_tail, col)
    fn.inst("cvt.u64.u32", tail_row, tail_r)
    fn.inst("add.u64", tail_row, tail_row, tail_start)
    fn.inst("add.u64", raddr, row_ptr, tail_byte)
    if backward:
        # Every byte of the rows is read, as the groups read them: a byte of a chunk
        # this kernel does not write (outputs) is read and then falls through the tests.
        fn.inst("ld.global.nc.b8", byte, Addr(raddr))
    for k in outputs:
        w, o = widths[k], offs[k]
        nxt = fn.label("TAIL_NEXT")
        fn.inst("setp.lt.u32", pr, col, o, comment=f"chunk {k}: columns {o}..{o + w - 1}")
        fn.inst("bra", nxt, guard=pr)
        fn.inst("setp.ge.u32", pr, col, o + w)
        fn.inst("bra", nxt, guard=pr)
        fn.inst("mad.lo.u64", caddr, tail_row, w, cptr[k])
        fn.inst("cvt.u64.u32", tmp64, col)
        fn.inst("add.u64", caddr, caddr, tmp64)
        fn.inst("sub.u64", caddr, caddr, o)
        if backward:
            fn.inst("st.global.b8", Addr(caddr), byte)
        else:
            fn.inst("ld.global.nc.b8", byte, Addr(caddr))
            fn.inst("st.global.b8", Addr(raddr), byte)
        fn.inst("bra", next_byte)
        fn.place(nxt)
    fn.place(next_byte)
    fn.inst("add.u64", tail_byte, tail_byte, stride, comment="a grid may have fewer threads than tail bytes")
    fn.inst("bra", tail_loop)
    fn.place(done)
    fn.inst("ret")
