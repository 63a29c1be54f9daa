"""The compiled launch path (runtime._fastlaunch) without a GPU: C entry points that
record each call stand in for libcuda's. What it takes itself, it must pack exactly as
the Python path does; everything else must reach the Python path with nothing launched;
it must not leak, share buffers between threads or keep launchers alive."""

from __future__ import annotations

import gc
import re
import struct
import sys
import weakref
from types import SimpleNamespace

import pytest
from launch_util import (
    LAYOUTS,
    RecordingBinding,
    echo_kernel,
    errors_in_threads,
    extremes,
    reference_counts_after,
)
from test_runtime_cpu import CudaArrayLike, FakeDevice, function_for

import ptxgen
import runtime
from ptxgen.kernels import FastcatVec
from runtime import launch
from runtime.layout import ArgumentLayout
from runtime.memory import DeviceArray

pytestmark = pytest.mark.skipif(
    bool(launch.compiled_launch_available()), reason=launch.compiled_launch_available() or "built"
)

K = ptxgen.ChannelCatBackward("f32", 128)  # dy, dx, chunk_c, c_total, chunk_offset; footprints


def compiled(kernel, **options):
    binding = RecordingBinding(ArgumentLayout(kernel.arg_names, kernel.arg_types), compiled=True, **options)
    fn = function_for(kernel, binding)
    assert fn.launcher.compiled and fn.launch is fn.launcher.launch
    return fn, binding


def array(fn, index: int, nbytes: int, address: int) -> DeviceArray:
    """A DeviceArray as the launcher sees one: its class, launch key, address and size."""
    param = fn.launcher.params[index]
    a = DeviceArray.__new__(DeviceArray)
    a.device, a.shape, a.nbytes, a.address = fn.device, (nbytes // param.itemsize,), nbytes, address
    a._ptr, a._dtype, a._open, a._memory = address, param.dtype, True, None
    a.launch_key = param.key if nbytes else None
    return a


def seed_args(fn, rows: int = 8, dx_rows: int | None = None):
    """dy of ``rows`` × 32 f32 and dx of ``dx_rows`` × 16, for the chunk at channel 16."""
    dy = array(fn, 0, rows * 32 * 4, 0x10000)
    dx = array(fn, 1, (rows if dx_rows is None else dx_rows) * 16 * 4, 0x90000)
    return (dy, dx, 16, 32, 16)


# --- what it takes, it packs as the Python path does ----------------------------------


@pytest.mark.parametrize("name", LAYOUTS)
def test_the_c_path_hands_the_driver_the_bytes_the_python_path_does(name):
    kernel = echo_kernel(LAYOUTS[name])
    fn, binding = compiled(kernel)
    for which in range(3):
        values = tuple(extremes(t)[(which + i) % 3] for i, t in enumerate(kernel.arg_types))
        fn.launch((3, 2, 1), kernel.block, values, stream=77, shared_mem=128)
        fn.launcher.python_launch((3, 2, 1), kernel.block, values, stream=77, shared_mem=128)
        c, python = binding.calls[-2:]
        assert (c.compiled, python.compiled) == (True, False)
        assert c.args[:9] == python.args[:9] == (0xF00D, 3, 2, 1, 32, 1, 1, 128, 77)
        assert c.slots == python.slots and c.args[10] == 0
        base = c.params[0] - fn.layout.offsets[0]
        assert [a - base for a in c.params] == list(fn.layout.offsets)


def test_device_arrays_ints_and_streams_stay_in_c():
    fn, binding = compiled(K)
    stream = runtime.Stream.__new__(runtime.Stream)
    stream.handle, stream.owned, stream._finalizer, stream.device = 0x99, False, None, FakeDevice()
    args = seed_args(fn)
    for s in (None, 77, stream, 77, stream):
        fn.launch(K.grid(8, 16), K.block, args, stream=s)
    fn.launch((2, 1, 1), (128, 1, 1), (0x10000, 0x90000, 16, 32, 16))
    assert all(c.compiled for c in binding.calls) and len(binding.calls) == 6
    assert [c.args[8] for c in binding.calls] == [0, 77, 0x99, 77, 0x99, 0]
    assert binding.calls[0].slots[:2] == [(0x10000).to_bytes(8, "little"), (0x90000).to_bytes(8, "little")]
    stream.close()
    with pytest.raises(ValueError, match="this Stream is closed"):
        fn.launch(K.grid(8, 16), K.block, args, stream=stream)
    assert len(binding.calls) == 6


class FakeTensor:
    """What the tensor test reads of a torch.Tensor, in the same order."""

    def __init__(self, dtype, nbytes, address, *, cuda=True, device=0, contiguous=True):
        self.dtype, self.nbytes, self.is_cuda = dtype, nbytes, cuda
        self._device, self._contiguous, self._address = device, contiguous, address

    def get_device(self):
        return self._device

    def is_contiguous(self):
        return self._contiguous

    def data_ptr(self):
        return self._address


def test_tensors_are_read_in_c_once_bound_and_anything_odd_goes_to_python(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)  # the fake stays bound: no real torch
    fn, binding = compiled(K)
    f32 = object()
    fn.launch.bind_torch(FakeTensor, (f32, f32))
    dx = array(fn, 1, 8 * 16 * 4, 0x90000)
    fn.launch(K.grid(8, 16), K.block, (FakeTensor(f32, 8 * 32 * 4, 0x10000), dx, 16, 32, 16))
    assert binding.calls[-1].compiled and binding.calls[-1].slots[0] == (0x10000).to_bytes(8, "little")
    odd = [
        FakeTensor(object(), 1024, 0x10000),  # another dtype
        FakeTensor(f32, 1024, 0x10000, cuda=False),
        FakeTensor(f32, 1024, 0x10000, device=1),
        FakeTensor(f32, 1024, 0x10000, contiguous=False),
        FakeTensor(f32, 0, 0x10000),  # empty
        FakeTensor(f32, 1024, 0x10002),  # misaligned for f32
        FakeTensor(f32, 512, 0x10000),  # shorter than the launch reads
    ]
    for tensor in odd:  # the Python path has no torch bound: each is refused there, by name
        with pytest.raises((TypeError, ValueError), match="argument 'dy'"):
            fn.launch(K.grid(8, 16), K.block, (tensor, dx, 16, 32, 16))
    assert len(binding.calls) == 1


def test_everything_else_reaches_the_python_path_unlaunched():
    """Lists, dicts, keywords, foreign arrays, bad values: the C path launches none of
    them itself; the Python path launches the good ones and raises for the rest."""
    fn, binding = compiled(K)
    good = (0x10000, 0x90000, 16, 32, 16)
    fn.launch([2, 1, 1], K.block, good)  # a list grid
    fn.launch((2, 1, 1), K.block, list(good))  # a list of arguments
    fn.launch((2, 1, 1), K.block, dict(zip(K.arg_names, good)))
    fn.launch((2, 1, 1), K.block, args=good)  # by keyword
    fn.launch((2, 1, 1), K.block, (CudaArrayLike(shape=(8, 32)), 0x90000, 16, 32, 16))
    assert [c.compiled for c in binding.calls] == [False] * 5
    assert len({tuple(c.slots[2:]) for c in binding.calls}) == 1
    bad = [
        (((2, 1, 1), (64, 1, 1), good), ValueError, "block"),
        (((0, 1, 1), K.block, good), ValueError, "dimension x = 0"),
        (((2, 1, 1), K.block, (0x10000, 0x90000, True, 32, 16)), TypeError, "chunk_c"),
        (((2, 1, 1), K.block, (0x10000, 0x90000, -1, 32, 16)), ValueError, "chunk_c"),
        (((2, 1, 1), K.block, (-8, 0x90000, 16, 32, 16)), ValueError, "dy"),
        (((2, 1, 1), K.block, (1 << 64, 0x90000, 16, 32, 16)), ValueError, "dy"),
        (((2, 1, 1), K.block, (0x10000, 0x90000, 16, 32, 17)), ValueError, "exceeds c_total"),
        (((2, 1, 1), K.block, good[:4]), TypeError, "takes 5 arguments"),
    ]
    for (grid, block, args), error, message in bad:
        with pytest.raises(error, match=message):
            fn.launch(grid, block, args)
    with pytest.raises(ValueError, match="shared"):
        fn.launch((2, 1, 1), K.block, good, shared_mem=-1)
    with pytest.raises(TypeError):
        fn.launch((2, 1, 1), K.block, good, streams=0)
    assert len(binding.calls) == 5


def test_footprints_are_checked_in_c_and_refused_by_the_python_path():
    fn, binding = compiled(K)
    fn.launch(K.grid(8, 16), K.block, seed_args(fn))
    fn.launch(K.grid(4, 16), K.block, seed_args(fn))  # another grid: asked again, fits
    assert [c.compiled for c in binding.calls] == [True, True]
    message = "argument 'dx' (*mut f32): this launch writes 128 elements (512 bytes) from it, but the array holds 64"
    with pytest.raises(ValueError, match=re.escape(message)):
        fn.launch(K.grid(8, 16), K.block, seed_args(fn, dx_rows=4))
    with pytest.raises(ValueError, match="exceeds c_total"):  # the footprint refuses the scalars
        fn.launch(K.grid(8, 16), K.block, (*seed_args(fn)[:4], 17))
    dy, dx, *_ = seed_args(fn)
    fn.launch(K.grid(8, 8), K.block, (dy, dx, 8, 32, 24))  # other scalars: asked again
    fn.launch(K.grid(8, 16), K.block, seed_args(fn))  # and back
    assert len(binding.calls) == 4 and all(c.compiled for c in binding.calls)
    a = array(fn, 0, 8 * 32 * 4, 0x10002)  # an f32 array at an address no f32 can have
    with pytest.raises(ValueError, match="aligned to 4 bytes"):
        fn.launch(K.grid(8, 16), K.block, (a, dx, 16, 32, 16))


def test_prepared_and_raw_launches_are_compiled_and_keep_their_contracts():
    fn, binding = compiled(K)
    prepared = fn.prepare(K.grid(8, 16), K.block, stream=77)
    assert prepared.grid == K.grid(8, 16) and prepared.block == K.block and prepared.stream == 77
    prepared(*seed_args(fn))
    prepared.raw(0x10000, 0x90000, 16, 32, 16)
    assert [(c.compiled, c.args[8]) for c in binding.calls] == [(True, 77), (True, 77)]
    assert binding.calls[0].slots == binding.calls[1].slots
    with pytest.raises(ValueError, match="holds 64"):
        prepared(*seed_args(fn, dx_rows=4))
    with pytest.raises(struct.error):  # raw packs what struct packs: -1 is no u64
        prepared.raw(-1, 0x90000, 16, 32, 16)
    prepared.raw(0x10000, 0x90000, -5, 32, 16)  # raw is trusted: an i32 read as u32, packed as it is
    assert binding.calls[-1].compiled and binding.calls[-1].slots[2] == (-5).to_bytes(
        4, "little", signed=True
    )
    fn.launcher.close()
    for call in (lambda: prepared(*seed_args(fn)), lambda: prepared.raw(0x10000, 0x90000, 16, 32, 16)):
        with pytest.raises(ValueError, match="module is closed"):
            call()
    with pytest.raises(ValueError, match="module is closed"):
        fn.launch(K.grid(8, 16), K.block, seed_args(fn))
    # closed for good: the C launch cannot be opened again (its module may be unloaded)
    assert fn.launcher.launch.open is False
    with pytest.raises(AttributeError):
        fn.launcher.launch.open = True


def test_a_failed_c_launch_is_taken_over_by_the_python_path():
    """The driver refuses the C call (no context current on a fresh thread, say): the
    Python path launches again, activating the context where its own call fails."""
    fn, binding = compiled(K)
    binding.c_result = 201  # CUDA_ERROR_INVALID_CONTEXT
    fn.launch(K.grid(8, 16), K.block, seed_args(fn))
    fn.prepare(K.grid(8, 16), K.block).raw(0x10000, 0x90000, 16, 32, 16)
    assert [c.compiled for c in binding.calls] == [True, False, True, False]
    assert binding.calls[0].slots == binding.calls[1].slots


def test_dependent_kernels_go_through_ex_with_the_attribute():
    """Where the binding has cuLaunchKernelEx, as the Python path does; where it has not
    (cffi, ctypes), plainly, as the Python path does: which path takes a call never
    changes how the kernel is launched."""
    kernel = FastcatVec(direction="backward", width=4, dependent_launch=True)
    fn, binding = compiled(kernel, ex=True)
    assert fn.launcher.dependent_launch
    args = (0x1000, 64, 9, 4, 0x9000, 16)
    fn.launch((4, 1, 1), kernel.block, args, stream=77)
    fn.prepare((4, 1, 1), kernel.block, stream=77)(*args)
    fn.prepare((8, 1, 1), kernel.block).raw(*args)
    assert [(c.via, c.compiled, c.attributes) for c in binding.calls] == [
        ("cuLaunchKernelEx", True, ((launch.PROGRAMMATIC_STREAM_SERIALIZATION, 1),))
    ] * 3
    block = kernel.block
    assert [c.args[1:9] for c in binding.calls] == [(4, 1, 1, *block, 0, 77)] * 2 + [(8, 1, 1, *block, 0, 0)]
    fn, binding = compiled(kernel, ex=False)  # no Ex call in the binding
    assert not fn.launcher.dependent_launch
    fn.launch((4, 1, 1), kernel.block, args)
    fn.launcher.python_launch((4, 1, 1), kernel.block, args)
    assert [(c.via, c.compiled, c.attributes) for c in binding.calls] == [
        ("cuLaunchKernel", True, ()),
        ("cuLaunchKernel", False, ()),
    ]
    plain = FastcatVec(direction="backward", width=4)
    fn, binding = compiled(plain, ex=True)
    fn.launch((4, 1, 1), plain.block, args)
    assert [(c.via, c.attributes) for c in binding.calls] == [("cuLaunchKernel", ())]


def test_a_remembered_stream_handle_is_dropped_once_the_runtime_forgets_it():
    """An int handle (or any stream object) is remembered with its handle, but used again
    only while the runtime knows the handle: once the Stream that made it is closed, the
    C path hands the call to the Python path, which refuses it."""
    from runtime import stream as streams

    fn, binding = compiled(K)
    handle = streams.trust_stream_handle(0x5555_0000)
    args = seed_args(fn)
    fn.launch(K.grid(8, 16), K.block, args, stream=handle)
    assert binding.calls[-1].compiled and binding.calls[-1].args[8] == handle
    streams._forget_stream_handle(handle)  # what Stream.close() does
    with pytest.raises(ValueError, match="not a stream this runtime knows"):
        fn.launch(K.grid(8, 16), K.block, args, stream=handle)
    assert len(binding.calls) == 1


class _FinalizingStream:
    """A stream object whose finalizer launches, on another stream."""

    def __init__(self, handle, on_del=None):
        self.cuda_stream = handle
        self.on_del = on_del

    def __del__(self):
        if self.on_del:
            self.on_del()


def test_a_finalizer_that_launches_finds_the_remembered_stream_whole():
    """The remembered stream object and its handle are replaced together: a launch made
    from the old object's finalizer (while it is being replaced) goes on the stream it
    names."""
    fn, binding = compiled(K)
    args = seed_args(fn)
    second = _FinalizingStream(0x2222)
    first = _FinalizingStream(0x1111, on_del=lambda: fn.launch(K.grid(8, 16), K.block, args, stream=second))
    fn.launch(K.grid(8, 16), K.block, args, stream=first)
    del first  # only the C path remembers it now
    fn.launch(K.grid(8, 16), K.block, args, stream=second)
    assert [c.args[8] for c in binding.calls] == [0x1111, 0x2222, 0x2222]


def test_an_interrupt_while_reading_an_argument_is_not_lost(monkeypatch):
    """A KeyboardInterrupt raised while the C path reads a stream object reaches the
    caller, with nothing launched; an ordinary error there goes to the Python path."""

    class Interrupting:
        @property
        def cuda_stream(self):
            raise KeyboardInterrupt

    fn, binding = compiled(K)
    with pytest.raises(KeyboardInterrupt):
        fn.launch(K.grid(8, 16), K.block, seed_args(fn), stream=Interrupting())
    assert binding.calls == []


def test_the_attribute_number_is_the_drivers():
    driver = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is part of the runtime extra")
    attribute = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert int(attribute) == launch.PROGRAMMATIC_STREAM_SERIALIZATION


def test_int_pointers_go_to_python_while_the_driver_is_asked(monkeypatch):
    monkeypatch.setattr(launch, "int_pointer_extent", lambda param, address: 1 << 20)
    fn, binding = compiled(K)
    old = runtime.check_int_pointers(True)
    try:
        fn.launch(K.grid(8, 16), K.block, (0x10000, 0x90000, 16, 32, 16))
        fn.launch(K.grid(8, 16), K.block, seed_args(fn))  # arrays stay in C
    finally:
        runtime.check_int_pointers(old)
    fn.launch(K.grid(8, 16), K.block, (0x10000, 0x90000, 16, 32, 16))
    assert [c.compiled for c in binding.calls] == [False, True, True]


# --- it must not leak, share buffers or keep launchers alive ------------------------------


def test_threads_launching_at_once_never_share_a_buffer():
    fn, binding = compiled(K)
    prepared = fn.prepare(K.grid(8, 16), K.block)

    def worker(t: int) -> None:
        for i in range(300):
            dy, dx = 0x10000 + 0x1000 * t, 0x90000 + i * 64
            if i % 2:
                fn.launch(K.grid(8, 16), K.block, (dy, dx, 16, 32, 16))
            else:
                prepared.raw(dy, dx, 16, 32, 16)

    assert not errors_in_threads(worker, 8)
    assert len(binding.calls) == 8 * 300 and all(c.compiled for c in binding.calls)
    seen = {
        (int.from_bytes(c.slots[0], "little"), int.from_bytes(c.slots[1], "little")) for c in binding.calls
    }
    assert seen == {(0x10000 + 0x1000 * t, 0x90000 + i * 64) for t in range(8) for i in range(300)}


@pytest.mark.skipif(not hasattr(sys, "getrefcount"), reason="needs sys.getrefcount")
def test_no_reference_is_leaked_on_any_path(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)  # the fake stays bound: no real torch
    fn, binding = compiled(K)
    f32 = object()
    fn.launch.bind_torch(FakeTensor, (f32, f32))
    dy, dx, *_ = seed_args(fn)
    tensor = FakeTensor(f32, 8 * 32 * 4, 0x10000)
    stream = runtime.Stream.__new__(runtime.Stream)
    stream.handle, stream.owned, stream._finalizer, stream.device = 0x99, False, None, FakeDevice()
    grid, block, big = (
        K.grid(8, 16),
        (K.block[0], K.block[1], K.block[2]),
        10**30,
    )  # objects of this test's own
    prepared = fn.prepare(grid, block)
    calls = [
        lambda: fn.launch(grid, block, (dy, dx, 16, 32, 16), stream=stream),  # C
        lambda: fn.launch(grid, block, (tensor, dx, 16, 32, 16), stream=77),  # C, a tensor
        lambda: fn.launch(grid, block, [dy, dx, 16, 32, 16]),  # Python
        lambda: prepared(dy, dx, 16, 32, 16),  # C
        lambda: prepared.raw(0x10000, 0x90000, 16, 32, 16),  # C
    ]
    failing = [
        lambda: fn.launch(grid, block, (dy, dx, big, 32, 16)),  # out of range: Python raises
        lambda: fn.launch(grid, block, (dy, array(fn, 1, 64, 0x90000), 16, 32, 16)),  # short: Python raises
        lambda: prepared.raw(big, 0, 0, 0, 0),  # struct refuses it
    ]
    watched = (dy, dx, tensor, stream, grid, block, big, f32, prepared, fn.launch)
    before, after = reference_counts_after(
        watched, calls, failing, 500, (ValueError, TypeError, struct.error)
    )
    binding.calls.clear()
    assert after == before


def test_a_dropped_function_takes_its_compiled_launch_with_it():
    fn, _ = compiled(K)
    fn.prepare(K.grid(8, 16), K.block)
    gone = weakref.ref(fn.launcher)
    fast = weakref.ref(fn.launch)
    del fn
    gc.collect()
    assert gone() is None and fast() is None


def test_without_the_extension_the_python_path_launches_alone(monkeypatch):
    """Where runtime._fastlaunch was not built (no C compiler at install): launchers are
    the Python launch functions, and asking for the compiled path says why not."""
    monkeypatch.setattr(launch, "_fastlaunch", None)
    monkeypatch.setattr(
        launch, "_fastlaunch_missing", "it was not compiled at install (no C compiler found?)"
    )
    assert launch.compiled_launch_available().startswith("runtime._fastlaunch is not available:")
    assert launch.compiled_ops() is None and launch.compiled_steps(0, (), lambda: None) is None
    binding = RecordingBinding(ArgumentLayout(K.arg_names, K.arg_types), compiled=True)
    fn = function_for(K, binding)
    assert not fn.launcher.compiled and fn.launch is fn.launcher.python_launch
    fn.launch(K.grid(8, 16), K.block, (0x10000, 0x90000, 16, 32, 16))
    assert [c.compiled for c in binding.calls] == [False]
    with pytest.raises(
        ImportError, match=re.escape("no compiled launch: runtime._fastlaunch is not available:")
    ):
        fn.make_launcher(binding, compiled=True)


def test_a_build_of_another_source_is_not_used(monkeypatch):
    """An extension left from an older _fastlaunch.c (say, an editable install whose C
    file changed since) is refused at import, and the reason names both hashes."""

    class Built:
        SOURCE_SHA256 = "0" * 64

    source = launch.fastlaunch_source_sha256()
    assert source is not None and len(source) == 64
    why = launch._stale_build(Built)
    assert why.startswith("the build is stale, made from another runtime/_fastlaunch.c (build 000000000000")
    assert f"source {source[:12]}" in why and "pip install -e ." in why
    Built.SOURCE_SHA256 = source
    assert launch._stale_build(Built) == ""
    if launch._fastlaunch is not None:  # the build the suite runs is of this very source
        assert source == launch._fastlaunch.SOURCE_SHA256


# --- the ops' steps in C (runtime._fastlaunch.Steps) ----------------------------------


def _plan_of_two_steps(fn):
    """A compiled plan as runtime.op_plans holds one, of two seed launches over pieces 0 and 1
    of a wide array: the recipe ``op_plans._launch_function`` turns into Steps."""
    from runtime.plan import WIDE, Ptr

    steps = [
        SimpleNamespace(
            args=(Ptr(WIDE, 64), Ptr(1), 16, 32, 16), grid=K.grid(8, 16), block=K.block, shared_mem=0
        ),
        SimpleNamespace(
            args=(Ptr(WIDE), Ptr(0, 8), 4, 32, 0), grid=K.grid(8, 4), block=K.block, shared_mem=0
        ),
    ]
    problem = SimpleNamespace(extents=(4, 16), pieces=2)
    return SimpleNamespace(plan=SimpleNamespace(problem=problem), steps=[(fn, s) for s in steps])


def test_the_ops_steps_launch_in_c_what_their_python_function_launches():
    """The launch function of a plan whose raw launches are compiled is a Steps object:
    its driver calls are byte for byte those of the Python function it keeps as
    ``python``, and reading the recipe back gives the values the function computes."""
    from runtime import op_plans

    fn, binding = compiled(K)
    steps = op_plans._launch_function(_plan_of_two_steps(fn), 77)
    assert steps.__class__.__name__ == "Steps" and callable(steps.python)
    steps(0x10000, 0x90000, 0xA0000)
    steps.python(0x10000, 0x90000, 0xA0000)
    c, python = binding.calls[:2], binding.calls[2:]
    assert [call.args[:9] for call in c] == [call.args[:9] for call in python]
    assert [call.slots for call in c] == [call.slots for call in python]
    first = [int.from_bytes(s, "little") for s in c[0].slots]
    second = [int.from_bytes(s, "little") for s in c[1].slots]
    assert first == [0x10000 + 64, 0xA0000, 16, 32, 16]
    assert second == [0x10000, 0x90000 + 8, 4, 32, 0]
    assert all(call.args[8] == 77 and call.compiled for call in binding.calls)


def test_the_ops_steps_hand_python_whatever_c_does_not_take():
    """Not plain ints: the Python function takes the call whole, and raises its error.
    An address plus an offset past 64 bits, a failed driver call or a closed module: that
    step goes to its prepared raw launch as ints (the steps before it stay launched, as in
    the Python function), which launches it through the Python path or raises there."""
    from runtime import op_plans

    fn, binding = compiled(K)
    steps = op_plans._launch_function(_plan_of_two_steps(fn), 77)
    for args in (("x", 1, 2), (1, 2), (1, 2, 3, 4), (-1, 2, 3), (2**64, 2, 3)):
        with pytest.raises(Exception) as c_error:
            steps(*args)
        by_c, binding.calls[:] = list(binding.calls), []
        with pytest.raises(Exception) as python_error:
            steps.python(*args)
        assert (type(c_error.value), str(c_error.value)) == (
            type(python_error.value),
            str(python_error.value),
        )
        assert [c.slots for c in by_c] == [c.slots for c in binding.calls]  # (-1: 63 launches, then -1 fails)
        binding.calls.clear()

    top = 2**64 - 32  # the first step's wide + 64 passes 64 bits; pieces fine
    with pytest.raises(struct.error) as c_error:
        steps(top, 0x90000, 0xA0000)
    with pytest.raises(struct.error) as python_error:
        steps.python(top, 0x90000, 0xA0000)
    assert str(c_error.value) == str(python_error.value) and binding.calls == []

    binding.c_result = 201  # CUDA_ERROR_INVALID_CONTEXT: C fails once, the Python path launches
    steps(0x10000, 0x90000, 0xA0000)
    assert [c.compiled for c in binding.calls] == [True, False, True, False]
    assert (
        binding.calls[0].slots == binding.calls[1].slots and binding.calls[2].slots == binding.calls[3].slots
    )
    binding.c_result, binding.calls[:] = None, []

    fn.launcher.close()
    with pytest.raises(ValueError, match="module is closed"):
        steps(0x10000, 0x90000, 0xA0000)
    assert binding.calls == []


def test_steps_are_made_only_of_compiled_raw_launches():
    """Steps takes a recipe per parameter of each step's compiled raw launch; anything else
    is refused when it is made, and compiled_steps leaves such plans to the Python function."""
    fn, _ = compiled(K)
    raw = fn.prepare(K.grid(8, 16), K.block).raw
    python = fn.launcher.python_launch  # any callable will do as the fallback here
    ok = ((0, 0), (1, 4), 16, 32, 16)
    assert launch.compiled_steps(1, [(raw, ok)], python) is not None
    assert launch.compiled_steps(1, [(lambda *a: None, ok)], python) is None
    assert launch.compiled_steps(16, [(raw, ok)], python) is None  # more pieces than C holds
    steps_type = type(launch.compiled_steps(1, [(raw, ok)], python))
    bad = [
        ((raw, ok[:4]),), ((raw, ((2, 0), *ok[1:])),), ((raw, ((0, -1), *ok[1:])),), ((raw, (2**64, *ok[1:])),),
        ((fn.prepare(K.grid(8, 16), K.block), ok),),  # a checked prepared launch: no raw
        ([raw, ok],),  # a step that is no tuple (PyArg_Parse would lend out what a list may drop)
    ]  # fmt: skip
    for made in bad:
        with pytest.raises((TypeError, ValueError)):
            steps_type(1, made, python)
    count = sys.getrefcount(raw)
    for made in bad:  # the first step made, the second refused: the first is let go
        with pytest.raises((TypeError, ValueError)):
            steps_type(1, ((raw, ok), *made), python)
    assert sys.getrefcount(raw) == count
    for recipe in (
        ((0, 0), (2, 4), 16, 32, 16),
        ((0, -8), (1, 4), 16, 32, 16),
        ((0, 0), (1, 4), 2**64, 32, 16),
    ):
        assert launch.compiled_steps(1, [(raw, recipe)], python) is None  # the Python function's to refuse


@pytest.mark.skipif(not hasattr(sys, "getrefcount"), reason="needs sys.getrefcount")
@pytest.mark.parametrize("c_result", [None, 201])
def test_the_ops_steps_leak_no_reference(c_result):
    """Launched in C, refused (to Python, which raises), and, with the driver refusing the C
    call, launched by the Python path: every object keeps its reference count."""
    from runtime import op_plans

    fn, binding = compiled(K)
    binding.c_result = c_result
    steps = op_plans._launch_function(_plan_of_two_steps(fn), 77)
    raws = [raw for raw, _, _ in steps.python._steps]  # the prepared raw launches Steps holds
    assert len(raws) == 2 and all(r.__class__.__name__ == "Prepared" for r in raws)
    w, a, b, top = 0x10000, 0x90000, 0xA0000, 2**64 - 32
    watched = (steps, steps.python, w, a, b, top, *raws)
    before, after = reference_counts_after(
        watched, [lambda: steps(w, a, b)], [lambda: steps(top, a, b), lambda: steps("x", a, b)], 300,
        (TypeError, struct.error),
    )  # fmt: skip
    binding.calls.clear()
    assert after == before
