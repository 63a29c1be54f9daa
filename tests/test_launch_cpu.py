"""The launch path without a GPU: the parameter buffer byte by byte against what ptxas
and a C compiler lay out, the checks, prepared launches and the bindings."""

from __future__ import annotations

import ctypes
import os
import re
import struct
import subprocess
import sys
from types import SimpleNamespace

import pytest
from conftest import ROOT
from launch_util import (
    LAYOUTS,
    RecordingBinding,
    c_struct,
    echo_kernel,
    errors_in_threads,
    extremes,
    kparam_info,
)
from test_runtime_cpu import CudaArrayLike, FakeDevice, function_for

import ptxgen
import runtime
from ptxgen import toolchain
from runtime import launch as launch_module
from runtime.errors import CudaError
from runtime.layout import ArgumentLayout

# Every test runs through the Python launch functions and the compiled path.
pytestmark = pytest.mark.usefixtures("launch_path")

K = ptxgen.ChannelCatBackward("f32", 128)


# --- the layout against ptxas and the C struct -----------------------------------------


@pytest.fixture(scope="module")
def assembled():
    kernels = {name: echo_kernel(spec) for name, spec in LAYOUTS.items()}
    results = toolchain.assemble_many([(k.source, k.target) for k in kernels.values()])
    return {name: (k, r) for (name, k), r in zip(kernels.items(), results)}


@pytest.mark.parametrize("name", LAYOUTS)
def test_layout_is_what_ptxas_compiled(assembled, name):
    kernel, result = assembled[name]
    assert not isinstance(result, Exception), result
    layout = ArgumentLayout(kernel.arg_names, kernel.arg_types)
    compiled = kparam_info(result.cubin, kernel.entry_point_name)
    assert [compiled[i] for i in range(len(compiled))] == [(s.offset, s.size) for s in layout.slots]


@pytest.mark.parametrize("name", LAYOUTS)
def test_layout_is_the_c_struct(name):
    kernel = echo_kernel(LAYOUTS[name])
    layout = ArgumentLayout(kernel.arg_names, kernel.arg_types)
    struct_type = c_struct(kernel.arg_types)
    fields = [getattr(struct_type, f"p{i}") for i in range(len(kernel.arg_types))]
    assert [(f.offset, f.size) for f in fields] == [(s.offset, s.size) for s in layout.slots]
    # The buffer ends with the last parameter: the C struct's tail padding is not part of it
    # (the driver refuses a CU_LAUNCH_PARAM_BUFFER_SIZE that counts it).
    assert layout.size == layout.struct.size == fields[-1].offset + fields[-1].size
    assert ctypes.sizeof(struct_type) - layout.size < max(s.align for s in layout.slots)


@pytest.mark.parametrize("name", LAYOUTS)
@pytest.mark.parametrize("which", [0, 1, 2])
def test_packed_bytes_are_the_c_struct_bytes(name, which):
    kernel = echo_kernel(LAYOUTS[name])
    layout = ArgumentLayout(kernel.arg_names, kernel.arg_types)
    values = [extremes(t)[(which + i) % 3] for i, t in enumerate(kernel.arg_types)]
    assert layout.pack(values) == bytes(c_struct(kernel.arg_types)(*values))[: layout.size]


@pytest.mark.parametrize("name", LAYOUTS)
def test_a_launch_hands_the_driver_the_packed_buffer(name, launch_path):
    """What cuLaunchKernel reads through the void**: one address per parameter, into one
    buffer at the compiled offsets, each holding its value in its C type."""
    kernel = echo_kernel(LAYOUTS[name])
    binding = RecordingBinding(ArgumentLayout(kernel.arg_names, kernel.arg_types))
    fn = function_for(kernel, binding)
    for which in range(3):
        values = tuple(extremes(t)[(which + i) % 3] for i, t in enumerate(kernel.arg_types))
        fn.launch((3, 2, 1), kernel.block, values, stream=77, shared_mem=128)
        call = binding.calls[-1]
        assert call.compiled == (launch_path == "compiled")  # made by the path under test
        assert call.args[:9] == (0xF00D, 3, 2, 1, 32, 1, 1, 128, 77) and call.args[10] == 0
        base = call.params[0] - fn.layout.offsets[0]
        assert [a - base for a in call.params] == list(fn.layout.offsets)
        for slot, raw, value, t in zip(fn.layout.slots, call.slots, values, kernel.arg_types):
            assert raw == value.to_bytes(slot.size, "little", signed=value < 0), (slot, t)


# --- the checks ----------------------------------------------------------------------


def test_an_i32_read_as_u32_is_refused_negative_at_launch_and_past_its_range_by_the_packing():
    """A negative i32 packs, and the kernel would read it as a huge .u32: a launch tests
    that bound itself, in parameter order. The bound struct enforces (2**31) is left to
    the packing, so its refusal comes after every other argument's check. pack_args,
    which packs nothing, tests both bounds in parameter order; prepared.raw tests none."""
    kernel = echo_kernel(LAYOUTS["i32-as-u32 ptr"])  # p0: i32 read as .u32, p1: *f64, then out
    binding = RecordingBinding(ArgumentLayout(kernel.arg_names, kernel.arg_types))
    fn = function_for(kernel, binding)
    negative = re.escape(
        "argument 'p0' (i32, read by the kernel as .u32) = -1 is out of range [0, 2147483647]"
    )
    past = re.escape("argument 'p0' (i32, read by the kernel as .u32) = 2147483648 is out of range")
    no_pointer = r"argument 'p1' .* got None"
    prepared = fn.prepare(1, kernel.block)
    for launch in (lambda *a: fn.launch(1, kernel.block, a), prepared):
        with pytest.raises(ValueError, match=negative):
            launch(-1, 0x100, 0x200)
        with pytest.raises(ValueError, match=negative):
            launch(-1, None, 0x200)  # tested where it stands: before p1
        with pytest.raises(ValueError, match=past):
            launch(2**31, 0x100, 0x200)
        with pytest.raises(TypeError, match=no_pointer):
            launch(2**31, None, 0x200)  # the packing's refusal comes after p1's check
    assert binding.calls == []
    with pytest.raises(ValueError, match=past):
        fn.pack_args((2**31, None, 0x200))
    with pytest.raises(ValueError, match=negative):
        fn.pack_args((-1, None, 0x200))
    assert fn.pack_args((2**31 - 1, 0x100, 0x200)) == [2**31 - 1, 0x100, 0x200]
    prepared.raw(-1, 0x100, 0x200)  # trusted: struct packs -1 as an i32
    assert len(binding.calls) == 1 and binding.calls[0].slots[0] == b"\xff" * 4


def test_the_python_launch_takes_what_the_compiled_path_hands_it(launch_path):
    """The C extension calls python_launch with the call's own arguments (grid, block,
    args, and stream and shared_mem by keyword), and a prepared launch's Python
    functions with the arguments alone; a prepared launch given the wrong count says
    how many it takes."""
    binding = RecordingBinding(ArgumentLayout(K.arg_names, K.arg_types))
    fn = function_for(K, binding)
    python = fn.launcher.python_launch
    python((2, 1, 1), (128, 1, 1), [0x100, 0x200, 1, 4, 3], stream=5, shared_mem=16)
    python((2, 1, 1), (128, 1, 1), {"dy": 0x100, "dx": 0x200, "chunk_c": 1, "c_total": 4, "chunk_offset": 3})
    assert [c.args[:9] for c in binding.calls] == [
        (0xF00D, 2, 1, 1, 128, 1, 1, 16, 5),
        (0xF00D, 2, 1, 1, 128, 1, 1, 0, 0),
    ]
    with pytest.raises(TypeError, match="unexpected keyword argument 'streams'"):
        python((2, 1, 1), (128, 1, 1), (0x100, 0x200, 1, 4, 3), streams=5)
    prepared = fn.prepare(2, 128)
    for call in (prepared, prepared.raw):
        with pytest.raises(
            TypeError, match=r"takes 5 arguments \(dy, dx, chunk_c, c_total, chunk_offset\), got 4"
        ):
            call(0x100, 0x200, 1, 4)
        with pytest.raises(TypeError, match="got 6: 1 too many"):
            call(0x100, 0x200, 1, 4, 3, 9)
    with pytest.raises(struct.error):
        prepared.raw(0x100, 0x200, 1.5, 4, 3)  # trusted: what struct refuses, it raises
    assert len(binding.calls) == 2
    prepared.raw(0x100, 0x200, 1, 4, 3)
    assert len(binding.calls) == 3
    if launch_path == "python":  # the refused call's buffer went back to the pool (C packs on its stack)
        assert binding.calls[2].args[9] == binding.calls[1].args[9]


@pytest.mark.parametrize(
    "types",
    [(), (ptxgen.Scalar("u64"),), (ptxgen.Pointer("u8"),), (ptxgen.Scalar("i32"), ptxgen.Scalar("i64"))],
    ids=["none", "one scalar", "one pointer", "scalars only"],
)
def test_any_parameter_count_launches(types):
    kernel = SimpleNamespace(
        entry_point_name="k", block=(64, 1, 1), block_size=64,
        arg_types=types, arg_names=tuple(f"x{i}" for i in range(len(types))),
    )  # fmt: skip
    binding = RecordingBinding(ArgumentLayout(kernel.arg_names, kernel.arg_types))
    fn = function_for(kernel, binding)
    values = [t.max if not t.is_pointer else 0x40 for t in types]
    fn.launch(1, 64, values)
    fn.launch(1, 64, dict(zip(kernel.arg_names, values)))
    assert [c.slots for c in binding.calls] == [
        [v.to_bytes(t.size, "little") for v, t in zip(values, types)]
    ] * 2
    with pytest.raises(TypeError, match=f"takes {len(types)} arguments"):
        fn.launch(1, 64, [*values, 1])


def test_a_mutated_grid_list_is_checked_again():
    binding = RecordingBinding(ArgumentLayout(K.arg_names, K.arg_types))
    fn = function_for(K, binding)
    grid = [4, 1, 1]
    fn.launch(grid, K.block, (0, 0, 1, 1, 0))
    grid[0] = 0
    with pytest.raises(ValueError, match="dimension x = 0"):
        fn.launch(grid, K.block, (0, 0, 1, 1, 0))
    grid[0] = 9
    fn.launch(grid, K.block, (0, 0, 1, 1, 0))
    assert [c.args[1] for c in binding.calls] == [4, 9]


def test_the_same_grid_tuple_is_reused_and_a_new_one_checked():
    binding = RecordingBinding(ArgumentLayout(K.arg_names, K.arg_types))
    fn = function_for(K, binding)
    grid, block = (5, 1, 1), (128, 1, 1)
    for _ in range(3):
        fn.launch(grid, block, (0, 0, 1, 1, 0))
    with pytest.raises(TypeError, match="grid must be an int or a tuple"):
        fn.launch((5.0, 1, 1), block, (0, 0, 1, 1, 0))
    with pytest.raises(ValueError, match="built for block"):
        fn.launch(grid, (64, 1, 1), (0, 0, 1, 1, 0))
    with pytest.raises(TypeError, match="shared_mem must be an int"):
        fn.launch(grid, block, (0, 0, 1, 1, 0), shared_mem=1.5)
    fn.launch(7, 128, (0, 0, 1, 1, 0))
    assert [c.args[1:8] for c in binding.calls] == [(5, 1, 1, 128, 1, 1, 0)] * 3 + [(7, 1, 1, 128, 1, 1, 0)]


@pytest.mark.parametrize(
    "array, message",
    [
        (CudaArrayLike(shape=(0, 8)), "argument 'dy' (*mut f32): the CudaArrayLike has no elements"),
        (CudaArrayLike(ptr=0x1002), "argument 'dy' (*mut f32): address 0x1002 is not a multiple of 4 bytes"),
    ],
)
def test_empty_and_misaligned_arrays_are_refused(array, message):
    binding = RecordingBinding(ArgumentLayout(K.arg_names, K.arg_types))
    fn = function_for(K, binding)
    with pytest.raises(ValueError) as info:
        fn.launch(1, 128, (array, 0x2000, 1, 1, 0))
    assert message in str(info.value)
    assert binding.calls == []


def test_arrays_yield_their_extent():
    from runtime.arrays import pointer_value

    fn = function_for(K)
    dy = fn.launcher.params[0]
    assert pointer_value(dy, CudaArrayLike(shape=(4, 8), ptr=0x1000)) == (0x1000, 128)
    assert pointer_value(dy, 0x1000) == (0x1000, None)  # an int address is trusted


def test_nothing_is_launched_when_a_check_fails():
    binding = RecordingBinding(ArgumentLayout(K.arg_names, K.arg_types))
    fn = function_for(K, binding)
    for args in [(0, 0, -1, 1, 0), (0, 0, 1, 1, True), (None, 0, 1, 1, 0), (0, 0, 1, 1)]:
        with pytest.raises((TypeError, ValueError)):
            fn.launch(1, 128, args)
    assert binding.calls == []


@pytest.mark.parametrize(
    "args, message",
    [
        (
            (0, 0, 2**31, 1, 0),
            "'chunk_c' (i32, read by the kernel as .u32) = 2147483648 is out of range [0, 2147483647]",
        ),
        (
            (0, 0, 1, 1, -(2**40)),
            "'chunk_offset' (i32, read by the kernel as .u32) = -1099511627776 is out of range",
        ),
        ((-8, 0, 1, 1, 0), "'dy'"),
        ((0, 2**64, 1, 1, 0), "'dx'"),
    ],
)
@pytest.mark.parametrize("how", ["launch", "prepared"])
def test_a_value_out_of_range_is_named_and_not_launched(args, message, how):
    """Ranges that ``struct`` enforces anyway are left to the packing; its refusal
    becomes the full check's error, before anything is launched."""
    binding = RecordingBinding(ArgumentLayout(K.arg_names, K.arg_types))
    fn = function_for(K, binding)
    launch = (lambda *a: fn.launch(1, 128, a)) if how == "launch" else fn.prepare(1, 128)
    for _ in range(3):
        with pytest.raises(ValueError, match=re.escape(message)):
            launch(*args)
    assert binding.calls == []
    launch(0x100, 0x200, 1, 1, 0)
    assert len(binding.calls) == 1


def test_of_a_run_of_integers_the_first_that_is_wrong_is_named():
    """chunk_c = 2**31 passes the launch's own test (the packing would refuse it) and
    c_total = -1 fails it: consecutive integers are checked as one, so the first of
    them that is wrong is the one named, as pack_args names it."""
    binding = RecordingBinding(ArgumentLayout(K.arg_names, K.arg_types))
    fn = function_for(K, binding)
    prepared = fn.prepare(1, 128)
    for launch in (lambda *a: fn.launch(1, 128, a), prepared, lambda *a: fn.pack_args(a)):
        with pytest.raises(ValueError, match=r"'chunk_c' .* = 2147483648 is out of range"):
            launch(0, 0, 2**31, -1, 0)
    assert binding.calls == []


# --- prepared launches --------------------------------------------------------------


def test_prepared_launch_checks_arguments_and_fixes_the_rest():
    binding = RecordingBinding(ArgumentLayout(K.arg_names, K.arg_types))
    fn = function_for(K, binding)
    prepared = fn.prepare(12, K.block, stream=5, shared_mem=64)
    assert (prepared.grid, prepared.block, prepared.shared_mem) == ((12, 1, 1), (128, 1, 1), 64)
    prepared(CudaArrayLike(ptr=0x1000, shape=(12, 32)), 0x2000, 16, 32, 8)  # covers the 12 rows read
    prepared.raw(0x3000, 0x4000, 1, 2, 3)
    assert [c.args[:9] for c in binding.calls] == [(0xF00D, 12, 1, 1, 128, 1, 1, 64, 5)] * 2
    assert binding.calls[0].slots[:2] == [(0x1000).to_bytes(8, "little"), (0x2000).to_bytes(8, "little")]
    assert binding.calls[1].slots[2:] == [b"\1\0\0\0", b"\2\0\0\0", b"\3\0\0\0"]
    with pytest.raises(ValueError, match=r"argument 'chunk_c' \(i32, read by the kernel as \.u32\) = -1"):
        prepared(0, 0, -1, 1, 0)
    with pytest.raises(TypeError, match="argument 'dy' \\(\\*mut f32\\) got a CudaArrayLike of <f2"):
        prepared(CudaArrayLike("<f2"), 0, 1, 1, 0)
    assert len(binding.calls) == 2


def test_prepare_refuses_bad_geometry_and_streams():
    fn = function_for(K)
    with pytest.raises(ValueError, match="built for block"):
        fn.prepare(1, 64)
    with pytest.raises(ValueError, match="dimension x = 0"):
        fn.prepare(0, 128)
    with pytest.raises(TypeError, match=r"expected a runtime\.Stream"):
        fn.prepare(1, 128, stream="fast")


def test_a_closed_stream_cannot_be_launched_on():
    fn = function_for(K)
    stream = runtime.Stream.__new__(runtime.Stream)  # a borrowed handle, without a driver
    stream.handle, stream.owned, stream._finalizer, stream.device = 0x99, False, None, FakeDevice()
    prepared = fn.prepare(1, 128, stream=stream)
    prepared(0, 0, 1, 1, 0)
    stream.close()
    with pytest.raises(ValueError, match="this Stream is closed"):
        prepared(0, 0, 1, 1, 0)
    with pytest.raises(ValueError, match="this Stream is closed"):
        fn.launch(1, 128, (0, 0, 1, 1, 0), stream=stream)


def test_a_closed_module_cannot_be_launched():
    binding = RecordingBinding(ArgumentLayout(K.arg_names, K.arg_types))
    fn = function_for(K, binding)
    prepared = fn.prepare(1, 128)
    fn._module_closed()
    for call in (
        lambda: fn.launch(1, 128, (0, 0, 1, 1, 0)),
        lambda: prepared(0, 0, 1, 1, 0),
        lambda: prepared.raw(0, 0, 1, 1, 0),
    ):
        with pytest.raises(ValueError, match="its module is closed"):
            call()
    assert binding.calls == []


# --- a failed call: the context made current, one more try -----------------------------


class FlakyBinding(RecordingBinding):
    """Fails the first ``failures`` calls with CUDA_ERROR_INVALID_CONTEXT (201)."""

    def __init__(self, layout, failures):
        super().__init__(layout)
        self.failures = failures

    def launch_kernel(self, *args):
        super().launch_kernel(*args)
        self.failures -= 1
        return 201 if self.failures >= 0 else 0


def test_a_failed_launch_activates_the_context_and_retries_once():
    binding = FlakyBinding(ArgumentLayout(K.arg_names, K.arg_types), failures=1)
    fn = function_for(K, binding)
    activated = []
    fn.device.context.activate = lambda: activated.append(1)
    fn.launch(1, 128, (0x10, 0x20, 1, 4, 3))
    assert activated == [1] and len(binding.calls) == 2
    assert binding.calls[0].slots == binding.calls[1].slots  # the same values, packed once


def test_a_launch_that_fails_twice_raises():
    binding = FlakyBinding(ArgumentLayout(K.arg_names, K.arg_types), failures=2)
    fn = function_for(K, binding)
    fn.device.context.activate = lambda: None
    with pytest.raises(CudaError):  # CudaUnavailable where no driver can name the error
        fn.launch(1, 128, (0x10, 0x20, 1, 4, 3))
    assert len(binding.calls) == 2


def test_a_retried_launch_hands_its_buffer_back_once():
    """The Python path's pool holds each idle buffer once: held twice, two threads could
    take the same one. (The compiled path packs on its stack: python_launch is called.)"""
    binding = FlakyBinding(ArgumentLayout(K.arg_names, K.arg_types), failures=1)
    fn = function_for(K, binding)
    fn.device.context.activate = lambda: None
    fn.launcher.python_launch(1, 128, (0x10, 0x20, 1, 4, 3))
    fn.launcher.python_launch(1, 128, (0x10, 0x20, 1, 4, 3))
    assert len(binding.calls) == 3  # the first failed and was tried again
    assert len(fn.launcher._pool) == 1


def test_threads_launching_at_once_never_share_a_buffer(launch_path):
    """Eight threads launch through the same function and prepared launch, switching as
    often as the interpreter lets them: each call hands the driver its own values."""
    binding = RecordingBinding(ArgumentLayout(K.arg_names, K.arg_types))
    fn = function_for(K, binding)
    prepared = fn.prepare(K.grid(8, 16), K.block)

    def worker(t: int) -> None:
        for i in range(200):
            dy, dx = 0x10000 + 0x1000 * t, 0x90000 + i * 64
            if i % 3 == 0:
                fn.launch(K.grid(8, 16), K.block, (dy, dx, 16, 32, 16))
            elif i % 3 == 1:
                prepared(dy, dx, 16, 32, 16)
            else:
                prepared.raw(dy, dx, 16, 32, 16)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        assert not errors_in_threads(worker, 8)
    finally:
        sys.setswitchinterval(interval)
    seen = [
        (int.from_bytes(c.slots[0], "little"), int.from_bytes(c.slots[1], "little")) for c in binding.calls
    ]
    assert sorted(seen) == sorted(
        (0x10000 + 0x1000 * t, 0x90000 + i * 64) for t in range(8) for i in range(200)
    )


# --- the layout against the driver's report -----------------------------------------


class FakeDriver:
    def __init__(self, params):
        self.params = params  # [(offset, size)]

    def cuFuncGetParamCount(self, handle):
        return 0, len(self.params)

    def cuFuncGetParamInfo(self, handle, index):
        return (0, *self.params[index]) if index < len(self.params) else (1, 0, 0)


def test_the_layout_is_confirmed_against_the_driver():
    kernel = echo_kernel(LAYOUTS["u32 u64"])
    layout = ArgumentLayout(kernel.arg_names, kernel.arg_types)
    layout.check_against_driver(FakeDriver([(0, 4), (8, 8), (16, 8)]), None, "echo", None)
    with pytest.raises(TypeError, match=r"parameter 1 \(p1\) is at byte 4 of the parameter buffer"):
        layout.check_against_driver(FakeDriver([(0, 4), (4, 8), (16, 8)]), None, "echo", None)
    with pytest.raises(TypeError, match=r"parameter 0 \(p0\) is 8 bytes in the PTX, but arg_types says u32"):
        layout.check_against_driver(FakeDriver([(0, 8), (8, 8), (16, 8)]), None, "echo", None)
    with pytest.raises(TypeError, match="the PTX declares 2 parameters, arg_types lists 3"):
        layout.check_against_driver(FakeDriver([(0, 4), (8, 8)]), None, "echo", None)


# --- bindings and imports ------------------------------------------------------------


def test_bindings_are_named_and_unknown_ones_refused():
    assert set(launch_module.BINDINGS) == {"cffi", "ctypes", "cuda.bindings"}
    with pytest.raises(ValueError, match="unknown launch binding 'fast'"):
        launch_module.binding("fast")


def test_compiled_launch_enabled_says_what_use_compiled_launch_set(launch_path):
    """The setting as it stands (the launch_path fixture set it), built or not; the
    environment switch sets it at import."""
    assert launch_module.compiled_launch_enabled() is (launch_path == "compiled")
    old = launch_module.use_compiled_launch(launch_path != "compiled")
    try:
        assert launch_module.compiled_launch_enabled() is (launch_path != "compiled")
    finally:
        launch_module.use_compiled_launch(old)
    assert launch_module.compiled_launch_enabled() is old
    code = "import runtime.launch as launch; print(launch.compiled_launch_enabled())"
    for value, enabled in (("0", "False"), ("1", "True")):
        env = {**os.environ, "PTXGEN_COMPILED_LAUNCH": value}
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, env=env
        )
        assert out.stdout.strip() == enabled


def test_importing_runtime_imports_no_array_library_and_no_cffi():
    code = (
        "import sys, runtime, runtime.launch, runtime.graph, runtime.arrays; "
        "print([m for m in ('torch', 'cupy', 'cffi', 'numpy') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- cuLaunchKernelEx with a prebuilt config (the Python path's) ------------------------


def test_a_repeated_launch_reuses_a_prebuilt_config():
    """The second launch in a row with the same grid, block and stream objects builds a
    CUlaunchConfig; later ones launch through cuLaunchKernelEx with it, same values.
    (The compiled path calls cuLaunchKernel with the values: no config to convert.)"""
    binding = RecordingBinding(ArgumentLayout(K.arg_names, K.arg_types), ex=True, compiled=False)
    fn = function_for(K, binding)
    grid, block = (6, 1, 1), (128, 1, 1)
    for i in range(4):
        fn.launch(grid, block, (0x100, 0x200, i, 12, 3), stream=77)
    fn.launch(tuple([6, 1, 1]), block, (0x100, 0x200, 9, 12, 3), stream=77)  # a new grid tuple
    fn.launch(grid, block, (0x100, 0x200, 9, 12, 3), stream=78)  # another stream
    vias = [c.via for c in binding.calls]
    assert (
        vias
        == ["cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchKernelEx", "cuLaunchKernelEx"]
        + ["cuLaunchKernel"] * 2
    )
    assert [c.args[:9] for c in binding.calls] == [(0xF00D, 6, 1, 1, 128, 1, 1, 0, 77)] * 5 + [
        (0xF00D, 6, 1, 1, 128, 1, 1, 0, 78)
    ]
    assert [c.slots[2] for c in binding.calls[:4]] == [i.to_bytes(4, "little") for i in range(4)]
    prepared = fn.prepare(grid, block, stream=5, shared_mem=16)
    prepared(0x100, 0x200, 1, 4, 3)
    prepared.raw(0x100, 0x200, 1, 2, 3)
    assert [(c.via, c.args[:9]) for c in binding.calls[-2:]] == [
        ("cuLaunchKernelEx", (0xF00D, 6, 1, 1, 128, 1, 1, 16, 5))
    ] * 2


def test_a_cached_stream_is_still_asked_whether_it_is_open():
    fn = function_for(K, RecordingBinding(ArgumentLayout(K.arg_names, K.arg_types), ex=True))
    stream = runtime.Stream.__new__(runtime.Stream)
    stream.handle, stream.owned, stream._finalizer, stream.device = 0x99, False, None, FakeDevice()
    grid, block = (1, 1, 1), (128, 1, 1)
    for _ in range(3):
        fn.launch(grid, block, (0, 0, 1, 1, 0), stream=stream)
    stream.close()
    with pytest.raises(ValueError, match="this Stream is closed"):
        fn.launch(grid, block, (0, 0, 1, 1, 0), stream=stream)


def test_a_failed_ex_launch_is_retried_plainly():
    class FailingEx(RecordingBinding):
        def _launch_kernel_ex(self, config, f, params, extra):
            super()._launch_kernel_ex(config, f, params, extra)
            return 201

    binding = FailingEx(ArgumentLayout(K.arg_names, K.arg_types), ex=True, compiled=False)
    fn = function_for(K, binding)
    fn.device.context.activate = lambda: None
    prepared = fn.prepare(2, 128)
    prepared(0x10, 0x20, 1, 4, 3)
    assert [c.via for c in binding.calls] == ["cuLaunchKernelEx", "cuLaunchKernel"]
    assert binding.calls[0].args == binding.calls[1].args and binding.calls[0].slots == binding.calls[1].slots
    binding.calls.clear()
    grid, block = (3, 1, 1), (128, 1, 1)
    for _ in range(3):
        fn.launch(grid, block, (0x10, 0x20, 1, 4, 3), stream=9)
    assert [c.via for c in binding.calls] == ["cuLaunchKernel", *["cuLaunchKernelEx", "cuLaunchKernel"] * 2]
    assert {c.args for c in binding.calls} == {
        (0xF00D, 3, 1, 1, 128, 1, 1, 0, 9, binding.calls[0].args[9], 0)
    }
