"""``rowpack``: fused split/concat for rows of a few bytes, the row layout compiled in.

For short rows (4,194,304 x (1+3) in u8 has 4-byte rows) every 16-byte vector holds
several rows, and re-indexing granule by granule costs more than the copy. When the
chunk widths are known while the PTX is written, a thread can take ``n`` rows at once,
``n`` chosen so that ``n * pitch`` and every ``n * width_k`` are multiples of 16: it loads
those bytes as 16-byte vectors, builds every output word with at most three ``prmt``
whose selectors are constants, and stores 16-byte vectors. No division in the main
loop. The last ``rows % n`` rows go byte by byte.

Two ways to reach the bytes (``staged``):

* direct: each thread loads and stores its own ``n * pitch`` bytes. A warp's access is
  then 32 vectors ``n * pitch`` bytes apart: every load or store instruction touches
  part of 32 sectors, and the stores reach L2 as twice as many partial writes.
* staged: the CTA's groups are one contiguous range of every array, so the CTA moves
  each range between global and shared memory as consecutive 16-byte vectors (a warp's
  instruction: 512 contiguous bytes), and each thread reads its own group from shared
  memory, rearranges it, and writes it back there. One 16-byte slot in nine is padding,
  so eight threads reading consecutive groups hit eight different bank quads.

``narrow_chunks`` (direct only): ``n`` makes whole vectors of the row side alone, and
each chunk moves its ``n * width_k`` bytes a group in the widest access that divides
them (1, 2, 4, 8 or 16 bytes). 2,048 x (3+5+24) in u8 then takes one row a thread: two
16-byte loads, then 3 + 5 one-byte and three 8-byte stores, where ``rect`` moves the
same row as 32 one-byte accesses in 32 threads. For small ops, whose cost is latency:
the chunk side keeps its narrow accesses, but nothing is staged and nothing divides.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import Any

from ..footprint import Footprint, check_launch_block
from ..function import PtxFunction, PtxModule
from ..kernel import KernelBase
from ..ptxtypes import SPECIAL_REGS, Addr, Label, Reg, Vec
from ..targets import resolve_target
from .fastcat_common import (
    BYTES_IN,
    BYTES_OUT,
    U64,
    check_block,
    check_choice,
    check_dependent_launch,
    emit_dependent_launch,
)
from .rowpack_parts import RowpackRegs, WordBuilder, emit_tail

__all__ = ["FastcatRowpack", "rowpack_rows"]

# Bytes one thread moves per group of rows: 8 vectors in, 8 out, and 32 + 4 data
# registers keep it far from spilling.
_MAX_GROUP = 128
_SHARED_LIMIT = 48 * 1024  # static shared memory a kernel may declare
# the global access of 16, 8 or 4 bytes, moved as 32-bit words
WORD_ACCESS = {16: "v4.u32", 8: "v2.u32", 4: "u32"}


def _padded(vectors: int) -> int:
    """16-byte slots that hold ``vectors`` vectors with one slot of padding after every 8."""
    return vectors + vectors // 8


def rowpack_rows(widths: tuple[int, ...], outputs: tuple[int, ...] | None = None) -> int:
    """n: the fewest rows whose bytes on both sides are whole 16-byte vectors (the row
    side and the chunks in ``outputs``, every chunk if None)."""
    moved = widths if outputs is None else [widths[k] for k in outputs]
    n = 1
    for x in (sum(widths), *moved):
        need = 16 // math.gcd(16, x)
        n = n * need // math.gcd(n, need)
    return n


def chunk_access(rows_per_thread: int, width: int) -> int:
    """Bytes a narrow chunk moves per access: its ``rows_per_thread`` rows' bytes start at a
    multiple of themselves, so the widest power of two up to 16 dividing them."""
    return math.gcd(16, rows_per_thread * width)


def _check_outputs(outputs: object, widths: tuple[int, ...], direction: str) -> tuple[int, ...] | None:
    """None (every chunk) or the chunks a backward kernel writes: distinct, ascending
    indices of ``widths``."""
    if outputs is None:
        return None
    accepted = f"None or distinct ascending chunk indices in 0..{len(widths) - 1}"
    try:
        picked = tuple(outputs)  # type: ignore[call-overload]
    except TypeError:
        raise ValueError(f"outputs = {outputs!r} is not accepted; accepted: {accepted}") from None
    if (
        not picked
        or any(isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < len(widths) for k in picked)
        or list(picked) != sorted(set(picked))
    ):
        raise ValueError(f"outputs = {outputs!r} is not accepted; accepted: {accepted}")
    if picked == tuple(range(len(widths))):
        return None  # every chunk: the same kernel as outputs=None
    if direction != "backward":
        raise ValueError(
            f"outputs = {picked!r}: a forward rowpack writes whole rows of y, so it takes every "
            "chunk; accepted: None"
        )
    return picked


class FastcatRowpack(KernelBase):
    """Fused split (backward) / concat (forward) of short rows, ``widths`` (bytes, every
    chunk, in order) compiled in: the row side is ``rows`` rows of ``sum(widths)`` bytes,
    chunk ``k`` is ``rows`` rows of ``widths[k]`` bytes, packed.

    Needs every pointer 16-byte aligned (when ``rows >= n``) and ``n * pitch <= 128``
    bytes (``n`` from :func:`rowpack_rows`); the last ``rows % n`` rows are copied byte
    by byte. Arguments ``(row_ptr, rows, chunk0_ptr, ...)``: a pointer for each chunk in
    ``outputs``. Touches exactly the bytes of the rows it is given. ``staged``: the
    CTA's accesses go through shared memory as consecutive vectors (``block * n * pitch
    * 9 / 8`` bytes of it, at most 48 KB).

    ``outputs`` (backward only): the chunks it writes, ascending; None writes all (a
    split). One chunk is a gather that reads whole rows: worth it where every 32-byte
    sector of the row side holds bytes of the chunk, so nothing is read in vain. A
    forward kernel writes whole rows of ``y`` and so takes every chunk.
    """

    @classmethod
    def cache_key(
        cls,
        *,
        direction: str,
        widths: tuple[int, ...],
        block: int = 256,
        staged: bool = False,
        outputs: tuple[int, ...] | None = None,
        narrow_chunks: bool = False,
        target: str = "sm_90",
        dependent_launch: bool = False,
    ) -> Hashable:
        if direction not in ("backward", "forward"):
            raise ValueError(f"direction {direction!r}; accepted: 'backward', 'forward'")
        target = resolve_target(target)
        check_block(block)
        check_choice(staged, "staged", (False, True))
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
        outputs = _check_outputs(outputs, widths, direction)
        check_choice(narrow_chunks, "narrow_chunks", (False, True))
        if narrow_chunks and staged:
            raise ValueError(
                "narrow_chunks = True is not accepted with staged = True: the staging moves "
                "whole 16-byte vectors of every chunk; accepted: staged = False"
            )
        pitch, n = sum(widths), rowpack_rows(widths, () if narrow_chunks else outputs)
        if n * pitch > _MAX_GROUP:
            raise ValueError(f"{n} rows of {pitch} bytes = {n * pitch} bytes a thread; at most {_MAX_GROUP}")
        if staged and 16 * _padded(block * n * pitch // 16) > _SHARED_LIMIT:
            raise ValueError(
                f"staged = True needs {16 * _padded(block * n * pitch // 16)} bytes of shared "
                f"memory with block {block} and {n * pitch}-byte groups; at most {_SHARED_LIMIT}: "
                "take a smaller block"
            )
        pdl = check_dependent_launch(dependent_launch, target)
        return (direction, widths, block, staged, outputs, narrow_chunks, target, pdl)

    def __init__(
        self,
        *,
        direction: str,
        widths: tuple[int, ...],
        block: int = 256,
        staged: bool = False,
        outputs: tuple[int, ...] | None = None,
        narrow_chunks: bool = False,
        target: str = "sm_90",
        dependent_launch: bool = False,
    ) -> None:
        key = self.cache_key(
            direction=direction, widths=widths, block=block, staged=staged, outputs=outputs,
            narrow_chunks=narrow_chunks, target=target, dependent_launch=dependent_launch,
        )  # fmt: skip
        self.direction, self.widths, self.block_size, self.staged, outputs = key[:5]
        self.narrow_chunks: bool = key[5]
        self.target: str = key[6]
        self.dependent_launch: bool = key[7]
        self.outputs: tuple[int, ...] = outputs if outputs is not None else tuple(range(len(self.widths)))
        self.name = f"fastcat_rowpack_{direction}"  # type: ignore[misc]
        self.pitch = sum(self.widths)
        n = self.rows_per_thread = rowpack_rows(self.widths, () if self.narrow_chunks else self.outputs)
        self.units = {k: chunk_access(n, self.widths[k]) for k in self.outputs}
        tag = (
            ("__st" if self.staged else "")
            + ("__narrow" if self.narrow_chunks else "")
            + ("__pdl" if self.dependent_launch else "")
        )
        some = "" if outputs is None else "__out" + "_".join(map(str, self.outputs))
        self.id = f"{self.name}__{'_'.join(map(str, self.widths))}{some}__b{block}{tag}__{self.target}"
        backward = direction == "backward"
        self.arg_names = ("row_ptr", "rows", *(f"chunk{k}_ptr" for k in self.outputs))
        self.arg_types = (
            BYTES_IN if backward else BYTES_OUT,
            U64,
            *((BYTES_OUT if backward else BYTES_IN) for _ in self.outputs),
        )
        self.block = (block, 1, 1)
        group_vectors = self.rows_per_thread * self.pitch // 16
        self.shared_bytes = 16 * _padded(block * group_vectors) if self.staged else 0
        self.info: dict[str, Any] = {
            "family": "rowpack",
            "direction": direction,
            "widths": self.widths,
            "rows_per_thread": self.rows_per_thread,
            "block": block,
            "staged": self.staged,
            "outputs": self.outputs,
            **({"narrow_chunks": True} if self.narrow_chunks else {}),
            **({"dependent_launch": True} if self.dependent_launch else {}),
        }
        self._half_reg: Reg | None = None  # declared by the first 2-byte access
        self._emit()

    def __repr__(self) -> str:
        return (
            f"FastcatRowpack(direction={self.direction!r}, widths={self.widths!r}, "
            f"block={self.block_size}, staged={self.staged!r}, "
            f"outputs={self.outputs!r}, narrow_chunks={self.narrow_chunks!r}, target={self.target!r}, "
            f"dependent_launch={self.dependent_launch})"
        )

    def footprints(
        self, grid: tuple[int, int, int], block: tuple[int, int, int], scalars: Mapping[str, int]
    ) -> tuple[Footprint, ...]:
        """``rows * pitch`` bytes of the row side, ``rows * widths[k]`` of each chunk ``k`` it moves;
        where there is a whole group of ``n`` rows, the row side 16-byte aligned and each
        chunk aligned to its access (16 bytes, or with ``narrow_chunks`` the widest that
        divides its group's bytes); byte aligned otherwise. Grid-stride: any non-empty grid
        covers everything."""
        check_launch_block(self.name, block, self.block)
        rows = scalars["rows"] if all(g > 0 for g in grid) else 0
        whole = rows >= self.rows_per_thread
        backward = self.direction == "backward"
        out = [Footprint("row_ptr", rows * self.pitch, 1, 16 if whole else 1, writes=not backward)]
        for k in self.outputs:
            align = self.units[k] if whole else 1
            out.append(Footprint(f"chunk{k}_ptr", rows * self.widths[k], 1, align, writes=backward))
        return tuple(out)

    def _emit(self) -> None:
        widths, pitch, n = self.widths, self.pitch, self.rows_per_thread
        group = n * pitch
        if self.staged:
            how = "The CTA moves its groups' bytes through shared memory as consecutive 16-byte vectors;"
        elif self.narrow_chunks:
            units = ", ".join(f"{self.units[k]}" for k in self.outputs)
            how = (
                f"Each thread moves its own group: rows as 16-byte vectors, chunks in {units}-byte accesses;"
            )
        else:
            how = "Each thread loads and stores its own group as 16-byte vectors;"
        only = ", ".join(map(str, self.outputs))
        module = PtxModule(
            self.target,
            comment=[
                f"{self.name}: rows of {pitch} bytes split as {'+'.join(map(str, widths))} bytes,",
                f"compiled in. A thread takes a group of {n} rows ({group} bytes) and rearranges",
                "its bytes in registers with constant prmt selectors.",
                how,
                f"the last rows % {n} go a byte a thread.",
                *(
                    []
                    if len(self.outputs) == len(widths)
                    else [f"It writes chunk {only} only (a gather of whole rows)."]
                ),
            ],
        )
        fn = module.entry(self.entry_point_name)
        params = {
            name: fn.param(name, t.ptx_type, comment=str(t))
            for name, t in zip(self.arg_names, self.arg_types)
        }
        fn.directive(".maxntid", self.block_size, 1, 1)
        if self.dependent_launch:
            emit_dependent_launch(fn)
        r = RowpackRegs(fn)
        row_ptr, rows, n_groups = r.row_ptr, r.rows, r.n_groups

        fn.banner("arguments")
        fn.inst("ld.param.u64", row_ptr, Addr(params["row_ptr"]))
        fn.inst("cvta.to.global.u64", row_ptr, row_ptr)
        fn.inst("ld.param.u64", rows, Addr(params["rows"]))
        for k in self.outputs:
            c = fn.reg(f"cptr{k}", "u64")
            fn.inst("ld.param.u64", c, Addr(params[f"chunk{k}_ptr"]))
            fn.inst("cvta.to.global.u64", c, c)
            r.cptr[k] = c
        fn.inst("mov.u32", r.thread, SPECIAL_REGS["tid.x"])
        fn.inst("mov.u32", r.block_id, SPECIAL_REGS["ctaid.x"])
        fn.inst("mov.u32", r.block_dim, SPECIAL_REGS["ntid.x"])
        fn.inst("mov.u32", r.grid_dim, SPECIAL_REGS["nctaid.x"])
        fn.inst("mul.wide.u32", r.stride, r.grid_dim, r.block_dim, comment="threads in the grid")
        if n == 1:
            fn.inst("mov.u64", n_groups, rows, comment="a group is a row")
        else:
            fn.inst(
                "shr.u64", n_groups, rows, n.bit_length() - 1, comment=f"whole groups ({n} is a power of two)"
            )
        tail = fn.label("TAIL")
        if self.staged:
            self._staged_groups(fn, r, tail)
        else:
            self._direct_groups(fn, r, tail)
        emit_tail(fn, r, tail, self.widths, self.rows_per_thread, self.outputs, self.direction == "backward")
        self.ptx_version = module.version
        self.kernel_source = module.header()
        self.entry_point_source = fn.render()

    # --- the bytes of one group, rearranged in registers ------------------------------------

    def _chunk_picks(self, in_words: list[Reg], k: int, first: int, count: int) -> list[tuple[Reg, int]]:
        """(word, byte) of bytes ``first .. first + count - 1`` of chunk ``k``'s bytes of the
        group, among the group's row-side words."""
        widths, pitch = self.widths, self.pitch
        w, o = widths[k], sum(widths[:k])
        picks = []
        for j in range(first, first + count):
            src = (j // w) * pitch + o + j % w  # byte j of this chunk's n rows
            picks.append((in_words[src // 4], src % 4))
        return picks

    @staticmethod
    def _whole(picks: list[tuple[Reg, int]]) -> Reg | None:
        """The register whose bytes ``picks`` are, in order from its lowest, else None:
        such bytes need no word built, the register is stored as it is."""
        source = picks[0][0]
        return source if picks == [(source, b) for b in range(len(picks))] else None

    def _chunk_vector(self, words: WordBuilder, out: list[Reg], in_words: list[Reg], k: int, v: int) -> None:
        """out = vector ``v`` of chunk ``k``'s bytes of the group, from the group's row-side words."""
        for q in range(4):
            words.word(out[q], self._chunk_picks(in_words, k, 16 * v + 4 * q, 4))

    def _row_vector(
        self, words: WordBuilder, out: list[Reg], chunk_bytes: list[tuple[list[Reg], int]], v: int
    ) -> list[Reg]:
        """Vector ``v`` of the group's row-side bytes, from every chunk's registers
        (``chunk_bytes[k]``: the registers and how many of chunk ``k``'s bytes each holds):
        its four words, each a chunk's word where one holds it in order, else built in ``out``."""
        widths, pitch = self.widths, self.pitch
        offs = [sum(widths[:k]) for k in range(len(widths))]
        vector: list[Reg] = []
        for q in range(4):
            picks, whole_words = [], []
            for b in range(4):
                i = 16 * v + 4 * q + b
                r, c = divmod(i, pitch)
                k = max(kk for kk in range(len(widths)) if offs[kk] <= c)
                src = r * widths[k] + c - offs[k]
                regs, per = chunk_bytes[k]
                picks.append((regs[src // per], src % per))
                whole_words.append(per == 4)  # this byte's register holds 4 bytes of its chunk
            whole = self._whole(picks) if all(whole_words) else None
            if whole is not None:
                vector.append(whole)
            else:
                words.word(out[q], picks)
                vector.append(out[q])
        return vector

    def _store_chunk(
        self, fn: PtxFunction, words: WordBuilder, out: list[Reg], in_words: list[Reg], k: int, caddr: Reg
    ) -> None:
        """Chunk ``k``'s bytes of the group, at ``caddr``, in accesses of ``units[k]`` bytes."""
        unit, size = self.units[k], self.rows_per_thread * self.widths[k]
        for first in range(0, size, unit):
            if unit >= 4:
                regs = []
                for q in range(unit // 4):
                    picks = self._chunk_picks(in_words, k, first + 4 * q, 4)
                    whole = self._whole(picks)  # a whole row-side word, in order
                    if whole is None:
                        words.word(out[q], picks)
                    regs.append(out[q] if whole is None else whole)
                value = Vec(tuple(regs)) if unit > 4 else regs[0]
                fn.inst(f"st.global.{WORD_ACCESS[unit]}", Addr(caddr, first), value)
                continue
            picks = self._chunk_picks(in_words, k, first, unit)
            source = self._whole(picks)  # already a word's low bytes?
            if source is None:
                words.word(out[0], picks + picks[:1] * (4 - unit))
                source = out[0]
            if unit == 1:
                fn.inst("st.global.b8", Addr(caddr, first), source)
            else:
                half = self._half(fn)
                fn.inst("cvt.u16.u32", half, source)
                fn.inst("st.global.b16", Addr(caddr, first), half)

    def _load_chunk(self, fn: PtxFunction, k: int, caddr: Reg) -> tuple[list[Reg], int]:
        """Load chunk ``k``'s bytes of the group from ``caddr`` in accesses of ``units[k]``
        bytes: the registers, and how many of the chunk's bytes each holds (its low ones)."""
        unit, size = self.units[k], self.rows_per_thread * self.widths[k]
        per = min(unit, 4)
        regs = [fn.reg(f"x{k}_{i}", "b32") for i in range(size // per)]
        for first in range(0, size, unit):
            if unit >= 4:
                mine = regs[first // 4 : (first + unit) // 4]
                value = Vec(tuple(mine)) if unit > 4 else mine[0]
                fn.inst(f"ld.global.nc.{WORD_ACCESS[unit]}", value, Addr(caddr, first))
            elif unit == 2:
                half = self._half(fn)
                fn.inst("ld.global.nc.b16", half, Addr(caddr, first))
                fn.inst("cvt.u32.u16", regs[first // 2], half)
            else:
                fn.inst("ld.global.nc.u8", regs[first], Addr(caddr, first), comment="into a word's low byte")
        return regs, per

    def _access_note(self, k: int) -> str:
        return f"chunk {k}: {self.units[k]}-byte accesses" if self.narrow_chunks else ""

    def _half(self, fn: PtxFunction) -> Reg:
        """The 16-bit register 2-byte accesses go through, declared at first use."""
        if self._half_reg is None:
            self._half_reg = fn.reg("half", "b16")
        return self._half_reg

    def _direct_groups(self, fn: PtxFunction, r: RowpackRegs, tail: Label) -> None:
        """Each thread loads and stores its own group, grid-stride."""
        widths, n = self.widths, self.rows_per_thread
        group = n * self.pitch
        row_ptr, cptr, n_groups, stride = r.row_ptr, r.cptr, r.n_groups, r.stride
        tmp64, pr, raddr, caddr = r.tmp64, r.pr, r.raddr, r.caddr
        gi = fn.reg("gi", "u64")
        fn.inst("mul.wide.u32", gi, r.block_id, r.block_dim)
        fn.inst("cvt.u64.u32", tmp64, r.thread)
        fn.inst("add.u64", gi, gi, tmp64, comment=f"this thread's group of {n} rows")
        top = fn.label("LOOP")
        words = WordBuilder(fn)
        fn.banner(f"whole groups: {group} bytes of rows as {group // 16} vectors, rearranged in registers")
        fn.place(top)
        fn.inst("setp.ge.u64", pr, gi, n_groups)
        fn.inst("bra", tail, guard=pr, comment="threads of a warp may differ")
        out = [fn.reg(f"o{q}", "b32") for q in range(4)]
        if self.direction == "backward":
            in_words = [fn.reg(f"i{w}", "b32") for w in range(group // 4)]
            fn.inst("mad.lo.u64", raddr, gi, group, row_ptr)
            for v in range(group // 16):
                fn.inst("ld.global.nc.v4.u32", Vec(tuple(in_words[4 * v : 4 * v + 4])), Addr(raddr, 16 * v),
                        comment=f"rows' bytes {16 * v}..{16 * v + 15}")  # fmt: skip
            for k in self.outputs:
                fn.inst("mad.lo.u64", caddr, gi, n * widths[k], cptr[k], comment=self._access_note(k))
                self._store_chunk(fn, words, out, in_words, k, caddr)
        else:
            chunk_bytes = []
            for k, w in enumerate(widths):
                fn.inst("mad.lo.u64", caddr, gi, n * w, cptr[k], comment=self._access_note(k))
                chunk_bytes.append(self._load_chunk(fn, k, caddr))
            fn.inst("mad.lo.u64", raddr, gi, group, row_ptr)
            for v in range(group // 16):
                vector = self._row_vector(words, out, chunk_bytes, v)
                fn.inst("st.global.v4.u32", Addr(raddr, 16 * v), Vec(tuple(vector)))
        fn.inst("add.u64", gi, gi, stride)
        fn.inst("bra.uni", top)

    def _staged_groups(self, fn: PtxFunction, r: RowpackRegs, tail: Label) -> None:
        """The CTA's ``block`` consecutive groups at a time (grid-stride over CTAs): every
        array's range in and out of shared memory as consecutive vectors, each group
        rearranged by its thread in between."""
        widths, n, block = self.widths, self.rows_per_thread, self.block_size
        backward = self.direction == "backward"
        # Vectors a group has on each side, and where each side's vectors start in shared
        # memory (in vectors, before padding): the row side at 0, the chunks one after
        # another. Both sides fill the same slots: one is read out before the other is written.
        row_vecs = n * self.pitch // 16
        chunk_vecs = {k: n * widths[k] // 16 for k in self.outputs}
        chunk_first, first = {}, 0
        for k in self.outputs:
            chunk_first[k], first = first, first + block * chunk_vecs[k]
        smem = fn.shared("groups", 16 * _padded(block * row_vecs), align=16)
        thread, tmp64, pr, n_groups = r.thread, r.tmp64, r.pr, r.n_groups
        g0, step, left = fn.reg("g0", "u64"), fn.reg("g_step", "u64"), fn.reg("left", "u64")
        valid, base, slot = fn.reg("valid", "u32"), fn.reg("smem", "u32"), fn.reg("slot", "u32")
        limit, tmp32, own = fn.reg("limit", "u32"), fn.reg("tmp32", "u32"), fn.reg("own", "u32")
        gaddr = fn.reg("gaddr", "u64")
        fn.inst("mov.u32", base, smem, comment="shared address of the staging area")
        fn.inst("mul.wide.u32", g0, r.block_id, block, comment="this CTA's first group")
        fn.inst("mul.wide.u32", step, r.grid_dim, block, comment="groups a grid's CTAs take at once")
        # A pass moves vector i = first + j*block + thread into slot i + i/8. first and
        # j*block are multiples of 8, so the thread's share, thread + thread/8, is fixed.
        fn.inst("shr.u32", slot, thread, 3)
        fn.inst("add.u32", slot, slot, thread, comment="thread + thread/8: this thread's slot ...")
        fn.inst("shl.b32", slot, slot, 4)
        fn.inst("add.u32", slot, slot, base, comment="... as a shared address, in every pass")

        def own_vector(first: int, per_group: int, v: int) -> None:
            """own = shared address of vector ``v`` of this thread's group, on the side whose
            vectors start at ``first`` and number ``per_group`` a group."""
            fn.inst("mad.lo.u32", own, thread, per_group, first + v)
            fn.inst("shr.u32", tmp32, own, 3)
            fn.inst("add.u32", own, own, tmp32, comment="one padding slot after every 8")
            fn.inst("shl.b32", own, own, 4)
            fn.inst("add.u32", own, own, base)

        def passes(vecs: int, first: int, ptr: Reg, to_shared: bool, stem: str) -> None:
            """Move one side's ``vecs`` vectors a group between global memory (``ptr``, from
            the CTA's first group) and shared memory: pass ``j`` moves vector
            ``j*block + thread`` of the CTA's range. All loads go before the first store."""
            fn.inst("mul.lo.u32", limit, valid, vecs, comment="vectors of this side in these groups")
            fn.inst("mul.lo.u64", gaddr, g0, 16 * vecs)
            fn.inst("add.u64", gaddr, gaddr, ptr)
            fn.inst("mul.wide.u32", tmp64, thread, 16)
            fn.inst("add.u64", gaddr, gaddr, tmp64)
            live, data = [], []
            for j in range(vecs):
                ok = fn.reg(f"{stem}_live_{j}", "pred")
                if j:
                    fn.inst("add.u32", tmp32, thread, j * block)
                fn.inst("setp.lt.u32", ok, tmp32 if j else thread, limit)
                live.append(ok)
                data.append(fn.vec(f"{stem}{j}_", "b32", 4))
            offset = [16 * _padded(first + j * block) for j in range(vecs)]
            note = "a warp: 512 contiguous bytes"
            if to_shared:
                for j in range(vecs):
                    fn.inst("ld.global.nc.v4.u32", data[j], Addr(gaddr, 16 * j * block), guard=live[j],
                            comment=note if j == 0 else "")  # fmt: skip
                for j in range(vecs):
                    fn.inst("st.shared.v4.u32", Addr(slot, offset[j]), data[j], guard=live[j])
            else:
                for j in range(vecs):
                    fn.inst("ld.shared.v4.u32", data[j], Addr(slot, offset[j]), guard=live[j])
                for j in range(vecs):
                    fn.inst("st.global.v4.u32", Addr(gaddr, 16 * j * block), data[j], guard=live[j],
                            comment=note if j == 0 else "")  # fmt: skip

        top = fn.label("LOOP")
        words = WordBuilder(fn)
        out = fn.vec("o", "b32", 4)
        fn.banner(f"whole groups, {block} at a time: through shared memory, rearranged in registers")
        fn.place(top)
        fn.inst("setp.ge.u64", pr, g0, n_groups)
        fn.inst("bra.uni", tail, guard=pr, comment="uniform: the same for the whole CTA")
        fn.inst("sub.u64", left, n_groups, g0)
        fn.inst("min.u64", left, left, block)
        fn.inst("cvt.u32.u64", valid, left, comment="groups this CTA moves now (the last CTA: fewer)")
        if backward:
            fn.banner(f"row side in: {row_vecs} pass(es)")
            passes(row_vecs, 0, r.row_ptr, True, "r")
            fn.inst("bar.sync", 0, comment="the CTA's rows are in shared memory")
            in_words: list[Reg] = []
            for v in range(row_vecs):
                vec = fn.vec(f"g{v}_", "b32", 4)
                own_vector(0, row_vecs, v)
                fn.inst("ld.shared.v4.u32", vec, Addr(own), comment=f"this thread's group, vector {v}")
                in_words += list(vec.regs)
            fn.inst("bar.sync", 0, comment="every group read before the chunks overwrite it")
            for k in self.outputs:
                for v in range(chunk_vecs[k]):
                    self._chunk_vector(words, list(out.regs), in_words, k, v)
                    own_vector(chunk_first[k], chunk_vecs[k], v)
                    fn.inst("st.shared.v4.u32", Addr(own), out, comment=f"chunk {k}, vector {v}")
            fn.inst("bar.sync", 0, comment="every chunk's vectors are in shared memory")
            for k in self.outputs:
                fn.banner(f"chunk {k} out: {chunk_vecs[k]} pass(es)")
                passes(chunk_vecs[k], chunk_first[k], r.cptr[k], False, f"c{k}")
        else:
            for k in range(len(widths)):
                fn.banner(f"chunk {k} in: {chunk_vecs[k]} pass(es)")
                passes(chunk_vecs[k], chunk_first[k], r.cptr[k], True, f"c{k}")
            fn.inst("bar.sync", 0, comment="the CTA's chunk bytes are in shared memory")
            chunk_words: list[tuple[list[Reg], int]] = []
            for k in range(len(widths)):
                names: list[Reg] = []
                for v in range(chunk_vecs[k]):
                    vec = fn.vec(f"x{k}_{v}_", "b32", 4)
                    own_vector(chunk_first[k], chunk_vecs[k], v)
                    fn.inst(
                        "ld.shared.v4.u32", vec, Addr(own), comment=f"this thread's chunk {k}, vector {v}"
                    )
                    names += list(vec.regs)
                chunk_words.append((names, 4))
            fn.inst("bar.sync", 0, comment="every group read before the rows overwrite it")
            for v in range(row_vecs):
                vector = self._row_vector(words, list(out.regs), chunk_words, v)
                own_vector(0, row_vecs, v)
                fn.inst("st.shared.v4.u32", Addr(own), Vec(tuple(vector)), comment=f"row side, vector {v}")
            fn.inst("bar.sync", 0, comment="every group's rows are in shared memory")
            fn.banner(f"row side out: {row_vecs} pass(es)")
            passes(row_vecs, 0, r.row_ptr, False, "r")
        # No barrier before the next round. A pass touches shared vector i only from thread
        # i % block, so the next round's first pass writes what this thread alone has read
        # in the passes above; the other threads' accesses (each to its own group's
        # vectors) all came before this round's third barrier.
        fn.inst("add.u64", g0, g0, step)
        fn.inst("bra.uni", top)
