"""FastcatRect (2-D tiles, one per CTA) on the CPU:

* in the PTX interpreter (tests/ptxsim.py), on odd shapes and every width, the right bytes
  move, the columns and rows around the rectangle are left alone, and every byte touched
  lies in [pointer, pointer + footprint) with both ends touched (tight); on the planner's
  grid and on grids too small in x, y or both (the kernel strides over each); with tiles
  narrower and wider than the block;
* ptxas assembles every width and tile shape on sm_75, sm_80 and sm_90 without spills,
  with accesses as wide as intended, and nothing in the SASS divides;
* bad arguments and launches it cannot do raise, naming the value and what is accepted.
"""

from __future__ import annotations

import random
import re

import pytest
from ptxsim import RecordingMemory, check_footprints, run_kernel

from ptxgen import toolchain
from ptxgen.footprint import FootprintError
from ptxgen.kernels import FastcatRect
from ptxgen.kernels.fastcat import RECT_MAX_WINDOW, choose
from ptxgen.kernels.fastcat_rect import rect_cols
from runtime.plan import DeviceTraits

H200 = DeviceTraits()  # the part the planner's rect shapes were measured on

# (width, rows, chunk widths in vectors, columns before the window, extra chunk pitch in
# vectors, row-side misalignment)
CASES = [
    (16, 5, (3,), 16, 0, 0),
    (16, 1, (1,), 0, 1, 0),
    (8, 17, (5,), 8, 1, 8),
    (4, 3, (13,), 4, 0, 4),
    (2, 9, (7,), 6, 2, 2),
    (1, 11, (3,), 5, 1, 3),
    (1, 2, (40,), 1, 0, 7),  # wider than a tile: several column tiles
    (16, 7, (2, 3), 0, 0, 0),  # a split or concat: two chunks share the window
    (8, 13, (1, 6, 2), 8, 1, 8),
    (4, 3, (9, 1, 4, 2), 0, 0, 4),  # chunks that straddle column tiles
]


@pytest.mark.parametrize("direction", ["backward", "forward"])
@pytest.mark.parametrize("grid_kind", ["planned", "x1", "y1", "1x1"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"w{c[0]}-rows{c[1]}-k{len(c[2])}-n{sum(c[2])}")
def test_rect_moves_the_right_bytes_inside_its_footprints(case, grid_kind, direction):
    block, unroll = 64, 2
    cols = min(rect_cols(sum(case[2]), block, unroll), 8)  # narrow tiles: several row and column tiles
    _check_rect(case, grid_kind, direction, block, unroll, cols)


# Tile rows wider than the block: a thread's slots lie along one row, block apart.
WIDE_CASES = [
    (1, 3, (300,), 5, 1, 3),  # two column tiles of 256, the second mostly empty
    (4, 2, (100, 90), 4, 0, 4),
    (2, 5, (129,), 2, 3, 2),  # one column past a tile of 128
]


@pytest.mark.parametrize("direction", ["backward", "forward"])
@pytest.mark.parametrize("grid_kind", ["planned", "1x1"])
@pytest.mark.parametrize("cols", [128, 256])
@pytest.mark.parametrize("case", WIDE_CASES, ids=lambda c: f"w{c[0]}-rows{c[1]}-k{len(c[2])}-n{sum(c[2])}")
def test_rect_tiles_wider_than_the_block(case, cols, grid_kind, direction):
    _check_rect(case, grid_kind, direction, 64, 4, cols)


def _check_rect(case, grid_kind: str, direction: str, block: int, unroll: int, cols: int) -> None:
    """Run one case in the interpreter: every chunk's bytes right, the bytes around the
    window and the chunks' padding untouched, the footprints exact."""
    w, rows, counts, start, pad, misalign = case
    rng = random.Random(rows * 131 + sum(counts) * 7 + w)
    n = sum(counts)
    k = FastcatRect(direction=direction, width=w, cols=cols, chunks=len(counts), unroll=unroll, block=block)
    pitch = start + n * w + 2 * w  # columns before and after the window
    c_pitches = [(c + pad) * w for c in counts]
    mem = RecordingMemory()
    row = mem.alloc(rows * pitch, misalign)
    chunks = [
        mem.alloc((rows - 1) * cp + c * w, (3 * w * (i + 1)) % 16)
        for i, (c, cp) in enumerate(zip(counts, c_pitches))
    ]
    backward = direction == "backward"

    def fill(size: int) -> bytes:
        return bytes(rng.randrange(256) for _ in range(size))

    mem.view(row)[:] = fill(rows * pitch) if backward else b"\xa5" * (rows * pitch)
    for c in chunks:
        size = len(mem.view(c))
        mem.view(c)[:] = b"\xa5" * size if backward else fill(size)
    before = {a: bytes(mem.view(a)) for a in (row, *chunks)}
    planned = k.grid(rows, n)
    grid = {"planned": planned, "x1": (1, planned[1]), "y1": (planned[0], 1), "1x1": (1, 1)}[grid_kind]
    scalars = {"row_pitch": pitch, "rows": rows, "window_vectors": n}
    args = {"row_base": row + start, **scalars}
    first = 0
    for i, (c, cp) in enumerate(zip(chunks, c_pitches)):
        args |= {f"chunk{i}_ptr": c, f"chunk{i}_pitch": cp}
        scalars[f"chunk{i}_pitch"] = cp
        if len(counts) > 1:
            args[f"chunk{i}_start"] = scalars[f"chunk{i}_start"] = first
        first += counts[i]
    mem.clear()
    run_kernel(k, grid, args, mem)
    r = bytes(mem.view(row))
    col = start
    for c, cw, cp in zip(chunks, (x * w for x in counts), c_pitches):
        got = bytes(mem.view(c))
        for i in range(rows):
            assert got[i * cp : i * cp + cw] == r[i * pitch + col : i * pitch + col + cw], f"row {i}"
            if backward and i < rows - 1:  # the chunk's padding is left alone
                assert got[i * cp + cw : (i + 1) * cp] == before[c][i * cp + cw : (i + 1) * cp]
        col += cw
    if not backward:  # the columns around the window are left alone
        for i in range(rows):
            lo, hi = i * pitch + start, i * pitch + start + n * w
            assert r[i * pitch : lo] == before[row][i * pitch : lo]
            assert r[hi : (i + 1) * pitch] == before[row][hi : (i + 1) * pitch]
    pointers = {"row_base": row + start, **{f"chunk{i}_ptr": c for i, c in enumerate(chunks)}}
    check_footprints(mem, k.footprints((*grid, 1), k.block, scalars), pointers)


def test_rect_tiles_and_grid():
    assert [rect_cols(n, 256, 4) for n in (1, 2, 3, 5, 8, 9, 1000, 1024, 1025, 10**6)] == [
        1, 2, 4, 8, 8, 16, 1024, 1024, 1024, 1024,
    ]  # fmt: skip
    k = FastcatRect(direction="backward", width=16, cols=8, unroll=4)
    assert (k.tile_rows, k.block) == (128, (256, 1, 1))
    assert k.grid(1000, 5) == (8, 1, 1)
    wide = FastcatRect(direction="forward", width=1, cols=1024, unroll=4)
    assert wide.tile_rows == 1 and wide.grid(3, 1025) == (3, 2, 1)
    assert wide.grid(0, 0) == (1, 1, 1)
    assert wide.grid(5, 1024 * 70_000)[1] == 65535  # capped; the kernel strides over y
    assert k is FastcatRect(
        direction="backward", width=16, cols=8, chunks=1, unroll=4, block=256, target="sm_90"
    )
    assert k.id == "fastcat_rect_backward__w16__c8__k1__u4__b256__sm_90"
    assert k.entry_point_name == "fastcat_rect_backward_entry_point"
    three = FastcatRect(direction="forward", width=8, cols=16, chunks=3)
    assert three.arg_names == (
        "row_base", "row_pitch", "rows", "window_vectors",
        "chunk0_ptr", "chunk0_pitch", "chunk0_start", "chunk1_ptr", "chunk1_pitch", "chunk1_start",
        "chunk2_ptr", "chunk2_pitch", "chunk2_start",
    )  # fmt: skip


def test_rect_footprints_refuse_launches_it_cannot_do():
    k = FastcatRect(direction="backward", width=4, cols=4, chunks=2)
    good = {
        "row_pitch": 16,
        "rows": 3,
        "window_vectors": 3,
        "chunk0_pitch": 4,
        "chunk1_pitch": 8,
        "chunk1_start": 1,
    }
    fps = k.footprints((1, 1, 1), k.block, good)
    assert [(f.arg, f.nbytes, f.align, f.writes) for f in fps] == [
        ("row_base", 32 + 12, 4, False),
        ("chunk0_ptr", 8 + 4, 4, True),
        ("chunk1_ptr", 16 + 8, 4, True),
    ]
    assert [f.nbytes for f in k.footprints((1, 0, 1), k.block, good)] == [0, 0, 0]
    assert [f.nbytes for f in k.footprints((1, 1, 1), k.block, good | {"rows": 0, "window_vectors": 0})] == [
        0,
        0,
        0,
    ]
    bad = [
        (good | {"row_pitch": 18}, "pitch 18 is not a multiple of the access width 4"),
        (good | {"chunk1_pitch": 6}, "pitch 6 is not a multiple of the access width 4"),
        (
            good | {"window_vectors": 0},
            "window_vectors = 0 is not accepted; accepted: 1..2**31 when rows > 0",
        ),
        (good | {"window_vectors": 2**31 + 1}, "window_vectors = 2147483649 is not accepted"),
        # No rows touch nothing, but the column loop still runs: past 2**31 it could wrap.
        (
            good | {"rows": 0, "window_vectors": 2**32 - 1},
            "window_vectors = 4294967295 is not accepted; accepted: 1..2**31 when rows > 0 (0..2**31 without)",
        ),
        (good | {"window_vectors": 5}, "the window (5 vectors of 4 bytes) is wider than row_pitch 16"),
        (good | {"chunk0_pitch": 0}, "chunk 0 gets 1 vectors of 4 bytes a row, wider than its pitch 0"),
        (good | {"chunk1_start": 4}, "chunk 0 gets 3 vectors of 4 bytes a row, wider than its pitch 4"),
    ]
    for scalars, message in bad:
        with pytest.raises(FootprintError, match=re.escape(message)):
            k.footprints((1, 1, 1), k.block, scalars)
    three = FastcatRect(direction="forward", width=4, cols=4, chunks=3)
    with pytest.raises(FootprintError, match=re.escape("chunk starts [2, 1] (chunk1_start..) must ascend")):
        three.footprints(
            (1, 1, 1), three.block, good | {"chunk1_start": 2, "chunk2_start": 1, "chunk2_pitch": 8}
        )
    with pytest.raises(FootprintError, match=re.escape("is built for block (256, 1, 1), not (128, 1, 1)")):
        k.footprints((1, 1, 1), (128, 1, 1), good)
    with pytest.raises(FootprintError, match=re.escape("grid (1, 1, 2) must have 1 CTA in z")):
        k.footprints((1, 1, 2), k.block, good)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(direction="up", width=4, cols=4), "direction 'up'; accepted: 'backward', 'forward'"),
        (dict(direction="forward", width=3, cols=4), "width = 3 is not accepted; accepted: 16, 8, 4, 2, 1"),
        (dict(direction="forward", width=4, cols=3), "cols = 3 is not accepted; accepted: 1, 2, 4"),
        (
            dict(direction="forward", width=4, cols=2048, unroll=4, block=256),
            "cols = 2048 is not accepted with block 256 and unroll 4; accepted: a power of two up to "
            "block * unroll = 1024",
        ),
        (
            dict(direction="forward", width=4, cols=4, unroll=16),
            "unroll = 16 is not accepted; accepted: 1, 2, 4, 8",
        ),
        (dict(direction="forward", width=4, cols=4, block=100), "block = 100 is not accepted"),
        (
            dict(direction="forward", width=4, cols=4, chunks=33),
            "chunks = 33 is not accepted; accepted: an int in 1..32",
        ),
        (dict(direction="forward", width=4, cols=4, target="sm_50"), "sm_50"),
    ],
)
def test_rect_refuses_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        FastcatRect(**kwargs)


# (width, cols, chunks, unroll, block): each width, tile rows from 1 to 1024, slots along
# and across rows, one chunk and several
SASS_CASES = [
    (16, 8, 1, 4, 256), (16, 1024, 1, 4, 256), (8, 2048, 1, 8, 256), (4, 1, 1, 4, 256), (2, 64, 1, 8, 128),
    (1, 32, 1, 1, 1024), (16, 16, 4, 1, 256), (8, 32, 32, 4, 128), (16, 512, 3, 2, 256),
]  # fmt: skip
_SIZE = {"128": 16, "64": 8, "U16": 2, "S16": 2, "U8": 1, "S8": 1}


def _planned_shapes() -> set[tuple[int, int, int, int, int]]:
    """(width, cols, chunks, unroll, block) of every rect launch the planner makes for
    each width, narrow and wide windows, one chunk and 2, 5 and 32."""
    shapes = set()
    for width in (16, 8, 4, 2, 1):
        for count in (1, 2, 5, 32):
            for vectors in (3, 40, 5000):
                per = max(1, vectors // count) | 1  # odd: the accesses stay `width` wide
                if count == 1:  # a gather of a narrow chunk, `width` bytes into each row
                    op = "gather" if width > 1 else "scatter"  # (byte-wide gathers go to vec)
                    launches = choose(op, 7, [width, per * width, 3 * per * width], 1, traits=H200, chunk=1)
                elif width >= 8 and per * width * count < RECT_MAX_WINDOW:  # whole accesses, short rows
                    launches = choose("split", 7, [per * width] * count, 1, traits=H200)
                else:
                    continue
                for launch in launches:
                    spec = dict(launch.spec)
                    assert launch.family == "rect" and spec["width"] == width, (width, count, vectors, launch)
                    shapes.add((width, spec["cols"], spec["chunks"], spec["unroll"], spec["block"]))
    return shapes


@pytest.mark.parametrize("target", ["sm_75", "sm_80", "sm_90"])
def test_rect_assembles_to_the_intended_sass(target):
    """Every shape assembles with accesses as wide as intended and no division; the shapes
    the planner launches (checked for sm_90, the planner's target on H200) also without
    spills (a hand-picked one may spill: ptxas gave 4 slots of 16 bytes 48 registers and
    16 bytes of spills on sm_90)."""
    try:
        toolchain.find_tool("ptxas")
        toolchain.find_tool("nvdisasm")
    except toolchain.ToolNotFound as err:
        pytest.fail(f"{err} (it is part of the test extra: pip install -e '.[test]')")
    planned = _planned_shapes() if target == "sm_90" else set()
    assert target != "sm_90" or (
        {w for w, *_ in planned} == {16, 8, 4, 2, 1} and {k for _, _, k, _, _ in planned} == {1, 2, 5, 32}
    )
    kernels = [
        (
            FastcatRect(direction=d, width=w, cols=c, chunks=k, unroll=u, block=b, target=target),
            (w, c, k, u, b),
        )
        for w, c, k, u, b in sorted(set(SASS_CASES) | planned)
        for d in ("backward", "forward")
    ]
    built = toolchain.assemble_many([(k.source, k.target) for k, _ in kernels])
    for (k, shape), result in zip(kernels, built):
        assert not isinstance(result, Exception), f"{k.id}: {result}"
        res = result.functions[k.entry_point_name]
        if shape in planned:
            assert res.stack_bytes == 0 and res.spill_store_bytes == 0 and res.spill_load_bytes == 0, (
                k.id,
                res,
            )
        sass = toolchain.disassemble(result.cubin)
        # Integer division compiles to a reciprocal estimate (MUFU.RCP) and corrections.
        assert "MUFU.RCP" not in sass and "I2F" not in sass, f"{k.id}: a division in the SASS"
        for op in ("LDG", "STG"):
            sizes = set()
            for m in re.finditer(rf"\b{op}(\.[\w.]+)?\s", sass):
                parts = (m.group(1) or "").split(".")
                size = [_SIZE[p] for p in parts if p in _SIZE]
                sizes.add(size[0] if size else 4)
            assert sizes == {k.width}, (k.id, op, sizes)
