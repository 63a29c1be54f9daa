"""The runtime without a GPU: importing, availability, errors, argument checking
and packing, and the DLPack/CAI readers."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from conftest import ROOT
from launch_util import RecordingBinding, function_layout

import ptxgen
import runtime
from runtime import interop
from runtime.errors import CudaError, CudaUnavailable, PtxLoadError
from runtime.layout import ArgumentLayout
from runtime.module import Function

np = pytest.importorskip("numpy")


def test_importing_runtime_does_not_touch_the_driver():
    code = "import sys, runtime; print('cuda.bindings.driver' in sys.modules, 'numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_is_available_never_raises_and_agrees_with_the_reason():
    available = runtime.is_available()
    reason = runtime.unavailable_reason()
    assert available is (reason is None)
    if not available:
        assert "\n" not in reason


def test_no_driver_is_one_line(monkeypatch):
    try:
        ctypes.CDLL("libcuda.so.1")
        pytest.skip("this machine has a CUDA driver")
    except OSError:
        pass
    assert runtime.is_available() is False
    assert "no NVIDIA driver found (libcuda.so.1" in runtime.unavailable_reason()
    with pytest.raises(CudaUnavailable) as info:
        runtime.Device(0)
    assert "\n" not in str(info.value) and "libcuda.so.1" in str(info.value)
    assert isinstance(info.value, CudaError)
    code = "import runtime; runtime.Device(0)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert "pathfinder" not in out.stderr and "DynamicLibNotFoundError" not in out.stderr


def test_error_classes_carry_what_failed():
    err = CudaError("cuMemAlloc", 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory")
    assert str(err) == "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"
    load = PtxLoadError(
        "cuModuleLoadDataEx", 218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed",
        kernel_id="k__f32__128", target="sm_75", error_log="ptxas application ptx input, line 3; error",
        info_log="", ptx_lines=">    3 | bad",
    )  # fmt: skip
    text = str(load)
    assert "k__f32__128" in text and "sm_75" in text and "line 3; error" in text and ">    3 | bad" in text
    assert isinstance(load, CudaError) and load.error_log.startswith("ptxas")


# --- argument checking and packing, on a Function built without a driver -----------


class FakeContext:
    def activate(self):
        pass


class FakeDevice:
    ordinal = 0
    max_grid = (2**31 - 1, 65535, 65535)
    max_block = (1024, 1024, 64)
    max_shared_memory_per_block = 227 * 1024

    def __init__(self):
        self.context = FakeContext()


def function_for(kernel, binding=None) -> Function:
    """A Function whose launcher is built as the real one's, with a recording binding
    standing in for the driver."""
    fn = Function.__new__(Function)
    fn.name, fn.device, fn.block = kernel.entry_point_name, FakeDevice(), kernel.block
    fn.max_threads_per_block = kernel.block[0]
    fn.arg_types, fn.arg_names = tuple(kernel.arg_types), tuple(kernel.arg_names)
    fn.layout = ArgumentLayout(fn.arg_names, fn.arg_types)
    fn._handle = 0xF00D
    fn.module = SimpleNamespace(closed=False, kernel=kernel)
    fn._build_launcher(binding if binding is not None else RecordingBinding(fn.layout))
    return fn


class CudaArrayLike:
    def __init__(self, typestr="<f4", shape=(4, 8), strides=None, readonly=False, ptr=0x7F0000001000):
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "data": (ptr, readonly), "strides": strides, "version": 3,
        }  # fmt: skip


K = ptxgen.ChannelCatBackward("f32", 128)


def test_values_are_packed_by_the_declared_types():
    binding = RecordingBinding(function_layout(K))
    fn = function_for(K, binding)
    src, dst = CudaArrayLike(ptr=0x1000), CudaArrayLike(ptr=0x2000)
    values = fn.pack_args((src, dst, 16, 32, 16))
    assert values == [0x1000, 0x2000, 16, 32, 16]
    fn.launch(K.grid(1, 16), K.block, (src, dst, 16, 32, 16))
    # The void** points at one slot per parameter, each holding the value in its C type.
    params = binding.calls[-1].params
    assert ctypes.c_uint64.from_address(params[0]).value == 0x1000
    assert ctypes.c_uint64.from_address(params[1]).value == 0x2000
    assert [ctypes.c_int32.from_address(params[i]).value for i in (2, 3, 4)] == [16, 32, 16]
    assert fn.pack_args({"dy": 7, "dx": 8, "chunk_c": 1, "c_total": 2, "chunk_offset": 1}) == [7, 8, 1, 2, 1]


@pytest.mark.parametrize(
    "args, error, message",
    [
        ((1, 2, 3, 4), TypeError, "takes 5 arguments (dy, dx, chunk_c, c_total, chunk_offset), got 4: missing 'chunk_offset'"),
        ((1, 2, 3, 4, 5, 6), TypeError, "got 6: 1 too many"),
        ({"dy": 1, "dx": 2, "chunk_c": 3, "c_total": 4}, TypeError, "missing 'chunk_offset'"),
        ({"dy": 1, "dx": 2, "chunk_c": 3, "c_total": 4, "chunk_offset": 0, "x": 1}, TypeError, "unknown 'x'"),
        ("abcde", TypeError, "args must be a tuple, list or dict"),
        ((1, 2, 2**31, 4, 5), ValueError, "argument 'chunk_c' (i32, read by the kernel as .u32) = 2147483648 is out of range [0, 2147483647]"),
        ((1, 2, -1, 4, 5), ValueError, "= -1 is out of range [0, 2147483647]"),
        ((1, 2, True, 4, 5), TypeError, "argument 'chunk_c' (i32) must be an int, not bool"),
        ((1, 2, "3", 4, 5), TypeError, "must be an int, not str '3'"),
        ((1, 2, 3.0, 4, 5), TypeError, "must be an int, not float 3.0"),
        ((1, 2, None, 4, 5), TypeError, "must be an int, not NoneType"),
        ((True, 2, 3, 4, 5), TypeError, "argument 'dy' (*mut f32) got a bool"),
        ((-5, 2, 3, 4, 5), ValueError, "address -5 is not a 64-bit address"),
        ((None, 2, 3, 4, 5), TypeError, "got None; pass 0 for a null pointer"),
        ((CudaArrayLike("<f2"), 2, 3, 4, 5), TypeError, "argument 'dy' (*mut f32) got a CudaArrayLike of <f2 (f16)"),
        ((CudaArrayLike("<c8"), 2, 3, 4, 5), TypeError, "got a CudaArrayLike of <c8"),
        ((1, CudaArrayLike(readonly=True), 3, 4, 5), ValueError, "argument 'dx' (*mut f32) is written by the kernel, but the array is read-only"),
        ((CudaArrayLike(strides=(4, 16)), 2, 3, 4, 5), ValueError, "the array is not contiguous"),
        ((np.zeros(4, np.float32), 2, 3, 4, 5), TypeError, "ndarray lives in host (CPU) memory"),
        ((object(), 2, 3, 4, 5), TypeError, "expected a device array"),
    ],
)  # fmt: skip
def test_bad_arguments_are_refused_before_launch(args, error, message):
    fn = function_for(K)
    with pytest.raises(error) as info:
        fn.pack_args(args)
    assert message in str(info.value)


def test_readonly_input_is_fine():
    fn = function_for(K)
    assert fn.pack_args((CudaArrayLike(readonly=True, ptr=16), 32, 1, 1, 0))[0] == 16


def test_numpy_ints_are_accepted_and_range_checked():
    fn = function_for(K)
    assert fn.pack_args((0, 0, np.int64(5), np.int32(7), np.uint8(2)))[2:] == [5, 7, 2]
    with pytest.raises(ValueError, match="out of range"):
        fn.pack_args((0, 0, np.int64(2**40), 1, 1))


@pytest.mark.parametrize(
    "grid, block, shared, error, message",
    [
        ((0, 1, 1), (128, 1, 1), 0, ValueError, "grid (0, 1, 1): dimension x = 0 is outside 1..2147483647"),
        (2**31, 128, 0, ValueError, "dimension x = 2147483648"),
        ((1, 70000), 128, 0, ValueError, "dimension y = 70000 is outside 1..65535"),
        (1, (64, 1, 1), 0, ValueError, "is built for block (128, 1, 1), not (64, 1, 1)"),
        (1, (2048, 1, 1), 0, ValueError, "dimension x = 2048 is outside 1..1024"),
        (1, (128, 2, 1), 0, ValueError, "has 256 threads"),
        (1.0, 128, 0, TypeError, "grid must be an int or a tuple"),
        ((1, 2, 3, 4), 128, 0, TypeError, "tuple of 1 to 3 ints"),
        (1, 128, -1, ValueError, "shared_mem -1 is outside"),
        (1, 128, 1 << 20, ValueError, "shared_mem 1048576 is outside"),
    ],
)
def test_bad_geometry_is_refused(grid, block, shared, error, message):
    fn = function_for(K)
    with pytest.raises(error) as info:
        fn._check_geometry(grid, block, shared)
    assert message in str(info.value)


def test_geometry_is_normalised():
    assert function_for(K)._check_geometry(5, 128, 0) == ((5, 1, 1), (128, 1, 1), 0)


def test_scalar_types():
    assert (ptxgen.Scalar("i32").min, ptxgen.Scalar("i32").max) == (-(2**31), 2**31 - 1)
    assert (ptxgen.Scalar("i32", "u32").min, ptxgen.Scalar("i32", "u32").max) == (0, 2**31 - 1)
    assert ptxgen.Scalar("u64").max == 2**64 - 1
    with pytest.raises(ValueError, match="sizes differ"):
        ptxgen.Scalar("i32", "u64")
    with pytest.raises(ValueError, match="unknown scalar type 'f32'"):
        ptxgen.Scalar("f32")


# --- DLPack and CAI readers ---------------------------------------------------------


class DLPackLike:
    """Hands out a capsule made by our own exporter, as a CUDA producer would."""

    def __init__(self, shape, dtype, ptr=0x5000, device=(interop.KDL_CUDA, 0)):
        self.owner = object()
        self.args = (shape, ptxgen.resolve_dtype(dtype), ptr)
        self.device = device
        self.streams = []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        shape, dtype, ptr = self.args
        return interop.to_dlpack_capsule(self.owner, ptr, shape, dtype, self.device[1])


def test_dlpack_round_trip_through_our_exporter():
    producer = DLPackLike((3, 5), "bf16")
    info = interop.describe(producer, stream=0)
    assert (info.ptr, info.dtype.name, info.contiguous, info.device_id) == (0x5000, "bf16", True, 0)
    assert producer.streams == [1]  # the default stream, spelled as DLPack wants
    assert interop._exported == {}  # the unconsumed capsule handed its tensor back


class CaiLike:
    def __init__(self, **extra):
        self.__cuda_array_interface__ = {
            "shape": (2, 3),
            "typestr": "<f4",
            "data": (0x6000, False),
            "version": 3,
        }
        self.__cuda_array_interface__.update(extra)


def test_cai_v3_names_the_stream_to_order_after():
    assert interop.describe(CaiLike()).stream is None  # no key: nothing to order after
    assert interop.describe(CaiLike(stream=None)).stream is None
    assert interop.describe(CaiLike(stream=0x7F00)).stream == 0x7F00
    assert interop.describe(CaiLike(stream=0)).stream == 1  # forbidden by v3; read as the legacy stream
    for bad in (True, -1, "1", 1.0):
        with pytest.raises(TypeError, match="'stream' must be None or a stream handle"):
            interop.describe(CaiLike(stream=bad))


def test_order_after_waits_by_event_on_known_streams_and_by_the_device_otherwise(monkeypatch):
    from runtime import stream as streams

    calls = []
    capturing = {}

    class FakeDriver:
        class CUevent_flags:
            CU_EVENT_DISABLE_TIMING = 2

        def cuStreamIsCapturing(self, s):
            return (0, capturing.get(s, 0))

        def cuCtxSynchronize(self):
            calls.append("synchronize the device")
            return (0,)

        def cuEventCreate(self, flags):
            return (0, "event")

        def cuEventRecord(self, event, s):
            calls.append(f"record on {s:#x}")
            return (0,)

        def cuStreamWaitEvent(self, s, event, flags):
            calls.append(f"wait on {s:#x}")
            return (0,)

        def cuEventDestroy(self, event):
            calls.append("destroy")
            return (0,)

    class Context:
        def activate(self):
            pass

    class Device:
        context = Context()

    monkeypatch.setattr(streams, "driver", FakeDriver)
    dev = Device()
    for consumer, producer in ((7, None), (7, 7), (0, 1), (1, 0)):
        streams.order_after(dev, consumer, producer)
    assert calls == []  # nothing asked, or the same stream
    streams.trust_stream_handle(0x1234)
    streams.order_after(dev, 7, 0x1234)
    assert calls == ["record on 0x1234", "wait on 0x7", "destroy"]
    calls.clear()
    streams.order_after(dev, 7, 0xBAD0)  # never vouched for: not handed to the driver
    assert calls == ["synchronize the device"]
    calls.clear()
    capturing[7] = 1
    streams.order_after(dev, 7, 0x1234)  # a capture: nothing from outside may join it
    assert calls == []


def test_dlpack_host_arrays_are_refused():
    with pytest.raises(TypeError, match=r"host \(CPU\) memory"):
        interop.describe(DLPackLike((2,), "f32", device=(interop.KDL_CPU, 0)))


def test_exported_capsule_keeps_its_owner_until_released():
    owner = object()
    capsule = interop.to_dlpack_capsule(owner, 0x10, (2, 2), ptxgen.resolve_dtype("f32"), 0)
    assert any(entry[2] is owner for entry in interop._exported.values())
    del capsule
    assert interop._exported == {}


def test_contiguity():
    assert interop._c_contiguous((4, 8), None, 4)
    assert interop._c_contiguous((4, 8), (32, 4), 4)
    assert interop._c_contiguous((1, 8), (999, 4), 4)  # extent-1 strides do not matter
    assert not interop._c_contiguous((4, 8), (4, 16), 4)


def test_stream_handles():
    from runtime.stream import stream_handle, trust_stream_handle

    assert stream_handle(None) == 0 and stream_handle(1) == 1 and stream_handle(2) == 2
    assert stream_handle(SimpleNamespace(cuda_stream=0x7A0)) == 0x7A0
    assert stream_handle(0x7A0) == 0x7A0  # seen through a library's stream object: known now
    assert stream_handle(SimpleNamespace(__cuda_stream__=lambda: (0, 0x9B0))) == 0x9B0
    # An int nothing vouched for could crash the process inside cuLaunchKernel: refused.
    with pytest.raises(ValueError, match="stream handle 0x3039 is not a stream this runtime knows"):
        stream_handle(12345)
    assert stream_handle(trust_stream_handle(12345)) == 12345
    with pytest.raises(ValueError, match="is negative"):
        stream_handle(-1)
    with pytest.raises(ValueError, match="not a 64-bit address"):
        trust_stream_handle(1 << 64)
    with pytest.raises(TypeError, match="not a bool"):
        stream_handle(True)
    with pytest.raises(TypeError, match=r"expected a runtime\.Stream"):
        stream_handle("default")


def test_a_stream_object_with_both_attributes_is_read_by_cuda_stream():
    """torch's streams have ``cuda_stream`` and ``__cuda_stream__``; the attribute is
    read (the protocol costs torch about a microsecond a call), and says the same."""
    from runtime.stream import stream_handle

    class TorchLikeStream:
        cuda_stream = 0x5150

        def __cuda_stream__(self):
            raise AssertionError("the attribute is cheaper and says the same")

    assert stream_handle(TorchLikeStream()) == 0x5150 and stream_handle(0x5150) == 0x5150


def test_the_last_stream_object_is_read_once_while_its_handle_is_known():
    """A model passes the same torch stream call after call: its handle is read once,
    then remembered with the object, until the runtime forgets the handle (a closed
    Stream's), as the compiled launch path remembers its last one."""
    from runtime import stream as streams

    class Counted:
        reads = 0

        @property
        def cuda_stream(self):
            Counted.reads += 1
            return 0x7170

    one, other = Counted(), Counted()
    assert [streams.stream_handle(one) for _ in range(3)] == [0x7170] * 3 and Counted.reads == 1
    assert streams.stream_handle(other) == 0x7170 and Counted.reads == 2  # another object: read
    streams._forget_stream_handle(0x7170)
    assert streams.stream_handle(other) == 0x7170 and Counted.reads == 3  # forgotten: read again


def test_a_failing_cuda_stream_property_falls_back_to_the_protocol():
    from runtime.stream import stream_handle

    class Odd:
        @property
        def cuda_stream(self):
            raise RuntimeError("not this one")

        def __cuda_stream__(self):
            return (0, 0x6160)

    assert stream_handle(Odd()) == 0x6160

    class Broken:
        @property
        def cuda_stream(self):
            raise RuntimeError("the stream was destroyed")

    with pytest.raises(TypeError, match="its cuda_stream raised RuntimeError: the stream was destroyed"):
        stream_handle(Broken())


def test_entry_parameter_count_is_read_from_the_ptx():
    from conftest import hand_written_kernel

    from runtime.module import ptx_param_count

    for kernel in (ptxgen.ChannelCatBackward("f32", 128), ptxgen.ChannelCatForward("u8", 64, inline=False)):
        assert ptx_param_count(kernel.source, kernel.entry_point_name) == 5
    assert ptx_param_count(hand_written_kernel().source, "fill_entry_point") == 3
    assert ptx_param_count(hand_written_kernel().source, "missing_entry_point") is None
    assert ptx_param_count(".entry k()\n{ ret; }", "k") == 0


@pytest.mark.parametrize(
    ("value", "default", "want"),
    [
        (None, True, True),
        (None, False, False),
        ("", False, False),
        ("  ", True, True),
        ("1", False, True),
        ("ON", False, True),
        (" Yes ", False, True),
        ("true", False, True),
        ("0", True, False),
        ("Off", True, False),
        ("no", True, False),
        ("FALSE", True, False),
    ],
)
def test_environment_switches_read_one_way(monkeypatch, value, default, want):
    from runtime._env import env_flag

    if value is None:
        monkeypatch.delenv("PTXGEN_TEST_SWITCH", raising=False)
    else:
        monkeypatch.setenv("PTXGEN_TEST_SWITCH", value)
    assert env_flag("PTXGEN_TEST_SWITCH", default) is want


@pytest.mark.parametrize("value", ["disable", "2", "y", "enabled"])
def test_a_mistyped_switch_is_an_error_naming_it(monkeypatch, value):
    from runtime._env import env_flag

    monkeypatch.setenv("PTXGEN_TEST_SWITCH", value)
    with pytest.raises(ValueError, match=rf"PTXGEN_TEST_SWITCH='{value}' is not a switch; accepted: 1, true"):
        env_flag("PTXGEN_TEST_SWITCH", True)


def test_the_runtime_refuses_a_mistyped_switch(monkeypatch):
    """Each switch the runtime reads goes through env_flag: a typo is an error, not the default."""
    from runtime.plan import DeviceTraits

    for name in ("PTXGEN_COMPILED_LAUNCH", "PTXGEN_CHECK_INT_POINTERS"):  # read at import
        env = {**os.environ, name: "maybe"}
        code = "import runtime.launch"
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)
        assert out.returncode != 0
        assert f"{name}='maybe' is not a switch" in out.stderr
    device = SimpleNamespace(
        ordinal=0, arch="sm_90", max_grid=(2**31 - 1, 65535, 65535), max_shared_memory_per_block=1
    )
    monkeypatch.setenv("PTXGEN_DEPENDENT_LAUNCH", "maybe")  # read per device
    with pytest.raises(ValueError, match="PTXGEN_DEPENDENT_LAUNCH='maybe' is not a switch"):
        DeviceTraits.of(device)
