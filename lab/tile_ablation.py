"""Ablations of the concat tile for ``tile_variants.py`` (``--variants`` names in
``ABLATIONS``): its ``identity`` variant with parts of the tile's structure removed, to
separate where the structure's cost goes. Timing stand-ins, wrong results by design;
CPU-checked by ``test_tile_ablation.py``."""

from __future__ import annotations

from typing import Any

# Where ``identity``'s 4.5 points below the flat copy go (lab/README.md, "The concat tile
# without its gather"): ``identity`` with parts of the tile's structure removed. A tile of
# the row gather runs: the chunk table (warp 0, a lane a chunk) -> barrier A -> every
# chunk's vectors staged with cp.async, each thread waiting for its own -> barrier B ->
# the row vectors (here staged vector i as row vector i) -> barrier C -> the next tile.
# What each barrier guards decides what can go alone:
# * A guards the table the staging reads (each chunk's vector count, first vector,
#   limits): without it the staging would read an unwritten table and copy from wild
#   addresses, so A goes only with the table (``id_no_table``), each thread then working
#   out every chunk's range itself (``_compute_chunk``, as before the table: -16 to +112
#   static SASS instructions against identity's, at 2-6 chunks, the table's loads gone),
#   which makes that variant a lower bound on what the table and A cost.
# * B guards the staged bytes and the table's bases for the real gather; in ``identity``
#   each thread reads back only vectors it staged itself (chunk vectors are dealt out as one
#   sequence, staged vector s by thread s mod block, and row vector u * block + thread is
#   staged vector u * block + thread), so its own cp.async.wait_group covers what it reads,
#   and B goes alone (``id_no_staged_bar``).
# * C keeps the next tile from refilling the table and the staging area under slower
#   warps; the planner launches one CTA a tile, so there it precedes only the CTA's exit
#   (``id_no_end_bar``).
# ``id_bare`` removes all three (only the staging's writes and reads are left), and
# ``id_direct`` the staging as well: each thread loads its full row vectors from the row
# side itself and stores them back (no shared memory, no barrier), the same bytes read and
# written as the flat copy, in the tile's grid, block and vectors in flight a thread. (It
# reads the array it writes, where the flat copy reads another; the sweep's arrays, 64-192
# MB, are larger than the L2, so no read is saved by that.)
# name -> the parts removed.
ABLATIONS = {
    "id_no_staged_bar": frozenset({"staged_bar"}),
    "id_no_end_bar": frozenset({"end_bar"}),
    "id_no_table": frozenset({"table"}),
    "id_bare": frozenset({"table", "staged_bar", "end_bar"}),
    "id_direct": frozenset({"table", "staging", "end_bar"}),
}
# A candidate for the product, not an ablation: the planned kernel (real results) with
# barrier C written only where the CTA has another tile to refill the table and staging
# for, after ``_advance`` (a uniform test: every thread of a CTA holds the same tile).
# Correct for any grid; on the planner's grids (one CTA a tile) it never waits at C.
LAST_TILE_NO_END_BAR = "pl_last_no_end_bar"
# The second candidate: the planned kernel without the chunk table's staging part and
# barrier A, each thread working out chunk k's range in registers just before staging it
# (``id_no_table``'s change on the real gather, which reads only the table's bases, still
# written by thread 0 during the staging and made visible by barrier B). On an H100,
# ``id_no_table`` stood 1.1 points of the flat copy above ``identity`` on three sweeps.
NO_TABLE = "pl_no_table"
# The planned kernel with its chunk table at every granule: tree 778b8eaa's row gather,
# PTX for PTX (ptx_identity.py), which the product leaves below 16-byte granules for up to
# TABLE_FREE_CHUNKS chunks (tree b627b501). The ablations and both candidates are of this
# kernel, the structure they took apart; ``--variants planned,pl_table`` times the landed
# staging against it in one run, without a patch.
WITH_TABLE = "pl_table"
# The planned kernel without its chunk table below 16-byte granules at every chunk count:
# tree b627b501's row gather, PTX for PTX, which the product keeps to TABLE_FREE_CHUNKS
# chunks; ``--pieces 6-32 --variants planned,pl_free`` times the table past that against it.
TABLE_FREE = "pl_free"
# The planned kernel with the row gather's chunk found by testing every offset in turn at
# any chunk count (trees up to f31005ef), where the product (tree b30c2c32 on) searches the
# table's offsets from SEARCHED_LOCATE_CHUNKS chunks; ``--pieces 6-32 --variants
# planned,pl_scan`` times the search against it.
SCANNED_LOCATE = "pl_scan"


def ablation_tile(removed: frozenset[str], identity: Any) -> Any:
    """``identity`` (``tile_variants.identity_tile()``) without the parts in ``removed``
    (ABLATIONS): ``table`` (the chunk table and barrier A), ``staged_bar`` (B),
    ``end_bar`` (C), ``staging`` (the cp.async staging, with B, and the read-back: the row
    side read in place). The row gather's tile only; any other refuses (``run_case``
    records the refusal)."""
    from ptxgen.kernels.fastcat_tile import MAX_CHUNKS
    from ptxgen.kernels.tile_emitter import _Emitter

    class Skipping(_Emitter):
        """The tile's emitter, leaving out the next ``skip`` barriers it is asked for:
        the barriers are written inline in ``FastcatTile._body`` and at the end of
        ``_stage_for_rows``, so a barrier is named by the method it follows or ends."""

        skip = skipped = 0

        def __call__(self, opcode: str, *ops: Any, **kwargs: Any) -> None:
            if opcode == "bar.sync" and self.skip:
                self.skip -= 1
                self.skipped += 1
                return
            super().__call__(opcode, *ops, **kwargs)

    class AblationTile(identity):
        if "table" in removed:  # the search reads the table's offsets: scan the parameters
            searched_locate_chunks = MAX_CHUNKS + 1

        # FastcatTile._emit sets a fresh emitter; this class writes through a Skipping one.
        @property
        def e(self) -> Any:
            return self._skipping

        @e.setter
        def e(self, emitter: Any) -> None:
            if emitter.regs:
                raise RuntimeError("the emitter was set after registers were declared")
            self._skipping = Skipping(emitter.fn)

        def _body(self) -> None:
            if not self.row_gather:
                raise ValueError("the ablations are of the row gather's tile only")
            super()._body()
            barriers = len(removed & {"table", "staged_bar", "end_bar"})
            if self.e.skip or self.e.skipped != barriers:
                raise RuntimeError(f"{self.e.skipped} barriers left out, {barriers} meant")

        def _fill_chunk_table(self) -> None:
            if "table" not in removed:
                return super()._fill_chunk_table()
            self.e.skip += 1  # barrier A, which _body writes next

        def _chunk_range(self, k: int) -> Any:
            if "table" not in removed:
                return super()._chunk_range(k)
            return self._chunk_worked_out(k)  # what the table held, in every thread's registers

        def _stage_for_rows(self) -> None:
            if "staging" in removed:
                return
            if "staged_bar" in removed:
                self.e.skip += 1  # barrier B, the last instruction the staging writes
            super()._stage_for_rows()

        def _gather_rows(self) -> None:
            if "staging" in removed:
                self._direct_rows()
            else:
                super()._gather_rows()
            if "end_bar" in removed:
                self.e.skip += 1  # barrier C, which _body writes next

        def _direct_rows(self) -> None:
            """Every full row vector of this thread loaded from the row side itself, all
            loads first (as many bytes in flight a thread as the staging had), then stored
            back where it was read: the vectors ``identity`` writes, read in place."""
            e, B = self.e, self.block_size
            e.reg("u64", "dr_g")
            data = []
            for u in range(self.unroll):
                self._row_vector(u)
                data.append(e.data(f"dr_{u}", 16))
            e("mul.wide.u32", "tmp64", "thread", 16)
            e("add.u64", "dr_g", "tile_abs", "tmp64", why="vector u: 16 * u * block bytes on")
            for u in range(self.unroll):
                e("ld.global.v4.u32", data[u], e.at("dr_g", 16 * u * B), guard=f"full_{u}")
            for u in range(self.unroll):
                e("st.global.v4.u32", e.at("dr_g", 16 * u * B), data[u], guard=f"full_{u}")

    return AblationTile


def with_table_tile() -> Any:
    """``FastcatTile`` whose row gather always fills the chunk table (``WITH_TABLE``)."""
    from ptxgen.kernels.fastcat_tile import FastcatTile

    class WithTableTile(FastcatTile):
        @property
        def staging_without_table(self) -> bool:
            return False

    return WithTableTile


def table_free_tile() -> Any:
    """``FastcatTile`` whose row gather stages without the table below 16-byte granules
    whatever its chunk count (``TABLE_FREE``)."""
    from ptxgen.kernels.fastcat_tile import FastcatTile

    class TableFreeTile(FastcatTile):
        @property
        def staging_without_table(self) -> bool:
            return self.row_gather and self.granule < 16

    return TableFreeTile


def never_from(limit: str) -> Any:
    """``FastcatTile`` with the class attribute ``limit`` (the fewest chunks from which a
    form of the kernel is written, e.g. ``searched_locate_chunks``) past ``MAX_CHUNKS``:
    the form it gates is written at no chunk count."""
    from ptxgen.kernels.fastcat_tile import MAX_CHUNKS, FastcatTile

    return type(f"Never_{limit}", (FastcatTile,), {limit: MAX_CHUNKS + 1})


def scanned_locate_tile() -> Any:
    """``FastcatTile`` whose row gather finds a row vector's chunk by testing every
    chunk's offset in turn at any chunk count (``SCANNED_LOCATE``)."""
    return never_from("searched_locate_chunks")


def no_table() -> Any:
    """``WITH_TABLE`` without the chunk table's staging part and barrier A (``NO_TABLE``)."""
    return ablation_tile(frozenset({"table"}), with_table_tile())


def last_tile_no_end_bar() -> Any:
    """``WITH_TABLE`` whose end-of-tile barrier (C) is written after ``_advance``, behind a
    branch to the exit taken where the CTA has no next tile (``LAST_TILE_NO_END_BAR``)."""
    base = ablation_tile(frozenset({"end_bar"}), with_table_tile())

    class LastTileNoEndBar(base):  # type: ignore[misc, valid-type]
        def _advance(self) -> None:
            super()._advance()
            e = self.e
            e("setp.ge.u32", "pr", "tile", "n_tiles")
            e.bra(self.exit, guard="pr", uniform=True, why="no next tile: nothing to refill")
            e("bar.sync", 0, why="everyone is done with the tile before it is refilled")

    return LastTileNoEndBar
