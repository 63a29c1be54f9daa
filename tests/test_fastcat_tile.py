"""FastcatTile, the shared-memory tile kernel, on the CPU.

* SASS: for every direction/granule/whole_rows/loader/target it accepts (plus chunk
  counts, unrolls and blocks), ptxas assembles the kernel with no spills and no stack,
  and the accesses are the intended ones;
* footprints: the CPU interpreter (tests/ptxsim.py) runs the kernel on small odd
  problems with every allocation exactly the footprint's size (any access outside one
  raises), records every global byte touched, and checks the footprint is tight and the
  bytes moved are right;
* arguments: the constructor refuses what it cannot build, naming the value.

It began as a port of the prototype's tile kernel (lab/fastcat_proto.py) and left its SASS
on purpose (branches whose guard may differ between a warp's threads are plain ``bra``,
where the prototype promised ``.uni``; the edge tiles' byte loops are predicated);
lab/test_port.py checks that its names, arguments and refusals are still the prototype's.
"""

from __future__ import annotations

import random
import re

import pytest
from ptxsim import RecordingMemory, run_kernel

from ptxgen import toolchain
from ptxgen.footprint import FootprintError
from ptxgen.kernels import FastcatTile
from ptxgen.kernels.fastcat import access_width
from ptxgen.kernels.fastcat_tile import MAX_CHUNKS, SEARCHED_LOCATE_CHUNKS, TABLE_FREE_CHUNKS

TARGETS = ("sm_75", "sm_80", "sm_90")


def _configs() -> list[dict]:
    out = []
    for direction in ("backward", "forward"):
        for g in (16, 8, 4, 2, 1):
            for whole in (True, False):
                for loader in ("regs", "cp.async", "bulk"):
                    for target in TARGETS:
                        kw = dict(direction=direction, chunks=2, granule=g, whole_rows=whole, unroll=2,
                                  block=64, loader=loader, target=target)  # fmt: skip
                        try:
                            FastcatTile(**kw)
                        except ValueError:
                            continue
                        out.append(kw)
    # the two-piece walk, at every granule it changes, both directions
    for g in (8, 4, 2, 1):
        for direction, loader in (("backward", "regs"), ("forward", "cp.async"), ("forward", "regs")):
            out.append(dict(direction=direction, chunks=3, granule=g, whole_rows=True, unroll=4, block=256,
                            loader=loader, wide_chunks=True, target="sm_90"))  # fmt: skip
            # ... and beside a chunk that keeps the carried walk
            out.append(dict(direction=direction, chunks=3, granule=g, whole_rows=True, unroll=4, block=256,
                            loader=loader, wide_chunks=(True, False, True), target="sm_90"))  # fmt: skip
    # the row gather (forward, cp.async, whole rows of wide chunks): granules 1 and 2, and
    # the 32 KB tiles it leaves room for
    for g, chunks, unroll in ((1, 5, 4), (2, 3, 4), (1, 6, 8), (4, 2, 8)):
        out.append(dict(direction="forward", chunks=chunks, granule=g, whole_rows=True, unroll=unroll, block=256,
                        loader="cp.async", wide_chunks=True, row_gather=True, target="sm_90"))  # fmt: skip
    # ... and a window a piece, beside narrow chunks
    for g, wide, unroll in ((1, (True, False, True, True), 8), (2, (False, True, False), 4)):
        out.append(dict(direction="forward", chunks=len(wide), granule=g, whole_rows=True, unroll=unroll,
                        block=256, loader="cp.async", wide_chunks=wide, row_gather=True,
                        target="sm_90"))  # fmt: skip
    # chunk counts, unrolls and blocks the planner uses
    for chunks, unroll, block in ((1, 1, 128), (3, 4, 256), (32, 8, 64), (5, 8, 128)):
        for direction, loader in (("backward", "regs"), ("forward", "cp.async"), ("backward", "bulk"),
                                  ("forward", "regs")):  # fmt: skip
            out.append(dict(direction=direction, chunks=chunks, granule=4, whole_rows=loader == "bulk" or chunks > 3,
                            unroll=unroll, block=block, loader=loader, target="sm_90"))  # fmt: skip
    return out


CONFIGS = _configs()


def _norm(sass: str) -> list[str]:
    out = []
    for line in sass.splitlines():
        line = re.sub(r"/\*[0-9a-f]+\*/", "", line.split("//")[0])
        line = re.sub(r"`?\(?\.L_x_\d+\)?", "L", line)
        line = re.sub(r"fastcat_\w+", "K", line).strip()
        if line and not (line.startswith((".", "/*")) and ":" not in line):
            out.append(line)
    return out


@pytest.fixture(scope="module")
def assembled():
    return toolchain.assemble_many([(FastcatTile(**kw).source, kw["target"]) for kw in CONFIGS])


@pytest.mark.parametrize("index", range(len(CONFIGS)), ids=lambda i: FastcatTile(**CONFIGS[i]).id)
def test_sass_without_spills_and_with_the_intended_accesses(assembled, index):
    kw = CONFIGS[index]
    mine = assembled[index]
    assert not isinstance(mine, Exception), mine
    a = _norm(toolchain.disassemble(mine.cubin))
    assert len(a) > 100
    (res,) = mine.functions.values()
    assert res.stack_bytes == res.spill_store_bytes == res.spill_load_bytes == 0, res
    sass = "\n".join(a)
    assert re.search(r"(STG|ST)\.E\.128", sass), "16-byte global stores"
    if kw["loader"] == "regs" or kw["direction"] == "forward":
        assert re.search(r"LDG\.E\.(CONSTANT\.)?128", sass) or "LDGSTS" in sass
    if kw["loader"] == "bulk":
        assert "UBLKCP" in sass
    elif kw["loader"] == "cp.async":
        assert "LDGSTS" in sass


def _light_configs() -> list[dict]:
    """Kernels that ask for 5 resident CTAs of 256 threads (48 registers a thread): the
    row gather and the backward tile through registers, where the rule allows it, on
    every target it applies to, with and without dependent launch (as planned on sm_90+)."""
    out = []
    for target, pdl in (("sm_90", True), ("sm_100", False), ("sm_103", True), ("sm_110", False)):
        for g in (1, 2, 4, 8, 16):
            for chunks, wide in ((1, True), (2, (True, False)), (3, False), (5, True), (6, (False,) + (True,) * 5),
                                 (6, True), (13, True), (32, True), (32, False)):  # fmt: skip
                for unroll in (4, 8):
                    out.append(dict(direction="forward", chunks=chunks, granule=g, unroll=unroll, block=256,
                                    loader="cp.async", wide_chunks=wide, row_gather=True, target=target,
                                    dependent_launch=pdl))  # fmt: skip
                out.append(dict(direction="backward", chunks=chunks, granule=g, unroll=4, block=256,
                                loader="regs", wide_chunks=wide, target=target, dependent_launch=pdl))  # fmt: skip
    return out


def test_kernels_asking_for_five_ctas_fit_48_registers_without_spilling():
    """tile_options._resident_ctas asks ptxas for 5 resident CTAs of 256 threads where the
    kernel fits 48 registers; the ask is a hint ptxas meets by spilling, so check it does
    not (six or more chunks read as word windows did, while a warp filled each chunk's
    entry of the table; the configurations of 6, 13 and 32 wide chunks are those)."""
    configs = _light_configs()
    kernels = [FastcatTile(**kw) for kw in configs]
    asked = [int(re.search(r"\.minnctapersm\s+(\d+)", k.source).group(1)) for k in kernels]
    assert asked == [5] * len(kernels), asked
    built = toolchain.assemble_many([(k.source, k.target) for k in kernels])
    for kernel, ask, result in zip(kernels, asked, built):
        assert not isinstance(result, Exception), f"{kernel.id}: {result}"
        (res,) = result.functions.values()
        assert res.stack_bytes == res.spill_store_bytes == 0, (kernel.id, ask, res)
        assert res.registers <= 48, (kernel.id, res)


def test_constructed_once_per_arguments():
    for kw in CONFIGS:
        mine = FastcatTile(**kw)
        assert FastcatTile(**kw) is mine  # memoised
        assert mine.block == (kw["block"], 1, 1) and mine.tile_bytes == 16 * kw["unroll"] * kw["block"]


@pytest.mark.parametrize(
    "kw, message",
    [
        (
            dict(direction="backward", chunks=1, granule=4, loader="cp.async"),
            "loader 'cp.async' is for direction 'forward' only",
        ),
        (
            dict(direction="forward", chunks=1, granule=4, loader="cp.async", target="sm_75"),
            "loader 'cp.async' needs sm_80 or newer, not sm_75",
        ),
        (
            dict(direction="backward", chunks=1, granule=4, loader="bulk", target="sm_80"),
            "loader 'bulk' needs sm_90 or newer, not sm_80",
        ),
        (
            dict(direction="forward", chunks=1, granule=4, loader="bulk"),
            "loader 'bulk' is for direction 'backward' only",
        ),
        (
            dict(direction="backward", chunks=1, granule=4, loader="bulk", whole_rows=False),
            "it needs whole_rows=True",
        ),
        (dict(direction="backward", chunks=33, granule=4), "chunks = 33 is outside 1..32"),
        (dict(direction="backward", chunks=0, granule=4), "chunks = 0 is outside 1..32"),
        (
            dict(direction="backward", chunks=1, granule=3),
            "granule = 3 is not accepted; accepted: 16, 8, 4, 2, 1",
        ),
        (
            dict(direction="backward", chunks=1, granule=4, unroll=8, block=1024),
            "131152 bytes of static shared memory; at most 49152",
        ),
        (
            dict(direction="backward", chunks=1, granule=4, unroll=3),
            "unroll = 3 is not accepted; accepted: 1, 2, 4, 8",
        ),
        (dict(direction="backward", chunks=1, granule=4, block=96), "block = 96 is not accepted"),
        (
            dict(direction="sideways", chunks=1, granule=4),
            "direction 'sideways'; accepted: 'backward', 'forward'",
        ),
        (
            dict(direction="backward", chunks=1, granule=4, loader="tma"),
            "loader 'tma'; accepted: 'regs', 'cp.async', 'bulk'",
        ),
    ],
)
def test_refuses_what_it_cannot_build(kw, message):
    with pytest.raises(ValueError) as err:
        FastcatTile(**kw)
    assert message in str(err.value)


# --------------------------------------------------------------------------- footprints on the interpreter


def _granule(row_mod: int, pitch: int, offs, widths, mods) -> int:
    return min(access_width(row_mod, pitch, o, w, m) for o, w, m in zip(offs, widths, mods))


# rows, widths of every chunk of the row, the group (first, last chunk), row address mod 16, chunk mods
SIM_CASES = [
    (37, (5, 11, 7), (0, 2), 3, (1, 0, 6)),
    (9, (120, 8, 3), (1, 1), 5, (0, 9, 3)),
    (3, (700, 333), (0, 0), 7, (1, 2)),
    (61, (4, 12), (1, 1), 4, (8, 12)),
    (300, (1,), (0, 0), 0, (0,)),
    (17, (16, 32, 48), (0, 2), 0, (0, 0, 0)),
    (13, (16, 32, 48), (1, 2), 0, (0, 0, 0)),
    (40, (17, 40, 23), (1, 2), 7, (1, 2, 3)),
    (1, (3, 5), (0, 1), 13, (3, 5)),
    (23, (2, 6, 10), (0, 1), 2, (2, 6, 14)),
    # pieces wider than a vector at granules 1 and 2, the runs starting at every byte of a word
    (11, (33, 70, 29), (0, 2), 1, (1, 3, 2)),
    (23, (18, 46, 30), (0, 2), 2, (2, 6, 10)),
    (29, (12, 40, 20), (0, 2), 4, (4, 8, 12)),  # granule 4
    (19, (24, 40, 16), (0, 2), 8, (8, 0, 8)),  # granule 8
]


def _random_wide_cases(count: int, seed: int) -> list[tuple]:
    """Whole-row groups of 2-4 chunks 16-60 bytes wide at random alignments: the
    two-piece walk and the straight partial vectors, on runs that start anywhere in a
    vector and wrap into the next row anywhere in it."""
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        widths = tuple(rng.randint(16, 60) for _ in range(rng.randint(2, 4)))
        row_mod = rng.randrange(16)
        cases.append((rng.randint(5, 40), widths, (0, len(widths) - 1), row_mod,
                      tuple(rng.randrange(16) for _ in widths)))  # fmt: skip
    return cases


SIM_CASES += _random_wide_cases(8, 20261202)


def _random_mixed_cases(count: int, seed: int) -> list[tuple]:
    """Whole-row groups of 3-5 chunks, some 16-60 bytes wide and some 1-15: each chunk's
    code takes its own walk (``wide_chunks`` a flag a chunk)."""
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        n = rng.randint(3, 5)
        narrow = set(rng.sample(range(n), rng.randint(1, n - 1)))
        widths = tuple(rng.randint(1, 15) if k in narrow else rng.randint(16, 60) for k in range(n))
        cases.append((rng.randint(5, 30), widths, (0, n - 1), rng.randrange(16),
                      tuple(rng.randrange(16) for _ in widths)))  # fmt: skip
    return cases


SIM_CASES += [(21, (40, 7, 33), (0, 2), 5, (3, 1, 6)), (15, (3, 64, 20, 1), (1, 3), 9, (0, 5, 2, 7))]
# chunks exactly 16 wide; one wide chunk filling the row (c_jump 0); a narrow chunk between
# two of 16 bytes; a 16-byte chunk of a partial row
SIM_CASES += [(40, (16, 16, 16), (0, 2), 1, (1, 2, 3)), (50, (37,), (0, 0), 3, (5,)),
              (30, (16, 5, 16), (0, 2), 2, (3, 1, 7)), (45, (3, 16, 9), (1, 1), 1, (0, 5, 0))]  # fmt: skip
# one chunk that is the row, at the row's alignment: its vectors are the tile's, so one
# ends at the tile's last byte with its first word-aligned, and its window's fifth word
# lies past the tile (the padding of the word windows)
SIM_CASES += [(70, (37,), (0, 0), 5, (5,))]
SIM_CASES += _random_mixed_cases(6, 20261203)


def _sim_jobs():
    for case in SIM_CASES:
        _, widths, (first, last), _, _ = case
        whole = first == 0 and last == len(widths) - 1
        # Groups with chunks 16 bytes or wider run both walks there (wide_chunks, a flag a
        # chunk where only some are).
        flags = tuple(w >= 16 for w in widths[first : last + 1])
        walks = (False, flags[0] if all(flags) else flags) if any(flags) else (False,)
        for direction in ("backward", "forward"):
            loaders = ["regs"] + (["cp.async"] if direction == "forward" else [])
            loaders += ["bulk"] if direction == "backward" and whole else []
            for loader in loaders:
                for wide in walks:
                    yield case, direction, loader, False, wide, False
                    # A view of part of every row (the ops' pitched arrays): the array ends
                    # with its last row's chunks, so row_bytes is short of rows * pitch.
                    if not whole:
                        yield case, direction, loader, True, wide, False
                # The row gather: forward through cp.async, whole rows; two windows a
                # vector where every chunk is wide, else a window a piece.
                if loader == "cp.async" and whole:
                    yield case, direction, loader, False, flags[0] if len(set(flags)) == 1 else flags, True


@pytest.mark.parametrize("case, direction, loader, view, wide, gather", list(_sim_jobs()))
def test_footprint_is_exact_and_nothing_outside_is_touched(case, direction, loader, view, wide, gather):
    rows, widths, (first, last), row_mod, mods = case
    pitch = sum(widths)
    offs = [sum(widths[:k]) for k in range(len(widths))]
    ids = list(range(first, last + 1))
    g = _granule(row_mod, pitch, [offs[k] for k in ids], [widths[k] for k in ids], [mods[k] for k in ids])
    whole = first == 0 and last == len(widths) - 1
    kernel = FastcatTile(direction=direction, chunks=len(ids), granule=g, whole_rows=whole, unroll=1, block=64,
                         loader=loader, wide_chunks=wide, row_gather=gather, target="sm_90")  # fmt: skip
    row_bytes = (rows - 1) * pitch + offs[last] + widths[last] if view else rows * pitch
    scalars = {"row_bytes": row_bytes, "row_pitch": pitch, "rows": rows}
    for n, k in enumerate(ids):
        scalars |= {f"chunk{n}_off": offs[k], f"chunk{n}_width": widths[k]}
    grid = 3
    fps = {f.arg: f for f in kernel.footprints((grid, 1, 1), kernel.block, scalars)}
    rng = random.Random(f"{case}{direction}{loader}{wide}{gather}")
    mem = RecordingMemory()
    # Every allocation is exactly the footprint: the interpreter raises on any byte outside.
    row = mem.alloc(fps["row_ptr"].nbytes, row_mod)
    chunk_ptrs = [mem.alloc(fps[f"chunk{n}_ptr"].nbytes, mods[k]) for n, k in enumerate(ids)]
    assert kernel.safe_for(row, chunk_ptrs, [offs[k] for k in ids])
    backward = direction == "backward"
    src = [row] if backward else chunk_ptrs
    for p in src:
        view = mem.view(p)
        view[:] = bytes(rng.randrange(256) for _ in range(len(view)))
    for p in [row] if not backward else chunk_ptrs:
        mem.view(p)[:] = b"\xa5" * len(mem.view(p))
    args = {"row_ptr": row, **scalars}
    for n in range(len(ids)):
        args[f"chunk{n}_ptr"] = chunk_ptrs[n]
    run_kernel(kernel, grid, args, mem)

    r = bytes(mem.view(row))
    for n, k in enumerate(ids):
        got = bytes(mem.view(chunk_ptrs[n]))
        want = b"".join(r[i * pitch + offs[k] : i * pitch + offs[k] + widths[k]] for i in range(rows))
        assert got == want, f"chunk {k}"
    if not backward:  # bytes of the row outside the group were not written
        for i in range(rows):
            for c in range(pitch):
                pos = i * pitch + c
                if pos < len(r) and not offs[first] <= c < offs[last] + widths[last]:
                    assert r[pos] == 0xA5, (i, c)
    # Tight: the first and last byte of every footprint are touched, and only in the
    # direction the footprint says.
    for arg, base in [("row_ptr", row)] + [(f"chunk{n}_ptr", p) for n, p in enumerate(chunk_ptrs)]:
        fp = fps[arg]
        hits = [(a - base, n, w) for a, n, w in mem.accesses if base <= a < base + fp.nbytes]
        assert all(a >= 0 and a + n <= fp.nbytes for a, n, _ in hits)
        if fp.nbytes:
            # Forward writes of a group start at its first column (row 0); all else at byte 0.
            lo = offs[first] if arg == "row_ptr" and not backward else 0
            assert min(a for a, _, _ in hits) == lo and max(a + n for a, n, _ in hits) == fp.nbytes, arg
            assert {w for _, _, w in hits} == {fp.writes}, arg


def test_footprints_refuse_layouts_the_kernel_cannot_do():
    k = FastcatTile(direction="forward", chunks=2, granule=4, whole_rows=True, unroll=1, block=64)
    good = {"row_bytes": 10 * 24, "row_pitch": 24, "rows": 10, "chunk0_off": 0, "chunk0_width": 8,
            "chunk1_off": 8, "chunk1_width": 16}  # fmt: skip
    assert [f.nbytes for f in k.footprints((1, 1, 1), k.block, good)] == [240, 80, 160]
    for change, words in (
        ({"chunk1_off": 12, "row_pitch": 28, "row_bytes": 280}, "adjacent"),
        ({"chunk1_width": 12}, "whole_rows"),
        ({"row_bytes": 239}, r"rows \* row_pitch"),
        ({"chunk0_width": 6, "chunk1_off": 6, "chunk1_width": 18}, "multiple of 4"),
        ({"chunk1_width": 20}, "row of row_pitch"),
    ):
        with pytest.raises(FootprintError, match=words):
            k.footprints((1, 1, 1), k.block, good | change)
    with pytest.raises(FootprintError, match="block"):
        k.footprints((1, 1, 1), (128, 1, 1), good)
    assert [f.nbytes for f in k.footprints((0, 1, 1), k.block, good)] == [0, 0, 0]
    wide = FastcatTile(direction="forward", chunks=2, granule=4, whole_rows=True, unroll=1, block=64,
                       wide_chunks=True)  # fmt: skip
    with pytest.raises(FootprintError, match=r"chunk0_width = 8; built with wide_chunks"):
        wide.footprints((1, 1, 1), wide.block, good)
    assert [f.nbytes for f in wide.footprints((1, 1, 1), wide.block, good | {"chunk0_width": 16,
            "chunk1_off": 16, "row_pitch": 32, "row_bytes": 320})] == [320, 160, 160]  # fmt: skip
    # A flag a chunk: only the flagged one must be 16 bytes or wider.
    some = FastcatTile(direction="forward", chunks=2, granule=4, whole_rows=True, unroll=1, block=64,
                       wide_chunks=(False, True))  # fmt: skip
    assert [f.nbytes for f in some.footprints((1, 1, 1), some.block, good)] == [240, 80, 160]
    with pytest.raises(FootprintError, match=r"chunk1_width = 12; built with wide_chunks for chunk 1"):
        some.footprints(
            (1, 1, 1), some.block, good | {"chunk0_width": 12, "chunk1_off": 12, "chunk1_width": 12}
        )
    same = FastcatTile(direction="forward", chunks=2, granule=4, unroll=1, block=64, wide_chunks=(True, True))
    assert same.id == wide.id  # equal flags are the one-value kernel
    assert some.id.endswith("__regs__w01__sm_90")
    for bad in ((True,), (True, 1), [True, False], "yes"):
        with pytest.raises(TypeError, match="wide_chunks must be True, False or a tuple of 2 bools"):
            FastcatTile(direction="forward", chunks=2, granule=4, wide_chunks=bad)
    assert (
        not k.safe_for(16, [0, 2], [0, 8])
        and not k.safe_for(1, [0, 0], [0, 8])
        and k.safe_for(0, [0, 0], [0, 8])
    )


def test_the_interpreter_answers_each_warp_at_one_vote():
    """vote.sync in tests/ptxsim.py: a warp goes on once every lane that has not exited
    stands at the same vote, each given the warp's answer; lanes at different votes, or
    some at a barrier, are an error (on the GPU: undefined)."""
    from ptxsim import _schedule, _vote

    def lane(plan, log):
        for step in plan:
            log.append((yield step))

    log = []
    _schedule(
        [lane([("vote", (7, "any"), i == 3)], log) for i in range(32)] + [lane([], log) for _ in range(32)]
    )
    assert log == [True] * 32
    log = []
    _schedule([lane([("vote", (7, "all"), True)] if i % 2 else [], log) for i in range(64)])
    assert log == [True] * 32, "exited lanes take no part"
    with pytest.raises(RuntimeError, match=r"different vote\.sync instructions"):
        _schedule([lane([("vote", (7 if i < 16 else 9, "any"), True)], []) for i in range(32)])
    with pytest.raises(RuntimeError, match="part of a warp waits at a barrier"):
        _schedule([lane(["bar"] if i < 16 else [("vote", (7, "any"), True)], []) for i in range(32)])
    lanes = [(0, True), (1, False), (5, True)]
    assert (_vote("any", lanes), _vote("all", lanes), _vote("uni", lanes), _vote("ballot", lanes)) == (
        True,
        False,
        False,
        0b100001,
    )


@pytest.mark.parametrize("granule", [1, 2, 4, 8, 16])
def test_row_gather_stages_without_the_table_below_16_byte_granules(granule):
    """Below a 16-byte granule, up to TABLE_FREE_CHUNKS chunks, the row gather's staging
    starts at once: no table filled by warp 0, no barrier before the first cp.async, two
    barriers a tile; at 16 bytes it keeps the table (the whole-vector windows leave no
    registers for the ranges), and past that many chunks (each costs every thread)."""
    kw = dict(direction="forward", chunks=3, granule=granule, whole_rows=True, unroll=8, block=256,
              loader="cp.async", wide_chunks=True, row_gather=True, target="sm_90")  # fmt: skip
    kernel = FastcatTile(**kw)
    code = "\n".join(line.split("//")[0] for line in kernel.source.splitlines())
    loop = code[code.index("TILE_LOOP:") :]
    without = granule < 16
    assert kernel.staging_without_table == without
    assert len(re.findall(r"\bbar\.sync\b", loop)) == (2 if without else 3)
    assert ("st.shared.v2.s64" in loop) != without, "the table's staging part is written only with the table"
    first_copy, first_barrier = loop.index("cp.async.cg"), loop.index("bar.sync")
    assert (first_copy < first_barrier) == without
    assert ("%dR" in code) != without, "no grid step carried where each tile is located afresh"
    # thread 0 writes each chunk's staging base for the gather before the staging's closing
    # barrier (the interpreter runs threads one by one between barriers, so a write after it
    # would pass the footprint tests)
    bases = [m.start() for m in re.finditer(r"st\.shared\.v4\.u32\s+\[%ctab\+\d+\]", loop)]
    gather = loop.index("ld.shared.v4.u32")
    assert len(bases) == kw["chunks"] and max(bases) < loop.rindex("bar.sync", 0, gather)
    assert not FastcatTile(**{**kw, "row_gather": False, "unroll": 4}).staging_without_table
    # past TABLE_FREE_CHUNKS (by granule) the table is back: each chunk's range costs every thread
    limit = TABLE_FREE_CHUNKS.get(granule, 0)
    assert without == (limit > 0)
    if without:
        assert not FastcatTile(**{**kw, "chunks": limit + 1}).staging_without_table
        assert FastcatTile(**{**kw, "chunks": limit}).staging_without_table


def _many_chunk_cases(seed: int) -> list[tuple]:
    """Whole rows of 12-32 chunks at granules 1-8, some narrower than a vector and some
    rows wider than the interpreter's 1 KB tiles (chunks absent from a tile)."""
    rng = random.Random(seed)
    cases = []
    for n, g, top in ((12, 1, 40), (13, 2, 30), (17, 4, 24), (32, 1, 100), (24, 8, 16), (32, 2, 9)):
        widths = tuple(g * rng.randint(1, top) for _ in range(n))
        mods = tuple(g * rng.randrange(16 // g) for _ in range(n))
        cases.append((rng.randint(3, 9), widths, (0, n - 1), g * rng.randrange(16 // g), mods))
    return cases


@pytest.mark.parametrize("case", _many_chunk_cases(20261208), ids=lambda c: f"k{len(c[1])}")
def test_row_gather_searches_for_the_chunk_past_many_chunks(case):
    """From SEARCHED_LOCATE_CHUNKS chunks the row gather finds a row vector's chunk by a
    binary search over the table's offsets (ceil(log2 chunks) shared loads) instead of
    testing every offset: exact on the interpreter, nothing outside the arrays touched."""
    widths = case[1]
    flags = tuple(w >= 16 for w in widths)
    wide = flags[0] if len(set(flags)) == 1 else flags
    kernel = FastcatTile(direction="forward", chunks=len(widths), granule=1, whole_rows=True, unroll=1, block=64,
                         loader="cp.async", wide_chunks=wide, row_gather=True, target="sm_90")  # fmt: skip
    assert kernel.searched_locate and not kernel.staging_without_table
    steps = (len(widths) - 1).bit_length()
    searches = re.findall(r"ld\.shared\.u32\s+%rg_bound, \[%rg_ent\+60\]", kernel.source)
    assert len(searches) == steps * (1 + 1)  # the gather and its edge bytes: one load a step
    test_footprint_is_exact_and_nothing_outside_is_touched(case, "forward", "cp.async", False, wide, True)


def test_searched_locate_only_with_the_table():
    kw = dict(direction="forward", granule=4, whole_rows=True, unroll=8, block=256, loader="cp.async",
              wide_chunks=True, row_gather=True, target="sm_90")  # fmt: skip
    assert not FastcatTile(**kw, chunks=SEARCHED_LOCATE_CHUNKS - 1).searched_locate
    assert FastcatTile(**kw, chunks=SEARCHED_LOCATE_CHUNKS).searched_locate
    assert not FastcatTile(**{**kw, "row_gather": False, "unroll": 4}, chunks=MAX_CHUNKS).searched_locate

    class TableFree(FastcatTile):  # a study's subclass: no table at any chunk count
        table_free_chunks = dict.fromkeys((1, 2, 4, 8), MAX_CHUNKS)

    free = TableFree(**kw, chunks=MAX_CHUNKS)
    assert free.staging_without_table and not free.searched_locate
