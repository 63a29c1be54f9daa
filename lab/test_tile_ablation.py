"""tile_ablation.py's ablations of the concat tile, run through tile_variants.py
(``ABLATIONS``: ``identity`` without barrier B, without barrier C, without the chunk
table and barrier A, without all three, and ``id_direct`` without shared memory),
checked on the CPU before a GPU times them:
built as ``run_case`` builds them (the planner's launches for sweep concats, the variant's
class in ``FastcatTile``'s place), assembled by ptxas at the planned kernel's registers
without spills, each with the parts it claims removed and nothing else, and run whole in
the PTX interpreter: every global access inside the real kernel's footprints (a fault
would end the study's GPU run), every barrier kept reached by every thread, the same row
vectors written as ``identity``."""

from __future__ import annotations

import random
import re

import pytest
import tile_variants
from ptxsim import RecordingMemory, run_kernel
from test_fastcat_tile import _granule

from ptxgen import toolchain
from ptxgen.dtypes import resolve_dtype
from ptxgen.kernels import fastcat_tile
from ptxgen.kernels import plan as planner
from ptxgen.kernels.fastcat import GpuTraits
from ptxgen.kernels.tile_options import wide_chunks_option

# The H200 the study runs on, as the planner sees it: 132 SMs, 4.8 TB/s (32 KB tiles).
H200 = GpuTraits("sm_90", 132, 2048, 60 << 20, 228 << 10, 227 << 10, 4_800 * 10**9)
# Concats of the study's sweep (seed 20261301) where a tile runs: every dtype, 2-6 pieces
# of odd widths, a narrow piece beside wide ones (u8) and none (the others).
SHAPES = [
    ("uint8", 109724, (65, 15, 232, 98, 221, 297)),
    ("bfloat16", 1431559, (3, 46)),
    ("bfloat16", 184165, (111, 272, 38)),
    ("float32", 31285, (180, 225, 217, 170)),
    ("float64", 12139, (254, 230, 39, 283, 215)),
]
CANDIDATES = [tile_variants.LAST_TILE_NO_END_BAR, tile_variants.NO_TABLE]  # real copies
# The ablations and the candidates are of WITH_TABLE (tree 778b8eaa's row gather, the
# table at every granule): ID_TABLE is their identity. planned and identity are the
# product's, without the table below 16-byte granules (every shape here is below) up to
# TABLE_FREE_CHUNKS chunks; FREE (tree b627b501's) without it at any chunk count.
TABLE, ID_TABLE, FREE = tile_variants.WITH_TABLE, tile_variants.ID_TABLE, tile_variants.TABLE_FREE
VARIANTS = ["planned", "identity", TABLE, ID_TABLE, FREE, *tile_variants.ABLATIONS, *CANDIDATES]
# bar.sync a tile, tile loop only: A (chunk table), B (staged), C (end of the tile).
BARRIERS = {"planned": 2, "identity": 2, TABLE: 3, ID_TABLE: 3, FREE: 2, "id_no_staged_bar": 2,
            "id_no_end_bar": 2, "id_no_table": 2, "id_bare": 0, "id_direct": 0,
            "pl_last_no_end_bar": 3, "pl_no_table": 2}  # fmt: skip
WHY = {"table": "the chunk table is in shared memory", "staged_bar": "and everyone's",
       "end_bar": "before it is refilled"}  # fmt: skip


def planned_kernel(name: str, dtype: str, rows: int, sizes: tuple[int, ...]):
    """The tile kernel the op plans for this concat on the H200, with the variant's class
    in ``FastcatTile``'s place (what ``run_case`` does before it calls the op)."""
    original, ours = planner.choose, fastcat_tile.FastcatTile
    try:
        planner.choose = tile_variants.patched_choose(original, {}, None, H200.sm_count)
        fastcat_tile.FastcatTile = tile_variants.stand_in(name)
        plan = planner.make_plan(planner.Problem("forward", resolve_dtype(dtype), rows, sizes), H200)
    finally:
        planner.choose, fastcat_tile.FastcatTile = original, ours
    (step,) = plan.steps
    assert step.kernel.info["family"] == "tile" and step.kernel.row_gather
    return step.kernel


@pytest.fixture(scope="module")
def assembled():
    try:
        toolchain.locate_tool("ptxas")
    except toolchain.ToolNotFound as err:
        pytest.skip(f"no ptxas to assemble the variants: {err}")
    kernels = {(n, s): planned_kernel(n, *s) for n in VARIANTS for s in SHAPES}
    built = toolchain.assemble_many([(k.source, k.target) for k in kernels.values()])
    return {key: (kernels[key], result) for key, result in zip(kernels, built)}


def _code(source: str) -> str:
    """The PTX without its comments (which name what the instructions do)."""
    return "\n".join(line.split("//")[0] for line in source.splitlines())


def _count(pattern: str, source: str) -> int:
    return len(re.findall(pattern, _code(source)))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}-{len(s[2])}")
@pytest.mark.parametrize("name", VARIANTS)
def test_assembles_at_the_planned_registers_without_spilling(assembled, name, shape):
    """The planned kernel asks ptxas for 5 CTAs of 256 threads an SM (48 registers): a
    variant over that would be timed at fewer CTAs an SM, and one that spilled against
    its spills, not against what it removes. The exception is ``pl_no_table``, a
    candidate whose spills (20-36 bytes at 48 registers) are part of its cost."""
    kernel, result = assembled[name, shape]
    assert not isinstance(result, Exception), result
    (res,) = result.functions.values()
    assert res.registers <= 48, res
    if name == tile_variants.NO_TABLE:  # every chunk's range in registers: timed as it is
        assert res.spill_store_bytes <= 64, res
        return
    assert res.stack_bytes == res.spill_store_bytes == res.spill_load_bytes == 0, res
    assert kernel.block_size == 256 and ".minnctapersm 5" in kernel.source
    table_back = name in ("planned", "identity") and not kernel.staging_without_table
    assert _count(r"\bbar\.sync\b", kernel.source) == BARRIERS[name] + table_back


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}-{len(s[2])}")
@pytest.mark.parametrize("name", [ID_TABLE, *tile_variants.ABLATIONS])
def test_each_variant_removes_what_it_says(assembled, name, shape):
    kernel, _ = assembled[name, shape]
    ident, _ = assembled[ID_TABLE, shape]
    src, base = kernel.source, ident.source
    assert _count(r"\bbar\.sync\b", src) == BARRIERS[name]
    assert _count(r"\bbar\.sync\b", assembled[TABLE, shape][0].source) == 3
    removed = tile_variants.ABLATIONS.get(name, frozenset())
    table_fill = r"st\.shared\.v2\.s64"  # the first store of a chunk's entry
    if "staging" in removed:  # no shared memory, no cp.async: global loads and stores
        assert not re.search(r"\b(ld|st)\.shared|cp\.async|bar\.sync", _code(src))
        assert _count(r"ld\.global\.v4\.u32", src) == _count(r"st\.global\.v4\.u32", src) == kernel.unroll
        return
    # the staging is identity's: its cp.async and granule loads, its read-back
    assert _count(r"cp\.async\.cg", src) == _count(r"cp\.async\.cg", base) == kernel.chunks
    assert _count(r"cp\.async\.wait_group", src) == 1
    assert _count(r"\[%id_at\]", src) == kernel.unroll
    if "table" in removed:  # no table: no entry stored, every shared load identity's read-back
        assert not _count(table_fill, src)
        assert _count(r"ld\.shared", src) == kernel.unroll
    else:
        assert _count(table_fill, src) == 1
        assert _count(r"ld\.shared", src) == _count(r"ld\.shared", base)
    # The barriers left are those not removed, each known by the reason its comment gives.
    barriers = "\n".join(line for line in src.splitlines() if re.search(r"\bbar\.sync\b", line))
    for part, why in WHY.items():
        assert (why in barriers) == (part not in removed), part
    # Removing a barrier alone removes that line and nothing else.
    if removed <= {"staged_bar", "end_bar"}:
        lines = [line for line in base.splitlines() if not re.search(r"\bbar\.sync\b", line)]
        kept = [line for line in src.splitlines() if not re.search(r"\bbar\.sync\b", line)]
        assert kept == lines


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}-{len(s[2])}")
def test_last_tile_variant_moves_only_the_end_barrier(assembled, shape):
    """``pl_last_no_end_bar`` is WITH_TABLE's PTX with barrier C moved past ``_advance``,
    behind a uniform branch to the exit where the CTA has no next tile."""
    src = assembled[tile_variants.LAST_TILE_NO_END_BAR, shape][0].source.splitlines()
    planned = assembled[TABLE, shape][0].source.splitlines()
    c = next(i for i, line in enumerate(planned) if "before it is refilled" in line)
    moved = next(i for i, line in enumerate(src) if "before it is refilled" in line)
    assert src[:c] == planned[:c]
    advance = planned[c + 1 : c + 7]  # tile += grid, then (R, C) stepped
    assert src[c : c + 6] == advance and "add.u32" in advance[0]
    assert re.search(r"setp\.ge\.u32\s+%pr, %tile, %n_tiles", src[c + 6])
    assert re.search(r"bra\.uni\s+\$?EXIT", src[c + 7]) and moved == c + 8
    assert src[c + 9 :] == planned[c + 7 :]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}-{len(s[2])}")
def test_table_free_is_the_planned_kernel_up_to_table_free_chunks(assembled, shape):
    """``pl_free`` is the product's kernel, PTX for PTX, up to TABLE_FREE_CHUNKS chunks;
    past them it is the product's without the table fill and its barrier."""
    kernel = assembled["planned", shape][0]
    free, planned = assembled[FREE, shape][0].source, kernel.source
    if kernel.staging_without_table:  # at most TABLE_FREE_CHUNKS chunks at its granule
        assert free == planned
    else:
        assert _count(r"st\.shared\.v2\.s64", planned) == 1 and not _count(r"st\.shared\.v2\.s64", free)
        assert _count(r"\bbar\.sync\b", planned) == 3 and _count(r"\bbar\.sync\b", free) == 2


def test_refuses_what_is_not_the_row_gather():
    made = tile_variants.stand_in("id_bare")
    with pytest.raises(ValueError, match="row gather"):
        made(direction="forward", chunks=2, granule=1, unroll=4, block=256, loader="cp.async")


# (rows, piece widths in bytes, row address mod 16, piece addresses mod 16): whole rows at
# each granule, 2-6 pieces, narrow and wide, several tiles of 2 KB (unroll 2, 64 threads).
SIM_CASES = [
    (211, (5, 11, 7), 3, (1, 0, 6)),  # granule 1, narrow pieces
    (61, (33, 70, 29), 1, (1, 3, 2)),  # granule 1, wide
    (97, (3, 17, 5, 29, 1, 13), 5, (1, 2, 3, 4, 5, 6)),  # granule 1, six pieces
    (67, (18, 46, 30), 2, (2, 6, 10)),  # granule 2
    (71, (12, 40, 20), 4, (4, 8, 12)),  # granule 4
    (97, (24, 40, 16), 8, (8, 0, 8)),  # granule 8
    (53, (16, 96), 0, (0, 0)),  # granule 16, two pieces
]


def _simulate(name: str, case: tuple, grid: int | None) -> tuple[dict, set, set, bytes]:
    """Run the variant on one case in the interpreter, every allocation exactly the
    footprint the real kernel has (the interpreter raises on any byte outside it, and on a
    barrier some threads reach while others have exited); ``grid`` None: one CTA a tile,
    as planned. Returns the footprints by argument, the global bytes read and written, and
    the row side's bytes after the run (poisoned before it)."""
    rows, widths, row_mod, mods = case
    pitch, offs = sum(widths), [sum(widths[:k]) for k in range(len(widths))]
    g = _granule(row_mod, pitch, offs, list(widths), list(mods))
    flags = tuple(w >= 16 for w in widths)
    made = tile_variants.stand_in(name) if name != "planned" else fastcat_tile.FastcatTile
    kernel = made(direction="forward", chunks=len(widths), granule=g, whole_rows=True, unroll=2,
                  block=64, loader="cp.async", wide_chunks=wide_chunks_option(flags), row_gather=True,
                  target="sm_90")  # fmt: skip
    scalars = {"row_bytes": rows * pitch, "row_pitch": pitch, "rows": rows}
    for k in range(len(widths)):
        scalars |= {f"chunk{k}_off": offs[k], f"chunk{k}_width": widths[k]}
    tiles = kernel.grid(rows, pitch)[0]
    assert tiles >= 3  # several tiles, so a CTA of a smaller grid walks more than one
    grid = tiles if grid is None else grid
    fps = {f.arg: f for f in kernel.footprints((grid, 1, 1), kernel.block, scalars)}
    mem = RecordingMemory()
    args = {"row_ptr": mem.alloc(fps["row_ptr"].nbytes, row_mod), **scalars}
    for k in range(len(widths)):
        args[f"chunk{k}_ptr"] = mem.alloc(fps[f"chunk{k}_ptr"].nbytes, mods[k])
    rng = random.Random(str(case))
    for k in range(len(widths)):
        piece = mem.view(args[f"chunk{k}_ptr"])
        piece[:] = bytes(rng.randrange(256) for _ in range(len(piece)))
    row = mem.view(args["row_ptr"])
    row[:] = b"\xa5" * len(row)
    mem.clear()
    run_kernel(kernel, grid, args, mem)
    reads = {a + i for a, n, w in mem.accesses if not w for i in range(n)}
    writes = {a + i for a, n, w in mem.accesses if w for i in range(n)}
    spans = {arg: (args[arg], args[arg] + fp.nbytes) for arg, fp in fps.items()}
    return spans, reads, writes, bytes(mem.view(args["row_ptr"]))


@pytest.mark.parametrize("grid", [None, 2], ids=["tile-a-cta", "grid-stride"])
@pytest.mark.parametrize("case", SIM_CASES, ids=lambda c: f"{len(c[1])}x{c[1][0]}")
def test_stays_inside_the_footprints_and_writes_identitys_vectors(case, grid):
    spans, id_reads, id_writes, _ = _simulate(ID_TABLE, case, grid)
    _, _, planned_writes, _ = _simulate(TABLE, case, grid)
    row_lo, row_hi = spans["row_ptr"]
    pieces = [span for arg, span in spans.items() if arg != "row_ptr"]
    # identity writes the whole row vectors the planned kernel writes, not the vectors
    # that straddle the array's ends (where it has such)
    rows, widths, row_mod, _ = case
    edges = bool(row_mod or (row_mod + rows * sum(widths)) % 16)
    assert id_writes <= planned_writes and (id_writes < planned_writes) == edges
    for name in tile_variants.ABLATIONS:
        _, reads, writes, _ = _simulate(name, case, grid)
        assert writes == id_writes, name
        assert all(row_lo <= a < row_hi for a in writes), name
        if "staging" in tile_variants.ABLATIONS[name]:  # the row side read in place
            assert reads == writes, name
        else:  # the same staging as identity: the table's ranges worked out alike
            assert reads == id_reads, name
            assert all(any(lo <= a < hi for lo, hi in pieces) for a in reads), name


@pytest.mark.parametrize("grid", [None, 2], ids=["tile-a-cta", "grid-stride"])
@pytest.mark.parametrize("case", SIM_CASES, ids=lambda c: f"{len(c[1])}x{c[1][0]}")
@pytest.mark.parametrize("name", [*CANDIDATES, TABLE, FREE])
def test_candidates_are_the_planned_copy(case, grid, name):
    """The candidates for the product must copy: the same reads, writes and row bytes as
    the planned kernel, on one CTA a tile and on a grid where each CTA walks several tiles
    (there ``pl_last_no_end_bar``'s barrier C still runs between tiles)."""
    planned = _simulate("planned", case, grid)
    got = _simulate(name, case, grid)
    assert got[1:] == planned[1:]
    assert b"\xa5" * 16 not in got[3]  # the poison gone: every row vector written


def test_scanned_locate_tests_every_offset():
    """``pl_scan`` finds a row vector's chunk by testing each chunk's offset from the
    parameters, at any chunk count: no search over the table (tree b30c2c32 on
    searches from twelve chunks), one offset read a chunk a vector, in the gather and its
    edge bytes."""
    made = tile_variants.stand_in(tile_variants.SCANNED_LOCATE)
    kernel = made(direction="forward", chunks=32, granule=1, whole_rows=True, unroll=1, block=64,
                  loader="cp.async", wide_chunks=True, row_gather=True, target="sm_90")  # fmt: skip
    assert "%rg_try" not in kernel.source
    assert len(re.findall(r"ld\.param\.u32\s+%rg_bound", kernel.source)) == 31 * 2


# Past SEARCHED_LOCATE_CHUNKS (12) pieces: granule 1, narrow and wide, rows wider than a tile.
PAST_SEARCH = (5, (300, 17, 250, 3, 1, 400, 9, 33, 2, 60, 7, 90, 11), 3, tuple(range(13)))


def test_no_table_scans_the_offsets_past_the_search_limit():
    """``pl_no_table`` leaves the table out, so its row gather tests every offset from the
    parameters at any chunk count: the search reads the table's offsets, which past twelve
    pieces it read unwritten. It copies as the planned kernel does there."""
    made = tile_variants.stand_in(tile_variants.NO_TABLE)
    kernel = made(direction="forward", chunks=13, granule=1, whole_rows=True, unroll=1, block=64,
                  loader="cp.async", wide_chunks=False, row_gather=True, target="sm_90")  # fmt: skip
    assert "%rg_try" not in kernel.source
    planned = _simulate("planned", PAST_SEARCH, None)
    assert _simulate(tile_variants.NO_TABLE, PAST_SEARCH, None)[1:] == planned[1:]
