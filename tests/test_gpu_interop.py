"""Launching on PyTorch and CuPy arrays, and handing DeviceArrays to them."""

from __future__ import annotations

import numpy as np
import pytest

import ptxgen
import runtime

pytestmark = pytest.mark.gpu


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


class StreamNamingArray:
    """A torch tensor re-exported through ``__cuda_array_interface__`` v3, naming the
    stream its pending writes are queued on."""

    def __init__(self, tensor, stream_handle):
        self.tensor = tensor
        self.__cuda_array_interface__ = dict(tensor.__cuda_array_interface__, version=3, stream=stream_handle)


def test_an_array_naming_its_stream_is_read_after_the_producer_wrote_it(dev, torch):
    """The producer's stream sleeps ~50 ms and then fills dy; launches on another stream
    must wait for it (CAI v3's stream key), through the op and through Function.launch,
    by an event where the handle is vouched for and by the device otherwise."""
    k = ptxgen.ChannelCatBackward("f32", 128)
    fn = dev.load(k).function
    for how, vouched in (("op", False), ("launch", False), ("op", True), ("launch", True)):
        dy = torch.zeros((2048, 64), device="cuda")
        torch.cuda.synchronize()
        producer = torch.cuda.Stream()
        if vouched:
            runtime.stream.trust_stream_handle(producer.cuda_stream)
        with torch.cuda.stream(producer):
            torch.cuda._sleep(100_000_000)
            dy.fill_(3.0)
        wrapped = StreamNamingArray(dy, producer.cuda_stream)
        with runtime.Stream(dev) as consumer:
            if how == "op":
                got = runtime.channel_cat_backward(wrapped, [16, 48], stream=consumer)[1]
            else:
                got = dev.empty((2048, 48), "f32")
                fn.launch(k.grid(2048, 48), k.block, (wrapped, got, 48, 64, 16), stream=consumer)
            consumer.synchronize()
        assert (got.to_numpy() == 3.0).all(), (how, vouched)
        torch.cuda.synchronize()


def test_an_array_naming_its_stream_can_be_captured_into_a_graph(dev, torch):
    """During capture nothing is ordered (an outside event cannot join a graph): the
    launch is captured and the replay is right."""
    k = ptxgen.ChannelCatBackward("f32", 128)
    fn = dev.load(k).function
    dy = torch.arange(64 * 32, device="cuda", dtype=torch.float32).reshape(64, 32)
    producer = torch.cuda.Stream()
    runtime.stream.trust_stream_handle(producer.cuda_stream)
    torch.cuda.synchronize()
    dx = dev.empty((64, 16), "f32").fill_bytes(0xA5)
    pieces = [dev.empty((64, 8), "f32").fill_bytes(0xA5), dev.empty((64, 24), "f32").fill_bytes(0xA5)]
    dev.synchronize()
    named = StreamNamingArray(dy, producer.cuda_stream)
    with runtime.Stream(dev) as stream:
        with runtime.Graph(stream) as graph:
            fn.launch(k.grid(64, 16), k.block, (named, dx, 16, 32, 8), stream=stream)
            runtime.channel_cat_backward(named, [8, 24], out=pieces, stream=stream)
        assert len(graph.kernel_nodes) >= 2
        graph.launch()
        stream.synchronize()
        graph.close()
    want = dy.cpu().numpy()
    assert np.array_equal(dx.to_numpy(), want[:, 8:24])
    assert np.array_equal(pieces[0].to_numpy(), want[:, :8]) and np.array_equal(
        pieces[1].to_numpy(), want[:, 8:]
    )


def test_cupy_arrays_are_ordered_after_cupys_current_stream(dev, cupy):
    x = cupy.zeros((512, 32), dtype=cupy.float32)
    k = ptxgen.ChannelCatBackward("f32", 128)
    dx = dev.empty((512, 8), "f32")
    with cupy.cuda.Stream(non_blocking=True):
        x += 5  # queued on CuPy's current stream, which the launch's stream does not follow by itself
        dev.load(k).function.launch(k.grid(512, 8), k.block, (x, dx, 8, 32, 3))
    dev.synchronize()
    assert (dx.to_numpy() == 5).all()
