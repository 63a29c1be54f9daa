"""Random layouts on the GPU (issue 23): at least 1,000 splits and concats of ranks 1-5,
negative dims, empty pieces, every dtype, with every array a view into a guarded,
poisoned buffer at an element-aligned offset, laid out row-major, dense in a random
memory order, or (the wide array) pitched: part of every row of a wider one. Every
element of every result is compared with torch's split and cat, and every byte of every
output's buffer that is not one of its elements (the guards, a pitched view's gaps) must
still hold the poison. ``PTXGEN_PROPERTY_CASES`` sets the count (scripts/sanitize.py
lowers it under memcheck).
"""

from __future__ import annotations

import math
import os
import random

import pytest

import runtime
from ptxgen.dtypes import DTYPES

pytestmark = pytest.mark.gpu

CASES = int(os.environ.get("PTXGEN_PROPERTY_CASES", "1000") or 1000)
TORCH_NAMES = {
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "i8": "int8", "i16": "int16",
    "i32": "int32", "i64": "int64", "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2",
}  # fmt: skip
GUARD = 64  # bytes of poison before and after every array
POISON = 0xA5


def _bits(torch, t):
    """``t``'s elements as unsigned ints of its width (any strides), for exact comparison."""
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _strides(rng, shape, layout, axis, order=None):
    """Element strides for ``shape``: row-major, dense in ``order`` (drawn if None), or
    pitched (the dims before ``axis`` stepping by a pitch past the extent from ``axis``)."""
    rank = len(shape)
    if layout == "pitched" and axis > 0:
        inner = math.prod(shape[axis:])
        strides, step = [0] * rank, 1
        for i in reversed(range(axis, rank)):
            strides[i], step = step, step * shape[i]
        step = inner + rng.randint(1, 9)  # the pitch
        for i in reversed(range(axis)):
            strides[i], step = step, step * shape[i]
        return tuple(strides), None
    if layout != "permuted":
        order = tuple(range(rank))
    elif order is None:
        order = tuple(rng.sample(range(rank), rank))
    strides, step = [0] * rank, 1
    for d in reversed(order):
        strides[d], step = step, step * shape[d]
    return tuple(strides), order


class Guarded:
    """A strided view into a buffer with GUARD bytes before and after everything it can
    reach, at an element-aligned offset that is not always 16-byte aligned."""

    def __init__(self, torch, rng, shape, dtype, strides, fill):
        isz = DTYPES[dtype].itemsize
        reach = 1 + sum((n - 1) * s for n, s in zip(shape, strides)) if all(shape) else 0
        self.lead = GUARD + isz * rng.randrange(16 // isz if isz < 16 else 1)
        self.buffer = torch.empty(self.lead + reach * isz + GUARD, dtype=torch.uint8, device="cuda")
        if fill == "random":
            self.buffer.random_(0, 256)
        else:
            self.buffer.fill_(POISON)
        self.before = self.buffer.clone()
        elements = self.buffer[self.lead : self.lead + reach * isz].view(getattr(torch, TORCH_NAMES[dtype]))
        self.array = elements.as_strided(shape, strides)

    def untouched_outside(self, torch) -> bool:
        """Whether every byte of the buffer but the view's elements holds what it held."""
        after = self.buffer.clone()
        mask = torch.zeros_like(after)
        isz = self.array.element_size()
        reach = (after.numel() - self.lead - GUARD) // isz
        marked = mask[self.lead : self.lead + reach * isz].view(_bits(torch, self.array).dtype)
        marked.as_strided(self.array.shape, self.array.stride()).fill_(255 if isz == 1 else -1)  # all bits
        keep = mask == 0
        return bool(torch.equal(after[keep], self.before[keep]))


def _case(rng):
    dtype = rng.choice(list(DTYPES))
    rank = rng.randint(1, 5)
    shape = [rng.choice((1, 2, 3, 5, 7, 16, 33)) for _ in range(rank)]
    dim = rng.randrange(-rank, rank)
    axis = dim % rank
    sizes = [rng.choice((0, 1, 2, 3, 8, 17)) for _ in range(rng.randint(1, 4))]
    if not any(sizes):
        sizes[0] = 1
    shape[axis] = sum(sizes)
    shape = tuple(shape)
    op = rng.choice(("split", "concat"))
    with_out = rng.random() < 0.6
    # fp8 through a pitched view would go through torch's own export of it (its
    # __cuda_array_interface__ cannot spell fp8, and its DLPack export is torch's business)
    pitched = "pitched" if axis > 0 and dtype not in ("e4m3", "e5m2") else "row-major"
    layout = rng.choice(("row-major", "permuted", pitched))
    return dtype, shape, dim, axis, sizes, op, with_out, layout


def test_random_layouts_split_and_concat_exactly_and_write_nothing_else(dev, torch):
    seed = int.from_bytes(os.urandom(8), "little")
    rng = random.Random(seed)
    checked = 0
    for index in range(CASES):
        dtype, shape, dim, axis, sizes, op, with_out, layout = _case(rng)
        where = (
            f"seed {seed} case {index}: {op} {dtype} {shape} dim {dim} sizes {sizes} {layout} out={with_out}"
        )
        wide_strides, order = _strides(rng, shape, layout, axis)
        piece_shapes = [tuple(s if i != axis else n for i, s in enumerate(shape)) for n in sizes]
        # pieces: dense in the wide array's order where it has one, else row-major
        piece_layout = "permuted" if order is not None and layout == "permuted" else "row-major"
        piece_strides = [_strides(rng, s, piece_layout, axis, order)[0] for s in piece_shapes]
        if op == "split":
            dy = Guarded(torch, rng, shape, dtype, wide_strides, "random")
            want = torch.split(dy.array, sizes, dim)
            outs = [Guarded(torch, rng, s, dtype, st, "poison") for s, st in zip(piece_shapes, piece_strides)]
            if with_out:
                got = runtime.channel_cat_backward(dy.array, sizes, dim, out=[o.array for o in outs])
            else:  # torch results, in dy's memory order
                got = runtime.channel_cat_backward(dy.array, sizes, dim)
            torch.cuda.synchronize()
            assert len(got) == len(sizes), where
            for g, w in zip(got, want):
                assert tuple(g.shape) == tuple(w.shape) and torch.equal(_bits(torch, g), _bits(torch, w)), (
                    where
                )
            if with_out:
                assert all(o.untouched_outside(torch) for o in outs), where
            assert dy.untouched_outside(torch), where  # an input is only read
        else:
            xs = [Guarded(torch, rng, s, dtype, st, "random") for s, st in zip(piece_shapes, piece_strides)]
            want = torch.cat([_bits(torch, x.array) for x in xs], dim)  # torch's cat lacks some dtypes
            if with_out:
                y = Guarded(torch, rng, shape, dtype, wide_strides, "poison")
                assert runtime.channel_cat_forward([x.array for x in xs], dim, out=y.array) is y.array
                got = y.array
            else:
                got = runtime.channel_cat_forward([x.array for x in xs], dim)
            torch.cuda.synchronize()
            assert tuple(got.shape) == shape and torch.equal(_bits(torch, got), want), where
            if with_out:
                assert y.untouched_outside(torch), where
        checked += 1
    assert checked == CASES
