"""Every benchmark shape through the high-level ops, scaled down to a few hundred rows:
the kernels the planner picks for the benchmark's channel layouts, every dtype size,
checked element by element with poisoned outputs. Small enough for compute-sanitizer
(scripts/sanitize.py runs this file under memcheck, racecheck and synccheck)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import ROOT
from gpu_util import first_mismatch, random_bits

import runtime

sys.path.insert(0, str(ROOT / "scripts"))
from bench_cases import all_cases

pytestmark = pytest.mark.gpu

# One case per (layout, dtype): splits and concats of every shape, and the gathers as splits.
LAYOUTS = sorted({(c.sizes, c.dtype, min(c.rows, 257 if sum(c.sizes) < 4096 else 5)) for c in all_cases()})


@pytest.mark.parametrize("sizes, dtype, rows", LAYOUTS, ids=lambda v: str(v).replace(" ", ""))
def test_split_and_concat_of_bench_shapes(dev, sizes, dtype, rows):
    rng = np.random.default_rng()
    bits = random_bits(rng, (rows, sum(sizes)), dtype)
    dy = dev.to_device(bits, dtype=dtype)
    outs = [dev.empty((rows, s), dtype).fill_bytes(0xA5) for s in sizes]
    runtime.channel_cat_backward(dy, list(sizes), 1, out=outs)
    for i, (out, want) in enumerate(zip(outs, np.split(bits, np.cumsum(sizes)[:-1], axis=1))):
        problem = first_mismatch(out.to_numpy(bits=True), want)
        assert not problem, f"split piece {i}: {problem}"
    y = dev.empty((rows, sum(sizes)), dtype).fill_bytes(0x5A)
    runtime.channel_cat_forward(outs, 1, out=y)
    problem = first_mismatch(y.to_numpy(bits=True), bits)
    assert not problem, f"concat: {problem}"
