"""The chunk phase of the tile kernel (:class:`~ptxgen.kernels.fastcat_tile.FastcatTile`)
that moves the bytes: backward, the gathers (tile -> every chunk, 16-byte stores);
forward, the scatters (every chunk -> tile, 16-byte loads through registers, or staged
with cp.async); and, both ways, the chunk vectors that straddle a tile's range, granule
by granule. Built on the table, ranges and walks of :mod:`.tile_chunks`.
"""

from __future__ import annotations

from ..ptxtypes import Addr, Label
from .tile_chunks import _TABLE_ENTRY, TileChunks
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
    chunk_wide: bool

    def _gather_chunks(self, stage: str) -> None:
        """Backward: write every chunk's bytes of this tile, 16-byte stores; the vectors the
        tile holds only part of are left to :meth:`_edge_pass`, after every chunk."""
        e = self.e
        e.reg("u32", "c_base")
        e("mov.u32", "c_base", 0, why="the vectors dealt out so far")
        for k in range(self.chunks):
            done = self._chunk_range(k)
            e.reg("u32", "j", "s", "rem")
            e.reg("u64", "a")
            e.reg("s64", "d", "dm")
            e.reg("pred", "vfull")
            loop, nxt = e.label(f"C{k}_LOOP"), e.label(f"C{k}_NEXT")
            out = e.data("o", 16)
            self._first_vector("j")
            e.place(loop)
            e("setp.ge.u32", "pr", "j", "c_nvec")
            e.bra(done, guard="pr")
            self._vector_at("j")
            e.bra(nxt, guard="vfull", neg=True, why="an edge vector: the edge pass writes it")
            self._source_of("d", "s", "rem", stage)
            self._gather_vector(out)
            e("st.global.v4.u32", e.at("a"), out)
            e.place(nxt)
            e("add.u32", "j", "j", self.block_size)
            e.bra(loop)
            e.place(done)
            e("add.u32", "c_base", "c_base", "c_nvec")
        self._edge_pass(stage)

    def _vector_at(self, j: str) -> None:
        """%a = the absolute address of the chunk's vector %j, %d = its first byte's place
        in the chunk, %vfull = all 16 of its bytes are this tile's."""
        e = self.e
        e("mul.wide.u32", "tmp64", j, 16)
        e("add.u64", "a", "c_vstart", "tmp64", why="the absolute 16-byte vector")
        e("sub.s64", "d", "a", "c_ptr")
        e("setp.ge.s64", "vfull", "d", "c_dlo")
        e("add.s64", "tmp64", "d", 16)
        e("setp.le.and.s64", "vfull", "tmp64", "c_dhi", "vfull", why="all 16 bytes are this tile's")

    def _edge_pass(self, stage: str) -> None:
        """The vectors this tile holds only part of, at most two a chunk (its first and its
        last of the tile), all at once after every chunk's loop: 16 / granule threads to an
        edge vector, one a granule. Edge e (chunk e // 2, its last where e is odd) goes to
        threads e * L .. e * L + L - 1, each moving the granule at byte ``edge_b`` if this
        tile holds it, the chunk read from the table by index. Backward the granule goes
        from the tile to the chunk; forward (through cp.async, where every edge vector
        inside the chunk was staged whole with the others) from the staging area into the
        tile. Written in the chunks' loops instead, each edge vector was a walk of dependent
        granule steps by one lane while its warp waited, a fifth of a byte-granule split's
        instructions; one pass of it by the first lanes made the first warp the tile's last
        (lab/README.md)."""
        e, g, B = self.e, self.granule, self.block_size
        kind = _ACCESS[g][0]
        lanes = 16 // g  # threads an edge vector: a power of two; 2 * MAX_CHUNKS edges in all
        backward = self.direction == "backward"
        self._chunk_regs()
        e.reg("u32", "edge_v", "edge_at", "edge_b", "j", "s", "rem")
        e.reg("u64", "a", "am")
        e.reg("s64", "d", "dm")
        e.reg("pred", "vfull", "vin", "edge_last")
        regs = e.data("pg", g)
        loop, nxt, done = e.label("EDGE_LOOP"), e.label("EDGE_NEXT"), e.label("EDGES_DONE")
        e.note(f"the edge vectors: {lanes} thread(s) each, a granule a thread")
        e(
            "shr.u32",
            "edge_v",
            "thread",
            lanes.bit_length() - 1,
            why="edge vector e: chunk e / 2, first or last",
        )
        e("and.b32", "edge_b", "thread", lanes - 1)
        if g > 1:
            e("shl.b32", "edge_b", "edge_b", g.bit_length() - 1, why="the byte of its granule it moves")
        e.place(loop)
        e("setp.ge.u32", "pr", "edge_v", 2 * self.chunks)
        e.bra(done, guard="pr")
        e("shr.u32", "edge_at", "edge_v", 1)
        e("mad.lo.u32", "edge_at", "edge_at", _TABLE_ENTRY, "ctab", why="chunk e / 2's entry of the table")
        e("ld.shared.v2.u32", ["c_nvec", "c_jump"], e.at("edge_at", 48))
        e("and.b32", "j", "edge_v", 1)
        e("setp.ne.u32", "edge_last", "j", 0)
        e("setp.eq.u32", "pr", "c_nvec", 0)
        e.bra(nxt, guard="pr", why="nothing of this chunk here")
        e("setp.eq.and.u32", "pr", "c_nvec", 1, "edge_last")
        e.bra(nxt, guard="pr", why="one vector: the first edge's")
        e("sub.u32", "j", "c_nvec", 1)
        e("selp.u32", "j", "j", 0, "edge_last", why="the chunk's last vector of the tile, or its first")
        e("ld.shared.v2.s64", ["c_RW", "c_dlo"], e.at("edge_at"))
        e("ld.shared.v2.u64", ["c_vstart", "c_lim"], e.at("edge_at", 16))
        e("ld.shared.s64", "c_dhi", e.at("edge_at", 32))
        e("ld.shared.u64", "c_ptr", e.at("edge_at", 40))
        e("ld.shared.f32", "c_rcp", e.at("edge_at", 56))
        e("ld.shared.u32", "c_off", e.at("edge_at", 60))
        e("sub.u32", "c_w", "pitch", "c_jump", why="c_jump is pitch - c_w")
        self._vector_at("j")
        e.bra(nxt, guard="vfull", why="whole in this tile: the chunk's loop moved it")
        if not backward:
            e("setp.ge.s64", "vin", "d", 0)
            e("add.s64", "tmp64", "d", 16)
            e("setp.le.and.s64", "vin", "tmp64", "c_lim", "vin")
            e.bra(nxt, guard="vin", neg=True, why="an end of the array: loaded granule by granule already")
        e("cvt.u64.u32", "tmp64", "edge_b")
        e("add.s64", "dm", "d", "tmp64")
        if backward:
            e("add.u64", "am", "a", "tmp64", why="the granule's address in the chunk")
        e("setp.ge.s64", "pr", "dm", "c_dlo")
        e("setp.lt.and.s64", "pr", "dm", "c_dhi", "pr")
        e.bra(nxt, guard="pr", neg=True, why="this granule is another tile's")
        self._source_of("dm", "s", "rem", stage)
        if backward:
            e(f"ld.shared.{kind}", regs, e.at("s"))
            e(f"st.global.{kind}", e.at("am"), regs)
        else:
            e.reg("u32", "st_addr")
            e("ld.shared.u32", "st_addr", e.at("edge_at", 64), why="where the chunk's staged vectors start")
            e("mad.lo.u32", "st_addr", "j", 16, "st_addr")
            e("add.u32", "st_addr", "st_addr", "edge_b")
            e(f"ld.shared.{kind}", regs, e.at("st_addr"))
            e(f"st.shared.{kind}", e.at("s"), regs)
        e.place(nxt)
        e("add.u32", "edge_v", "edge_v", B // lanes, why="the next edge vector for these threads")
        e.bra(loop)
        e.place(done)

    def _gather_vector(self, out: list[str]) -> None:
        """A chunk vector from the tile: at a byte granule, of a chunk at least 16 bytes
        wide, as two windows of words (:meth:`_word_gather`); otherwise granule by
        granule (the two-piece walk where the chunk is that wide, else carried)."""
        e, g = self.e, self.granule
        if g == 16:
            self._granule_walk("s", "rem", lambda m, addr: e("ld.shared.v4.u32", out, addr))
            return
        if self.word_windows and self.chunk_wide:
            self._word_gather(out)
            return
        self._gather_granules(out)

    def _word_gather(self, out: list[str]) -> None:
        """A byte-granule chunk vector whose bytes lie in at most two rows' pieces (its
        chunk at least 16 bytes wide): its first ``left = c_w - rem`` bytes start at %s,
        the rest at ``%s + c_jump + left``. Each piece is read as a window of 16 bytes,
        five aligned words put in place by four funnel shifts, and the two windows are
        merged word by word under a mask of the second piece's bytes. Only the threads
        whose vector has a second piece read its window, past a branch: reading the first
        window again in every thread (as this did before, so that no warp ran two paths)
        cost 5 more shared loads a vector, 4-way conflicted, and most vectors of a wide
        chunk lie in one piece. A broadcast read instead, as the row gather does
        (``TileRowGather._gather_rows``), keeps one more register live, and this kernel
        then spills at 48. That is 5 to 10 shared loads a vector where the byte walk made
        16 (lab/README.md). A window's five words reach up to 3 bytes past the vector's
        last byte, which for a vector the tile holds whole is the tile's last at the
        latest: ``FastcatTile`` gives the tile's array 16 bytes more."""
        e = self.e
        e.reg("u32", "left", "wb_base")
        e.reg("pred", "two_pieces")
        one = e.label("WG_ONE_PIECE")
        second = e.data("wb", 16)
        e("sub.u32", "left", "c_w", "rem", why="bytes of this row's piece from the vector's first on")
        self._window(out, "s")
        e("setp.lt.u32", "two_pieces", "left", 16)
        e.bra(one, guard="two_pieces", neg=True, why="one piece: no second window")
        e("add.u32", "wb_base", "s", "c_jump", why="where byte 0 would be in the next row's piece")
        self._window(second, "wb_base")
        self._merge_from(out, second, "left")
        e.place(one)

    def _merge_windows(self, out: list[str], first: str, second_base: str, left: str) -> None:
        """%out = 16 bytes: the first %left (at most 16) from the shared window at %first,
        the rest from the window at %second_base (where byte 0 of the vector would be in
        the second piece, or any readable address where there is none), merged under a
        mask of the second piece's bytes (:meth:`_merge_from`)."""
        second = self.e.data("wb", 16)
        self._window(out, first)
        self._window(second, second_base)
        self._merge_from(out, second, left)

    def _window(self, regs: list[str], base: str) -> None:
        """%regs = the 16 shared bytes from %base, a multiple of the granule. Below a
        4-byte granule, at any alignment: five aligned words and four funnel shifts,
        reading up to 19 bytes past %base, never before it. At a granule of 4, 8 or 16
        bytes the window is that aligned: four words, two pairs or one vector read straight
        into %regs, and no shifts (the row gather at such granules: a third fewer shared wavefronts a window,
        and 13 fewer instructions a vector with :meth:`_merge_from`'s word choice)."""
        e, g = self.e, self.granule
        if g >= 4:
            for i in range(0, 4, g // 4):
                part = regs[i : i + g // 4]
                kind = {1: "u32", 2: "v2.u32", 4: "v4.u32"}[len(part)]
                why = "the window is aligned to the granule: no shifts" if i == 0 else ""
                e(f"ld.shared.{kind}", part, e.at(base, 4 * i), why=why)
            return
        e.reg("b32", *[f"w{i}" for i in range(5)])
        e.reg("u32", "w_at", "w_sh")
        e("and.b32", "w_at", base, -4, why="the aligned word holding the window's byte 0")
        e("and.b32", "w_sh", base, 3)
        e("shl.b32", "w_sh", "w_sh", 3, why="... and that byte's bit in it")
        for i in range(5):
            e("ld.shared.u32", f"w{i}", e.at("w_at", 4 * i))
        for j in range(4):
            why = "window word j" if j == 0 else ""
            e("shf.r.clamp.b32", regs[j], f"w{j}", f"w{j + 1}", "w_sh", why=why)

    def _merge_from(self, out: list[str], other: list[str], left: str) -> None:
        """%out's bytes from byte %left on replaced by %other's, word by word under a mask
        (none where %left is 16 or more). At a granule of 4 bytes or more %left is whole
        words, and each word is one or the other."""
        e = self.e
        if self.granule >= 4:
            for j in range(4):
                e("setp.gt.u32", "pr", left, 4 * j, why="word j is the first piece's" if j == 0 else "")
                e("selp.b32", out[j], out[j], other[j], "pr")
            return
        e.reg("u32", "w_bits", "w_mask", "w_diff")
        e("shl.b32", "w_bits", left, 3, why="bits of word 0 from the first piece")
        for j in range(4):
            if j:
                why = "bits of word j from the first piece" if j == 1 else ""
                e("max.u32", "w_bits", "w_bits", 32, why=why)
                e("sub.u32", "w_bits", "w_bits", 32)
            e("shl.b32", "w_mask", -1, "w_bits", why="the second piece's bytes (none past 32 bits)")
            e("xor.b32", "w_diff", out[j], other[j])
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

    def _load_edge_vector(self, stage: str) -> None:
        """Forward: a chunk vector that straddles the tile's range and cannot be loaded whole
        (through registers; through cp.async, the array's end vectors), granule by granule,
        each only if its bytes go to this tile."""
        e = self.e
        kind = _ACCESS[self.granule][0]
        regs = e.data("pg", self.granule)

        def access() -> None:
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
                self._load_edge_vector(stage)
                e.place(nxt)
            e("add.u32", "j0", "j0", U * B)
            e.bra(loop)
            e.place(done)
            e("add.u32", "c_base", "c_base", "c_nvec")

    def _staged_vector(self, done: Label) -> None:
        """Chunk vector %j of this tile, for the cp.async staging passes: to ``done`` past
        the chunk's last; else %a its address, %d its offset in the chunk, %vin whether
        all 16 bytes lie inside the chunk, %st_addr where it is staged (16 * j from %st_off)."""
        e = self.e
        e("setp.ge.u32", "pr", "j", "c_nvec")
        e.bra(done, guard="pr")
        e("mul.wide.u32", "tmp64", "j", 16)
        e("add.u64", "a", "c_vstart", "tmp64")
        e("sub.s64", "d", "a", "c_ptr")
        e("setp.ge.s64", "vin", "d", 0)
        e("add.s64", "tmp64", "d", 16)
        e("setp.le.and.s64", "vin", "tmp64", "c_lim", "vin", why="all 16 bytes inside the chunk")
        e("mad.lo.u32", "st_addr", "j", 16, "st_off")

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
                self._staged_vector(done)
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
                    self._load_edge_vector(stage)
                else:
                    e.bra(nxt, guard="vin", neg=True, why="edge vectors of the array went to the tile")
                    e("setp.ge.s64", "vfull", "d", "c_dlo")
                    e("add.s64", "tmp64", "d", 16)
                    e("setp.le.and.s64", "vfull", "tmp64", "c_dhi", "vfull", why="all 16 bytes for this tile")
                    e.bra(nxt, guard="vfull", neg=True, why="an edge vector: the edge pass places it")
                    vals = e.data("x0", 16)
                    e("ld.shared.v4.u32", vals, e.at("st_addr"))
                    self._source_of("d", "s", "rem", stage)
                    self._scatter_vector(vals)
                e.place(nxt)
                e("add.u32", "j", "j", B)
                e.bra(loop)
                e.place(done)
                if phase == "issue":  # read by the edge pass, after the barrier below
                    e("setp.eq.u32", "pr", "thread", 0)
                    e("st.shared.u32", e.at("ctab", _TABLE_ENTRY * k + 64), "st_off", guard="pr")
                e("mad.lo.u32", "st_off", "c_nvec", 16, "st_off")
                e("add.u32", "c_base", "c_base", "c_nvec")
            if phase == "issue":
                e("cp.async.commit_group")
                e("cp.async.wait_group", 0, why="this thread's copies have landed")
                e("bar.sync", 0, why="... and everyone's")
        self._edge_pass(stage)

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
