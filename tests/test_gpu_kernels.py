"""The emitted kernels on a real GPU: every dtype and block size, odd shapes, offsets
at the start, middle and end, huge row counts and 64-bit addressing."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_util import check_kernel, poison_value, random_bits

import ptxgen

pytestmark = pytest.mark.gpu

KINDS = [ptxgen.ChannelCatBackward, ptxgen.ChannelCatForward]


@pytest.fixture
def rng():
    return np.random.default_rng()  # fresh data every run


@pytest.mark.parametrize("cls", KINDS, ids=lambda c: c.name)
@pytest.mark.parametrize("block_size", ptxgen.BLOCK_SIZES)
@pytest.mark.parametrize("dtype", list(ptxgen.DTYPES))
def test_every_dtype_and_block_size(dev, rng, cls, dtype, block_size):
    # 131 channels: several tiles for small blocks, one partly empty tile for large ones
    check_kernel(dev, cls(dtype, block_size), rng, n_spatial=19, chunk_c=131, c_total=143, offset=7)


@pytest.mark.parametrize("inline", [False, True], ids=["call", "inline"])
@pytest.mark.parametrize("cls", KINDS, ids=lambda c: c.name)
def test_inline_and_call_variants_agree(dev, rng, cls, inline):
    check_kernel(dev, cls("f32", 128, inline=inline), rng, n_spatial=23, chunk_c=300, c_total=311, offset=5)


PAD = 13  # channels on each side of the chunk when it sits in the middle


@pytest.mark.parametrize("cls", KINDS, ids=lambda c: c.name)
@pytest.mark.parametrize("chunk_c", [1, 3, 17, 1000, 4099])
@pytest.mark.parametrize("where", ["start", "middle", "end"])
@pytest.mark.parametrize("n_spatial", [1, 3, 257, 70_001])
def test_shapes_and_offsets(dev, rng, cls, chunk_c, where, n_spatial):
    if n_spatial == 70_001 and chunk_c > 17:
        n_spatial = 4_099  # keep the wide rows under a few hundred MB of host checking
    c_total = chunk_c + 2 * PAD
    offset = {"start": 0, "middle": PAD, "end": c_total - chunk_c}[where]
    check_kernel(dev, cls("f32", 128), rng, n_spatial, chunk_c, c_total, offset)


@pytest.mark.parametrize("cls", KINDS, ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", ["u8", "f16", "f64", "e5m2"])
@pytest.mark.parametrize(
    "chunk_c, c_total, offset", [(1, 1, 0), (4099, 4099, 0), (1, 4099, 4098), (17, 8209, 4096)]
)
def test_odd_shapes_in_other_dtypes(dev, rng, cls, dtype, chunk_c, c_total, offset):
    check_kernel(dev, cls(dtype, 96), rng, n_spatial=3, chunk_c=chunk_c, c_total=c_total, offset=offset)


def test_forward_then_backward_returns_every_input(dev, rng):
    chunks, n_spatial = [3, 17, 1, 250], 1_001
    c_total = sum(chunks)
    for dtype in ("f32", "bf16", "i8", "f64"):
        fwd, bwd = ptxgen.ChannelCatForward(dtype, 128), ptxgen.ChannelCatBackward(dtype, 256)
        inputs = [random_bits(rng, (n_spatial, c), dtype) for c in chunks]
        y = dev.empty((n_spatial, c_total), dtype).fill_bytes(0xEE)
        offset = 0
        for x_host, c in zip(inputs, chunks):
            x = dev.to_device(x_host, dtype=dtype)
            dev.load(fwd).function.launch(fwd.grid(n_spatial, c), fwd.block, (x, y, c, c_total, offset))
            offset += c
        assert not (y.to_numpy(bits=True) == poison_value(0xEE, dtype)).all(axis=1).any()
        offset = 0
        for x_host, c in zip(inputs, chunks):
            dx = dev.empty((n_spatial, c), dtype).fill_bytes(0x11)
            dev.load(bwd).function.launch(bwd.grid(n_spatial, c), bwd.block, (y, dx, c, c_total, offset))
            np.testing.assert_array_equal(dx.to_numpy(bits=True), x_host)
            offset += c


# --- more than 2**31 elements: the index arithmetic must be 64-bit --------------------

PERIOD = 1_000_003  # a prime: a truncated address reads a different pattern position
HUGE_C_TOTAL, HUGE_CHUNK = 64, 2
HUGE_N = (1 << 31) // HUGE_C_TOTAL + 4_097  # n_spatial * c_total > 2**31 elements


def fill_with_pattern(dev, array, pattern: np.ndarray) -> None:
    """Tile ``pattern`` over a u8 device array by doubling copies, without a host buffer."""
    from runtime._driver import check, driver

    drv = driver()
    head = min(len(pattern), array.nbytes)
    check("cuMemcpyHtoD", drv.cuMemcpyHtoD(array.ptr, pattern.ctypes.data, head))
    filled = head
    while filled < array.nbytes:
        n = min(filled, array.nbytes - filled)
        check("cuMemcpyDtoD", drv.cuMemcpyDtoD(array.ptr + filled, array.ptr, n))
        filled += n


def test_backward_past_2_to_the_31_elements(dev, rng):
    pattern = rng.integers(0, 256, PERIOD, dtype=np.uint8)
    total = HUGE_N * HUGE_C_TOTAL
    assert total > 2**31
    dy = dev.empty((HUGE_N, HUGE_C_TOTAL), "u8")
    fill_with_pattern(dev, dy, pattern)
    offset = HUGE_C_TOTAL - HUGE_CHUNK
    k = ptxgen.ChannelCatBackward("u8", 256)
    dx = dev.empty((HUGE_N, HUGE_CHUNK), "u8").fill_bytes(0xA5)
    dev.load(k).function.launch(
        k.grid(HUGE_N, HUGE_CHUNK), k.block, (dy, dx, HUGE_CHUNK, HUGE_C_TOTAL, offset)
    )
    got = dx.to_numpy()
    rows = np.arange(HUGE_N, dtype=np.int64)[:, None] * HUGE_C_TOTAL + offset + np.arange(HUGE_CHUNK)
    want = pattern[rows % PERIOD]
    assert np.array_equal(got, want), f"first bad row {np.argwhere(got != want)[0][0]} of {HUGE_N}"
    dy.close()
    dx.close()


def test_forward_past_2_to_the_31_elements(dev, rng):
    offset = HUGE_C_TOTAL - HUGE_CHUNK
    x_host = rng.integers(0, 256, (HUGE_N, HUGE_CHUNK), dtype=np.uint8)
    x = dev.to_device(x_host)
    y = dev.empty(HUGE_N * HUGE_C_TOTAL + 64, "u8").fill_bytes(0x5A)  # 64 canary bytes at the end
    k = ptxgen.ChannelCatForward("u8", 128)
    dev.load(k).function.launch(k.grid(HUGE_N, HUGE_CHUNK), k.block, (x, y, HUGE_CHUNK, HUGE_C_TOTAL, offset))
    got = y.to_numpy()
    assert (got[-64:] == 0x5A).all(), "wrote past the end"
    rows = got[:-64].reshape(HUGE_N, HUGE_C_TOTAL)
    assert np.array_equal(rows[:, offset:], x_host)
    assert (rows[:, :offset] == 0x5A).all(), "wrote outside the chunk's channels"
    x.close()
    y.close()
