"""The row side of the tile kernel (:class:`~ptxgen.kernels.fastcat_tile.FastcatTile`):
each thread's vectors of a tile, the backward row phase (row side -> shared: through
registers or one bulk copy, then byte by byte the vectors that straddle the array's
ends) and the forward row phase (shared -> row side: whole vectors, then granule by
granule those not written whole).
"""

from __future__ import annotations

from collections.abc import Callable

from ..ptxtypes import Label, Sink
from .tile_emitter import _ACCESS, _Emitter

__all__ = ["TileRows"]


class TileRows:
    """The row-side phases of :class:`~ptxgen.kernels.fastcat_tile.FastcatTile` (a mixin).

    Uses only what ``FastcatTile`` sets: the attributes ``e`` (the
    :class:`~ptxgen.kernels.tile_emitter._Emitter`), ``direction``, ``granule``,
    ``whole_rows``, ``unroll``, ``block_size``, ``loader`` and ``tile_bytes``; and the
    registers its prologue and main loop declare: ``thread``, ``tile``, ``n_tiles``,
    ``q0``, ``tile_abs``, ``row_bytes_s``, ``C``, ``pitch``, ``pitch_rcp``, ``smem``,
    ``mbar`` (bulk loads), ``win_lo``, ``win_hi``, ``win_lo_next`` (without
    ``whole_rows``) and the scratch ``tmp32``, ``tmp64``, ``pr``, ``carry``.
    """

    e: _Emitter
    direction: str
    granule: int
    whole_rows: bool
    unroll: int
    block_size: int
    loader: str
    tile_bytes: int

    # ---- the vector u of this thread in the tile ------------------------------------------
    def _row_vector(self, u: int) -> None:
        """%q_u = offset in the array of this thread's vector u, %off_u its offset in the
        tile, %full_u: its 16 bytes lie in the array (and, for a group narrower than the
        row, wholly inside its columns when writing, or touch them when reading)."""
        e = self.e
        e.reg("u32", f"off_{u}")
        e.reg("s64", f"q_{u}")
        e.reg("pred", f"full_{u}", f"any_{u}")
        e("mad.lo.u32", f"off_{u}", "thread", 16, 16 * u * self.block_size, why=f"vector {u}*block + thread")
        e("cvt.u64.u32", "tmp64", f"off_{u}")
        e("add.s64", f"q_{u}", "q0", "tmp64")
        e("setp.ge.s64", f"full_{u}", f"q_{u}", 0)
        e("add.s64", "tmp64", f"q_{u}", 16)
        e("setp.le.s64", "pr", "tmp64", "row_bytes_s")
        e("and.pred", f"full_{u}", f"full_{u}", "pr", why="all 16 bytes inside the array")
        e("mov.pred", f"any_{u}", f"full_{u}")
        if self.whole_rows:
            return
        e.reg("u32", "col", "col_q", "col_end")
        e.reg("pred", "touch", "inside")
        e("add.u32", "tmp32", "C", f"off_{u}")
        e.divmod_u32("col_q", "col", "tmp32", "pitch", "pitch_rcp")
        e("add.u32", "col_end", "col", 16)
        e("setp.lt.u32", "touch", "col", "win_hi")
        e("setp.gt.u32", "pr", "col_end", "win_lo")
        e("and.pred", "touch", "touch", "pr")
        e("setp.gt.u32", "pr", "col_end", "win_lo_next", why="reaches into the next row's window")
        e("or.pred", f"any_{u}", "touch", "pr", why="holds bytes of the group")
        e("setp.ge.u32", "inside", "col", "win_lo")
        e("setp.le.u32", "pr", "col_end", "win_hi")
        e("and.pred", "inside", "inside", "pr", why="holds only bytes of the group")
        if self.direction == "backward":
            e("and.pred", f"full_{u}", f"full_{u}", f"any_{u}", why="read only vectors the group needs")
        else:
            e("and.pred", f"full_{u}", f"full_{u}", "inside", why="write whole only vectors it owns")

    # ---- backward row phase: dy tile -> shared ---------------------------------------------
    def _load_rows(self, stage: str) -> None:
        """Read the tile into the shared stage whose address %stage holds."""
        e, U = self.e, self.unroll
        for u in range(U):
            self._row_vector(u)
        if self.loader == "regs":
            data = []
            for u in range(U):
                e.reg("u64", f"gaddr_{u}")
                e("cvt.u64.u32", "tmp64", f"off_{u}")
                e("add.u64", f"gaddr_{u}", "tile_abs", "tmp64")
                data.append(e.data(f"v{u}", 16))
                e(
                    "ld.global.nc.v4.u32",
                    data[u],
                    e.at(f"gaddr_{u}"),
                    guard=f"full_{u}",
                    why="all loads first",
                )
            for u in range(U):
                e.reg("u32", f"saddr_{u}")
                e("add.u32", f"saddr_{u}", stage, f"off_{u}")
                e("st.shared.v4.u32", e.at(f"saddr_{u}"), data[u], guard=f"full_{u}")
        else:  # bulk: thread 0 copies the run of full vectors in one instruction
            self._bulk_issue(stage)
        self._partial_loads(stage)

    def _bulk_issue(self, stage: str) -> None:
        e, T = self.e, self.tile_bytes
        e.reg("s64", "bk_lo", "bk_hi")
        e.reg("u32", "bk_bytes", "bk_mbar", "bk_dst")
        e.reg("u64", "bk_src")
        e.reg("pred", "leader")
        skip = e.label("BULK_SKIP")
        e("setp.eq.u32", "leader", "thread", 0)
        e.bra(skip, guard="leader", neg=True)
        e.note("full vectors of this tile: offsets [bk_lo, bk_hi), bk_lo = 16*ceil(-q0/16) if q0 < 0")
        e("neg.s64", "bk_lo", "q0")
        e("add.s64", "bk_lo", "bk_lo", 15)
        e("and.b64", "bk_lo", "bk_lo", -16)
        e("max.s64", "bk_lo", "bk_lo", 0)
        e("sub.s64", "bk_hi", "row_bytes_s", "q0", why="bytes of the array from the tile start")
        e("and.b64", "bk_hi", "bk_hi", -16)
        e("min.s64", "bk_hi", "bk_hi", T)
        e("max.s64", "bk_hi", "bk_hi", "bk_lo")
        e("sub.s64", "tmp64", "bk_hi", "bk_lo")
        e("cvt.u32.u64", "bk_bytes", "tmp64")
        e("sub.u32", "bk_mbar", stage, "smem")
        e("shr.u32", "bk_mbar", "bk_mbar", T.bit_length() - 1 - 3, why="stage s -> mbarrier 8*s")
        e("add.u32", "bk_mbar", "bk_mbar", "mbar")
        e("fence.proxy.async.shared::cta", why="earlier generic reads of this stage before the async write")
        e("mbarrier.arrive.expect_tx.shared::cta.b64", Sink(), e.at("bk_mbar"), "bk_bytes",
          why="the bytes to wait for")  # fmt: skip
        e("setp.eq.u32", "pr", "bk_bytes", 0)
        e.bra(skip, guard="pr", uniform=True, why="thread 0 alone runs this")
        e("cvt.u32.u64", "tmp32", "bk_lo")
        e("add.u32", "bk_dst", stage, "tmp32")
        e("add.u64", "bk_src", "tile_abs", "bk_lo")
        e("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes",
          e.at("bk_dst"), e.at("bk_src"), "bk_bytes", e.at("bk_mbar"))  # fmt: skip
        e.place(skip)

    def _partial_loads(self, stage: str) -> None:
        """Vectors that straddle the array's ends (tiles 0 and last only): byte loads."""
        e = self.e
        skip = e.label("EDGE_LOADS_DONE")
        self._edge_tiles_only(skip, "interior tiles: no vector straddles the array's ends")
        e.reg("u32", "b", "sb")
        e.reg("u64", "gb")

        def load_byte(u: int) -> None:
            e("add.u32", "tmp32", f"off_{u}", "b")
            e("cvt.u64.u32", "gb", "tmp32")
            e("add.u64", "gb", "gb", "tile_abs")
            e("add.u32", "sb", stage, "tmp32")
            e("ld.global.nc.b8", "byte", e.at("gb"), guard="pr")
            e("st.shared.b8", e.at("sb"), "byte", guard="pr")

        for u in range(self.unroll):
            self._edge_bytes(u, "was not loaded whole", ("EDGE_BYTE", "EDGE_BYTES_DONE"), "pr", load_byte)
        e.place(skip)

    def _edge_tiles_only(self, skip: Label, why: str) -> None:
        """Branch to ``skip`` unless this is tile 0 or the last: only they hold a vector
        that straddles an end of the array (the same answer in every thread)."""
        e = self.e
        e.reg("u32", "last_tile")
        e.reg("pred", "edge")
        e("sub.u32", "last_tile", "n_tiles", 1)
        e("setp.eq.u32", "edge", "tile", 0)
        e("setp.eq.or.u32", "edge", "tile", "last_tile", "edge")
        e.bra(skip, guard="edge", neg=True, why=why, uniform=True)

    def _edge_bytes(
        self, u: int, what: str, labels: tuple[str, str], inside: str, move: Callable[[int], None]
    ) -> None:
        """Vector u's bytes one at a time (%b), where it straddles an end of the array:
        %inside says byte b is in the array, and ``move(u)`` moves it under that guard.
        Only the warps holding such a vector run the loop; in them every thread runs it,
        its own vector's bytes predicated off, so the count is the same in every thread
        and no branch diverges."""
        e = self.e
        e.reg("u32", "b")
        e.reg("s64", "qb")
        e.reg("b16", "byte")
        e.reg("pred", "part", inside)
        loop, done = e.label(labels[0]), e.label(labels[1])
        self._straddles(u, what, done)
        e("mov.u32", "b", 0)
        e.place(loop)
        e("cvt.u64.u32", "tmp64", "b")
        e("add.s64", "qb", f"q_{u}", "tmp64")
        e("setp.ge.and.s64", inside, "qb", 0, "part")
        e("setp.lt.and.s64", inside, "qb", "row_bytes_s", inside, why="this byte is in the array")
        move(u)
        e("add.u32", "b", "b", 1)
        e("setp.lt.u32", "pr", "b", 16)
        e.bra(loop, guard="pr", uniform=True, why="the same count in every thread")
        e.place(done)

    def _straddles(self, u: int, what: str, done: Label) -> None:
        """%part: this thread's vector u holds bytes of the array but not all 16 (only at
        the array's ends). A warp in which no thread's does goes on to ``done``: the vote
        gives every thread of the warp the same answer, so that branch is uniform."""
        e = self.e
        e.reg("pred", "any_part")
        e("not.pred", "part", f"full_{u}", why=f"this vector {what}")
        e("setp.lt.and.s64", "part", f"q_{u}", "row_bytes_s", "part")
        e("add.s64", "tmp64", f"q_{u}", 16)
        e("setp.gt.and.s64", "part", "tmp64", 0, "part", why="and it holds bytes of the array")
        e("vote.sync.any.pred", "any_part", "part", 0xFFFFFFFF, why="asks all 32 threads of the warp")
        e.bra(done, guard="any_part", neg=True, uniform=True, why="no thread of this warp has such a vector")

    # ---- forward row phase: shared -> y tile -----------------------------------------------
    def _store_rows(self, stage: str) -> None:
        e, U = self.e, self.unroll
        for u in range(U):
            self._row_vector(u)
            e.reg("u64", f"gaddr_{u}")
            e.reg("u32", f"saddr_{u}")
            e("cvt.u64.u32", "tmp64", f"off_{u}")
            e("add.u64", f"gaddr_{u}", "tile_abs", "tmp64")
            e("add.u32", f"saddr_{u}", stage, f"off_{u}")
            data = e.data(f"v{u}", 16)
            e("ld.shared.v4.u32", data, e.at(f"saddr_{u}"), guard=f"full_{u}")
            e("st.global.v4.u32", e.at(f"gaddr_{u}"), data, guard=f"full_{u}")
        # Vectors not written whole: at the array's ends, and (for a group narrower than
        # the row) those that straddle the group's columns. Granule by granule, each
        # written only if it belongs to the array and the group.
        g = self.granule if not self.whole_rows else 1
        e.reg("u32", "m", "sg")
        e.reg("s64", "qg")
        e.reg("u64", "gg")
        part = e.data("part", g)
        kind = _ACCESS[g][0]
        skip_all = e.label("EDGE_STORES_DONE")
        if self.whole_rows:
            e.reg("u32", "last_tile")
            e.reg("pred", "edge")
            e("sub.u32", "last_tile", "n_tiles", 1)
            e("setp.eq.u32", "edge", "tile", 0)
            e("setp.eq.or.u32", "edge", "tile", "last_tile", "edge")
            e.bra(skip_all, guard="edge", neg=True, uniform=True)
        else:
            e.reg("u32", "colg")
        # Whole rows: edge tiles only, and only the warps holding a straddling vector;
        # there every thread runs the loops, its whole vectors predicated off, so no
        # branch diverges. Column groups: every tile, so a thread skips its whole vectors
        # (a branch that may diverge).
        e.reg("pred", "part")
        for u in range(U):
            done, loop = e.label("EDGE_VEC_DONE"), e.label("EDGE_GRANULE")
            if self.whole_rows:
                self._straddles(u, "was not stored whole", done)
            else:
                e("not.pred", "part", f"full_{u}", why="this vector was not stored whole")
                e.bra(done, guard=f"full_{u}")
                e.bra(done, guard=f"any_{u}", neg=True, why="no byte of the group here")
                e("add.u32", "tmp32", "C", f"off_{u}")
                e.divmod_u32("col_q", "colg", "tmp32", "pitch", "pitch_rcp")
            e("mov.u32", "m", 0)
            e.place(loop)
            e("cvt.u64.u32", "tmp64", "m")
            e("add.s64", "qg", f"q_{u}", "tmp64")
            e("setp.ge.and.s64", "pr", "qg", 0, "part")
            e("setp.lt.and.s64", "pr", "qg", "row_bytes_s", "pr", why="in the array")
            if not self.whole_rows:
                e("setp.ge.and.u32", "pr", "colg", "win_lo", "pr")
                e("setp.lt.and.u32", "pr", "colg", "win_hi", "pr", why="in the group's columns")
            e("add.u32", "tmp32", f"off_{u}", "m")
            e("cvt.u64.u32", "gg", "tmp32")
            e("add.u64", "gg", "gg", "tile_abs")
            e("add.u32", "sg", stage, "tmp32")
            e(f"ld.shared.{kind}", part, e.at("sg"), guard="pr")
            e(f"st.global.{kind}", e.at("gg"), part, guard="pr")
            if not self.whole_rows:
                e("add.u32", "colg", "colg", g, why="granules never straddle a row: one carry")
                e("setp.ge.u32", "carry", "colg", "pitch")
                e("sub.u32", "colg", "colg", "pitch", guard="carry")
            e("add.u32", "m", "m", g)
            e("setp.lt.u32", "pr", "m", 16)
            e.bra(loop, guard="pr", uniform=True, why="the same count in every thread that came in")
            e.place(done)
        e.place(skip_all)
