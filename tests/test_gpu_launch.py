"""The launch path on a GPU: parameters echoed back byte for byte, every array kind,
every binding, prepared launches, launches from threads and foreign contexts, and CUDA
graphs (our own capture and torch's), each result checked against poisoned outputs."""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest
from gpu_util import poison_value, random_bits
from launch_util import LAYOUTS, echo_kernel, echoed, extremes

import ptxgen
import runtime
from runtime import launch as launch_module

pytestmark = pytest.mark.gpu

K = ptxgen.ChannelCatBackward("f32", 128)
N, C_TOTAL, CHUNK, OFFSET = 37, 29, 13, 7  # odd sizes: a partial block per row


@pytest.mark.parametrize("name", LAYOUTS)
def test_parameters_reach_the_kernel_byte_for_byte(dev, name):
    """The kernel reads each parameter at the offset the driver compiled and stores it:
    what comes back is what was passed, for every type and odd layout."""
    kernel = echo_kernel(LAYOUTS[name])
    fn = dev.load(kernel).function  # the layout is confirmed against cuFuncGetParamInfo here
    others = kernel.types
    out = dev.empty(len(others), "u64")
    for which in range(3):
        out.fill_bytes(0xA5)
        values = [extremes(t)[(which + i) % 3] for i, t in enumerate(others)]
        args = list(values)
        args.insert(kernel._out, out)
        fn.launch(1, kernel.block, args)
        got = out.to_numpy().tolist()
        assert got == [echoed(t, v) for t, v in zip(others, values)], (name, which)


# --- every array kind, every binding -------------------------------------------------------


def expected(dy_host: np.ndarray) -> np.ndarray:
    return dy_host[:, OFFSET : OFFSET + CHUNK]


def host_data(dtype: str = "f32") -> np.ndarray:
    return random_bits(np.random.default_rng(), (N, C_TOTAL), dtype)


def test_device_arrays_and_int_addresses(dev):
    fn = dev.load(K).function
    host = host_data()
    dy = dev.to_device(host, dtype="f32")
    for kind in ("DeviceArray", "int"):
        dx = dev.empty((N, CHUNK), "f32").fill_bytes(0xA5)
        a, b = (dy, dx) if kind == "DeviceArray" else (dy.ptr, dx.ptr)
        fn.launch(K.grid(N, CHUNK), K.block, (a, b, CHUNK, C_TOTAL, OFFSET))
        np.testing.assert_array_equal(dx.to_numpy(bits=True), expected(host), err_msg=kind)


@pytest.mark.parametrize("name", launch_module.BINDINGS)
def test_each_binding_launches(dev, name):
    try:
        launch_module.binding(name)
    except (ImportError, OSError) as err:
        pytest.skip(f"{name} does not load here: {err}")
    fn = dev.load(K).function
    launcher = fn.make_launcher(name)
    assert launcher.binding.name == name
    host = host_data()
    dy = dev.to_device(host, dtype="f32")
    dx = dev.empty((N, CHUNK), "f32").fill_bytes(0x5A)
    with runtime.Stream(dev) as stream:
        launcher.launch(K.grid(N, CHUNK), K.block, (dy, dx, CHUNK, C_TOTAL, OFFSET), stream=stream)
        stream.synchronize()
    np.testing.assert_array_equal(dx.to_numpy(bits=True), expected(host))


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16", "i64", "u8", "e4m3"])
def test_torch_tensors_every_dtype(dev, torch, dtype):
    tdt = getattr(torch, ptxgen.resolve_dtype(dtype).numpy_name, None)
    if tdt is None:
        pytest.skip(f"this torch has no {dtype}")
    k = ptxgen.ChannelCatBackward(dtype, 64)
    size = ptxgen.resolve_dtype(dtype).itemsize
    bits = torch.randint(0, 256, (N, C_TOTAL * size), dtype=torch.uint8, device="cuda")
    dy = bits.view(tdt)
    dx = torch.full((N, CHUNK * size), 0xA5, dtype=torch.uint8, device="cuda").view(tdt)
    stream = torch.cuda.current_stream()
    dev.load(k).function.launch(k.grid(N, CHUNK), k.block, (dy, dx, CHUNK, C_TOTAL, OFFSET), stream=stream)
    torch.cuda.synchronize()
    assert torch.equal(dx.view(torch.uint8), dy[:, OFFSET : OFFSET + CHUNK].contiguous().view(torch.uint8))


def test_torch_tensors_that_need_no_cuda_array_interface(dev, torch):
    """A tensor that requires grad (its CAI raises) and a Parameter (a subclass)."""
    fn = dev.load(K).function
    dy = torch.nn.Parameter(torch.randn(N, C_TOTAL, device="cuda"))
    dx = torch.full((N, CHUNK), float("nan"), device="cuda")
    fn.launch(K.grid(N, CHUNK), K.block, (dy, dx, CHUNK, C_TOTAL, OFFSET), stream=torch.cuda.current_stream())
    torch.cuda.synchronize()
    assert torch.equal(dx, dy.detach()[:, OFFSET : OFFSET + CHUNK])


def test_torch_refusals_name_the_argument(dev, torch):
    fn = dev.load(K).function
    dy = torch.zeros((4, 8), device="cuda")
    dx = torch.full((4, 4), 3.0, device="cuda")
    cases = [
        ((dy, torch.empty((0, 4), device="cuda"), 4, 8, 0), ValueError, "argument 'dx' (*mut f32): the Tensor has no elements"),
        ((dy.half(), dx, 4, 8, 0), TypeError, "argument 'dy' (*mut f32) got a Tensor of <f2 (f16)"),
        ((dy.bfloat16(), dx, 4, 8, 0), TypeError, "argument 'dy' (*mut f32) got a Tensor of torch.bfloat16 (bf16)"),
        ((dy, dx.t(), 4, 8, 0), ValueError, "argument 'dx' (*mut f32): the array is not contiguous"),
        ((dy.cpu(), dx, 4, 8, 0), TypeError, "argument 'dy' (*mut f32): Tensor lives in host (CPU) memory"),
        ((torch.empty((4, 8), device="meta"), dx, 4, 8, 0), TypeError, "lives on the 'meta' device"),
    ]  # fmt: skip
    for args, error, message in cases:
        with pytest.raises(error) as info:
            fn.launch(K.grid(4, 4), K.block, args)
        assert message in str(info.value)
    torch.cuda.synchronize()
    assert (dx == 3.0).all()


def test_cupy_arrays_and_generic_interfaces(dev, cupy):
    fn = dev.load(K).function
    host = np.random.default_rng().standard_normal((N, C_TOTAL)).astype(np.float32)
    dy = cupy.asarray(host)

    class CaiOnly:  # anything with __cuda_array_interface__ (Numba, JAX...)
        def __init__(self, a):
            self.__cuda_array_interface__ = a.__cuda_array_interface__

    class DLPackOnly:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__(stream=stream)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    for wrap in (lambda a: a, CaiOnly, DLPackOnly):
        dx = cupy.full((N, CHUNK), np.nan, dtype=cupy.float32)
        fn.launch(K.grid(N, CHUNK), K.block, (wrap(dy), wrap(dx), CHUNK, C_TOTAL, OFFSET))
        cupy.cuda.Device().synchronize()
        np.testing.assert_array_equal(cupy.asnumpy(dx), host[:, OFFSET : OFFSET + CHUNK])


def test_cupy_bf16_arrays_are_known_by_their_dtype_name(dev, cupy, torch):
    """CAI spells bf16 '<V2' (ml_dtypes' bfloat16): a launch takes such a CuPy array by its
    dtype's name, as the ops do, and still refuses a void type of no dtype's name."""
    k = ptxgen.ChannelCatBackward("bf16", 64)
    fn = dev.load(k).function
    dy_t = torch.randn(N, C_TOTAL, device="cuda").to(torch.bfloat16)
    dx_t = torch.full((N, CHUNK), float("nan"), device="cuda", dtype=torch.bfloat16)
    dy, dx = cupy.from_dlpack(dy_t), cupy.from_dlpack(dx_t)
    assert dy.dtype.str == "<V2"  # what the interface would say, and no dtype of ours
    fn.launch(k.grid(N, CHUNK), k.block, (dy, dx, CHUNK, C_TOTAL, OFFSET))
    torch.cuda.synchronize()
    assert torch.equal(dx_t.view(torch.int16), dy_t[:, OFFSET : OFFSET + CHUNK].view(torch.int16))
    void = cupy.zeros((N, C_TOTAL), dtype="V2")
    with pytest.raises(TypeError, match=r"got a ndarray of .V2"):
        fn.launch(k.grid(N, CHUNK), k.block, (void, dx, CHUNK, C_TOTAL, OFFSET))


# --- prepared launches ----------------------------------------------------------------


def test_prepared_launches(dev, torch):
    fn = dev.load(K).function
    host = host_data()
    dy = dev.to_device(host, dtype="f32")
    dx = dev.empty((N, CHUNK), "f32")
    with runtime.Stream(dev) as stream:
        prepared = fn.prepare(K.grid(N, CHUNK), K.block, stream=stream)
        for how in ("checked", "raw", "torch"):
            dx.fill_bytes(0xA5)
            if how == "checked":
                prepared(dy, dx, CHUNK, C_TOTAL, OFFSET)
            elif how == "raw":
                prepared.raw(dy.ptr, dx.ptr, CHUNK, C_TOTAL, OFFSET)
            else:
                prepared(torch.from_dlpack(dy), torch.from_dlpack(dx), CHUNK, C_TOTAL, OFFSET)
            stream.synchronize()
            np.testing.assert_array_equal(dx.to_numpy(bits=True), expected(host), err_msg=how)
        dx.fill_bytes(0xA5)
        with pytest.raises(ValueError, match="out of range"):
            prepared(dy, dx, CHUNK, 2**31, OFFSET)
    with pytest.raises(ValueError, match="this Stream is closed"):
        prepared(dy, dx, CHUNK, C_TOTAL, OFFSET)
    dev.synchronize()
    assert (dx.to_numpy(bits=True) == poison_value(0xA5, "f32")).all(), "a refused launch wrote"


# --- contexts -------------------------------------------------------------------------------


def test_a_fresh_thread_launches(dev):
    """No context is current on a new thread: the first call fails, the device's context
    is made current, the launch goes through."""
    fn = dev.load(K).function
    host = host_data()
    dy = dev.to_device(host, dtype="f32")
    dx = dev.empty((N, CHUNK), "f32").fill_bytes(0xA5)
    errors = []

    def work():
        try:
            current = runtime.check("cuCtxGetCurrent", runtime.driver().cuCtxGetCurrent())
            fn.launch(K.grid(N, CHUNK), K.block, (dy, dx, CHUNK, C_TOTAL, OFFSET))
            errors.append(("context before", int(current)))
        except Exception as err:  # reported below
            errors.append(err)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert len(errors) == 1 and not isinstance(errors[0], Exception), errors
    np.testing.assert_array_equal(dx.to_numpy(bits=True), expected(host))


def _create_context(drv, device):
    for args in ((None, 0, device), (0, device)):  # CUDA 13 bindings, then 12
        try:
            return runtime.check("cuCtxCreate", drv.cuCtxCreate(*args))
        except TypeError:
            continue
    pytest.skip("cuCtxCreate has a signature this test does not know")


@pytest.mark.parametrize("on", ["own stream", "default stream"])
def test_a_launch_with_another_context_current(dev, on):
    """Another context is current on this thread (another library's): the launch runs
    in its function's context, with the right result."""
    drv = runtime.driver()
    fn = dev.load(K).function
    host = host_data()
    dy = dev.to_device(host, dtype="f32")
    dx = dev.empty((N, CHUNK), "f32").fill_bytes(0xA5)
    stream = runtime.Stream(dev)
    other = _create_context(drv, runtime.check("cuDeviceGet", drv.cuDeviceGet(dev.ordinal)))
    try:
        runtime.check("cuCtxSetCurrent", drv.cuCtxSetCurrent(other))
        fn.launch(
            K.grid(N, CHUNK),
            K.block,
            (dy, dx, CHUNK, C_TOTAL, OFFSET),
            stream=stream if on == "own stream" else None,
        )
    finally:
        dev.synchronize()  # makes the device's context current again
        runtime.check("cuCtxDestroy", drv.cuCtxDestroy(other))
    np.testing.assert_array_equal(dx.to_numpy(bits=True), expected(host))
    stream.close()


# --- graphs ---------------------------------------------------------------------------------


def test_graph_capture_replay_and_update(dev):
    fn = dev.load(K).function
    host = host_data()
    dy = dev.to_device(host, dtype="f32")
    outs = [dev.empty((N, CHUNK), "f32") for _ in range(3)]
    offsets = [0, OFFSET, C_TOTAL - CHUNK]
    with runtime.Stream(dev) as stream:
        prepared = fn.prepare(K.grid(N, CHUNK), K.block, stream=stream)
        with runtime.Graph(stream) as graph:
            for out, offset in zip(outs, offsets):
                prepared(dy, out, CHUNK, C_TOTAL, offset)
        nodes = graph.kernel_nodes
        assert [n.function for n in nodes] == [fn] * 3
        assert [n.args for n in nodes] == [
            (dy.ptr, o.ptr, CHUNK, C_TOTAL, off) for o, off in zip(outs, offsets)
        ]
        assert all(n.grid == K.grid(N, CHUNK) and n.block == K.block for n in nodes)
        for out in outs:
            out.fill_bytes(0xA5)  # after capture: nothing ran during it
        for _ in range(2):
            graph.launch()
        stream.synchronize()
        for out, offset in zip(outs, offsets):
            np.testing.assert_array_equal(out.to_numpy(bits=True), host[:, offset : offset + CHUNK])

        # update node 1: another output, another offset; the others keep theirs
        spare = dev.empty((N, CHUNK), "f32").fill_bytes(0xA5)
        for out in outs:
            out.fill_bytes(0x5A)
        graph.set_args(1, (dy, spare, CHUNK, C_TOTAL, 3))
        assert graph.kernel_nodes[1].args == (dy.ptr, spare.ptr, CHUNK, C_TOTAL, 3)
        graph.launch()
        stream.synchronize()
        np.testing.assert_array_equal(spare.to_numpy(bits=True), host[:, 3 : 3 + CHUNK])
        assert (outs[1].to_numpy(bits=True) == poison_value(0x5A, "f32")).all(), "the old node still ran"
        np.testing.assert_array_equal(outs[2].to_numpy(bits=True), host[:, offsets[2] : offsets[2] + CHUNK])
        with pytest.raises(ValueError, match="out of range"):
            graph.set_args(0, (dy, spare, CHUNK, -1, 0))
        graph.close()
        with pytest.raises(ValueError, match="this Graph is closed"):
            graph.launch()


def test_a_capture_invalidated_by_a_synchronizing_call_says_so(dev):
    fn = dev.load(K).function
    dy, dx = dev.empty((N, C_TOTAL), "f32"), dev.empty((N, CHUNK), "f32")
    with runtime.Stream(dev) as stream:
        with pytest.raises(runtime.CudaError) as info, runtime.Graph(stream):
            fn.launch(K.grid(N, CHUNK), K.block, (dy, dx, CHUNK, C_TOTAL, OFFSET), stream=stream)
            # A synchronous memset on the legacy stream may not run during capture; whether
            # the driver refuses it here or not, the capture is invalidated.
            with contextlib.suppress(runtime.CudaError):
                dx.fill_bytes(0)
        assert "may not run during capture" in str(info.value) or "cuStreamEndCapture" in str(info.value)
        # the stream works again afterwards
        fn.launch(K.grid(N, CHUNK), K.block, (dy, dx, CHUNK, C_TOTAL, OFFSET), stream=stream)
        stream.synchronize()


def test_an_exception_during_capture_discards_the_graph(dev):
    with runtime.Stream(dev) as stream:
        graph = runtime.Graph(stream)
        with pytest.raises(KeyError), graph:
            raise KeyError("boom")
        with pytest.raises(ValueError, match="capture failed"):
            graph.launch()


def test_torch_graph_capture_records_our_launch(dev, torch):
    fn = dev.load(K).function
    dy = torch.randn(N, C_TOTAL, device="cuda")
    dx = torch.empty(N, CHUNK, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture, as torch asks
        fn.launch(K.grid(N, CHUNK), K.block, (dy, dx, CHUNK, C_TOTAL, OFFSET), stream=side)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn.launch(
            K.grid(N, CHUNK), K.block, (dy, dx, CHUNK, C_TOTAL, OFFSET), stream=torch.cuda.current_stream()
        )
    for _ in range(2):
        dy.copy_(torch.randn(N, C_TOTAL, device="cuda"))
        dx.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(dx, dy[:, OFFSET : OFFSET + CHUNK])


def test_int_pointers_checked_by_the_driver_when_asked(dev):
    """runtime.check_int_pointers(True): an int address must lie in a live allocation on
    the launch's device with room for what the launch touches."""
    rng = np.random.default_rng()
    drv = runtime.driver()
    fn = dev.load(K).function
    bits = random_bits(rng, (N, C_TOTAL), "f32")
    dy = dev.to_device(bits, dtype="f32")
    dx = dev.empty((N, CHUNK), "f32").fill_bytes(0xA5)
    # plain driver memory, freed: a DeviceArray's freed memory stays mapped in its pool
    freed_ptr = int(runtime.check("cuMemAlloc", drv.cuMemAlloc(N * CHUNK * 4)))
    runtime.check("cuMemFree", drv.cuMemFree(freed_ptr))

    def end_of(array) -> int:  # where the driver says the allocation ends (it may round up)
        base, size = runtime.check("cuMemGetAddressRange", drv.cuMemGetAddressRange(array.ptr))
        return int(base) + int(size)

    grid, args = K.grid(N, CHUNK), (dy.ptr, dx.ptr, CHUNK, C_TOTAL, OFFSET)
    need_dy, need_dx = (N - 1) * C_TOTAL + OFFSET + CHUNK, N * CHUNK  # the seed's footprints
    old = runtime.check_int_pointers(True)
    try:
        fn.launch(grid, K.block, args)
        fn.prepare(grid, K.block)(*args)
        for bad, message in [
            ((dy.ptr, end_of(dx) - 4 * (need_dx - 1), CHUNK, C_TOTAL, OFFSET),
             f"writes {need_dx} elements .* but the array holds {need_dx - 1} "),
            ((end_of(dy) - 4 * (need_dy - 1), dx.ptr, CHUNK, C_TOTAL, OFFSET),
             f"reads {need_dy} elements .* but the array holds {need_dy - 1} "),
            ((0x7F00_DEAD_BEE0, dx.ptr, CHUNK, C_TOTAL, OFFSET), "address 0x7f00deadbee0 is in no CUDA allocation"),
        ]:  # fmt: skip
            with pytest.raises(ValueError, match=message):
                fn.launch(grid, K.block, bad)
        if freed_ptr not in (dy.ptr, dx.ptr):  # the allocator may hand the address out again
            with pytest.raises(ValueError, match="in no CUDA allocation"):
                fn.launch(grid, K.block, (dy.ptr, freed_ptr, CHUNK, C_TOTAL, OFFSET))
    finally:
        runtime.check_int_pointers(old)
    dev.synchronize()
    assert np.array_equal(dx.to_numpy(bits=True), bits[:, OFFSET : OFFSET + CHUNK])
