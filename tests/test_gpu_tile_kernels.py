"""Every shared-memory tile kernel on the GPU, in every loader it has: registers (both
directions), cp.async staging (forward) and cp.async.bulk with an mbarrier (backward), whole
rows and column groups, granules of 1 to 16 bytes, row pointers on and off a 16-byte boundary.

Shapes are small (three to five tiles on two CTAs, so each CTA goes round its
grid-stride loop and reuses its shared-memory stages) but every byte is checked,
outputs are poisoned and fenced by guard bytes, and a column-group forward must leave
the columns it does not own untouched. And the rowpack kernels of short rows, direct
and staged through shared memory, on several CTAs' worth of rows and a byte-wise tail.
Small enough for racecheck and synccheck (scripts/sanitize.py runs this file under both)."""

from __future__ import annotations

import numpy as np
import pytest

from ptxgen.kernels.fastcat import Launch

pytestmark = pytest.mark.gpu

GUARD = 256  # bytes of canary on each side of every array
POISON = 0xA5
TARGET = "sm_90"

# (direction, loader, whole_rows): every combination FastcatTile accepts
MODES = [
    ("backward", "regs", True),
    ("backward", "regs", False),
    ("backward", "bulk", True),
    ("forward", "regs", True),
    ("forward", "regs", False),
    ("forward", "cp.async", True),
    ("forward", "cp.async", False),
]
GRANULES = [1, 2, 4, 8, 16]


def _layout(granule: int, whole: bool, wide: bool = False) -> tuple[list[int], tuple[int, ...]]:
    """Chunk widths in bytes (multiples of the granule, some not of 16; with ``wide``, every
    one 16 or more) and the chunks the launch moves: all of them for whole rows, the middle
    two otherwise."""
    if wide:
        widths = [16 + 3 * granule, 37 * granule, 16 + granule, 16 * granule]
    else:
        widths = [3 * granule, 37 * granule, 5 * granule, 16 * granule]
    return widths, (tuple(range(4)) if whole else (1, 2))


def _guarded(dev, nbytes: int, data: np.ndarray | None, shift: int):
    """An allocation of ``nbytes`` (+ ``shift`` bytes of head room) between guards, poisoned or
    holding ``data``; returns it and the address of its payload."""
    host = np.full(GUARD + shift + nbytes + GUARD, POISON, np.uint8)
    if data is not None:
        host[GUARD + shift : GUARD + shift + nbytes] = data.reshape(-1)
    array = dev.to_device(host)
    return array, array.ptr + GUARD + shift


def _payload(array, nbytes: int, shift: int) -> np.ndarray:
    got = array.to_numpy()
    assert (got[:GUARD] == POISON).all() and (got[GUARD : GUARD + shift] == POISON).all(), (
        "wrote before the array"
    )
    assert (got[GUARD + shift + nbytes :] == POISON).all(), "wrote past the end of the array"
    return got[GUARD + shift : GUARD + shift + nbytes]


# 16 KB tiles (unroll 4) are what the planner launches; 32 KB ones fit static shared
# memory only without staging (regs).
# Chunks 16 bytes or wider: the two-piece walk (wide_chunks), on the planner's tiles.
SHAPES = [
    (*mode, unroll, False, False) for mode in MODES for unroll in ((4, 8) if mode[1] == "regs" else (4,))
]
SHAPES += [(*mode, 4, True, False) for mode in MODES]
# The row gather (forward, cp.async, whole rows), in the 32 KB tiles the planner launches
# and in 16 KB ones: two windows a vector where every chunk is wide, else a window a piece.
SHAPES += [("forward", "cp.async", True, unroll, wide, True) for unroll in (4, 8) for wide in (True, False)]


@pytest.mark.parametrize("granule", GRANULES)
@pytest.mark.parametrize("direction, loader, whole, unroll, wide, gather", SHAPES, ids=lambda v: str(v))
def test_tile_kernel(dev, direction, loader, whole, unroll, wide, gather, granule):
    rng = np.random.default_rng()
    widths, ids = _layout(granule, whole, wide)
    pitch = sum(widths)
    offs = [sum(widths[:k]) for k in range(len(widths))]
    tile = 16 * unroll * 256
    rows = -(-4 * tile // pitch)  # four tiles and a bit: two CTAs go round twice
    spec = (
        ("direction", direction), ("chunks", len(ids)), ("granule", granule), ("whole_rows", whole),
        ("unroll", unroll), ("block", 256), ("loader", loader), ("wide_chunks", wide),
    ) + ((("row_gather", True),) if gather else ())  # fmt: skip
    launch = Launch("tile", spec, ids, 2, "test")
    kernel = launch.kernel(TARGET)
    fn = dev.load(kernel).function
    # The row side off a 16-byte boundary where the granule allows (the tile is aligned
    # down to it), the chunks on it.
    row_shift = granule if granule < 16 else 0
    row_host = rng.integers(0, 256, (rows, pitch), dtype=np.uint8)
    chunk_hosts = [rng.integers(0, 256, (rows, w), dtype=np.uint8) for w in widths]
    backward = direction == "backward"
    row, row_ptr = _guarded(dev, rows * pitch, row_host if backward else None, row_shift)
    chunks = [
        _guarded(dev, rows * widths[k], None if backward else chunk_hosts[k], 0) if k in ids else (None, 0)
        for k in range(len(widths))
    ]
    args = launch.args(row_ptr, [p for _, p in chunks], rows, pitch, offs, widths)
    fn.launch((launch.grid, 1, 1), kernel.block, args)
    if backward:
        for k in ids:
            got = _payload(chunks[k][0], rows * widths[k], 0).reshape(rows, widths[k])
            want = row_host[:, offs[k] : offs[k] + widths[k]]
            bad = np.argwhere(got != want)
            assert not len(bad), f"chunk {k}: {len(bad)} wrong bytes, first at {tuple(bad[0])}"
    else:
        got = _payload(row, rows * pitch, row_shift).reshape(rows, pitch)
        want = np.full((rows, pitch), POISON, np.uint8)  # columns of chunks not moved stay poisoned
        for k in ids:
            want[:, offs[k] : offs[k] + widths[k]] = chunk_hosts[k]
        bad = np.argwhere(got != want)
        assert not len(bad), f"y: {len(bad)} wrong bytes, first at {tuple(bad[0])}"


# rowpack: short rows through registers (direct) or through shared memory (staged).
ROWPACK_WIDTHS = [(1, 3), (3, 5), (2, 6), (1, 1, 2), (4, 12), (2, 2, 4), (8, 8)]


@pytest.mark.parametrize("staged", [False, True], ids=["direct", "staged"])
@pytest.mark.parametrize("direction", ["backward", "forward"])
@pytest.mark.parametrize("widths", ROWPACK_WIDTHS, ids=lambda w: "+".join(map(str, w)))
def test_rowpack_kernel(dev, widths, direction, staged):
    from ptxgen.kernels import FastcatRowpack

    _check_rowpack(dev, FastcatRowpack(direction=direction, widths=widths, staged=staged, target=TARGET))


# narrow_chunks (small ops): a group is whole vectors of the row side only, each chunk in
# the widest access its group allows (1-16 bytes; 3+5+24: 1, 1 and 8).
NARROW_WIDTHS = [(3, 5, 24), (6, 10, 48), (12, 20, 96), (6, 10), (3, 4), (1, 2, 5), (2, 6, 4, 12)]


@pytest.mark.parametrize("direction", ["backward", "forward"])
@pytest.mark.parametrize("widths", NARROW_WIDTHS, ids=lambda w: "+".join(map(str, w)))
def test_rowpack_narrow_chunks_kernel(dev, widths, direction):
    from ptxgen.kernels import FastcatRowpack

    kernel = FastcatRowpack(direction=direction, widths=widths, narrow_chunks=True, target=TARGET)
    # each chunk at the weakest alignment its access takes: an address `unit` past 16
    _check_rowpack(dev, kernel, [kernel.units[k] % 16 for k in range(len(widths))])


def _check_rowpack(dev, kernel, shifts=None):
    """Launch ``kernel`` (a split or concat of every chunk) on two CTAs over guarded,
    poisoned buffers and check every byte; chunk ``k`` ``shifts[k]`` bytes past 16."""
    rng = np.random.default_rng()
    fn = dev.load(kernel).function
    widths, direction = kernel.widths, kernel.direction
    pitch, n = sum(widths), kernel.rows_per_thread
    offs = [sum(widths[:k]) for k in range(len(widths))]
    shifts = shifts or [0] * len(widths)
    # Five CTAs' worth of groups and a bit, and 7 rows past the last whole group: two
    # CTAs stride over the rest, the last share is partial, and the tail goes byte by byte.
    rows = 5 * 256 * n + 3 * n + 7
    row_host = rng.integers(0, 256, (rows, pitch), dtype=np.uint8)
    chunk_hosts = [rng.integers(0, 256, (rows, w), dtype=np.uint8) for w in widths]
    backward = direction == "backward"
    row, row_ptr = _guarded(dev, rows * pitch, row_host if backward else None, 0)
    chunks = [
        _guarded(dev, rows * w, None if backward else h, shift)
        for w, h, shift in zip(widths, chunk_hosts, shifts)
    ]
    fn.launch((2, 1, 1), kernel.block, (row_ptr, rows, *(p for _, p in chunks)))
    if backward:
        for k, (array, _) in enumerate(chunks):
            got = _payload(array, rows * widths[k], shifts[k]).reshape(rows, widths[k])
            bad = np.argwhere(got != row_host[:, offs[k] : offs[k] + widths[k]])
            assert not len(bad), f"chunk {k}: {len(bad)} wrong bytes, first at {tuple(bad[0])}"
    else:
        for k, (array, _) in enumerate(chunks):  # read only: guards and bytes unchanged
            assert np.array_equal(
                _payload(array, rows * widths[k], shifts[k]).reshape(rows, -1), chunk_hosts[k]
            )
        got = _payload(row, rows * pitch, 0).reshape(rows, pitch)
        bad = np.argwhere(got != np.concatenate(chunk_hosts, axis=1))
        assert not len(bad), f"y: {len(bad)} wrong bytes, first at {tuple(bad[0])}"


@pytest.mark.parametrize("staged", [False, True], ids=["direct", "staged"])
@pytest.mark.parametrize("pick", ["first", "last"])
@pytest.mark.parametrize("widths", ROWPACK_WIDTHS, ids=lambda w: "+".join(map(str, w)))
def test_rowpack_gather_kernel(dev, widths, pick, staged):
    """``outputs``: one chunk written from whole rows; the row side is read only (its
    guards and bytes unchanged) and no other chunk has a pointer to write through."""
    from ptxgen.kernels import FastcatRowpack, rowpack_rows

    k = 0 if pick == "first" else len(widths) - 1
    rng = np.random.default_rng()
    kernel = FastcatRowpack(direction="backward", widths=widths, staged=staged, outputs=(k,), target=TARGET)
    fn = dev.load(kernel).function
    pitch, n = sum(widths), rowpack_rows(widths, (k,))
    rows = 5 * 256 * n + 3 * n + 7
    row_host = rng.integers(0, 256, (rows, pitch), dtype=np.uint8)
    row, row_ptr = _guarded(dev, rows * pitch, row_host, 0)
    chunk, chunk_ptr = _guarded(dev, rows * widths[k], None, 0)
    fn.launch((2, 1, 1), kernel.block, (row_ptr, rows, chunk_ptr))
    got = _payload(chunk, rows * widths[k], 0).reshape(rows, widths[k])
    off = sum(widths[:k])
    bad = np.argwhere(got != row_host[:, off : off + widths[k]])
    assert not len(bad), f"chunk {k}: {len(bad)} wrong bytes, first at {tuple(bad[0])}"
    assert np.array_equal(_payload(row, rows * pitch, 0).reshape(rows, pitch), row_host)
