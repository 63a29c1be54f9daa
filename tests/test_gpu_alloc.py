"""Allocation on the GPU: the device's stream-ordered pool, the ops' results in the
caller's own kind, on the op's stream, under graph capture and under memory pressure.

Every result is checked element for element against the reference; inputs are fresh
random bits every run. The CPU side of the same rules: tests/test_pool_cpu.py.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from gpu_util import random_bits, replay_on_new_data

import ptxgen
import runtime
from runtime.pool import DeviceOutOfMemory

pytestmark = pytest.mark.gpu

# torch's name of each dtype the tests make torch tensors of
TORCH_DTYPES = {"bf16": "bfloat16", "f32": "float32", "f16": "float16", "u8": "uint8", "i64": "int64"}


@pytest.fixture
def rng():
    return np.random.default_rng()


def torch_bits(torch, rng, shape, dtype):
    """A CUDA tensor of ``dtype`` holding fresh random bits, and those bits on the host."""
    bits = random_bits(rng, shape, dtype)
    tensor = torch.from_numpy(bits).cuda().view(getattr(torch, TORCH_DTYPES[dtype]))
    return tensor, bits


def host_bits(torch, tensor) -> np.ndarray:
    """The tensor's bits on the host, as the unsigned ints random_bits draws."""
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]
    return tensor.view(width).cpu().numpy().view(f"u{tensor.element_size()}")


# --- the pool -----------------------------------------------------------------------------


def test_device_arrays_come_from_the_pool_and_its_memory_stays(dev):
    pool = dev.memory_pool
    assert pool.stream_ordered, "an H200 has memory pools"
    a = dev.empty((1 << 20,), "u8")
    address = a.address
    assert pool.used_bytes >= 1 << 20
    a.close()
    assert pool.reserved_bytes >= 1 << 20  # freed, kept for the next array
    b = dev.empty((1 << 20,), "u8")
    assert b.address == address  # the same stream takes it back first
    b.close()


def test_a_group_is_one_allocation_held_until_its_last_array_goes(dev, rng):
    """Device.empty_group: the arrays lie in one allocation, 256-byte aligned and apart
    (each keeps its own bytes); the memory stays theirs while any of them is open, and
    the pool hands it out again once the last is closed."""
    shapes = [(1 << 20,), (3,), (0,), (1 << 18,), (17, 5)]
    arrays = dev.empty_group(shapes, "u8")
    held = [a for a in arrays if a.nbytes]
    base = held[0].address
    assert [a.shape for a in arrays] == shapes and arrays[2].address == 0
    starts = [base, base + (1 << 20), base + (1 << 20) + 256, base + (1 << 20) + 256 + (1 << 18)]
    assert [a.address for a in held] == starts
    data = [random_bits(rng, a.shape, "u8") for a in held]
    for a, bits in zip(held, data):
        a.copy_from_host(bits)
    for a, bits in zip(held, data):
        assert np.array_equal(a.to_numpy(), bits)
    for a in held[:-1]:
        a.close()
    other = dev.empty((1 << 20,), "u8")  # the group's memory is still held: not this one's
    end = starts[-1] + 256
    assert other.address + (1 << 20) <= base or other.address >= end
    assert np.array_equal(held[-1].to_numpy(), data[-1])
    other.close()
    held[-1].close()
    again = dev.empty((1 << 20,), "u8")
    assert again.address == base  # the same stream takes it back first
    again.close()


def test_allocating_ops_on_device_arrays_make_their_results_in_one_allocation(dev, rng):
    """A split of DeviceArrays into four results makes them in one allocation (one pool
    call, one free), each correct, through the Python path and the C lane alike."""
    bits = random_bits(rng, (333, 4 + 1 + 80 + 3), "bf16")
    dy = dev.to_device(bits, dtype="bf16")
    for _ in range(3):  # the first call runs the Python path; the next ones the C lane where built
        pieces = runtime.channel_cat_backward(dy, [4, 1, 80, 3], 1)
        starts, at = [], pieces[0].address
        for p in pieces:
            starts.append(at)
            at += -(-p.nbytes // 256) * 256
        assert [p.address for p in pieces] == starts
        column = 0
        for p, width in zip(pieces, (4, 1, 80, 3)):
            assert np.array_equal(p.to_numpy(bits=True), bits[:, column : column + width])
            column += width
    dy.close()


def test_dropping_an_array_does_not_wait_for_the_device(dev, torch):
    """A free is queued on the array's stream: with the device busy for about a second,
    dropping arrays returns at once (cuMemFree would wait for the whole device)."""
    arrays = [dev.empty((1 << 16,), "f32") for _ in range(64)]
    torch.cuda._sleep(2_000_000_000)  # about a second of one SM spinning, on the legacy default stream
    start = time.perf_counter()
    arrays.clear()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    assert elapsed < 0.25, f"dropping 64 arrays took {elapsed:.3f} s while the device was busy"


def test_a_free_waits_for_the_streams_recorded_on_the_array(dev, torch, rng):
    """An array made on stream A and written on stream B (late: B first spins) is freed on
    A after B's write, because B was recorded; the next array A makes in that memory is
    written by a kernel on A, queued without any host wait, so it holds A's value."""
    a_stream, b_stream = runtime.Stream(dev), runtime.Stream(dev)
    ext_b = torch.cuda.ExternalStream(b_stream.handle)
    source = dev.empty((1 << 20,), "u8")
    reused = 0
    for trial in range(3):
        source.fill_bytes(0x22 + trial)
        first = dev.empty((1 << 20,), "u8", stream=a_stream)
        view = torch.from_dlpack(first)  # (its export waits for the device: before B's work)
        with torch.cuda.stream(ext_b):
            torch.cuda._sleep(200_000_000)
            view.fill_(0x11)
        first.record_stream(b_stream)
        address = first.address
        del first, view  # the free is queued on A after an event of B's
        second = dev.empty((1 << 20,), "u8", stream=a_stream)
        runtime.channel_cat_forward([source], 0, out=second, stream=a_stream)  # on A, no host wait
        a_stream.synchronize()
        b_stream.synchronize()
        got = second.to_numpy()
        assert (got == 0x22 + trial).all(), f"trial {trial}: B's late write landed in A's new array"
        reused += second.address == address
        second.close()
    assert reused, "the pool never handed the recorded array's memory to the next: nothing was tested"
    a_stream.close()
    b_stream.close()


def test_an_array_outlives_the_stream_it_was_made_on(dev, rng, capfd):
    bits = random_bits(rng, (257, 48), "f32")
    dy = dev.to_device(bits, dtype="f32")
    with runtime.Stream(dev) as s:
        a, b = runtime.channel_cat_backward(dy, [17, 31], stream=s)
    assert np.array_equal(a.to_numpy(bits=True), bits[:, :17])  # waits for the closed stream's last event
    assert np.array_equal(b.to_numpy(bits=True), bits[:, 17:])
    del a, b  # freed on the default stream after that event
    dev.synchronize()
    assert "runtime:" not in capfd.readouterr().err


@pytest.mark.whole_device
def test_memory_pressure_fails_clearly_and_recovers_with_nothing_lost(dev, rng):
    """Allocate 4 GiB arrays until the device refuses: the error names the size and the
    array, a canary allocated first keeps its bits, and after the arrays are dropped the
    same allocations succeed again."""
    canary_bits = random_bits(rng, (1 << 20,), "u32")
    canary = dev.to_device(canary_bits, dtype="u32")
    chunk = 4 << 30
    held = []
    with pytest.raises(DeviceOutOfMemory) as caught:
        for _ in range(1000):
            held.append(dev.empty((chunk,), "u8"))
    message = str(caught.value)
    assert f"cannot allocate {chunk:,} bytes (4.00 GiB) for a ({chunk},) u8 array" in message
    assert isinstance(caught.value, MemoryError) and len(held) >= 8
    count = len(held)
    held.clear()
    again = [dev.empty((chunk,), "u8") for _ in range(count)]  # all of it is there again
    again[-1].fill_bytes(0x5A)
    assert np.array_equal(canary.to_numpy(), canary_bits)
    again.clear()
    dev.synchronize()  # the frees are stream-ordered
    dev.memory_pool.trim()
    free, total = dev.memory_info()
    assert free > total // 2  # trimmed: the driver has the memory back for other allocators


# --- results in the caller's kind ----------------------------------------------------------


@pytest.mark.parametrize("dtype", ["bf16", "f32", "u8"])
def test_torch_in_torch_out(dev, torch, rng, dtype):
    dy, bits = torch_bits(torch, rng, (6400, 3 + 64 + 29), dtype)
    pieces = runtime.channel_cat_backward(dy, [3, 64, 29], 1)
    assert all(isinstance(p, torch.Tensor) for p in pieces)
    assert all(p.dtype == dy.dtype and p.device == dy.device and p.is_contiguous() for p in pieces)
    assert [tuple(p.shape) for p in pieces] == [(6400, 3), (6400, 64), (6400, 29)]
    torch.cuda.synchronize()
    for p, want in zip(pieces, np.split(bits, [3, 67], axis=1)):
        assert np.array_equal(host_bits(torch, p), want)
    y = runtime.channel_cat_forward(pieces, 1)
    assert isinstance(y, torch.Tensor) and y.dtype == dy.dtype and tuple(y.shape) == tuple(dy.shape)
    torch.cuda.synchronize()
    assert np.array_equal(host_bits(torch, y), bits)


def test_torch_results_on_a_side_stream(dev, torch, rng):
    """The results are torch's, allocated on the stream the op runs on: torch's current
    stream or another one the call names."""
    dy, bits = torch_bits(torch, rng, (4096, 96), "bf16")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    for trial in range(4):
        if trial % 2:
            with torch.cuda.stream(side):
                torch.cuda._sleep(50_000_000)
                pieces = runtime.channel_cat_backward(dy, [32, 64], 1, stream=side)
        else:  # named, while the current stream is the default one
            with torch.cuda.stream(side):
                torch.cuda._sleep(50_000_000)
            pieces = runtime.channel_cat_backward(dy, [32, 64], 1, stream=side)
        assert [_allocation_stream(torch, p.data_ptr()) for p in pieces] == [side.cuda_stream] * 2, trial
        side.synchronize()
        assert np.array_equal(host_bits(torch, pieces[0]), bits[:, :32])
        assert np.array_equal(host_bits(torch, pieces[1]), bits[:, 32:])
    default = runtime.channel_cat_backward(dy, [32, 64], 1)  # stream=None: the default stream
    with torch.cuda.stream(side):  # ... also while torch's current stream is another
        also_default = runtime.channel_cat_backward(dy, [32, 64], 1)
    streams = {_allocation_stream(torch, p.data_ptr()) for p in (*default, *also_default)}
    assert streams == {torch.cuda.default_stream().cuda_stream}


def _allocation_stream(torch, address: int) -> int:
    """The stream torch's caching allocator gave the block holding ``address`` to."""
    for segment in torch.cuda.memory_snapshot():
        if segment["address"] <= address < segment["address"] + segment["total_size"]:
            return segment["stream"]
    raise AssertionError(f"{address:#x} is not in torch's caching allocator")


def test_cupy_in_cupy_out(dev, cupy, rng):
    x = [cupy.asarray(random_bits(rng, (300, n), "i32").view(np.int32)) for n in (5, 17, 64)]
    y = runtime.channel_cat_forward(x, 1)
    assert isinstance(y, cupy.ndarray) and y.dtype == cupy.int32 and y.shape == (300, 86)
    assert cupy.array_equal(y, cupy.concatenate(x, axis=1))
    back = runtime.channel_cat_backward(y, [5, 17, 64], 1)
    assert all(isinstance(b, cupy.ndarray) for b in back)
    assert all(cupy.array_equal(b, a) for a, b in zip(x, back))
    with cupy.cuda.Stream() as s:  # CuPy's current stream, named
        back = runtime.channel_cat_backward(y, [5, 17, 64], 1, stream=runtime.Stream.from_handle(s.ptr, dev))
        s.synchronize()
    assert all(cupy.array_equal(b, a) for a, b in zip(x, back))


def test_device_arrays_and_foreign_arrays_get_device_arrays(dev, rng):
    bits = random_bits(rng, (100, 40), "f16")
    dy = dev.to_device(bits, dtype="f16")

    class Interface:  # a bare __cuda_array_interface__ (Numba's kind)
        def __init__(self, array):
            self.__cuda_array_interface__ = {
                "shape": array.shape, "typestr": "<f2", "data": (array.ptr, False), "version": 3,
            }  # fmt: skip

    for given in (dy, Interface(dy)):
        a, b = runtime.channel_cat_backward(given, [13, 27], 1)
        assert isinstance(a, runtime.DeviceArray) and a.dtype == "f16"
        assert np.array_equal(b.to_numpy(bits=True), bits[:, 13:])


@pytest.mark.parametrize("dtype", ["bf16"])  # fp8: torch 2.11's import of the capsule fails (SystemError)
def test_bf16_and_fp8_results_read_by_torch_and_cupy_through_dlpack(dev, torch, cupy, rng, dtype):
    bits = random_bits(rng, (64, 48), dtype)
    dy = dev.to_device(bits, dtype=dtype)
    a, b = runtime.channel_cat_backward(dy, [16, 32], 1)
    want = {"bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[dtype]
    t = torch.from_dlpack(b)
    assert t.dtype == want and tuple(t.shape) == (64, 32)
    assert np.array_equal(host_bits(torch, t), bits[:, 16:])
    try:
        c = cupy.from_dlpack(a)
    except (TypeError, NotImplementedError) as err:  # CuPy's own limit, not the export's
        pytest.skip(f"torch read it; CuPy {cupy.__version__} imports no {dtype} through DLPack: {err}")
    assert c.shape == (64, 16) and c.dtype.itemsize == bits.dtype.itemsize
    assert np.array_equal(cupy.asnumpy(c).view(bits.dtype), bits[:, :16])


# --- graphs --------------------------------------------------------------------------------


def test_allocating_ops_in_a_runtime_graph_replay_on_new_data(dev, rng):
    s = runtime.Stream(dev)
    shapes = [(512, 3), (512, 61), (512, 32)]
    xs = [dev.empty(shape, "bf16") for shape in shapes]
    for x in xs:
        x.copy_from_host(random_bits(rng, x.shape, "bf16"))
    y0 = runtime.channel_cat_forward(xs, 1, stream=s)  # both planned and loaded before the capture
    runtime.channel_cat_backward(y0, [3, 61, 32], 1, stream=s)
    s.synchronize()
    with runtime.Graph(s) as graph:
        y = runtime.channel_cat_forward(xs, 1, stream=s)  # an allocation node of the graph
        pieces = runtime.channel_cat_backward(y, [3, 61, 32], 1, stream=s)
    replay_on_new_data(rng, graph, s, xs, y, pieces, "bf16")


def test_allocating_ops_in_a_torch_graph_replay_on_new_data(dev, torch, rng):
    dy, _ = torch_bits(torch, rng, (2048, 96), "bf16")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up: planned and loaded before the capture
        runtime.channel_cat_backward(dy, [16, 16, 64], 1, stream=s)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        pieces = runtime.channel_cat_backward(dy, [16, 16, 64], 1, stream=torch.cuda.current_stream())
    assert all(isinstance(p, torch.Tensor) for p in pieces)
    for trial in range(3):
        new, bits = torch_bits(torch, rng, (2048, 96), "bf16")
        dy.copy_(new)
        graph.replay()
        torch.cuda.synchronize()
        for p, want in zip(pieces, np.split(bits, [16, 32], axis=1)):
            assert np.array_equal(host_bits(torch, p), want), trial


def test_arrays_dropped_during_captures_do_not_break_them(dev, torch):
    """A DeviceArray of the default stream dropped while torch captures (global mode, on
    its non-blocking stream) is freed at once, in relaxed capture mode, and the capture
    holds; dropped while a blocking runtime.Stream captures (where the default stream
    would join the capture), it is held back and freed when the capture ends."""
    pool = dev.memory_pool
    dropped = dev.empty((1 << 20,), "u8")
    dev.synchronize()
    used = pool.used_bytes
    x = torch.ones(1024, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        y = x * 2
        del dropped
    graph.replay()
    torch.cuda.synchronize()
    assert bool((y == 2).all()) and pool.deferred == 0
    assert pool.used_bytes <= used - (1 << 20)

    held = dev.empty((1 << 20,), "u8")
    blocking = runtime.Stream(dev)  # blocking: the legacy default stream waits for it
    kernel = ptxgen.ChannelCatBackward("u8", 128)
    fn = dev.load(kernel).function
    src, dst = dev.empty((64, 32), "u8"), dev.empty((64, 16), "u8")
    with runtime.Graph(blocking) as g:
        fn.launch(kernel.grid(64, 16), kernel.block, (src, dst, 16, 32, 8), stream=blocking)
        before = pool.deferred
        del held
        assert pool.deferred == before + 1
    assert pool.deferred == 0  # released as the capture ended
    g.launch()
    blocking.synchronize()
    g.close()
    blocking.close()


def _graph_memory_in_use(dev) -> int:
    """Bytes the device's graphs hold (graph allocations have a pool of their own)."""
    drv = runtime.driver()
    attr = drv.CUgraphMem_attribute.CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT
    return int(
        runtime.check("cuDeviceGetGraphMemAttribute", drv.cuDeviceGetGraphMemAttribute(dev.ordinal, attr))
    )


def test_graphs_own_what_they_allocate_and_give_it_back(dev, rng, capfd):
    """Captured again and again (each graph dropped while the next one captures), a
    graph's results stay valid while an array holds them, even once the graph is gone,
    and what graphs hold does not grow with the number of captures (the graphs' own
    pool keeps its granules, so it is compared after 4 captures and after 12 more)."""
    s = runtime.Stream(dev)
    bits = random_bits(rng, (256, 64), "f32")
    x = dev.to_device(bits, dtype="f32")
    runtime.channel_cat_backward(x, [16, 48], 1, stream=s)  # planned and loaded before any capture
    s.synchronize()

    def captures(n: int) -> int:
        kept = None
        for trial in range(n):
            with runtime.Graph(s) as graph:
                a, b = runtime.channel_cat_backward(x, [16, 48], 1, stream=s)
            graph.launch()
            s.synchronize()
            assert np.array_equal(a.to_numpy(bits=True), bits[:, :16]), trial
            assert np.array_equal(b.to_numpy(bits=True), bits[:, 16:]), trial
            kept = b
        del graph, a, b
        assert np.array_equal(kept.to_numpy(bits=True), bits[:, 16:])  # its graph is gone, it is not
        del kept
        dev.synchronize()
        return _graph_memory_in_use(dev)

    after_some = captures(4)
    after_more = captures(12)
    assert after_more <= after_some, (after_some, after_more)
    err = capfd.readouterr().err
    assert "runtime:" not in err and "Exception ignored" not in err, err
    s.close()


# --- threads ---------------------------------------------------------------------------------


def test_threads_allocate_and_free_on_their_own_streams(dev, rng):
    bits = random_bits(rng, (999, 64), "f32")
    dy = dev.to_device(bits, dtype="f32")
    failures = []

    def worker() -> None:
        try:
            with runtime.Stream(dev) as s:
                for i in range(300):
                    _a, b = runtime.channel_cat_backward(dy, [7, 57], 1, stream=s)
                    if i % 100 == 0:
                        s.synchronize()
                        assert np.array_equal(b.to_numpy(bits=True), bits[:, 7:])
        except Exception as err:  # reported below, with the thread's error
            failures.append(err)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
