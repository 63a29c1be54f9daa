"""The tile kernel with its chunk table filled as before the lane-parallel fill (tree
``12181a99``): chunk k by warp k mod (block / 32), its lane 0 storing, and the resident
CTAs asked as then (4 where more than five chunks are read as word windows). For
``sweep_variants.py``'s ``old`` variant; needs the lane table (landed with tree ``4ba89c96``),
whose prologue gives the ``lane`` register. ``NewTableAsk4``: the
lane table with the old ask, to tell the two apart."""

from __future__ import annotations

import re

from ptxgen.kernels.fastcat_tile import FastcatTile
from ptxgen.kernels.tile_chunks import _TABLE_ENTRY


def _old_ask(kernel: FastcatTile, source: str) -> str:
    windows = sum(kernel.wide) if kernel.word_windows else 0
    if kernel.direction == "backward" and kernel.loader == "regs" and windows > 5:
        return re.sub(r"\.minnctapersm\s+\d+", ".minnctapersm 4", source)
    return source


class OldTableTile(FastcatTile):
    def _fill_chunk_table(self) -> None:
        e, warps = self.e, self.block_size // 32
        e.reg("pred", "lane0")
        e("setp.eq.u32", "lane0", "lane", 0)
        for k in range(self.chunks):
            skip = e.label(f"TABLE{k}_DONE")
            e("setp.ne.u32", "pr", "warp", k % warps)
            e.bra(skip, guard="pr", uniform=True, why=f"chunk {k} is warp {k % warps}'s to place")
            self._compute_chunk(k)
            at = _TABLE_ENTRY * k
            e("st.shared.v2.s64", e.at("ctab", at), ["c_RW", "c_dlo"], guard="lane0")
            e("st.shared.v2.u64", e.at("ctab", at + 16), ["c_vstart", "c_lim"], guard="lane0")
            e("st.shared.s64", e.at("ctab", at + 32), "c_dhi", guard="lane0")
            e("st.shared.u64", e.at("ctab", at + 40), "c_ptr", guard="lane0")
            e("st.shared.v2.u32", e.at("ctab", at + 48), ["c_nvec", "c_jump"], guard="lane0")
            e("st.shared.f32", e.at("ctab", at + 56), "c_rcp", guard="lane0")
            e("st.shared.u32", e.at("ctab", at + 60), "c_off", guard="lane0")
            e.place(skip)

    @property
    def source(self) -> str:
        return _old_ask(self, FastcatTile.source.func(self))


class NewTableAsk4(FastcatTile):
    @property
    def source(self) -> str:
        return _old_ask(self, FastcatTile.source.func(self))
