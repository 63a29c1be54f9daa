"""Every FastcatRect shape on the GPU: each access width, both directions, each unroll and
two block sizes, on a narrow rectangle (many row tiles, columns masked inside one column
tile) and a wide one (several column tiles, the last partial), on the grid the planner
launches and on a capped grid the kernel must stride over in x and y.

Pointers sit off a 16-byte boundary wherever the width allows, both pitches are padded,
every output is poisoned and fenced by guard bytes, and every byte is checked: the
padding and the columns around the rectangle must stay poisoned."""

from __future__ import annotations

import numpy as np
import pytest

from ptxgen.kernels import FastcatRect
from ptxgen.kernels.fastcat_rect import rect_cols

pytestmark = pytest.mark.gpu

GUARD = 256
POISON = 0xA5


def _guarded(dev, host: np.ndarray, shift: int):
    """``host`` (bytes) placed ``shift`` bytes past a 16-byte boundary, between guards."""
    whole = np.full(GUARD + shift + host.size + GUARD, POISON, np.uint8)
    whole[GUARD + shift : GUARD + shift + host.size] = host
    array = dev.to_device(whole)
    return array, array.ptr + GUARD + shift


def _payload(array, nbytes: int, shift: int) -> np.ndarray:
    got = array.to_numpy()
    assert (got[: GUARD + shift] == POISON).all(), "wrote before the array"
    assert (got[GUARD + shift + nbytes :] == POISON).all(), "wrote past the end of the array"
    return got[GUARD + shift : GUARD + shift + nbytes]


@pytest.mark.parametrize("grid_kind", ["planned", "capped"])
@pytest.mark.parametrize("shape", ["narrow", "wide"])
@pytest.mark.parametrize("block", [128, 256])
@pytest.mark.parametrize("unroll", [1, 2, 4, 8])
@pytest.mark.parametrize("width", [16, 8, 4, 2, 1])
@pytest.mark.parametrize("direction", ["backward", "forward"])
def test_rect_kernel(dev, direction, width, unroll, block, shape, grid_kind):
    rng = np.random.default_rng()
    n = 37 if shape == "narrow" else 2 * block * unroll + 3
    rows = 1000 if shape == "narrow" else 5
    cols = rect_cols(n, block, unroll)
    k = FastcatRect(direction=direction, width=width, cols=cols, unroll=unroll, block=block)
    fn = dev.load(k).function
    start = 3 * width  # columns before the rectangle, and two after it
    pitch = start + (n + 2) * width
    c_pitch = (n + 1) * width  # padded: the byte after each chunk row stays untouched
    shift = width % 16  # off a 16-byte boundary unless the width is 16
    row_host = rng.integers(0, 256, rows * pitch, dtype=np.uint8)
    chunk_host = rng.integers(0, 256, rows * c_pitch, dtype=np.uint8)
    backward = direction == "backward"
    row_arr, row_ptr = _guarded(dev, row_host if backward else np.full_like(row_host, POISON), shift)
    chunk_arr, chunk_ptr = _guarded(dev, np.full_like(chunk_host, POISON) if backward else chunk_host, shift)
    planned = k.grid(rows, n)
    grid = planned if grid_kind == "planned" else (2, max(1, planned[1] - 1), 1)
    fn.launch(grid, k.block, (row_ptr + start, pitch, rows, n, chunk_ptr, c_pitch))
    row_got = _payload(row_arr, rows * pitch, shift).reshape(rows, pitch)
    chunk_got = _payload(chunk_arr, rows * c_pitch, shift).reshape(rows, c_pitch)
    span = slice(start, start + n * width)
    if backward:
        want = np.full((rows, c_pitch), POISON, np.uint8)
        want[:, : n * width] = row_host.reshape(rows, pitch)[:, span]
        bad = np.argwhere(chunk_got != want)
        assert not len(bad), f"chunk: {len(bad)} wrong bytes, first at {tuple(bad[0])}"
        assert (row_got == row_host.reshape(rows, pitch)).all(), "the source changed"
    else:
        want = np.full((rows, pitch), POISON, np.uint8)
        want[:, span] = chunk_host.reshape(rows, c_pitch)[:, : n * width]
        bad = np.argwhere(row_got != want)
        assert not len(bad), f"row side: {len(bad)} wrong bytes, first at {tuple(bad[0])}"
