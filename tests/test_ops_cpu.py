"""The high-level ops without a GPU: argument checks and their messages, the planner,
and the whole call path run against an emulated device whose kernels follow the seed's
launch contract in numpy."""

from __future__ import annotations

import math
import sys
from types import SimpleNamespace
from typing import NamedTuple

import pytest
from strided_util import StridedBuffer, run_strided_step

import ptxgen
import runtime
from runtime import launch, op_arrays, op_plans, ops, plan
from runtime.arrays import torch_dtype_table
from runtime.plan import MAX_STEPS, DeviceTraits, Problem, Ptr, Step, Variant, make_plan, seed_block_size

np = pytest.importorskip("numpy")

TYPESTR = {"f32": "<f4", "f16": "<f2", "f64": "<f8", "u8": "|u1", "i16": "<i2", "i64": "<i8"}


class FakeArray:
    """A device array as a foreign library would show it: only __cuda_array_interface__."""

    def __init__(self, shape, dtype="f32", ptr=0x7F00_0000_0000, readonly=False, strides=None, stream=None):
        self.shape = tuple(shape)
        self.ptr = ptr
        self.itemsize = ptxgen.resolve_dtype(dtype).itemsize
        self.nbytes = math.prod(self.shape) * self.itemsize
        self.__cuda_array_interface__ = {
            "shape": self.shape,
            "typestr": TYPESTR[dtype],
            "data": (ptr, readonly),
            "strides": strides,
            "version": 3,
        }
        if stream is not None:
            self.__cuda_array_interface__["stream"] = stream


@pytest.fixture
def no_device(monkeypatch):
    """Any call that gets past the checks fails loudly: bad input must stop before."""

    def reached(*args, **kwargs):
        raise AssertionError("the op got past its checks to the device")

    monkeypatch.setattr(ops, "device_for", reached)
    monkeypatch.setattr(ops, "compiled_for", reached)


# --- checks and messages ---------------------------------------------------------------

DY = FakeArray((4, 10, 3))
# fmt: off
BACKWARD_CASES = [
    # (args, kwargs, exception, message fragment)
    ((DY, [4, 6]), {"dim": 3}, ValueError, "dim 3 is out of range for dy of rank 3 (shape (4, 10, 3)); accepted: -3..2"),
    ((DY, [4, 6]), {"dim": -4}, ValueError, "accepted: -3..2"),
    ((DY, [4, 6]), {"dim": True}, TypeError, "dim must be an int, not bool True"),
    ((DY, [4, 6]), {"dim": 1.0}, TypeError, "dim must be an int, not float 1.0"),
    ((DY, [4, 5]), {}, ValueError, "sizes [4, 5] sum to 9, but dy has 10 along dim 1 (shape (4, 10, 3)); they must sum to 10"),
    ((DY, [4, -1, 7]), {}, ValueError, "sizes[1] = -1; every size must be an int >= 0"),
    ((DY, [4, 6.0]), {}, TypeError, "sizes[1] = 6.0 (float); every size must be an int >= 0"),
    ((DY, [4, False, 6]), {}, TypeError, "sizes[1] = False is a bool"),
    ((DY, "46"), {}, TypeError, "sizes must be a list or tuple of ints, not str '46'"),
    ((DY, 10), {}, TypeError, "sizes must be a list or tuple of ints, not int 10"),
    ((DY, []), {}, ValueError, "sizes is empty; give at least one piece"),
    ((FakeArray(()), [1]), {}, ValueError, "dy is 0-d (shape ())"),
    ((np.zeros((4, 10)), [4, 6]), {}, TypeError, "dy: ndarray lives in host (CPU) memory"),
    ((None, [4, 6]), {}, TypeError, "dy must be a device array (runtime.DeviceArray, or an object with __cuda_array_interface__"),
    (([1, 2], [1, 1]), {}, TypeError, "not list"),
    # an out= of any strides is taken, but not one that gives two elements one address, nor
    # one whose span reaches into dy's (arrays of any strides compare by their spans)
    ((DY, [4, 6]), {"out": [FakeArray((4, 4, 3), ptr=1 << 44, strides=(0, 12, 4)), FakeArray((4, 6, 3), ptr=1 << 45)]},
     ValueError, "out[0] (shape (4, 4, 3), strides (0, 3, 1)) gives more than one of its elements the same memory (an expanded or overlapping view)"),
    ((DY, [4, 6]), {"out": [FakeArray((4, 4, 3), ptr=1 << 44, strides=(48, 8, 16)), FakeArray((4, 6, 3), ptr=1 << 45)]},
     ValueError, "out[0] (shape (4, 4, 3), strides (12, 2, 4)) gives more than one of its elements"),
    ((DY, [4, 6]), {"out": [FakeArray((4, 4, 3), ptr=0x7F00_0000_0000 + 400, strides=(4, 16, 64)), FakeArray((4, 6, 3), ptr=1 << 45)]},
     ValueError, "dy and out[0] overlap (bytes 0x7f0000000190..0x7f00000001e0); an output may not share memory with an input or another output (arrays of any strides are compared by the span"),
    ((FakeArray((4, 10), ptr=0x7F00_0000_0002), [4, 6]), {}, ValueError, "dy starts at address 0x7f0000000002, not a multiple of its element size (4 bytes for f32)"),
    ((DY, [4, 6]), {"out": FakeArray((4, 4, 3))}, TypeError, "out must be a list or tuple of arrays, not FakeArray"),
    ((DY, [4, 6]), {"out": [FakeArray((4, 4, 3), ptr=1 << 44)]}, ValueError, "out has 1 arrays for 2 sizes; give one per size"),
    ((DY, [4, 6]), {"out": [FakeArray((4, 4, 3), ptr=1 << 44), FakeArray((4, 5, 3), ptr=1 << 45)]}, ValueError,
     "out[1] has shape (4, 5, 3), expected (4, 6, 3) (dy's shape with 6 along dim 1)"),
    ((DY, [4, 6]), {"out": [FakeArray((4, 4, 3), "f16", ptr=1 << 44), FakeArray((4, 6, 3), ptr=1 << 45)]}, TypeError,
     "out[0] is f16, expected f32 (the input's dtype)"),
    ((DY, [4, 6]), {"out": [FakeArray((4, 4, 3), ptr=1 << 44, readonly=True), FakeArray((4, 6, 3), ptr=1 << 45)]},
     ValueError, "out[0] is read-only; the op writes it"),
    ((DY, [4, 6]), {"out": [FakeArray((4, 4, 3), ptr=DY.ptr + 400), FakeArray((4, 6, 3), ptr=1 << 45)]}, ValueError,
     "dy and out[0] overlap (bytes 0x7f0000000190..0x7f00000001e0); an output may not share memory"),
    ((DY, [4, 6]), {"out": [FakeArray((4, 4, 3), ptr=1 << 44), FakeArray((4, 6, 3), ptr=(1 << 44) + 188)]}, ValueError,
     "out[0] and out[1] overlap"),
    ((DY, [4, 6]), {"out": [FakeArray((4, 4, 3), ptr=1 << 44), np.zeros((4, 6, 3), np.float32)]}, TypeError,
     "out[1]: ndarray lives in host (CPU) memory"),
]
# fmt: on


@pytest.mark.parametrize("args, kwargs, exc, message", BACKWARD_CASES)
def test_backward_refuses_bad_input_before_the_device(no_device, args, kwargs, exc, message):
    with pytest.raises(exc) as info:
        runtime.channel_cat_backward(*args, **kwargs)
    assert message in str(info.value)
    assert str(info.value).startswith("channel_cat_backward: ")


X0, X1 = FakeArray((2, 3, 5), ptr=1 << 40), FakeArray((2, 4, 5), ptr=1 << 41)
# fmt: off
FORWARD_CASES = [
    (([],), {}, ValueError, "xs is empty; give at least one array to concatenate"),
    ((X0,), {}, TypeError, "xs must be a list or tuple of arrays, not FakeArray"),
    (([X0, X1],), {"dim": 3}, ValueError, "dim 3 is out of range for xs[0] of rank 3 (shape (2, 3, 5)); accepted: -3..2"),
    (([X0, X1],), {"dim": 0}, ValueError, "xs[1] has shape (2, 4, 5), xs[0] (2, 3, 5); every dim but dim 0 must match"),
    (([X0, FakeArray((2, 4), ptr=1 << 41)],), {}, ValueError, "xs[1] has shape (2, 4), xs[0] (2, 3, 5)"),
    (([X0, FakeArray((2, 4, 5), "f64", ptr=1 << 41)],), {}, TypeError, "xs[1] is f64, xs[0] is f32; all must match"),
    (([X0, np.ones((2, 4, 5), np.float32)],), {}, TypeError, "xs[1]: ndarray lives in host (CPU) memory"),
    (([X0, X1],), {"out": FakeArray((2, 7, 4), ptr=1 << 42)}, ValueError,
     "out has shape (2, 7, 4), expected (2, 7, 5) (the inputs joined along dim 1)"),
    (([X0, X1],), {"out": [FakeArray((2, 7, 5), ptr=1 << 42)]}, TypeError, "out must be a device array"),
    (([X0, X1],), {"out": FakeArray((2, 7, 5), ptr=(1 << 41) + 64)}, ValueError, "xs[1] and out overlap"),
    (([X0, X1],), {"out": FakeArray((2, 7, 5), "i64", ptr=1 << 42)}, TypeError, "out is i64, expected f32"),
]
# fmt: on


@pytest.mark.parametrize("args, kwargs, exc, message", FORWARD_CASES)
def test_forward_refuses_bad_input_before_the_device(no_device, args, kwargs, exc, message):
    with pytest.raises(exc) as info:
        runtime.channel_cat_forward(*args, **kwargs)
    assert message in str(info.value)


def test_inputs_may_share_memory_but_valid_calls_reach_the_device(monkeypatch):
    class Reached(Exception):
        pass

    def device_for(op, arrays):
        raise Reached([a.what for a in arrays])

    monkeypatch.setattr(ops, "device_for", device_for)
    x = FakeArray((2, 3, 5), ptr=1 << 40)
    with pytest.raises(Reached) as info:  # the same input twice: read-only, so fine
        runtime.channel_cat_forward([x, x], dim=-2, out=FakeArray((2, 6, 5), ptr=1 << 42))
    assert info.value.args[0] == ["xs[0]", "xs[1]", "out"]
    with pytest.raises(Reached):  # numpy ints as sizes and dim, a 0-sized piece
        runtime.channel_cat_backward(DY, (np.int64(10), 0), dim=np.int32(1))


def test_the_device_of_a_call_is_the_one_every_array_names(monkeypatch):
    """Arrays that name one device (an ordinal, or a DeviceArray's device) give it, the
    common call without a table; arrays on two devices are refused naming both; an
    empty array read through the interface names none."""
    opened = []
    monkeypatch.setattr(op_arrays, "device_of", lambda ordinal: opened.append(ordinal) or f"device {ordinal}")

    def arr(what, ordinal, device=None, nbytes=16):
        return op_arrays.OpArray(
            None, (4,), ptxgen.resolve_dtype("f32"), 1 << 40, False, device, ordinal, nbytes, what=what
        )

    own = SimpleNamespace(ordinal=1)
    assert op_arrays.device_for("op", [arr("a", 1), arr("b", 1)]) == "device 1"
    assert op_arrays.device_for("op", [arr("a", 1, own), arr("b", 1, own)]) is own
    assert op_arrays.device_for("op", [arr("a", 1), arr("b", 1, own)]) is own
    assert op_arrays.device_for("op", [arr("a", 1, own), arr("b", 1)]) is own
    assert op_arrays.device_for("op", [arr("a", None, nbytes=0), arr("b", 2)]) == "device 2"
    assert opened == [1, 2]
    for arrays in ([arr("a", 0), arr("b", 1)], [arr("a", 1, own), arr("b", 0)]):
        with pytest.raises(
            ValueError, match=r"the arrays live on different devices \(a on device \d, b on device \d\)"
        ):
            op_arrays.device_for("op", arrays)


# --- the planner -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "width, block",
    [(1, 32), (3, 32), (32, 32), (33, 64), (48, 64), (128, 128), (200, 224), (256, 256), (10**6, 256)],
)
def test_seed_block_size(width, block):
    assert seed_block_size(width) == block


def emulate(steps, arrays: dict[int, np.ndarray], limits=(2**31 - 1, 2**31 - 1)) -> None:
    """Run seed-contract steps on numpy byte arrays (``arrays[Ptr.array]``), checking that
    every access stays inside its array and every grid and scalar inside its limit."""
    max_grid, scalar_max = limits
    for step in steps:
        k = step.kernel
        src, dst, chunk_c, c_total, offset = step.args
        assert all(0 <= v <= scalar_max for v in (chunk_c, c_total, offset)), step
        assert 1 <= step.grid[0] <= max_grid and step.grid[1:] == (1, 1) and step.block == k.block
        tiles = -(-chunk_c // k.block_size)
        n_spatial, rest = divmod(step.grid[0], tiles)
        assert rest == 0
        isz = ptxgen.resolve_dtype(k.dtype).itemsize
        n = np.arange(n_spatial, dtype=np.int64)[:, None]
        ci = np.arange(chunk_c, dtype=np.int64)[None, :]
        wide = n * c_total + offset + ci
        narrow = n * chunk_c + ci
        src_i, dst_i = (wide, narrow) if k.name == "channel_cat_backward" else (narrow, wide)
        s_arr, d_arr = arrays[src.array], arrays[dst.array]
        s_view = s_arr[src.byte_offset :].view(f"u{isz}")
        d_view = d_arr[dst.byte_offset :].view(f"u{isz}")
        assert src.byte_offset % isz == 0 and dst.byte_offset % isz == 0
        assert src_i.max() < s_view.size and dst_i.max() < d_view.size, "access past the end"
        d_view[dst_i] = s_view[src_i]


def byte_arrays(rows, extents, isz, rng):
    wide = rng.integers(0, 256, rows * sum(extents) * isz, dtype=np.uint8)
    return wide, [np.zeros(rows * e * isz, np.uint8) for e in extents]


@pytest.mark.parametrize("op", ["backward", "forward"])
@pytest.mark.parametrize("dtype", ["u8", "f16", "f32", "f64"])
@pytest.mark.parametrize(
    "rows, extents, max_grid",
    [
        (5, (1, 3), 2**31 - 1),
        (7, (17, 0, 5, 256), 2**31 - 1),
        (1000, (3, 300, 1), 7),  # rows in groups: grid.x may not pass 7
        (13, (1000,), 40),  # 4-32 tiles per row, several rows per launch
        (3, (2, 3), 1),  # one tile per launch
    ],
)
def test_seed_plans_split_and_concat_correctly(op, dtype, rows, extents, max_grid):
    rng = np.random.default_rng()
    isz = ptxgen.resolve_dtype(dtype).itemsize
    traits = DeviceTraits(max_grid_x=max_grid)
    p = make_plan(Problem(op, ptxgen.resolve_dtype(dtype), rows, extents), traits, [plan.SEED])
    wide, pieces = byte_arrays(rows, extents, isz, rng)
    if op == "forward":
        for piece in pieces:
            piece[:] = rng.integers(0, 256, piece.size, dtype=np.uint8)
        wide[:] = 0xA5
    emulate(p.steps, {-1: wide, **dict(enumerate(pieces))}, (max_grid, 2**31 - 1))
    as_rows = wide.reshape(rows, sum(extents) * isz)
    bounds = np.cumsum((0, *extents)) * isz
    for i, piece in enumerate(pieces):
        assert np.array_equal(piece.reshape(rows, -1), as_rows[:, bounds[i] : bounds[i + 1]])
    assert p.variants == tuple("seed" if e else "" for e in extents)
    tiles = [-(-e // seed_block_size(e)) for e in extents if e]
    assert len(p.steps) == sum(-(-rows // (max_grid // t)) for t in tiles)


@pytest.mark.parametrize("op", ["backward", "forward"])
def test_rows_past_the_scalar_limit_are_launched_one_row_at_a_time(op):
    # With a scalar limit of 400, a wide row of 920 elements cannot be passed as c_total:
    # each row goes as one-row launches of at most 256 elements (a multiple of the block).
    rng = np.random.default_rng()
    extents, rows = (20, 900), 4
    problem = Problem(op, ptxgen.resolve_dtype("i16"), rows, extents)
    wide, pieces = byte_arrays(rows, extents, 2, rng)
    if op == "forward":
        for piece in pieces:
            piece[:] = rng.integers(0, 256, piece.size, dtype=np.uint8)
    steps = [s for i in range(2) for s in plan._seed_steps(problem.chunk(i), DeviceTraits(), scalar_max=400)]
    assert len(steps) == rows * (1 + 4)  # the 900-wide piece as 256 + 256 + 256 + 132
    assert {s.args[2] for s in steps} == {20, 256, 132}
    emulate(steps, {-1: wide, 0: pieces[0], 1: pieces[1]}, (2**31 - 1, 400))
    as_rows = wide.reshape(rows, -1)
    assert np.array_equal(pieces[0].reshape(rows, -1), as_rows[:, :40])
    assert np.array_equal(pieces[1].reshape(rows, -1), as_rows[:, 40:])


def test_shapes_past_the_seed_limits_are_cut_on_the_real_limits():
    # 2**31 rows of 4 elements: the grid of one launch would pass 2**31 - 1
    p = make_plan(
        Problem("backward", ptxgen.resolve_dtype("f32"), 2**31, (1, 3)), DeviceTraits(), [plan.SEED]
    )
    assert len(p.steps) == 4 and all(s.grid[0] <= 2**31 - 1 for s in p.steps)
    assert p.steps[1].args[0] == Ptr(-1, (2**31 - 1) * 4 * 4)
    # one row of 3 * 2**31 elements: c_total passes the i32 limit
    p = make_plan(
        Problem("forward", ptxgen.resolve_dtype("u8"), 1, (2**31, 2**31 + 5)), DeviceTraits(), [plan.SEED]
    )
    assert all(max(s.args[2:]) <= 2**31 - 1 for s in p.steps) and len(p.steps) == 4
    assert p.steps[-1].args[1] == Ptr(-1, 2**31 + (2**31 - 256))  # the wide y, past the first piece


def test_a_plan_needing_too_many_launches_is_refused():
    problem = Problem("backward", ptxgen.resolve_dtype("u8"), MAX_STEPS + 1, (2**31 - 256, 300))
    with pytest.raises(
        ValueError, match=r"would need 65537 launches for piece 0; more than 65536 is refused"
    ):
        make_plan(problem, DeviceTraits(), [plan.SEED])


def test_empty_problems_plan_nothing():
    f32 = ptxgen.resolve_dtype("f32")
    assert make_plan(Problem("backward", f32, 0, (3, 4)), DeviceTraits()).steps == ()
    assert make_plan(Problem("forward", f32, 9, (0, 0)), DeviceTraits()).steps == ()


def test_the_variant_table_is_read_in_order_of_preference():
    f32 = ptxgen.resolve_dtype("f32")
    problem = Problem("backward", f32, 10, (16, 5, 8), wide_align=0, piece_aligns=(0, 4, 0))
    marker = ptxgen.ChannelCatBackward("f32", 32)

    def vector_steps(chunk, traits):
        return [Step(marker, (chunk.index + 1, 1, 1), marker.block, (Ptr(-1), Ptr(chunk.index), 0, 0, 0))]

    # a made-up vector variant: only pieces whose start and width keep 16-byte alignment
    vector = Variant(
        "vector", "chunk", frozenset({"backward"}),
        accepts=lambda c, t: c.piece_align == 0 and (c.offset * 4) % 16 == 0 and (c.width * 4) % 16 == 0,
        build=vector_steps,
    )  # fmt: skip
    p = make_plan(problem, DeviceTraits(), [vector, plan.SEED])
    assert p.variants == ("vector", "seed", "seed")  # piece 2 sits at element 21: not aligned
    assert p.steps[0].grid == (1, 1, 1)
    fused = Variant("fused", "op", frozenset({"backward"}), lambda pr, t: pr.rows < 100, lambda pr, t: [])
    assert make_plan(problem, DeviceTraits(), [fused, vector, plan.SEED]).variants == ("fused",)
    assert make_plan(Problem("forward", f32, 10, (4,)), DeviceTraits(), [fused, plan.SEED]).variants == (
        "seed",
    )
    with pytest.raises(ValueError, match="no kernel variant accepts piece 1"):
        make_plan(problem, DeviceTraits(), [vector])
    with pytest.raises(ValueError, match="scope must be 'op' or 'chunk'"):
        Variant("bad", "row", frozenset(), vector.accepts, vector.build)


# --- the whole call path on an emulated device ---------------------------------------------


class EmulatedDevice:
    """Enough of runtime.Device for the ops: memory is one numpy byte pool, addresses
    are offsets into it from BASE, and launched kernels run through `emulate`."""

    BASE = 1 << 40

    def __init__(self, max_grid_x=2**31 - 1):
        self.ordinal, self.arch = 0, "sm_90"
        self.max_grid = (max_grid_x, 65535, 65535)
        self.multiprocessor_count, self.max_shared_memory_per_block = 132, 227 * 1024
        self.pool = np.zeros(1 << 20, np.uint8)
        self.used = 0
        self.loads, self.launches, self.allocations = [], [], []
        self.empty_streams = []  # the stream each result the ops made was allocated on

    def alloc(self, nbytes):
        ptr = self.BASE + self.used
        self.used += -(-nbytes // 256) * 256 or 256
        self.allocations.append((ptr, ptr + nbytes))
        return ptr

    def rest_of_allocation(self, ptr):
        """The bytes from ``ptr`` to the end of the allocation holding it."""
        (end,) = [end for start, end in self.allocations if start <= ptr < end]
        return self.pool[ptr - self.BASE : end - self.BASE]

    def view(self, ptr, nbytes):
        return self.pool[ptr - self.BASE : ptr - self.BASE + nbytes]

    def array(self, shape, dtype, data=None):
        a = FakeArray(shape, dtype, ptr=self.alloc(math.prod(shape) * ptxgen.resolve_dtype(dtype).itemsize))
        if data is not None:
            self.view(a.ptr, a.nbytes)[:] = np.frombuffer(np.ascontiguousarray(data).tobytes(), np.uint8)
        return a

    def read(self, a, np_dtype):
        return self.view(a.ptr, a.nbytes).view(np_dtype).reshape(a.shape)

    def empty(self, shape, dtype, *, stream=None):
        self.empty_streams.append(stream)
        return self.array(shape, ptxgen.resolve_dtype(dtype).name)

    def empty_group(self, shapes, dtype, *, stream=None):
        return [self.empty(shape, dtype, stream=stream) for shape in shapes]  # 256-byte aligned too

    def load(self, kernel):
        self.loads.append(kernel.id)
        device = self

        class Prepared:
            def __init__(self, grid, block, stream):
                self.grid, self.block, self.stream = grid, block, stream

            def raw(self, *args):  # the trusted launch the ops use
                Function().launch(self.grid, self.block, args, stream=self.stream)

        class Function:
            def prepare(self, grid, block, *, stream=None, shared_mem=0):
                return Prepared(grid, block, stream)

            def launch(self, grid, block, args, *, stream=None, shared_mem=0):
                device.launches.append((kernel.id, grid, args, stream))
                if kernel.name == "strided_copy":  # the contract, with each pointer's bytes to its end
                    at = [i for i, t in enumerate(kernel.arg_types) if t.is_pointer]
                    arrays = {
                        i: StridedBuffer(device.rest_of_allocation(args[i]), 0, (), (), kernel.width)
                        for i in at
                    }
                    given = tuple(Ptr(i) if i in arrays else a for i, a in enumerate(args))
                    run_strided_step(Step(kernel, grid, block, given), arrays)
                    return
                isz = ptxgen.resolve_dtype(kernel.dtype).itemsize
                src, dst = args[0], args[1]
                arrays = {0: device.rest_of_allocation(src), 1: device.rest_of_allocation(dst)}
                steps = [Step(kernel, grid, block, (Ptr(0), Ptr(1), *args[2:]))]
                assert src % isz == 0 and dst % isz == 0
                emulate(steps, arrays, (device.max_grid[0], 2**31 - 1))

        return type("Module", (), {"function": Function()})()


@pytest.fixture
def emulated(monkeypatch, fresh_plans):
    # The emulator knows the seed kernel's index mapping; the fast kernels are run by the
    # PTX interpreter in tests/test_fastcat_plans.py.
    monkeypatch.setattr(plan, "VARIANTS", [plan.SEED])
    device = EmulatedDevice()
    monkeypatch.setattr(ops, "device_for", lambda op, arrays: device)
    monkeypatch.setattr(ops, "device_of", lambda ordinal: device)  # a known call's, without the lane
    return device


@pytest.mark.parametrize(
    "shape, sizes, dim",
    [
        ((37,), (1, 0, 36), 0),
        ((5, 17), (3, 14), -1),
        ((2, 9, 3, 4), (2, 0, 7), 1),
        ((3, 4, 11, 2), (5, 6), -2),
        ((0, 6), (2, 4), 1),
        ((4, 6, 0), (2, 4), 1),
    ],
)
def test_the_ops_split_and_join_like_numpy(emulated, shape, sizes, dim):
    rng = np.random.default_rng()
    data = rng.integers(-(2**15), 2**15, shape, dtype=np.int16)
    dy = emulated.array(shape, "i16", data)
    pieces = runtime.channel_cat_backward(dy, sizes, dim)
    want = np.split(data, np.cumsum(sizes)[:-1], axis=dim)
    assert [p.shape for p in pieces] == [w.shape for w in want]
    for got, w in zip(pieces, want):
        assert np.array_equal(emulated.read(got, np.int16), w)
    y = runtime.channel_cat_forward(pieces, dim)
    assert y.shape == shape and np.array_equal(emulated.read(y, np.int16), data)
    out = [emulated.array(w.shape, "i16") for w in want]
    before = len(emulated.launches)
    result = runtime.channel_cat_backward(dy, list(sizes), dim, out=out, stream=7)
    assert len(result) == len(out) and all(r is o for r, o in zip(result, out))
    for got, w in zip(out, want):
        assert np.array_equal(emulated.read(got, np.int16), w)
    assert all(stream == 7 for *_, stream in emulated.launches[before:])


def test_results_the_caller_did_not_pass_are_made_on_the_ops_stream(emulated):
    """Without out=, each result is allocated on the stream the op runs on (so the pool
    orders its memory after the op's writes), after every check and before the launch."""
    data = np.arange(6 * 10, dtype=np.float32).reshape(6, 10)
    dy = emulated.array((6, 10), "f32", data)
    emulated.empty_streams.clear()
    a, b = runtime.channel_cat_backward(dy, [3, 7], stream=7)
    y = runtime.channel_cat_forward([a, b], stream=9)
    assert emulated.empty_streams == [7, 7, 9]
    assert np.array_equal(emulated.read(y, np.float32), data)
    with pytest.raises(ValueError, match="sizes"):
        runtime.channel_cat_backward(dy, [3, 8], stream=7)
    assert emulated.empty_streams == [7, 7, 9]  # a refused call allocates nothing


def _channels_last(emulated, shape, dtype, data=None):
    """A dense (N, C, H, W) array in channels_last order, as CAI shows it (byte strides);
    ``data`` in logical order."""
    n, c, h, w = shape
    a = emulated.array(
        (n, h, w, c), dtype, None if data is None else np.ascontiguousarray(data.transpose(0, 2, 3, 1))
    )
    isz = a.itemsize
    return FakeArray(shape, dtype, ptr=a.ptr, strides=(h * w * c * isz, isz, w * c * isz, c * isz))


def test_a_view_of_part_of_every_row_is_split_and_joined_with_its_gaps_left(emulated):
    """A wide array that is a view of columns [off, off + extent) of a wider one, in any
    rank: the rows step by the wider one's pitch; a concat into such a view writes its
    columns only, every other byte of the wider array as it was."""
    rng = np.random.default_rng()
    for shape, off, pitch, sizes, dim in (((6, 10), 3, 16, [4, 6], 1), ((2, 3, 7), 0, 9, [5, 2], -1)):
        rows, extent = math.prod(shape[: dim % len(shape)]), math.prod(shape[dim % len(shape) :])
        full = rng.integers(0, 2**15, (rows, pitch), dtype=np.int16)
        base = emulated.array((rows, pitch), "i16", full)
        strides = [2 * pitch] if len(shape) == 2 else [2 * pitch * shape[1], 2 * pitch]
        view = FakeArray(shape, "i16", ptr=base.ptr + 2 * off, strides=(*strides, 2))
        want = full[:, off : off + extent].reshape(shape)
        pieces = runtime.channel_cat_backward(view, sizes, dim)
        for got, w in zip(pieces, np.split(want, np.cumsum(sizes)[:-1], axis=dim)):
            assert np.array_equal(emulated.read(got, np.int16), w)
        target = emulated.array((rows, pitch), "i16", np.full((rows, pitch), 77, np.int16))
        out = FakeArray(shape, "i16", ptr=target.ptr + 2 * off, strides=(*strides, 2))
        assert runtime.channel_cat_forward(pieces, dim, out=out) is out
        written = emulated.read(target, np.int16)
        assert np.array_equal(written[:, off : off + extent].reshape(shape), want)
        assert (written[:, :off] == 77).all() and (written[:, off + extent :] == 77).all()


def _logical(emulated, a, np_dtype):
    """A channels_last FakeArray's elements in logical (N, C, H, W) order."""
    n, c, h, w = a.shape
    return emulated.view(a.ptr, a.nbytes).view(np_dtype).reshape(n, h, w, c).transpose(0, 3, 1, 2)


@pytest.mark.parametrize("sizes", [(3, 5), (1, 6, 1), (7,)])
def test_channels_last_arrays_split_and_join_as_the_rows_their_memory_holds(emulated, sizes):
    """A channels_last (N, C, H, W) array is N·H·W rows of C in memory: split along C into
    out= arrays in the same order, and joined back, every element where it belongs; the
    plan is the row-major one of (N·H·W, C)."""
    rng = np.random.default_rng()
    shape = (2, sum(sizes), 3, 5)
    data = rng.integers(-(2**15), 2**15, shape, dtype=np.int16)
    dy = _channels_last(emulated, shape, "i16", data)
    outs = [_channels_last(emulated, (2, s, 3, 5), "i16") for s in sizes]
    result = runtime.channel_cat_backward(dy, sizes, 1, out=outs)
    assert all(r is o for r, o in zip(result, outs))
    for got, want in zip(outs, np.split(data, np.cumsum(sizes)[:-1], axis=1)):
        assert np.array_equal(_logical(emulated, got, np.int16), want)
    y = _channels_last(emulated, shape, "i16")
    assert runtime.channel_cat_forward(outs, 1, out=y) is y
    assert np.array_equal(_logical(emulated, y, np.int16), data)
    rows = ops.plan_for("backward", "i16", 2 * 3 * 5, sizes)
    assert emulated.launches[-1][1] == rows.steps[-1].grid  # the (rows, C) plan ran
    # arrays in different orders, and a DeviceArray's results (row-major only) of a
    # channels_last input: the strided copy, every element where it belongs
    row_major = emulated.array((2, sum(sizes), 3, 5), "i16")
    before = len(emulated.launches)
    runtime.channel_cat_backward(dy, [shape[1]], 1, out=[row_major])
    assert np.array_equal(emulated.read(row_major, np.int16), data)
    made = runtime.channel_cat_backward(dy, sizes, 1)
    for got, want in zip(made, np.split(data, np.cumsum(sizes)[:-1], axis=1)):
        assert got.shape == want.shape and np.array_equal(emulated.read(got, np.int16), want)
    assert {k.split("__")[0] for k, *_ in emulated.launches[before:]} == {"strided_copy"}


def test_a_shape_is_planned_once_and_replanned_for_new_alignments(emulated, monkeypatch):
    made = []
    real = op_plans.make_plan
    monkeypatch.setattr(
        op_plans, "make_plan", lambda problem, traits: made.append(problem) or real(problem, traits)
    )
    data = np.arange(6 * 10, dtype=np.float32).reshape(6, 10)
    dy = emulated.array((6, 10), "f32", data)
    for _ in range(3):
        a, b = runtime.channel_cat_backward(dy, [3, 7])
        assert np.array_equal(emulated.read(b, np.float32), data[:, 3:])
    assert len(made) == 1 and len(emulated.loads) == 2 and len(emulated.launches) == 6
    # the same shape from an address 4 bytes past a 16-byte boundary: a plan of its own
    shifted = emulated.array((6 * 10 + 1,), "f32")
    dy2 = FakeArray((6, 10), "f32", ptr=shifted.ptr + 4)
    emulated.view(dy2.ptr, dy2.nbytes)[:] = np.frombuffer(data.tobytes(), np.uint8)
    a, b = runtime.channel_cat_backward(dy2, [3, 7])
    assert np.array_equal(emulated.read(a, np.float32), data[:, :3])
    assert len(made) == 2 and made[1].wide_align == 4 and made[0].wide_align == 0


@pytest.mark.parametrize("rows_per_launch, launches", [(5, 5 + 5), (1, 23 + 23)])
def test_grids_past_the_device_limit_become_several_launches(
    monkeypatch, fresh_plans, rows_per_launch, launches
):
    """23 rows cut into launches of a few rows each, for each piece, all of them made by
    the op's one call, in order."""
    monkeypatch.setattr(plan, "VARIANTS", [plan.SEED])  # the seed's grid limits are what is tested
    device = EmulatedDevice(max_grid_x=rows_per_launch)
    monkeypatch.setattr(ops, "device_for", lambda op, arrays: device)
    data = np.random.default_rng().integers(0, 2**63, (23, 40), dtype=np.uint64)
    pieces = runtime.channel_cat_backward(device.array((23, 40), "i64", data), [39, 1])
    assert np.array_equal(device.read(pieces[0], np.uint64), data[:, :39])
    assert np.array_equal(device.read(pieces[1], np.uint64), data[:, 39:])
    assert len(device.launches) == launches


def test_a_remembered_shape_still_refuses_bools(emulated):
    """Shapes are remembered per (shape, dim, sizes); True equals 1 as a key, but a bool
    is refused whether or not the shape was seen."""
    dy = emulated.array((4, 10), "f32")
    runtime.channel_cat_backward(dy, [1, 9], 1)  # remembered
    with pytest.raises(TypeError, match=r"sizes\[0\] = True is a bool"):
        runtime.channel_cat_backward(dy, [True, 9], 1)
    with pytest.raises(TypeError, match="dim must be an int, not bool True"):
        runtime.channel_cat_backward(dy, [1, 9], True)
    pieces = runtime.channel_cat_backward(dy, (np.int64(1), 9), 1)  # an integer type is accepted
    assert [p.shape for p in pieces] == [(4, 1), (4, 9)]
    xs = [emulated.array((4, 3), "f32"), emulated.array((4, 7), "f32")]
    assert runtime.channel_cat_forward(xs, 1).shape == (4, 10)
    with pytest.raises(TypeError, match="dim must be an int, not bool True"):
        runtime.channel_cat_forward(xs, True)


def test_arrays_that_name_a_stream_are_ordered_before_the_launch(emulated, monkeypatch):
    """CAI v3: an array naming its producer's stream makes the op's stream wait for it,
    after every check passed and before the launch."""
    calls = []
    monkeypatch.setattr(
        ops, "order_after", lambda device, consumer, producer: calls.append((consumer, producer))
    )
    data = np.arange(40, dtype=np.float32).reshape(4, 10)
    dy = emulated.array((4, 10), "f32", data)
    produced = FakeArray((4, 10), "f32", ptr=dy.ptr, stream=0x7777)
    out = [emulated.array((4, 3), "f32"), FakeArray((4, 7), "f32", ptr=emulated.alloc(4 * 7 * 4), stream=2)]
    runtime.channel_cat_backward(produced, [3, 7], out=out, stream=7)
    assert calls == [(7, 0x7777), (7, 2)]
    assert len(emulated.launches) == 2  # one launch per piece, after the waits
    calls.clear()
    with pytest.raises(ValueError, match="sum to"):
        runtime.channel_cat_backward(produced, [3, 6], stream=7)
    assert calls == []  # refused before anything was queued
    runtime.channel_cat_forward([produced, FakeArray((4, 2), "f32", ptr=emulated.alloc(32), stream=5)], 1)
    assert calls == [(0, 0x7777), (0, 5)]


def _device_array(device, shape, dtype, data=None):
    """A runtime.DeviceArray over the emulated device's memory (the C lane takes
    DeviceArrays by their class and ``launch_key``)."""
    from runtime.memory import DeviceArray, launch_key

    fake = device.array(shape, dtype, data)
    a = DeviceArray.__new__(DeviceArray)
    a.device, a.shape, a.nbytes, a.address = device, tuple(shape), fake.nbytes, fake.ptr
    a._ptr, a._dtype, a._open, a._memory = fake.ptr, ptxgen.resolve_dtype(dtype), True, None
    a.launch_key = launch_key(device, a._dtype) if fake.nbytes else None
    return a


@pytest.mark.parametrize(
    "shape, sizes, dim, descending",
    [((5, 17), (3, 14), -1, False), ((2, 9, 3, 4), (2, 1, 6), 1, True), ((37,), (36, 1), 0, True)],
)
def test_the_c_lane_launches_what_the_python_path_would(
    emulated, monkeypatch, launch_path, shape, sizes, dim, descending
):
    """DeviceArrays with ``out``: the first call of a kind goes through the Python path,
    which hands it to the C lane; compiled, the next is the lane's alone (the Python
    reader is made to fail). Both write what numpy's split and concatenate give, and
    hand the driver the same launches. Outputs allocated in descending address order
    make the overlap check take the long way."""
    emulated.closed = False
    data = np.random.default_rng().integers(-(2**63), 2**63, shape, dtype=np.int64)
    dy = _device_array(emulated, shape, "i64", data)
    want = np.split(data, np.cumsum(sizes)[:-1], axis=dim)
    order = range(len(sizes) - 1, -1, -1) if descending else range(len(sizes))
    made = {i: _device_array(emulated, want[i].shape, "i64") for i in order}
    out = [made[i] for i in range(len(sizes))]
    y = _device_array(emulated, shape, "i64")

    real = ops.recognise
    for i in range(2):  # run by the Python path, then remembered
        if i and launch_path == "compiled":
            monkeypatch.setattr(ops, "recognise", lambda *a, **k: pytest.fail("the Python path was taken"))
        before = len(emulated.launches)
        assert runtime.channel_cat_backward(dy, list(sizes), dim, out=out, stream=7) == out
        assert runtime.channel_cat_forward(out, dim, out=y, stream=7) is y
    lane = emulated.launches[before:]
    for got, w in zip(out, want):
        assert np.array_equal(emulated.read(got, np.int64), w)
    assert np.array_equal(emulated.read(y, np.int64), data)

    monkeypatch.setattr(ops, "recognise", real)
    monkeypatch.setattr(ops, "_lane", None)
    before = len(emulated.launches)
    runtime.channel_cat_backward(dy, list(sizes), dim, out=out, stream=7)
    runtime.channel_cat_forward(out, dim, out=y, stream=7)
    assert emulated.launches[before:] == lane


def test_an_output_sharing_a_byte_with_any_other_array_is_refused_wherever_they_lie(emulated, monkeypatch):
    """Arrays at random places in one buffer, in any address order, some sharing
    memory: the Python path refuses a split or a concat exactly where an output shares
    a byte with an input or another output (inputs may share with each other), and
    otherwise runs it."""
    monkeypatch.setattr(ops, "_lane", None)  # the Python path's own check
    emulated.closed = False
    rng = np.random.default_rng(20261203)
    base = _device_array(emulated, (4096,), "f32")

    def at(offset, shape):  # a DeviceArray over the buffer from element ``offset``
        a = _device_array(emulated, (1,), "f32")
        a.shape, a.nbytes = shape, math.prod(shape) * 4
        a.address = a._ptr = base.address + 4 * offset
        return a

    def shared(a, b):  # an empty array shares no byte
        return a.nbytes and b.nbytes and a.address < b.address + b.nbytes and b.address < a.address + a.nbytes

    refused = ran = 0
    for _ in range(300):
        sizes = [int(s) for s in rng.integers(0, 5, rng.integers(2, 5))]
        if not sum(sizes):
            continue
        rows = int(rng.integers(1, 4))
        wide = at(int(rng.integers(0, 64)), (rows, sum(sizes)))
        pieces = [at(int(rng.integers(0, 64)), (rows, s)) for s in sizes]
        for split in (True, False):
            inputs, outputs = ([wide], pieces) if split else (pieces, [wide])
            arrays = [*inputs, *outputs]
            clash = any(
                shared(o, a)
                for i, o in enumerate(arrays)
                if i >= len(inputs)
                for j, a in enumerate(arrays)
                if j != i
            )
            try:
                if split:
                    runtime.channel_cat_backward(wide, sizes, 1, out=pieces)
                else:
                    runtime.channel_cat_forward(pieces, 1, out=wide)
            except ValueError as err:
                assert clash and "overlap" in str(err), err
                refused += 1
            else:
                assert not clash, (sizes, [(a.address - base.address, a.nbytes) for a in arrays])
                ran += 1
    assert refused > 50 and ran > 50, (refused, ran)


def test_the_c_lane_leaves_a_closed_devices_calls_to_python(emulated, monkeypatch, launch_path):
    """A call the lane remembered on a device that has since closed is not run from C:
    the Python path takes it (and says what is wrong), and the lane's slot for that
    device, stream and alignment then holds the new device's launch."""
    if launch_path != "compiled":
        pytest.skip("the C lane's own test")
    emulated.closed = False
    dy = _device_array(emulated, (4, 10), "f32")
    out = [_device_array(emulated, (4, 3), "f32"), _device_array(emulated, (4, 7), "f32")]
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out)
    assert ops._lane.split(dy, [3, 7], 1, out, None) is True
    emulated.closed = True
    assert ops._lane.split(dy, [3, 7], 1, out, None) is False
    other = EmulatedDevice()
    other.closed = False
    monkeypatch.setattr(ops, "device_for", lambda op, arrays: other)
    dy = _device_array(other, (4, 10), "f32")
    out = [_device_array(other, (4, 3), "f32"), _device_array(other, (4, 7), "f32")]
    assert ops._lane.split(dy, [3, 7], 1, out, None) is False
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out)  # the Python path, on the open device
    before = len(other.launches)
    assert ops._lane.split(dy, [3, 7], 1, out, None) is True and len(other.launches) > before


def test_the_c_lane_leaves_what_it_refuses_to_the_python_path(emulated, monkeypatch, launch_path):
    """Overlap, a wrong shape, another dtype, a bool size: the C lane launches nothing
    and the Python path raises the error that names the problem."""
    emulated.closed = False
    dy = _device_array(emulated, (4, 10), "f32")
    a, b = _device_array(emulated, (4, 3), "f32"), _device_array(emulated, (4, 7), "f32")
    runtime.channel_cat_backward(dy, [3, 7], 1, out=[a, b])  # remembered
    before = len(emulated.launches)
    wrong = _device_array(emulated, (4, 6), "f32")
    other = _device_array(emulated, (4, 7), "i64")
    cases = [
        ([3, 7], [a, a], ValueError, r"out\[1\] has shape \(4, 3\), expected \(4, 7\)"),
        ([3, 7], [a, wrong], ValueError, r"out\[1\] has shape \(4, 6\), expected \(4, 7\)"),
        ([3, 7], [a, other], TypeError, r"out\[1\] is i64, expected f32"),
        ([3, 7], [b, a], ValueError, r"out\[0\] has shape \(4, 7\), expected \(4, 3\)"),
        ([True, 9], [_device_array(emulated, (4, 1), "f32"), _device_array(emulated, (4, 9), "f32")],
         TypeError, r"sizes\[0\] = True is a bool"),
        ([3, 7], [a], ValueError, "out has 1 arrays for 2 sizes"),
    ]  # fmt: skip
    for sizes, out, error, message in cases:
        with pytest.raises(error, match=message):
            runtime.channel_cat_backward(dy, sizes, 1, out=out)
    with pytest.raises(ValueError, match=r"xs\[0\] and out overlap"):
        alias = _device_array(emulated, (4, 3), "f32")
        alias.address = alias._ptr = dy.address + 16  # inside dy
        runtime.channel_cat_forward([alias, b], 1, out=dy)
    with pytest.raises(ValueError, match=r"xs\[1\] has shape \(4, 7\), xs\[0\] \(4, 3, 1\)"):
        runtime.channel_cat_forward([_device_array(emulated, (4, 3, 1), "f32"), b], 1, out=dy)
    assert len(emulated.launches) == before


class _FakeTensor:
    """What the C lane and the Python reader read of a CUDA ``torch.Tensor``, over
    the emulated device's memory (put in as the tensor class, ``op_arrays.TORCH.array_class``)."""

    def __init__(self, device, shape, dtype, data=None, requires_grad=False):
        self._array = device.array(shape, dtype, data)
        self.shape, self.dtype, self.nbytes = tuple(shape), dtype, self._array.nbytes
        self.is_cuda, self.requires_grad = True, requires_grad

    def is_contiguous(self):
        return True

    def data_ptr(self):
        return self._array.ptr

    def get_device(self):
        return 0


@pytest.fixture
def mixed(emulated, monkeypatch, launch_path):
    emulated.closed = False
    monkeypatch.setattr(op_arrays.TORCH, "array_class", _FakeTensor)
    if launch_path == "compiled":  # a C lane of the test's own, taking the fake tensors
        lane = launch.compiled_ops()
        lane.bind_torch(_FakeTensor, torch_dtype_table())
        monkeypatch.setattr(ops, "_lane", lane)
    return emulated


def _closed(a):
    a.launch_key, a.address, a._open = None, 0, False
    return a


def test_the_c_lane_takes_torch_tensors_and_device_arrays_together(mixed, monkeypatch, launch_path):
    data = np.arange(4 * 10, dtype=np.float32).reshape(4, 10)
    dy = _FakeTensor(mixed, (4, 10), "f32", data)
    out = [_device_array(mixed, (4, 3), "f32"), _device_array(mixed, (4, 7), "f32")]
    y = _FakeTensor(mixed, (4, 10), "f32")
    for i in range(2):  # run by the Python path, then remembered: compiled, the C lane's alone
        if i and launch_path == "compiled":
            monkeypatch.setattr(ops, "recognise", lambda *a, **k: pytest.fail("the Python path was taken"))
        runtime.channel_cat_backward(dy, [3, 7], 1, out=out)
        runtime.channel_cat_forward(out, 1, out=y)
    assert np.array_equal(mixed.read(out[0], np.float32), data[:, :3])
    assert np.array_equal(mixed.read(out[1], np.float32), data[:, 3:])
    assert np.array_equal(mixed.read(y._array, np.float32), data)


def test_a_first_torch_call_is_handed_to_the_c_lane(emulated, monkeypatch, launch_path):
    """torch is bound by the first call that sees a tensor: the Python path reads it,
    binds the C lane to torch, and hands the lane that call, so the next runs in C."""
    emulated.closed = False
    monkeypatch.setattr(op_arrays.TORCH, "array_class", None)  # torch not seen yet
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(Tensor=_FakeTensor))
    if launch_path == "compiled":  # unbound: the first call binds it, as ops' own
        monkeypatch.setattr(ops, "_lane", launch.compiled_ops())
    data = np.arange(4 * 10, dtype=np.float32).reshape(4, 10)
    dy = _FakeTensor(emulated, (4, 10), "f32", data)
    out = [_FakeTensor(emulated, (4, 3), "f32"), _FakeTensor(emulated, (4, 7), "f32")]
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out)
    assert op_arrays.TORCH.array_class is _FakeTensor
    if launch_path == "compiled":
        assert ops._lane.remembered == 1
        monkeypatch.setattr(ops, "recognise", lambda *a, **k: pytest.fail("the Python path was taken"))
        assert ops._lane.split(dy, [3, 7], 1, out, None) is True
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out)
    assert np.array_equal(emulated.read(out[1]._array, np.float32), data[:, 3:])


def test_torch_half_imported_by_another_thread_is_not_torch_yet(monkeypatch):
    """``import torch`` puts the module in sys.modules before it has ``Tensor``: a call
    on another thread then meanwhile must not fail on the missing attribute, nor
    remember "no torch"; once torch has its Tensor, the first caller binds it, once."""
    bound = []
    monkeypatch.setattr(op_arrays, "TORCH", op_arrays.FirstSeen())
    op_arrays.TORCH.when_seen(bound.append)
    half = SimpleNamespace()
    monkeypatch.setitem(sys.modules, "torch", half)
    assert op_arrays.torch_tensor_class() is None and op_arrays.TORCH.array_class is None and not bound
    half.Tensor = _FakeTensor
    assert op_arrays.torch_tensor_class() is _FakeTensor
    assert op_arrays.torch_tensor_class() is _FakeTensor
    assert op_arrays.TORCH.array_class is _FakeTensor and bound == [_FakeTensor]


def test_closed_empty_and_overlapping_arrays_beside_tensors_are_refused(mixed):
    """A closed or empty DeviceArray has no launch key, like a torch tensor: it must not
    pass for one of the right dtype and device (a closed one's address is 0)."""
    dy = _FakeTensor(mixed, (4, 10), "f32")
    b = _device_array(mixed, (4, 7), "f32")
    a = _device_array(mixed, (4, 5), "f32")
    before = len(mixed.launches)
    cases = [
        (lambda: runtime.channel_cat_backward(dy, [3, 7], 1, out=[_closed(_device_array(mixed, (4, 3), "f32")), b]),
         ValueError, r"out\[0\] is a closed DeviceArray"),
        (lambda: runtime.channel_cat_backward(dy, [0, 10], 1, out=[_device_array(mixed, (4, 0), "i64"),
                                                                     _device_array(mixed, (4, 10), "f32")]),
         TypeError, r"out\[0\] is i64, expected f32"),
        (lambda: runtime.channel_cat_forward([_closed(_device_array(mixed, (4, 3), "f32")), b], 1,
                                             out=_FakeTensor(mixed, (4, 10), "f32")),
         ValueError, r"xs\[0\] is a closed DeviceArray"),
        (lambda: runtime.channel_cat_backward(dy, [5, 5], 1, out=[a, a]), ValueError, r"out\[0\] and out\[1\] overlap"),
    ]  # fmt: skip
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()
    assert len(mixed.launches) == before


def test_the_c_lane_leaks_no_reference(mixed, monkeypatch, launch_path):
    """Hits, and calls it leaves to the Python path, many times over: every object's
    reference count is what it was (sys.getrefcount)."""
    if launch_path != "compiled":
        pytest.skip("the C lane's own test")
    from launch_util import reference_counts_after

    dy = _FakeTensor(mixed, (4, 10), "f32")
    out = [_device_array(mixed, (4, 3), "f32"), _device_array(mixed, (4, 7), "f32")]
    y = _FakeTensor(mixed, (4, 10), "f32")
    sizes, wrong = [3, 7], [4, 6]
    calls = [
        lambda: runtime.channel_cat_backward(dy, sizes, 1, out=out, stream=7),
        lambda: runtime.channel_cat_forward(out, 1, out=y, stream=7),
        lambda: runtime.channel_cat_backward(y, sizes, -1, out=out),
    ]
    refused = [lambda: runtime.channel_cat_backward(dy, wrong, 1, out=out)]
    watched = (dy, y, *out, sizes, wrong, dy.shape, out[0].shape, out[0].launch_key)
    before, after = reference_counts_after(watched, calls, refused, 300)
    assert after == before


def test_the_c_lane_survives_python_code_run_in_the_middle(emulated, monkeypatch, launch_path):
    """Reading an argument runs Python code (a property, a stream's ``cuda_stream``), during
    which another thread may drop the lane's entries or change a list the call was given:
    the C lane holds what it reads (an entry, a tuple of the lists) and neither crashes
    nor launches what the call did not ask for."""
    if launch_path != "compiled":
        pytest.skip("the C lane's own test")
    from runtime import stream as streams

    emulated.closed = False
    data = np.arange(40, dtype=np.float32).reshape(4, 10)
    dy = _device_array(emulated, (4, 10), "f32", data)
    out = [_device_array(emulated, (4, s), "f32") for s in (3, 7)]
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out)  # the entry is made
    armed = [True]

    class Closing(type(emulated)):
        @property
        def closed(self):  # another thread's clear_plans() while this one reads it
            if armed[0]:
                armed[0] = False
                ops._lane.forget()
            return False

    monkeypatch.setattr(emulated, "__class__", Closing)
    assert ops._lane.split(dy, [3, 7], 1, out, None) in (True, False)
    sizes = [3, 7]

    class Racy:  # a stream whose handle lookup changes the list of sizes
        @property
        def cuda_stream(self):
            sizes[:] = [10**20 + i for i in range(1000)]
            return 0

    before = len(emulated.launches)
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out)  # the entry again
    per_op = len(emulated.launches) - before
    before = len(emulated.launches)
    ops._lane.split(dy, sizes, 1, out, Racy())  # the sizes as given: [3, 7]
    assert len(emulated.launches) - before in (0, per_op)
    assert np.array_equal(emulated.read(out[0], np.float32), data[:, :3])
    handle = streams.trust_stream_handle(0x7777_0000)
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out, stream=handle)
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out, stream=handle)  # remembered by the C path
    streams._forget_stream_handle(handle)  # the Stream that made it closed
    before = len(emulated.launches)
    with pytest.raises(ValueError, match="not a stream this runtime knows"):
        runtime.channel_cat_backward(dy, [3, 7], 1, out=out, stream=handle)
    assert len(emulated.launches) == before


def test_the_c_lane_runs_the_ops_steps_in_c(emulated, monkeypatch, launch_path):
    """Where the plan's raw launches are compiled, its launch function is a Steps object,
    which the C lane runs with the addresses as C values: the second call hands the
    driver exactly the first call's launches, with the Python path untouched."""
    if launch_path != "compiled":
        pytest.skip("the C lane's own test")
    from launch_util import RecordingBinding
    from test_runtime_cpu import function_for

    from runtime.layout import ArgumentLayout

    emulated.closed = False
    bindings = []

    def load(kernel):  # a real compiled Function, its driver a recorder
        binding = RecordingBinding(ArgumentLayout(kernel.arg_names, kernel.arg_types), compiled=True)
        bindings.append(binding)
        return SimpleNamespace(function=function_for(kernel, binding))

    monkeypatch.setattr(emulated, "load", load)
    dy = _device_array(emulated, (4, 10), "f32")
    out = [_device_array(emulated, (4, s), "f32") for s in (3, 7)]
    handed = []
    real_route = ops._launch_route
    monkeypatch.setattr(ops, "_launch_route", lambda *a: handed.append(real_route(*a)) or handed[-1])
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out, stream=7)
    assert [type(h[3]).__name__ for h in handed] == ["Steps"]
    first = [(c.args[:9], c.slots) for b in bindings for c in b.calls]
    assert len(first) == 2 and all(c.compiled for b in bindings for c in b.calls)
    for b in bindings:
        b.calls.clear()
    monkeypatch.setattr(ops, "recognise", lambda *a, **k: pytest.fail("the Python path was taken"))
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out, stream=7)
    assert [(c.args[:9], c.slots) for b in bindings for c in b.calls] == first
    pointers = sorted(int.from_bytes(c.slots[i], "little") for b in bindings for c in b.calls for i in (0, 1))
    assert pointers == sorted(
        [dy.address, dy.address, out[0].address, out[1].address]
    )  # the seed's: dy whole


def test_the_c_lane_follows_use_compiled_launch(mixed, monkeypatch, launch_path):
    """``use_compiled_launch(False)`` switches the ops' C lane off: a remembered call it
    took answers False, and the Python path launches it (its known step, as where the
    extension is not built); on again, C takes it. A lane made while the path is off
    starts off."""
    if launch_path != "compiled":
        pytest.skip("the C lane's own test")
    dy = _device_array(mixed, (4, 10), "f32")
    out = [_device_array(mixed, (4, s), "f32") for s in (3, 7)]
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out)  # remembered
    assert ops._lane.split(dy, [3, 7], 1, out, None) is True
    taken = []
    real = ops._known
    monkeypatch.setattr(ops, "_known", lambda *a, **k: taken.append(a[0]) or real(*a, **k))
    launches = len(mixed.launches)
    launch.use_compiled_launch(False)
    try:
        assert ops._lane.enabled is False and launch.compiled_ops().enabled is False
        assert ops._lane.split(dy, [3, 7], 1, out, None) is False
        runtime.channel_cat_backward(dy, [3, 7], 1, out=out)
        assert taken == ["backward"] and len(mixed.launches) > launches
    finally:
        launch.use_compiled_launch(True)
    assert ops._lane.enabled is True
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out)
    assert taken == ["backward"]
    with pytest.raises(TypeError):
        ops._lane.enabled = 1


def test_the_c_lane_keeps_each_dtype_apart(mixed, monkeypatch, launch_path):
    """Calls of two dtypes in turn (each C lane entry keeps its own dtype's size): each
    is looked up and launched as its own, and writes what numpy's split gives."""
    rng = np.random.default_rng()
    f32 = rng.standard_normal((4, 10)).astype(np.float32)
    i64 = rng.integers(-(2**62), 2**62, (4, 10), dtype=np.int64)
    dy32, dy64 = _FakeTensor(mixed, (4, 10), "f32", f32), _device_array(mixed, (4, 10), "i64", i64)
    out32 = [_FakeTensor(mixed, (4, s), "f32") for s in (3, 7)]
    out64 = [_device_array(mixed, (4, s), "i64") for s in (3, 7)]
    for i in range(3):
        if i == 2 and launch_path == "compiled":
            monkeypatch.setattr(ops, "recognise", lambda *a, **k: pytest.fail("the Python path was taken"))
        runtime.channel_cat_backward(dy32, [3, 7], 1, out=out32)
        runtime.channel_cat_backward(dy64, [3, 7], 1, out=out64)
    assert np.array_equal(mixed.read(out32[0]._array, np.float32), f32[:, :3])
    assert np.array_equal(mixed.read(out32[1]._array, np.float32), f32[:, 3:])
    assert np.array_equal(mixed.read(out64[0], np.int64), i64[:, :3])
    assert np.array_equal(mixed.read(out64[1], np.int64), i64[:, 3:])


def test_the_c_lane_reads_requires_grad_of_outputs_only(mixed, monkeypatch, launch_path):
    """A tensor that requires grad may be read (dy) but not written behind autograd's
    back: as an output the C lane leaves it to the Python path, which refuses it; as dy
    the C lane takes it. A shape that is no tuple the C lane leaves to Python too."""
    if launch_path != "compiled":
        pytest.skip("the C lane's own test")
    data = np.arange(40, dtype=np.float32).reshape(4, 10)
    dy = _FakeTensor(mixed, (4, 10), "f32", data, requires_grad=True)
    out = [_FakeTensor(mixed, (4, s), "f32") for s in (3, 7)]
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out)  # remembered
    assert ops._lane.split(dy, [3, 7], 1, out, None) is True
    assert np.array_equal(mixed.read(out[1]._array, np.float32), data[:, 3:])
    graded = [out[0], _FakeTensor(mixed, (4, 7), "f32", requires_grad=True)]
    assert ops._lane.split(dy, [3, 7], 1, graded, None) is False
    with pytest.raises(ValueError, match=r"out\[1\] is a torch tensor that requires grad"):
        runtime.channel_cat_backward(dy, [3, 7], 1, out=graded)
    odd = _FakeTensor(mixed, (4, 10), "f32", data)
    odd.shape = [4, 10]  # a list: not what a tensor's shape is
    assert ops._lane.split(odd, [3, 7], 1, out, None) is False


def test_the_python_path_asks_only_outputs_whether_they_require_grad(mixed, monkeypatch):
    """As the C lane: an input is read whatever its requires_grad (so it is not asked: a
    read a tensor costs), an output is asked, and refused where it requires grad."""

    class Asked(_FakeTensor):
        asked = 0

        @property
        def requires_grad(self):
            Asked.asked += 1
            return self._grad

        @requires_grad.setter
        def requires_grad(self, value):
            self._grad = value

    monkeypatch.setattr(ops, "_lane", None)
    data = np.arange(40, dtype=np.float32).reshape(4, 10)
    dy = Asked(mixed, (4, 10), "f32", data, requires_grad=True)
    xs = [Asked(mixed, (4, s), "f32", requires_grad=True) for s in (3, 7)]
    out = [_FakeTensor(mixed, (4, s), "f32") for s in (3, 7)]
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out)
    runtime.channel_cat_forward(xs, 1, out=_FakeTensor(mixed, (4, 10), "f32"))
    assert Asked.asked == 0
    y = Asked(mixed, (4, 10), "f32", requires_grad=True)
    with pytest.raises(ValueError, match=r"out is a torch tensor that requires grad"):
        runtime.channel_cat_forward(out, 1, out=y)
    assert Asked.asked >= 1


def test_an_error_in_a_compiled_step_comes_out_of_the_op(emulated, monkeypatch, launch_path):
    """A step the C lane hands to Python raises there (a closed module, say): the op raises
    that error, as the Python function of the steps would."""
    if launch_path != "compiled":
        pytest.skip("the C lane's own test")
    from launch_util import RecordingBinding
    from test_runtime_cpu import function_for

    from runtime.layout import ArgumentLayout

    emulated.closed = False
    functions = []

    def load(kernel):
        binding = RecordingBinding(ArgumentLayout(kernel.arg_names, kernel.arg_types), compiled=True)
        functions.append(function_for(kernel, binding))
        return SimpleNamespace(function=functions[-1])

    monkeypatch.setattr(emulated, "load", load)
    dy = _device_array(emulated, (4, 10), "f32")
    out = [_device_array(emulated, (4, s), "f32") for s in (3, 7)]
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out)
    for fn in functions:
        fn.launcher.close()
    with pytest.raises(ValueError, match="module is closed"):
        ops._lane.split(dy, [3, 7], 1, out, None)


def test_an_extent_of_1_does_not_decide_the_memory_order(emulated):
    """(2, 3, 4, 1) in channels_last strides is dense in two orders; joined along W with a
    (2, 3, 4, 5) channels_last array, the order both fit is taken, whichever comes first."""
    rng = np.random.default_rng()
    a_data = rng.integers(-(2**15), 2**15, (2, 3, 4, 1), dtype=np.int16)
    b_data = rng.integers(-(2**15), 2**15, (2, 3, 4, 5), dtype=np.int16)
    for first, second in ((a_data, b_data), (b_data, a_data)):
        xs = [_channels_last(emulated, d.shape, "i16", d) for d in (first, second)]
        y = _channels_last(emulated, (2, 3, 4, 6), "i16")
        assert runtime.channel_cat_forward(xs, 3, out=y) is y
        assert np.array_equal(_logical(emulated, y, np.int16), np.concatenate([first, second], axis=3))


# --- CuPy arrays, read through CuPy's own attributes ---------------------------------------


@pytest.fixture
def stand_in_cupy(monkeypatch):
    """Puts a stand-in CuPy where the readers look, and keeps it from the C lane (which a
    CuPy array read binds to its class): the real CuPy is bound again when next read."""
    monkeypatch.setattr(op_arrays, "CUPY", op_arrays.FirstSeen())

    def put(cupy):
        monkeypatch.setitem(sys.modules, "cupy", cupy)
        return cupy

    return put


class _StandInDtype(NamedTuple):
    """What the readers ask of a numpy dtype."""

    str: str
    kind: str
    name: str
    itemsize: int


class _StandInCupy:
    """Enough of CuPy for the ops' reader: ``ndarray``, and ``cuda.get_current_stream``."""

    def __init__(self, current_stream=0):
        stream = SimpleNamespace(ptr=current_stream)
        self.cuda = SimpleNamespace(get_current_stream=lambda: stream)

        class ndarray:  # CuPy's name
            def __init__(self, shape, typestr, ptr, device=0, strides=None, name=None):
                itemsize = int(typestr[2:])
                self.shape, self.size = tuple(shape), math.prod(shape)
                name = name or f"{typestr[1]}{8 * itemsize}"  # numpy's: float32, void16, ...
                self.dtype = _StandInDtype(typestr, typestr[1], name, itemsize)  # hashable, as numpy's
                self.nbytes = self.size * itemsize
                dense = tuple(math.prod(shape[i + 1 :]) * itemsize for i in range(len(shape)))
                self.strides = strides or dense
                self.flags = SimpleNamespace(c_contiguous=self.strides == dense)
                self.data = SimpleNamespace(ptr=ptr, device_id=device)  # a MemoryPointer

            @property
            def __cuda_array_interface__(self):
                raise AssertionError("read through its attributes, not the interface")

        self.ndarray = ndarray


def test_a_cupy_array_is_read_from_its_attributes_with_its_device_and_stream(stand_in_cupy):
    cupy = _StandInCupy()
    stand_in_cupy(cupy)
    a = op_arrays.recognise("op", "dy", cupy.ndarray((6, 10), "<f4", 1 << 40, device=1), 0)
    assert (a.shape, a.dtype.name, a.ptr, a.ordinal, a.nbytes) == ((6, 10), "f32", 1 << 40, 1, 240)
    assert a.stream == 1 and a.strides is None and a.order is None  # the null stream: legacy
    cupy_on_stream = _StandInCupy(current_stream=0x5000)
    stand_in_cupy(cupy_on_stream)
    b = op_arrays.recognise("op", "dy", cupy_on_stream.ndarray((6, 10), "<f4", 1 << 40), 0)
    assert b.stream == 0x5000 and 0x5000 in runtime.stream.known_stream_handles()
    # channels_last (N, C, H, W) in byte strides: its memory order
    stand_in_cupy(cupy)
    c = op_arrays.recognise("op", "x", cupy.ndarray((2, 3, 4, 5), "<f2", 1 << 40, strides=(120, 2, 30, 6)), 0)
    assert c.order == (0, 2, 3, 1) and c.strides == (60, 1, 15, 3)


def test_the_first_cupy_array_read_binds_what_waits_for_cupy(stand_in_cupy):
    """The C lane learns CuPy's class when the reader first reads one of its arrays, once;
    another CuPy (a test's stand-in) is bound in its turn."""
    seen = []
    op_arrays.CUPY.when_seen(seen.append)  # the fixture's own, which the C lane does not wait on
    cupy = stand_in_cupy(_StandInCupy())
    for _ in range(2):
        op_arrays.recognise("op", "dy", cupy.ndarray((2, 2), "<f4", 1 << 40), 0)
    assert seen == [cupy.ndarray]
    other = stand_in_cupy(_StandInCupy())
    op_arrays.recognise("op", "dy", other.ndarray((2, 2), "<f4", 1 << 40), 0)
    assert seen == [cupy.ndarray, other.ndarray]


def test_a_cupy_bf16_or_fp8_array_is_known_by_its_dtype_name(stand_in_cupy):
    """CAI cannot spell bf16 and fp8 (ml_dtypes gives '<V2', '<V1' and '<f1'); ml_dtypes
    names them, and the reader takes them by that name rather than through DLPack."""
    cupy = _StandInCupy()
    stand_in_cupy(cupy)
    bf16 = op_arrays.recognise("op", "dy", cupy.ndarray((4, 4), "<V2", 1 << 40, name="bfloat16"), 0)
    assert (bf16.dtype.name, bf16.nbytes) == ("bf16", 32)
    e4m3 = op_arrays.recognise("op", "dy", cupy.ndarray((4, 4), "<V1", 1 << 40, name="float8_e4m3fn"), 0)
    assert (e4m3.dtype.name, e4m3.nbytes) == ("e4m3", 16)
    e5m2 = op_arrays.recognise("op", "dy", cupy.ndarray((4, 4), "<f1", 1 << 40, name="float8_e5m2"), 0)
    assert (e5m2.dtype.name, e5m2.nbytes) == ("e5m2", 16)


def test_a_cupy_dtype_is_looked_up_once(monkeypatch):
    """The launch's and the ops' readers share one table from a CuPy array's dtype to
    ours: bf16 and fp8 by name, a nameless void type none; each dtype resolved once."""
    from runtime import arrays

    monkeypatch.setattr(arrays, "_cupy_dtypes", {})
    f4, bf16 = _StandInDtype("<f4", "f", "float32", 4), _StandInDtype("<V2", "V", "bfloat16", 2)
    void = _StandInDtype("<V2", "V", "void16", 2)
    assert [arrays.dtype_of_cupy(d) for d in (f4, bf16, void)] == [ptxgen.resolve_dtype("f32"),
                                                                   ptxgen.resolve_dtype("bf16"), None]  # fmt: skip
    monkeypatch.setattr(arrays, "resolve_dtype", lambda d: pytest.fail("resolved again"))
    assert arrays.dtype_of_cupy(_StandInDtype("<V2", "V", "bfloat16", 2)).name == "bf16"
    assert arrays.dtype_of_cupy(void) is None


def test_a_cupy_array_the_reader_does_not_take_goes_to_the_interface(stand_in_cupy):
    cupy = _StandInCupy()
    stand_in_cupy(cupy)
    void = cupy.ndarray((4, 4), "<V2", 1 << 40)  # a void type of no dtype's name
    with pytest.raises(TypeError, match="not the interface"):  # the interface was asked
        op_arrays.recognise("op", "dy", void, 0)
    gappy = cupy.ndarray((4, 4), "<f4", 1 << 40, strides=(32, 4))  # pitched rows
    with pytest.raises(TypeError, match="not the interface"):  # the interface was asked
        op_arrays.recognise("op", "dy", gappy, 0)


def test_a_route_keeps_its_launch_per_device_stream_and_alignment(emulated, monkeypatch):
    """A call of a known route on the Python path asks the plan table once per stream and
    addresses modulo 16; another device (another object) asks it again."""
    from runtime import op_routes

    monkeypatch.setattr(ops, "_lane", None)
    asked, real = [], ops.compiled_for
    monkeypatch.setattr(ops, "compiled_for", lambda *a: asked.append(a[0]) or real(*a))
    dy = emulated.array((4, 10), "f32")
    out = [emulated.array((4, 3), "f32"), emulated.array((4, 7), "f32")]
    for _ in range(3):
        runtime.channel_cat_backward(dy, [3, 7], 1, out=out)
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out, stream=7)
    assert asked == [emulated, emulated]
    (route,) = op_routes._routes.values()
    assert sorted(key[0] for key in route.launches) == [0, 7]
    other = EmulatedDevice()
    other.pool, other.allocations = emulated.pool, emulated.allocations  # the same memory, another device
    monkeypatch.setattr(ops, "device_for", lambda op, arrays: other)
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out)
    assert asked == [emulated, emulated, other]


def test_an_empty_array_beside_permuted_ones_is_in_their_order(emulated):
    """An empty piece is in every memory order (torch calls it contiguous): a concat of a
    permuted array and an empty one is the permuted array's."""
    data = np.arange(3 * 4 * 2, dtype=np.float32).reshape(3, 4, 2)
    full = emulated.array((2, 4, 3), "f32", np.ascontiguousarray(data.transpose(2, 1, 0)))
    x = FakeArray((3, 4, 2), "f32", ptr=full.ptr, strides=(4, 12, 48))  # memory order (2, 1, 0)
    empty = FakeArray((3, 0, 2), "f32", ptr=full.ptr)
    target = emulated.array((2, 4, 3), "f32")
    y = FakeArray((3, 4, 2), "f32", ptr=target.ptr, strides=(4, 12, 48))
    assert runtime.channel_cat_forward([x, empty], 1, out=y) is y
    assert np.array_equal(emulated.read(target, np.float32).transpose(2, 1, 0), data)


def test_a_torch_tensor_of_any_strides_is_read_through_its_attributes(monkeypatch):
    """A pitched view is read from the tensor's own attributes (torch's interface exports
    cost tens of µs); strides dense in no order are the wide array's to be pitched, and
    any other array's error."""

    class Strided:
        dtype, is_cuda, requires_grad, nbytes = "float32", True, False, 4 * 4 * 10

        def __init__(self, shape, strides):
            self.shape, self._strides = shape, strides

        def is_contiguous(self):
            return False

        def stride(self):
            return self._strides

        def data_ptr(self):
            return 1 << 40

        def get_device(self):
            return 0

        @property
        def __cuda_array_interface__(self):
            raise AssertionError("read through its attributes, not the interface")

    monkeypatch.setattr(op_arrays.TORCH, "array_class", Strided)
    view = Strided((4, 10), (16, 1))  # x[:, :10] of a (4, 16) tensor
    a = op_arrays.recognise("op", "dy", view, 0)
    assert a.strides == (16, 1) and a.order is None and a.ordinal == 0
    assert op_arrays.wide_pitch(a, 1) == 16 and a.nbytes == (3 * 16 + 10) * 4
    # x[:, ::2]: the strided path's
    stepped = op_arrays.recognise("op", "out[0]", Strided((4, 10), (32, 2)), 0)
    assert stepped.strides == (32, 2) and stepped.order is None and op_arrays.wide_pitch(stepped, 1) is None
    cl = op_arrays.recognise("op", "x", Strided((2, 3, 4, 5), (60, 1, 15, 3)), 0)  # channels_last
    assert cl.order == (0, 2, 3, 1)
