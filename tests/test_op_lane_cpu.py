"""The ops' C lane (runtime._fastlaunch.OpLane) on its own, without a GPU: what it
remembers and refuses when Python code runs in the middle of a call (a device's
``closed``, a finalizer), when the arrays changed between the Python path's reading and
the lane's, and when a route's entry does not fit. Its arrays are stand-ins of the class
the lane is told reads as a DeviceArray; its launch functions record what they are
called with."""

from __future__ import annotations

import gc
import itertools
import weakref

import pytest

from runtime import launch

if launch.compiled_launch_available():
    pytest.skip(launch.compiled_launch_available(), allow_module_level=True)

from runtime import _fastlaunch
from runtime.op_routes import Route


class _DType:
    itemsize = 4


F32 = _DType()


class _Device:
    """A device whose ``closed`` runs ``hook`` once (Python code in the middle of a call)."""

    def __init__(self, ordinal=0, hook=None):
        self.ordinal, self.hook, self.made = ordinal, hook, []

    @property
    def closed(self):
        if self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return False

    def empty(self, shape, dtype, *, stream):
        self.made.append((shape, stream))
        return _Array(self, shape, 0x90000 + 0x1000 * len(self.made))


class _Array:
    """What the lane reads of a DeviceArray: ``launch_key``, ``address``, ``nbytes``, ``shape``."""

    def __init__(self, device, shape, address):
        self.launch_key, self.shape, self.address = (device, F32), tuple(shape), address
        self.nbytes = 4 * shape[0] * shape[1]


def _entry(spans, order=None):
    """What runtime.op_routes.Route hands the lane (``Route.entry``) for a split of 4 × 10
    f32 into 3 + 7: ``spans`` dy's, then each output's where ``out`` is given."""
    return Route("backward", F32, ((4, 3), (4, 7)), spans, 1, order=order).entry


ENTRY = _entry(((0, 160), (0, 48), (0, 112)))  # with out
FRESH = _entry(((0, 160),))  # without out


class _Stream:
    pass


def _device_outputs(like, device, stream, results, dtype, order):
    """runtime.outputs.outputs_of as the lane calls it for DeviceArrays: the device's."""
    arrays = [device.empty(shape, dtype, stream=stream) for shape, _ in results]
    return arrays, [a.address for a in arrays]


def _lane(outputs=_device_outputs):
    return _fastlaunch.OpLane(
        device_array=_Array,
        stream_class=_Stream,
        stream_handle=lambda s: s,
        known_streams={7},
        outputs=outputs,
    )


def _split(device, pattern):
    """dy and two outputs whose addresses modulo 16 are ``pattern``."""
    dy = _Array(device, (4, 10), 0x10000 + pattern[0])
    return dy, [_Array(device, (4, 3), 0x20000 + pattern[1]), _Array(device, (4, 7), 0x30000 + pattern[2])]


def _seen(dy, out):
    return [(a.address, a.shape) for a in (dy, *out)]


def _remember(lane, device, pattern, launch_function, entry=ENTRY):
    dy, out = _split(device, pattern)
    return lane.remember_split(dy, [3, 7], 1, out, None, entry, device, _seen(dy, out), [], launch_function)


PATTERNS = [p for p in itertools.product((0, 4, 8, 12), repeat=3)]


def test_a_slot_rewritten_while_its_device_is_asked_runs_nothing_of_another_pattern():
    """A device's ``closed`` is Python code: there, other calls may fill the entry past its
    16 slots, which starts it over. The call asking runs the launch it found, or none,
    never one planned for other addresses modulo 16."""
    lane, called = _lane(), []
    mine = (0, 0, 0)
    others = [p for p in PATTERNS if p != mine][:16]
    device = _Device()
    assert _remember(lane, device, mine, lambda *a: called.append(("mine", a)))
    device.hook = lambda: [
        _remember(lane, _Device(), p, lambda *a: called.append(("other", a))) for p in others
    ]
    dy, out = _split(device, mine)
    assert lane.split(dy, [3, 7], 1, out, None) in (True, False)
    assert all(who == "mine" for who, _ in called)


def test_slots_started_over_survive_a_finalizer_that_calls_the_lane():
    """Past 16 slots an entry starts over; a device released then may run a finalizer that
    calls the lane, which must find whole slots or none (no crash, nothing lost)."""
    lane, called = _lane(), []

    class Dying(_Device):
        def __del__(self):
            dy, out = _split(_Device(), PATTERNS[5])
            called.append(lane.split(dy, [3, 7], 1, out, None))

    for i, pattern in enumerate(PATTERNS[:16]):
        device = Dying() if i == 5 else _Device()
        assert _remember(lane, device, pattern, lambda *a: None)
        del device
    assert _remember(lane, _Device(), PATTERNS[16], lambda *a: None)  # the 17th: starts over
    assert called == [False]  # the finalizer ran, and found nothing half there
    dy, out = _split(_Device(), PATTERNS[16])
    assert lane.split(dy, [3, 7], 1, out, None) is True


def test_arrays_changed_since_the_python_path_read_them_are_not_remembered():
    """The Python path hands the lane what it read of each array; where another thread
    changed one in between (its address, its shape), the lane remembers nothing."""
    lane, device = _lane(), _Device()
    dy, out = _split(device, (0, 0, 0))
    seen = _seen(dy, out)
    moved = [*seen[:1], (seen[1][0] + 16, seen[1][1]), seen[2]]
    reshaped = [*seen[:2], (seen[2][0], (7, 4))]
    for wrong in (moved, reshaped, seen[:2], "not a list"):
        assert lane.remember_split(dy, [3, 7], 1, out, None, ENTRY, device, wrong, [], print) is False
    assert lane.remembered == 0
    assert lane.remember_split(dy, [3, 7], 1, out, None, ENTRY, device, seen, [], print) is True
    assert lane.remembered == 1


def test_an_entry_that_does_not_fit_is_not_remembered_and_raises_nothing():
    """The op has run when it is remembered: an entry the lane cannot hold (spans of
    another count, results of another count or not pairs, an element size not a power of
    two, no entry: a span past int64) answers False, and later calls of that kind go
    through Python."""
    lane, device = _lane(), _Device()
    _, packed, results, _ = FRESH
    assert _entry(((0, 160), (0, 48), (0, 2**63))) is None  # a span past int64
    for entry in (_entry(((0, 160), (0, 48))), object(), None):
        assert _remember(lane, device, (0, 0, 0), print, entry) is False
    dy = _Array(device, (4, 10), 0x10000)
    for entry in (
        _entry(((0, 160), (0, 48), (0, 112))),  # spans of an out given
        (4, packed, results[:1], True),  # one result fewer than the call makes
        (4, packed, (results[0], ((4, 7), (7, 1), None)), True),  # a result not a pair
        (4, packed, list(results), True),  # results not a tuple
        (3, packed, results, True),
        (0, packed, results, True),
        (None, packed, results, True),
        (4, list(packed), results, True),
        (4, packed, results),
    ):
        assert lane.remember_split(dy, [3, 7], 1, None, None, entry, device, _seen(dy, []), [0x90000, 0xA0000],
                                   print) is False  # fmt: skip
    assert lane.remembered == 0
    assert lane.split(dy, [3, 7], 1, None, None) is False


def test_results_are_made_only_where_a_launch_of_that_device_and_stream_waits():
    """Without ``out``, the lane makes the results only once it holds a launch for the
    call's device and stream: a call on another stream allocates nothing and is left to
    Python; on the remembered stream it makes them on that stream and launches."""
    lane, device, called = _lane(), _Device(), []
    dy = _Array(device, (4, 10), 0x10000)
    made = [0x90000, 0xA0000]
    assert lane.remember_split(dy, [3, 7], 1, None, None, FRESH, device, _seen(dy, []), made,
                               lambda *a: called.append(a)) is True  # fmt: skip
    assert lane.split(dy, [3, 7], 1, None, 7) is False and device.made == []
    results = lane.split(dy, [3, 7], 1, None, None)
    assert [r.shape for r in results] == [(4, 3), (4, 7)] and [s for _, s in device.made] == [0, 0]
    assert called == [(0x10000, *[r.address for r in results])]
    given = [weakref.ref(r) for r in results]
    del results
    gc.collect()
    assert [r() for r in given] == [None, None], "the lane kept a reference to the results it returned"


def test_what_the_results_maker_answers_reaches_the_caller_or_leaves_the_call():
    """The lane's results maker (runtime.outputs.outputs_of) raising, an allocator's out
    of memory say, is the caller's error with nothing launched; an answer the lane cannot
    read (too few arrays, a negative address, a list for the pair) leaves the call to
    Python, nothing launched, the arrays made let go. A maker that is not callable is
    refused when the lane is made."""
    called, made = [], []

    def raising(like, device, stream, results, dtype, order):
        raise MemoryError("out of device memory: cannot allocate 112 bytes")

    def arrays(device, *shapes):
        made[:] = [_Array(device, s, 0x90000 + 0x10000 * i) for i, s in enumerate(shapes)]
        return list(made)

    answers = (
        lambda *a: (arrays(a[1], (4, 3)), [0x90000]),
        lambda *a: (arrays(a[1], (4, 3), (4, 7)), [0x90000, -16]),
        lambda *a: [[], []],
    )
    for maker in (raising, *answers):
        lane, device = _lane(maker), _Device()
        dy = _Array(device, (4, 10), 0x10000)
        assert lane.remember_split(dy, [3, 7], 1, None, None, FRESH, device, _seen(dy, []), [0x90000, 0xA0000],
                                   lambda *a: called.append(a)) is True  # fmt: skip
        if maker is raising:
            with pytest.raises(MemoryError, match="112 bytes"):
                lane.split(dy, [3, 7], 1, None, None)
        else:
            assert lane.split(dy, [3, 7], 1, None, None) is False
            let_go = [weakref.ref(a) for a in made]
            made.clear()
            gc.collect()
            assert [r() for r in let_go] == [None] * len(let_go), "the lane kept arrays it made"
    assert called == []
    with pytest.raises(TypeError, match="outputs must be callable"):
        _lane(42)


def test_results_in_another_memory_order_are_not_made_as_device_arrays():
    """A DeviceArray is row-major only: a route whose results have strides (a channels_last
    input's, say) is remembered, but the lane makes no DeviceArray for it and leaves the
    call to Python, which says why."""
    lane, device = _lane(), _Device()

    channels_last = _entry(((0, 160),), order=(1, 0))
    assert channels_last[2] == (((4, 3), (1, 4)), ((4, 7), (1, 4)))
    dy = _Array(device, (4, 10), 0x10000)
    assert lane.remember_split(dy, [3, 7], 1, None, None, channels_last, device, _seen(dy, []), [0x90000, 0xA0000],
                               print) is True  # fmt: skip
    assert lane.split(dy, [3, 7], 1, None, None) is False and device.made == []


def test_an_interrupt_while_a_tensor_is_read_reaches_the_caller():
    """A KeyboardInterrupt raised by a tensor's attribute (here ``is_contiguous``) is the
    caller's: the lane reads nothing more of that call and answers with the interrupt,
    never False with the interrupt lost."""

    class Tensor:
        is_cuda, shape, dtype, requires_grad = True, (4, 10), "f32", False

        def is_contiguous(self):
            raise KeyboardInterrupt

        def stride(self):
            return (10, 1)

        def data_ptr(self):
            return 0x10000

        def get_device(self):
            return 0

    lane = _lane()
    lane.bind_torch(Tensor, {"f32": F32})
    for call in (
        lambda: lane.split(Tensor(), [3, 7], 1, None, None),
        lambda: lane.remember_split(Tensor(), [3, 7], 1, None, None, FRESH, _Device(), [], [], print),
    ):
        with pytest.raises(KeyboardInterrupt):
            call()


# --- CuPy arrays ---------------------------------------------------------------------------


class _CupyDtype:
    """A numpy dtype as the lane meets it: a hashable key of the dtype table."""


CUPY_F4, CUPY_VOID = _CupyDtype(), _CupyDtype()


class _Ndarray:
    """What the lane reads of a 2-D f32 CuPy array: ``dtype``, ``shape``, ``strides`` (in
    bytes), ``data.ptr`` and ``data.device_id``."""

    def __init__(self, shape, ptr, dtype=CUPY_F4, contiguous=True, device=0):
        self.dtype, self.shape = dtype, tuple(shape)
        self.strides = (4 * shape[1], 4) if contiguous else (8 * shape[1], 4)  # else every other row
        self.data = type("MemoryPointer", (), {"ptr": ptr, "device_id": device})()


class _Cupy:
    """CuPy's current stream as the ops name it, and the results it makes."""

    def __init__(self):
        self.stream, self.made = 1, []

    def current_stream(self):
        return self.stream

    def outputs(self, like, device, stream, results, dtype, order):
        """runtime.outputs.outputs_of as the lane calls it for CuPy arrays."""
        assert dtype is F32 and order is None
        self.made.append((stream, [shape for shape, _ in results]))
        arrays = [_Ndarray(shape, 0xB0000 + 0x1000 * i) for i, (shape, _) in enumerate(results)]
        return arrays, [a.data.ptr for a in arrays]


def _cupy_lane():
    cupy = _Cupy()
    lane = _lane(cupy.outputs)
    lane.bind_cupy(_Ndarray, {CUPY_F4: F32, CUPY_VOID: None}, cupy.current_stream)
    return lane, cupy


def test_contiguous_cupy_arrays_run_in_the_lane_while_cupys_stream_is_the_ops():
    """A split of CuPy arrays the Python path ran is the lane's next time, while CuPy's
    current stream (what their interface names) is the op's stream (its null stream and the
    default one are one); another stream, an array not contiguous or of a dtype we have not,
    or one on another device is left to Python, nothing launched."""
    lane, cupy = _cupy_lane()
    called = []
    dy = _Ndarray((4, 10), 0x10000)
    out = [_Ndarray((4, 3), 0x20000), _Ndarray((4, 7), 0x30000)]
    seen = [(0x10000, (4, 10)), (0x20000, (4, 3)), (0x30000, (4, 7))]
    device = _Device()
    assert lane.remember_split(dy, [3, 7], 1, out, None, ENTRY, device, seen, [],
                               lambda *a: called.append(a)) is True  # fmt: skip
    assert lane.split(dy, [3, 7], 1, out, None) is True
    assert called == [(0x10000, 0x20000, 0x30000)]
    cupy.stream = 0x5000  # CuPy's current stream another: Python orders the op after it
    assert lane.split(dy, [3, 7], 1, out, None) is False
    cupy.stream = 1
    transposed = _Ndarray((4, 10), 0x10000)
    transposed.strides = (4, 16)
    for other in (
        _Ndarray((4, 10), 0x10000, contiguous=False),
        transposed,
        _Ndarray((4, 10), 0x10000, dtype=CUPY_VOID),
        _Ndarray((4, 10), 0x10000, dtype=_CupyDtype()),
        _Ndarray((4, 10), 0x10000, device=1),
    ):
        assert lane.split(other, [3, 7], 1, out, None) is False
    assert len(called) == 1


def test_cupy_results_are_made_by_cupys_allocator_on_the_ops_stream():
    """Without ``out``, the lane has CuPy make the results (runtime.outputs.outputs_of) on
    the op's stream, row-major, and launches into them."""
    lane, cupy = _cupy_lane()
    called = []
    dy = _Ndarray((4, 10), 0x10000)
    assert lane.remember_split(dy, [3, 7], 1, None, None, FRESH, _Device(), [(0x10000, (4, 10))],
                               [0x90000, 0xA0000], lambda *a: called.append(a)) is True  # fmt: skip
    results = lane.split(dy, [3, 7], 1, None, None)
    assert [r.shape for r in results] == [(4, 3), (4, 7)]
    assert cupy.made == [(0, [(4, 3), (4, 7)])]
    assert called == [(0x10000, 0xB0000, 0xB1000)]
