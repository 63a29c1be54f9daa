"""Helpers for the GPU tests: random bits, poisoned and guarded outputs."""

from __future__ import annotations

import numpy as np

import ptxgen

GUARD = 97  # canary elements on each side of an output


def bits_dtype(dtype: str) -> np.dtype:
    return np.dtype(f"uint{ptxgen.resolve_dtype(dtype).itemsize * 8}")


def random_bits(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Fresh random bit patterns of dtype's width (NaNs and all: the copy must keep them)."""
    b = bits_dtype(dtype)
    return rng.integers(0, np.iinfo(b).max, shape, dtype=b, endpoint=True)


def poison_value(byte: int, dtype: str) -> int:
    return int.from_bytes(bytes([byte]) * bits_dtype(dtype).itemsize, "little")


def run_guarded(dev, kernel, src_host: np.ndarray, n_spatial: int, chunk_c: int, c_total: int, offset: int):
    """Launch ``kernel`` into a guarded, poisoned output, twice with different poisons.

    Returns the output (without guards) of each run; asserts that no guard element changed.
    A result that matches under both poisons was written, not left over.
    """
    backward = kernel.name == "channel_cat_backward"
    out_shape = (n_spatial, chunk_c) if backward else (n_spatial, c_total)
    out_elems = int(np.prod(out_shape))
    itemsize = src_host.dtype.itemsize
    fn = dev.load(kernel).function
    src = dev.to_device(src_host, dtype=kernel.dtype)
    out = dev.empty(GUARD + out_elems + GUARD, kernel.dtype)
    results = []
    try:
        for byte in (0xA5, 0x5A):
            out.fill_bytes(byte)
            fn.launch(
                kernel.grid(n_spatial, chunk_c),
                kernel.block,
                (src, out.ptr + GUARD * itemsize, chunk_c, c_total, offset),
            )
            got = out.to_numpy(bits=True)  # waits for the kernel; a fault would raise here
            poison = poison_value(byte, kernel.dtype)
            assert (got[:GUARD] == poison).all(), "wrote before the start of the output"
            assert (got[GUARD + out_elems :] == poison).all(), "wrote past the end of the output"
            results.append((byte, got[GUARD : GUARD + out_elems].reshape(out_shape)))
    finally:
        src.close()
        out.close()
    return results


def first_mismatch(got: np.ndarray, want: np.ndarray) -> str:
    bad = np.argwhere(got != want)
    if not len(bad):
        return ""
    where = tuple(int(i) for i in bad[0])
    return f"{len(bad)} wrong elements, first at {where}: got {got[where]:#x}, want {want[where]:#x}"


def check_kernel(dev, kernel, rng, n_spatial: int, chunk_c: int, c_total: int, offset: int) -> None:
    """Run ``kernel`` on fresh random data and check every element and both guards."""
    backward = kernel.name == "channel_cat_backward"
    src_shape = (n_spatial, c_total) if backward else (n_spatial, chunk_c)
    src = random_bits(rng, src_shape, kernel.dtype)
    for byte, got in run_guarded(dev, kernel, src, n_spatial, chunk_c, c_total, offset):
        if backward:
            want = src[:, offset : offset + chunk_c]
        else:
            want = np.full((n_spatial, c_total), poison_value(byte, kernel.dtype), dtype=src.dtype)
            want[:, offset : offset + chunk_c] = src
        problem = first_mismatch(got, want)
        assert not problem, f"{kernel!r} n_spatial={n_spatial} chunk_c={chunk_c} offset={offset}: {problem}"


def replay_on_new_data(rng, graph, stream, xs, y, pieces, dtype: str, trials: int = 3) -> None:
    """Replay a graph that concatenated the DeviceArrays ``xs`` into ``y`` and split ``y``
    back into ``pieces``, each time on fresh random bits copied into ``xs``: every element
    of ``y`` and of every piece checked after each replay."""
    for trial in range(trials):
        new = [random_bits(rng, x.shape, dtype) for x in xs]
        for x, bits in zip(xs, new):
            x.copy_from_host(bits)
        graph.launch()
        stream.synchronize()
        assert np.array_equal(y.to_numpy(bits=True), np.concatenate(new, axis=1)), trial
        for p, bits in zip(pieces, new):
            assert np.array_equal(p.to_numpy(bits=True), bits), trial
