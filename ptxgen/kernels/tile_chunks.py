"""The chunk side of the tile kernel (:class:`~ptxgen.kernels.fastcat_tile.FastcatTile`):
where each chunk's bytes of a tile are (the shared chunk table, filled once a tile, and
read back a chunk at a time), the shared address of a chunk byte, how the chunks'
vectors are dealt out to the threads, and the walks over one chunk vector's granules:
a whole vector (carried, or two pieces), and the run of a vector that the tile holds
only in part. The gathers and scatters that use them are in :mod:`.tile_gather_scatter`.
"""

from __future__ import annotations

from collections.abc import Callable

from ..ptxtypes import Addr, Label
from .tile_emitter import _Emitter

__all__ = ["_OFFSET_AT", "_TABLE_ENTRY", "TileChunks"]

_TABLE_ENTRY = 80  # bytes of the shared chunk table per chunk (FastcatTile._fill_chunk_table)
_OFFSET_AT = 60  # where an entry holds the chunk's offset (the edge pass, the row gather's search)


class TileChunks:
    """The chunk table, chunk ranges and granule walks of
    :class:`~ptxgen.kernels.fastcat_tile.FastcatTile` (a mixin).

    Uses only what ``FastcatTile`` sets: the attributes ``e`` (the
    :class:`~ptxgen.kernels.tile_emitter._Emitter`), ``chunks``, ``granule``,
    ``block_size``, ``wide`` (one flag a chunk) and ``chunk_wide`` (the flag of the
    chunk being written, which :meth:`_chunk_range` sets); its method ``_param`` (a kernel
    parameter into a register, under a guard if given); and the registers its prologue and
    main loop declare: ``thread``, ``warp``, ``lane``, ``ctab``, ``rows``, ``pitch``,
    ``R``, ``C``, ``R1``, ``C1`` and the scratch ``tmp64``, ``pr``. The walks over a
    vector read ``d``, ``a``, ``dm``, ``s`` and ``rem``, which the gathers and scatters
    declare.
    """

    e: _Emitter
    chunks: int
    granule: int
    block_size: int
    wide: tuple[bool, ...]
    chunk_wide: bool

    # ---- chunk phase ------------------------------------------------------------------------
    def _fill_chunk_table(self) -> None:
        """Where each chunk's bytes of this tile are, worked out once a tile into the
        shared table (:data:`_TABLE_ENTRY` bytes a chunk; see :meth:`_chunk_range`):
        chunk k by lane k of warp 0 (at most :data:`MAX_CHUNKS` = 32 chunks), each lane
        storing its own entry, while the other warps go straight to the caller's barrier,
        which makes the table visible. Every thread working it out for every chunk was a
        quarter of a tile's instructions; a warp a chunk (its lane 0 storing) still cost
        every warp a test a chunk, and six chunks 12 instructions a vector in all
        (lab/README.md)."""
        e = self.e
        done = e.label("TABLE_DONE")
        e("setp.ne.u32", "pr", "warp", 0)
        e.bra(done, guard="pr", uniform=True, why="warp 0 places every chunk, a lane each")
        e("setp.ge.u32", "pr", "lane", self.chunks)
        e.bra(done, guard="pr", why="no chunk for this lane")
        self._compute_chunk(None)
        e.reg("u32", "c_entry")
        e("mad.lo.u32", "c_entry", "lane", _TABLE_ENTRY, "ctab", why="this lane's chunk's entry")
        e("st.shared.v2.s64", e.at("c_entry"), ["c_RW", "c_dlo"])
        e("st.shared.v2.u64", e.at("c_entry", 16), ["c_vstart", "c_lim"])
        e("st.shared.s64", e.at("c_entry", 32), "c_dhi")
        e("st.shared.u64", e.at("c_entry", 40), "c_ptr")
        e("st.shared.v2.u32", e.at("c_entry", 48), ["c_nvec", "c_jump"])
        e("st.shared.f32", e.at("c_entry", 56), "c_rcp")
        e("st.shared.u32", e.at("c_entry", _OFFSET_AT), "c_off", why="for the edge pass")
        e.place(done)

    def _chunk_regs(self) -> None:
        e = self.e
        e.reg("u64", "c_ptr", "c_w64", "c_lim", "c_vstart", "c_vend")
        e.reg("s64", "c_RW", "c_R1W", "c_dlo", "c_dhi")
        e.reg("s32", "c_clo", "c_chi")
        e.reg("u32", "c_w", "c_off", "c_nvec", "c_jump")
        e.reg("f32", "c_rcp")

    def _compute_chunk(self, k: int | None) -> None:
        """Chunk k's pointer, width, offset, its bytes from this tile [c_dlo, c_dhi), and
        the absolute 16-byte vectors spanning them (c_nvec of them from c_vstart; none
        where the tile holds nothing of it). ``k`` None: the chunk of this thread's lane,
        its parameters picked by a predicate a chunk."""
        e = self.e
        self._chunk_regs()
        if k is not None or self.chunks == 1:
            k = k or 0
            e.note(f"chunk {k}: the bytes this tile holds")
            self._param("c_ptr", f"chunk{k}_ptr")
            self._param("c_off", f"chunk{k}_off")
            self._param("c_w", f"chunk{k}_width")
        else:
            e.note("chunk %lane: its parameters, then the bytes this tile holds")
            e.reg("pred", "c_mine")
            for n in range(self.chunks):
                e("setp.eq.u32", "c_mine", "lane", n)
                for reg, what in (("c_ptr", "ptr"), ("c_off", "off"), ("c_w", "width")):
                    self._param(reg, f"chunk{n}_{what}", guard="c_mine")
        e("cvta.to.global.u64", "c_ptr", "c_ptr")
        e("cvt.u64.u32", "c_w64", "c_w")
        e("mul.lo.s64", "c_RW", "R", "c_w64", why="chunk bytes before the tile's first row")
        e("sub.s32", "c_clo", "C", "c_off")
        e("max.s32", "c_clo", "c_clo", 0)
        e("min.s32", "c_clo", "c_clo", "c_w")
        e("cvt.s64.s32", "tmp64", "c_clo")
        e("add.s64", "c_dlo", "c_RW", "tmp64", why="first chunk byte from this tile")
        e("mul.lo.s64", "c_R1W", "R1", "c_w64")
        e("sub.s32", "c_chi", "C1", "c_off")
        e("max.s32", "c_chi", "c_chi", 0)
        e("min.s32", "c_chi", "c_chi", "c_w")
        e("cvt.s64.s32", "tmp64", "c_chi")
        e("add.s64", "c_dhi", "c_R1W", "tmp64", why="first chunk byte from the next tile")
        e("mul.lo.u64", "c_lim", "rows", "c_w64")
        e("max.s64", "c_dlo", "c_dlo", 0)
        e("min.s64", "c_dlo", "c_dlo", "c_lim")
        e("min.s64", "c_dhi", "c_dhi", "c_lim")
        e("add.u64", "c_vstart", "c_ptr", "c_dlo")
        e("and.b64", "c_vstart", "c_vstart", -16, why="first 16-byte vector of the range (absolute)")
        e("add.u64", "c_vend", "c_ptr", "c_dhi")
        e("add.u64", "c_vend", "c_vend", 15)
        e("and.b64", "c_vend", "c_vend", -16)
        e("sub.u64", "tmp64", "c_vend", "c_vstart")
        e("shr.u64", "tmp64", "tmp64", 4)
        e("cvt.u32.u64", "c_nvec", "tmp64")
        e("setp.le.s64", "pr", "c_dhi", "c_dlo")
        e("selp.u32", "c_nvec", 0, "c_nvec", "pr", why="nothing of this chunk here")
        e(
            "sub.u32",
            "c_jump",
            "pitch",
            "c_w",
            why="from the end of the chunk in one row to its start in the next",
        )
        e("cvt.rn.f32.u32", "c_rcp", "c_w")
        e("rcp.approx.ftz.f32", "c_rcp", "c_rcp")

    def _chunk_range(self, k: int) -> Label:
        """Chunk k's registers, read from the shared table (:meth:`_fill_chunk_table`),
        its width and offset from the parameters. Returns the label to go to when done
        with the chunk (not yet placed); it is taken at once where the tile holds nothing
        of the chunk, c_nvec then 0."""
        e = self.e
        self.chunk_wide = self.wide[k]  # chunk k's code follows: its walks by its own width
        self._chunk_regs()
        done = e.label(f"CHUNK{k}_DONE")
        e.note(f"chunk {k}: the bytes this tile holds, from the table")
        self._param("c_off", f"chunk{k}_off")
        self._param("c_w", f"chunk{k}_width")
        at = _TABLE_ENTRY * k
        e("ld.shared.v2.u32", ["c_nvec", "c_jump"], e.at("ctab", at + 48))
        self._skip_if_empty(done)
        e("ld.shared.v2.s64", ["c_RW", "c_dlo"], e.at("ctab", at))
        e("ld.shared.v2.u64", ["c_vstart", "c_lim"], e.at("ctab", at + 16))
        e("ld.shared.s64", "c_dhi", e.at("ctab", at + 32))
        e("ld.shared.u64", "c_ptr", e.at("ctab", at + 40))
        e("ld.shared.f32", "c_rcp", e.at("ctab", at + 56))
        return done

    def _chunk_worked_out(self, k: int) -> Label:
        """Chunk k's registers as :meth:`_chunk_range` gives them, worked out by this
        thread from the parameters instead of read from the table: for a pass that needs
        no table, so that no barrier stands between the tile's start and its first loads.
        Returns the label to go to when done with the chunk (not yet placed); it is taken
        at once where the tile holds nothing of the chunk, c_nvec then 0."""
        e = self.e
        self.chunk_wide = self.wide[k]
        done = e.label(f"CHUNK{k}_DONE")
        self._compute_chunk(k)
        self._skip_if_empty(done)
        return done

    def _skip_if_empty(self, done: Label) -> None:
        """To ``done`` where the tile holds nothing of the chunk (c_nvec 0): the same
        in every thread, so the branch is uniform."""
        e = self.e
        e("setp.eq.u32", "pr", "c_nvec", 0)
        e.bra(done, guard="pr", why="nothing of this chunk here", uniform=True)

    def _source_of(self, dreg: str, sreg: str, rem: str, stage: str) -> None:
        """%sreg = shared address of chunk byte %dreg (s64); %rem = its column in the chunk."""
        e = self.e
        e.reg("u32", "e", "qq")
        e("sub.s64", "tmp64", dreg, "c_RW")
        e("cvt.u32.u64", "e", "tmp64", why="chunk bytes from the tile's first row")
        e.divmod_u32("qq", rem, "e", "c_w", "c_rcp")
        e("mad.lo.u32", sreg, "qq", "pitch", "c_off")
        e("add.u32", sreg, sreg, rem)
        e("sub.u32", sreg, sreg, "C")
        e("add.u32", sreg, sreg, stage)

    def _granule_walk(self, sreg: str, rem: str, access: Callable[[int, Addr], None]) -> None:
        """Visit the 16/g granules of one chunk vector: access(m, shared address). %sreg
        carries only the row jumps; the g-steps are immediate offsets."""
        e, g = self.e, self.granule
        if self.chunk_wide and g < 16:
            self._two_piece_walk(sreg, rem, access)
            return
        e.reg("pred", "wrap")
        for m in range(16 // g):
            if m:
                e("add.u32", rem, rem, g)
                e("setp.eq.u32", "wrap", rem, "c_w", why="end of this row's piece")
                e("add.u32", sreg, sreg, "c_jump", guard="wrap")
                e("mov.u32", rem, 0, guard="wrap")
            access(m, e.at(sreg, m * g))

    def _two_piece_walk(self, sreg: str, rem: str, access: Callable[[int, Addr], None]) -> None:
        """:meth:`_granule_walk` for a chunk at least 16 bytes wide: a vector's
        bytes then lie in at most two rows' pieces, its first ``c_w - rem`` in this row's
        and the rest ``c_jump`` further on, so each granule's address is a choice between
        two bases, made independently of the others. (The carried walk is a chain of
        dependent steps, a granule at a time, which the threads' latency could not hide:
        measured on H200, lab/README.md.)"""
        e, g = self.e, self.granule
        e.reg("u32", "left", "next_base")
        e("sub.u32", "left", "c_w", rem, why="bytes of this row's piece from the vector's first on")
        e("add.u32", "next_base", sreg, "c_jump", why="granule m of the next row's piece: next_base + m")
        access(0, e.at(sreg))
        for m in range(1, 16 // g):
            on, base = f"next_{m}", f"base_{m}"
            e.reg("pred", on)
            e.reg("u32", base)
            e("setp.le.u32", on, "left", m * g, why="in the next row's piece" if m == 1 else "")
            e("selp.u32", base, "next_base", sreg, on)
            access(m, e.at(base, m * g))

    def _first_vector(self, j: str) -> None:
        """%j = this thread's first vector of the chunk: the chunks' vectors are dealt out
        to the threads as one sequence (chunk k's first goes to thread c_base mod block),
        so every thread has within one of the same number, where starting every chunk at
        thread 0 gave the first threads up to twice the last ones' (and every warp waited
        for them at the tile's barrier)."""
        e = self.e
        e("sub.u32", j, "thread", "c_base")
        e("and.b32", j, j, self.block_size - 1, why="(thread - c_base) mod block")

    def _owned_walk(
        self, stage: str, access: Callable[[], None], after: Callable[[], None] | None = None
    ) -> None:
        """Visit the granules of the chunk vector at chunk byte %d (address %a) whose bytes
        this tile holds, one a round (16 / granule rounds): ``access()`` with %s their
        place in the tile and %am their address. They are consecutive, so %s is found by
        one division, at the first of them, and then carried as :meth:`_granule_walk`
        carries it. ``after()`` ends every round (a shift of the registers, say)."""
        e, g = self.e, self.granule
        e.reg("u32", "m")
        e.reg("u64", "am")
        e.reg("pred", "found", "wrap")
        loop, skip, have = e.label("PG_LOOP"), e.label("PG_SKIP"), e.label("PG_HAVE")
        e("mov.u32", "m", 0)
        e("setp.ne.u32", "found", "m", 0, why="no granule of this tile seen yet")
        e.place(loop)
        e("cvt.u64.u32", "tmp64", "m")
        e("add.s64", "dm", "d", "tmp64")
        e("add.u64", "am", "a", "tmp64")
        e("setp.ge.s64", "pr", "dm", "c_dlo")
        e("setp.lt.and.s64", "pr", "dm", "c_dhi", "pr")
        e.bra(skip, guard="pr", neg=True, why="not this tile's")
        e.bra(have, guard="found")
        self._source_of("dm", "s", "rem", stage)
        e("setp.eq.u32", "found", "m", "m", why="the rest follow in order: carried, not divided")
        e.place(have)
        access()
        e("add.u32", "s", "s", g)
        e("add.u32", "rem", "rem", g)
        e("setp.eq.u32", "wrap", "rem", "c_w", why="end of this row's piece")
        e("add.u32", "s", "s", "c_jump", guard="wrap")
        e("mov.u32", "rem", 0, guard="wrap")
        e.place(skip)
        if after is not None:
            after()
        e("add.u32", "m", "m", g)
        e("setp.lt.u32", "pr", "m", 16)
        # .uni speaks of the threads active here: those that came in (a plain branch may
        # have left others out), and each of them runs 16 / granule rounds.
        e.bra(loop, guard="pr", uniform=True, why="the same count in every thread that came in")
