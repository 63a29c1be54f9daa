"""The planner on the CPU, for parts this machine does not have: what the rule derives from
a device's traits, and that every kernel family and option in ptxgen/kernels is chosen.

* Emulated devices of 108, 132 and 170 SMs (an A100, the H200 the rule was measured on, an
  RTX 5090-class part): every shape plans on each, each step's kernel is built for the
  device's newest target and fits it, its grid within the device's limits, its footprints
  computable from its arguments (what the runtime checks before a launch), and ptxas
  assembles what was planned; the grids that depend on the part scale with it.
* Reachability: seeded random problems (splits and concats through the ops' planner,
  each piece gathered or scattered as the per-piece variant does it, every element size
  the rule takes, 1 to 40 pieces, rows from 1 to tens of millions, addresses at every
  offset modulo 16) over those devices and targets sm_75, sm_80 and sm_90. The test fails
  naming any family or option of ptxgen/kernels that no plan chose, unless it is one of
  KEPT: options no plan reaches that code outside the planner still builds, each saying
  which. An entry of KEPT that a plan does reach, or that no longer exists, fails too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import pkgutil
import random
from collections.abc import Iterator

import pytest

import ptxgen
from ptxgen import toolchain
from ptxgen.dtypes import DTYPES
from ptxgen.kernel import KernelBase, conformance_problems
from ptxgen.kernels import fastcat as fc
from ptxgen.kernels import strided
from ptxgen.kernels.fastcat_common import WIDTHS
from ptxgen.kernels.plan_strided import StridedProblem, make_strided_plan
from runtime import plan
from runtime.plan import DeviceTraits, Problem, Ptr, Step, make_plan

MiB, KiB = 2**20, 2**10
# The parts planned for: (name, traits). Their own SM versions, and sm_75/80/90 on each.
GBPS = 10**9
DEVICES = {
    "A100 (108 SMs)": DeviceTraits(
        arch="sm_80", sm_count=108, max_threads_per_sm=2048, l2_bytes=40 * MiB,
        max_shared_memory_per_sm=164 * KiB, max_shared_memory_per_block=163 * KiB,
        memory_bandwidth=1_555 * GBPS,
    ),
    "H100 (132 SMs)": DeviceTraits(l2_bytes=50 * MiB, memory_bandwidth=3_352 * GBPS),
    "H200 (132 SMs)": DeviceTraits(),
    "RTX 5090 (170 SMs)": DeviceTraits(
        arch="sm_120", sm_count=170, max_threads_per_sm=1536, l2_bytes=96 * MiB,
        max_shared_memory_per_sm=128 * KiB, max_shared_memory_per_block=99 * KiB,
        memory_bandwidth=1_792 * GBPS,
    ),
}  # fmt: skip
ARCHS = ("sm_75", "sm_80", "sm_90")
PER_PIECE = [plan.FASTCAT_CHUNK, plan.SEED]  # the table the benchmark times one piece with


def _on(device: DeviceTraits, arch: str) -> DeviceTraits:
    return DeviceTraits(**{**vars(device), "arch": arch})


def _check_step(step: Step, traits: DeviceTraits) -> None:
    """A step the runtime can load and launch on this device."""
    kernel = step.kernel
    assert not conformance_problems(kernel), conformance_problems(kernel)
    if kernel.name.startswith("fastcat_"):
        assert kernel.target == traits.target
        assert kernel.dependent_launch == traits.builds_dependent_launch
        assert getattr(kernel, "shared_bytes", 0) <= min(48 * KiB, traits.max_shared_memory_per_block)
    assert step.block == kernel.block and kernel.block[0] <= 1024
    assert 1 <= step.grid[0] <= traits.max_grid_x and 1 <= step.grid[1] <= traits.max_grid_y
    scalars = {n: v for n, v in zip(kernel.arg_names, step.args) if not isinstance(v, Ptr)}
    kernel.footprints(step.grid, step.block, scalars)  # raises where the launch could not be made


# --------------------------------------------------------------------------- emulated devices

# (op, dtype, rows, extents, wide array's address mod 16, pieces'): every family, small and large
SHAPES = [
    ("backward", "u8", 2048, (3, 5, 24), 0, ()),  # small op: rect at 1 byte
    ("forward", "bf16", 100_000, (64, 64, 64), 0, ()),  # rect, 16-byte accesses
    ("backward", "u8", 61_440, (3, 5, 24), 1, ()),  # 121 tiles of 16 KB
    ("forward", "u8", 1_000_003, (17, 200, 39), 3, (1, 5, 7)),  # tiles, misaligned
    ("backward", "f32", 4_194_304, (1, 3), 0, ()),  # rowpack
    ("forward", "f64", 128, (401_408, 401_408), 0, ()),  # wide rows: tiles at 16 bytes
    ("backward", "u8", 700, (1,) * 35, 0, ()),  # two launches of at most 32 pieces
]


@pytest.mark.parametrize("name", DEVICES)
def test_every_shape_plans_on_every_device(name):
    device = DEVICES[name]
    for arch in sorted({*ARCHS, device.arch}):
        traits = _on(device, arch)
        for op, dtype, rows, extents, wide, pieces in SHAPES:
            problem = Problem(op, ptxgen.resolve_dtype(dtype), rows, extents, wide, pieces)
            for table in (None, PER_PIECE):
                p = make_plan(problem, traits, table)
                assert p.steps and all(s.kernel.name.startswith("fastcat_") for s in p.steps), p.variants
                for step in p.steps:
                    _check_step(step, traits)


def test_grids_scale_with_the_part():
    u8 = ptxgen.resolve_dtype("u8")
    # A byte-wide gather of a narrow piece: vec on two full waves of 256-thread CTAs.
    gather = Problem("backward", u8, 8_388_608, (5, 27)).chunk(0)
    for device in DEVICES.values():
        (step,) = plan.FASTCAT_CHUNK.build(gather, device)
        assert step.kernel.name == "fastcat_vec_backward"
        assert step.grid[0] == 2 * device.sm_count * (device.max_threads_per_sm // 256)
    assert [plan.FASTCAT_CHUNK.build(gather, d)[0].grid[0] for d in DEVICES.values()] == [
        1728,
        2112,
        2112,
        2040,
    ]
    # An op of 121 tiles of 16 KB: enough for one a SM on 108 SMs, too few on 132 and 170,
    # which cut it into 2 KB tiles (eight times the CTAs).
    split = Problem("backward", u8, 61_440, (3, 5, 24), wide_align=1)
    grids = {name: make_plan(split, d).steps[0] for name, d in DEVICES.items()}
    assert [s.grid[0] for s in grids.values()] == [121, 961, 961, 961]
    assert [s.kernel.tile_bytes for s in grids.values()] == [16 * KiB, 2 * KiB, 2 * KiB, 2 * KiB]
    assert all(s.grid[:2] == s.kernel.grid(61_440, 32)[:2] for s in grids.values())  # one CTA a tile


def test_the_traits_are_read_and_checked():
    h200 = DeviceTraits()
    assert isinstance(h200, fc.GpuTraits) and (h200.sm_count, h200.target) == (132, "sm_90")
    assert h200.resident_ctas(256) == 1056 and h200.builds_dependent_launch
    assert not DeviceTraits(dependent_launch=False).builds_dependent_launch
    assert not DeviceTraits(arch="sm_80").builds_dependent_launch
    assert [fc.newest_target(a) for a in ("sm_70", "sm_86", "sm_90", "sm_101", "sm_130")] == [
        "sm_75", "sm_86", "sm_90", "sm_100", "sm_121",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="sm_count must be an int >= 1, got 0"):
        DeviceTraits(sm_count=0)
    with pytest.raises(ValueError, match="cannot read a compute capability from target 'hopper'"):
        DeviceTraits(arch="hopper")
    with pytest.raises(TypeError, match="traits must be a GpuTraits"):
        fc.choose("split", 4, [1, 3], 1, traits="sm_90")
    # Nothing in ptxgen assumes a part: the rule has no default device, the traits no defaults
    # but CUDA's grid limits and the dependent-launch switch (a bandwidth not known is None,
    # given as such).
    assert inspect.signature(fc.choose).parameters["traits"].default is inspect.Parameter.empty
    given = [f.name for f in dataclasses.fields(fc.GpuTraits) if f.default is dataclasses.MISSING]
    assert given == [
        "arch", "sm_count", "max_threads_per_sm", "l2_bytes", "max_shared_memory_per_sm",
        "max_shared_memory_per_block", "memory_bandwidth",
    ]  # fmt: skip


def test_device_traits_are_read_from_the_device_and_the_driver(monkeypatch):
    from types import SimpleNamespace

    from runtime import _driver
    from runtime.device import Device

    # A stand-in record (a test's) keeps the defaults for what it does not say.
    grid = (2**31 - 1, 65535, 65535)
    record = SimpleNamespace(ordinal=1, arch="sm_80", max_grid=grid, max_shared_memory_per_block=163 * KiB,
                             multiprocessor_count=108)  # fmt: skip
    traits = DeviceTraits.of(record)
    assert (traits.ordinal, traits.arch, traits.sm_count) == (1, "sm_80", 108)
    assert traits.max_threads_per_sm == DeviceTraits().max_threads_per_sm
    # A Device: what it does not keep is asked of the driver, for its ordinal.
    # the memory: 14 GHz (in kHz) on a 512-bit bus, 1,792 GB/s
    told = {"MAX_THREADS_PER_MULTIPROCESSOR": 1536, "L2_CACHE_SIZE": 96 * MiB,
            "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 128 * KiB, "MEMORY_CLOCK_RATE": 14_000_000,
            "GLOBAL_MEMORY_BUS_WIDTH": 512}  # fmt: skip
    fake = SimpleNamespace(
        CUdevice_attribute=SimpleNamespace(**{f"CU_DEVICE_ATTRIBUTE_{name}": name for name in told}),
        cuDeviceGet=lambda ordinal: (0, ("device", ordinal)),
        cuDeviceGetAttribute=lambda which, handle: (0, told[which] if handle == ("device", 2) else 0),
    )
    monkeypatch.setattr(_driver, "driver", lambda: fake)
    device = object.__new__(Device)  # no context: only what DeviceTraits.of reads
    vars(device).update(ordinal=2, compute_capability=(12, 0), max_grid=grid,
                        max_shared_memory_per_block=99 * KiB, multiprocessor_count=170)  # fmt: skip
    traits = DeviceTraits.of(device)
    assert vars(traits) == vars(DEVICES["RTX 5090 (170 SMs)"]) | {"ordinal": 2}
    # A part that reports no memory clock has no known bandwidth: not the H200's default.
    told["MEMORY_CLOCK_RATE"] = 0
    assert DeviceTraits.of(device).memory_bandwidth is None


def test_the_row_gathers_tile_size_follows_the_bandwidth_an_sm():
    """32 KB tiles where the part moves at least BIG_TILE_BANDWIDTH_PER_SM an SM (the
    H200's 36 GB/s), 16 KB below it (the H100's 25) and where the bandwidth is unknown."""
    problem = ("concat", 177_954, (240, 297, 55, 262, 187), 1)

    def tile_bytes(traits: DeviceTraits) -> int:
        (launch,) = fc.choose(*problem, traits=traits)
        spec = dict(launch.spec)
        assert launch.family == "tile" and spec["row_gather"]
        return 16 * spec["unroll"] * spec["block"]

    assert DEVICES["H200 (132 SMs)"].memory_bandwidth >= fc.BIG_TILE_BANDWIDTH_PER_SM * 132
    assert tile_bytes(DEVICES["H200 (132 SMs)"]) == 32 * KiB
    assert DEVICES["H100 (132 SMs)"].memory_bandwidth < fc.BIG_TILE_BANDWIDTH_PER_SM * 132
    assert tile_bytes(DEVICES["H100 (132 SMs)"]) == 16 * KiB
    assert tile_bytes(dataclasses.replace(DEVICES["H200 (132 SMs)"], memory_bandwidth=None)) == 16 * KiB
    # the line itself takes the large tiles
    at_line = fc.BIG_TILE_BANDWIDTH_PER_SM * 132
    assert tile_bytes(dataclasses.replace(DEVICES["H200 (132 SMs)"], memory_bandwidth=at_line)) == 32 * KiB
    assert (
        tile_bytes(dataclasses.replace(DEVICES["H200 (132 SMs)"], memory_bandwidth=at_line - 1)) == 16 * KiB
    )


@pytest.mark.parametrize("bad", [0, -1, True, 4.8e12, "4.8 TB/s", 2**63])
def test_memory_bandwidth_is_bytes_a_second_or_none(bad):
    with pytest.raises(ValueError, match="memory_bandwidth must be bytes a second"):
        dataclasses.replace(DEVICES["H200 (132 SMs)"], memory_bandwidth=bad)


@pytest.mark.parametrize("name", DEVICES)
def test_what_is_planned_assembles(name):
    try:
        toolchain.find_tool("ptxas")
    except toolchain.ToolNotFound as err:
        pytest.fail(f"{err} (it is part of the test extra: pip install -e '.[test]')")
    device = DEVICES[name]
    kernels = {}
    for op, dtype, rows, extents, wide, pieces in SHAPES:
        problem = Problem(op, ptxgen.resolve_dtype(dtype), rows, extents, wide, pieces)
        for table in (None, PER_PIECE):
            for step in make_plan(problem, device, table).steps:
                kernels[step.kernel.id] = step.kernel
    built = toolchain.assemble_many([(k.source, k.target) for k in kernels.values()])
    for kernel, result in zip(kernels.values(), built):
        assert not isinstance(result, Exception), f"{kernel.id}: {result}"
        res = result.functions[kernel.entry_point_name]
        assert res.spill_store_bytes == 0 and res.stack_bytes == 0, (kernel.id, res)


# --------------------------------------------------------------------------- reachability

# Options no plan reaches that code outside the planner still builds: (family, option,
# value) -> who builds it. Remove an entry with what keeps it (and the option with it).
_PROLOGUE = "tests/test_dependent_launch.py (FAMILIES) builds it to check the dependent-launch prologue"
_SMALL = "tests/test_fastlaunch_cpu.py and tests/test_gpu_dependent_launch.py launch vec at width 4"
KEPT = {
    ("vec", "direction", "forward"): _PROLOGUE,
    ("vec", "chunks", "several"): _PROLOGUE,
    ("vec", "width", 16): _PROLOGUE,
    ("vec", "width", 8): "tests/test_fastcat_vec_rowpack.py only (kept with the widths above)",
    ("vec", "width", 4): _SMALL,
    ("vec", "width", 2): "tests/test_fastcat_vec_rowpack.py only (kept with the widths above)",
    ("tile", "loader", ("backward", "bulk")): _PROLOGUE,
    # The CLI's --call (ptxgen/cli.py): the seed's kernel in the calling form, for readers
    # and other runtimes (docs/tutorial.md); the ops launch the inline one.
    ("channel_cat", "inline", False): "ptxgen/cli.py (--call)",
}

# Each family's constructor keywords: the options whose every value a plan must choose
# (their values below), and the sizes a plan tunes (any values: unroll, block, ...).
OPTIONS = {
    "channel_cat": {"inline"},
    "rect": {"direction", "width", "chunks", "dependent_launch"},
    "tile": {
        "direction",
        "granule",
        "chunks",
        "whole_rows",
        "loader",
        "wide_chunks",
        "row_gather",
        "dependent_launch",
    },
    "rowpack": {"direction", "staged", "outputs", "narrow_chunks", "dependent_launch"},
    "vec": {"direction", "width", "chunks", "dependent_launch"},
    "strided": {"width", "rank", "wide_strides", "pieces"},
}
TUNED = {
    "channel_cat": {"dtype", "block_size", "target"},
    "rect": {"cols", "unroll", "block", "target"},
    "tile": {"unroll", "block", "target"},
    "rowpack": {"widths", "block", "target"},
    "vec": {"unroll", "block", "target"},
    "strided": {"block", "target"},
}


def _family(cls: type) -> str:
    """``FastcatTile`` -> ``tile``; both seed kernels -> ``channel_cat``."""
    name = cls.__name__
    if name == "StridedCopy":
        return "strided"
    return "channel_cat" if name.startswith("ChannelCat") else name.removeprefix("Fastcat").lower()


def _options(kernel) -> Iterator[tuple[str, str, object]]:
    """(family, option, value) of a kernel a plan launches."""
    family = _family(type(kernel))
    if family == "channel_cat":
        yield family, "inline", kernel.inline
        return
    if family == "strided":
        yield from ((family, o, getattr(kernel, o)) for o in ("width", "rank", "wide_strides"))
        yield family, "pieces", "one" if kernel.pieces == 1 else "several"
        return
    yield family, "direction", kernel.direction
    yield family, "dependent_launch", kernel.dependent_launch
    if family in ("rect", "vec", "tile"):
        yield family, "chunks", "one" if kernel.chunks == 1 else "several"
    if family in ("rect", "vec"):
        yield family, "width", kernel.width
    if family == "tile":
        yield family, "granule", kernel.granule
        yield family, "whole_rows", kernel.whole_rows
        yield family, "loader", (kernel.direction, kernel.loader)
        yield family, "wide_chunks", "all" if all(kernel.wide) else "some" if any(kernel.wide) else "none"
        yield family, "row_gather", kernel.row_gather
    if family == "rowpack":
        yield family, "staged", kernel.staged
        yield family, "narrow_chunks", kernel.narrow_chunks
        yield family, "outputs", "all" if kernel.outputs == tuple(range(len(kernel.widths))) else "some"


def _universe() -> set[tuple[str, str, object]]:
    """Every (family, option, value) the kernels of ptxgen/kernels accept, found by
    building them (a value a family refuses on every target is not one of its options)."""
    from ptxgen.kernels import FastcatRect, FastcatRowpack, FastcatTile, FastcatVec, StridedCopy

    found: set[tuple[str, str, object]] = set()

    def add(cls, **kw):
        for target in ("sm_80", "sm_90"):
            with contextlib.suppress(ValueError):
                found.update(_options(cls(target=target, **kw)))

    for d in ("backward", "forward"):
        for pdl in (False, True):
            for w in WIDTHS:
                for k in (1, 3):
                    add(FastcatRect, direction=d, width=w, cols=4, chunks=k, dependent_launch=pdl)
                    add(FastcatVec, direction=d, width=w, chunks=k, dependent_launch=pdl)
            for loader in ("regs", "cp.async", "bulk"):
                for whole in (True, False):
                    for g in WIDTHS:
                        for k in (1, 3):
                            add(FastcatTile, direction=d, chunks=k, granule=g, whole_rows=whole,
                                loader=loader, dependent_launch=pdl)  # fmt: skip
                    for wide in (True, (True, False)):
                        add(FastcatTile, direction=d, chunks=2, granule=1, whole_rows=whole, loader=loader,
                            wide_chunks=wide, dependent_launch=pdl)  # fmt: skip
                        add(FastcatTile, direction=d, chunks=2, granule=1, whole_rows=whole, loader=loader,
                            wide_chunks=wide, row_gather=True, dependent_launch=pdl)  # fmt: skip
            for staged in (False, True):
                add(FastcatRowpack, direction=d, widths=(1, 3), staged=staged, dependent_launch=pdl)
                add(FastcatRowpack, direction=d, widths=(3, 5, 24), staged=staged, narrow_chunks=True,
                    dependent_launch=pdl)  # fmt: skip
                if d == "backward":
                    add(FastcatRowpack, direction=d, widths=(1, 3), staged=staged, outputs=(1,),
                        dependent_launch=pdl)  # fmt: skip
    for width in strided.WIDTHS:
        for rank in range(1, strided.MAX_RANK + 1):
            for wide in (False, True):
                for pieces in (1, 2):
                    add(StridedCopy, width=width, rank=rank, wide_strides=wide, pieces=pieces)
    for inline in (True, False):
        found.update(_options(ptxgen.ChannelCatBackward("f32", 128, inline=inline)))
        found.update(_options(ptxgen.ChannelCatForward("f32", 128, inline=inline)))
    return found


def _kernel_classes() -> list[type]:
    """Every public kernel class defined in a module of ptxgen/kernels."""
    found = []
    for module in pkgutil.iter_modules(ptxgen.kernels.__path__):
        mod = importlib.import_module(f"ptxgen.kernels.{module.name}")
        found += [
            cls
            for name, cls in vars(mod).items()
            if isinstance(cls, type) and issubclass(cls, KernelBase) and cls.__module__ == mod.__name__
            and not name.startswith("_")
        ]  # fmt: skip
    return found


def test_the_option_table_names_every_keyword_of_every_family():
    """A new family, or a new keyword of one, must be added to OPTIONS or TUNED (and so
    be chosen by a plan or kept for a reason)."""
    classes = _kernel_classes()
    assert {_family(cls) for cls in classes} == set(OPTIONS) == set(TUNED)
    for cls in classes:
        params = set(inspect.signature(cls.cache_key).parameters) - {"cls"}
        assert params == OPTIONS[_family(cls)] | TUNED[_family(cls)], cls.__name__


def _random_problem(rng: random.Random) -> tuple[str, ptxgen.DType | None, int, tuple[int, ...], int, tuple]:
    isz = rng.choice((1, 2, 4, 8, 16))
    n = rng.randint(1, 6) if rng.random() > 0.03 else rng.randint(30, 40)
    sizes = []
    for _ in range(n):
        r = rng.random()
        if r < 0.06:
            sizes.append(0)
        elif r < 0.14:
            sizes.append(rng.randint(300, 400_000))  # wide pieces
        elif r < 0.5:
            sizes.append(rng.choice((1, 2, 3, 4, 5, 8, 16, 32, 64, 128, 256)))
        else:
            sizes.append(rng.randint(1, 300))
    if not any(sizes):
        sizes[0] = rng.randint(1, 300)
    rows = int(10 ** rng.uniform(0, 7.6))
    if rng.random() < 0.01:  # rows of 2**30 bytes or more: past the fast kernels, the seed's
        sizes, rows = [rng.randint(1, 9), (1 << 30) // isz + rng.randint(0, 99)], rng.randint(1, 3)
    while sum(sizes) * isz >= 1 << 31:
        sizes = [s // 2 for s in sizes]
    if (
        isz <= 2 and rng.random() < 0.05
    ):  # a small op of short rows in whole vectors (rowpack's narrow chunks)
        row_bytes = rng.choice((16, 32, 48, 64))
        cuts = sorted(rng.sample(range(1, row_bytes // isz), rng.randint(1, 3)))
        sizes = [b - a for a, b in zip([0, *cuts], [*cuts, row_bytes // isz])]
        rows = rng.randint(1, (1 << 20) // row_bytes)
    m = rng.random()
    if m < 0.45:
        wide, aligns = 0, [0] * len(sizes)
    elif m < 0.7:
        step = min(isz, 16)
        wide, aligns = rng.randrange(0, 16, step), [rng.randrange(0, 16, step) for _ in sizes]
    else:
        wide, aligns = rng.randrange(16), [rng.randrange(16) for _ in sizes]
    dtype = rng.choice([d for d in DTYPES.values() if d.itemsize == isz]) if isz <= 8 else None
    return rng.choice(("backward", "forward")), dtype, rows, tuple(sizes), wide, tuple(aligns)


def _random_strided_problem(rng: random.Random) -> StridedProblem:
    """Arrays of 1 to 8 dims in random orders, some with steps, reversed or broadcast,
    and now and then a stride past 32 bits (planning allocates nothing)."""
    rank = rng.randint(1, 8)
    shape = [rng.randint(1, 5) for _ in range(rank)]
    axis = rng.randrange(rank)
    shape[axis] = rng.randint(1, 6)
    cut = rng.randint(0, shape[axis])
    sizes = (cut, shape[axis] - cut)

    def layout(dims: list[int], writes: bool) -> tuple[int, ...]:
        order = rng.sample(range(len(dims)), len(dims))
        strides, step = [0] * len(dims), 1
        for d in reversed(order):
            strides[d] = step * rng.choice((1, 1, 2, 3))
            step *= dims[d] * rng.choice((1, 1, 2))
        for d in range(len(dims)):
            r = rng.random()
            strides[d] *= -1 if r < 0.1 else (1 << 32) if r < 0.15 else 0 if r < 0.2 and not writes else 1
        return tuple(strides)

    op = rng.choice(("backward", "forward"))
    pieces = tuple(layout([*shape[:axis], s, *shape[axis + 1 :]], op == "backward") for s in sizes)
    return StridedProblem(op, rng.choice((1, 2, 4, 8, 16)), tuple(shape), axis, sizes,
                          layout(shape, op == "forward"), pieces)  # fmt: skip


def test_every_family_and_option_is_chosen():
    """At least 5,000 random problems: every (family, option, value) of ptxgen/kernels is
    chosen by some plan, or is in KEPT (and then chosen by none)."""
    rng = random.Random(24)
    chosen: set[tuple[str, str, object]] = set()
    devices, planned = list(DEVICES.values()), 0
    while planned < 5_000:
        op, dtype, rows, sizes, wide, aligns = _random_problem(rng)
        traits = _on(rng.choice(devices), rng.choice(ARCHS))
        steps: list[Step] = []
        if dtype is not None:  # the ops' planner: the split or concat, and each piece alone
            problem = Problem(op, dtype, rows, sizes, wide, aligns)
            ops = make_plan(problem, traits)
            # The per-piece variant never plans an op of the default table (runtime/plan.py):
            # it takes what the fused one takes, which is asked first.
            assert set(ops.variants) <= {"fused", "seed", ""}, ops.variants
            steps += ops.steps
            if sum(sizes) * dtype.itemsize < 1 << 30:
                steps += make_plan(problem, traits, PER_PIECE).steps
            planned += 1
        else:  # 16-byte elements, which the runtime has no dtype for: the rule alone
            cop = rng.choice(fc.OPS)
            k = rng.randrange(len(sizes)) if cop in ("gather", "scatter") else None
            if sum(sizes) * 16 < 1 << 30:
                for launch in fc.choose(cop, rows, sizes, 16, traits=traits, row_mod16=wide,
                                        chunk_mod16=aligns, chunk=k):  # fmt: skip
                    chosen.update(_options(launch.kernel()))
        for step in steps:
            _check_step(step, traits)
            chosen.update(_options(step.kernel))
        if planned % 5 == 0:  # and a split or concat of arrays of any strides
            for step in make_strided_plan(_random_strided_problem(rng), traits).steps:
                _check_step(step, traits)
                chosen.update(_options(step.kernel))
    universe = _universe()
    never = universe - chosen
    assert chosen <= universe, sorted(map(str, chosen - universe))
    assert not never - set(KEPT), "never chosen: " + ", ".join(map(str, sorted(never - set(KEPT), key=str)))
    stale = set(KEPT) - never
    assert not stale, f"KEPT entries a plan chooses or no family has: {sorted(map(str, stale))}"
