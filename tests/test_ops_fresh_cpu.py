"""Results the caller did not pass, made by the C lane (runtime._fastlaunch.OpLane)
without a GPU, as the Python path makes them (runtime.outputs.new_outputs): torch
tensors where torch's current stream is the op's, DeviceArrays from the device on the op's
stream; anything else it leaves to Python, having done nothing. The emulated device of
test_ops_cpu runs the launches, and the test's tensor class stands for torch.Tensor."""

from __future__ import annotations

import contextlib
import sys
from types import SimpleNamespace

import pytest
from test_ops_cpu import EmulatedDevice, _device_array, _FakeTensor

import runtime
from runtime import launch, op_arrays, ops, plan
from runtime.arrays import torch_dtype_table
from runtime.memory import DeviceArray
from runtime.strides import dense_strides

np = pytest.importorskip("numpy")


class _Tensor(_FakeTensor):
    """A tensor whose ``new_empty_strided`` makes another over the emulated device's memory
    (or fails, where the test says the device is out of memory); row-major only, as every
    result here is."""

    failing = False
    device = None  # torch.device, as runtime.outputs reads it to allocate on another stream

    def new_empty_strided(self, shape, strides):
        assert tuple(strides) == dense_strides(shape, range(len(shape))), (shape, strides)
        if _Tensor.failing:
            raise MemoryError(f"out of memory: {shape}")
        made = _Tensor.__new__(_Tensor)
        _FakeTensor.__init__(made, self._device, shape, self.dtype)
        made._device = self._device
        return made

    @classmethod
    def on(cls, device, shape, dtype, data=None):
        t = cls(device, shape, dtype, data)
        t._device = device
        return t


class _Device(EmulatedDevice):
    """The emulated device, whose ``empty`` makes DeviceArrays over its memory."""

    def empty(self, shape, dtype, *, stream=None):
        self.empty_streams.append(stream)
        return _device_array(self, shape, getattr(dtype, "name", dtype))


def emulated_c_path(monkeypatch, device, tensor, current_stream):
    """Puts a C lane of its own (an OpLane) over the emulated ``device``, with
    ``tensor`` standing for torch.Tensor and torch's current stream read from
    ``current_stream``, the compiled launch path on. Returns it and the launch path's old
    setting, for the caller to restore."""
    if launch.compiled_launch_available():
        pytest.skip(launch.compiled_launch_available())
    monkeypatch.setattr(plan, "VARIANTS", [plan.SEED])
    device.closed = False
    monkeypatch.setattr(ops, "device_for", lambda op, arrays: device)
    monkeypatch.setattr(op_arrays.TORCH, "array_class", tensor)
    old = launch.use_compiled_launch(True)
    lane = launch.compiled_ops()
    lane.bind_torch(tensor, torch_dtype_table(), current_stream)
    monkeypatch.setattr(ops, "_lane", lane)
    return lane, old


@pytest.fixture
def fresh_c(monkeypatch, fresh_plans):
    """The C lane over the emulated device, bound to ``_Tensor`` and to a current
    stream the test sets (``device.current``, 0 at first)."""
    device = _Device()
    device.current = 0
    current = lambda index: device.current  # noqa: E731
    # torch as runtime.outputs sees it too, so that the Python path makes what the lane makes
    cuda = SimpleNamespace(default_stream=lambda where: 0, ExternalStream=lambda handle, device=None: handle,
                           stream=lambda named: contextlib.nullcontext())  # fmt: skip
    fake = SimpleNamespace(Tensor=_Tensor, cuda=cuda, _C=SimpleNamespace(_cuda_getCurrentRawStream=current))
    monkeypatch.setitem(sys.modules, "torch", fake)
    _, old = emulated_c_path(monkeypatch, device, _Tensor, current)
    _Tensor.failing = False
    yield device
    launch.use_compiled_launch(old)


def _python_paths_fail(monkeypatch):
    for name in ("recognise",):
        monkeypatch.setattr(
            ops, name, lambda *a, name=name: pytest.fail(f"the Python path ({name}) was taken")
        )


def test_the_c_path_makes_a_splits_and_a_concats_results_once_it_has_seen_the_call(fresh_c, monkeypatch):
    data = np.arange(5 * 12, dtype=np.float32).reshape(5, 12)
    dy = _Tensor.on(fresh_c, (5, 12), "f32", data)
    runtime.channel_cat_backward(dy, [4, 8], 1)  # seen: the Python path hands it to the lane
    a, b = runtime.channel_cat_backward(dy, [4, 8], 1)  # and the C lane makes tensors ...
    runtime.channel_cat_forward([a, b], 1)  # ... whose concat the Python path sees
    _python_paths_fail(monkeypatch)
    for _ in range(2):
        a, b = runtime.channel_cat_backward(dy, [4, 8], 1)
        assert isinstance(a, _Tensor) and a.shape == (5, 4) and b.shape == (5, 8)
        assert np.array_equal(fresh_c.read(a._array, np.float32), data[:, :4])
        assert np.array_equal(fresh_c.read(b._array, np.float32), data[:, 4:])
        y = runtime.channel_cat_forward([a, b], 1)
        assert isinstance(y, _Tensor) and y.shape == (5, 12)
        assert np.array_equal(fresh_c.read(y._array, np.float32), data)


def test_the_c_path_leaves_other_streams_and_empty_pieces_to_python(fresh_c, monkeypatch):
    """Results for a stream other than torch's current one are made by the Python path
    (under the op's stream); so are an empty piece's."""
    dy = _Tensor.on(fresh_c, (3, 6), "f32", np.ones((3, 6), np.float32))
    runtime.channel_cat_backward(dy, [2, 4], 1)
    runtime.channel_cat_backward(dy, [2, 4], 1, stream=7)  # seen on stream 7 too
    taken = []
    real = ops.recognise
    monkeypatch.setattr(
        ops, "recognise", lambda *a, **k: (taken.append(a[3]) if a[1] == "dy" else None) or real(*a, **k)
    )
    fresh_c.current = 7
    runtime.channel_cat_backward(dy, [2, 4], 1)  # the op's stream 0, torch's current 7
    runtime.channel_cat_backward(dy, [2, 4], 1, stream=7)  # the same: the C path's
    fresh_c.current = 1  # 0 and 1 both name the legacy default stream
    runtime.channel_cat_backward(dy, [2, 4], 1)
    assert taken == [0]
    runtime.channel_cat_backward(dy, [0, 6], 1)
    assert taken == [0, 0]


def test_the_c_path_makes_device_arrays_on_the_ops_stream(fresh_c, monkeypatch):
    data = np.arange(4 * 9, dtype=np.int16).reshape(4, 9)
    x = _device_array(fresh_c, (4, 9), "i16", data)
    for _ in range(2):  # seen, then remembered: its results and their concat too
        a, b = runtime.channel_cat_backward(x, [2, 7], 1, stream=7)
        runtime.channel_cat_forward([a, b], 1, stream=7)
    _python_paths_fail(monkeypatch)
    fresh_c.empty_streams.clear()
    a, b = runtime.channel_cat_backward(x, [2, 7], 1, stream=7)
    y = runtime.channel_cat_forward([a, b], 1, stream=7)
    assert all(type(r) is DeviceArray for r in (a, b, y)) and fresh_c.empty_streams == [7, 7, 7]
    assert np.array_equal(fresh_c.read(y, np.int16), data)
    assert np.array_equal(fresh_c.read(a, np.int16), data[:, :2])


def test_an_allocation_that_fails_raises_and_launches_nothing(fresh_c):
    dy = _Tensor.on(fresh_c, (3, 6), "f32")
    xs = [_Tensor.on(fresh_c, (3, s), "f32") for s in (2, 4)]
    runtime.channel_cat_backward(dy, [2, 4], 1)
    runtime.channel_cat_forward(xs, 1)
    launched = len(fresh_c.launches)
    _Tensor.failing = True
    with pytest.raises(MemoryError, match=r"out of memory: \(3, 2\)"):
        runtime.channel_cat_backward(dy, [2, 4], 1)
    with pytest.raises(MemoryError, match=r"out of memory: \(3, 6\)"):
        runtime.channel_cat_forward(xs, 1)
    assert len(fresh_c.launches) == launched


def test_a_concat_of_a_tensor_and_a_device_array_makes_what_python_makes(fresh_c, monkeypatch):
    """Mixed inputs: the result is of xs[0]'s kind, as the Python path makes it; once the
    Python path has run such a call, the C lane makes the same."""
    t = _Tensor.on(fresh_c, (2, 3), "f32")
    d = _device_array(fresh_c, (2, 3), "f32")
    pairs = ([t, t], [d, d], [t, d], [d, t])
    python = [type(runtime.channel_cat_forward(pair, 1)) for pair in pairs]  # each run by Python once
    assert python == [_Tensor, DeviceArray, _Tensor, DeviceArray]
    _python_paths_fail(monkeypatch)
    assert [type(runtime.channel_cat_forward(pair, 1)) for pair in pairs] == python
