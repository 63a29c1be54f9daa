"""Arrays of any strides on the GPU, through the strided copy: transposed, stepped,
expanded, reversed (CuPy), mixed orders, ``out=`` views of any strides, every element
size, odd and prime shapes, a launch cut past 2**31 elements' worth of indices.

Inputs are fresh random bits; every output sits inside a buffer poisoned around and
between its elements, and after each call every element must equal torch's (or
CuPy's) own result and every other byte of the buffer must still be poison.
"""

from __future__ import annotations

import pytest
from launch_util import skip_without_c_lane

import runtime

pytestmark = pytest.mark.gpu

DTYPES = {1: "uint8", 2: "bfloat16", 4: "float32", 8: "float64"}
POISON = 0x5A


def _bits(torch, itemsize):
    return {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[itemsize]


def random_tensor(torch, shape, itemsize):
    t = torch.empty(shape, dtype=getattr(torch, DTYPES[itemsize]), device="cuda")
    t.view(_bits(torch, itemsize)).random_()
    return t


def same(torch, a, b) -> bool:
    w = _bits(torch, a.element_size())
    return tuple(a.shape) == tuple(b.shape) and torch.equal(a.contiguous().view(w), b.contiguous().view(w))


def poisoned_view(torch, shape, itemsize, strides_of):
    """A view of ``shape`` whose strides ``strides_of(buffer)`` picks, inside a poisoned
    buffer: (view, buffer)."""
    buffer = torch.full(
        ((4 * max(1, torch.Size(shape).numel()) + 64) * itemsize,), POISON, dtype=torch.uint8, device="cuda"
    )
    typed = buffer.view(getattr(torch, DTYPES[itemsize]))
    return strides_of(typed[8:]), buffer


def untouched_elsewhere(torch, view, buffer) -> bool:
    """Every byte of ``buffer`` outside ``view``'s elements is still poison."""
    mask = torch.ones(buffer.numel(), dtype=torch.bool, device="cuda")
    flat = torch.arange(view.numel(), device="cuda")
    offsets = torch.zeros_like(flat)
    rest = flat.clone()
    for extent, stride in reversed(list(zip(view.shape, view.stride()))):
        offsets += (rest % extent) * stride
        rest //= extent
    start = (view.data_ptr() - buffer.data_ptr()) // view.element_size() + offsets
    for lane in range(view.element_size()):
        mask[start * view.element_size() + lane] = False
    return bool((buffer[mask] == POISON).all())


LAYOUTS = {
    "transposed": lambda t: (
        t.t().contiguous().t() if t.dim() == 2 else t.transpose(0, -1).contiguous().transpose(0, -1)
    ),
    "every other column": lambda t: t.repeat_interleave(2, dim=-1)[..., ::2],
    "expanded rows": lambda t: t[:1].expand(t.shape),
    "sliced both ways": lambda t: (
        t.repeat(2, 3)[1 : 1 + t.shape[0], 2 : 2 + t.shape[1]] if t.dim() == 2 else t
    ),
}


@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize(
    "rows, sizes", [(1, (1, 2)), (17, (3, 1, 13)), (1031, (5, 64, 7)), (40_009, (3, 29))]
)
def test_a_split_and_a_concat_of_any_strides_match_torch(dev, torch, itemsize, layout, rows, sizes):
    dy = LAYOUTS[layout](random_tensor(torch, (rows, sum(sizes)), itemsize))
    pieces = runtime.channel_cat_backward(dy, sizes, 1)
    torch.cuda.synchronize()
    for got, want in zip(pieces, torch.split(dy, sizes, 1)):
        assert same(torch, got, want)
    xs = [LAYOUTS[layout](p.clone()) for p in pieces]
    y = runtime.channel_cat_forward(xs, 1)
    torch.cuda.synchronize()
    assert same(torch, y, torch.cat(xs, 1))


@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
def test_out_views_of_any_strides_get_their_elements_and_nothing_else(dev, torch, itemsize):
    rows, sizes = 257, (7, 2, 31)
    dy = random_tensor(torch, (rows, sum(sizes)), itemsize)
    outs, buffers = [], []
    for s in sizes:  # each out is the transpose of a column-major block, a step of 2 along rows
        view, buffer = poisoned_view(
            torch, (rows, s), itemsize, lambda b, s=s: b[: 2 * rows * s].view(s, 2 * rows)[:, ::2].t()
        )
        outs.append(view)
        buffers.append(buffer)
    assert runtime.channel_cat_backward(dy, sizes, 1, out=outs) == outs
    torch.cuda.synchronize()
    for out, buffer, want in zip(outs, buffers, torch.split(dy, sizes, 1)):
        assert same(torch, out, want) and untouched_elsewhere(torch, out, buffer)
    y, buffer = poisoned_view(
        torch, dy.shape, itemsize, lambda b: b[: 3 * dy.numel()].view(rows, 3 * sum(sizes))[:, 1::3]
    )
    assert runtime.channel_cat_forward([dy[:, :7].t().contiguous().t(), dy[:, 7:]], 1, out=y) is y
    torch.cuda.synchronize()
    assert same(torch, y, dy) and untouched_elsewhere(torch, y, buffer)


def test_arrays_in_different_orders_and_channels_last_into_device_arrays(dev, torch):
    dy = random_tensor(torch, (4, 24, 5, 7), 2).contiguous(memory_format=torch.channels_last)
    outs = [torch.empty((4, s, 5, 7), dtype=dy.dtype, device="cuda") for s in (5, 19)]  # row-major
    runtime.channel_cat_backward(dy, (5, 19), 1, out=outs)
    torch.cuda.synchronize()
    assert all(same(torch, o, w) for o, w in zip(outs, torch.split(dy, (5, 19), 1)))
    y = torch.empty_like(dy)  # channels_last, from row-major inputs
    runtime.channel_cat_forward(outs, 1, out=y)
    torch.cuda.synchronize()
    assert same(torch, y, dy)


def test_reversed_and_stepped_cupy_arrays(dev, cupy):
    c = cupy.arange(9 * 40, dtype=cupy.int16).reshape(9, 40)[::-1, ::-2]  # negative strides
    parts = runtime.channel_cat_backward(c, [7, 13], 1)
    assert all(isinstance(p, cupy.ndarray) and p.flags.c_contiguous for p in parts)
    assert cupy.array_equal(parts[0], c[:, :7]) and cupy.array_equal(parts[1], c[:, 7:])
    y = runtime.channel_cat_forward([parts[0][::-1], parts[1][::-1]], 1)
    assert cupy.array_equal(y, c[::-1])


def test_an_expanded_or_overlapping_output_is_refused_before_anything_runs(dev, torch):
    dy = random_tensor(torch, (64, 32), 4)
    target = torch.full((64,), 7.0, device="cuda")
    with pytest.raises(ValueError, match=r"out\[0\] .* gives more than one of its elements the same memory"):
        runtime.channel_cat_backward(
            dy, [16, 16], 1, out=[target[:16].expand(64, 16), torch.empty(64, 16, device="cuda")]
        )
    with pytest.raises(ValueError, match=r"dy and out\[1\] overlap"):
        runtime.channel_cat_backward(
            dy, [16, 16], 1, out=[torch.empty(64, 16, device="cuda"), dy.t()[:16].t()]
        )
    torch.cuda.synchronize()
    assert bool((target == 7.0).all())


@pytest.mark.parametrize("itemsize", [1, 2, 8])
def test_a_remembered_kind_of_call_checks_each_calls_addresses(dev, torch, itemsize):
    """Stepped and channels_last calls repeated on new arrays of the same kind (the route
    remembered) are written exactly, poison left around them; the same kind of call with
    an output that overlaps an input is refused with nothing written."""
    rows, sizes, width = 301, (5, 11), 32  # dy: every other column of rows x 32

    def out_views(s):  # out[i]: odd columns of a (rows, 32) and a (rows, 22) buffer
        wide = width if s == sizes[0] else 2 * s
        return lambda b: b[: rows * wide].view(rows, wide)[:, 1::2][:, :s]

    for trial in range(3):
        dy = random_tensor(torch, (rows, width), itemsize)[:, ::2]
        outs, buffers = zip(*(poisoned_view(torch, (rows, width), itemsize, out_views(s)) for s in sizes))
        assert runtime.channel_cat_backward(dy, sizes, 1, out=list(outs)) == list(outs)
        torch.cuda.synchronize()
        for out, buffer, want in zip(outs, buffers, torch.split(dy, sizes, 1)):
            assert same(torch, out, want) and untouched_elsewhere(torch, out, buffer), trial
    base = random_tensor(torch, (rows, width), itemsize)
    dy, kept = base[:, ::2], base.clone()
    inside = base[:, 1::2][:, : sizes[0]]  # interleaved with dy: no shared element, a shared span
    other = random_tensor(torch, (rows, 2 * sizes[1]), itemsize)[:, 1::2]
    with pytest.raises(ValueError, match=r"dy and out\[0\] overlap .*compared by the span"):
        runtime.channel_cat_backward(dy, sizes, 1, out=[inside, other])
    torch.cuda.synchronize()
    assert same(torch, base, kept)
    cl = random_tensor(torch, (2, 24, 5, 7), itemsize).contiguous(memory_format=torch.channels_last)
    for _ in range(3):
        parts = runtime.channel_cat_backward(cl, (9, 15), 1)
        assert all(p.is_contiguous(memory_format=torch.channels_last) for p in parts)
        y = torch.empty_like(cl)
        runtime.channel_cat_forward(parts, 1, out=y)
        torch.cuda.synchronize()
        assert same(torch, y, cl) and all(
            same(torch, p, w) for p, w in zip(parts, torch.split(cl, (9, 15), 1))
        )
    # a concat whose second input is a view of part of a channels_last array, then the
    # same kind of call with that view taken of the output itself
    z = random_tensor(torch, cl.shape, itemsize).contiguous(memory_format=torch.channels_last)
    y = torch.empty_like(cl)
    runtime.channel_cat_forward([parts[0], z[:, 9:]], 1, out=y)
    torch.cuda.synchronize()
    assert same(torch, y[:, 9:], z[:, 9:]) and same(torch, y[:, :9], parts[0])
    kept = y.clone()
    with pytest.raises(ValueError, match=r"xs\[1\] and out overlap"):
        runtime.channel_cat_forward([parts[0], y[:, 9:]], 1, out=y)
    torch.cuda.synchronize()
    assert same(torch, y, kept)


@pytest.mark.parametrize("itemsize", [2, 4])
def test_a_remembered_kind_of_call_runs_from_c_without_python(dev, torch, monkeypatch, itemsize):
    """Where the extension is built, a kind of call seen once (channels_last, stepped, a
    pitched out=) runs from C the next time: the Python reader is made to fail. Results
    keep the input's memory order; every element is right."""
    from runtime import ops

    skip_without_c_lane()
    cl = random_tensor(torch, (2, 24, 5, 7), itemsize).contiguous(memory_format=torch.channels_last)
    dy = random_tensor(torch, (333, 2 * 19), itemsize)[:, ::2]
    wide = torch.empty((333, 30), dtype=dy.dtype, device="cuda")
    calls = [
        lambda: runtime.channel_cat_backward(cl, (9, 15), 1),
        lambda: runtime.channel_cat_backward(dy, (4, 15), 1),
        lambda: runtime.channel_cat_forward(
            [dy[:, :4].contiguous(), dy[:, 4:].contiguous()], 1, out=wide[:, 3:22]
        ),
    ]
    for call in calls:
        call()  # seen: the route made, its launch registered
    torch.cuda.synchronize()
    monkeypatch.setattr(ops, "recognise", lambda *a, **k: pytest.fail("the Python path was taken"))
    parts = calls[0]()
    assert all(p.is_contiguous(memory_format=torch.channels_last) for p in parts)
    pieces = calls[1]()
    wide.zero_()
    calls[2]()
    torch.cuda.synchronize()
    assert all(same(torch, p, w) for p, w in zip(parts, torch.split(cl, (9, 15), 1)))
    assert all(same(torch, p, w) for p, w in zip(pieces, torch.split(dy, (4, 15), 1)))
    assert same(torch, wide[:, 3:22], dy) and not wide[:, :3].any() and not wide[:, 22:].any()


def test_a_copy_past_2_to_the_31_elements_is_cut_into_launches(dev, torch):
    """2**31 + 4 one-byte elements of a transposed input: more than one launch indexes."""
    from ptxgen.kernels.plan_strided import StridedProblem, make_strided_plan

    rows = (1 << 31) // 2 + 2
    dy = random_tensor(torch, (2, rows), 1).t()  # (rows, 2), strides (1, rows)
    (whole,) = runtime.channel_cat_backward(dy, (2,), 1)
    torch.cuda.synchronize()
    assert same(torch, whole, dy)
    problem = StridedProblem("backward", 1, (rows, 2), 1, (2,), (1, rows), ((2, 1),))
    assert len(make_strided_plan(problem, runtime.plan.DeviceTraits.of(dev)).steps) > 1
