"""The chunk phase of the tile kernel (:class:`~ptxgen.kernels.fastcat_tile.FastcatTile`)
that moves the bytes: backward, the gathers (tile -> every chunk, 16-byte stores);
forward, the scatters (every chunk -> tile, 16-byte loads through registers, or staged
with cp.async); and, both ways, the chunk vectors that straddle a tile's range, granule
by granule. Built on the table, ranges and walks of :mod:`.tile_chunks`.
"""

from __future__ import annotations

from ..ptxtypes import Addr
from .tile_chunks import TileChunks
from .tile_emitter import _ACCESS

__all__ = ["TileGatherScatter"]


class TileGatherScatter(TileChunks):
    """The gathers and scatters of :class:`~ptxgen.kernels.fastcat_tile.FastcatTile` (a
    mixin, over :class:`~ptxgen.kernels.tile_chunks.TileChunks`).

    Uses only what ``FastcatTile`` sets: besides what ``TileChunks`` uses, the attribute
    ``unroll``, and the registers ``staging`` (forward through cp.async) and the scratch
    ``tmp64``, ``pr`` that its prologue and main loop declare.
    """

    unroll: int
    word_windows: bool

    def _gather_chunks(self, stage: str) -> None:
        """Backward: write every chunk's bytes of this tile, 16-byte stores."""
        e = self.e
        e.reg("u32", "c_base")
        e("mov.u32", "c_base", 0, why="the vectors dealt out so far")
        for k in range(self.chunks):
            done = self._chunk_range(k)
            e.reg("u32", "j", "s", "rem")
            e.reg("u64", "a")
            e.reg("s64", "d", "dm")
            e.reg("pred", "vfull")
            loop, partial, nxt = e.label(f"C{k}_LOOP"), e.label(f"C{k}_PARTIAL"), e.label(f"C{k}_NEXT")
            out = e.data("o", 16)
            self._first_vector("j")
            e.place(loop)
            e("setp.ge.u32", "pr", "j", "c_nvec")
            e.bra(done, guard="pr")
            e("mul.wide.u32", "tmp64", "j", 16)
            e("add.u64", "a", "c_vstart", "tmp64", why="the absolute 16-byte vector this thread writes")
            e("sub.s64", "d", "a", "c_ptr")
            e("setp.ge.s64", "vfull", "d", "c_dlo")
            e("add.s64", "tmp64", "d", 16)
            e("setp.le.and.s64", "vfull", "tmp64", "c_dhi", "vfull", why="all 16 bytes come from this tile")
            e.bra(partial, guard="vfull", neg=True)
            self._source_of("d", "s", "rem", stage)
            self._gather_vector(out)
            e("st.global.v4.u32", e.at("a"), out)
            e.bra(nxt)
            e.place(partial)
            self._partial_chunk_vector(store=True, stage=stage)
            e.place(nxt)
            e("add.u32", "j", "j", self.block_size)
            e.bra(loop)
            e.place(done)
            e("add.u32", "c_base", "c_base", "c_nvec")

    def _gather_vector(self, out: list[str]) -> None:
        """A chunk vector from the tile: at a byte granule with every chunk at least 16
        bytes wide, as two windows of words (:meth:`_word_gather`); otherwise granule by
        granule, carrying into the next row's piece."""
        e, g = self.e, self.granule
        if g == 16:
            self._granule_walk("s", "rem", lambda m, addr: e("ld.shared.v4.u32", out, addr))
            return
        if self.word_windows:
            self._word_gather(out)
            return
        self._gather_granules(out)

    def _word_gather(self, out: list[str]) -> None:
        """A byte-granule chunk vector whose bytes lie in at most two rows' pieces (every
        chunk at least 16 bytes wide): its first ``left = c_w - rem`` bytes start at %s,
        the rest at ``%s + c_jump + left``. Each piece is read as a window of 16 bytes,
        five aligned words put in place by four funnel shifts, and the two windows are
        merged word by word under a mask of the second piece's bytes. Every thread runs
        the same code, one piece or two (a one-piece vector reads its window twice), so
        no warp runs two paths. That is 10 shared loads a vector where the byte walk made
        16, each conflicted alike (lanes 16 bytes apart), and about half its instructions
        (lab/README.md). The windows read up to 16 bytes before and 19 after the bytes of
        the tile, inside the padding ``FastcatTile`` gives the tile's array."""
        e = self.e
        second = e.data("wb", 16)
        e.reg("u32", "left", "wb_base", "w_at", "w_sh", "w_bits", "w_mask", "w_diff")
        e.reg("b32", *[f"w{i}" for i in range(5)])
        e.reg("pred", "two_pieces")
        e("sub.u32", "left", "c_w", "rem", why="bytes of this row's piece from the vector's first on")
        e("setp.lt.u32", "two_pieces", "left", 16)
        e("add.u32", "wb_base", "s", "c_jump", why="where byte 0 would be in the next row's piece")
        e("selp.u32", "wb_base", "wb_base", "s", "two_pieces", why="one piece: read the first window again")
        for base, regs in (("s", out), ("wb_base", second)):
            e("and.b32", "w_at", base, -4, why="the aligned word holding the window's byte 0")
            e("and.b32", "w_sh", base, 3)
            e("shl.b32", "w_sh", "w_sh", 3, why="... and that byte's bit in it")
            for i in range(5):
                e("ld.shared.u32", f"w{i}", e.at("w_at", 4 * i))
            for j in range(4):
                why = "window word j" if j == 0 else ""
                e("shf.r.clamp.b32", regs[j], f"w{j}", f"w{j + 1}", "w_sh", why=why)
        e("shl.b32", "w_bits", "left", 3, why="bits of word 0 from the first piece")
        for j in range(4):
            if j:
                why = "bits of word j from the first piece" if j == 1 else ""
                e("max.u32", "w_bits", "w_bits", 32, why=why)
                e("sub.u32", "w_bits", "w_bits", 32)
            e("shl.b32", "w_mask", -1, "w_bits", why="the second piece's bytes (none past 32 bits)")
            e("xor.b32", "w_diff", out[j], second[j])
            e("and.b32", "w_diff", "w_diff", "w_mask")
            e("xor.b32", out[j], out[j], "w_diff", why="first piece's bytes, then the second's")

    def _gather_granules(self, out: list[str]) -> None:
        """A chunk vector granule by granule, carrying into the next row's piece."""
        e, g = self.e, self.granule
        if g == 8:
            self._granule_walk(
                "s", "rem", lambda m, addr: e("ld.shared.v2.u32", out[2 * m : 2 * m + 2], addr)
            )
        elif g == 4:
            self._granule_walk("s", "rem", lambda m, addr: e("ld.shared.u32", out[m], addr))
        elif g == 2:
            halves = [f"h{m}" for m in range(8)]
            e.reg("b16", *halves)
            self._granule_walk("s", "rem", lambda m, addr: e("ld.shared.b16", halves[m], addr))
            for w in range(4):
                e("mov.b32", out[w], halves[2 * w : 2 * w + 2])
        else:
            bytes_ = [f"by{m}" for m in range(16)]
            e.reg("b32", *bytes_)
            self._granule_walk("s", "rem", lambda m, addr: e("ld.shared.u8", bytes_[m], addr))
            for w in range(4):
                e.pack_bytes(out[w], bytes_[4 * w : 4 * w + 4])

    def _partial_gather_vector(self, stage: str) -> None:
        """Backward, wide chunks: a chunk vector of which this tile holds a run. The run's
        granules are read from the tile (the rest left out), bytes packed into words
        (four live registers, not sixteen), then stored to the chunk granule by granule."""
        e, g = self.e, self.granule
        kind = _ACCESS[g][0]
        out = e.data("o", 16)
        halves = [f"h{m}" for m in range(8)]
        bytes_ = [f"by{m}" for m in range(16)]
        if g == 2:
            e.reg("b16", *halves)
        if g == 1:
            e.reg("b32", *bytes_)

        def load(m: int, shared: Addr, _: Addr, guard: str) -> None:
            if g == 8:
                e("ld.shared.v2.u32", out[m // 4 : m // 4 + 2], shared, guard=guard)
            elif g == 4:
                e("ld.shared.u32", out[m // 4], shared, guard=guard)
            elif g == 2:
                e("ld.shared.b16", halves[m // 2], shared, guard=guard)
            else:
                e("ld.shared.u8", bytes_[m], shared, guard=guard)

        if g == 1:
            self._owned_bytes_clamped(stage, bytes_)
        else:
            self._owned_granules(stage, load)
        if g == 1:
            for w in range(4):
                e.pack_bytes(out[w], bytes_[4 * w : 4 * w + 4])
            e.reg("b32", "og_part")

        def store(m: int, _: Addr, global_: Addr, guard: str) -> None:
            if g == 8:
                e(f"st.global.{kind}", global_, out[m // 4 : m // 4 + 2], guard=guard)
            elif g == 4:
                e(f"st.global.{kind}", global_, out[m // 4], guard=guard)
            elif g == 2:
                e(f"st.global.{kind}", global_, halves[m // 2], guard=guard)
            elif m % 4:
                e("shr.b32", "og_part", out[m // 4], 8 * (m % 4), why="byte m of the vector, lowest")
                e(f"st.global.{kind}", global_, "og_part", guard=guard)
            else:
                e(f"st.global.{kind}", global_, out[m // 4], guard=guard)

        self._owned_granules(stage, store, place=False)

    def _partial_chunk_vector(self, *, store: bool, stage: str) -> None:
        """A chunk vector that straddles the tile's range: granule by granule, each only if
        its bytes come from (backward) / go to (forward) this tile."""
        e = self.e
        kind = _ACCESS[self.granule][0]
        regs = e.data("pg", self.granule)
        if store and self.wide_chunks and self.granule < 16:
            self._partial_gather_vector(stage)
            return

        def access() -> None:
            if store:
                e(f"ld.shared.{kind}", regs, e.at("s"))
                e(f"st.global.{kind}", e.at("am"), regs)
            else:
                e(f"ld.global.nc.{kind}", regs, e.at("am"))
                e(f"st.shared.{kind}", e.at("s"), regs)

        self._owned_walk(stage, access)

    def _scatter_chunks(self, stage: str) -> None:
        """Forward: read every chunk's bytes for this tile (16-byte loads, `unroll` in
        flight) and place them in the shared tile."""
        e, U, B = self.e, self.unroll, self.block_size
        e.reg("u32", "c_base")
        e("mov.u32", "c_base", 0, why="the vectors dealt out so far")
        for k in range(self.chunks):
            done = self._chunk_range(k)
            e.reg("u32", "j0", "j", "s", "rem")
            e.reg("u64", "a")
            e.reg("s64", "d", "dm")
            loop = e.label(f"C{k}_LOOP")
            self._first_vector("j0")
            e.place(loop)
            e("setp.ge.u32", "pr", "j0", "c_nvec")
            e.bra(done, guard="pr")
            vals = []
            for u in range(U):
                e.reg("u64", f"ca_{u}")
                e.reg("s64", f"cd_{u}")
                e.reg("pred", f"cvalid_{u}", f"cfull_{u}")
                e("add.u32", "j", "j0", u * B)
                e("setp.lt.u32", f"cvalid_{u}", "j", "c_nvec")
                e("mul.wide.u32", "tmp64", "j", 16)
                e("add.u64", f"ca_{u}", "c_vstart", "tmp64")
                e("sub.s64", f"cd_{u}", f"ca_{u}", "c_ptr")
                e("setp.ge.and.s64", f"cfull_{u}", f"cd_{u}", "c_dlo", f"cvalid_{u}")
                e("add.s64", "tmp64", f"cd_{u}", 16)
                e("setp.le.and.s64", f"cfull_{u}", "tmp64", "c_dhi", f"cfull_{u}")
                vals.append(e.data(f"x{u}", 16))
                e("ld.global.nc.v4.u32", vals[u], e.at(f"ca_{u}"), guard=f"cfull_{u}", why="all loads first")
            for u in range(U):
                part, nxt = e.label(f"C{k}_PART"), e.label(f"C{k}_NEXT")
                e.bra(part, guard=f"cfull_{u}", neg=True)
                e("mov.s64", "d", f"cd_{u}")
                self._source_of("d", "s", "rem", stage)
                self._scatter_vector(vals[u])
                e.bra(nxt)
                e.place(part)
                e.bra(nxt, guard=f"cvalid_{u}", neg=True)
                e("mov.s64", "d", f"cd_{u}")
                e("mov.u64", "a", f"ca_{u}")
                self._partial_chunk_vector(store=False, stage=stage)
                e.place(nxt)
            e("add.u32", "j0", "j0", U * B)
            e.bra(loop)
            e.place(done)
            e("add.u32", "c_base", "c_base", "c_nvec")

    def _scatter_chunks_async(self, stage: str) -> None:
        """Forward on sm_80+: first every chunk's vectors of this tile go to a staging area
        with cp.async (all in flight at once, no registers held), then they are scattered
        from there into the tile. A vector only part of which this tile holds (at the
        tile's ends) is staged whole too, as long as it lies inside the chunk: loaded a
        granule at a time from global memory instead, a thread waited out one load's
        latency per granule, and its CTA with it. Only the vectors at the array's ends
        are loaded granule by granule, once an op."""
        e, B = self.e, self.block_size
        e.reg("u32", "j", "s", "rem", "st_off", "st_addr")
        e.reg("u64", "a")
        e.reg("s64", "d", "dm")
        e.reg("pred", "vfull", "vin")
        e.reg("u32", "c_base")
        for phase in ("issue", "scatter"):
            e("mov.u32", "st_off", "staging", why="chunk k's vectors follow chunk k-1's")
            e("mov.u32", "c_base", 0, why="the vectors dealt out so far")
            for k in range(self.chunks):
                done = self._chunk_range(k)
                loop, nxt = e.label(f"A{k}_LOOP"), e.label(f"A{k}_NEXT")
                self._first_vector("j")
                e.place(loop)
                e("setp.ge.u32", "pr", "j", "c_nvec")
                e.bra(done, guard="pr")
                e("mul.wide.u32", "tmp64", "j", 16)
                e("add.u64", "a", "c_vstart", "tmp64")
                e("sub.s64", "d", "a", "c_ptr")
                e("setp.ge.s64", "vin", "d", 0)
                e("add.s64", "tmp64", "d", 16)
                e("setp.le.and.s64", "vin", "tmp64", "c_lim", "vin", why="all 16 bytes inside the chunk")
                e("mad.lo.u32", "st_addr", "j", 16, "st_off")
                if phase == "issue":
                    part = e.label(f"A{k}_PART")
                    e.bra(part, guard="vin", neg=True)
                    e(
                        "cp.async.cg.shared.global",
                        e.at("st_addr"),
                        e.at("a"),
                        16,
                        why="in flight; no register held",
                    )
                    e.bra(nxt)
                    e.place(part)
                    self._partial_chunk_vector(store=False, stage=stage)
                else:
                    e.bra(nxt, guard="vin", neg=True, why="edge vectors of the array went to the tile")
                    vals = e.data("x0", 16)
                    e("ld.shared.v4.u32", vals, e.at("st_addr"))
                    e("setp.ge.s64", "vfull", "d", "c_dlo")
                    e("add.s64", "tmp64", "d", 16)
                    e("setp.le.and.s64", "vfull", "tmp64", "c_dhi", "vfull", why="all 16 bytes for this tile")
                    edge = e.label(f"A{k}_EDGE")
                    e.bra(edge, guard="vfull", neg=True)
                    self._source_of("d", "s", "rem", stage)
                    self._scatter_vector(vals)
                    e.bra(nxt)
                    e.place(edge)
                    self._scatter_owned_granules(vals, stage)
                e.place(nxt)
                e("add.u32", "j", "j", B)
                e.bra(loop)
                e.place(done)
                e("mad.lo.u32", "st_off", "c_nvec", 16, "st_off")
                e("add.u32", "c_base", "c_base", "c_nvec")
            if phase == "issue":
                e("cp.async.commit_group")
                e("cp.async.wait_group", 0, why="this thread's copies have landed")
                e("bar.sync", 0, why="... and everyone's")

    def _scatter_owned_granules(self, vals: list[str], stage: str) -> None:
        """A staged vector of which this tile holds only part: the granules whose bytes
        are in the tile's range [c_dlo, c_dhi) go to the tile; the vector's registers
        shift down a granule each round, so granule m is always in the lowest."""
        e, g = self.e, self.granule
        kind = _ACCESS[g][0]
        regs = e.data("pg", g)
        e.reg("b16", "og_high")
        if self.wide_chunks and g < 16:

            def each(m: int, shared: Addr, global_: Addr, guard: str) -> None:
                word = vals[m // 4]
                if g == 8:
                    e(f"st.shared.{kind}", shared, vals[m // 4 : m // 4 + 2], guard=guard)
                elif g == 2:  # the word's halves, unpacked at its first
                    e.reg("b16", "og_low")
                    if m % 4 == 0:
                        e("mov.b32", ["og_low", "og_high"], word)
                    e(f"st.shared.{kind}", shared, "og_high" if m % 4 else "og_low", guard=guard)
                elif m % 4:  # a byte of the word: shifted down, stored from a b32
                    e.reg("b32", "og_part")
                    e("shr.b32", "og_part", word, 8 * (m % 4))
                    e(f"st.shared.{kind}", shared, "og_part", guard=guard)
                else:
                    e(f"st.shared.{kind}", shared, word, guard=guard)

            self._owned_granules(stage, each)
            return

        def access() -> None:
            if g == 16:
                e(f"st.shared.{kind}", e.at("s"), vals)
            elif g == 8:
                e(f"st.shared.{kind}", e.at("s"), vals[:2])
            elif g == 2:
                e("mov.b32", [regs[0], "og_high"], vals[0], why="the lowest granule")
                e(f"st.shared.{kind}", e.at("s"), regs[0])
            else:
                e(f"st.shared.{kind}", e.at("s"), vals[0])

        def shift() -> None:
            if g == 8:
                e("mov.b32", vals[0], vals[2], why="the next granule down")
                e("mov.b32", vals[1], vals[3])
            elif g == 4:
                for i in range(3):
                    e("mov.b32", vals[i], vals[i + 1], why="the next granule down" if i == 0 else "")
            elif g < 4:
                for i in range(3):
                    why = "the next granule down" if i == 0 else ""
                    e("shf.r.clamp.b32", vals[i], vals[i], vals[i + 1], 8 * g, why=why)
                e("shr.b32", vals[3], vals[3], 8 * g)

        self._owned_walk(stage, access, shift)

    def _scatter_vector(self, val: list[str]) -> None:
        """A chunk vector into the tile, granule by granule, carrying into the next row's piece."""
        e, g = self.e, self.granule
        if g == 16:
            self._granule_walk("s", "rem", lambda m, addr: e("st.shared.v4.u32", addr, val))
            return
        self._scatter_granules(val)

    def _scatter_granules(self, val: list[str]) -> None:
        """A chunk vector granule by granule into the tile, carrying into the next row's piece."""
        e, g = self.e, self.granule
        if g == 8:
            self._granule_walk(
                "s", "rem", lambda m, addr: e("st.shared.v2.u32", addr, val[2 * m : 2 * m + 2])
            )
        elif g == 4:
            self._granule_walk("s", "rem", lambda m, addr: e("st.shared.u32", addr, val[m]))
        elif g == 2:
            halves = [f"h{m}" for m in range(8)]
            e.reg("b16", *halves)
            for w in range(4):
                e("mov.b32", halves[2 * w : 2 * w + 2], val[w])
            self._granule_walk("s", "rem", lambda m, addr: e("st.shared.b16", addr, halves[m]))
        else:
            e.reg("b32", "byte_w")

            def one(m: int, addr: Addr) -> None:
                if m % 4:
                    e("shr.b32", "byte_w", val[m // 4], 8 * (m % 4))
                    e("st.shared.u8", addr, "byte_w")
                else:
                    e("st.shared.u8", addr, val[m // 4])

            self._granule_walk("s", "rem", one)
