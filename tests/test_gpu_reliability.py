"""What happens when things go wrong on a real GPU: a kernel fault leaves every later call
saying the context is unusable; a forked child gets a clear error, never a hang or crash."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import ROOT
from gpu_util import poison_value, random_bits

import ptxgen
import runtime

pytestmark = pytest.mark.gpu

FAULT = f"""
import json, sys
sys.path.insert(0, {str(ROOT)!r})
import ptxgen, runtime
ptx = '''.version 6.3
.target sm_75
.address_size 64
.visible .entry fault_entry_point(.param .u64 where)
{{
    .reg .u64 %where;
    .reg .u32 %value;
    ld.param.u64 %where, [where];
    mov.u32 %value, 7;
    st.global.u32 [%where], %value;
    ret;
}}
'''
k = ptxgen.PtxKernel("fault", ptx, ("where",), (ptxgen.Pointer("u32"),), 32)
dev = runtime.Device(0)
fn = dev.load(k).function
out = {{}}
fn.launch((1, 1, 1), k.block, (16,))  # an address no allocation holds
for step, action in (("synchronize", dev.synchronize), ("empty", lambda: dev.empty(4, "f32")),
                     ("load", lambda: dev.load(ptxgen.ChannelCatBackward("f32", 64)))):
    try:
        action()
        out[step] = "no error"
    except runtime.CudaError as err:
        out[step] = [err.name, err.sticky, "context of this process is now unusable" in str(err)]
print(json.dumps(out))
"""


def test_a_kernel_fault_makes_every_later_call_say_the_context_is_unusable():
    run = subprocess.run([sys.executable, "-c", FAULT], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["synchronize"] == ["CUDA_ERROR_ILLEGAL_ADDRESS", True, True]
    for step in ("empty", "load"):
        assert result[step][1:] == [True, True], (step, result[step])


def _run_in_fork(child) -> dict:
    """Fork; run ``child()`` there and send back its dict; never wait forever on it."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's atexit handlers
        os.close(read)
        try:
            payload = json.dumps(child())
        except BaseException as err:  # report anything, never hang the parent
            payload = json.dumps({"unexpected": f"{type(err).__name__}: {err}"})
        os.write(write, payload.encode())
        os._exit(0)
    os.close(write)
    ready, _, _ = select.select([read], [], [], 60)
    if not ready:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung")
    data = os.read(read, 1 << 16)
    os.close(read)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0, f"the child died: status {status}"
            return json.loads(data)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    pytest.fail("the forked child did not exit")


def test_a_forked_child_gets_a_clear_error(dev):
    k = ptxgen.ChannelCatBackward("f32", 128)
    fn = dev.load(k).function
    dy = dev.to_device(np.arange(64, dtype=np.float32).reshape(4, 16))
    dx = dev.empty((4, 8), "f32")
    fn.launch(k.grid(4, 8), k.block, (dy, dx, 8, 16, 0))
    dev.synchronize()

    def child() -> dict:
        out = {"available": runtime.is_available(), "reason": runtime.unavailable_reason()}
        for name, action in (
            ("device", lambda: runtime.Device(0)),
            ("launch", lambda: fn.launch(k.grid(4, 8), k.block, (dy, dx, 8, 16, 0))),
            ("copy", dx.to_numpy),
            ("load", lambda: dev.load(ptxgen.ChannelCatForward("f32", 128))),
        ):
            try:
                action()
                out[name] = "no error"
            except runtime.CudaUnavailable as err:
                out[name] = type(err).__name__
        del dy_child[:]  # drop the parent's arrays here: their finalizers must not touch CUDA
        import gc

        gc.collect()
        return out

    dy_child = [dy, dx]
    result = _run_in_fork(child)
    assert result == {
        "available": False,
        "reason": result["reason"],
        "device": "ForkedProcessError",
        "launch": "ForkedProcessError",
        "copy": "ForkedProcessError",
        "load": "ForkedProcessError",
    }, result
    assert "forked" in result["reason"] or "fork of one" in result["reason"]
    # the parent is untouched
    np.testing.assert_array_equal(dx.to_numpy(), dy.to_numpy()[:, :8])


# --- fuzzing: nothing a caller passes from Python crashes the process ----------------

FUZZ = f"""
import json, sys
sys.path.insert(0, {str(ROOT)!r})
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st
import ptxgen, runtime

dev = runtime.Device(0)
k = ptxgen.ChannelCatBackward("f32", 128)
fn = dev.load(k).function
dy, dx = dev.empty((4, 16), "f32"), dev.empty((4, 8), "f32")


class Odd:
    def __init__(self, cai):
        self.__cuda_array_interface__ = cai


weird = st.one_of(
    st.none(), st.booleans(), st.floats(allow_nan=True), st.text(max_size=4), st.binary(max_size=4),
    st.integers(-(1 << 70), 1 << 70), st.lists(st.integers(), max_size=4), st.tuples(st.integers(), st.integers()),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.builds(Odd, st.fixed_dictionaries({{"shape": st.lists(st.integers(-3, 5), max_size=3),
        "typestr": st.sampled_from(["<f4", "<f2", "|u1", "<V2", ">f4", "x"]),
        "data": st.tuples(st.integers(0, 1 << 20), st.booleans()), "version": st.integers(0, 4),
        "strides": st.none() | st.lists(st.integers(-8, 8), max_size=3)}})),
)
seen = {{"cases": 0, "refused": 0}}


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(slot=st.integers(0, 7), value=weird)
def fuzz(slot, value):
    grid, block, args, stream = k.grid(4, 8), k.block, [dy, dx, 8, 16, 0], None
    if slot < 5:
        if slot < 2 and isinstance(value, int):
            return  # int addresses are trusted (documented): a random one faults the GPU, not the host
        if slot < 2 and isinstance(value, Odd):
            # an exporter's address is trusted as an int's is: give it the real array's,
            # so the interface's other fields are fuzzed, not the GPU
            ptr, readonly = value.__cuda_array_interface__["data"]
            value.__cuda_array_interface__["data"] = ((dy, dx)[slot].ptr, readonly)
        args[slot] = value
    elif slot == 5:
        grid = value
    elif slot == 6:
        block = value
    else:
        stream = value
    seen["cases"] += 1
    try:
        fn.launch(grid, block, tuple(args), stream=stream)
    except (TypeError, ValueError, OverflowError, BufferError) as err:
        assert str(err), "an error must say what is wrong"
        seen["refused"] += 1
    prepared = fn.prepare(k.grid(4, 8), k.block)
    try:
        prepared(*args)
    except (TypeError, ValueError, OverflowError, BufferError):
        pass


fuzz()
dev.synchronize()
print(json.dumps(seen))
"""


def test_fuzzed_arguments_never_crash_the_process(record_property):
    run = subprocess.run([sys.executable, "-c", FUZZ], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"exit {run.returncode}: {run.stderr[-3000:]}"
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    record_property("fuzz_cases", seen["cases"])  # scripts/gpu_check.py keeps these figures
    record_property("fuzz_refused_with_an_error", seen["refused"])
    assert seen["cases"] > 1000 and seen["refused"] > 500, seen


# --- threads ---------------------------------------------------------------------------


def test_sixteen_threads_launch_and_run_ops_concurrently(dev, record_property):
    import threading

    rng = np.random.default_rng()
    dtypes = ["f32", "u8", "bf16", "f64"]
    shared = runtime.Stream(dev)
    errors: list[str] = []
    counts = [0] * 16

    def worker(t: int) -> None:
        try:
            dtype = dtypes[t % 4]
            stream = shared if t % 2 else runtime.Stream(dev)
            bits = random_bits(rng, (33, 48), dtype)
            dy = dev.to_device(bits, dtype=dtype)
            k = ptxgen.ChannelCatBackward(dtype, 64 if t % 3 else 128)
            fn = dev.load(k).function
            dx = dev.empty((33, 17), dtype)
            for i in range(2000):
                if i % 2:
                    fn.launch(k.grid(33, 17), k.block, (dy, dx, 17, 48, 5), stream=stream)
                else:
                    a, b = runtime.channel_cat_backward(dy, [20, 28], 1, stream=stream)
                    if i % 500 == 0:
                        stream.synchronize()
                        assert np.array_equal(a.to_numpy(bits=True), bits[:, :20])
                        assert np.array_equal(b.to_numpy(bits=True), bits[:, 20:])
                counts[t] += 1
            stream.synchronize()
            assert np.array_equal(dx.to_numpy(bits=True), bits[:, 5:22])
        except Exception as err:  # reported by the main thread
            errors.append(f"thread {t}: {type(err).__name__}: {err}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(16)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    assert not any(th.is_alive() for th in threads), "a thread is stuck: deadlock"
    assert not errors, errors[:3]
    assert counts == [2000] * 16
    record_property("threads", 16)
    record_property("calls_per_thread", 2000)


# --- leaks -------------------------------------------------------------------------------


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.whole_device
def test_load_unload_cycles_and_launches_leak_nothing(dev, record_property):
    """Three batches each of 4,000 load/unload cycles and of 400,000 launches.

    Device memory must come back within 1 MB after every batch. Host RSS is noisier
    (malloc arenas and the driver's own pools grow in steps, now and then by a few MB),
    so one batch of each kind must end within 256 KB of where it began: a real leak
    grows in every batch, and one byte per launch is 400 KB a batch, 64 bytes per
    cycle 256 KB. Every batch's growth is recorded.
    """
    import gc

    k = ptxgen.ChannelCatBackward("f32", 128)
    other = ptxgen.ChannelCatForward("u16", 96)

    def cycles(n: int) -> None:
        for i in range(n):
            module = dev.load(k if i % 2 else other)
            _ = module.function
            module.close()

    def batches(what: str, count: int, run) -> None:
        growth = []
        for batch in range(3):
            gc.collect()
            free_before, rss_before = dev.memory_info()[0], _rss_bytes()
            run()
            gc.collect()
            free_after, rss_after = dev.memory_info()[0], _rss_bytes()
            growth.append(rss_after - rss_before)
            record_property(f"{what}_{batch}_device_free_bytes", f"{free_before} -> {free_after}")
            assert abs(free_after - free_before) <= 1 << 20, (what, batch, free_before, free_after)
        record_property(what, f"3 batches of {count}")
        record_property(f"{what}_host_rss_growth_bytes", growth)
        assert min(growth) <= 256 << 10, (what, growth)

    cycles(200)  # warm-up: caches, the JIT's disk cache, allocator pools
    batches("load_unload_cycles", 4_000, lambda: (cycles(4_000), dev.synchronize()))

    fn = dev.load(k).function
    dy, dx = dev.empty((64, 32), "f32"), dev.empty((64, 16), "f32")
    args, grid, block = (dy, dx, 16, 32, 8), k.grid(64, 16), k.block
    stream = runtime.Stream(dev)
    for _ in range(20_000):
        fn.launch(grid, block, args, stream=stream)
    stream.synchronize()

    def launches() -> None:
        for i in range(400_000):
            fn.launch(grid, block, args, stream=stream)
            if i % 100_000 == 0:
                stream.synchronize()  # keep the queue short
        stream.synchronize()

    batches("launches", 400_000, launches)


# --- two GPUs ---------------------------------------------------------------------------


def _device_count() -> int:
    return runtime.check("cuDeviceGetCount", runtime.driver().cuDeviceGetCount())


def test_two_gpus_in_one_process(dev):
    if _device_count() < 2:
        pytest.skip("one GPU here: run on the nvidia-h200-x2 machine")
    d0, d1 = runtime.Device(0), runtime.Device(1)
    assert d0 is not d1 and d1.ordinal == 1
    k = ptxgen.ChannelCatBackward("f32", 128)
    f0, f1 = d0.load(k).function, d1.load(k).function
    assert f0 is not f1 and f0.device is d0 and f1.device is d1  # the module cache is per device
    rng = np.random.default_rng()
    bits = random_bits(rng, (50, 40), "f32")
    dy1 = d1.to_device(bits, dtype="f32")
    dx1 = d1.empty((50, 24), "f32").fill_bytes(0xA5)
    f1.launch(k.grid(50, 24), k.block, (dy1, dx1, 24, 40, 16))
    assert np.array_equal(dx1.to_numpy(bits=True), bits[:, 16:])
    # the high-level op runs where its arrays are
    a, b = runtime.channel_cat_backward(dy1, [16, 24], 1)
    assert a.device is d1 and np.array_equal(b.to_numpy(bits=True), bits[:, 16:])

    class Interface:  # a bare __cuda_array_interface__: the driver says which GPU it is on
        def __init__(self, array):
            self.__cuda_array_interface__ = {
                "shape": array.shape, "typestr": "<f4", "data": (array.ptr, False), "version": 3,
            }  # fmt: skip

    d0.synchronize()  # device 0's context current on this thread
    a, b = runtime.channel_cat_backward(Interface(dy1), [16, 24], 1)
    assert a.device is d1 and np.array_equal(a.to_numpy(bits=True), bits[:, :16])
    # int addresses checked by the driver: device 1's memory launches on device 1 only
    old = runtime.check_int_pointers(True)
    try:
        dx1.fill_bytes(0xA5)
        f1.launch(k.grid(50, 24), k.block, (dy1.ptr, dx1.ptr, 24, 40, 16))
        d1.synchronize()
        assert np.array_equal(dx1.to_numpy(bits=True), bits[:, 16:])
        with pytest.raises(ValueError, match="is memory of device 1, the kernel runs on device 0"):
            f0.launch(k.grid(50, 24), k.block, (dy1.ptr, dx1.ptr, 24, 40, 16))
    finally:
        runtime.check_int_pointers(old)
    dx0 = d0.empty((50, 24), "f32").fill_bytes(0x5A)
    with pytest.raises(ValueError, match="lives on device 1, the kernel runs on device 0"):
        f0.launch(k.grid(50, 24), k.block, (dy1, dx0, 24, 40, 16))
    with pytest.raises(ValueError, match="different devices"):
        runtime.channel_cat_backward(dy1, [16, 24], 1, out=[d0.empty((50, 16), "f32"), dx1])
    assert (dx0.to_numpy(bits=True) == poison_value(0x5A, "f32")).all()


def test_two_gpus_through_the_c_lane_and_the_compiled_launch(dev):
    """The ops' common call remembered on one GPU and then made on the other (the C
    lane keeps a launch function per device), launched while the other GPU's context is current (the compiled
    call fails there and the Python path launches with the right context), and refused
    when its outputs live on two GPUs; torch tensors on cuda:1 through Function.launch."""
    if _device_count() < 2:
        pytest.skip("one GPU here: run on the nvidia-h200-x2 machine")
    d0, d1 = runtime.Device(0), runtime.Device(1)
    rng = np.random.default_rng()
    bits = random_bits(rng, (64, 40), "f32")
    for first, second in ((d0, d1), (d1, d0)):
        for d in (first, second, first, second):  # planned, then remembered: the C path's
            dy = d.to_device(bits, dtype="f32")
            out = [d.empty((64, 16), "f32").fill_bytes(0xA5), d.empty((64, 24), "f32").fill_bytes(0xA5)]
            other = d0 if d is d1 else d1
            other.synchronize()  # the other GPU's context current on this thread
            for _ in range(2):
                runtime.channel_cat_backward(dy, [16, 24], 1, out=out)
            y = d.empty((64, 40), "f32").fill_bytes(0xA5)
            runtime.channel_cat_forward(out, 1, out=y)
            d.synchronize()
            assert np.array_equal(out[0].to_numpy(bits=True), bits[:, :16])
            assert np.array_equal(out[1].to_numpy(bits=True), bits[:, 16:])
            assert np.array_equal(y.to_numpy(bits=True), bits)
    dy1 = d1.to_device(bits, dtype="f32")
    mixed = [d1.empty((64, 16), "f32").fill_bytes(0x5A), d0.empty((64, 24), "f32").fill_bytes(0x5A)]
    with pytest.raises(ValueError, match="different devices"):
        runtime.channel_cat_backward(dy1, [16, 24], 1, out=mixed)
    for piece in mixed:
        assert (piece.to_numpy(bits=True) == poison_value(0x5A, "f32")).all()

    torch = pytest.importorskip("torch")
    k = ptxgen.ChannelCatBackward("f32", 128)
    f1 = d1.load(k).function
    tdy = torch.randn(64, 40, device="cuda:1")
    tdx = torch.full((64, 24), float("nan"), device="cuda:1")
    d0.synchronize()
    with torch.cuda.device(1):
        f1.launch(k.grid(64, 24), k.block, (tdy, tdx, 24, 40, 16), stream=torch.cuda.current_stream(1))
        torch.cuda.synchronize(1)
    assert torch.equal(tdx, tdy[:, 16:])
    ta, tb = torch.empty((64, 16), device="cuda:1"), torch.empty((64, 24), device="cuda:1")
    for _ in range(3):
        runtime.channel_cat_backward(tdy, [16, 24], 1, out=[ta, tb], stream=torch.cuda.current_stream(1))
    torch.cuda.synchronize(1)
    assert torch.equal(ta, tdy[:, :16]) and torch.equal(tb, tdy[:, 16:])
    tdx.fill_(float("nan"))
    with pytest.raises(ValueError, match=r"device 1.*device 0"):
        d0.load(k).function.launch(k.grid(64, 24), k.block, (tdy, tdx, 24, 40, 16))
    torch.cuda.synchronize(1)
    assert torch.isnan(tdx).all()  # refused before anything was launched
