"""FastcatRect (2-D tiles, one per CTA) on the CPU:

* in the PTX interpreter (tests/ptxsim.py), on odd shapes and every width, the right bytes
  move, the columns and rows around the rectangle are left alone, and every byte touched
  lies in [pointer, pointer + footprint) with both ends touched (tight); on the planner's
  grid and on grids too small in x, y or both (the kernel strides over each);
* ptxas assembles every width and tile shape on sm_75, sm_80 and sm_90 without spills,
  with accesses as wide as intended, and nothing in the SASS divides;
* bad arguments and launches it cannot do raise, naming the value and what is accepted.
"""

from __future__ import annotations

import random
import re

import pytest
from ptxsim import Memory, run_kernel

from ptxgen import toolchain
from ptxgen.footprint import FootprintError
from ptxgen.kernels import FastcatRect
from ptxgen.kernels.fastcat_rect import rect_cols


class _Recording(Memory):
    """Global memory that remembers every byte address read or written."""

    def __init__(self) -> None:
        super().__init__()
        self.touched: set[int] = set()

    def read(self, addr: int, n: int) -> bytes:
        self.touched.update(range(addr, addr + n))
        return super().read(addr, n)

    def write(self, addr: int, raw: bytes) -> None:
        self.touched.update(range(addr, addr + len(raw)))
        super().write(addr, raw)


# (width, rows, vectors, columns before the chunk, extra chunk pitch, row-side misalignment)
CASES = [
    (16, 5, 3, 16, 0, 0),
    (16, 1, 1, 0, 16, 0),
    (8, 17, 5, 8, 8, 8),
    (4, 3, 13, 4, 0, 4),
    (2, 9, 7, 6, 2, 2),
    (1, 11, 3, 5, 1, 3),
    (1, 2, 40, 1, 0, 7),  # wider than a tile: several column tiles
]


@pytest.mark.parametrize("direction", ["backward", "forward"])
@pytest.mark.parametrize("grid_kind", ["planned", "x1", "y1", "1x1"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"w{c[0]}-rows{c[1]}-n{c[2]}")
def test_rect_moves_the_right_bytes_inside_its_footprints(case, grid_kind, direction):
    w, rows, n, start, pad, misalign = case
    rng = random.Random(rows * 131 + n * 7 + w)
    block, unroll = 64, 2
    cols = min(rect_cols(n, block, unroll), 8)  # narrow tiles: several row and column tiles
    k = FastcatRect(direction=direction, width=w, cols=cols, unroll=unroll, block=block)
    pitch = start + n * w + 2 * w  # columns before and after the chunk
    c_pitch = n * w + pad * w
    mem = _Recording()
    row = mem.alloc(rows * pitch, misalign)
    chunk = mem.alloc((rows - 1) * c_pitch + n * w, (3 * w) % 16)
    backward = direction == "backward"

    def fill(size: int) -> bytes:
        return bytes(rng.randrange(256) for _ in range(size))

    mem.view(row)[:] = fill(rows * pitch) if backward else b"\xa5" * (rows * pitch)
    mem.view(chunk)[:] = b"\xa5" * len(mem.view(chunk)) if backward else fill(len(mem.view(chunk)))
    before = {a: bytes(mem.view(a)) for a in (row, chunk)}
    planned = k.grid(rows, n)
    grid = {"planned": planned, "x1": (1, planned[1]), "y1": (planned[0], 1), "1x1": (1, 1)}[grid_kind]
    args = {"row_base": row + start, "row_pitch": pitch, "rows": rows, "vectors": n}
    args |= {"chunk_ptr": chunk, "chunk_pitch": c_pitch}
    mem.touched.clear()
    run_kernel(k, grid, args, mem)
    r, c = bytes(mem.view(row)), bytes(mem.view(chunk))
    for i in range(rows):
        lo = i * pitch + start
        assert c[i * c_pitch : i * c_pitch + n * w] == r[lo : lo + n * w], f"row {i}"
        if backward and i < rows - 1:  # the chunk's padding is left alone
            assert (
                c[i * c_pitch + n * w : (i + 1) * c_pitch]
                == before[chunk][i * c_pitch + n * w : (i + 1) * c_pitch]
            )
        if not backward:  # the columns around the chunk are left alone
            assert r[i * pitch : lo] == before[row][i * pitch : lo]
            assert r[lo + n * w : (i + 1) * pitch] == before[row][lo + n * w : (i + 1) * pitch]
    scalars = {"row_pitch": pitch, "rows": rows, "vectors": n, "chunk_pitch": c_pitch}
    pointers = {"row_base": row + start, "chunk_ptr": chunk}
    ranges = []
    for fp in k.footprints((*grid, 1), k.block, scalars):
        ptr = pointers[fp.arg]
        assert ptr % fp.align == 0, (fp, ptr)
        assert ptr in mem.touched and ptr + fp.nbytes - 1 in mem.touched, f"{fp} is not tight"
        ranges.append((ptr, ptr + fp.nbytes))
    outside = [a for a in mem.touched if not any(lo <= a < hi for lo, hi in ranges)]
    assert not outside, f"{len(outside)} bytes touched outside the footprints"


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
    assert k is FastcatRect(direction="backward", width=16, cols=8, unroll=4, block=256, target="sm_90")
    assert k.id == "fastcat_rect_backward__w16__c8__u4__b256__sm_90"
    assert k.entry_point_name == "fastcat_rect_backward_entry_point"


def test_rect_footprints_refuse_launches_it_cannot_do():
    k = FastcatRect(direction="backward", width=4, cols=4)
    good = {"row_pitch": 16, "rows": 3, "vectors": 2, "chunk_pitch": 8}
    fps = k.footprints((1, 1, 1), k.block, good)
    assert [(f.arg, f.nbytes, f.align, f.writes) for f in fps] == [
        ("row_base", 32 + 8, 4, False),
        ("chunk_ptr", 16 + 8, 4, True),
    ]
    assert [f.nbytes for f in k.footprints((1, 0, 1), k.block, good)] == [0, 0]
    assert [f.nbytes for f in k.footprints((1, 1, 1), k.block, good | {"rows": 0, "vectors": 0})] == [0, 0]
    bad = [
        (good | {"row_pitch": 18}, "row_pitch = 18 is not a multiple of the access width 4"),
        (good | {"chunk_pitch": 6}, "chunk_pitch = 6 is not a multiple of the access width 4"),
        (good | {"vectors": 0}, "vectors = 0 is not accepted; accepted: 1..2**31 when rows > 0"),
        (good | {"vectors": 2**31 + 1}, "vectors = 2147483649 is not accepted"),
        (good | {"vectors": 5}, "a row of 5 vectors of 4 bytes is wider than row_pitch 16"),
        (good | {"chunk_pitch": 4}, "a row of 2 vectors of 4 bytes is wider than chunk_pitch 4"),
    ]
    for scalars, message in bad:
        with pytest.raises(FootprintError, match=re.escape(message)):
            k.footprints((1, 1, 1), k.block, scalars)
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
        (dict(direction="forward", width=4, cols=4, target="sm_50"), "sm_50"),
    ],
)
def test_rect_refuses_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        FastcatRect(**kwargs)


# (width, cols, unroll, block): each width, tile rows from 1 to 1024, slots along and across rows
SASS_CASES = [
    (16, 8, 4, 256),
    (16, 1024, 4, 256),
    (8, 2048, 8, 256),
    (4, 1, 4, 256),
    (2, 64, 8, 128),
    (1, 32, 1, 1024),
]
_SIZE = {"128": 16, "64": 8, "U16": 2, "S16": 2, "U8": 1, "S8": 1}


@pytest.mark.parametrize("target", ["sm_75", "sm_80", "sm_90"])
def test_rect_assembles_without_spills_or_division(target):
    try:
        toolchain.find_tool("ptxas")
        toolchain.find_tool("nvdisasm")
    except toolchain.ToolNotFound as err:
        pytest.fail(f"{err} (it is part of the test extra: pip install -e '.[test]')")
    kernels = [
        FastcatRect(direction=d, width=w, cols=c, unroll=u, block=b, target=target)
        for w, c, u, b in SASS_CASES
        for d in ("backward", "forward")
    ]
    built = toolchain.assemble_many([(k.source, k.target) for k in kernels])
    for k, result in zip(kernels, built):
        assert not isinstance(result, Exception), f"{k.id}: {result}"
        res = result.functions[k.entry_point_name]
        assert res.stack_bytes == 0 and res.spill_store_bytes == 0 and res.spill_load_bytes == 0, (k.id, res)
        sass = toolchain.disassemble(result.cubin)
        assert "CALL" not in sass, f"{k.id}: a call (a division subroutine?) in the SASS"
        for op in ("LDG", "STG"):
            sizes = set()
            for m in re.finditer(rf"\b{op}(\.[\w.]+)?\s", sass):
                parts = (m.group(1) or "").split(".")
                size = [_SIZE[p] for p in parts if p in _SIZE]
                sizes.add(size[0] if size else 4)
            assert sizes == {k.width}, (k.id, op, sizes)
