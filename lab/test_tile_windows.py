"""tile_variants.py's row-gather window ``rg_v2``, run whole in
the PTX interpreter on the product test's row-gather cases below a 4-byte granule: every
byte moved, nothing outside the footprints touched, no shared access outside its array
(the 8-byte loads start up to 7 bytes before a window's base)."""

from __future__ import annotations

import pytest
import test_fastcat_tile
import tile_variants

from ptxgen import toolchain

GATHER_JOBS = [
    job
    for job in test_fastcat_tile._sim_jobs()
    if job[-1]
    and test_fastcat_tile._granule(
        job[0][3],
        sum(job[0][1]),
        [sum(job[0][1][:k]) for k in range(len(job[0][1]))],
        list(job[0][1]),
        list(job[0][4]),
    )
    < 4
]


def test_the_cases_hold_both_gathers_at_both_small_granules():
    wide = [job for job in GATHER_JOBS if job[4] is True]
    assert len(GATHER_JOBS) >= 10 and wide and len(wide) < len(GATHER_JOBS)


@pytest.mark.parametrize("name", ["rg_v2"])
@pytest.mark.parametrize("job", GATHER_JOBS, ids=lambda j: f"{j[0][0]}x{j[0][1]}")
def test_window_variant_moves_every_byte(name, job, monkeypatch):
    monkeypatch.setattr(test_fastcat_tile, "FastcatTile", tile_variants.window_tile(name))
    test_fastcat_tile.test_footprint_is_exact_and_nothing_outside_is_touched(*job)


@pytest.mark.parametrize("name", ["planned", "rg_v2"])
@pytest.mark.parametrize("granule, chunks", [(1, 5), (2, 3), (1, 6)])
@pytest.mark.parametrize("unroll", [4, 8])
def test_window_variant_assembles_in_48_registers_without_spilling(name, granule, chunks, unroll):
    """The planned concat tile's launches (16 and 32 KB: 256 threads, 4 or 8 vectors each,
    5 CTAs an SM asked of ptxas, so 48 registers at most): a variant that spilled would be timed
    against its spills, not its windows."""
    made = tile_variants.window_tile(name) if name != "planned" else test_fastcat_tile.FastcatTile
    kernel = made(
        direction="forward", chunks=chunks, granule=granule, whole_rows=True, unroll=unroll,
        block=256, loader="cp.async", wide_chunks=True, row_gather=True, target="sm_90",
    )  # fmt: skip
    (res,) = toolchain.assemble(kernel.source, "sm_90").functions.values()
    assert res.stack_bytes == res.spill_store_bytes == 0, res
    assert res.registers <= 48, res
