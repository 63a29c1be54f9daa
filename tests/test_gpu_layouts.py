"""Arrays in another memory order on the GPU: channels_last and other dense permutations
through the fused kernels, results that keep the order; wide arrays that are views of
part of every row of a wider one (pitched rows); and what goes to the strided copy.

Inputs are fresh random bits; outputs are poisoned before each call and compared bit
for bit with torch's own split and cat.
"""

from __future__ import annotations

import pytest

import runtime

pytestmark = pytest.mark.gpu

TORCH_DTYPES = {"u8": "uint8", "bf16": "bfloat16", "f32": "float32", "f64": "float64"}


def random_tensor(torch, shape, dtype, memory_format=None):
    t = torch.empty(shape, dtype=getattr(torch, TORCH_DTYPES[dtype]), device="cuda")
    if memory_format is not None:
        t = t.contiguous(memory_format=memory_format)
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    t.view(bits).random_()
    return t


def same_bits(torch, a, b) -> bool:
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return a.shape == b.shape and torch.equal(a.contiguous().view(width), b.contiguous().view(width))


@pytest.mark.parametrize("dtype", ["u8", "bf16", "f32", "f64"])
@pytest.mark.parametrize("sizes", [(64, 64, 64), (16, 16, 32), (3, 1, 17), (5,)])
def test_channels_last_split_and_concat_keep_the_memory_format(dev, torch, dtype, sizes):
    cl = torch.channels_last
    dy = random_tensor(torch, (2, sum(sizes), 9, 11), dtype, cl)
    pieces = runtime.channel_cat_backward(dy, sizes, 1)
    torch.cuda.synchronize()
    for got, want in zip(pieces, torch.split(dy, sizes, 1)):
        assert got.is_contiguous(memory_format=cl) and same_bits(torch, got, want)
    y = runtime.channel_cat_forward(pieces, 1)
    torch.cuda.synchronize()
    assert y.is_contiguous(memory_format=cl) and same_bits(torch, y, dy)
    outs = [torch.full_like(p, 3) for p in pieces]  # channels_last, as full_like keeps it; poisoned
    assert all(o.is_contiguous(memory_format=cl) for o in outs)
    result = runtime.channel_cat_backward(dy, sizes, 1, out=outs)
    assert all(r is o for r, o in zip(result, outs))
    torch.cuda.synchronize()
    assert all(same_bits(torch, o, w) for o, w in zip(outs, torch.split(dy, sizes, 1)))


def test_channels_last_at_a_client_shape_runs_the_row_plan(dev, torch):
    """YOLO's C2f at 640 px, batch 16, stride 8: 102,400 rows of 3 x 64 channels. In
    channels_last the memory is those rows, so the plan is the row-major one."""
    dy = random_tensor(torch, (16, 192, 80, 80), "bf16", torch.channels_last)
    pieces = runtime.channel_cat_backward(dy, [64, 64, 64], 1)
    torch.cuda.synchronize()
    assert all(same_bits(torch, p, w) for p, w in zip(pieces, torch.split(dy, [64, 64, 64], 1)))
    plan = runtime.ops.plan_for("backward", "bf16", 16 * 80 * 80, [64, 64, 64], dev)
    assert plan.variants and "seed" not in plan.variants


def test_other_dense_orders_and_cupy(dev, torch, cupy):
    x = random_tensor(torch, (40, 70), "f32").t()  # (70, 40), dense in order (1, 0)
    a, b = runtime.channel_cat_backward(x, [13, 27], 1)
    torch.cuda.synchronize()
    assert same_bits(torch, a, x[:, :13]) and same_bits(torch, b, x[:, 13:])
    assert a.stride() == (1, 70) and b.stride() == (1, 70)  # the input's order, kept
    c = cupy.asfortranarray(cupy.arange(6 * 10, dtype=cupy.int32).reshape(6, 10))
    parts = runtime.channel_cat_backward(c, [4, 6], 1)
    assert all(p.flags.f_contiguous for p in parts)
    assert cupy.array_equal(parts[0], c[:, :4]) and cupy.array_equal(parts[1], c[:, 4:])


def test_what_the_fused_kernels_cannot_take_goes_through_the_strided_copy(dev, torch):
    """Arrays in different orders, a view with a step, an expanded input: correct, through
    the strided copy (tests/test_gpu_strided.py covers it in depth)."""
    dy = random_tensor(torch, (8, 32, 4, 4), "f32", torch.channels_last)
    row_major = [torch.full((8, 16, 4, 4), 7.0, device="cuda") for _ in range(2)]
    runtime.channel_cat_backward(dy, [16, 16], 1, out=row_major)
    wide = random_tensor(torch, (64, 64), "f32")
    stepped = runtime.channel_cat_backward(wide[:, ::2], [16, 16], 1)  # every other column
    expanded = runtime.channel_cat_backward(wide[:1].expand(64, 64), [16, 48], 1)
    torch.cuda.synchronize()
    assert all(same_bits(torch, o, w) for o, w in zip(row_major, torch.split(dy, [16, 16], 1)))
    assert all(same_bits(torch, o, w) for o, w in zip(stepped, torch.split(wide[:, ::2], [16, 16], 1)))
    assert all(
        same_bits(torch, o, w) for o, w in zip(expanded, torch.split(wide[:1].expand(64, 64), [16, 48], 1))
    )
    assert all(o.is_contiguous() for o in (*stepped, *expanded))


@pytest.mark.parametrize("dtype", ["u8", "bf16", "f32", "f64"])
@pytest.mark.parametrize(
    "rows, sizes, gap, where",
    [
        (6400, (3, 61, 32), 7, "first"),  # small: direct copies
        (40_000, (37, 50, 41), 13, "last"),  # tiles; the view ends where its buffer ends
        (2_000, (64, 64), 64, "middle"),
    ],
)
def test_pitched_views_split_and_concat_leaving_every_other_byte(dev, torch, dtype, rows, sizes, gap, where):
    """``x[:, off:off + extent]`` of a (rows, extent + gap) tensor split, and a concat into
    such a view of a poisoned buffer: every element where it belongs, and every byte of
    the buffer outside the view as it was (the gaps and, with the view at either end,
    the guard columns)."""
    extent = sum(sizes)
    off = {"first": 0, "last": gap, "middle": gap // 2}[where]
    full = random_tensor(torch, (rows, extent + gap), dtype)
    view = full[:, off : off + extent]
    pieces = runtime.channel_cat_backward(view, list(sizes), 1)
    torch.cuda.synchronize()
    for got, want in zip(pieces, torch.split(view, list(sizes), 1)):
        assert same_bits(torch, got, want)
    target = random_tensor(torch, (rows, extent + gap), dtype)
    before = target.clone()
    out = target[:, off : off + extent]
    assert runtime.channel_cat_forward(pieces, 1, out=out) is out
    torch.cuda.synchronize()
    assert same_bits(torch, out, view)
    assert same_bits(torch, target[:, :off], before[:, :off])
    assert same_bits(torch, target[:, off + extent :], before[:, off + extent :])
