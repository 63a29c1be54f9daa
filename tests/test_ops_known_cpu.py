"""The ops' Python path, where the extension is not built or switched off, on a call of a kind it has run:
its arrays read as plain values (``op_arrays.known_facts``), its route found by the same
key, the addresses checked in one pass and the plan launched (``ops._known``). Whatever
that pass does not plainly pass goes the whole way, which raises what it always raised."""

from __future__ import annotations

import numpy as np
import pytest
from test_ops_cpu import EmulatedDevice, _device_array, _FakeTensor, emulated, mixed  # noqa: F401  (fixtures)

import runtime
from runtime import op_arrays, ops


@pytest.fixture
def no_lane(mixed, monkeypatch, launch_path):  # noqa: F811
    """The emulated device with no C lane at work (the fixture finds a tensor's device
    there): none at all, as where the extension is not built; or, on the Python launch
    path where it is built, the ops' own lane switched off (``use_compiled_launch``)."""
    if launch_path == "compiled" or ops._lane is None:
        monkeypatch.setattr(ops, "_lane", None)
    else:
        assert ops._lane.enabled is False
    return mixed


class _WholeWay(Exception):
    pass


def _whole_way_raises(monkeypatch):
    def refuse(*a, **k):
        raise _WholeWay(a[1])

    monkeypatch.setattr(ops, "recognise", refuse)


def _whole_way_fails(monkeypatch):
    monkeypatch.setattr(ops, "recognise", lambda *a, **k: pytest.fail("the call went the whole way"))


@pytest.mark.parametrize("kind", ["device_array", "tensor"])
def test_a_known_call_runs_on_plain_values(no_lane, monkeypatch, kind):
    make = _device_array if kind == "device_array" else _FakeTensor
    data = np.arange(4 * 10, dtype=np.float32).reshape(4, 10)
    dy = make(no_lane, (4, 10), "f32", data)
    out = [make(no_lane, (4, s), "f32") for s in (3, 7)]
    y = make(no_lane, (4, 10), "f32")
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out)  # the whole way, remembered
    runtime.channel_cat_forward(out, 1, out=y)
    runtime.channel_cat_backward(dy, (3, 7), 1)  # allocating: a key of its own
    launches = len(no_lane.launches)
    _whole_way_fails(monkeypatch)

    def read(a):
        return no_lane.read(a if kind == "device_array" else a._array, np.float32)

    for a in (*out, y):
        no_lane.view(a.address if kind == "device_array" else a._array.ptr, 4 * a.shape[0] * a.shape[1])[
            :
        ] = 0xFF
    assert runtime.channel_cat_backward(dy, [3, 7], 1, out=out) == out
    assert np.array_equal(read(out[0]), data[:, :3]) and np.array_equal(read(out[1]), data[:, 3:])
    assert runtime.channel_cat_forward(out, 1, out=y) is y
    assert np.array_equal(read(y), data)
    made = runtime.channel_cat_backward(dy, (3, 7), 1)
    assert [m.shape for m in made] == [(4, 3), (4, 7)]
    assert np.array_equal(no_lane.read(made[1], np.float32), data[:, 3:])  # the emulated device's own arrays
    assert len(no_lane.launches) == 2 * launches  # each call launched what its first did


def test_what_a_known_call_does_not_plainly_pass_goes_the_whole_way(no_lane, monkeypatch):
    """Each call below is of a remembered kind; the one pass declines it, and the whole
    way raises what it raises for a first call."""
    dy = _device_array(no_lane, (4, 10), "f32")
    out = [_device_array(no_lane, (4, s), "f32") for s in (3, 7)]
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out)
    taken = []
    real = ops.recognise
    monkeypatch.setattr(ops, "recognise", lambda *a, **k: taken.append(a[1]) or real(*a, **k))

    over = _device_array(no_lane, (4, 3), "f32")
    over.address = over._ptr = dy.address  # out[0] over dy's bytes
    with pytest.raises(ValueError, match=r"dy and out\[0\] overlap"):
        runtime.channel_cat_backward(dy, [3, 7], 1, out=[over, out[1]])
    shifted = _device_array(no_lane, (4, 7), "f32")
    shifted.address = shifted._ptr = shifted.address + 2  # off its 4-byte boundary
    with pytest.raises(ValueError, match=r"out\[1\] starts at address 0x[0-9a-f]+, not a multiple"):
        runtime.channel_cat_backward(dy, [3, 7], 1, out=[out[0], shifted])
    with pytest.raises(TypeError, match=r"sizes\[0\] = True is a bool"):
        runtime.channel_cat_backward(_device_array(no_lane, (4, 8), "f32"), [True, 7], 1)
    assert taken.count("dy") == 3  # every one went the whole way

    graded = [_FakeTensor(no_lane, (4, s), "f32") for s in (3, 7)]
    tdy = _FakeTensor(no_lane, (4, 10), "f32")
    runtime.channel_cat_backward(tdy, [3, 7], 1, out=graded)
    graded[1].requires_grad = True  # written behind autograd's back: another key, refused
    with pytest.raises(ValueError, match=r"out\[1\] is a torch tensor that requires grad"):
        runtime.channel_cat_backward(tdy, [3, 7], 1, out=graded)

    other = EmulatedDevice()
    other.ordinal, other.used = 1, 1 << 16  # its own addresses, past this device's
    elsewhere = _device_array(other, (4, 7), "f32")
    monkeypatch.setattr(ops, "device_for", op_arrays.device_for)  # the real check, not the fixture's
    with pytest.raises(ValueError, match="the arrays live on different devices"):
        runtime.channel_cat_backward(dy, [3, 7], 1, out=[out[0], elsewhere])


def test_kinds_mixed_on_one_device_are_known_too(no_lane, monkeypatch):
    """A DeviceArray beside torch tensors on its device: one device, as device_for finds."""
    data = np.arange(40, dtype=np.float32).reshape(4, 10)
    dy = _device_array(no_lane, (4, 10), "f32", data)
    out = [_FakeTensor(no_lane, (4, s), "f32") for s in (3, 7)]
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out)
    _whole_way_fails(monkeypatch)
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out)
    assert np.array_equal(no_lane.read(out[1]._array, np.float32), data[:, 3:])


def test_calls_the_known_step_leaves_go_the_whole_way(no_lane, monkeypatch):
    """Inputs sharing memory beside an out (allowed, but left to the whole way), a tensor
    no longer row-major, numpy ints, a bool dim, an empty piece: none is run here."""
    data = np.arange(20, dtype=np.float32).reshape(4, 5)
    x = _FakeTensor(no_lane, (4, 5), "f32", data)
    y = _FakeTensor(no_lane, (4, 10), "f32")
    runtime.channel_cat_forward([x, x], 1, out=y)  # remembered
    runtime.channel_cat_forward([x, x], 1, out=y)  # and run again: the whole way
    want = np.concatenate([data, data], 1)
    assert np.array_equal(no_lane.read(y._array, np.float32), want)
    dy = _FakeTensor(no_lane, (4, 10), "f32")
    out = [_FakeTensor(no_lane, (4, s), "f32") for s in (3, 7)]
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out)
    launches = len(no_lane.launches)
    _whole_way_raises(monkeypatch)
    with pytest.raises(_WholeWay):
        runtime.channel_cat_forward([x, x], 1, out=y)
    dy.is_contiguous = lambda: False  # as_strided_ made it another array
    with pytest.raises(_WholeWay):
        runtime.channel_cat_backward(dy, [3, 7], 1, out=out)
    dy.is_contiguous = lambda: True
    for sizes, dim in (([np.int64(3), 7], 1), ([3, 7], True)):
        with pytest.raises(_WholeWay):
            runtime.channel_cat_backward(dy, sizes, dim, out=out)
    ddy = _device_array(no_lane, (4, 10), "f32")
    monkeypatch.setattr(ops, "recognise", op_arrays.recognise)
    empty = [_device_array(no_lane, (4, 0), "f32"), _device_array(no_lane, (4, 10), "f32")]
    runtime.channel_cat_backward(ddy, [0, 10], 1, out=empty)
    _whole_way_raises(monkeypatch)
    with pytest.raises(_WholeWay):  # an empty DeviceArray has no launch key
        runtime.channel_cat_backward(ddy, [0, 10], 1, out=empty)
    assert len(no_lane.launches) == launches + 1  # the one call above that went the whole way
