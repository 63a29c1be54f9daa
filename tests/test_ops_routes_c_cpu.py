"""The ops' C lane (runtime._fastlaunch.OpLane) on calls of any strides, without a
GPU: a kind of call the Python path has run (arrays of any strides: stepped views,
channels_last) runs from C the next time, with every address checked as the Python path
checks it; anything it does not take (overlap, misalignment, another device, a kind not
seen) it leaves to Python having done nothing. The emulated device of test_ops_cpu runs
the launches; the test's tensor class stands for torch.Tensor."""

from __future__ import annotations

import math
import sys
from types import SimpleNamespace

import pytest
from test_ops_cpu import EmulatedDevice
from test_ops_fresh_cpu import emulated_c_path

import ptxgen
import runtime
from runtime import launch, ops

np = pytest.importorskip("numpy")


class _View:
    """A CUDA tensor as the ops read it: a dtype, a shape and element strides over the
    emulated device's memory; ``new_empty``, ``new_empty_strided`` and ``permute`` as torch
    has them."""

    is_cuda = True

    def __init__(self, device, ptr, shape, strides, dtype, requires_grad=False):
        self._device, self._ptr, self.dtype, self.requires_grad = device, ptr, dtype, requires_grad
        self.shape, self._strides = tuple(shape), tuple(strides)
        self.itemsize = ptxgen.resolve_dtype(dtype).itemsize
        self.nbytes = math.prod(self.shape) * self.itemsize

    @classmethod
    def empty(cls, device, shape, dtype, order=None):
        """A fresh dense tensor of ``shape`` laid out in ``order`` (None: row-major)."""
        order = tuple(range(len(shape))) if order is None else order
        strides, step = [0] * len(shape), 1
        for d in reversed(order):
            strides[d], step = step, step * shape[d]
        itemsize = ptxgen.resolve_dtype(dtype).itemsize
        return cls(device, device.alloc(math.prod(shape) * itemsize), shape, strides, dtype)

    def is_contiguous(self):
        step = 1
        for extent, stride in reversed(list(zip(self.shape, self._strides))):
            if extent != 1 and stride != step:
                return False
            step *= extent
        return True

    def stride(self):
        return self._strides

    def data_ptr(self):
        return self._ptr

    def get_device(self):
        return 0

    def new_empty(self, shape):
        return _View.empty(self._device, tuple(shape), self.dtype)

    def new_empty_strided(self, shape, strides):
        span = sum((e - 1) * s for e, s in zip(shape, strides)) + 1 if 0 not in shape else 0
        return _View(
            self._device, self._device.alloc(max(span, 1) * self.itemsize), shape, strides, self.dtype
        )

    def permute(self, dims):
        return _View(self._device, self._ptr, [self.shape[d] for d in dims], [self._strides[d] for d in dims],
                     self.dtype)  # fmt: skip

    def numpy(self, np_dtype):
        """The elements, in logical order."""
        span = sum((e - 1) * s for e, s in zip(self.shape, self._strides)) + 1 if self.nbytes else 0
        flat = self._device.view(self._ptr, span * self.itemsize).view(np_dtype)
        strides = tuple(s * self.itemsize for s in self._strides)
        return np.lib.stride_tricks.as_strided(flat, self.shape, strides).copy()

    def fill(self, values):
        span = sum((e - 1) * s for e, s in zip(self.shape, self._strides)) + 1
        flat = self._device.view(self._ptr, span * self.itemsize).view(values.dtype)
        strides = tuple(s * self.itemsize for s in self._strides)
        np.lib.stride_tricks.as_strided(flat, self.shape, strides)[...] = values
        return self


@pytest.fixture
def routes_c(monkeypatch, fresh_plans):
    """The C path over the emulated device, bound to ``_View`` and to op_routes' table."""
    device = EmulatedDevice()
    # torch as the ops see it: its tensor class, and its current stream (the legacy default)
    fake_torch = SimpleNamespace(Tensor=_View, _C=SimpleNamespace(_cuda_getCurrentRawStream=lambda index: 0))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    _, old = emulated_c_path(monkeypatch, device, _View, lambda index: 0)
    yield device
    launch.use_compiled_launch(old)


def _only_c(monkeypatch):
    monkeypatch.setattr(ops, "recognise", lambda *a, **k: pytest.fail("the Python path was taken"))


def _stepped(device, rows, cols, dtype="f32", start=0):
    """Every other column (from ``start``) of a fresh (rows, 2 * cols) tensor."""
    base = _View.empty(device, (rows, 2 * cols), dtype)
    return _View(device, base.data_ptr() + start * base.itemsize, (rows, cols), (2 * cols, 2), dtype)


def test_a_stepped_split_and_concat_run_from_c_once_seen(routes_c, monkeypatch):
    rng = np.random.default_rng(11)
    for trial in range(3):
        data = rng.standard_normal((7, 9)).astype(np.float32)
        dy = _stepped(routes_c, 7, 9).fill(data)
        outs = [_stepped(routes_c, 7, s, start=1) for s in (4, 5)]
        if trial:
            _only_c(monkeypatch)
        assert runtime.channel_cat_backward(dy, [4, 5], 1, out=outs) == outs
        assert np.array_equal(outs[0].numpy(np.float32), data[:, :4])
        assert np.array_equal(outs[1].numpy(np.float32), data[:, 4:])
        y = _stepped(routes_c, 7, 9)
        assert runtime.channel_cat_forward(outs, 1, out=y) is y
        assert np.array_equal(y.numpy(np.float32), data)
        pieces = runtime.channel_cat_backward(dy, [4, 5], 1)  # the results row-major, made in C
        assert [p.is_contiguous() for p in pieces] == [True, True]
        assert np.array_equal(pieces[1].numpy(np.float32), data[:, 4:])


def test_channels_last_results_are_made_in_its_order_from_c(routes_c, monkeypatch):
    rng = np.random.default_rng(12)
    shape = (2, 6, 3, 5)
    for trial in range(3):
        data = rng.standard_normal(shape).astype(np.float32)
        x = _View.empty(routes_c, shape, "f32", order=(0, 2, 3, 1)).fill(data)
        if trial:
            _only_c(monkeypatch)
        a, b = runtime.channel_cat_backward(x, [2, 4], 1)
        assert a.shape == (2, 2, 3, 5) and a.stride() == (30, 1, 10, 2)  # channels_last, as x
        assert np.array_equal(a.numpy(np.float32), data[:, :2]) and np.array_equal(
            b.numpy(np.float32), data[:, 2:]
        )
        y = runtime.channel_cat_forward([a, b], 1)
        assert y.stride() == x.stride() and np.array_equal(y.numpy(np.float32), data)


def test_what_c_does_not_take_it_leaves_to_python_having_done_nothing(routes_c, monkeypatch):
    """Overlap, a misaligned output, a readonly one and a kind not seen: the C path says
    False and the Python path raises, or runs the call, as it always did."""
    dy = _stepped(routes_c, 5, 6).fill(np.ones((5, 6), np.float32))
    outs = [_stepped(routes_c, 5, s, start=1) for s in (2, 4)]
    runtime.channel_cat_backward(dy, [2, 4], 1, out=outs)  # seen
    launched = len(routes_c.launches)
    inside = _View(routes_c, dy.data_ptr() + 4, (5, 2), (12, 2), "f32")  # between dy's elements
    with pytest.raises(ValueError, match=r"dy and out\[0\] overlap .*compared by the span"):
        runtime.channel_cat_backward(dy, [2, 4], 1, out=[inside, outs[1]])
    shared = _View(routes_c, outs[1].data_ptr() + 8, (5, 2), (4, 2), "f32")
    with pytest.raises(ValueError, match=r"out\[0\] and out\[1\] overlap"):
        runtime.channel_cat_backward(dy, [2, 4], 1, out=[shared, outs[1]])
    off = _View(routes_c, outs[0].data_ptr() + 2, (5, 2), (4, 2), "f32")
    with pytest.raises(ValueError, match=r"out\[0\] starts at address"):
        runtime.channel_cat_backward(dy, [2, 4], 1, out=[off, outs[1]])
    frozen = _View(routes_c, outs[0].data_ptr(), (5, 2), (4, 2), "f32", requires_grad=True)
    with pytest.raises(ValueError, match=r"out\[0\] is a torch tensor that requires grad"):
        runtime.channel_cat_backward(dy, [2, 4], 1, out=[frozen, outs[1]])
    assert len(routes_c.launches) == launched
    seen = []
    real = ops.recognise
    monkeypatch.setattr(ops, "recognise", lambda *a, **k: seen.append(a[1]) or real(*a, **k))
    runtime.channel_cat_backward(dy, [2, 4], 1, out=outs)  # taken by C: nothing read by Python
    assert seen == []
    runtime.channel_cat_backward(dy, [3, 3], 1, out=[_stepped(routes_c, 5, 3), _stepped(routes_c, 5, 3)])
    assert seen == ["dy", "out[0]", "out[1]"]  # a kind not seen: Python's


def test_a_route_forgotten_or_its_device_closed_is_left_to_python(routes_c, monkeypatch):
    dy = _stepped(routes_c, 3, 4).fill(np.arange(12, dtype=np.float32).reshape(3, 4))
    out = [_stepped(routes_c, 3, 2, start=1), _stepped(routes_c, 3, 2, start=1)]
    runtime.channel_cat_backward(dy, [2, 2], 1, out=out)
    seen = []
    real = ops.recognise
    monkeypatch.setattr(ops, "recognise", lambda *a, **k: seen.append(a[1]) or real(*a, **k))
    routes_c.closed = True  # the launch registered for it is not run
    runtime.channel_cat_backward(dy, [2, 2], 1, out=out)
    assert seen == ["dy", "out[0]", "out[1]"]
    routes_c.closed = False
    ops.clear_plans()
    runtime.channel_cat_backward(dy, [2, 2], 1, out=out)
    assert len(seen) == 6 and np.array_equal(out[1].numpy(np.float32), [[2, 3], [6, 7], [10, 11]])
