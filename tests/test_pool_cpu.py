"""runtime.pool and runtime.outputs without a GPU: a stand-in driver records the calls.

What is checked here is the order of driver calls the rules make (allocate on the
array's stream, free there after the streams it was recorded on, hold a free back while
a capture forbids it, retry an allocation once after the pending frees, name the size
when out of memory) and which kind of array the ops make for each kind of input. The
GPU suite (tests/test_gpu_alloc.py) runs the same paths on the device.
"""

from __future__ import annotations

import copy
import enum
import sys
import threading
import time
import types

import pytest
from launch_util import errors_in_threads

import ptxgen
from runtime import _driver, memory, outputs, pool, stream

OOM = 2


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_OUT_OF_MEMORY = OOM
    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906


class Status(enum.IntEnum):
    CU_STREAM_CAPTURE_STATUS_NONE = 0
    CU_STREAM_CAPTURE_STATUS_ACTIVE = 1


class FakeDriver:
    """The driver calls the pool makes, recorded; memory is a counter."""

    CUresult = CUresult
    CUstreamCaptureStatus = Status
    CUdevice_attribute = types.SimpleNamespace(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED="pools")
    CUmemAllocationType = types.SimpleNamespace(CU_MEM_ALLOCATION_TYPE_PINNED="pinned")
    CUmemAllocationHandleType = types.SimpleNamespace(CU_MEM_HANDLE_TYPE_NONE="none")
    CUmemLocationType = types.SimpleNamespace(CU_MEM_LOCATION_TYPE_DEVICE="device")
    CUmemPool_attribute = types.SimpleNamespace(
        CU_MEMPOOL_ATTR_RELEASE_THRESHOLD="threshold",
        CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT="reserved",
        CU_MEMPOOL_ATTR_USED_MEM_CURRENT="used",
    )
    CUevent_flags = types.SimpleNamespace(CU_EVENT_DISABLE_TIMING=2)
    CUstreamCaptureMode = types.SimpleNamespace(CU_STREAM_CAPTURE_MODE_RELAXED="relaxed")

    def __init__(self, pools=True):
        self.calls = []
        self.pools = pools
        self.capturing = {}  # stream -> status, or an error code for the legacy stream
        self.fail_allocations = 0  # how many allocations answer out of memory
        self.next = 0x7000_0000
        self.mode = "global"  # the calling thread's capture mode

    def cuThreadExchangeStreamCaptureMode(self, mode):
        old, self.mode = self.mode, mode
        return (0, old)

    class CUmemPoolProps:
        def __init__(self):
            self.location = types.SimpleNamespace(type=None, id=None)

    @staticmethod
    def cuuint64_t(value):
        return value

    def cuDeviceGetAttribute(self, attr, device):
        return (0, int(self.pools))

    def cuMemPoolCreate(self, props):
        self.calls.append(("create", props.allocType, props.location.type, props.location.id))
        return (0, "pool")

    def cuMemPoolSetAttribute(self, p, attr, value):
        self.calls.append(("set", attr, value))
        return (0,)

    def cuMemPoolGetAttribute(self, p, attr):
        return (0, 1 << 20)

    def _take(self, nbytes):
        if self.fail_allocations:
            self.fail_allocations -= 1
            return (CUresult.CUDA_ERROR_OUT_OF_MEMORY, None)
        self.next += 1 << 12
        return (CUresult.CUDA_SUCCESS, self.next)

    def cuMemAllocFromPoolAsync(self, nbytes, p, s):
        err, address = self._take(nbytes)
        self.calls.append(("alloc", nbytes, s, int(err), self.mode))
        return (err, address)

    def cuMemAlloc(self, nbytes):
        err, address = self._take(nbytes)
        self.calls.append(("cuMemAlloc", nbytes, int(err)))
        return (err, address)

    def cuMemFreeAsync(self, address, s):
        self.calls.append(("free", address, s, self.mode))
        return (0,)

    def cuMemFree(self, address):
        self.calls.append(("cuMemFree", address))
        return (0,)

    def cuStreamIsCapturing(self, s):
        state = self.capturing.get(s, Status.CU_STREAM_CAPTURE_STATUS_NONE)
        if isinstance(state, CUresult):
            return (state, Status.CU_STREAM_CAPTURE_STATUS_NONE)
        return (0, state)

    def cuCtxSynchronize(self):
        self.calls.append(("synchronize",))
        return (0,)

    def cuStreamSynchronize(self, s):
        self.calls.append(("stream synchronize",))
        return (0,)

    def cuMemGetInfo(self):
        return (0, 3 << 30, 140 << 30)

    def cuMemPoolTrimTo(self, p, keep):
        self.calls.append(("trim", keep))
        return (0,)

    def cuMemPoolDestroy(self, p):
        self.calls.append(("destroy pool",))
        return (0,)

    def cuEventCreate(self, flags):
        return (0, "event")

    def cuEventRecord(self, event, s):
        self.calls.append(("record", s))
        return (0,)

    def cuStreamWaitEvent(self, s, event, flags):
        self.calls.append(("wait", s, event))
        return (0,)

    def cuEventDestroy(self, event):
        return (0,)

    def cuGetErrorName(self, err):
        return (0, CUresult(err).name.encode())

    def cuGetErrorString(self, err):
        return (0, b"out of memory")


class FakeContext:
    device = "cudevice"
    usable = True

    def activate(self):
        pass

    def track(self, resource):
        pass


class FakeDevice:
    name = "Fake GPU"
    ordinal = 0

    def __init__(self):
        self.context = FakeContext()
        self.memory_pool = pool.MemoryPool(self)


@pytest.fixture
def drv(monkeypatch):
    fake = FakeDriver()
    for module in (pool, memory, stream, _driver):
        monkeypatch.setattr(module, "driver", lambda: fake)
    return fake


def test_the_pool_keeps_what_is_freed_and_allocates_on_the_stream(drv):
    dev = FakeDevice()
    assert drv.calls == [
        ("create", "pinned", "device", 0),
        ("set", "threshold", (1 << 64) - 1),  # freed memory stays in the pool
    ]
    drv.calls.clear()
    a = memory.DeviceArray(dev, (4, 8), "f32", stream=7)
    # in relaxed capture mode: another stream's global capture (torch's) is not broken by it
    assert a.stream == 7 and drv.calls == [("alloc", 128, 7, 0, "relaxed")] and drv.mode == "global"
    address = a.address
    a.close()
    assert drv.calls[-1] == ("free", address, 7, "relaxed")  # on its own stream, not waiting for the device
    assert not any(c[0] == "synchronize" for c in drv.calls)


def test_an_empty_array_takes_nothing(drv):
    dev = FakeDevice()
    drv.calls.clear()
    memory.DeviceArray(dev, (0, 8), "f32").close()
    assert drv.calls == []


def test_a_group_is_one_allocation_given_back_with_its_last_array(drv):
    """Device.empty_group: one allocation on the stream, each array 256-byte aligned in
    it, an empty one outside it; closing arrays (twice, or the empty one) frees nothing
    until the last array holding the memory is closed, and then frees it once."""
    dev = FakeDevice()
    drv.calls.clear()
    a, empty, b = memory.empty_group(dev, [(3, 5), (0, 4), (7,)], "f32", stream=7)
    assert drv.calls == [("alloc", 256 + 256, 7, 0, "relaxed")]
    assert b.address == a.address + 256 and a.address % 256 == 0
    assert (a.shape, a.nbytes, b.shape, b.nbytes) == ((3, 5), 60, (7,), 28)
    assert empty.address == 0 and empty.launch_key is None and a.launch_key is b.launch_key is not None
    base = a.address
    a.close()
    a.close()
    empty.close()
    assert a.closed and not b.closed and drv.calls[-1][0] == "alloc"
    with pytest.raises(ValueError, match="closed"):
        _ = a.ptr
    b.close()
    assert [c for c in drv.calls if c[0] == "free"] == [("free", base, 7, "relaxed")]


def test_a_group_is_freed_once_when_its_arrays_are_closed_or_collected(drv):
    """Arrays of a group dropped without close, or some closed and the rest dropped, give
    the memory back once, after the streams recorded on any of them."""
    dev = FakeDevice()
    arrays = memory.empty_group(dev, [(16,), (16,)], "u8")
    base = arrays[0].address
    arrays[1].record_stream(9)
    drv.calls.clear()
    del arrays
    assert drv.calls == [("record", 9), ("wait", 0, "event"), ("free", base, 0, "relaxed")]
    first, second = memory.empty_group(dev, [(16,), (16,)], "u8")
    base = first.address
    drv.calls.clear()
    first.close()
    del second
    assert drv.calls == [("free", base, 0, "relaxed")]


class _SlowToRead(memory.DeviceArray):
    """A DeviceArray whose memory is slow to read: the reading thread yields there, so
    another thread closing the same array runs in between (what a free-threaded
    interpreter, or a longer close, would do)."""

    @property
    def _memory(self):
        held = self.__dict__["_held"]
        time.sleep(0)  # read, not yet let go of
        return held

    @_memory.setter
    def _memory(self, value):
        self.__dict__["_held"] = value


def test_threads_closing_one_array_of_a_group_leave_the_others_memory(drv):
    """Eight threads closing the same array of a group at once let go of its share once:
    the other array's memory stays until it is closed, then goes back once."""
    dev = FakeDevice()
    for _ in range(20):
        first, second = memory.empty_group(dev, [(64,), (64,)], "u8")
        first.__dict__["_held"] = first.__dict__.pop("_memory")
        first.__class__ = _SlowToRead
        base = first.address
        drv.calls.clear()
        start = threading.Barrier(8)

        def close_first(i, first=first, start=start):
            start.wait()
            first.close()

        assert errors_in_threads(close_first, 8) == []
        assert not [c for c in drv.calls if c[0] == "free"], "freed while an array still held it"
        assert second.ptr == base + 256
        second.close()
        assert [c for c in drv.calls if c[0] == "free"] == [("free", base, 0, "relaxed")]


def test_threads_closing_every_array_of_a_group_at_once_free_it_once(drv):
    """Threads closing the arrays of one group, two threads an array, all at once: the
    allocation goes back once, after the last of them, and no thread raises."""
    dev = FakeDevice()
    for _ in range(20):
        group = memory.empty_group(dev, [(64,), (32,), (16,), (8,)], "u8")
        base = group[0].address
        drv.calls.clear()
        start = threading.Barrier(8)

        def close_one(i, group=group, start=start):
            start.wait()
            group[i % 4].close()

        assert errors_in_threads(close_one, 8) == []
        assert [c for c in drv.calls if c[0] == "free"] == [("free", base, 0, "relaxed")]
        assert all(a.closed for a in group)


class _ClosesFirstTracked(FakeContext):
    """A context whose ``track`` closes the first array it is given, as a Device.close()
    on another thread would while an op's results are still being made."""

    def __init__(self):
        self.tracked = []

    def track(self, resource):
        self.tracked.append(resource)
        if len(self.tracked) == 1:
            resource.close()


def test_a_group_closed_while_it_is_made_keeps_the_memory_of_the_rest(drv):
    """Closing the first array of a group before the others exist leaves the allocation
    to them: no free until the last is closed, and no open array into freed memory."""
    dev = FakeDevice()
    dev.context = _ClosesFirstTracked()
    drv.calls.clear()
    first, second = memory.empty_group(dev, [(64,), (64,)], "u8")
    assert first.closed and not [c for c in drv.calls if c[0] == "free"]
    base = second.address - 256  # the group's allocation: the first array's share, then this one
    second.close()
    assert [c for c in drv.calls if c[0] == "free"] == [("free", base, 0, "relaxed")]
    lone = FakeDevice()
    lone.context = _ClosesFirstTracked()
    array = memory.DeviceArray(lone, (64,), "u8")  # closed as it was made: freed once
    assert array.closed and len([c for c in drv.calls if c[0] == "free"]) == 2


@pytest.mark.parametrize("how", [copy.copy, copy.deepcopy])
def test_a_device_array_refuses_to_be_copied(drv, how):
    """A copy would be a second owner of the memory that never learns it was freed."""
    array = memory.empty_group(FakeDevice(), [(64,), (64,)], "u8")[0]
    with pytest.raises(TypeError, match="owns its device memory"):
        how(array)
    assert not array.closed


class _ClosesOnRead(memory.DeviceArray):
    """A DeviceArray whose memory, when first read by close(), closes ``then`` (itself or
    another array) before answering: what a finalizer or a signal handler that closes an
    array may do while its thread is inside a close."""

    @property
    def _memory(self):
        held = self.__dict__["_held"]
        then, self.__dict__["then"] = self.__dict__.get("then"), None
        if then is not None:
            then.close()
        return held

    @_memory.setter
    def _memory(self, value):
        self.__dict__["_held"] = value


@pytest.mark.parametrize("inner", ["itself", "the other"])
def test_a_close_inside_a_close_goes_through_and_frees_once(drv, inner):
    """A close that runs inside another close on the same thread, of the same array or
    of the group's other one, neither waits on itself nor frees early: the memory goes
    back once, when both arrays are closed."""
    dev = FakeDevice()
    first, second = memory.empty_group(dev, [(16,), (16,)], "u8")
    base = first.address
    first.__dict__["_held"] = first.__dict__.pop("_memory")
    first.__class__ = _ClosesOnRead
    first.__dict__["then"] = first if inner == "itself" else second
    drv.calls.clear()
    first.close()
    frees = [c for c in drv.calls if c[0] == "free"]
    if inner == "itself":
        assert frees == [] and second.ptr == base + 256
        second.close()
        frees = [c for c in drv.calls if c[0] == "free"]
    assert frees == [("free", base, 0, "relaxed")] and first.closed and second.closed


def test_a_group_of_shapes_is_checked_before_anything_is_allocated(drv):
    """empty_group takes a list of shapes: one shape on its own (a tuple of ints), a bare
    int among them, a negative extent or an unknown dtype is refused, naming it, before
    any allocation."""
    dev = FakeDevice()
    drv.calls.clear()
    for shapes, error, match in (
        ((3, 4), TypeError, r"shapes\[0\] is 3; each shape is a tuple of ints"),
        ([(2, 2), 5], TypeError, r"shapes\[1\] is 5"),
        (7, TypeError, "a list of shapes, one per array, not 7"),
        ("ab", TypeError, "a list of shapes, one per array, not 'ab'"),
        ([(2, 2), (3, -1)], ValueError, "every extent must be an int >= 0"),
    ):
        with pytest.raises(error, match=match):
            memory.empty_group(dev, shapes, "f32")
    with pytest.raises(ValueError, match="nope"):
        memory.empty_group(dev, [(2, 2)], "nope")
    assert drv.calls == []
    assert memory.empty_group(dev, [], "f32") == [] and drv.calls == []


def test_a_free_waits_for_the_streams_recorded_on_it(drv):
    dev = FakeDevice()
    a = memory.DeviceArray(dev, (16,), "u8", stream=7)
    a.record_stream(9)
    a.record_stream(9)  # once is enough
    a.record_stream(7)  # its own stream needs no word
    drv.calls.clear()
    address = a.address
    a.close()
    assert drv.calls == [("record", 9), ("wait", 7, "event"), ("free", address, 7, "relaxed")]


def test_a_free_during_a_capture_waits_for_the_capture_to_end(drv):
    dev = FakeDevice()
    a = memory.DeviceArray(dev, (16,), "u8")  # the legacy default stream
    drv.capturing[0] = CUresult.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT  # another stream captures, globally
    address = a.address
    a.close()
    assert not any(c[0] == "free" for c in drv.calls) and dev.memory_pool.deferred == 1
    b = memory.DeviceArray(dev, (16,), "u8", stream=7)  # still capturing: still held
    assert dev.memory_pool.deferred == 1
    drv.capturing.clear()
    dev.memory_pool.release_deferred()
    assert ("free", address, 0, "relaxed") in drv.calls and dev.memory_pool.deferred == 0
    b.close()


def test_an_array_made_in_a_capture_is_freed_in_it_or_left_to_its_graph(drv):
    dev = FakeDevice()
    pool = dev.memory_pool
    graph_memory = pool.begin_capture(7)  # a runtime.Graph captures stream 7
    drv.capturing[7] = Status.CU_STREAM_CAPTURE_STATUS_ACTIVE
    a = memory.DeviceArray(dev, (16,), "u8", stream=7)  # an allocation node of the graph
    assert drv.calls[-1] == ("alloc", 16, 7, 0, "global")  # in the capture, as it is
    address = a.address
    a.close()  # a free node of the same graph
    assert drv.calls[-1] == ("free", address, 7, "global") and pool.deferred == 0
    kept = memory.DeviceArray(dev, (16,), "u8", stream=7)
    assert graph_memory.addresses == [kept.address]
    drv.capturing.clear()
    pool.end_capture(7)
    calls = len(drv.calls)
    kept_address = kept.address
    del kept  # past its capture: the graph's memory, which the graph still holds
    assert len(drv.calls) == calls and pool.deferred == 0
    graph_memory.last_launch[0] = pool_waits(7)  # as Graph.launch records it
    del graph_memory  # the graph goes too: given back after its last launch
    assert drv.calls[-1] == ("free", kept_address, 7, "relaxed")
    before = pool.begin_capture(7)  # a graph never launched allocated nothing to give back
    drv.capturing[7] = Status.CU_STREAM_CAPTURE_STATUS_ACTIVE
    memory.DeviceArray(dev, (16,), "u8", stream=7)
    pool.end_capture(7)
    drv.capturing.clear()
    calls = len(drv.calls)
    del before
    assert len(drv.calls) == calls
    drv.capturing[7] = Status.CU_STREAM_CAPTURE_STATUS_ACTIVE  # another library's capture
    foreign = memory.DeviceArray(dev, (16,), "u8", stream=7)
    drv.capturing.clear()
    calls = len(drv.calls)
    foreign.close()  # that graph's: not ours to free
    assert len(drv.calls) == calls


def pool_waits(stream):
    return pool.Waits(stream)


def test_out_of_memory_retries_once_after_the_pending_frees_then_names_the_size(drv):
    dev = FakeDevice()
    drv.fail_allocations = 1
    a = memory.DeviceArray(dev, (1024,), "f32", stream=7)
    assert [c[0] for c in drv.calls[-3:]] == ["alloc", "stream synchronize", "alloc"]  # not the device
    a.close()
    drv.fail_allocations = 2
    with pytest.raises(pool.DeviceOutOfMemory) as caught:
        memory.DeviceArray(dev, (3, 1 << 28), "bf16")
    assert isinstance(caught.value, MemoryError)
    message = str(caught.value)
    assert "cannot allocate 1,610,612,736 bytes (1.50 GiB) for a (3, 268435456) bf16 array" in message
    assert "on Fake GPU (device 0): 3.00 GiB of 140.00 GiB free" in message


def test_out_of_memory_in_a_capture_does_not_synchronize(drv):
    dev = FakeDevice()
    drv.capturing[7] = Status.CU_STREAM_CAPTURE_STATUS_ACTIVE
    drv.fail_allocations = 1
    with pytest.raises(pool.DeviceOutOfMemory):
        memory.DeviceArray(dev, (64,), "f32", stream=7)
    assert ("synchronize",) not in drv.calls


def test_without_pools_the_plain_calls(monkeypatch):
    fake = FakeDriver(pools=False)
    for module in (pool, memory, stream, _driver):
        monkeypatch.setattr(module, "driver", lambda: fake)
    dev = FakeDevice()
    assert not dev.memory_pool.stream_ordered and dev.memory_pool.reserved_bytes == 0
    a = memory.DeviceArray(dev, (8,), "f32")
    address = a.address
    a.close()
    assert fake.calls == [("cuMemAlloc", 32, 0), ("synchronize",), ("cuMemFree", address)]


def test_trim_and_close(drv):
    dev = FakeDevice()
    dev.memory_pool.trim(1 << 20)
    assert drv.calls[-1] == ("trim", 1 << 20)
    for bad in (-1, True, 1.5):
        with pytest.raises(ValueError, match="trim keeps a byte count >= 0"):
            dev.memory_pool.trim(bad)
    dev.memory_pool.close()
    assert drv.calls[-1] == ("destroy pool",)


def test_a_finalizer_that_fails_reports_and_does_not_raise(drv, capsys):
    dev = FakeDevice()
    a = memory.DeviceArray(dev, (8,), "f32", stream=7)

    def broken(*args):
        return (CUresult.CUDA_ERROR_OUT_OF_MEMORY,)

    drv.cuMemFreeAsync = broken
    a.close()  # the finalizer runs here
    assert "runtime: freeing a DeviceArray of device 0 failed" in capsys.readouterr().err


# --- the kind of array an op makes ----------------------------------------------------------


class FakeTensor:
    def __init__(self, shape, dtype="float32", index=0, stream_log=None):
        self.shape, self.dtype, self.index = shape, dtype, index
        self.device = f"cuda:{index}"
        self.stream_log = stream_log

    def get_device(self):
        return self.index

    def new_empty_strided(self, shape, strides):
        self.stream_log.append(("new_empty_strided", shape, strides, FakeTorch.current))
        return FakeTensor(shape, self.dtype, self.index, self.stream_log)

    def data_ptr(self):
        return 0x1000


class FakeTorch(types.ModuleType):
    current = 0
    Tensor = FakeTensor

    def __init__(self):
        super().__init__("torch")
        torch = self
        self._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda index: FakeTorch.current)

        class ExternalStream:
            def __init__(self, handle, device=None):
                self.handle = handle

        class StreamContext:
            def __init__(self, s):
                self.s, self.old = s, None

            def __enter__(self):
                self.old, FakeTorch.current = FakeTorch.current, self.s.handle

            def __exit__(self, *exc):
                FakeTorch.current = self.old

        self.cuda = types.SimpleNamespace(
            ExternalStream=ExternalStream,
            stream=StreamContext,
            default_stream=lambda device: ExternalStream(0),
        )
        del torch


def test_torch_in_torch_out_on_the_ops_stream(monkeypatch):
    fake = FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", fake)
    log = []
    like = FakeTensor((4, 6), stream_log=log)
    assert outputs.array_kind(like) == "torch"
    made, addresses = outputs.new_outputs(like, None, 0, [(4, 2), (4, 4)], ptxgen.resolve_dtype("f32"))
    assert [m.shape for m in made] == [(4, 2), (4, 4)] and addresses == [0x1000, 0x1000]
    assert log == [
        ("new_empty_strided", (4, 2), (2, 1), 0),
        ("new_empty_strided", (4, 4), (4, 1), 0),
    ]  # torch's current stream is the op's
    log.clear()
    outputs.new_outputs(like, None, 0x77, [(4, 2)], ptxgen.resolve_dtype("f32"))
    assert log == [("new_empty_strided", (4, 2), (2, 1), 0x77)]  # another stream: allocated as current there
    assert FakeTorch.current == 0
    log.clear()
    FakeTorch.current = 0x99  # a side stream is torch's current one; the op runs on the default
    outputs.new_outputs(like, None, 0, [(4, 2)], ptxgen.resolve_dtype("f32"))
    assert (
        log == [("new_empty_strided", (4, 2), (2, 1), 0)] and FakeTorch.current == 0x99
    )  # torch's default stream
    FakeTorch.current = 0


def test_anything_else_gets_the_devices_arrays():
    class Device:
        def __init__(self):
            self.made = []

        def empty_group(self, shapes, dtype, *, stream=None):
            self.made.append((shapes, dtype.name, stream))
            return [types.SimpleNamespace(ptr=0x2000 + i) for i, _ in enumerate(shapes)]

    dev = Device()

    class Numba:
        def __init__(self):
            self.__cuda_array_interface__ = {}

    assert outputs.array_kind(Numba()) == "device_array"
    _made, addresses = outputs.new_outputs(Numba(), dev, 0x77, [(3,), (5,)], ptxgen.resolve_dtype("bf16"))
    assert dev.made == [([(3,), (5,)], "bf16", 0x77)] and addresses == [0x2000, 0x2001]  # in one allocation


def test_an_allocation_that_would_break_another_streams_capture_is_refused(drv):
    dev = FakeDevice()
    drv.capturing[0] = CUresult.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
    with pytest.raises(_driver.CudaError, match="cuStreamIsCapturing"):
        memory.DeviceArray(dev, (16,), "u8")  # the legacy default stream
    assert not any(c[0] == "alloc" for c in drv.calls)
    memory.DeviceArray(dev, (16,), "u8", stream=7).close()  # another stream is fine


def test_held_back_frees_are_all_tried_and_wait_for_their_streams(drv, capsys):
    """Every held-back free is tried when the capture is over, a failing one is reported
    and does not lose the rest, and each still waits for the streams its array was
    recorded on; a free that would wait for a capturing stream is held back too."""
    dev = FakeDevice()
    arrays = [memory.DeviceArray(dev, (16,), "u8", stream=7) for _ in range(3)]
    arrays[1].record_stream(9)
    arrays[2].record_stream(9)
    addresses = [a.address for a in arrays]
    drv.capturing[7] = Status.CU_STREAM_CAPTURE_STATUS_ACTIVE  # made before: may not be freed in it
    for a in arrays[:2]:
        a.close()
    del drv.capturing[7]
    drv.capturing[9] = Status.CU_STREAM_CAPTURE_STATUS_ACTIVE  # its free would wait for a capture
    arrays[2].close()
    assert dev.memory_pool.deferred == 3 and not any(c[0] in ("record", "free") for c in drv.calls)
    drv.capturing.clear()
    real = drv.cuMemFreeAsync

    def first_fails(address, s):
        if address == addresses[0]:
            return (CUresult.CUDA_ERROR_OUT_OF_MEMORY,)
        return real(address, s)

    drv.cuMemFreeAsync = first_fails
    drv.calls.clear()
    dev.memory_pool.release_deferred()  # reports, never raises into the call that released
    assert "runtime: a held-back free on device 0 failed" in capsys.readouterr().err
    assert drv.calls == [
        ("record", 9), ("wait", 7, "event"), ("free", addresses[1], 7, "relaxed"),
        ("record", 9), ("wait", 7, "event"), ("free", addresses[2], 7, "relaxed"),
    ]  # fmt: skip
    assert dev.memory_pool.deferred == 0


def test_an_array_of_a_closed_stream_is_freed_after_its_last_event(drv, monkeypatch):
    dev = FakeDevice()

    class OwnStream:  # a runtime.Stream: open when the array is made, closed before it goes
        closed = False
        final_event = None

    own = OwnStream()
    monkeypatch.setattr(memory, "owning_stream", lambda handle: own if handle == 7 else None)
    a = memory.DeviceArray(dev, (16,), "u8", stream=7)
    own.closed, own.final_event = True, "last work"
    drv.calls.clear()
    address = a.address
    del a
    assert drv.calls == [("wait", 0, "last work"), ("free", address, 0, "relaxed")]


def test_cupy_results_are_made_on_the_ops_stream_through_the_stream_protocol(monkeypatch):
    """CuPy's results are made on like's device with the op's stream current, switching
    only what is not current already: nothing where both are (every call the C lane hands
    over), the stream alone where the device is current, else the device and the stream.
    The op's stream is the legacy default one as CuPy's null stream, another handle through
    ``Stream.from_external`` (the CUDA stream protocol), or through ``ExternalStream`` on a
    CuPy that has no ``from_external``."""
    current, devices, switched = [], [0], []

    class Stream:
        def __init__(self, ptr):
            self.ptr = ptr

        def __enter__(self):
            switched.append(("stream", self.ptr))
            current.append(self.ptr)

        def __exit__(self, *exc):
            current.pop()

        @staticmethod
        def from_external(obj):
            return Stream(obj.__cuda_stream__()[1])

    Stream.null = Stream(0)

    class Device:
        def __init__(self, ordinal):
            self.ordinal = ordinal

        def __enter__(self):
            switched.append(("device", self.ordinal))
            devices.append(self.ordinal)

        def __exit__(self, *exc):
            devices.pop()

    made = []
    cuda = types.SimpleNamespace(
        Device=Device,
        Stream=Stream,
        get_current_stream=lambda: Stream(current[-1] if current else 0),
        runtime=types.SimpleNamespace(getDevice=lambda: devices[-1]),
    )

    class Ndarray:  # made as cupy.empty makes it: ndarray(shape, dtype)
        def __init__(self, shape, dtype):
            made.append((shape, dtype, current[-1] if current else 0))
            assert devices[-1] == like.data.device_id  # on like's device
            self.shape, self.data = shape, types.SimpleNamespace(ptr=0x3000 + 0x100 * len(made))

        def transpose(self, axes):
            view = Ndarray.__new__(Ndarray)
            view.shape, view.data = tuple(self.shape[a] for a in axes), self.data
            return view

    fake = types.SimpleNamespace(cuda=cuda, ndarray=Ndarray)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    f32 = ptxgen.resolve_dtype("f32")
    like = Ndarray.__new__(Ndarray)
    like.data, like.dtype = types.SimpleNamespace(device_id=0), "float32"
    results = (((4, 2), (2, 1)), ((4, 4), (4, 1)))
    channels_last, cl_results = (0, 2, 3, 1), [((2, 3, 4, 5), (60, 1, 15, 3))]

    def make(handle, order=None, cases=results):
        before = list(current)
        made.clear(), switched.clear()
        arrays, addresses = outputs.outputs_of(like, None, handle, cases, f32, order)
        assert addresses == [a.data.ptr for a in arrays] and len(set(addresses)) == len(arrays)
        assert current == before and devices == [0]  # whatever was switched, switched back
        return arrays

    # (CuPy's current stream, the op's, where the results are made, what was switched)
    for cupys, handle, where, switches in (
        (0, 0, 0, []),
        (0, 1, 0, []),  # 0 and 1 both name the legacy default stream
        (0x55, 0, 0, [("stream", 0)]),  # the null stream made current
        (0x55, 1, 0, [("stream", 0)]),
        (0, 0x77, 0x77, [("stream", 0x77)]),  # through from_external
    ):
        current[:] = [cupys]
        make(handle)
        assert made == [((4, 2), "float32", where), ((4, 4), "float32", where)] and switched == switches
    del Stream.from_external
    cuda.ExternalStream = lambda handle: Stream(handle)  # a CuPy before 14
    current[:] = [0]
    make(0x88)
    assert [m[2] for m in made] == [0x88, 0x88] and switched == [("stream", 0x88)]
    like.data.device_id = 1  # another device than CuPy's current one: it, then the stream
    make(0x88)
    assert [m[2] for m in made] == [0x88, 0x88] and switched == [("device", 1), ("stream", 0x88)]
    (view,) = make(0, channels_last, cl_results)  # made in memory order, viewed in the input's
    assert made == [((2, 4, 5, 3), "float32", 0)] and view.shape == (2, 3, 4, 5)
    assert switched == [("device", 1), ("stream", 0)]
    like.data.device_id = 0
    (view,) = make(0, channels_last, cl_results)
    assert made == [((2, 4, 5, 3), "float32", 0)] and view.shape == (2, 3, 4, 5) and switched == []
