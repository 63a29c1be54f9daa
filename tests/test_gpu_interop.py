"""Launching on PyTorch and CuPy arrays, and handing DeviceArrays to them."""

from __future__ import annotations

import numpy as np
import pytest

import ptxgen
import runtime

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch(dev):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch cannot see the GPU")
    return torch


@pytest.fixture(scope="module")
def cupy(dev):
    return pytest.importorskip("cupy")


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "i64", "u8"])
def test_backward_on_torch_tensors(dev, torch, dtype):
    tdt = getattr(torch, ptxgen.resolve_dtype(dtype).numpy_name)
    dy = torch.randint(0, 100, (33, 40), device="cuda").to(tdt)
    dx = torch.full((33, 17), 7, device="cuda").to(tdt)
    k = ptxgen.ChannelCatBackward(dtype, 128)
    stream = runtime.Stream.from_handle(torch.cuda.current_stream().cuda_stream, dev)
    dev.load(k).function.launch(k.grid(33, 17), k.block, (dy, dx, 17, 40, 11), stream=stream)
    torch.cuda.synchronize()
    assert torch.equal(dx, dy[:, 11:28])


def test_torch_mismatches_are_refused(dev, torch):
    k = ptxgen.ChannelCatBackward("f32", 128)
    fn = dev.load(k).function
    dy = torch.zeros((4, 8), device="cuda")
    dx = torch.full((4, 4), 3.0, device="cuda")
    with pytest.raises(TypeError, match="got a Tensor of <f2"):
        fn.launch(k.grid(4, 4), k.block, (dy.half(), dx, 4, 8, 0))
    with pytest.raises(ValueError, match="not contiguous"):
        fn.launch(k.grid(4, 4), k.block, (dy, torch.zeros((4, 8), device="cuda")[:, :4], 4, 8, 0))
    with pytest.raises(TypeError, match=r"host \(CPU\)"):
        fn.launch(k.grid(4, 4), k.block, (dy.cpu(), dx, 4, 8, 0))
    torch.cuda.synchronize()
    assert (dx == 3.0).all()


def test_forward_on_cupy_arrays(dev, cupy):
    x = cupy.arange(60, dtype=cupy.float64).reshape(12, 5)
    y = cupy.zeros((12, 9), dtype=cupy.float64)
    k = ptxgen.ChannelCatForward("f64", 64)
    dev.load(k).function.launch(k.grid(12, 5), k.block, (x, y, 5, 9, 4))
    cupy.cuda.Device().synchronize()
    assert cupy.array_equal(y[:, 4:], x) and not y[:, :4].any()


def test_device_array_seen_by_torch_and_cupy_without_copy(dev, torch, cupy):
    host = np.arange(24, dtype=np.float32).reshape(4, 6)
    arr = dev.to_device(host)
    t = torch.from_dlpack(arr)
    assert t.data_ptr() == arr.ptr and t.shape == (4, 6) and t.dtype == torch.float32
    assert torch.equal(t.cpu(), torch.from_numpy(host))
    c = cupy.asarray(arr)  # through __cuda_array_interface__
    assert c.data.ptr == arr.ptr and cupy.array_equal(c, cupy.asarray(host))
    t.mul_(2)  # writes through the view are visible to the owner
    torch.cuda.synchronize()
    np.testing.assert_array_equal(arr.to_numpy(), host * 2)
    bf = dev.to_device(np.zeros(8, np.uint16), dtype="bf16")
    assert torch.from_dlpack(bf).dtype == torch.bfloat16
    del t, c


def test_dlpack_export_keeps_memory_alive(dev, torch):
    arr = dev.to_device(np.arange(10, dtype=np.int32))
    t = torch.from_dlpack(arr)
    ptr = arr.ptr
    del arr  # the exported tensor holds the DeviceArray until torch lets go
    import gc

    gc.collect()
    assert t.data_ptr() == ptr and t.cpu().tolist() == list(range(10))
