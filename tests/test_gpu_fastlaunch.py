"""The compiled launch path on a GPU, beside the Python path it stands in front of:
every array kind and every way in (launch, prepared, raw), into guarded, poisoned
outputs; refused launches write nothing; threads launch at once."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_util import GUARD, poison_value, random_bits
from launch_util import errors_in_threads

import ptxgen
from runtime import launch as launch_module

pytestmark = pytest.mark.gpu

K = ptxgen.ChannelCatBackward("f32", 128)
N, C_TOTAL, CHUNK, OFFSET = 1031, 53, 29, 17  # prime rows and widths: partial blocks everywhere


@pytest.fixture(scope="module")
def fn(dev):
    fn = dev.load(K).function
    why = launch_module.compiled_launch_available()
    if why:
        pytest.skip(why)
    if not fn.launcher.compiled and not launch_module.compiled_launch_enabled():
        pytest.skip(
            "the compiled launch path is switched off (PTXGEN_COMPILED_LAUNCH=0, or use_compiled_launch)"
        )
    assert fn.launcher.compiled, "the extension is built, yet the function launches through Python"
    return fn


def _arrays(dev, torch, kind):
    """dy, and dx as ``kind`` passes them, poisoned; ``read()`` gives dx's bits with the
    guard elements on each side of it (none for a DeviceArray, which cannot be a view:
    there the footprint check stands guard)."""
    host = random_bits(np.random.default_rng(), (N, C_TOTAL), "f32")
    total = GUARD + N * CHUNK + GUARD
    if kind == "torch":
        dy = torch.from_numpy(host.view(np.float32)).cuda()
        full = torch.empty(total, dtype=torch.float32, device="cuda")
        full.view(torch.int32).fill_(poison_value(0xA5, "f32") - (1 << 32))
        dx = full[GUARD : GUARD + N * CHUNK].view(N, CHUNK)
        return host, dy, dx, lambda: full.view(torch.int32).cpu().numpy().view(np.uint32)
    if kind == "cupy":
        cupy = pytest.importorskip("cupy")
        dy = cupy.asarray(host.view(np.float32))
        full = cupy.full(total, poison_value(0xA5, "f32"), dtype=cupy.uint32)
        dx = full[GUARD : GUARD + N * CHUNK].view(cupy.float32).reshape(N, CHUNK)
        return host, dy, dx, lambda: cupy.asnumpy(full)
    dy = dev.to_device(host, dtype="f32")
    if kind == "DeviceArray":
        dx = dev.empty((N, CHUNK), "f32").fill_bytes(0xA5)
        return host, dy, dx, lambda: dx.to_numpy(bits=True).ravel()
    full = dev.empty(total, "f32").fill_bytes(0xA5)

    def read(keep=(dy, full)):  # the int addresses' arrays live as long as this function
        return full.to_numpy(bits=True)

    return host, dy.ptr, full.ptr + 4 * GUARD, read


def _check(read, host):
    got = read()
    if got.size != N * CHUNK:  # guarded
        poison = poison_value(0xA5, "f32")
        assert (got[:GUARD] == poison).all(), "wrote before dx"
        assert (got[GUARD + N * CHUNK :] == poison).all(), "wrote past dx"
        got = got[GUARD : GUARD + N * CHUNK]
    np.testing.assert_array_equal(got, host[:, OFFSET : OFFSET + CHUNK].ravel())


@pytest.mark.parametrize("kind", ["DeviceArray", "int", "torch", "cupy"])
@pytest.mark.parametrize("way", ["compiled", "python", "prepared", "raw"])
def test_every_array_kind_through_every_way_in(dev, torch, fn, kind, way):
    host, dy, dx, read = _arrays(dev, torch, kind)
    args = (dy, dx, CHUNK, C_TOTAL, OFFSET)
    grid, block = K.grid(N, CHUNK), K.block
    stream = torch.cuda.current_stream() if kind == "torch" else None
    if way == "compiled":
        fn.launch(grid, block, args, stream=stream)
    elif way == "python":
        fn.launcher.python_launch(grid, block, args, stream=stream)
    elif way == "prepared":
        fn.prepare(grid, block, stream=stream)(*args)
    else:
        values = fn.pack_args(args, stream=0)
        fn.prepare(grid, block, stream=stream).raw(*values)
    dev.synchronize()
    torch.cuda.synchronize()
    _check(read, host)


def test_refused_launches_write_nothing(dev, torch, fn):
    """The C path hands each of these to the Python path, which refuses it by name."""
    host, dy, dx, read = _arrays(dev, torch, "torch")
    short = dx[:-1]
    cases = [
        ((dy, short, CHUNK, C_TOTAL, OFFSET), "the array holds"),
        ((dy, dx, CHUNK, C_TOTAL, C_TOTAL), "exceeds c_total"),
        ((dy.half(), dx, CHUNK, C_TOTAL, OFFSET), "got a Tensor of"),
        ((dy, dx.t(), CHUNK, C_TOTAL, OFFSET), "not contiguous"),
        ((dy, dx, CHUNK, 2**31, OFFSET), "out of range"),
    ]
    for args, message in cases:
        with pytest.raises((TypeError, ValueError), match=message):
            fn.launch(K.grid(N, CHUNK), K.block, args, stream=torch.cuda.current_stream())
    torch.cuda.synchronize()
    got = read()
    assert (got == poison_value(0xA5, "f32")).all(), "a refused launch wrote"
    fn.launch(K.grid(N, CHUNK), K.block, (dy, dx, CHUNK, C_TOTAL, OFFSET), stream=torch.cuda.current_stream())
    torch.cuda.synchronize()
    _check(read, host)


def test_threads_launch_at_once(dev, torch, fn):
    """Eight threads, each its own outputs and stream, 50 launches each through the C path."""
    outputs = [_arrays(dev, torch, "torch") for _ in range(8)]

    def work(i):
        _host, dy, dx, _ = outputs[i]
        stream = torch.cuda.Stream()
        for _ in range(50):
            fn.launch(K.grid(N, CHUNK), K.block, (dy, dx, CHUNK, C_TOTAL, OFFSET), stream=stream)
        stream.synchronize()

    errors = errors_in_threads(work, 8)
    assert not errors, errors
    for host, _, _, read in outputs:
        _check(read, host)
