"""A checked launch refuses, before the driver is called, any array that does not cover
what the launch touches (the kernel's footprints), naming the argument, the need and
what was given; int addresses are trusted for extent, and kernels without footprints
launch as before."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from conftest import hand_written_kernel
from launch_util import RecordingBinding
from test_runtime_cpu import CudaArrayLike, function_for

import ptxgen
from runtime import launch_checks
from runtime.layout import ArgumentLayout

# Every test runs through the Python launch functions and the compiled path.
pytestmark = pytest.mark.usefixtures("launch_path")

K = ptxgen.ChannelCatBackward("f32", 128)
F = ptxgen.ChannelCatForward("u8", 64)


def recording(kernel):
    binding = RecordingBinding(ArgumentLayout(kernel.arg_names, kernel.arg_types))
    return function_for(kernel, binding), binding


def test_arrays_that_cover_the_launch_pass():
    fn, binding = recording(K)
    # 8 rows of 32 channels; the chunk is channels 16..31
    fn.launch(
        K.grid(8, 16),
        K.block,
        (CudaArrayLike(shape=(8, 32)), CudaArrayLike(shape=(8, 16), ptr=0x9000), 16, 32, 16),
    )
    assert len(binding.calls) == 1


@pytest.mark.parametrize(
    "args, message",
    [
        # dx half the size the launch writes (the probe's finding)
        ((CudaArrayLike(shape=(8, 32)), CudaArrayLike(shape=(4, 16), ptr=0x9000), 16, 32, 16),
         "argument 'dx' (*mut f32): this launch writes 128 elements (512 bytes) from it, but the array holds 64 (256 bytes)"),
        # dy with half the rows
        ((CudaArrayLike(shape=(4, 32)), CudaArrayLike(shape=(8, 16), ptr=0x9000), 16, 32, 16),
         "argument 'dy' (*mut f32): this launch reads 256 elements (1024 bytes) from it, but the array holds 128 (512 bytes)"),
        # the chunk spills into the next row
        ((CudaArrayLike(shape=(8, 32)), CudaArrayLike(shape=(8, 16), ptr=0x9000), 16, 32, 17),
         "chunk_offset + chunk_c = 17 + 16 = 33 exceeds c_total = 32"),
    ],
)  # fmt: skip
def test_arrays_short_of_the_footprint_are_refused_before_launching(args, message):
    fn, binding = recording(K)
    with pytest.raises(ValueError, match=re.escape(message)):
        fn.launch(K.grid(8, 16), K.block, args)
    assert binding.calls == []
    prepared = fn.prepare(K.grid(8, 16), K.block)
    with pytest.raises(ValueError, match=re.escape(message)):
        prepared(*args)
    assert binding.calls == []


@pytest.mark.parametrize("how", ["launch", "prepared"])
def test_refused_launches_hand_their_buffer_back(how):
    """Values are packed before the footprint check, so every refusal after the packing
    (the footprint refuses the scalars, an array is short, a value does not fit its
    type) returns the pooled buffer: the next launch reuses the same one."""
    fn, binding = recording(K)
    grid = K.grid(8, 16)
    launch = (lambda *a: fn.launch(grid, K.block, a)) if how == "launch" else fn.prepare(grid, K.block)
    dy, dx = CudaArrayLike(shape=(8, 32)), CudaArrayLike(shape=(8, 16), ptr=0x9000)
    launch(dy, dx, 16, 32, 16)
    for bad in [
        (dy, dx, 16, 32, 17),  # the footprint refuses chunk_offset + chunk_c > c_total
        (dy, CudaArrayLike(shape=(4, 16), ptr=0x9000), 16, 32, 16),  # dx short
        (dy, dx, 16, 32, 2**31),  # past i32: struct refuses it
        (dy, dx, 16, 48, 16),  # a new combination of scalars whose need dy cannot meet
    ]:
        with pytest.raises(ValueError):
            launch(*bad)
    launch(dy, dx, 16, 32, 16)
    assert len(binding.calls) == 2
    params = [call.args[9] for call in binding.calls]  # the void** of the buffer handed over
    assert params[0] == params[1]


def test_a_value_out_of_range_is_named_without_the_struct_error_behind_it():
    fn, _ = recording(K)
    with pytest.raises(ValueError, match="'chunk_c'") as caught:
        fn.launch(K.grid(8, 16), K.block, (0x1000, 0x9000, 2**31, 32, 0))
    assert caught.value.__suppress_context__ and caught.value.__cause__ is None


@pytest.mark.parametrize("ptr", [-16, 1 << 64])
def test_an_interface_address_that_is_no_address_is_named(ptr):
    fn, binding = recording(K)
    bad = CudaArrayLike(shape=(8, 32), ptr=ptr)
    for call in (
        lambda: fn.launch(K.grid(8, 16), K.block, (bad, 0x9000, 16, 32, 16)),
        lambda: fn.pack_args((bad, 0x9000, 16, 32, 16)),
    ):
        with pytest.raises(
            TypeError, match=rf"argument 'dy'.*'data' holds {ptr}, which is not a 64-bit address"
        ):
            call()
    assert binding.calls == []


def test_the_footprint_follows_the_grid_not_the_arrays():
    fn, binding = recording(F)
    x, y = CudaArrayLike("|u1", shape=(3, 100)), CudaArrayLike("|u1", shape=(3, 300), ptr=0x9000)
    fn.launch(F.grid(3, 100), F.block, (x, y, 100, 300, 200))
    x4 = CudaArrayLike("|u1", shape=(4, 100))
    with pytest.raises(
        ValueError, match=re.escape("argument 'y' (*mut u8): this launch writes 1200 elements")
    ):
        fn.launch(F.grid(4, 100), F.block, (x4, y, 100, 300, 200))
    assert len(binding.calls) == 1


def test_int_addresses_are_trusted_for_extent_but_not_alignment():
    fn, binding = recording(K)
    fn.launch(K.grid(8, 16), K.block, (0x1000, 0x2000, 16, 32, 16))  # nothing to compare an int with
    with pytest.raises(
        ValueError,
        match=re.escape(
            "argument 'dx' (*mut f32): this launch needs the address aligned to 4 bytes, got 0x2001"
        ),
    ):
        fn.launch(K.grid(8, 16), K.block, (0x1000, 0x2001, 16, 32, 16))
    assert len(binding.calls) == 1


def test_an_empty_launch_needs_no_memory():
    fn, binding = recording(K)
    # no rows: the grid the contract gives is (0, 1, 1), which the driver refuses, but a
    # grid of one CTA over a zero-width chunk touches nothing
    fn.launch((1, 1, 1), K.block, (0x1000, 0x2000, 0, 32, 0))
    assert len(binding.calls) == 1


def test_kernels_without_footprints_launch_as_before(monkeypatch):
    """A kernel that declares no footprints has its arrays trusted for extent, and no
    launch of it reaches the footprint check; the same launch of one that declares them
    asks the kernel once and is refused."""
    asked = []
    compute = launch_checks.FootprintCheck.compute

    def counted(self, cache, key):
        asked.append(key)
        return compute(self, cache, key)

    monkeypatch.setattr(launch_checks.FootprintCheck, "compute", counted)
    fill = hand_written_kernel()
    fn, binding = recording(fill)
    fn.launch((1, 1, 1), fill.block, (CudaArrayLike("<u4", shape=(1,)), 1000, 7))  # trusted: no footprint
    undeclared = SimpleNamespace(
        entry_point_name=K.entry_point_name, block=K.block, arg_types=K.arg_types, arg_names=K.arg_names
    )  # K's parameters, without its footprints
    same, same_binding = recording(undeclared)
    short = (CudaArrayLike(shape=(1, 1)), CudaArrayLike(shape=(1, 1), ptr=0x9000), 16, 32, 16)
    same.launch(K.grid(8, 16), K.block, short)
    same.prepare(K.grid(8, 16), K.block)(*short)
    assert len(binding.calls) == 1 and len(same_binding.calls) == 2 and asked == []
    declared, declared_binding = recording(K)
    with pytest.raises(
        ValueError, match=re.escape("argument 'dy' (*mut f32): this launch reads 256 elements")
    ):
        declared.launch(K.grid(8, 16), K.block, short)
    assert declared_binding.calls == [] and asked == [(16, 32, 16)]


def test_int_pointers_are_checked_against_their_allocation_when_asked(monkeypatch):
    """check_int_pointers(True): each int address goes to the driver (here a stand-in for
    cuPointerGetAttributes over two allocations) and its extent joins the footprint check;
    switching it off makes ints trusted again, for functions loaded before and after."""
    import runtime
    from runtime import launch

    allocations = {0x1000: 8 * 32 * 4, 0x9000: 8 * 16 * 4 - 4}  # dx's allocation one element short
    asked = []

    def extent(param, address):
        asked.append((param.name, address))
        for start, size in allocations.items():
            if start <= address < start + size:
                return start + size - address
        raise ValueError(f"{param.label}: address {address:#x} is in no CUDA allocation")

    monkeypatch.setattr(launch, "int_pointer_extent", extent)  # what launchers built from now on call
    before, _ = recording(K)
    old = runtime.check_int_pointers(True)
    try:
        after, binding = recording(K)
        for fn in (before, after):
            with pytest.raises(
                ValueError,
                match=re.escape("writes 128 elements (512 bytes) from it, but the array holds 127"),
            ):
                fn.launch(K.grid(8, 16), K.block, (0x1000, 0x9000, 16, 32, 16))
            with pytest.raises(ValueError, match="address 0x20000 is in no CUDA allocation"):
                fn.launch(K.grid(8, 16), K.block, (0x20000, 0x9000, 16, 32, 16))
            fn.launch(K.grid(4, 16), K.block, (0x1000, 0x9000, 16, 32, 16))  # 4 rows fit
        assert len(binding.calls) == 1 and ("dy", 0x1000) in asked
    finally:
        runtime.check_int_pointers(old)
    asked.clear()
    after.launch(K.grid(8, 16), K.block, (0x20000, 0x9000, 16, 32, 16))  # trusted again
    assert asked == [] and len(binding.calls) == 2
    with pytest.raises(TypeError, match="takes True or False"):
        runtime.check_int_pointers(1)
