"""Programmatic dependent launch on a GPU: fast kernels built with ``dependent_launch``
carry the launch attribute, become programmatic edges in a captured graph, and give
exact results in chains where every launch reads what the one before it wrote.

A chain rotates every row through two pieces, round after round: split ``x`` into
``(a, b)``, concatenate ``(b, a)`` back into ``x``. Every buffer holds other values
each round, so a launch that read before its predecessor had finished writing would
see last round's values and leave a wrong row, not the right value by luck.

There is no negative control here (the kernels with the wait removed): a race shows
when it shows (scripts/dependent_launch_study.py saw every element wrong in one run and
none in the next), so a test that required it would fail at random. That the wait
comes before every global access is proved without a GPU, in the PTX, the SASS and the
interpreter (tests/test_dependent_launch.py)."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_util import first_mismatch, random_bits

import runtime
from ptxgen.kernels.fastcat_vec import FastcatVec
from runtime import launch as launch_module
from runtime import ops, plan

pytestmark = pytest.mark.gpu

# (dtype, rows, half width): shapes whose fused split and concat go to rowpack, rect
# (wide granules, and small ops at narrow ones) and tiles (registers backward, cp.async
# forward: just over SMALL_OP_BYTES); small, so one launch is one wave and the next
# would start early.
CHAINS = [
    ("u8", 4099, 1, "fastcat_rowpack"),
    ("bf16", 20000, 3, "fastcat_rowpack"),
    ("f32", 997, 64, "fastcat_rect"),
    ("f64", 257, 5, "fastcat_rect"),
    ("u8", 513, 37, "fastcat_rect"),
    ("f32", 1031, 7, "fastcat_rect"),
    ("u8", 14173, 37, "fastcat_tile"),
    ("f32", 18731, 7, "fastcat_tile"),
]
ROUNDS = 50


@pytest.fixture
def rng():
    return np.random.default_rng()


@pytest.fixture
def sm90(dev):
    if dev.compute_capability < (9, 0):
        pytest.skip(f"programmatic dependent launch needs sm_90; this GPU is {dev.arch}")
    return dev


def _chain(stream, x, a, b, sizes, rounds=ROUNDS):
    """``rounds`` rotations of x's rows left by ``sizes[0]`` (see above)."""
    for _ in range(rounds):
        runtime.channel_cat_backward(x, list(sizes), 1, out=[a, b], stream=stream)
        runtime.channel_cat_forward([b, a], 1, out=x, stream=stream)


def _rotated(bits, sizes, rounds):
    return np.roll(bits, -rounds * sizes[0], axis=1)


@pytest.mark.parametrize("dtype, rows, half, family", CHAINS, ids=lambda v: str(v))
def test_chains_of_dependent_ops_on_a_stream_and_in_a_graph(
    sm90, rng, fresh_plans, dtype, rows, half, family
):
    dev, sizes = sm90, (half, half)
    for op in ("backward", "forward"):
        steps = ops.plan_for(op, dtype, rows, sizes, dev).steps
        assert [s.kernel.dependent_launch for s in steps] == [True] * len(steps)
        assert steps[0].kernel.name.startswith(family), [s.kernel.id for s in steps]
        assert dev.load(steps[0].kernel).function.launcher.dependent_launch
    bits = random_bits(rng, (rows, 2 * half), dtype)
    x = dev.to_device(bits, dtype=dtype)
    a, b = dev.empty((rows, half), dtype), dev.empty((rows, half), dtype)
    with runtime.Stream(dev) as stream:
        _chain(stream, x, a, b, sizes)  # on the stream, each launch with the attribute
        stream.synchronize()
        problem = first_mismatch(x.to_numpy(bits=True), _rotated(bits, sizes, ROUNDS))
        assert not problem, f"after {ROUNDS} rounds on a stream: {problem}"

        with runtime.Graph(stream) as graph:
            _chain(stream, x, a, b, sizes, ROUNDS + 1)  # an odd count: x ends swapped
        nodes = graph.kernel_nodes
        assert len(nodes) == 2 * ROUNDS + 2
        assert not nodes[0].programmatic  # the first hangs on nothing
        assert all(n.programmatic for n in nodes[1:]), [n.index for n in nodes if not n.programmatic]
        for replay in range(1, 4):
            graph.launch()
            stream.synchronize()
            problem = first_mismatch(x.to_numpy(bits=True), _rotated(bits, sizes, replay * (ROUNDS + 1)))
            assert not problem, f"graph replay {replay}: {problem}"
        graph.close()


def test_per_piece_launches_of_every_family_chain(sm90, rng, monkeypatch, fresh_plans):
    """The per-piece variant: a split is one gather a piece (vec for the narrow one at a
    byte granule) and a concat one scatter a piece (rect), all dependent launches."""
    monkeypatch.setattr(plan, "VARIANTS", [plan.FASTCAT_CHUNK, plan.SEED])
    dev, rows, sizes = sm90, 3001, (5, 27)
    steps = ops.plan_for("backward", "u8", rows, sizes, dev).steps
    assert {s.kernel.name for s in steps} == {"fastcat_vec_backward", "fastcat_tile_backward"}
    steps += ops.plan_for("forward", "u8", rows, sizes[::-1], dev).steps
    assert all(s.kernel.dependent_launch for s in steps), [s.kernel.id for s in steps]
    bits = random_bits(rng, (rows, sum(sizes)), "u8")
    x = dev.to_device(bits, dtype="u8")
    a, b = dev.empty((rows, sizes[0]), "u8"), dev.empty((rows, sizes[1]), "u8")
    with runtime.Stream(dev) as stream:
        _chain(stream, x, a, b, sizes)
        stream.synchronize()
    problem = first_mismatch(x.to_numpy(bits=True), _rotated(bits, sizes, ROUNDS))
    assert not problem, problem


def test_dependent_launch_can_be_turned_off(sm90, monkeypatch, fresh_plans):
    monkeypatch.setenv("PTXGEN_DEPENDENT_LAUNCH", "0")
    steps = ops.plan_for("backward", "f32", 997, (64, 64), sm90).steps
    assert not any(s.kernel.dependent_launch for s in steps)
    assert "__pdl" not in steps[0].kernel.id


def test_bindings_without_the_ex_call_launch_it_plainly(sm90, rng):
    """cffi and ctypes have no cuLaunchKernelEx here: the kernel runs without the
    attribute (griddepcontrol then does nothing) and gives the same result."""
    kernel = FastcatVec(direction="backward", width=4, dependent_launch=True)
    fn = sm90.load(kernel).function
    assert fn.launcher.dependent_launch
    rows, pitch, width = 301, 40, 12
    src = rng.integers(0, 256, (rows, pitch), dtype=np.uint8)
    missing = []
    for name in launch_module.BINDINGS:
        try:
            launcher = fn.make_launcher(name)
        except (ImportError, OSError) as err:
            missing.append(f"{name}: {err}")
            continue
        assert launcher.dependent_launch == (name == "cuda.bindings")
        dy, dx = sm90.to_device(src, dtype="u8"), sm90.empty((rows, width), "u8").fill_bytes(0xA5)
        launcher.launch((64, 1, 1), kernel.block, (dy.ptr + 8, pitch, rows, width // 4, dx, width))
        sm90.synchronize()
        np.testing.assert_array_equal(dx.to_numpy(), src[:, 8 : 8 + width])
    if missing:
        pytest.skip(f"bindings that cannot load here: {'; '.join(missing)}")


def test_checked_launches_of_a_dependent_kernel_are_captured_with_programmatic_edges(sm90, rng):
    kernel = FastcatVec(direction="backward", width=4, dependent_launch=True)
    fn = sm90.load(kernel).function
    rows, pitch, width = 301, 40, 12
    src = rng.integers(0, 256, (rows, pitch), dtype=np.uint8)
    dy = sm90.to_device(src, dtype="u8")
    outs = [sm90.empty((rows, width), "u8").fill_bytes(0xA5) for _ in range(3)]
    with runtime.Stream(sm90) as stream:
        with runtime.Graph(stream) as graph:
            for i, dx in enumerate(outs):  # the first launch of a geometry carries the attribute too
                fn.launch(
                    (64 + i, 1, 1),
                    kernel.block,
                    (dy.ptr + 4 * i, pitch, rows, width // 4, dx, width),
                    stream=stream,
                )
        assert [n.programmatic for n in graph.kernel_nodes] == [False, True, True]
        graph.launch()
        stream.synchronize()
        graph.close()
    for i, dx in enumerate(outs):
        np.testing.assert_array_equal(dx.to_numpy(), src[:, 4 * i : 4 * i + width])
