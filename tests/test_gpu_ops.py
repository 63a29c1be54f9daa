"""runtime.channel_cat_backward and channel_cat_forward on a real GPU: ranks 1-4, every
dim, every dtype, odd and empty pieces, poisoned and guarded outputs, foreign arrays,
launches cut past the grid limit, and round trips."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_util import GUARD, first_mismatch, poison_value, random_bits
from launch_util import skip_without_c_lane

import ptxgen
import runtime
from runtime import op_arrays, ops, plan
from runtime.interop import KDL_CUDA, to_dlpack_capsule

pytestmark = pytest.mark.gpu

ALL_DTYPES = list(ptxgen.DTYPES)

# (shape, sizes, dim): ranks 1 to 4, negative dims, pieces of 0, 1, 3, 17 and primes
CASES = [
    ((37,), (1, 0, 36), 0),
    ((1,), (1,), -1),
    ((19, 41), (3, 17, 0, 21), 1),
    ((10, 7), (2, 5, 3), 0),
    ((5, 23), (23,), -1),
    ((3, 31, 5), (1, 13, 17), 1),
    ((4, 6, 7), (3, 4), -1),
    ((0, 4, 2), (1, 3), 1),
    ((2, 3, 11, 4), (2, 7, 2), 2),
    ((2, 29, 3, 3), (29, 0), 1),
    ((2, 5, 3, 2), (3, 2), -3),
    ((3, 4, 0, 5), (1, 3), 1),
]


@pytest.fixture
def rng():
    return np.random.default_rng()  # fresh data every run


def split_bits(bits: np.ndarray, sizes, dim) -> list[np.ndarray]:
    return np.split(bits, np.cumsum(sizes)[:-1], axis=dim)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape, sizes, dim", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_split_and_concat_every_rank_dim_and_dtype(dev, rng, dtype, shape, sizes, dim):
    bits = random_bits(rng, shape, dtype)
    dy = dev.to_device(bits, dtype=dtype)
    pieces = runtime.channel_cat_backward(dy, sizes, dim)
    want = split_bits(bits, sizes, dim)
    assert all(isinstance(p, runtime.DeviceArray) and p.dtype == dtype for p in pieces)
    for i, (got, w) in enumerate(zip(pieces, want)):
        assert got.shape == w.shape
        problem = first_mismatch(got.to_numpy(bits=True), w)
        assert not problem, f"piece {i}: {problem}"
    y = runtime.channel_cat_forward(pieces, dim)
    assert y.shape == shape and y.dtype == dtype
    problem = first_mismatch(y.to_numpy(bits=True), bits)
    assert not problem, f"concat: {problem}"


class View:
    """A window into device memory, shown through __cuda_array_interface__ where the
    dtype has a typestr, else through DLPack: how other libraries hand arrays over."""

    def __init__(self, owner, ptr: int, shape, dtype: str, readonly=False):
        self.owner, self.ptr, self.shape = owner, ptr, tuple(shape)
        self.dtype = ptxgen.resolve_dtype(dtype)
        if self.dtype.typestr:
            self.__cuda_array_interface__ = {
                "shape": self.shape,
                "typestr": self.dtype.typestr,
                "data": (ptr, readonly),
                "strides": None,
                "version": 3,
            }

    def __dlpack_device__(self):
        return (KDL_CUDA, self.owner.device.ordinal)

    def __dlpack__(self, stream=None, **kwargs):
        return to_dlpack_capsule(self, self.ptr, self.shape, self.dtype, self.owner.device.ordinal)


class Guarded:
    """An output of ``shape`` between GUARD canary elements on each side."""

    def __init__(self, dev, shape, dtype):
        self.n = int(np.prod(shape))
        self.shape, self.dtype = tuple(shape), dtype
        self.buffer = dev.empty(GUARD + self.n + GUARD, dtype)
        self.view = View(self.buffer, self.buffer.ptr + GUARD * self.buffer.itemsize, shape, dtype)

    def poison(self, byte: int) -> None:
        self.buffer.fill_bytes(byte)

    def read(self, byte: int) -> np.ndarray:
        got = self.buffer.to_numpy(bits=True)
        poison = poison_value(byte, self.dtype)
        assert (got[:GUARD] == poison).all(), "wrote before the start of the output"
        assert (got[GUARD + self.n :] == poison).all(), "wrote past the end of the output"
        return got[GUARD : GUARD + self.n].reshape(self.shape)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_guarded_poisoned_outputs_are_written_exactly(dev, rng, dtype):
    shape, sizes, dim = (5, 13, 3), (1, 0, 3, 9), 1
    bits = random_bits(rng, shape, dtype)
    dy = dev.to_device(bits, dtype=dtype)
    want = split_bits(bits, sizes, dim)
    outs = [Guarded(dev, w.shape, dtype) for w in want]
    y = Guarded(dev, shape, dtype)
    for byte in (0xA5, 0x5A):  # a result that matches under both poisons was written
        for o in (*outs, y):
            o.poison(byte)
        result = runtime.channel_cat_backward(dy, sizes, dim, out=[o.view for o in outs])
        assert [r is o.view for r, o in zip(result, outs)] == [True] * len(outs)
        for i, (o, w) in enumerate(zip(outs, want)):
            problem = first_mismatch(o.read(byte), w)
            assert not problem, f"piece {i}, poison {byte:#x}: {problem}"
        assert runtime.channel_cat_forward([o.view for o in outs], dim, out=y.view) is y.view
        problem = first_mismatch(y.read(byte), bits)
        assert not problem, f"concat, poison {byte:#x}: {problem}"


def test_refused_calls_leave_outputs_untouched(dev, rng):
    bits = random_bits(rng, (6, 10), "f32")
    dy = dev.to_device(bits, dtype="f32")
    outs = [Guarded(dev, (6, 4), "f32"), Guarded(dev, (6, 6), "f32")]
    for o in outs:
        o.poison(0xA5)
    views = [o.view for o in outs]
    with pytest.raises(ValueError, match="sum to 11"):
        runtime.channel_cat_backward(dy, [4, 7], out=views)
    with pytest.raises(TypeError, match=r"out\[1\] is f16"):
        runtime.channel_cat_backward(
            dy, [4, 6], out=[views[0], View(outs[1].buffer, views[1].ptr, (6, 6), "f16")]
        )
    with pytest.raises(ValueError, match=r"dy and out\[0\] overlap"):
        runtime.channel_cat_backward(dy, [4, 6], out=[View(dy, dy.ptr + 4, (6, 4), "f32"), views[1]])
    poison = poison_value(0xA5, "f32")
    for o in outs:
        assert (o.buffer.to_numpy(bits=True) == poison).all()


def test_host_memory_behind_an_interface_is_refused(dev):
    host = np.zeros((4, 8), np.float32)
    fake = View(dev.empty(1, "f32"), host.ctypes.data, (4, 8), "f32")
    with pytest.raises(
        TypeError, match=r"points at 0x[0-9a-f]+, which CUDA does not know \(.*\): host memory"
    ):
        runtime.channel_cat_backward(fake, [4, 4])


def test_huge_row_counts(dev, rng):
    rows = (1 << 22) + 3
    bits = random_bits(rng, (rows, 4), "u8")
    pieces = runtime.channel_cat_backward(dev.to_device(bits, dtype="u8"), (1, 3))
    assert np.array_equal(pieces[0].to_numpy(), bits[:, :1]) and np.array_equal(
        pieces[1].to_numpy(), bits[:, 1:]
    )
    y = runtime.channel_cat_forward(pieces)
    assert np.array_equal(y.to_numpy(), bits)


@pytest.mark.parametrize("dtype", ["u8", "f32", "f64"])
def test_launches_cut_where_the_grid_would_pass_the_device_limit(dev, rng, monkeypatch, fresh_plans, dtype):
    # The seed kernel's grid grows with the rows (the fast kernels stride over a grid of
    # any size): pretend grid.x may not pass 3 CTAs, so 50 rows need many seed launches,
    # each with its pointers moved to its first row.
    monkeypatch.setattr(plan, "VARIANTS", [plan.SEED])
    assert len(ops.plan_for("backward", dtype, 50, (1, 299), dev).steps) == 2  # one launch a piece
    small = plan.DeviceTraits(ordinal=dev.ordinal, arch=dev.arch, max_grid_x=3)
    monkeypatch.setattr(plan.DeviceTraits, "of", classmethod(lambda cls, device: small))
    bits = random_bits(rng, (50, 300), dtype)
    pieces = runtime.channel_cat_backward(dev.to_device(bits, dtype=dtype), (1, 299))
    for got, want in zip(pieces, split_bits(bits, (1, 299), 1)):
        assert np.array_equal(got.to_numpy(bits=True), want)
    y = runtime.channel_cat_forward(pieces)
    assert np.array_equal(y.to_numpy(bits=True), bits)
    # 3 rows of one CTA per launch for the 1-wide piece; 1 row of 2 CTAs for the other
    assert len(ops.plan_for("backward", dtype, 50, (1, 299), dev).steps) == 17 + 50


def test_a_stream_of_our_own(dev, rng):
    bits = random_bits(rng, (64, 96), "i32")
    dy = dev.to_device(bits, dtype="i32")
    with runtime.Stream(dev) as stream:
        pieces = runtime.channel_cat_backward(dy, (32, 64), stream=stream)
        y = runtime.channel_cat_forward(pieces, stream=stream)
        stream.synchronize()
    assert np.array_equal(y.to_numpy(bits=True), bits)


def test_random_round_trips(dev):
    rng = np.random.default_rng()
    for _ in range(25):
        rank = int(rng.integers(1, 5))
        shape = tuple(int(s) for s in rng.integers(0, 9, rank))
        dim = int(rng.integers(-rank, rank))
        n = shape[dim]
        cuts = np.sort(rng.integers(0, n + 1, int(rng.integers(0, 4))))
        sizes = tuple(int(s) for s in np.diff(np.concatenate(([0], cuts, [n]))))
        dtype = str(rng.choice(ALL_DTYPES))
        bits = random_bits(rng, shape, dtype)
        pieces = runtime.channel_cat_backward(dev.to_device(bits, dtype=dtype), sizes, dim)
        back = runtime.channel_cat_forward(pieces, dim)
        case = f"shape {shape} sizes {sizes} dim {dim} {dtype}"
        assert np.array_equal(back.to_numpy(bits=True), bits), case
        again = runtime.channel_cat_backward(back, sizes, dim)
        for a, b in zip(again, pieces):
            assert np.array_equal(a.to_numpy(bits=True), b.to_numpy(bits=True)), case


# --- other libraries' arrays ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "i64", "u8"])
def test_torch_tensors_in_and_out(dev, torch, dtype):
    tdt = getattr(torch, ptxgen.resolve_dtype(dtype).numpy_name)
    width = 2 * ptxgen.resolve_dtype(dtype).itemsize
    dy = torch.randint(0, 256, (3, 10, 7, width), dtype=torch.uint8, device="cuda").view(tdt)
    sizes, dim = (3, 0, 4), -2
    stream = torch.cuda.current_stream()
    pieces = runtime.channel_cat_backward(dy, sizes, dim, stream=stream)
    want = torch.split(dy, sizes, dim)
    for got, w in zip(pieces, want):
        t = torch.from_dlpack(got)
        assert t.dtype == tdt and torch.equal(t.view(torch.uint8), w.contiguous().view(torch.uint8))
    outs = [torch.empty(w.shape, dtype=tdt, device="cuda") for w in want]
    for o in outs:
        o.view(torch.uint8).fill_(7)  # a poison the copy must overwrite
    result = runtime.channel_cat_backward(dy, sizes, dim, out=outs, stream=stream)
    assert len(result) == len(outs) and all(r is o for r, o in zip(result, outs))
    torch.cuda.synchronize()
    for got, w in zip(outs, want):
        assert torch.equal(got.view(torch.uint8), w.contiguous().view(torch.uint8))
    y = torch.empty_like(dy)
    assert runtime.channel_cat_forward(outs, dim, out=y, stream=stream) is y
    torch.cuda.synchronize()
    assert torch.equal(y.view(torch.uint8), dy.view(torch.uint8))
    wider = (*dy.shape[:-1], 2 * dy.shape[-1])
    every_other = torch.empty(wider, dtype=dy.dtype, device="cuda")[..., ::2]  # dy's rank, stepped
    every_other.copy_(dy)
    (copied,) = runtime.channel_cat_backward(every_other, (dy.shape[1],), 1)  # the strided copy
    torch.cuda.synchronize()
    assert copied.is_contiguous() and torch.equal(copied.view(torch.uint8), dy.view(torch.uint8))
    with pytest.raises(TypeError, match=r"host \(CPU\)"):
        runtime.channel_cat_forward([dy.cpu()], dim)


def test_torch_parameters_and_tensors_that_require_grad(dev, torch):
    """The ops work on memory, below autograd: a parameter or a tensor that requires grad
    is read as any tensor is (torch's own interfaces refuse to export them), and refused
    as an output."""
    dy = torch.nn.Parameter(torch.randn(8, 12, device="cuda"))
    a, b = runtime.channel_cat_backward(dy, [5, 7], 1)
    torch.cuda.synchronize()
    assert torch.equal(torch.from_dlpack(a), dy.detach()[:, :5])
    assert torch.equal(torch.from_dlpack(b), dy.detach()[:, 5:])
    x = torch.randn(8, 3, device="cuda", requires_grad=True)
    y = runtime.channel_cat_forward([x, dy], 1)
    torch.cuda.synchronize()
    assert torch.equal(torch.from_dlpack(y), torch.cat([x, dy], 1).detach())
    # written outputs must not require grad: autograd would not see the write
    out = torch.zeros(8, 15, device="cuda", requires_grad=True)
    with pytest.raises(ValueError, match=r"out is a torch tensor that requires grad"):
        runtime.channel_cat_forward([x, dy], 1, out=out)
    with pytest.raises(ValueError, match=r"out\[1\] is a torch tensor that requires grad"):
        outs = [torch.empty(8, 5, device="cuda"), torch.zeros(8, 7, device="cuda", requires_grad=True)]
        runtime.channel_cat_backward(dy, [5, 7], 1, out=outs)
    torch.cuda.synchronize()
    assert not out.detach().any()


SAME_SIZE = {"u8": "int8", "bf16": "float16", "f32": "int32", "f64": "int64"}  # another dtype, same width


@pytest.mark.parametrize("dtype", list(SAME_SIZE))
def test_the_c_lane_checks_and_writes_exactly(dev, torch, monkeypatch, dtype):
    """Calls with ``out`` whose arrays are all DeviceArrays or plain torch tensors, each
    run once by the Python path and then again: where the extension is built the second
    runs from the C lane alone (the Python reader is made to fail). The torch outputs
    are views into one poisoned buffer, guard bytes around each, in descending address
    order. Refused calls fall to the Python path, which names the problem, and write
    nothing."""

    tdt = getattr(torch, ptxgen.resolve_dtype(dtype).numpy_name)
    size = ptxgen.resolve_dtype(dtype).itemsize
    rows, sizes = 37, (5, 17, 3)
    dy = torch.randint(0, 256, (rows, sum(sizes) * size), dtype=torch.uint8, device="cuda").view(tdt)
    bits = dy.view(torch.uint8).cpu().numpy().view(f"u{size}")
    guard = GUARD * 16  # bytes, a multiple of 16: each view keeps dy's alignment
    extents = [rows * s * size for s in sizes]
    buffer = torch.full((sum(extents) + guard * 4,), 0xA5, dtype=torch.uint8, device="cuda")
    starts = [guard * 3 + extents[2] + extents[1], guard * 2 + extents[2], guard]  # descending
    outs = [buffer[a : a + n].view(tdt).view(rows, s) for a, n, s in zip(starts, extents, sizes)]
    y_buffer = torch.full((dy.numel() * size + 2 * guard,), 0x5A, dtype=torch.uint8, device="cuda")
    y = y_buffer[guard:-guard].view(tdt).view(dy.shape)

    da_dy = dev.to_device(bits, dtype=dtype)
    da_outs = [dev.empty((rows, s), dtype) for s in sizes]
    da_y = dev.empty((rows, sum(sizes)), dtype)
    real = ops.recognise
    for second in (False, True):
        if second:  # the outputs poisoned again; in C alone where the lane is on
            buffer.fill_(0xA5)
            y_buffer.fill_(0x5A)
            for a in (*da_outs, da_y):
                a.fill_bytes(0xA5)
            if ops._lane is not None and ops._lane.enabled:
                monkeypatch.setattr(
                    ops, "recognise", lambda *a, **k: pytest.fail("the Python path was taken")
                )
        result = runtime.channel_cat_backward(dy, list(sizes), 1, out=outs)
        assert len(result) == 3 and all(r is o for r, o in zip(result, outs))
        assert runtime.channel_cat_forward(outs, -1, out=y) is y
        runtime.channel_cat_backward(da_dy, sizes, 1, out=da_outs)
        runtime.channel_cat_forward([da_outs[0], outs[1], da_outs[2]], 1, out=da_y)  # a mix
    monkeypatch.setattr(ops, "recognise", real)
    torch.cuda.synchronize()
    for got, got_da, w in zip(outs, da_outs, split_bits(bits, sizes, 1)):
        assert np.array_equal(got.view(torch.uint8).cpu().numpy().view(f"u{size}"), w)
        assert np.array_equal(got_da.to_numpy(bits=True), w)
    assert torch.equal(y.view(torch.uint8), dy.view(torch.uint8))
    assert np.array_equal(da_y.to_numpy(bits=True), bits)
    for a in starts:
        assert bool((buffer[a - guard : a] == 0xA5).all()), "a guard byte was written"
    assert bool((buffer[-guard:] == 0xA5).all()) and bool((y_buffer[:guard] == 0x5A).all())
    assert bool((y_buffer[-guard:] == 0x5A).all())

    buffer.fill_(0xA5)
    y_buffer.fill_(0x5A)
    elements = rows * sizes[0]
    other = getattr(torch, SAME_SIZE[dtype])
    refusals = [
        (r"out\[1\] and out\[2\] overlap", lambda: runtime.channel_cat_backward(
            dy, sizes, 1, out=[*outs[:2], buffer[starts[1] : starts[1] + extents[2]].view(tdt).view(rows, 3)])),
        (r"dy and out\[0\] overlap", lambda: runtime.channel_cat_backward(
            dy, sizes, 1, out=[dy.view(-1)[:elements].view(rows, sizes[0]), *outs[1:]])),
        (r"xs\[0\] and out overlap", lambda: runtime.channel_cat_forward(
            [y.view(-1)[:elements].view(rows, sizes[0]), *outs[1:]], 1, out=y)),
        (r"out\[1\] has shape \(37, 17\), expected \(37, 3\)", lambda: runtime.channel_cat_backward(
            dy, (5, 3, 17), 1, out=outs)),
        (r"out\[0\] is ", lambda: runtime.channel_cat_backward(dy, sizes, 1, out=[outs[0].view(other), *outs[1:]])),
    ]  # fmt: skip
    sparse = torch.zeros(rows, sizes[0], device="cuda").to_sparse()  # torch's accessors raise: general path
    refusals.append(
        (r"out\[0\]", lambda: runtime.channel_cat_backward(dy, sizes, 1, out=[sparse, *outs[1:]]))
    )
    if tdt.is_floating_point:  # only those can require grad
        grad = torch.zeros(rows, sizes[0], dtype=tdt, device="cuda", requires_grad=True)
        refusals.append(
            ("requires grad", lambda: runtime.channel_cat_backward(dy, sizes, 1, out=[grad, *outs[1:]]))
        )
    for message, call in refusals:
        with pytest.raises((TypeError, ValueError), match=message):
            call()
    torch.cuda.synchronize()
    assert bool((buffer == 0xA5).all()) and bool((y_buffer == 0x5A).all()), "a refused call wrote"


def test_cupy_arrays_in_and_out(dev):
    cupy = pytest.importorskip("cupy")
    x = [cupy.random.randint(0, 2**31, (6, n, 5)).astype(cupy.int32) for n in (1, 17, 3)]
    y = runtime.channel_cat_forward(x, 1)
    want = cupy.concatenate(x, axis=1)
    assert cupy.array_equal(cupy.asarray(y), want)
    out = [cupy.zeros_like(a) for a in x]
    result = runtime.channel_cat_backward(want, (1, 17, 3), out=out)
    assert all(r is o for r, o in zip(result, out))
    cupy.cuda.Device().synchronize()
    assert all(cupy.array_equal(a, b) for a, b in zip(out, x))


def test_cupy_calls_run_in_the_c_lane_and_leave_other_streams_to_python(dev, monkeypatch):
    """CuPy calls the Python path ran are the C lane's next time (the Python reader made to
    fail), with and without out=, bit for bit; while CuPy's current stream is another
    stream, the call goes through Python, which orders the op after that stream."""
    cupy = pytest.importorskip("cupy")
    skip_without_c_lane()
    rng = np.random.default_rng()
    for dtype in (np.uint8, np.float32, np.int64):
        host = rng.integers(0, 2**7, (37, 25)).astype(dtype)
        dy, sizes = cupy.asarray(host), (5, 17, 3)
        want = np.split(host, np.cumsum(sizes)[:-1], axis=1)
        out = [cupy.full(w.shape, 0x5A, dtype=dtype) for w in want]
        y = cupy.zeros_like(dy)
        for attempt in range(2):  # the Python path, then the lane alone
            if attempt:
                monkeypatch.setattr(
                    ops, "recognise", lambda *a, **k: pytest.fail("the Python path was taken")
                )
            assert all(r is o for r, o in zip(runtime.channel_cat_backward(dy, sizes, 1, out=out), out))
            made = runtime.channel_cat_backward(dy, sizes, 1)
            assert runtime.channel_cat_forward(made, 1, out=y) is y
            joined = runtime.channel_cat_forward(out, 1)
            cupy.cuda.Device().synchronize()
            assert all(isinstance(m, cupy.ndarray) for m in (*made, joined))
            for got in (out, made):
                assert all(np.array_equal(cupy.asnumpy(g), w) for g, w in zip(got, want))
            assert np.array_equal(cupy.asnumpy(y), host) and np.array_equal(cupy.asnumpy(joined), host)
        monkeypatch.undo()
    ordered = []
    real_order_after = ops.order_after
    monkeypatch.setattr(ops, "order_after", lambda *a: ordered.append(a[1:]) or real_order_after(*a))
    with cupy.cuda.Stream(non_blocking=True) as producer:  # CuPy's current stream, not the op's
        late = cupy.asarray(host) + 0  # written on the producer stream
        assert ops._lane.split(late, sizes, 1, None, None) is False  # the lane leaves it to Python
        got = runtime.channel_cat_backward(late, sizes, 1)
    assert ordered == [(0, producer.ptr)]  # the op's stream (the default) waits for the producer
    cupy.cuda.Device().synchronize()
    assert all(np.array_equal(cupy.asnumpy(g), w) for g, w in zip(got, want))
    assert producer.ptr != 0


def test_cupy_bf16_arrays_are_read_by_their_dtype_name(dev):
    """A CuPy bf16 array (ml_dtypes' bfloat16: '<V2' to the interface) is read from its own
    attributes, not through DLPack: the op runs on it, with and without out=, and gives
    CuPy bf16 arrays back."""
    cupy = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    wide = torch.randint(-(2**15), 2**15, (37, 29), dtype=torch.int16, device="cuda").view(torch.bfloat16)
    try:
        dy = cupy.from_dlpack(wide)
    except (TypeError, NotImplementedError) as err:
        pytest.skip(f"CuPy {cupy.__version__} takes no bf16 through DLPack ({err})")
    assert op_arrays._cupy_array(dy, "dy") is not None, "read through the interface"
    sizes = (3, 17, 9)
    parts = runtime.channel_cat_backward(dy, sizes, 1)
    assert all(isinstance(p, cupy.ndarray) and p.dtype == dy.dtype for p in parts)
    want = [p.contiguous() for p in wide.split(sizes, 1)]
    got = [torch.from_dlpack(p) for p in parts]
    assert all(torch.equal(g.view(torch.int16), w.view(torch.int16)) for g, w in zip(got, want))
    out = cupy.empty_like(dy)
    assert runtime.channel_cat_forward(parts, 1, out=out) is out
    cupy.cuda.Device().synchronize()
    assert torch.equal(torch.from_dlpack(out).view(torch.int16), wide.view(torch.int16))


# Gathers the per-piece variant sends to rowpack (short rows, whole rows read), vec
# (narrow pieces at a 1-byte granule), rect and tiles: (dtype, rows, sizes, a piece, the
# kernel that gathers it).
PIECE_GATHERS = [
    ("u8", 4099, (1, 3), 1, "fastcat_rowpack_backward"),
    ("bf16", 4099, (1, 3), 0, "fastcat_rowpack_backward"),
    ("f32", 1027, (1, 3), 1, "fastcat_rowpack_backward"),
    ("u8", 4099, (3, 5), 1, "fastcat_rowpack_backward"),
    ("bf16", 2053, (1, 1, 2), 2, "fastcat_rowpack_backward"),
    ("u8", 3001, (7, 9, 48), 1, "fastcat_vec_backward"),
    ("u8", 3001, (5, 27), 0, "fastcat_vec_backward"),
    ("u8", 3001, (5, 27), 1, "fastcat_tile_backward"),
    ("f64", 1031, (1, 3), 1, "fastcat_rect_backward"),
    ("u8", 1031, (17, 200, 39), 1, "fastcat_tile_backward"),
]


@pytest.mark.parametrize(
    "dtype, rows, sizes, piece, kernel", PIECE_GATHERS, ids=lambda v: str(v).replace(" ", "")
)
def test_per_piece_gathers_of_every_family(
    dev, rng, monkeypatch, fresh_plans, dtype, rows, sizes, piece, kernel
):
    """The per-piece variant alone (no fused split): each piece gathered by its own launch
    into a poisoned output fenced by guards."""
    monkeypatch.setattr(plan, "VARIANTS", [plan.FASTCAT_CHUNK, plan.SEED])
    steps = ops.plan_for("backward", dtype, rows, sizes, dev).steps
    assert len(steps) == len(sizes) and steps[piece].kernel.name == kernel, [s.kernel.id for s in steps]
    bits = random_bits(rng, (rows, sum(sizes)), dtype)
    outs = [Guarded(dev, (rows, s), dtype) for s in sizes]
    for out in outs:
        out.poison(0xA5)
    runtime.channel_cat_backward(dev.to_device(bits, dtype=dtype), list(sizes), out=[o.view for o in outs])
    for i, (out, want) in enumerate(zip(outs, split_bits(bits, sizes, 1))):
        problem = first_mismatch(out.read(0xA5), want)
        assert not problem, f"piece {i}: {problem}"
