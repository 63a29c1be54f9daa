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


def test_one_piece_goes_to_the_vector_variant():
    f32 = ptxgen.resolve_dtype("f32")
    chunk = Problem("backward", f32, 1000, (64, 128, 64)).chunk(1)
    steps = plan.FASTCAT_CHUNK.build(chunk, DeviceTraits(arch="sm_90"))
    assert [s.kernel.name for s in steps] == ["fastcat_rect_backward"]
    assert steps[0].args[0] == Ptr(WIDE, 64 * 4)  # the row side starts at the piece's columns
    # 32 vectors a row, 2 a thread of 128: tiles of 8 rows x 32 vectors, one per CTA
    assert steps[0].kernel.id == "fastcat_rect_backward__w16__c32__k1__u2__b128__sm_90"
    assert steps[0].grid == (1000 // 8, 1, 1)
    wide = Problem("forward", f32, 7, (10, 70_000)).chunk(1)  # 35,000 vectors of 8 bytes: 69 column tiles
    steps = plan.FASTCAT_CHUNK.build(wide, DeviceTraits(arch="sm_90", max_grid_y=5))
    assert steps[0].kernel.id == "fastcat_rect_forward__w8__c512__k1__u4__b128__sm_90"
    assert steps[0].grid == (7, 5, 1)  # capped by the device: the kernel strides over y
