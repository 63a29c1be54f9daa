"""``rowpack``: fused split/concat for rows of a few bytes, the row layout compiled in.

For short rows (4,194,304 x (1+3) in u8 has 4-byte rows) every 16-byte vector holds
several rows, and re-indexing granule by granule costs more than the copy. When the
chunk widths are known while the PTX is written, a thread can take ``n`` rows at once,
``n`` chosen so that ``n * pitch`` and every ``n * width_k`` are multiples of 16: it loads
those bytes as 16-byte vectors, builds every output word with at most three ``prmt``
whose selectors are constants, and stores 16-byte vectors. No shared memory, no
division in the main loop. The last ``rows % n`` rows go byte by byte.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import Any

from ..footprint import Footprint, FootprintError
from ..function import PtxFunction, PtxModule
from ..kernel import KernelBase
from ..ptxtypes import SPECIAL_REGS, Addr, Reg, Vec
from ..targets import resolve_target
from .fastcat_common import BYTES_IN, BYTES_OUT, U64, check_block

__all__ = ["FastcatRowpack", "rowpack_rows"]

# Bytes one thread moves per group of rows: 8 vectors in, 8 out, and 32 + 4 data
# registers keep it far from spilling.
_MAX_GROUP = 128


def rowpack_rows(widths: tuple[int, ...]) -> int:
    """n: the fewest rows whose bytes on both sides are whole 16-byte vectors."""
    n = 1
    for x in (sum(widths), *widths):
        need = 16 // math.gcd(16, x)
        n = n * need // math.gcd(n, need)
    return n


class _WordBuilder:
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


class FastcatRowpack(KernelBase):
    """Fused split (backward) / concat (forward) of short rows, ``widths`` (bytes, every
    chunk, in order) compiled in: the row side is ``rows`` rows of ``sum(widths)`` bytes,
    chunk ``k`` is ``rows`` rows of ``widths[k]`` bytes, packed.

    Needs every pointer 16-byte aligned (when ``rows >= n``) and ``n * pitch <= 128``
    bytes (``n`` from :func:`rowpack_rows`); the last ``rows % n`` rows are copied byte
    by byte. Arguments ``(row_ptr, rows, chunk0_ptr, ...)``. Touches exactly the bytes of
    the rows it is given.
    """

    @classmethod
    def cache_key(
        cls, *, direction: str, widths: tuple[int, ...], block: int = 256, target: str = "sm_90"
    ) -> Hashable:
        if direction not in ("backward", "forward"):
            raise ValueError(f"direction {direction!r}; accepted: 'backward', 'forward'")
        target = resolve_target(target)
        check_block(block)
        try:
            widths = tuple(widths)
        except TypeError:
            raise ValueError(f"widths must be 1 to 8 ints >= 1 (bytes), got {widths!r}") from None
        if (
            not widths
            or len(widths) > 8
            or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in widths)
        ):
            raise ValueError(f"widths must be 1 to 8 ints >= 1 (bytes), got {widths!r}")
        pitch, n = sum(widths), rowpack_rows(widths)
        if n * pitch > _MAX_GROUP:
            raise ValueError(f"{n} rows of {pitch} bytes = {n * pitch} bytes a thread; at most {_MAX_GROUP}")
        return (direction, widths, block, target)

    def __init__(
        self, *, direction: str, widths: tuple[int, ...], block: int = 256, target: str = "sm_90"
    ) -> None:
        self.direction, self.widths, self.block_size, self.target = self.cache_key(
            direction=direction, widths=widths, block=block, target=target
        )
        self.name = f"fastcat_rowpack_{direction}"  # type: ignore[misc]
        self.pitch = sum(self.widths)
        self.rows_per_thread = rowpack_rows(self.widths)
        self.id = f"{self.name}__{'_'.join(map(str, self.widths))}__b{block}__{self.target}"
        backward = direction == "backward"
        self.arg_names = ("row_ptr", "rows", *(f"chunk{k}_ptr" for k in range(len(self.widths))))
        self.arg_types = (
            BYTES_IN if backward else BYTES_OUT,
            U64,
            *((BYTES_OUT if backward else BYTES_IN) for _ in self.widths),
        )
        self.block = (block, 1, 1)
        self.shared_bytes = 0
        self.info: dict[str, Any] = {
            "family": "rowpack",
            "direction": direction,
            "widths": self.widths,
            "rows_per_thread": self.rows_per_thread,
            "block": block,
        }
        self._emit()

    def __repr__(self) -> str:
        return (
            f"FastcatRowpack(direction={self.direction!r}, widths={self.widths!r}, "
            f"block={self.block_size}, target={self.target!r})"
        )

    def footprints(
        self, grid: tuple[int, int, int], block: tuple[int, int, int], scalars: Mapping[str, int]
    ) -> tuple[Footprint, ...]:
        """``rows * pitch`` bytes of the row side, ``rows * widths[k]`` of chunk ``k``;
        16-byte aligned where there is a whole group of ``n`` rows (16-byte vectors), byte
        aligned otherwise. Grid-stride: any non-empty grid covers everything."""
        if tuple(block) != self.block:
            raise FootprintError(f"{self.name} is built for block {self.block}, not {tuple(block)}")
        rows = scalars["rows"] if all(g > 0 for g in grid) else 0
        align = 16 if rows >= self.rows_per_thread else 1
        backward = self.direction == "backward"
        out = [Footprint("row_ptr", rows * self.pitch, 1, align, writes=not backward)]
        for k, w in enumerate(self.widths):
            out.append(Footprint(f"chunk{k}_ptr", rows * w, 1, align, writes=backward))
        return tuple(out)

    def _emit(self) -> None:
        widths, pitch, n = self.widths, self.pitch, self.rows_per_thread
        group = n * pitch
        offs = [sum(widths[:k]) for k in range(len(widths))]
        module = PtxModule(
            self.target,
            comment=[
                f"{self.name}: rows of {pitch} bytes split as {'+'.join(map(str, widths))} bytes,",
                "compiled in.",
                f"Each thread moves {n} rows ({group} bytes) as 16-byte vectors and rearranges",
                "the bytes in registers with constant prmt selectors.",
            ],
        )
        fn = module.entry(self.entry_point_name)
        params = {
            name: fn.param(name, t.ptx_type, comment=str(t))
            for name, t in zip(self.arg_names, self.arg_types)
        }
        fn.directive(".maxntid", self.block_size, 1, 1)
        row_ptr, rows, n_groups = fn.reg("row_ptr", "u64"), fn.reg("rows", "u64"), fn.reg("n_groups", "u64")
        gi, stride, tmp64 = fn.reg("gi", "u64"), fn.reg("stride", "u64"), fn.reg("tmp64", "u64")
        raddr, caddr = fn.reg("raddr", "u64"), fn.reg("caddr", "u64")
        pr = fn.reg("pr", "pred")

        fn.banner("arguments")
        fn.inst("ld.param.u64", row_ptr, Addr(params["row_ptr"]))
        fn.inst("cvta.to.global.u64", row_ptr, row_ptr)
        fn.inst("ld.param.u64", rows, Addr(params["rows"]))
        cptr = []
        for k in range(len(widths)):
            c = fn.reg(f"cptr{k}", "u64")
            fn.inst("ld.param.u64", c, Addr(params[f"chunk{k}_ptr"]))
            fn.inst("cvta.to.global.u64", c, c)
            cptr.append(c)
        thread, block_id = fn.reg("thread", "u32"), fn.reg("block_id", "u32")
        block_dim, grid_dim = fn.reg("block_dim", "u32"), fn.reg("grid_dim", "u32")
        fn.inst("mov.u32", thread, SPECIAL_REGS["tid.x"])
        fn.inst("mov.u32", block_id, SPECIAL_REGS["ctaid.x"])
        fn.inst("mov.u32", block_dim, SPECIAL_REGS["ntid.x"])
        fn.inst("mov.u32", grid_dim, SPECIAL_REGS["nctaid.x"])
        fn.inst("mul.wide.u32", gi, block_id, block_dim)
        fn.inst("cvt.u64.u32", tmp64, thread)
        fn.inst("add.u64", gi, gi, tmp64, comment=f"group = {n} rows")
        fn.inst("mul.wide.u32", stride, grid_dim, block_dim)
        fn.inst(
            "shr.u64", n_groups, rows, n.bit_length() - 1, comment=f"whole groups ({n} is a power of two)"
        )

        top, tail = fn.label("LOOP"), fn.label("TAIL")
        words = _WordBuilder(fn)
        fn.banner(f"whole groups: {group} bytes of rows as {group // 16} vectors, rearranged in registers")
        fn.place(top)
        fn.inst("setp.ge.u64", pr, gi, n_groups)
        fn.inst("bra.uni", tail, guard=pr)
        if self.direction == "backward":
            in_words = [fn.reg(f"i{w}", "b32") for w in range(group // 4)]
            fn.inst("mad.lo.u64", raddr, gi, group, row_ptr)
            for v in range(group // 16):
                fn.inst("ld.global.nc.v4.u32", Vec(tuple(in_words[4 * v : 4 * v + 4])), Addr(raddr, 16 * v),
                        comment=f"rows' bytes {16 * v}..{16 * v + 15}")  # fmt: skip
            out = [fn.reg(f"o{q}", "b32") for q in range(4)]
            for k, (w, o) in enumerate(zip(widths, offs)):
                fn.inst("mad.lo.u64", caddr, gi, n * w, cptr[k])
                for v in range(n * w // 16):
                    for q in range(4):
                        picks = []
                        for b in range(4):
                            j = 16 * v + 4 * q + b  # byte j of this chunk's n rows
                            src = (j // w) * pitch + o + j % w
                            picks.append((in_words[src // 4], src % 4))
                        words.word(out[q], picks)
                    fn.inst("st.global.v4.u32", Addr(caddr, 16 * v), Vec(tuple(out)))
        else:
            chunk_words = []
            for k, w in enumerate(widths):
                names = [fn.reg(f"x{k}_{i}", "b32") for i in range(n * w // 4)]
                chunk_words.append(names)
                fn.inst("mad.lo.u64", caddr, gi, n * w, cptr[k])
                for v in range(n * w // 16):
                    fn.inst("ld.global.nc.v4.u32", Vec(tuple(names[4 * v : 4 * v + 4])), Addr(caddr, 16 * v))
            out = [fn.reg(f"o{q}", "b32") for q in range(4)]
            fn.inst("mad.lo.u64", raddr, gi, group, row_ptr)
            for v in range(group // 16):
                for q in range(4):
                    picks = []
                    for b in range(4):
                        i = 16 * v + 4 * q + b
                        r, c = divmod(i, pitch)
                        k = max(kk for kk in range(len(widths)) if offs[kk] <= c)
                        src = r * widths[k] + c - offs[k]
                        picks.append((chunk_words[k][src // 4], src % 4))
                    words.word(out[q], picks)
                fn.inst("st.global.v4.u32", Addr(raddr, 16 * v), Vec(tuple(out)))
        fn.inst("add.u64", gi, gi, stride)
        fn.inst("bra.uni", top)

        # The last rows % n rows: one thread per byte (at most 127 of them).
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
        fn.inst("bra.uni", done, guard=pr)
        fn.inst("mul.lo.u64", tmp64, n_groups, group)
        fn.inst("sub.u64", tmp64, tail_byte, tmp64)
        fn.inst("cvt.u32.u64", in_tail, tmp64, comment=f"< {group}: 32-bit division by a constant is inline")
        fn.inst("div.u32", tail_r, in_tail, pitch)
        fn.inst("mul.lo.u32", col, tail_r, pitch)
        fn.inst("sub.u32", col, in_tail, col)
        fn.inst("cvt.u64.u32", tail_row, tail_r)
        fn.inst("add.u64", tail_row, tail_row, tail_start)
        fn.inst("add.u64", raddr, row_ptr, tail_byte)
        for k, (w, o) in enumerate(zip(widths, offs)):
            nxt = fn.label("TAIL_NEXT")
            fn.inst("setp.lt.u32", pr, col, o, comment=f"chunk {k}: columns {o}..{o + w - 1}")
            fn.inst("bra.uni", nxt, guard=pr)
            fn.inst("setp.ge.u32", pr, col, o + w)
            fn.inst("bra.uni", nxt, guard=pr)
            fn.inst("mad.lo.u64", caddr, tail_row, w, cptr[k])
            fn.inst("cvt.u64.u32", tmp64, col)
            fn.inst("add.u64", caddr, caddr, tmp64)
            fn.inst("sub.u64", caddr, caddr, o)
            if self.direction == "backward":
                fn.inst("ld.global.nc.b8", byte, Addr(raddr))
                fn.inst("st.global.b8", Addr(caddr), byte)
            else:
                fn.inst("ld.global.nc.b8", byte, Addr(caddr))
                fn.inst("st.global.b8", Addr(raddr), byte)
            fn.inst("bra.uni", next_byte)
            fn.place(nxt)
        fn.place(next_byte)
        fn.inst(
            "add.u64", tail_byte, tail_byte, stride, comment="a grid may have fewer threads than tail bytes"
        )
        fn.inst("bra.uni", tail_loop)
        fn.place(done)
        fn.inst("ret")
        self.ptx_version = module.version
        self.kernel_source = module.header()
        self.entry_point_source = fn.render()
