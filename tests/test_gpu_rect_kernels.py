"""FastcatRect on the GPU: each access width, both directions, the planner's tile shapes
and the extremes, one chunk and three (one of them a single vector wide), on a narrow
window (many row tiles, columns masked inside one column tile) and a wide one (several
column tiles, the last partial), on the grid the planner launches and on a capped grid
the kernel must stride over in x and y.

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


@pytest.mark.parametrize("chunks", [1, 3])
@pytest.mark.parametrize("grid_kind", ["planned", "capped"])
@pytest.mark.parametrize("shape", ["narrow", "wide"])
# (unroll, block): the planner's shapes (2 or 8 slots of 16 bytes, 4 of 8, 8 of 4 or fewer)
# and the extremes of a tile: one slot, 2,048 slots
@pytest.mark.parametrize("unroll, block", [(1, 256), (2, 128), (4, 128), (8, 128), (8, 256)])
@pytest.mark.parametrize("width", [16, 8, 4, 2, 1])
@pytest.mark.parametrize("direction", ["backward", "forward"])
def test_rect_kernel(dev, direction, width, unroll, block, shape, grid_kind, chunks):
    rng = np.random.default_rng()
    n = 37 if shape == "narrow" else 2 * block * unroll + 3
    counts = [n] if chunks == 1 else [n // 3, 1, n - n // 3 - 1]  # one chunk of one vector
    rows = 1000 if shape == "narrow" else 5
    cols = rect_cols(n, block, unroll)
    k = FastcatRect(direction=direction, width=width, cols=cols, chunks=chunks, unroll=unroll, block=block)
    fn = dev.load(k).function
    start = 3 * width  # columns before the window, and two after it
    pitch = start + (n + 2) * width
    shift = width % 16  # off a 16-byte boundary unless the width is 16
    backward = direction == "backward"
    row_host = rng.integers(0, 256, rows * pitch, dtype=np.uint8)
    row_arr, row_ptr = _guarded(dev, row_host if backward else np.full_like(row_host, POISON), shift)
    args: list[int] = [row_ptr + start, pitch, rows, n]
    pieces, first = [], 0
    for c in counts:
        c_pitch = (c + 1) * width  # padded: the bytes after each chunk row stay untouched
        host = rng.integers(0, 256, rows * c_pitch, dtype=np.uint8)
        array, ptr = _guarded(dev, np.full_like(host, POISON) if backward else host, shift)
        pieces.append((array, host, c, c_pitch, first))
        args += [ptr, c_pitch] + ([first] if chunks > 1 else [])
        first += c
    planned = k.grid(rows, n)
    grid = planned if grid_kind == "planned" else (2, max(1, planned[1] - 1), 1)
    fn.launch(grid, k.block, tuple(args))
    row_got = _payload(row_arr, rows * pitch, shift).reshape(rows, pitch)
    row_want = row_host.reshape(rows, pitch) if backward else np.full((rows, pitch), POISON, np.uint8)
    for i, (array, host, c, c_pitch, first) in enumerate(pieces):
        got = _payload(array, rows * c_pitch, shift).reshape(rows, c_pitch)
        span = slice(start + first * width, start + (first + c) * width)
        if backward:
            want = np.full((rows, c_pitch), POISON, np.uint8)
            want[:, : c * width] = row_host.reshape(rows, pitch)[:, span]
            bad = np.argwhere(got != want)
            assert not len(bad), f"chunk {i}: {len(bad)} wrong bytes, first at {tuple(bad[0])}"
        else:
            assert (got == host.reshape(rows, c_pitch)).all(), f"chunk {i}, a source, changed"
            row_want[:, span] = host.reshape(rows, c_pitch)[:, : c * width]
    bad = np.argwhere(row_got != row_want)
    assert not len(bad), f"row side: {len(bad)} wrong bytes, first at {tuple(bad[0])}"
