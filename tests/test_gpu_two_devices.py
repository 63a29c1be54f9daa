"""The ops, the pool and graphs on a second GPU (issue 27): results on the device of the
inputs, never on the current one; inputs on two devices refused before anything runs;
strided and channels_last arrays, captured graphs and threads on both devices at once.
Every result is checked element for element against the host's copy of fresh random bits.

Each test needs two GPUs and skips on one, naming the machine to run it on. The two-GPU
tests that came before these are in tests/test_gpu_reliability.py.
"""

from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest
from gpu_util import poison_value, random_bits, replay_on_new_data

import runtime

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def two(dev):
    """Device(0) and Device(1), or the test is skipped saying where it runs."""
    count = runtime.check("cuDeviceGetCount", runtime.driver().cuDeviceGetCount())
    if count < 2:
        pytest.skip(f"{count} GPU here; these tests need two: run them on the nvidia-h200-x2 machine")
    return runtime.Device(0), runtime.Device(1)


@pytest.fixture
def rng():
    return np.random.default_rng()


def test_the_pool_and_the_allocating_ops_make_results_on_the_inputs_device(two, rng):
    d0, d1 = two
    bits = random_bits(rng, (333, 3 + 61 + 32), "bf16")
    dy = d1.to_device(bits, dtype="bf16")
    d0.synchronize()  # device 0's context current on this thread: the results must not go there
    pieces = runtime.channel_cat_backward(dy, [3, 61, 32], 1)
    assert all(p.device is d1 for p in pieces)
    assert d1.memory_pool.used_bytes >= sum(p.nbytes for p in pieces)
    for p, after in itertools.pairwise(pieces):  # in one allocation of device 1's pool
        assert after.address == p.address + -(-p.nbytes // 256) * 256
    y = runtime.channel_cat_forward(pieces, 1)
    assert y.device is d1
    for p, want in zip(pieces, np.split(bits, [3, 64], axis=1)):
        assert np.array_equal(p.to_numpy(bits=True), want)
    assert np.array_equal(y.to_numpy(bits=True), bits)
    empty = d1.empty((1 << 20,), "u8")  # the pool of device 1, freed there without waiting
    assert empty.device is d1
    empty.close()


def test_torch_tensors_on_cuda_1_while_torch_is_on_device_0(two, torch, rng):
    bits = random_bits(rng, (4096, 96), "f32")
    dy = torch.from_numpy(bits.view(np.float32)).to("cuda:1")
    torch.cuda.set_device(0)
    pieces = runtime.channel_cat_backward(dy, [32, 64], 1)
    assert all(p.device == dy.device for p in pieces)
    y = runtime.channel_cat_forward(pieces, 1)
    assert y.device == dy.device
    torch.cuda.synchronize(1)
    bits_of = lambda t: t.view(torch.int32)  # noqa: E731 (random bits hold NaNs: compare bits)
    assert torch.equal(bits_of(y), bits_of(dy)) and torch.equal(bits_of(pieces[1]), bits_of(dy[:, 32:]))


def test_cupy_arrays_on_device_1_under_device_0(two, cupy, rng):
    bits = [random_bits(rng, (300, n), "i32").view(np.int32) for n in (5, 17, 64)]
    with cupy.cuda.Device(1):
        xs = [cupy.asarray(b) for b in bits]
    with cupy.cuda.Device(0):
        y = runtime.channel_cat_forward(xs, 1)
        back = runtime.channel_cat_backward(y, [5, 17, 64], 1)
    assert isinstance(y, cupy.ndarray) and y.device.id == 1
    assert all(b.device.id == 1 for b in back)
    with cupy.cuda.Device(1):
        cupy.cuda.Device(1).synchronize()
        assert np.array_equal(cupy.asnumpy(y), np.concatenate(bits, axis=1))
        assert all(np.array_equal(cupy.asnumpy(b), want) for b, want in zip(back, bits))


def test_inputs_on_two_devices_are_refused_before_anything_runs_naming_both(two, rng):
    d0, d1 = two
    x0 = d0.to_device(random_bits(rng, (64, 16), "f32"), dtype="f32")
    x1 = d1.to_device(random_bits(rng, (64, 24), "f32"), dtype="f32")
    y = d1.empty((64, 40), "f32").fill_bytes(0x5A)
    used = d1.memory_pool.used_bytes
    with pytest.raises(ValueError, match=r"xs\[0\] on device 0, xs\[1\] on device 1"):
        runtime.channel_cat_forward([x0, x1], 1)
    with pytest.raises(ValueError, match="different devices"):
        runtime.channel_cat_forward([x0, x1], 1, out=y)
    assert d1.memory_pool.used_bytes == used  # nothing allocated
    assert (y.to_numpy(bits=True) == poison_value(0x5A, "f32")).all()  # nothing written


def test_channels_last_and_permuted_arrays_on_device_1(two, torch, rng):
    bits = random_bits(rng, (2, 3 + 45 + 16, 20, 20), "bf16")
    wide = torch.from_numpy(bits).to("cuda:1").view(torch.bfloat16)
    wide = wide.contiguous(memory_format=torch.channels_last)
    torch.cuda.set_device(0)
    pieces = runtime.channel_cat_backward(wide, [3, 45, 16], 1)
    assert all(p.device == wide.device and p.is_contiguous(memory_format=torch.channels_last) for p in pieces)
    y = runtime.channel_cat_forward(pieces, 1)
    assert y.device == wide.device and y.is_contiguous(memory_format=torch.channels_last)
    torch.cuda.synchronize(1)
    assert torch.equal(y.view(torch.int16), wide.view(torch.int16))
    for p, q in zip(pieces, wide.split([3, 45, 16], 1)):
        assert torch.equal(p.view(torch.int16), q.view(torch.int16))
    # a transposed dense array (memory order (1, 0)) with out= arrays in the same order
    t = torch.from_numpy(random_bits(rng, (96, 500), "f32").view(np.float32)).to("cuda:1").t()
    outs = [torch.empty((500, 32), device="cuda:1").t().contiguous().t(),
            torch.empty((500, 64), device="cuda:1").t().contiguous().t()]  # fmt: skip
    runtime.channel_cat_backward(t, [32, 64], 1, out=outs)
    torch.cuda.synchronize(1)
    assert torch.equal(outs[0].view(torch.int32), t[:, :32].view(torch.int32))  # NaNs: compare bits
    assert torch.equal(outs[1].view(torch.int32), t[:, 32:].view(torch.int32))


def test_stepped_and_channels_last_calls_repeated_on_device_1(two, torch, rng):
    """The same kinds of call three times on device 1 while torch is on device 0: the
    first takes the Python path, the later ones (where the extension is built) the C
    path of the remembered route, whose launches are kept per device."""
    torch.cuda.set_device(0)
    for trial in range(3):
        bits = random_bits(rng, (300, 2 * 40), "bf16")
        dy = torch.from_numpy(bits).to("cuda:1").view(torch.bfloat16)[:, ::2]  # every other column
        pieces = runtime.channel_cat_backward(dy, [7, 33], 1)
        cl = torch.from_numpy(random_bits(rng, (2, 40, 6, 6), "bf16")).to("cuda:1").view(torch.bfloat16)
        cl = cl.contiguous(memory_format=torch.channels_last)
        parts = runtime.channel_cat_backward(cl, [7, 33], 1)
        y = runtime.channel_cat_forward(parts, 1)
        assert all(p.device == dy.device for p in (*pieces, *parts, y)), trial
        torch.cuda.synchronize(1)
        for p, q in zip(pieces, dy.split([7, 33], 1)):
            assert torch.equal(p.view(torch.int16), q.view(torch.int16)), trial
        assert y.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(y.view(torch.int16), cl.view(torch.int16)), trial


def test_a_graph_captured_on_device_1_replays_on_new_data(two, rng):
    d0, d1 = two
    s = runtime.Stream(d1)
    shapes = [(512, 3), (512, 61), (512, 32)]
    xs = [d1.empty(shape, "bf16") for shape in shapes]
    for x in xs:
        x.copy_from_host(random_bits(rng, x.shape, "bf16"))
    y0 = runtime.channel_cat_forward(xs, 1, stream=s)  # planned and loaded before the capture
    runtime.channel_cat_backward(y0, [3, 61, 32], 1, stream=s)
    s.synchronize()
    d0.synchronize()  # device 0's context current: the capture is device 1's all the same
    with runtime.Graph(s) as graph:
        y = runtime.channel_cat_forward(xs, 1, stream=s)
        pieces = runtime.channel_cat_backward(y, [3, 61, 32], 1, stream=s)
    assert y.device is d1 and all(p.device is d1 for p in pieces)
    replay_on_new_data(rng, graph, s, xs, y, pieces, "bf16")
    graph.close()
    s.close()


def test_threads_run_ops_on_both_devices_at_once(two, rng):
    """8 threads x 500 ops, each thread on its own stream of one device, half of them on
    each; every 50th result of every thread checked, and every thread's last."""
    devices = two
    bits = random_bits(rng, (999, 64), "f32")
    inputs = [d.to_device(bits, dtype="f32") for d in devices]
    failures: list[BaseException] = []

    def worker(index: int) -> None:
        device, dy = devices[index % 2], inputs[index % 2]
        try:
            with runtime.Stream(device) as s:
                for i in range(500):
                    a, b = runtime.channel_cat_backward(dy, [7, 57], 1, stream=s)
                    y = runtime.channel_cat_forward([a, b], 1, stream=s)
                    if i % 50 == 0 or i == 499:
                        s.synchronize()
                        assert a.device is device and y.device is device
                        assert np.array_equal(b.to_numpy(bits=True), bits[:, 7:]), (index, i)
                        assert np.array_equal(y.to_numpy(bits=True), bits), (index, i)
        except BaseException as err:  # reported below with the thread's error
            failures.append(err)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
