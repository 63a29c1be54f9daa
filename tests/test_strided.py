"""The strided family on the CPU: the run-time divisor, the PTX (assembled by ptxas, run by
the interpreter against its launch contract with exact allocations), the footprints, and
the planner's strided plans run as the contract says on arrays of random strides."""

from __future__ import annotations

import functools
import math
import random
from pathlib import Path

import numpy as np
import pytest
from ptxsim import OutOfBounds, RecordingMemory, check_footprints, run_kernel
from strided_util import POISON, StridedBuffer, check_scalar_ranges, random_layout, run_strided_step

from ptxgen import toolchain
from ptxgen.arith import runtime_divisor
from ptxgen.footprint import FootprintError
from ptxgen.kernels import StridedCopy
from ptxgen.kernels.fastcat import GpuTraits
from ptxgen.kernels.plan import H200, WIDE, Ptr
from ptxgen.kernels.plan_strided import StridedProblem, make_strided_plan, merged_dims
from ptxgen.kernels.strided import (
    COUNT_MAX,
    MAX_ARGS,
    MAX_RANK,
    PIECES_PER_LAUNCH,
    UNROLL,
    WIDTHS,
    args_per_piece,
)

# --- the divisor ----------------------------------------------------------------------


def test_the_runtime_divisor_divides_every_index_a_kernel_can_have():
    rng = random.Random(7)
    divisors = [*range(1, 2100), *(1 << s for s in range(32)), 2**31 - 1, 2**32 - 1, 641, 6700417]
    divisors += [rng.randrange(1, 1 << 32) for _ in range(2000)]
    for d in divisors:
        m, c = runtime_divisor(d)
        assert 0 <= m < 1 << 32 and 0 <= c <= 32
        xs = [0, 1, d - 1, d, d + 1, 2 * d - 1, 2**31 - 1, 2**32 - 1, rng.randrange(1 << 32)]
        for x in (x for x in xs if 0 <= x < 1 << 32):
            assert ((x * m >> 32) + x) >> c == x // d, (d, x)


@pytest.mark.parametrize("bad", [0, -3, 1 << 32, True, 2.0])
def test_the_runtime_divisor_refuses_what_it_cannot_divide_by(bad):
    with pytest.raises(ValueError, match="runtime_divisor needs an int d with 1 <= d < 2"):
        runtime_divisor(bad)


# --- the kernel -----------------------------------------------------------------------


def test_every_strided_kernel_assembles_without_spills():
    kernels = [
        StridedCopy(width=w, rank=r, wide_strides=wide, target=t)
        for w in WIDTHS
        for r in range(1, MAX_RANK + 1)
        for wide in (False, True)
        for t in ("sm_75", "sm_90")
    ]
    kernels += [  # every piece count at every rank, each piece's section its own registers
        StridedCopy(width=w, rank=r, pieces=p)
        for w in (1, 16)
        for r in range(1, MAX_RANK + 1)
        for p in range(2, min(PIECES_PER_LAUNCH, MAX_ARGS // args_per_piece(r)) + 1)
    ]
    results = toolchain.assemble_many([(k.source, k.target) for k in kernels])
    for kernel, result in zip(kernels, results):
        assert not isinstance(result, Exception), (kernel.id, result)
        (info,) = result.functions.values()
        assert info.spill_store_bytes == 0 and info.stack_bytes == 0, (kernel.id, info)


@pytest.mark.parametrize(
    "options",
    [
        dict(width=1, rank=1),
        dict(width=4, rank=3, target="sm_75"),
        dict(width=16, rank=2, wide_strides=True),
        dict(width=2, rank=2, pieces=5),
    ],
    ids=str,
)
def test_the_kernel_declares_its_arguments_once(options):
    k = StridedCopy(**options)
    first = ("src", "dst", "count", "src_origin", "dst_origin")
    for i in range(k.pieces):
        at = i * args_per_piece(k.rank)
        assert k.arg_names[at : at + 5] == tuple(k.arg_name(name, i) for name in first)
    assert len(k.arg_names) == k.pieces * (5 + 3 * (k.rank - 1) + 2 * k.rank) == len(k.arg_types)
    assert len(k.arg_names) <= MAX_ARGS
    assert f".reqntid {k.block_size}, 1, 1" in k.source and k.entry_point_name == "strided_copy_entry_point"
    assert StridedCopy(**options) is k  # memoised


def _launch_in_interpreter(kernel, boxes, rng, count=None):
    """Launch ``kernel`` directly over ``boxes`` (a ``(extents, src_strides, dst_strides)``
    a piece) in the interpreter, each side of each piece allocated exactly what its
    footprint says, and compare every piece with numpy."""
    isz = kernel.width
    scalars, origins = {}, []
    for i, (extents, src_strides, dst_strides) in enumerate(boxes):
        name = functools.partial(kernel.arg_name, piece=i)
        scalars[name("count")] = math.prod(extents) if count is None else count
        origin = {}
        for side, strides in (("src", src_strides), ("dst", dst_strides)):
            origin[side] = scalars[name(f"{side}_origin")] = -sum(
                min(0, (e - 1) * s) for e, s in zip(extents, strides)
            )
        origins.append(origin)
        for k, extent in enumerate(extents):
            if k:
                magic, shift = runtime_divisor(extent)
                scalars.update(
                    {name(f"extent{k}"): extent, name(f"magic{k}"): magic, name(f"shift{k}"): shift}
                )
            scalars.update({name(f"src_stride{k}"): src_strides[k], name(f"dst_stride{k}"): dst_strides[k]})
    grid = kernel.grid(*(scalars[kernel.arg_name("count", i)] for i in range(len(boxes))))
    footprints = kernel.footprints(grid, kernel.block, scalars)
    mem = RecordingMemory()
    pointers, data = {}, []
    for i in range(len(boxes)):
        fsrc, fdst = footprints[2 * i : 2 * i + 2]
        pointers[fsrc.arg] = mem.alloc(fsrc.nbytes, misalign=isz % 16)
        pointers[fdst.arg] = mem.alloc(fdst.nbytes)
        data.append(rng.integers(0, 256, fsrc.nbytes, dtype=np.uint8))
        mem.write(pointers[fsrc.arg], data[-1].tobytes())
        mem.write(pointers[fdst.arg], bytes([POISON]) * fdst.nbytes)
    mem.clear()
    run_kernel(kernel, grid, {**pointers, **scalars}, mem)
    check_footprints(mem, footprints, pointers)
    for i, (extents, src_strides, dst_strides) in enumerate(boxes):
        fdst = footprints[2 * i + 1]
        want = np.full(fdst.nbytes, POISON, np.uint8)
        for c in np.ndindex(*extents):
            s = origins[i]["src"] + sum(a * b for a, b in zip(c, src_strides))
            d = origins[i]["dst"] + sum(a * b for a, b in zip(c, dst_strides))
            want[d * isz : (d + 1) * isz] = data[i][s * isz : (s + 1) * isz]
        got = np.frombuffer(mem.read(pointers[fdst.arg], fdst.nbytes), np.uint8)
        assert np.array_equal(got, want), f"piece {i}"


@pytest.mark.parametrize(
    "width, dims, src_strides, dst_strides, wide",
    [
        (1, (37,), (1,), (1,), False),  # one dim, not a whole block
        (2, (5, 7), (1, 5), (7, 1), False),  # a transpose
        (4, (3, 4, 5), (20, -5, 1), (1, 15, 3), False),  # a reversed dim
        (8, (2, 3, 70), (0, 70, 1), (210, 70, 1), False),  # a broadcast source
        (16, (4, 9), (9, 1), (1, 4), True),  # 64-bit strides (small ones here)
        (2, (2, 3, 2, 3, 2, 2), (72, 1, 36, 3, 9, 18), (72, 24, 12, 4, 2, 1), False),  # six dims
        (1, (3, 300), (-300, 1), (300, 1), False),  # several CTAs, the last partly idle
    ],
)
def test_the_kernel_copies_its_box_and_touches_nothing_else(width, dims, src_strides, dst_strides, wide):
    kernel = StridedCopy(width=width, rank=len(dims), wide_strides=wide, block=64)
    _launch_in_interpreter(kernel, [(dims, src_strides, dst_strides)], np.random.default_rng(3))


@pytest.mark.parametrize(
    "width, boxes",
    [
        # a stepped concat's three pieces: rows of 3, 5 and 24 into every other column of 64
        (2, [((6, 3), (3, 1), (64, 2)), ((6, 5), (5, 1), (64, 2)), ((6, 24), (24, 1), (64, 2))]),
        # pieces of one element, of several CTAs, and a reversed one, 64-bit strides
        (8, [((1, 1), (1, 1), (1, 1)), ((2, 300), (300, 1), (1, 2)), ((4, 7), (-7, -1), (7, 1))]),
        # the most pieces of rank 1 a launch holds
        (1, [((n,), (1,), (2,)) for n in (1, 2, 65, 3, 64, 5, 129, 7)]),
    ],
)
def test_one_launch_copies_each_of_its_pieces_and_touches_nothing_else(width, boxes):
    """Grid row i copies piece i's box: the CTAs past a shorter piece's end do nothing."""
    kernel = StridedCopy(width=width, rank=len(boxes[0][0]), pieces=len(boxes), block=64,
                         wide_strides=width == 8)  # fmt: skip
    _launch_in_interpreter(kernel, boxes, np.random.default_rng(4))


def _scalars(kernel, extents, **changes):
    scalars = {"count": math.prod(extents), "src_origin": 0, "dst_origin": 0}
    for k, e in enumerate(extents):
        if k:
            m, c = runtime_divisor(e)
            scalars.update({f"extent{k}": e, f"magic{k}": m, f"shift{k}": c})
        scalars.update({f"src_stride{k}": 1, f"dst_stride{k}": 1})
    scalars.update(changes)
    return scalars


@pytest.mark.parametrize(
    "changes, grid, message",
    [
        (dict(magic1=12345), None, r"magic1, shift1 = 12345, 2 do not divide by extent1 = 3"),
        (dict(count=7), None, r"count = 7 is not a whole number of rows of 3 elements"),
        (dict(extent1=0), None, r"extent1 = 0; every inner extent must be >= 1"),
        (dict(count=COUNT_MAX + 3), None, r"is more than 2147479552 elements a launch"),
        (dict(src_stride1=-1), None, r"src_origin = 0 leaves element offsets down to -2, below the pointer"),
        ({}, ((1 << 31) // (256 * UNROLL) + 1, 1, 1), r"gives thread indices past 2\*\*31"),
        (
            dict(count=3 * 1100),
            None,
            r"grid.x = 1 covers 1024 elements and count = 3300 needs 4 CTAs of 1024",
        ),
    ],
)
def test_footprints_refuse_what_the_kernel_cannot_copy(changes, grid, message):
    kernel = StridedCopy(width=2, rank=2)
    with pytest.raises(FootprintError, match=message):
        kernel.footprints(grid or (1, 1, 1), kernel.block, _scalars(kernel, (4, 3), **changes))
    with pytest.raises(FootprintError, match="built for block"):
        kernel.footprints((1, 1, 1), (128, 1, 1), _scalars(kernel, (4, 3)))


def test_footprints_reach_the_largest_offset_each_side():
    kernel = StridedCopy(width=4, rank=2)
    scalars = _scalars(kernel, (4, 3), src_stride0=10, src_stride1=-2, src_origin=4, dst_stride0=3)
    src, dst = kernel.footprints((1, 1, 1), kernel.block, scalars)
    assert (src.elements, src.nbytes, src.align) == (4 + 30 + 1, 35 * 4, 4)
    assert (dst.elements, dst.writes) == (9 + 2 + 1, True)


# --- the plan ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, src, dst, want",
    [
        ((2, 3, 4), (12, 4, 1), (12, 4, 1), [(24, 1, 1)]),  # row-major both: one dim
        ((4, 6), (1, 4), (6, 1), [(4, 1, 6), (6, 4, 1)]),  # a transpose: two
        ((2, 1, 5), (5, 99, 1), (5, 5, 1), [(10, 1, 1)]),  # extent 1: any stride
        ((3, 4), (0, 1), (4, 1), [(3, 0, 4), (4, 1, 1)]),  # broadcast rows
        ((2, 3, 4), (1, 8, 2), (12, 4, 1), [(2, 1, 12), (12, 2, 1)]),  # inner two step alike
        ((3, 5), (5, 1), (1, 3), [(5, 1, 3), (3, 5, 1)]),  # the destination's order decides
        ((1, 1), (7, 7), (1, 1), []),
    ],
)
def test_dims_merge_and_order_by_the_destination(shape, src, dst, want):
    assert merged_dims(shape, src, dst) == want


def _random_problem(rng, op, itemsize, *, rank=None, traits=H200):
    rank = rank or int(rng.integers(1, 5))
    shape = [int(rng.integers(1, 6)) for _ in range(rank)]
    axis = int(rng.integers(rank))
    shape[axis] = int(rng.integers(1, 9))
    cuts = sorted(int(c) for c in rng.integers(0, shape[axis] + 1, int(rng.integers(0, 3))))
    sizes = tuple(b - a for a, b in zip([0, *cuts], [*cuts, shape[axis]]))
    wide = random_layout(rng, shape, writes=op == "forward")
    pieces = []
    for s in sizes:
        piece_shape = (*shape[:axis], s, *shape[axis + 1 :])
        pieces.append(random_layout(rng, piece_shape, writes=op == "backward"))
    return StridedProblem(op, itemsize, tuple(shape), axis, sizes, wide, tuple(pieces))


def _run_plan(problem, traits, rng):
    """The plan run on random arrays of the problem's strides; returns the arrays and the
    numpy view the result must equal, with every byte outside the written array's
    elements still poison."""
    wide = StridedBuffer.make(problem.shape, problem.wide_strides, problem.itemsize)
    pieces = [
        StridedBuffer.make(problem.piece_shape(i), problem.piece_strides[i], problem.itemsize)
        for i in range(problem.pieces)
    ]
    read = [wide] if problem.op == "backward" else pieces
    for a in read:
        a.fill_random(rng)
    before = {id(a): a.buffer.copy() for a in [wide, *pieces]}
    plan = make_strided_plan(problem, traits)
    arrays = {WIDE: wide, **dict(enumerate(pieces))}
    for step in plan.steps:
        run_strided_step(step, arrays)
    cut = np.cumsum((0, *problem.sizes))
    for i, piece in enumerate(pieces):
        part = [slice(None)] * len(problem.shape)
        part[problem.axis] = slice(cut[i], cut[i + 1])
        got, want = (np.ascontiguousarray(a).view(np.uint8) for a in (piece.view(), wide.view()[tuple(part)]))
        assert np.array_equal(got, want), (problem, i)
    for a in read:  # inputs are only read
        assert np.array_equal(a.buffer, before[id(a)])
    written = pieces if problem.op == "backward" else [wide]
    for a in written:  # nothing but the elements changed: every other byte is still poison
        mask = np.ones(a.buffer.size, bool)
        if a.view().size:
            starts = (
                a.base
                + sum(
                    np.indices(a.shape).reshape(len(a.shape), -1)[k] * a.strides[k]
                    for k in range(len(a.shape))
                )
                * a.itemsize
            )
            for lane in range(a.itemsize):
                mask[starts + lane] = False
        assert (a.buffer[mask] == POISON).all(), "a byte outside the array's elements was written"
    return plan


@pytest.mark.parametrize("op", ["backward", "forward"])
@pytest.mark.parametrize("itemsize", WIDTHS)
def test_random_strided_plans_split_and_join_every_element(op, itemsize):
    rng = np.random.default_rng(itemsize * 10 + (op == "forward"))
    for _ in range(40):
        _run_plan(_random_problem(rng, op, itemsize), H200, rng)


def test_a_launch_holds_at_most_its_limits_and_the_rest_is_cut():
    rng = np.random.default_rng(5)
    tiny = GpuTraits("sm_90", 132, 2048, 60 << 20, 228 << 10, 227 << 10, 4_800 * 10**9, max_grid_x=1)
    # at most 1,024 elements a launch: rows are cut, or each outer index goes alone
    problem = StridedProblem("backward", 2, (40, 60), 1, (60,), (1, 40), ((60, 1),))
    plan = _run_plan(problem, tiny, rng)
    assert len(plan.steps) == 3 and {s.args[2] for s in plan.steps} == {17 * 60, 6 * 60}
    problem = StridedProblem("forward", 1, (3, 2000), 0, (1, 2), (2000, 1), ((-2000, -1), (1, 2)))
    plan = _run_plan(problem, tiny, rng)
    assert all(s.args[2] <= 1024 for s in plan.steps) and len(plan.steps) == 2 + 2 * 2


def test_more_dims_than_a_kernel_holds_go_one_outer_index_a_launch():
    rng = np.random.default_rng(6)
    shape = (2, 2, 3, 2, 3, 2, 2, 3)  # eight dims no merge can join
    strides = tuple(int(s) for s in np.cumprod((1, *shape[:-1])))  # the reverse of row-major
    problem = StridedProblem(
        "backward", 4, shape, 7, (1, 2), strides, (_row_major(shape, 1), _row_major(shape, 2))
    )
    plan = _run_plan(problem, H200, rng)
    # piece 0 has seven dims (its axis extent is 1): two launches; piece 1 eight: four
    assert {s.kernel.rank for s in plan.steps} == {MAX_RANK} and len(plan.steps) == 2 + 2 * 2


def test_the_pieces_left_whole_share_launches_as_many_as_their_arguments_allow():
    rng = np.random.default_rng(9)
    # a concat into every other column (x[:, ::2] as out=): three pieces, one launch
    problem = StridedProblem("forward", 2, (64, 32), 1, (3, 5, 24), (64, 2), ((3, 1), (5, 1), (24, 1)))
    (step,) = _run_plan(problem, H200, rng).steps
    assert (step.kernel.pieces, step.kernel.rank, step.grid) == (3, 2, (2, 3, 1))
    # a piece of one column merges to one dim, the others two: padded to two in the launch
    problem = StridedProblem("backward", 4, (9, 7), 1, (1, 6), (7, 1), ((1, 1), (6, 1)))
    (step,) = _run_plan(problem, H200, rng).steps
    assert (step.kernel.pieces, step.kernel.rank) == (2, 2)
    # twelve pieces of rank 2 (12 arguments each): five a launch, the 64 arguments' limit
    sizes = (1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3)
    problem = StridedProblem("forward", 1, (5, 24), 1, sizes, (48, 2), tuple((s, 1) for s in sizes))
    plan = _run_plan(problem, H200, rng)
    assert [s.kernel.pieces for s in plan.steps] == [5, 5, 2]
    assert all(len(s.args) <= MAX_ARGS for s in plan.steps)
    # two pieces of six dims that do not merge (32 arguments each): exactly the 64 arguments
    shape = (2, 3, 2, 3, 2, 4)
    column_major = tuple(int(s) for s in np.cumprod((1, *shape[:-1])))
    problem = StridedProblem("backward", 2, shape, 5, (2, 2), column_major, (_row_major(shape, 2),) * 2)
    (step,) = _run_plan(problem, H200, rng).steps
    assert (step.kernel.pieces, step.kernel.rank, len(step.args)) == (2, MAX_RANK, MAX_ARGS)
    # twelve pieces of rank 1 (7 arguments): eight a launch, the most a grid's rows take
    problem = StridedProblem("forward", 1, (24,), 0, sizes, (2,), tuple((1,) for _ in sizes))
    assert [s.kernel.pieces for s in _run_plan(problem, H200, rng).steps] == [8, 4]


def test_a_launch_takes_no_more_arguments_than_the_compiled_launcher_packs():
    source = (Path(__file__).parents[1] / "runtime" / "_fastlaunch.c").read_text()
    assert f"#define MAX_PARAMS {MAX_ARGS}\n" in source
    with pytest.raises(ValueError, match=r"pieces \(of rank 6: 32 arguments each\) = 3 is not accepted"):
        StridedCopy(width=4, rank=6, pieces=3)


def _row_major(shape, axis_extent):
    shape = (*shape[:-1], axis_extent)
    return tuple(int(np.prod(shape[d + 1 :])) for d in range(len(shape)))


def test_strides_past_32_bits_take_the_64_bit_kernel():
    problem = StridedProblem("backward", 2, (3, 4), 1, (4,), (1, 3 << 31), ((4, 1),))
    (step,) = make_strided_plan(problem, H200).steps
    assert step.kernel.wide_strides and step.kernel.rank == 2
    assert (
        not make_strided_plan(StridedProblem("backward", 2, (3, 4), 1, (4,), (1, 3), ((4, 1),)), H200)
        .steps[0]
        .kernel.wide_strides
    )
    # one launch of two pieces, only the second of them past 32 bits: the launch is 64-bit,
    # and every scalar of it fits its argument (as run_strided_step checks on every step)
    problem = StridedProblem("backward", 2, (3, 4), 1, (2, 2), (4, 1), ((2, 1), (1, 3 << 31)))
    (step,) = make_strided_plan(problem, H200).steps
    assert step.kernel.pieces == 2 and step.kernel.wide_strides
    check_scalar_ranges(step)


@pytest.mark.parametrize(
    "problem, message",
    [
        (dict(op="up"), "op 'up' is not one of backward, forward"),
        (dict(itemsize=3), "itemsize 3 is not one of 1, 2, 4, 8, 16"),
        (dict(sizes=(1, 1)), r"sizes \[1, 1\] do not sum to the axis's 4"),
        (dict(piece_strides=((4, 1),)), "give 2 strides for the wide array and for each of 2 pieces"),
    ],
)
def test_a_strided_problem_says_what_is_wrong(problem, message):
    fields = dict(op="backward", itemsize=2, shape=(3, 4), axis=1, sizes=(1, 3),
                  wide_strides=(4, 1), piece_strides=((1, 1), (3, 1)))  # fmt: skip
    with pytest.raises(ValueError, match=message):
        StridedProblem(**{**fields, **problem})


def _run_step_in_interpreter(step, arrays):
    """``step`` itself (its kernel, grid and arguments) through the interpreter, on copies
    of ``arrays`` (by ``Ptr.array``) allocated exactly, its footprints checked; returns
    each array's buffer afterwards."""
    kernel = step.kernel
    mem = RecordingMemory()
    bases = {}
    for key, a in arrays.items():
        bases[key] = mem.alloc(a.buffer.size)
        mem.write(bases[key], a.buffer.tobytes())
    args, pointers = {}, {}
    for name, value in zip(kernel.arg_names, step.args):
        if isinstance(value, Ptr):
            args[name] = pointers[name] = bases[value.array] + arrays[value.array].base + value.byte_offset
        else:
            args[name] = value
    scalars = {n: v for n, v in args.items() if n not in pointers}
    footprints = kernel.footprints(step.grid, step.block, scalars)
    mem.clear()
    run_kernel(kernel, step.grid, args, mem)
    check_footprints(mem, footprints, pointers)
    return {key: np.frombuffer(mem.read(bases[key], a.buffer.size), np.uint8) for key, a in arrays.items()}


@pytest.mark.parametrize("isz", WIDTHS)
def test_an_interpreted_plan_matches_the_contract(isz):
    """Each planned step, with its own arguments, grid and block, through the interpreter
    and through the contract (tests/strided_util.py) on the same poisoned buffers: the
    bytes agree. A split of two pieces of one rank, and a concat of pieces of ranks 1
    and 2 (padded into one launch), one of them with reversed strides on both sides."""
    rng = np.random.default_rng(8)
    problems = [
        StridedProblem("backward", isz, (5, 6), 1, (2, 4), (1, 5), ((2, 1), (4, 1))),
        StridedProblem("forward", isz, (5, 6), 1, (1, 5), (6, -1), ((1, 1), (-5, -1))),
    ]
    for problem in problems:
        wide = StridedBuffer.make(problem.shape, problem.wide_strides, isz)
        pieces = [
            StridedBuffer.make(problem.piece_shape(i), s, isz) for i, s in enumerate(problem.piece_strides)
        ]
        for a in [wide] if problem.op == "backward" else pieces:
            a.fill_random(rng)
        arrays = {WIDE: wide, **dict(enumerate(pieces))}
        (step,) = make_strided_plan(problem, H200).steps
        assert step.kernel.pieces == 2
        interpreted = _run_step_in_interpreter(step, arrays)
        run_strided_step(step, arrays)
        for key, a in arrays.items():
            assert np.array_equal(interpreted[key], a.buffer), (problem, key)
    mixed = problems[1]  # the concat's pieces are sources: their strides first
    ranks = [
        len(merged_dims(mixed.piece_shape(i), s, mixed.wide_strides))
        for i, s in enumerate(mixed.piece_strides)
    ]
    assert ranks == [1, 2]


def test_the_exact_allocations_catch_a_stray_access():
    with pytest.raises(OutOfBounds):  # the exact allocations do catch a stray access
        mem = RecordingMemory()
        mem.read(mem.alloc(4) + 4, 1)
