"""The ops' plans with the fast kernels, run whole in the PTX interpreter: misaligned pieces,
odd widths, every array allocated exactly (a byte outside any of them raises)."""

from __future__ import annotations

import numpy as np
import pytest
from ptxsim import Memory, run_kernel

import ptxgen
from runtime import plan
from runtime.plan import WIDE, DeviceTraits, Problem, Ptr, make_plan

# (op, dtype, rows, extents, misalignment in bytes of the wide array and of each piece)
CASES = [
    ("backward", "u8", 5, (3, 17, 6), 3, (1, 0, 5)),
    ("forward", "f16", 4, (5, 1, 8), 2, (6, 2, 0)),
    ("backward", "f32", 3, (4, 8), 0, (0, 0)),  # aligned: 16-byte paths
    ("forward", "u8", 6, (1, 3), 0, (0, 0)),  # short rows
    ("forward", "f64", 5, (2, 3, 1), 8, (8, 0, 8)),  # 8-byte accesses: rect over three chunks
    ("backward", "f64", 3, (300, 213), 0, (0, 0)),  # rect, two column tiles (grid y = 2)
    ("forward", "u8", 40, (1, 3), 0, (0, 0)),  # rowpack, staged: 2 groups of 16 rows and 8 more
    ("backward", "f32", 33, (1, 3), 0, (0, 0)),  # rowpack at a 4-byte granule
]
# The kernels the plans above must use (checked, so the cases keep covering what they say).
FAMILIES = {
    ("backward", "u8", 5, (3, 17, 6)): ["fastcat_rect_backward"],  # small op: direct, 1-byte accesses
    ("forward", "f16", 4, (5, 1, 8)): ["fastcat_rect_forward"],
    ("forward", "f64", 5, (2, 3, 1)): ["fastcat_rect_forward"],
    ("backward", "f64", 3, (300, 213)): ["fastcat_rect_backward"],
    ("forward", "u8", 40, (1, 3)): ["fastcat_rowpack_forward"],
    ("backward", "f32", 33, (1, 3)): ["fastcat_rowpack_backward"],
}


def _run(problem: Problem, steps, arrays: dict[int, int], mem: Memory) -> list[str]:
    used = []
    for step in steps:
        values = [arrays[a.array] + a.byte_offset if isinstance(a, Ptr) else a for a in step.args]
        # grid-stride kernels do the same work on any grid: at most two CTAs in x and in y
        # exercise the striding in both
        grid = tuple(min(g, 2) for g in step.grid[:2])
        run_kernel(step.kernel, grid, dict(zip(step.kernel.arg_names, values)), mem)
        used.append(step.kernel.name)
    return used


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}x{c[3]}")
def test_fast_plans_move_every_byte_and_nothing_else(case):
    op, dtype, rows, extents, wide_mis, piece_mis = case
    d = ptxgen.resolve_dtype(dtype)
    problem = Problem(op, d, rows, extents, wide_align=wide_mis, piece_aligns=piece_mis)
    p = make_plan(problem, DeviceTraits(arch="sm_90"))
    assert p.variants == ("fused",)
    rng = np.random.default_rng(7)
    mem = Memory()
    pitch = sum(extents) * d.itemsize
    wide = mem.alloc(rows * pitch, misalign=wide_mis)
    pieces = [mem.alloc(rows * e * d.itemsize, misalign=m) for e, m in zip(extents, piece_mis)]
    wide_bytes = rng.integers(0, 256, rows * pitch, dtype=np.uint8)
    piece_bytes = [rng.integers(0, 256, rows * e * d.itemsize, dtype=np.uint8) for e in extents]
    if op == "backward":
        mem.write(wide, wide_bytes.tobytes())
    else:
        for ptr, data in zip(pieces, piece_bytes):
            mem.write(ptr, data.tobytes())
    used = _run(problem, p.steps, {WIDE: wide, **dict(enumerate(pieces))}, mem)
    assert used and all(name.startswith("fastcat_") for name in used)
    assert FAMILIES.get(case[:4], used) == used
    if case[:4] == ("backward", "f64", 3, (300, 213)):
        assert p.steps[0].grid[:2] == (3, 2)
    if used[0].startswith("fastcat_rowpack"):
        assert all(step.kernel.staged for step in p.steps)
    offsets = np.cumsum((0, *extents)) * d.itemsize
    if op == "backward":
        as_rows = wide_bytes.reshape(rows, pitch)
        for i, ptr in enumerate(pieces):
            got = np.frombuffer(mem.read(ptr, rows * extents[i] * d.itemsize), np.uint8)
            assert np.array_equal(got.reshape(rows, -1), as_rows[:, offsets[i] : offsets[i + 1]]), i
    else:
        got = np.frombuffer(mem.read(wide, rows * pitch), np.uint8).reshape(rows, pitch)
        want = np.concatenate([b.reshape(rows, -1) for b in piece_bytes], axis=1)
        assert np.array_equal(got, want)


@pytest.mark.parametrize("op", ["split", "concat"])
def test_small_ops_copy_directly_and_larger_ones_through_tiles(op):
    """Up to SMALL_OP_BYTES a side, a split or concat at a narrow granule is one direct
    launch: rowpack with narrow chunks where a group of rows is whole 16-byte vectors of
    at most SMALL_ROWPACK_GROUP bytes and every pointer suits its access, else one rect
    launch over the window (its cost is latency); one row more and it takes tiles."""
    from ptxgen.kernels import fastcat as fc

    sizes, pitch, h200 = [3, 5, 24], 32, DeviceTraits()
    rows = fc.SMALL_OP_BYTES // pitch
    small = fc.choose(op, rows, sizes, 1, traits=h200)
    assert [(launch.family, launch.spec, launch.chunk_ids, launch.grid) for launch in small] == [
        (
            "rowpack",
            (
                ("direction", fc.DIRECTION[op]),
                ("widths", (3, 5, 24)),
                ("block", 128),
                ("narrow_chunks", True),
            ),
            (0, 1, 2),
            rows // 128,  # a row a thread
        )
    ]
    assert small[0].kernel().units == {0: 1, 1: 1, 2: 8}

    def families(**kw):
        return [(launch.family, dict(launch.spec).get("width")) for launch in fc.choose(op, **kw)]

    # each pointer at the weakest alignment its access takes (1, 1 and 8 bytes): rowpack
    (least,) = fc.choose(op, rows, sizes, 1, traits=h200, chunk_mod16=[1, 3, 8])
    assert least.family == "rowpack" and least.kernel() is small[0].kernel()
    # (1+63) in u8: 64 one-byte accesses a row, over SMALL_ROWPACK_ACCESSES: rect
    assert families(rows=rows // 2, sizes=[1, 63], dtype_size=1, traits=h200) == [("rect", 1)]
    # chunk 2 moves in 8-byte accesses, and its pointer is 4 bytes past them: rect
    assert families(rows=rows, sizes=sizes, dtype_size=1, traits=h200, chunk_mod16=[0, 0, 4]) == [("rect", 1)]
    # a row side off 16 bytes, or 16 rows of 33 bytes a group (528): rect
    assert families(rows=rows, sizes=sizes, dtype_size=1, traits=h200, row_mod16=8) == [("rect", 1)]
    assert families(rows=rows // 2, sizes=[3, 5, 25], dtype_size=1, traits=h200) == [("rect", 1)]
    # f32's rows of 128 bytes are over SMALL_ROWPACK_GROUP; an 8-byte granule keeps rect anyway
    assert families(rows=rows // 4, sizes=sizes, dtype_size=4, traits=h200) == [("rect", 4)]
    assert families(rows=rows // 8, sizes=sizes, dtype_size=8, traits=h200) == [("rect", 8)]
    # bf16's 64-byte rows: rowpack, 2-, 2- and 16-byte accesses
    (bf16,) = fc.choose(op, rows // 2, sizes, 2, traits=h200)
    assert bf16.family == "rowpack" and bf16.kernel().units == {0: 2, 1: 2, 2: 16}
    assert [launch.family for launch in fc.choose(op, rows + 1, sizes, 1, traits=h200)] == ["tile"]
    # a gather of one piece keeps its own rules whatever its size
    assert [launch.family for launch in fc.choose("gather", 64, [40, 90, 40], 1, traits=h200, chunk=1)] == [
        "tile"
    ]


@pytest.mark.parametrize(
    "op, rows, sizes, dtype_size, family",
    [
        ("concat", 99_591, [288, 48, 196], 2, "tile"),  # 133 8-byte accesses in 256 columns: 52% used
        ("concat", 208_481, [268, 32], 2, "tile"),  # 75 accesses in 128 columns: 59%
        ("split", 36_888, [286, 270, 110], 8, "tile"),  # a 16-byte granule, 333 in 512: 65%
        ("concat", 27_350, [237, 119, 48], 8, "rect"),  # 79%: rect
        ("concat", 259_465, [40, 44], 4, "rect"),  # 21 accesses a row in 32 columns: short, rect
        ("split", 102_400, [64, 64, 64], 2, "rect"),  # YOLO's pieces: 24 in 32 columns, rect
        ("concat", 25_600, [128, 128, 128], 4, "rect"),  # 96 in 128 columns: 75%, rect
    ],
)
def test_whole_rows_whose_rect_columns_mostly_idle_go_to_the_tile(op, rows, sizes, dtype_size, family):
    """Rows of more than 64 accesses whose rect tiles would use under 70% of their
    columns take the tile (lab/data/rect-vs-tile-3.json); short rows and YOLO's pieces keep
    rect."""
    from ptxgen.kernels import fastcat as fc

    launches = fc.choose(op, rows, sizes, dtype_size, traits=DeviceTraits())
    assert [launch.family for launch in launches] == [family]


def test_one_piece_goes_to_the_vector_variant():
    f32 = ptxgen.resolve_dtype("f32")
    chunk = Problem("backward", f32, 1000, (64, 128, 64)).chunk(1)
    steps = plan.FASTCAT_CHUNK.build(chunk, DeviceTraits(arch="sm_90"))
    assert [s.kernel.name for s in steps] == ["fastcat_rect_backward"]
    assert steps[0].args[0] == Ptr(WIDE, 64 * 4)  # the row side starts at the piece's columns
    # 32 vectors a row, 1 a thread of 256: tiles of 8 rows x 32 vectors, one per CTA
    assert steps[0].kernel.id == "fastcat_rect_backward__w16__c32__k1__u1__b256__pdl__sm_90"
    assert steps[0].grid == (1000 // 8, 1, 1)
    wide = Problem("forward", f32, 7, (10, 70_000)).chunk(1)  # 35,000 vectors of 8 bytes: 69 column tiles
    steps = plan.FASTCAT_CHUNK.build(wide, DeviceTraits(arch="sm_90", max_grid_y=5))
    assert steps[0].kernel.id == "fastcat_rect_forward__w8__c512__k1__u4__b128__pdl__sm_90"
    assert steps[0].grid == (7, 5, 1)  # capped by the device: the kernel strides over y


# A gather from short rows reads whole rows with rowpack and writes its piece only
# (every 32-byte sector of the wide array holds bytes of the piece); otherwise rect/tiles.
GATHERS = [
    ("u8", 37, (1, 3), 1, 0, "fastcat_rowpack_backward__1_3__out1__b256__st__pdl__sm_90"),
    ("u8", 37, (1, 3), 0, 0, "fastcat_rowpack_backward__1_3__out0__b256__st__pdl__sm_90"),
    ("bf16", 21, (1, 3), 1, 0, "fastcat_rowpack_backward__2_6__out1__b256__st__pdl__sm_90"),
    ("f32", 9, (1, 3), 1, 0, "fastcat_rowpack_backward__4_12__out1__b256__st__pdl__sm_90"),
    ("u8", 40, (2, 5, 1), 1, 0, "fastcat_rowpack_backward__2_5_1__out1__b256__st__pdl__sm_90"),
    ("u8", 37, (1, 3), 1, 3, "fastcat_tile_backward"),  # the wide array off 16 bytes
    ("f64", 5, (1, 3), 1, 0, "fastcat_rect_backward"),  # 8-byte accesses
    ("u8", 6, (1, 40, 1), 1, 0, "fastcat_tile_backward"),  # a group of 42-byte rows is too wide
    ("u8", 6, (40, 3), 1, 0, "fastcat_vec_backward"),  # 40 bytes between rows: no rowpack
    ("f32", 6, (40, 3), 1, 0, "fastcat_rect_backward"),  # ... and at a 4-byte granule rect
    ("u8", 700, (5, 27), 0, 0, "fastcat_vec_backward"),  # a narrow piece at a 1-byte granule
    ("u8", 9, (17, 200, 39), 2, 3, "fastcat_vec_backward"),
    ("bf16", 9, (1, 5, 26), 1, 0, "fastcat_rect_backward"),  # 2-byte granule: rect
]


def test_a_rowpack_gather_merges_the_neighbours_it_does_not_write():
    from ptxgen.kernels.fastcat import choose

    # twelve 1-byte pieces before a 4-byte one: rowpack takes at most 8 chunks, so the
    # pieces not written are one chunk of 12 bytes
    (launch,) = choose("gather", 1000, [1] * 12 + [4], 1, traits=DeviceTraits(), chunk=12)
    assert launch.family == "rowpack" and launch.chunk_ids == (12,)
    assert dict(launch.spec)["widths"] == (12, 4) and dict(launch.spec)["outputs"] == (1,)
    assert launch.kernel().arg_names == ("row_ptr", "rows", "chunk1_ptr")
    # empty pieces drop
    (launch,) = choose("gather", 1000, [2, 0, 1, 1, 4, 0], 2, traits=DeviceTraits(), chunk=2)
    assert dict(launch.spec)["widths"] == (4, 2, 10) and dict(launch.spec)["outputs"] == (1,)


@pytest.mark.parametrize("case", GATHERS, ids=lambda c: f"{c[0]}-{c[1]}x{c[2]}[{c[3]}]-mis{c[4]}")
def test_gather_plans_move_their_piece_and_nothing_else(case):
    dtype, rows, extents, index, wide_mis, kernel = case
    d = ptxgen.resolve_dtype(dtype)
    chunk = Problem("backward", d, rows, extents, wide_align=wide_mis).chunk(index)
    steps = plan.FASTCAT_CHUNK.build(chunk, DeviceTraits(arch="sm_90"))
    assert len(steps) == 1 and steps[0].kernel.id.startswith(kernel)
    mem = Memory()
    pitch = sum(extents) * d.itemsize
    wide = mem.alloc(rows * pitch, misalign=wide_mis)
    piece = mem.alloc(rows * extents[index] * d.itemsize)
    wide_bytes = np.random.default_rng(3).integers(0, 256, rows * pitch, dtype=np.uint8)
    mem.write(wide, wide_bytes.tobytes())
    _run(chunk, steps, {WIDE: wide, index: piece}, mem)
    lo = sum(extents[:index]) * d.itemsize
    want = wide_bytes.reshape(rows, pitch)[:, lo : lo + extents[index] * d.itemsize]
    got = np.frombuffer(mem.read(piece, want.size), np.uint8).reshape(want.shape)
    assert np.array_equal(got, want)


# (op, dtype, rows, extents, gap in elements after them in every wide row, misalignments)
PITCHED = [
    ("backward", "u8", 5, (3, 17, 6), 7, 3, (1, 0, 5)),
    ("forward", "f16", 4, (5, 1, 8), 3, 2, (6, 2, 0)),
    ("backward", "f64", 3, (2, 3, 1), 1, 8, (8, 0, 8)),
    ("forward", "u8", 9, (1, 3), 4, 0, (0, 0)),  # short rows, but not whole ones: no rowpack
]


@pytest.mark.parametrize("case", PITCHED, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}x{c[3]}+{c[4]}")
def test_pitched_wide_arrays_move_their_bytes_and_leave_the_gaps(case):
    """The wide array a view of the first columns of a wider one (``x[:, :n]``): allocated
    exactly to its last row's last element, so a byte read or written past it raises; a
    concat leaves every gap byte as it was."""
    op, dtype, rows, extents, gap, wide_mis, piece_mis = case
    d = ptxgen.resolve_dtype(dtype)
    extent = sum(extents)
    problem = Problem(op, d, rows, extents, wide_align=wide_mis, piece_aligns=piece_mis, pitch=extent + gap)
    p = make_plan(problem, DeviceTraits(arch="sm_90"))
    assert p.variants == ("fused",)
    assert not any(step.kernel.name.startswith("fastcat_rowpack") for step in p.steps)
    rng = np.random.default_rng(11)
    pitch, used_bytes = (extent + gap) * d.itemsize, extent * d.itemsize
    size = (rows - 1) * pitch + used_bytes
    mem = Memory()
    wide = mem.alloc(size, misalign=wide_mis)
    pieces = [mem.alloc(rows * e * d.itemsize, misalign=m) for e, m in zip(extents, piece_mis)]
    wide_bytes = rng.integers(0, 256, size, dtype=np.uint8)
    piece_bytes = [rng.integers(0, 256, rows * e * d.itemsize, dtype=np.uint8) for e in extents]
    mem.write(wide, wide_bytes.tobytes())
    if op == "forward":
        for ptr, data in zip(pieces, piece_bytes):
            mem.write(ptr, data.tobytes())
    _run(problem, p.steps, {WIDE: wide, **dict(enumerate(pieces))}, mem)
    padded = np.concatenate(
        [np.frombuffer(mem.read(wide, size), np.uint8), np.zeros(pitch - used_bytes, np.uint8)]
    )
    got_rows = padded.reshape(rows, pitch)
    offsets = np.cumsum((0, *extents)) * d.itemsize
    if op == "backward":
        for i, ptr in enumerate(pieces):
            got = np.frombuffer(mem.read(ptr, rows * extents[i] * d.itemsize), np.uint8)
            want = np.concatenate([wide_bytes, np.zeros(pitch - used_bytes, np.uint8)]).reshape(rows, pitch)
            assert np.array_equal(got.reshape(rows, -1), want[:, offsets[i] : offsets[i + 1]]), i
    else:
        want = np.concatenate([b.reshape(rows, -1) for b in piece_bytes], axis=1)
        assert np.array_equal(got_rows[:, :used_bytes], want)
        before = np.concatenate([wide_bytes, np.zeros(pitch - used_bytes, np.uint8)]).reshape(rows, pitch)
        assert np.array_equal(got_rows[:, used_bytes:], before[:, used_bytes:])  # the gaps untouched


def test_a_pitch_below_the_rows_extent_is_refused_and_a_packed_one_is_the_same_problem():
    f32 = ptxgen.resolve_dtype("f32")
    with pytest.raises(ValueError, match="pitch 9 is less than the wide array's 10 elements a row"):
        Problem("backward", f32, 4, (4, 6), pitch=9)
    assert Problem("backward", f32, 4, (4, 6), pitch=10) == Problem("backward", f32, 4, (4, 6))


def test_a_pitched_problem_planned_a_piece_at_a_time_stays_inside_the_view():
    """The per-piece table (the benchmark's, the per-piece GPU tests'): a gather reads
    whole rows of the wide side, so the pieces of a view go to the seed kernel, which
    touches only their elements; the allocation ends at the view's last element."""
    d = ptxgen.resolve_dtype("u8")
    rows, extents, gap = 40, (3, 17, 6), 9
    problem = Problem("backward", d, rows, extents, pitch=sum(extents) + gap)
    p = make_plan(problem, DeviceTraits(arch="sm_90"), [plan.FASTCAT_CHUNK, plan.SEED])
    assert p.variants == ("seed",) * len(extents)
    pitch, used = sum(extents) + gap, sum(extents)
    size = (rows - 1) * pitch + used
    mem = Memory()
    wide = mem.alloc(size)
    pieces = [mem.alloc(rows * e) for e in extents]
    data = np.random.default_rng(5).integers(0, 256, size, dtype=np.uint8)
    mem.write(wide, data.tobytes())
    arrays = {WIDE: wide, **dict(enumerate(pieces))}
    for step in p.steps:  # the seed kernel is not grid-stride: its whole grid
        values = [arrays[a.array] + a.byte_offset if isinstance(a, Ptr) else a for a in step.args]
        run_kernel(step.kernel, step.grid, dict(zip(step.kernel.arg_names, values)), mem)
    as_rows = np.concatenate([data, np.zeros(pitch - used, np.uint8)]).reshape(rows, pitch)
    for i, ptr in enumerate(pieces):
        lo = sum(extents[:i])
        got = np.frombuffer(mem.read(ptr, rows * extents[i]), np.uint8).reshape(rows, -1)
        assert np.array_equal(got, as_rows[:, lo : lo + extents[i]]), i


def test_plans_for_every_row_count_are_of_packed_arrays():
    from ptxgen.kernels.plan import symbolic_plans

    f32 = ptxgen.resolve_dtype("f32")
    with pytest.raises(ValueError, match="packed wide arrays; this one has a row pitch"):
        symbolic_plans(Problem("backward", f32, 0, (4, 6), pitch=12), DeviceTraits(arch="sm_90"))
