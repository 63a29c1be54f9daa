"""The ops' routes without a GPU: a kind of call is checked once, and every later call of
that kind still has each of its addresses checked (alignment, overlap) before anything
is launched; the emulated device of test_ops_cpu runs the launches."""

from __future__ import annotations

import pytest
from test_ops_cpu import EmulatedDevice, FakeArray, _channels_last

import runtime
from runtime import op_routes, ops, plan

np = pytest.importorskip("numpy")


@pytest.fixture
def emulated(monkeypatch, fresh_plans):
    monkeypatch.setattr(plan, "VARIANTS", [plan.SEED])
    device = EmulatedDevice()
    monkeypatch.setattr(ops, "device_for", lambda op, arrays: device)
    return device


@pytest.fixture
def routes_remembered(monkeypatch):
    """After this, making a route fails the test: every call must find its own."""

    def no_new_route(*args, **kwargs):
        pytest.fail("a route was made again for a kind of call already seen")

    def forbid():
        monkeypatch.setattr(ops, "split_route", no_new_route)
        monkeypatch.setattr(ops, "join_route", no_new_route)

    return forbid


def _stepped(emulated, rows, cols, dtype="f32", start=0, step=2):
    """A (rows, cols) view of every ``step``-th column (from ``start``) of a fresh (rows, step * cols) array."""
    base = emulated.array((rows, step * cols), dtype)
    isz = base.itemsize
    return base, FakeArray(
        (rows, cols), dtype, ptr=base.ptr + start * isz, strides=(step * cols * isz, step * isz)
    )


def test_a_split_is_checked_once_and_each_calls_addresses_every_time(emulated, routes_remembered):
    rng = np.random.default_rng(3)
    data = rng.standard_normal((6, 10)).astype(np.float32)
    dy = emulated.array((6, 10), "f32", data)
    out = [emulated.array((6, 3), "f32"), emulated.array((6, 7), "f32")]
    runtime.channel_cat_backward(dy, [3, 7], 1, out=out)
    assert len(op_routes._routes) == 1
    routes_remembered()
    # a call of the same kind on other arrays: the route found, every element right
    dy2 = emulated.array((6, 10), "f32", data[::-1].copy())
    out2 = [emulated.array((6, 3), "f32"), emulated.array((6, 7), "f32")]
    assert runtime.channel_cat_backward(dy2, [3, 7], 1, out=out2) == out2
    assert np.array_equal(emulated.read(out2[0], np.float32), data[::-1, :3])
    assert np.array_equal(emulated.read(out2[1], np.float32), data[::-1, 3:])
    launched = len(emulated.launches)
    # the same kind again, but an output inside dy, or inside the other output, or off its element
    inside = FakeArray((6, 3), "f32", ptr=dy.ptr + 8)
    with pytest.raises(ValueError, match=r"dy and out\[0\] overlap .*another output$"):
        runtime.channel_cat_backward(dy, [3, 7], 1, out=[inside, out[1]])
    with pytest.raises(ValueError, match=r"out\[0\] and out\[1\] overlap"):
        runtime.channel_cat_backward(
            dy, [3, 7], 1, out=[FakeArray((6, 3), "f32", ptr=out[1].ptr + 4), out[1]]
        )
    with pytest.raises(ValueError, match=r"out\[1\] starts at address 0x[0-9a-f]+, not a multiple"):
        runtime.channel_cat_backward(
            dy, [3, 7], 1, out=[out[0], FakeArray((6, 7), "f32", ptr=out[1].ptr + 2)]
        )
    assert len(emulated.launches) == launched  # nothing of a refused call ran
    assert len(op_routes._routes) == 1


def test_a_concat_is_checked_once_and_each_calls_addresses_every_time(emulated, routes_remembered):
    xs = [emulated.array((4, s), "i16", np.full((4, s), s, np.int16)) for s in (3, 5)]
    y = emulated.array((4, 8), "i16")
    runtime.channel_cat_forward(xs, 1, out=y)
    routes_remembered()
    y2 = emulated.array((4, 8), "i16")
    assert runtime.channel_cat_forward(xs, 1, out=y2) is y2
    assert np.array_equal(emulated.read(y2, np.int16), np.repeat([[3] * 3 + [5] * 5], 4, axis=0))
    launched = len(emulated.launches)
    with pytest.raises(ValueError, match=r"xs\[1\] and out overlap"):
        runtime.channel_cat_forward(xs, 1, out=FakeArray((4, 8), "i16", ptr=xs[1].ptr - 16))
    with pytest.raises(ValueError, match="out starts at address"):
        runtime.channel_cat_forward(xs, 1, out=FakeArray((4, 8), "i16", ptr=y.ptr + 1))
    assert len(emulated.launches) == launched


def test_what_a_route_decided_is_not_taken_for_another_kind_of_call(emulated):
    """Writability, dtype, strides and the arguments are part of a route's key: a
    read-only output of a remembered shape is still refused, and a stepped output of
    a remembered shape takes the strided copy."""
    dy = emulated.array((4, 6), "f32", np.arange(24, dtype=np.float32).reshape(4, 6))
    out = [emulated.array((4, 2), "f32"), emulated.array((4, 4), "f32")]
    runtime.channel_cat_backward(dy, [2, 4], 1, out=out)
    frozen = FakeArray((4, 2), "f32", ptr=out[0].ptr, readonly=True)
    with pytest.raises(ValueError, match=r"out\[0\] is read-only"):
        runtime.channel_cat_backward(dy, [2, 4], 1, out=[frozen, out[1]])
    with pytest.raises(TypeError, match=r"sizes\[0\] = True is a bool"):
        runtime.channel_cat_backward(dy, [True, 5], 1)
    _, stepped = _stepped(emulated, 4, 2)
    runtime.channel_cat_backward(dy, [2, 4], 1, out=[stepped, out[1]])
    launched = emulated.launches[-1][0]  # both pieces in one launch, a grid row each
    assert launched.startswith("strided_copy") and "__p2__" in launched
    assert np.array_equal(
        emulated.read(out[1], np.float32), np.arange(24, dtype=np.float32).reshape(4, 6)[:, 2:]
    )


def test_outputs_interleaved_in_one_buffer_are_refused_on_every_call(emulated, routes_remembered):
    """Arrays of any strides are compared by their spans: two stepped outputs in one
    buffer share no element, but are refused, the first call and every later one."""
    dy = emulated.array((5, 6), "f32", np.arange(30, dtype=np.float32).reshape(5, 6))
    even_base, even = _stepped(emulated, 5, 3)
    odd_base, odd = _stepped(emulated, 5, 3)
    runtime.channel_cat_backward(dy, [3, 3], 1, out=[even, odd])  # separate buffers: fine
    want = np.arange(30, dtype=np.float32).reshape(5, 6)
    assert np.array_equal(emulated.read(even_base, np.float32)[:, ::2], want[:, :3])
    assert np.array_equal(emulated.read(odd_base, np.float32)[:, ::2], want[:, 3:])
    routes_remembered()
    base, even = _stepped(emulated, 5, 3)
    odd = FakeArray((5, 3), "f32", ptr=base.ptr + 4, strides=(24, 8))
    launched = len(emulated.launches)
    with pytest.raises(ValueError, match=r"out\[0\] and out\[1\] overlap .*compared by the span"):
        runtime.channel_cat_backward(dy, [3, 3], 1, out=[even, odd])
    assert len(emulated.launches) == launched


def test_channels_last_results_keep_their_order_on_every_call(emulated, routes_remembered):
    """A remembered channels_last route still makes its results in the input's order
    (a DeviceArray input makes row-major ones, by the strided copy) and checks each
    call's addresses."""
    rng = np.random.default_rng(5)
    data = rng.standard_normal((2, 5, 3, 4)).astype(np.float32)
    x = _channels_last(emulated, (2, 5, 3, 4), "f32", data)
    for calls in range(2):
        out = [_channels_last(emulated, (2, s, 3, 4), "f32") for s in (2, 3)]
        runtime.channel_cat_backward(x, [2, 3], 1, out=out)
        for o, want in zip(out, (data[:, :2], data[:, 2:])):
            got = emulated.view(o.ptr, o.nbytes).view(np.float32).reshape(2, 3, 4, -1).transpose(0, 3, 1, 2)
            assert np.array_equal(got, want)
        if calls == 0:
            routes_remembered()
    with pytest.raises(ValueError, match=r"dy and out\[1\] overlap"):
        runtime.channel_cat_backward(x, [2, 3], 1, out=[out[0], FakeArray((2, 3, 3, 4), "f32", ptr=x.ptr,
                                                                             strides=(144, 4, 48, 12))])  # fmt: skip


@pytest.mark.parametrize("op", ["split", "concat"])
def test_the_route_table_starts_over_when_full(emulated, monkeypatch, op):
    monkeypatch.setattr(op_routes, "_ROUTES_KEPT", 3)
    for rows in range(1, 8):
        dy = emulated.array((rows, 4), "f32", np.ones((rows, 4), np.float32))
        if op == "split":
            runtime.channel_cat_backward(dy, [1, 3], 1, out=[emulated.array((rows, 1), "f32"),
                                                             emulated.array((rows, 3), "f32")])  # fmt: skip
        else:
            runtime.channel_cat_forward([dy, dy], 1, out=emulated.array((rows, 8), "f32"))
        assert 1 <= len(op_routes._routes) <= 3
