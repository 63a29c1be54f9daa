"""The forward tile's row-side gather (:class:`~ptxgen.kernels.fastcat_tile.FastcatTile`
with ``row_gather=True``): every chunk's vectors of a tile are staged with cp.async as
usual, and then each 16-byte vector of the row side is read straight out of the staging
area as two windows of aligned words (:meth:`TileGatherScatter._merge_windows`) and
stored, with no tile image in between. The scatter it replaces stored a chunk vector into
the tile a granule at a time (16 byte stores at a byte granule, each 4-way conflicted at
the lanes' 16-byte stride), and the tile was read back for the row stores after one more
barrier.

Where it applies: forward, through cp.async, ``whole_rows`` (the row's chunks cover it),
which :class:`FastcatTile` checks. Where every chunk is at least 16 bytes wide, a row
vector's bytes lie in at most two chunk pieces, and every thread reads two windows; with
a narrower chunk a vector may span more, and each reads a window a piece, in a loop.
"""

from __future__ import annotations

from .tile_chunks import _OFFSET_AT, _TABLE_ENTRY
from .tile_emitter import _ACCESS
from .tile_gather_scatter import TileGatherScatter

__all__ = ["ROW_GATHER_PAD", "TileRowGather"]

# The staging area's padding before and after its vectors: a window reads up to 19
# bytes from its base, and a second window's base lies up to 15 bytes before the first
# staged byte of its piece (the first piece's bytes are the vector's first).
ROW_GATHER_PAD = 32
# The row gather's part of a chunk's table entry, written in the staging pass: where
# chunk byte 0 of the tile's first row would be staged, the chunk's offset and width.
_BASE_AT = 64


class TileRowGather(TileGatherScatter):
    """The staging pass and the row-side gather of a forward tile (a mixin, over
    :class:`~ptxgen.kernels.tile_gather_scatter.TileGatherScatter`).

    Uses only what ``FastcatTile`` sets besides what its bases use: the attributes
    ``tile_bytes``, ``unroll``, ``staging_without_table`` and ``searched_locate``, the
    register ``staging``
    (the first staged byte, past the padding), :meth:`_next_row_state` (the tile's end,
    ``R1`` and ``C1``), and :meth:`_row_vector` and :meth:`_straddles` of the row side.
    """

    tile_bytes: int
    staging_without_table: bool
    searched_locate: bool

    def _stage_for_rows(self) -> None:
        """Every chunk vector of this tile into the staging area, chunk after chunk, each
        at 16 * its index from its chunk's start there: whole with cp.async where it lies
        inside the chunk, else (the array's ends) granule by granule. Thread 0 writes each
        chunk's staging base, offset and width into its table entry for the gather.

        Where ``staging_without_table`` (granules under 16 bytes, at most
        ``TABLE_FREE_CHUNKS`` chunks), each thread works out chunk k's range itself, just
        before staging it, where other kernels read it from a table warp 0 fills: the
        table's barrier held every CTA's first load back until warp 0 had placed every
        chunk, which cost about a microsecond a launch (the first wave and the tail).
        Without it the concats where a tile runs went from 0.978-0.981 of the flat copy
        to 0.986-0.990 on an H100 (lab/data/ab-no-table-h100-20261207/). The gather's part
        of each entry is still written here, before the barrier below."""
        e, B, g = self.e, self.block_size, self.granule
        kind = _ACCESS[g][0]
        e.reg("u32", "j", "st_off", "st_addr", "c_base", "rg_base")
        e.reg("u64", "a", "am")
        e.reg("s64", "d", "dm")
        e.reg("pred", "vin", "gin")
        part = e.data("pg", g)
        e("mov.u32", "st_off", "staging", why="chunk k's vectors follow chunk k-1's")
        e("mov.u32", "c_base", 0, why="the vectors dealt out so far")
        for k in range(self.chunks):
            if self.staging_without_table:
                # (R1, C1), the tile's end, again a chunk: carried from the first chunk to
                # the last, they spilled at 48 registers, and they are five instructions
                self._next_row_state()
                done = self._chunk_worked_out(k)
            else:
                done = self._chunk_range(k)
            loop, nxt, whole = e.label(f"R{k}_LOOP"), e.label(f"R{k}_NEXT"), e.label(f"R{k}_WHOLE")
            self._first_vector("j")
            e.place(loop)
            self._staged_vector(done)
            e.bra(whole, guard="vin")
            for m in range(0, 16, g):  # an end of the array: the chunk's granules only
                e("add.s64", "dm", "d", m)
                e("setp.ge.s64", "gin", "dm", 0)
                e("setp.lt.and.s64", "gin", "dm", "c_lim", "gin", why=f"granule {m // g} is the chunk's")
                e("add.u64", "am", "a", m)
                e(f"ld.global.nc.{kind}", part, e.at("am"), guard="gin")
                e(f"st.shared.{kind}", e.at("st_addr", m), part, guard="gin")
            e.bra(nxt)
            e.place(whole)
            e("cp.async.cg.shared.global", e.at("st_addr"), e.at("a"), 16, why="in flight; no register held")
            e.place(nxt)
            e("add.u32", "j", "j", B)
            e.bra(loop)
            e.place(done)
            based = e.label(f"R{k}_BASED")
            e("setp.eq.u32", "pr", "c_nvec", 0)
            e.bra(based, guard="pr", uniform=True, why="nothing of this chunk here: no base to write")
            # staged(chunk byte d) = st_off + d - (c_vstart - c_ptr), d = c_RW + e
            e("sub.u64", "tmp64", "c_ptr", "c_vstart")
            e("add.s64", "tmp64", "tmp64", "c_RW")
            e("cvt.u32.u64", "rg_base", "tmp64")
            e("add.u32", "rg_base", "rg_base", "st_off", why="chunk byte e of the tile: staged at base + e")
            e("setp.eq.u32", "pr", "thread", 0)
            entry = e.at("ctab", _TABLE_ENTRY * k + _BASE_AT)
            e("st.shared.v4.u32", entry, ["rg_base", "c_off", "c_w", "c_w"], guard="pr")
            e.place(based)
            e("mad.lo.u32", "st_off", "c_nvec", 16, "st_off")
            e("add.u32", "c_base", "c_base", "c_nvec")
        e("cp.async.commit_group")
        e("cp.async.wait_group", 0, why="this thread's copies have landed")
        e("bar.sync", 0, why="... and everyone's, and the table's bases")

    def _locate(self, pos: str, where: str) -> None:
        """%where = the staged address of the tile's row-side byte at column-offset %pos
        from the tile's first row (``C + offset in the tile``); also %rg_row (its row after
        the tile's first), %rg_col (its column), %rg_chunk (its chunk) and the chunk's %rg_off,
        %rg_w and %rg_end (off + w)."""
        e = self.e
        e.reg("u32", "rg_row", "rg_col", "rg_chunk", "rg_ent", "rg_off", "rg_w", "rg_cbase", "rg_end")
        e.reg("u32", "rg_pad", "rg_bound")
        e.divmod_u32("rg_row", "rg_col", pos, "pitch", "pitch_rcp")
        e("mov.u32", "rg_chunk", 0)
        if self.searched_locate:
            self._search_chunk()
        else:
            self._scan_chunks()
        e("mad.lo.u32", "rg_ent", "rg_chunk", _TABLE_ENTRY, "ctab")
        e("ld.shared.v4.u32", ["rg_cbase", "rg_off", "rg_w", "rg_pad"], e.at("rg_ent", _BASE_AT))
        e("mad.lo.u32", where, "rg_row", "rg_w", "rg_cbase")
        e("add.u32", where, where, "rg_col")
        e("sub.u32", where, where, "rg_off", why="staged: base + row * width + column - offset")
        e("add.u32", "rg_end", "rg_off", "rg_w")

    def _scan_chunks(self) -> None:
        """%rg_chunk = the chunks whose offsets are at most %rg_col, less one: each
        offset tested in turn, straight from the parameters (no shared load)."""
        e = self.e
        for k in range(1, self.chunks):
            self._param("rg_bound", f"chunk{k}_off")
            e("setp.ge.u32", "pr", "rg_col", "rg_bound")
            why = "the chunks before the column" if k == 1 else ""
            e("add.u32", "rg_chunk", "rg_chunk", 1, guard="pr", why=why)

    def _search_chunk(self) -> None:
        """%rg_chunk = the last chunk whose offset is at most %rg_col, by a binary search
        over the offsets warp 0 wrote into the table (:meth:`_fill_chunk_table`): a step of
        half the chunks, then a quarter, ..., each a shared load. A step past the last
        chunk tries the last instead: where it is taken, the last chunk is the answer, and
        later steps stay there. Testing every offset in turn costs two SASS instructions a
        chunk a vector (62 at 32 chunks); this is five a step (25), six where a step can
        pass the last chunk."""
        e, K = self.e, self.chunks
        e.reg("u32", "rg_try")
        e.reg("pred", "rg_on")
        e.note("which chunk: a binary search over the table's offsets")
        step = 1 << (K - 1).bit_length() - 1  # the largest power of two below K
        reach = 0  # the most %rg_chunk can be so far
        why = f"a step of {step} chunks, then half as many"
        while step:
            e("add.u32", "rg_try", "rg_chunk", step, why=why)
            if reach + step > K - 1:  # where it can pass the last chunk
                e("min.u32", "rg_try", "rg_try", K - 1)
            e("mad.lo.u32", "rg_ent", "rg_try", _TABLE_ENTRY, "ctab")
            e("ld.shared.u32", "rg_bound", e.at("rg_ent", _OFFSET_AT), why="its offset" if why else "")
            e("setp.ge.u32", "rg_on", "rg_col", "rg_bound")
            there = "at or past it: there or later" if why else ""
            e("selp.u32", "rg_chunk", "rg_try", "rg_chunk", "rg_on", why=there)
            reach, step, why = min(reach + step, K - 1), step // 2, ""

    def _gather_rows(self) -> None:
        """Each row-side vector of this tile from the staging area, stored whole; those
        that straddle the array's ends (tiles 0 and last) a byte at a time."""
        e, U, K = self.e, self.unroll, self.chunks
        e.reg("u32", "rg_pos", "rg_first", "rg_second", "rg_left", "rg_next", "rg_nrow", "rg_nent")
        e.reg("u32", "rg_nbase", "rg_noff", "rg_nw", "rg_npad")
        e.reg("u64", "rg_g")
        e.reg("pred", "rg_wrap", "rg_two")
        for u in range(U):
            self._row_vector(u)
            skip = e.label("RG_SKIP")
            e.bra(skip, guard=f"full_{u}", neg=True, why="straddles an end of the array: below")
            e("add.u32", "rg_pos", "C", f"off_{u}")
            self._locate("rg_pos", "rg_first")
            e("sub.u32", "rg_left", "rg_end", "rg_col", why="bytes of the vector in this chunk's piece")
            out = e.data("rg_v", 16)
            if not all(self.wide):
                self._gather_pieces(out)
                self._store_row_vector(u, out)
                e.place(skip)
                continue
            e("add.u32", "rg_next", "rg_chunk", 1, why="the next piece: the next chunk, or chunk 0 a row on")
            e("setp.eq.u32", "rg_wrap", "rg_next", K)
            e("selp.u32", "rg_next", 0, "rg_next", "rg_wrap")
            e("selp.u32", "rg_nrow", 1, 0, "rg_wrap")
            e("add.u32", "rg_nrow", "rg_nrow", "rg_row")
            e("mad.lo.u32", "rg_nent", "rg_next", _TABLE_ENTRY, "ctab")
            e("ld.shared.v4.u32", ["rg_nbase", "rg_noff", "rg_nw", "rg_npad"], e.at("rg_nent", _BASE_AT))
            e("mad.lo.u32", "rg_second", "rg_nrow", "rg_nw", "rg_nbase", why="the next piece's first byte")
            e("sub.u32", "rg_second", "rg_second", "rg_left", why="... less the first piece's bytes")
            e("setp.lt.u32", "rg_two", "rg_left", 16)
            # One piece: its second window is read at the chunk table's first bytes (below
            # a 16-byte granule never written: the value is unused), one broadcast for
            # every such thread of the warp, where reading its first window
            # again put 43 shared wavefronts on a warp's vector (4-way conflicted) and held
            # the shared-memory pipe 90% busy (Nsight Compute, lab/README.md). Most vectors
            # of a wide chunk lie in one piece; the merge takes none of those words.
            e(
                "selp.u32",
                "rg_second",
                "rg_second",
                "ctab",
                "rg_two",
                why="one piece: a broadcast read, unused",
            )
            self._merge_windows(out, "rg_first", "rg_second", "rg_left")
            self._store_row_vector(u, out)
            e.place(skip)
        self._gather_row_edges()

    def _store_row_vector(self, u: int, out: list[str]) -> None:
        e = self.e
        e("cvt.u64.u32", "tmp64", f"off_{u}")
        e("add.u64", "rg_g", "tile_abs", "tmp64")
        e("st.global.v4.u32", e.at("rg_g"), out)

    def _gather_pieces(self, out: list[str]) -> None:
        """A row vector over any number of chunk pieces (a group with a chunk under 16
        bytes): the first piece's window at %rg_first, then, while fewer than 16 bytes are
        in place (%rg_left), the next piece's (the next chunk, or chunk 0 a row on) merged
        from that byte on. Each window reads the piece's bytes and whatever follows them
        in the staging area, which the next piece then overwrites."""
        e, K = self.e, self.chunks
        loop, done = e.label("RG_PIECE"), e.label("RG_PIECES_DONE")
        piece = e.data("rg_p", 16)
        self._window(out, "rg_first")
        e.place(loop)
        e("setp.ge.u32", "pr", "rg_left", 16)
        e.bra(done, guard="pr", why="all 16 bytes in place")
        e("add.u32", "rg_chunk", "rg_chunk", 1, why="the next piece: the next chunk, or chunk 0 a row on")
        e("setp.eq.u32", "rg_wrap", "rg_chunk", K)
        e("selp.u32", "rg_chunk", 0, "rg_chunk", "rg_wrap")
        e("add.u32", "rg_row", "rg_row", 1, guard="rg_wrap")
        e("mad.lo.u32", "rg_nent", "rg_chunk", _TABLE_ENTRY, "ctab")
        e("ld.shared.v4.u32", ["rg_nbase", "rg_noff", "rg_nw", "rg_npad"], e.at("rg_nent", _BASE_AT))
        e("mad.lo.u32", "rg_second", "rg_row", "rg_nw", "rg_nbase", why="the piece's first byte")
        e("sub.u32", "rg_second", "rg_second", "rg_left", why="... less the bytes already in place")
        self._window(piece, "rg_second")
        self._merge_from(out, piece, "rg_left")
        e("add.u32", "rg_left", "rg_left", "rg_nw")
        e.bra(loop)
        e.place(done)

    def _gather_row_edges(self) -> None:
        """The vectors that straddle the array's ends, a byte at a time: only in tiles 0
        and last, only in warps holding one (:meth:`_edge_bytes`)."""
        e = self.e
        skip = e.label("RG_EDGES_DONE")
        self._edge_tiles_only(skip, "interior tiles: no vector straddles an end")

        def store_byte(u: int) -> None:  # rg_in, not pr: _locate sets pr
            e("add.u32", "rg_pos", "C", f"off_{u}")
            e("add.u32", "rg_pos", "rg_pos", "b")
            self._locate("rg_pos", "rg_first")
            e("ld.shared.b8", "byte", e.at("rg_first"), guard="rg_in")
            e("add.u32", "tmp32", f"off_{u}", "b")
            e("cvt.u64.u32", "rg_g", "tmp32")
            e("add.u64", "rg_g", "rg_g", "tile_abs")
            e("st.global.b8", e.at("rg_g"), "byte", guard="rg_in")

        for u in range(self.unroll):
            labels = ("RG_EDGE_BYTE", "RG_EDGE_DONE")
            self._edge_bytes(u, "was not stored whole", labels, "rg_in", store_byte)
        e.place(skip)
