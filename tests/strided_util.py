"""Arrays of any strides over numpy byte buffers, and the strided copy's contract run on them.

``StridedBuffer`` is an array of any strides (negative and 0 included) in its own byte
buffer, poisoned around and between its elements; ``run_strided_step`` performs one
:class:`~ptxgen.kernels.strided.StridedCopy` step as its launch contract says (the
interpreter checks the PTX against the same contract in tests/test_strided.py), after
checking that every element it touches lies inside the kernel's declared footprints
and inside the arrays' buffers.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ptxgen.kernels.plan import Ptr

POISON = 0xA7


@dataclass
class StridedBuffer:
    """An array of ``shape`` and ``strides`` (elements) of ``itemsize``-byte elements,
    element 0 at byte ``base`` of ``buffer``."""

    buffer: np.ndarray  # uint8
    base: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    itemsize: int

    @classmethod
    def make(cls, shape, strides, itemsize, pad=3):
        """A buffer just wide enough for the array plus ``pad`` poisoned elements each side."""
        low = sum(min(0, (e - 1) * s) for e, s in zip(shape, strides)) if 0 not in shape else 0
        high = sum(max(0, (e - 1) * s) for e, s in zip(shape, strides)) if 0 not in shape else 0
        nbytes = (high - low + 1 + 2 * pad) * itemsize
        buffer = np.full(nbytes, POISON, np.uint8)
        return cls(buffer, (pad - low) * itemsize, tuple(shape), tuple(strides), itemsize)

    def view(self) -> np.ndarray:
        """The array, elements as ``itemsize``-byte voids (written through)."""
        dtype = np.dtype((np.void, self.itemsize))
        flat = self.buffer.view(dtype) if self.buffer.size % self.itemsize == 0 else None
        assert flat is not None and self.base % self.itemsize == 0
        start = self.base // self.itemsize
        return np.lib.stride_tricks.as_strided(
            flat[start:], self.shape, tuple(s * self.itemsize for s in self.strides)
        )

    def fill_random(self, rng) -> None:
        self.view()[...] = rng.integers(0, 256, (*self.shape, self.itemsize), dtype=np.uint8).view(
            np.dtype((np.void, self.itemsize))
        )[..., 0]


def random_layout(rng, shape, *, writes: bool) -> tuple[int, ...]:
    """Strides (elements) for ``shape``: dims in a random memory order, some with a step or
    reversed, and (for an array only read) some broadcast with stride 0. A written array's
    elements never share memory."""
    order = list(range(len(shape)))
    rng.shuffle(order)
    strides = [0] * len(shape)
    step = 1
    for d in reversed(order):
        gap = int(rng.choice([1, 1, 1, 2, 3]))
        strides[d] = step * gap
        step *= shape[d] * gap
    for d in range(len(shape)):
        r = rng.random()
        if r < 0.15:
            strides[d] = -strides[d]
        elif r < 0.25 and not writes:
            strides[d] = 0
    return tuple(strides)


def check_scalar_ranges(step) -> None:
    """Every scalar of ``step`` fits its argument's type, as the launch would pack it: a
    stride past 32 bits anywhere in a launch needs the kernel's 64-bit form."""
    kernel = step.kernel
    for name, arg_type, value in zip(kernel.arg_names, kernel.arg_types, step.args):
        if not isinstance(value, Ptr):
            assert arg_type.min <= value <= arg_type.max, (
                f"{name} = {value} does not fit {arg_type} ({kernel!r})"
            )


def run_strided_step(step, arrays: dict[int, StridedBuffer]) -> None:
    """One strided-copy step on ``arrays`` (by ``Ptr.array``), as its contract says: each
    of its pieces' boxes copied, after every footprint is checked."""
    check_scalar_ranges(step)
    kernel = step.kernel
    args = dict(zip(kernel.arg_names, step.args))
    scalars = {name: v for name, v in args.items() if not isinstance(v, Ptr)}
    footprints = {f.arg: f for f in kernel.footprints(step.grid, step.block, scalars)}
    counts = [scalars[kernel.arg_name("count", i)] for i in range(kernel.pieces)]
    assert step.grid == kernel.grid(*counts) and step.block == kernel.block
    for i in range(kernel.pieces):
        name = functools.partial(kernel.arg_name, piece=i)
        extents = kernel.extents(scalars, i)  # refuses what the kernel cannot copy
        coords = np.indices(extents, dtype=np.int64).reshape(len(extents), -1)
        isz = kernel.width
        positions = {}
        for side in ("src", "dst"):
            offsets = scalars[name(f"{side}_origin")] + sum(
                coords[k] * scalars[name(f"{side}_stride{k}")] for k in range(kernel.rank)
            )
            assert offsets.min() >= 0 and offsets.max() < footprints[name(side)].elements, (
                "outside its footprint"
            )
            ptr = args[name(side)]
            array = arrays[ptr.array]
            at = array.base + ptr.byte_offset + offsets * isz
            assert at.min() >= 0 and at.max() + isz <= array.buffer.size, "outside the array's buffer"
            positions[side] = at
        src, dst = arrays[args[name("src")].array].buffer, arrays[args[name("dst")].array].buffer
        lanes = np.arange(isz)
        dst[positions["dst"][:, None] + lanes] = src[positions["src"][:, None] + lanes]
