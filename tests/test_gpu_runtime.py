"""The runtime on a real GPU: devices, modules, launches, errors, memory, streams."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from conftest import FILL_PTX, hand_written_kernel
from gpu_util import poison_value, random_bits

import ptxgen
import runtime

pytestmark = pytest.mark.gpu

K = ptxgen.ChannelCatBackward("f32", 128)


def test_device_properties(dev):
    assert dev is runtime.Device(0)
    major, minor = dev.compute_capability
    assert dev.arch == f"sm_{major}{minor}"
    assert dev.name and dev.total_memory > 1 << 30
    assert dev.driver_version >= (12, 0)
    assert "Device 0" in repr(dev)


def test_device_out_of_range_is_explained(dev):
    count = runtime.check("cuDeviceGetCount", runtime.driver().cuDeviceGetCount())
    with pytest.raises(ValueError, match=f"no CUDA device {count + 4}: this machine has {count} GPU"):
        runtime.Device(count + 4)
    with pytest.raises(TypeError, match="ordinal must be an int"):
        runtime.Device("0")


def test_modules_are_cached_by_content_hash(dev):
    a = dev.load(ptxgen.ChannelCatBackward("f32", 128))
    b = dev.load(ptxgen.ChannelCatBackward("f32", 128))
    assert a is b and a.function is b.function
    assert dev.load(ptxgen.ChannelCatBackward("f32", 128, inline=False)) is not a
    assert 0 < a.function.num_regs <= 32 and a.function.max_threads_per_block >= 128


def test_kernels_of_one_source_keep_their_own_launch_checks(dev):
    """The row gather beside a narrow chunk emits the same PTX for every set of wide-chunk
    flags, and each set has its own footprint check: a module cached for one kernel must
    not check another's launches (a concat was refused after another had loaded it)."""
    from ptxgen.kernels import FastcatTile

    kw = dict(
        direction="forward", chunks=3, granule=1, unroll=1, block=64, loader="cp.async", row_gather=True
    )
    first = FastcatTile(wide_chunks=(True, False, True), **kw)
    second = FastcatTile(wide_chunks=(False, True, True), **kw)
    assert first.content_hash == second.content_hash and first.id != second.id
    a, b = dev.load(first), dev.load(second)
    assert a is not b and a.kernel is first and b.kernel is second
    rows, widths = 37, (5, 20, 30)  # chunk 0 narrow: the first kernel's check refuses it
    pitch = sum(widths)
    rng = np.random.default_rng()
    pieces = [rng.integers(0, 256, (rows, w), dtype=np.uint8) for w in widths]
    y = dev.empty(rows * pitch, "u8").fill_bytes(0xA5)
    xs = [dev.to_device(p.reshape(-1)) for p in pieces]
    args = [y, rows * pitch, pitch, rows]
    for k, w in enumerate(widths):
        args += [xs[k], sum(widths[:k]), w]
    names = second.arg_names
    assert names[:4] == ("row_ptr", "row_bytes", "row_pitch", "rows"), names
    b.function.launch(second.grid(rows, pitch), second.block, tuple(args))
    assert (y.to_numpy().reshape(rows, pitch) == np.concatenate(pieces, axis=1)).all()
    with pytest.raises(Exception, match="built with wide_chunks for chunk 0"):
        a.function.launch(first.grid(rows, pitch), first.block, tuple(args))


def test_hand_written_kernel_loads_and_runs(dev):
    k = hand_written_kernel()
    out = dev.empty(1000, "u32").fill_bytes(0)
    dev.load(k).function.launch((-(-1000 // 64), 1, 1), k.block, (out, 1000, 0xC0FFEE))
    assert (out.to_numpy() == 0xC0FFEE).all()


def test_arg_types_that_disagree_with_the_ptx_are_refused(dev):
    k = hand_written_kernel(arg_types=(ptxgen.Pointer("u32"), ptxgen.Scalar("u64"), ptxgen.Scalar("u32")))
    with pytest.raises(TypeError, match=r"parameter 1 \(n\) is 4 bytes in the PTX, but arg_types says u64"):
        _ = dev.load(k).function
    k2 = hand_written_kernel(arg_names=("out", "n"), arg_types=(ptxgen.Pointer("u32"), ptxgen.Scalar("u32")))
    with pytest.raises(
        TypeError, match=r"declares (3 parameters, arg_types lists 2|more than the 2 parameters)"
    ):
        _ = dev.load(k2).function


def test_bad_ptx_raises_with_the_jit_log_and_the_lines(dev):
    broken = hand_written_kernel(ptx=FILL_PTX.replace("mad.wide.u32", "mad.wide.q32"))
    with pytest.raises(runtime.PtxLoadError) as info:
        dev.load(broken)
    err = info.value
    assert err.kernel_id == "fill__u32__64" and err.target == "sm_75"
    assert err.error_log and "mad.wide.q32" in err.ptx_lines
    assert "cuModuleLoadDataEx failed" in str(err) and "JIT error log" in str(err)


def test_target_newer_than_the_device_is_refused_before_the_driver(dev):
    newer = next(t for t in ptxgen.TARGETS if ptxgen.targets.target_capability(t) > dev.compute_capability)
    with pytest.raises(ValueError, match=rf"targets {newer}, which .* cannot run"):
        dev.load(ptxgen.ChannelCatBackward("f32", 128, target=newer))


def test_ptx_isa_newer_than_the_driver_is_refused(dev):
    newest = max(ptxgen.PTX_ISA_CUDA, key=lambda v: tuple(map(int, v.split("."))))
    needed = ptxgen.PTX_ISA_CUDA[newest]
    if needed <= dev.driver_version:
        pytest.skip(f"this driver loads PTX ISA {newest}")
    k = hand_written_kernel(ptx=FILL_PTX.replace(".version 6.3", f".version {newest}"))
    with pytest.raises(ValueError, match=f"needs a CUDA {needed[0]}.{needed[1]} driver or newer"):
        dev.load(k)


def test_not_a_kernel_is_refused(dev):
    with pytest.raises(TypeError, match=r"is not a usable ptxgen\.Kernel: missing name"):
        dev.load("channel_cat_backward")


# --- bad arguments launch nothing and leave the output untouched ---------------------


class ReadOnlyView:
    def __init__(self, array):
        cai = dict(array.__cuda_array_interface__)
        cai["data"] = (array.ptr, True)
        self.__cuda_array_interface__ = cai


@pytest.fixture
def launch_setup(dev):
    rng = np.random.default_rng()
    dy = dev.to_device(random_bits(rng, (8, 32), "f32"), dtype="f32")
    dx = dev.empty((8, 16), "f32").fill_bytes(0xA5)
    wrong = dev.empty((8, 16), "f16")
    yield dev.load(K).function, dy, dx, wrong
    dev.synchronize()
    assert (dx.to_numpy(bits=True) == poison_value(0xA5, "f32")).all(), "a refused launch wrote to dx"


BAD_LAUNCHES = {
    "f16 array for f32": (lambda dy, dx, w: ((dy, w, 16, 32, 0), {}), TypeError, "got a DeviceArray of f16"),
    "host array": (lambda dy, dx, w: ((np.zeros((8, 32), np.float32), dx, 16, 32, 0), {}), TypeError, "host (CPU)"),
    "i32 overflow": (lambda dy, dx, w: ((dy, dx, 16, 2**31, 0), {}), ValueError, "= 2147483648 is out of range"),
    "negative": (lambda dy, dx, w: ((dy, dx, 16, 32, -1), {}), ValueError, "= -1 is out of range"),
    "bool": (lambda dy, dx, w: ((dy, dx, True, 32, 0), {}), TypeError, "not bool"),
    "str": (lambda dy, dx, w: ((dy, dx, "16", 32, 0), {}), TypeError, "not str"),
    "missing": (lambda dy, dx, w: ((dy, dx, 16, 32), {}), TypeError, "missing 'chunk_offset'"),
    "too many": (lambda dy, dx, w: ((dy, dx, 16, 32, 0, 0), {}), TypeError, "1 too many"),
    "read-only output": (lambda dy, dx, w: ((dy, ReadOnlyView(dx), 16, 32, 0), {}), ValueError, "read-only"),
    "wrong block": (lambda dy, dx, w: ((dy, dx, 16, 32, 0), {"block": (64, 1, 1)}), ValueError, "built for block"),
    "grid too big": (lambda dy, dx, w: ((dy, dx, 16, 32, 0), {"grid": (2**31, 1, 1)}), ValueError, "outside 1.."),
    "grid zero": (lambda dy, dx, w: ((dy, dx, 16, 32, 0), {"grid": 0}), ValueError, "outside 1.."),
    "bad stream": (lambda dy, dx, w: ((dy, dx, 16, 32, 0), {"stream": "fast"}), TypeError, "expected a runtime.Stream"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD_LAUNCHES)
def test_bad_launch_launches_nothing(launch_setup, case):
    fn, dy, dx, wrong = launch_setup
    make, error, message = BAD_LAUNCHES[case]
    args, overrides = make(dy, dx, wrong)
    kwargs = {"grid": K.grid(8, 16), "block": K.block, **overrides}
    grid, block = kwargs.pop("grid"), kwargs.pop("block")
    with pytest.raises(error) as info:
        fn.launch(grid, block, args, **kwargs)
    assert message in str(info.value)


def test_closed_array_and_closed_module_cannot_launch(dev):
    k = ptxgen.ChannelCatBackward("f32", 64)
    module = dev.load(k)
    fn = module.function
    dy, dx = dev.empty((2, 4), "f32"), dev.empty((2, 4), "f32")
    dx.close()
    with pytest.raises(ValueError, match="the DeviceArray is closed"):
        fn.launch(k.grid(2, 4), k.block, (dy, dx, 4, 4, 0))
    module.close()
    module.close()  # idempotent
    with pytest.raises(ValueError, match="its module is closed"):
        fn.launch(k.grid(2, 4), k.block, (dy, dy, 4, 4, 0))
    assert dev.load(k) is not module  # a fresh load after close


# --- memory, streams, events, threads -----------------------------------------------


@pytest.mark.parametrize("dtype", list(ptxgen.DTYPES))
def test_device_array_round_trip(dev, dtype):
    host = random_bits(np.random.default_rng(), (3, 5, 7), dtype)
    arr = dev.to_device(host, dtype=dtype)
    assert arr.shape == (3, 5, 7) and arr.dtype == dtype and arr.nbytes == host.nbytes
    np.testing.assert_array_equal(arr.to_numpy(bits=True), host)
    assert arr.__cuda_array_interface__["data"] == (arr.ptr, False)
    assert arr.__dlpack_device__() == (2, dev.ordinal)


@pytest.mark.whole_device
def test_memory_is_freed_exactly_once(dev):
    """Counted in the pool's live allocations: freed memory stays in the pool for the
    next array (its release threshold keeps it), so the device's free memory does not
    tell; trimmed, the driver has it back."""
    pool = dev.memory_pool
    dev.synchronize()
    used_before = pool.used_bytes
    arrays = [dev.empty(64 << 20, "u8") for _ in range(4)]  # 256 MiB
    assert pool.used_bytes >= used_before + (256 << 20)
    arrays[0].close()
    arrays[0].close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        _ = arrays[0].ptr
    del arrays  # the rest go with garbage collection
    import gc

    gc.collect()
    dev.synchronize()  # the frees are stream-ordered: done once the stream is
    assert pool.used_bytes <= used_before
    free_before_trim, _ = dev.memory_info()
    pool.trim()
    assert dev.memory_info()[0] >= free_before_trim


def test_empty_and_scalar_arrays(dev):
    a = dev.empty((0, 5), "f32")
    assert a.nbytes == 0 and a.to_numpy().shape == (0, 5) and len(a) == 0
    a.close()
    s = dev.to_device(np.float64(2.5))
    assert s.shape == () and s.to_numpy() == 2.5
    with pytest.raises(TypeError, match="0-d"):
        len(s)


def test_to_device_rejects_size_mismatch(dev):
    with pytest.raises(ValueError, match=r"cannot store float32 \(4 bytes\) as f16"):
        dev.to_device(np.zeros(3, np.float32), dtype="f16")


def test_streams_and_events(dev):
    k = ptxgen.ChannelCatForward("f32", 256)
    x = dev.to_device(np.arange(4096, dtype=np.float32).reshape(64, 64))
    y = dev.empty((64, 128), "f32").fill_bytes(0)
    with runtime.Stream(dev, non_blocking=True) as s:
        start, end = runtime.Event(dev), runtime.Event(dev)
        start.record(s)
        dev.load(k).function.launch(k.grid(64, 64), k.block, (x, y, 64, 128, 64), stream=s)
        end.record(s)
        s.synchronize()
        assert start.elapsed_ms(end) >= 0
    np.testing.assert_array_equal(y.to_numpy()[:, 64:], x.to_numpy())
    borrowed = runtime.Stream.from_handle(0, dev)
    borrowed.close()  # does not destroy the default stream
    assert "closed" in repr(borrowed)


def test_any_thread_may_launch(dev):
    k = ptxgen.ChannelCatBackward("i32", 64)
    fn = dev.load(k).function
    host = np.arange(40 * 10, dtype=np.int32).reshape(40, 10)
    dy = dev.to_device(host)
    outs = [dev.empty((40, 5), "i32").fill_bytes(0xFF) for _ in range(8)]
    errors = []

    def work(out):
        try:
            for _ in range(20):
                fn.launch(k.grid(40, 5), k.block, (dy, out, 5, 10, 3))
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(o,)) for o in outs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    dev.synchronize()
    for out in outs:
        np.testing.assert_array_equal(out.to_numpy(), host[:, 3:8])


def test_launch_script_verifies(dev):
    import subprocess
    import sys

    from conftest import ROOT

    for extra in (
        [],
        ["--dtype", "bf16", "--chunks", "3,17,12", "--block-size", "32", "--n-spatial", "1001"],
    ):
        out = subprocess.run(
            [sys.executable, "scripts/launch_channel_cat_backward.py", *extra],
            cwd=ROOT, capture_output=True, text=True,
        )  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr
        assert "all chunks match numpy" in out.stdout


def test_cuda_bindings_stream_objects_are_accepted(dev):
    from runtime.stream import stream_handle

    with runtime.Stream(dev) as s:
        assert stream_handle(runtime.driver().CUstream(s.handle)) == s.handle
