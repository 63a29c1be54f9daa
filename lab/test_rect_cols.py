"""rect_cols.py's narrowed column tiles, run whole in the PTX interpreter: every byte moved,
nothing else touched (each array allocated exactly), on the sweep shapes it studies."""

from __future__ import annotations

import re

import pytest
import rect_cols
import test_fastcat_plans

import ptxgen
from ptxgen.kernels import fastcat
from runtime.plan import DeviceTraits, Problem, make_plan

# (op, dtype, extents, the narrowed tile width): rows just past a power of two of vectors
CASES = [
    ("backward", "f64", (286, 270, 110), 32),  # 333 16-byte vectors: 11 tiles of 32, not 2 of 256
    ("forward", "f64", (286, 270, 110), 32),
    ("forward", "bf16", (300, 268), 32),  # 142 8-byte vectors
    ("forward", "f64", (293, 18), 64),  # 311 8-byte vectors: 64 and 32 both cover 320, the wider kept
    ("forward", "f32", (182, 236, 264), 32),  # 341 8-byte vectors
]


def test_narrow_cols_leaves_fewer_columns_idle_and_keeps_short_rows():
    assert rect_cols.narrow_cols(333, 128, 2) == 32  # 352 covered, against 512
    assert rect_cols.narrow_cols(256, 128, 2) == 256  # a power of two: no idle column at 256
    assert rect_cols.narrow_cols(12, 128, 2) == 16  # a short row keeps the planner's tile
    assert rect_cols.narrow_cols(96, 128, 2) == 32  # 96 in three tiles of 32, not one of 128
    assert rect_cols.exact_cols(12, 128, 2) == 12 and rect_cols.exact_cols(333, 128, 2) == 32
    assert rect_cols.old_cols(333, 128, 2) == 256


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}")
def test_narrowed_rect_moves_every_byte_and_nothing_else(case, monkeypatch):
    op, dtype, extents, cols = case
    monkeypatch.setattr(fastcat, "_rect_shape", fastcat._rect_shape)  # restored after the test
    rect_cols._use("narrow")
    rows = 5
    plan = make_plan(Problem(op, ptxgen.resolve_dtype(dtype), rows, extents), DeviceTraits(arch="sm_90"))
    (step,) = plan.steps
    assert re.search(rf"rect_\w+__c{cols}__", step.kernel.id), step.kernel.id
    # the product suite's own run of a plan in the interpreter (every byte, exact arrays)
    aligned = (op, dtype, rows, extents, 0, (0,) * len(extents))
    test_fastcat_plans.test_fast_plans_move_every_byte_and_nothing_else(aligned)
