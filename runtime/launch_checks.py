"""The checks of a launch's arguments, decided when a function is resolved.

Each parameter's tests are decided once from its declared type and kept as tuples of
what they compare: for a pointer, the ``launch_key`` a DeviceArray of the right dtype
and device has and the bounds of an int address (a tensor is compared with the torch
dtype on the parameter, once torch is bound); for an integer parameter, its bounds.
:class:`ArgumentChecks` checks a launch's arguments in one of two ways:

**At once** (:meth:`ArgumentChecks.fast_values`): a loop over the integers, then one over
the pointers, with no call in them: a DeviceArray costs one identity comparison of its
``launch_key``, an int its class and a comparison, a torch tensor six attribute reads.
Every bound is the parameter's own, so what passes also packs. Where the kernel declares
footprints, the answer already known for these scalars at this grid and block is looked
up, and each array is compared with it in the same loop. Anything else (a value of
another kind, one out of range, an answer not asked for yet, an array that does not
cover the launch) answers None, having raised nothing and changed nothing.

**In order** (:meth:`ArgumentChecks.in_order`), after a None: each argument in parameter
order, by its fast test or else by the full check of :mod:`runtime.arrays`, which accepts
the value (another array type, a numpy integer) or raises naming the argument. A launch
packs the values next with ``struct``, which refuses an int its C type cannot hold, so a
launch's tests leave that to the packing and test only a bound narrower than the C
type's (an ``i32`` the kernel reads as ``.u32`` must not be negative); the packing's
refusal then becomes the full check's error, once every other argument has passed.
``pack_args`` packs nothing, so its tests take every bound. A run of consecutive
integers is tested as one: where one of them fails, each has its full check, so that
the first of the run that is wrong is the one named.

**Footprints** (:class:`FootprintCheck`). A kernel may declare ``footprints(grid, block,
scalars)``: per pointer parameter, the bytes a launch reads or writes through it and the
alignment its address needs (:mod:`ptxgen.footprint`). Asking costs microseconds, so each
answer is kept: per grid and block a :class:`FootprintCache`, and in it per scalars the
answer, the latest also as ``last`` (a launch repeating its scalars compares one key and
looks nothing up). An answer is a flat tuple: per pointer the bytes touched and the mask
its address must clear (``align - 1``). What a launch was given is laid out alike: per
pointer its address and its extent, the bytes from the address to the end of its array
(:data:`UNKNOWN_EXTENT` for a trusted int address). The compiled launch path keeps its
own last answer and asks :meth:`FootprintCheck.need` for the others.
"""

from __future__ import annotations

import math
import struct
import threading
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any, NamedTuple

from ptxgen.footprint import Footprint, FootprintError

from .arrays import PointerParam, ScalarParam, scalar_value
from .memory import DeviceArray

__all__ = ["UNKNOWN_EXTENT", "ArgumentChecks", "FootprintCache", "FootprintCheck", "Miss", "packed_range"]

_MAX_ADDRESS = (1 << 64) - 1
UNKNOWN_EXTENT = 1 << 64  # the extent of a trusted int address: more than any launch needs
_NO_KEY = object()  # equal to no scalars' key: a new cache's ``last`` answers nothing


class Miss:
    """Matches nothing: the tensor class until torch is seen."""


def packed_range(p: ScalarParam) -> tuple[int, int]:
    """The values ``struct`` packs for the parameter's C type (it refuses the rest)."""
    fmt = p.type.struct_format
    bits = 8 * struct.calcsize(fmt)
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if fmt.islower() else (0, (1 << bits) - 1)


def _no_scalars(values: Sequence[Any]) -> tuple[()]:
    return ()


def scalars_key(params: Sequence[PointerParam | ScalarParam]) -> Callable[[Sequence[Any]], Any]:
    """The function that gives a launch's footprint key from its values: the one
    scalar's value for a kernel with one, else the tuple of them in order, ``()`` for
    none (the compiled path builds the same). ``itemgetter`` of one index gives the
    item, of several a tuple: the key's two forms."""
    indices = [p.index for p in params if isinstance(p, ScalarParam)]
    return itemgetter(*indices) if indices else _no_scalars


# --- arguments ------------------------------------------------------------------------


class _PointerTest(NamedTuple):
    index: int  # the argument's position
    given: int  # where its address and extent go in ``given``, and its need in an answer
    key: Any  # the launch_key of a DeviceArray this parameter takes as it is
    low: float  # an int address within [low, high] is taken as it is
    high: float
    param: PointerParam


class _ScalarTest(NamedTuple):
    index: int
    low: float  # an int within [low, high] passes
    high: float
    param: ScalarParam


class ArgumentChecks:
    """The argument checks of one function (see the module's docstring).

    ``check_ints``: an int address goes to the full check, which asks the driver where
    its allocation ends (see :func:`runtime.check_int_pointers`); otherwise it is
    trusted, with :data:`UNKNOWN_EXTENT`. ``tensor_class`` is ``torch.Tensor`` once the
    launcher has seen torch (its fast test reads ``nbytes``, torch 2.1+), else a class
    no value has. ``slow_pointer(param, value, stream)`` is the full check of a pointer
    argument, giving ``(address, extent)``.
    """

    def __init__(
        self,
        params: Sequence[PointerParam | ScalarParam],
        slow_pointer: Callable[[PointerParam, Any, int], tuple[int, int]],
        *,
        check_ints: bool,
    ) -> None:
        self.check_ints = check_ints
        self.tensor_class: type = Miss
        self._slow_pointer = slow_pointer
        self._key = scalars_key(params)
        pointers = [p for p in params if isinstance(p, PointerParam)]
        self._no_given = [0] * (2 * len(pointers))
        self._no_need = (0, 0) * len(pointers)  # the answer for a kernel without footprints
        self._launch_runs = _runs(params, for_launch=True)
        self._pack_runs = _runs(params, for_launch=False)
        # What the loops of fast_values unpack, as plain tuples (a NamedTuple is unpacked
        # more slowly): per pointer its position, where its bytes and its mask are in an
        # answer, its launch key and the parameter; per integer its position and bounds,
        # every bound, so that what passes also packs.
        runs = self._pack_runs
        self._pointers = tuple(
            (t.index, t.given, t.given + 1, t.key, t.param) for t in runs if isinstance(t, _PointerTest)
        )
        self._scalars = tuple(
            (t.index, t.low, t.high) for run in runs if not isinstance(run, _PointerTest) for t in run
        )

    def fast_values(self, args: Sequence[Any], footprints: FootprintCache | None) -> list[int] | None:
        """The value each parameter's slot will hold, where every argument passes its
        fast test and, with ``footprints`` (the cache of the launch's grid and block),
        covers what the launch touches by the answer known for its scalars; else None."""
        for index, low, high in self._scalars:
            a = args[index]
            if a.__class__ is not int or not low <= a <= high:
                return None
        if footprints is None:
            need = self._no_need
        else:
            key = self._key(args)
            last_key, need = footprints.last
            if key != last_key:
                need = footprints.get(key)
                if need is None:  # not asked yet: in_order asks the kernel
                    return None
        values = [*args]
        check_ints, tensor = self.check_ints, self.tensor_class
        for index, nbytes_at, mask_at, key, param in self._pointers:
            a = args[index]
            cls = a.__class__
            if cls is DeviceArray and a.launch_key is key:
                address = a.address
                extent = a.nbytes
            elif cls is int and 0 <= a <= _MAX_ADDRESS and not check_ints:
                address = a
                extent = UNKNOWN_EXTENT
            elif (
                cls is tensor
                and a.dtype is param.torch_dtype
                and a.is_cuda
                and a.get_device() == param.ordinal
                and a.is_contiguous()
                and (extent := a.nbytes)  # 0: no elements, which the full check refuses
            ):
                address = a.data_ptr()
                if address % param.itemsize:
                    return None
            else:
                return None
            if extent < need[nbytes_at] or address & need[mask_at]:
                return None
            values[index] = address
        return values

    def in_order(self, args: Sequence[Any], stream: int, *, for_launch: bool) -> tuple[list[int], list[int]]:
        """The values, and per pointer its address and extent (``given``), the arguments
        taken in parameter order; raises, naming the argument, where a full check refuses
        one. ``stream`` is the launch's handle, for an array whose producer runs on
        another. ``for_launch``: ``struct`` packs the values next, and tests the bounds
        of their C types."""
        values = [*args]
        given = [*self._no_given]
        for run in self._launch_runs if for_launch else self._pack_runs:
            if isinstance(run, _PointerTest):
                a = args[run.index]
                if a.__class__ is int and run.low <= a <= run.high and not self.check_ints:
                    address, extent = a, UNKNOWN_EXTENT
                else:  # the full check gives what the fast test would, for what it takes
                    address, extent = self._slow_pointer(run.param, a, stream)
                values[run.index] = given[run.given] = address
                given[run.given + 1] = extent
            elif not all(_passes(args[t.index], t) for t in run):
                for t in run:
                    values[t.index] = scalar_value(t.param, args[t.index])
        return values, given


def _runs(params: Sequence[PointerParam | ScalarParam], *, for_launch: bool) -> tuple[Any, ...]:
    """Per pointer its test, and per run of consecutive integers the tuple of theirs.
    ``for_launch``: without the bounds ``struct`` enforces when it packs."""
    runs: list[Any] = []
    scalars: list[_ScalarTest] = []  # the run being collected
    pointers = 0
    for p in params:
        if isinstance(p, ScalarParam):
            low: float = p.min
            high: float = p.max
            if for_launch:
                packed_low, packed_high = packed_range(p)
                low = low if low > packed_low else -math.inf
                high = high if high < packed_high else math.inf
            scalars.append(_ScalarTest(p.index, low, high, p))
            continue
        if scalars:
            runs.append(tuple(scalars))
            scalars = []
        low, high = (-math.inf, math.inf) if for_launch else (0, _MAX_ADDRESS)
        runs.append(_PointerTest(p.index, 2 * pointers, p.key, low, high, p))
        pointers += 1
    if scalars:
        runs.append(tuple(scalars))
    return tuple(runs)


def _passes(value: Any, test: _ScalarTest) -> bool:
    return value.__class__ is int and test.low <= value <= test.high


# --- footprints -----------------------------------------------------------------------


class FootprintCache(dict):
    """Per scalars' key, what a launch with one grid and block needs of each pointer;
    ``last`` is ``(key, answer)`` of the latest answer, one tuple read at once, so that
    a thread never sees one launch's key with another's answer."""

    __slots__ = ("geometry", "last")

    def __init__(self, geometry: tuple[int, ...]) -> None:
        super().__init__()
        self.geometry = geometry
        self.last: tuple[Any, tuple[int, ...] | None] = (_NO_KEY, None)


class FootprintCheck:
    """The footprint check of one function, whose kernel declares ``footprints``."""

    GEOMETRIES = 64  # grid and block pairs whose caches are kept
    SCALARS = 512  # scalar combinations kept per grid and block

    def __init__(
        self,
        name: str,
        params: Sequence[PointerParam | ScalarParam],
        footprints: Callable[..., Sequence[Footprint]],
    ) -> None:
        self.name = name
        self._footprints = footprints
        self._pointers = [p for p in params if isinstance(p, PointerParam)]
        self._scalar_names = [p.name for p in params if isinstance(p, ScalarParam)]
        self._key = scalars_key(params)
        self._caches: dict[tuple[int, ...], FootprintCache] = {}
        self._lock = threading.Lock()

    def at(self, geometry: tuple[int, ...]) -> FootprintCache:
        """The cache of one grid and block, ``(gx, gy, gz, bx, by, bz)``."""
        found = self._caches.get(geometry)
        if found is None:
            with self._lock:
                if len(self._caches) >= self.GEOMETRIES:
                    self._caches.clear()
                found = self._caches.setdefault(geometry, FootprintCache(geometry))
        return found

    def check(self, cache: FootprintCache, values: Sequence[int], given: Sequence[int]) -> None:
        """Raise, naming the argument, unless the arrays ``given`` (address and extent per
        pointer) cover what a launch with the grid and block of ``cache`` and the scalars
        in ``values`` touches. The values are packed, so each scalar is in range."""
        key = self._key(values)
        last_key, need = cache.last
        if key != last_key:  # other scalars than the last launch's at this geometry
            need = cache.get(key)
            if need is None:
                need = self.compute(cache, key)
        for n, p in enumerate(self._pointers):
            nbytes, mask = need[2 * n], need[2 * n + 1]
            address, extent = given[2 * n], given[2 * n + 1]
            if extent < nbytes:
                touches = "writes" if p.type.writes else "reads"
                raise ValueError(
                    f"{p.label}: this launch {touches} {nbytes // p.itemsize} elements ({nbytes} bytes) "
                    f"from it, but the array holds {extent // p.itemsize} ({extent} bytes); "
                    "nothing was launched"
                )
            if address & mask:
                raise ValueError(
                    f"{p.label}: this launch needs the address aligned to {mask + 1} bytes, "
                    f"got {address:#x}; nothing was launched"
                )

    def compute(self, cache: FootprintCache, key: Any) -> tuple[int, ...]:
        """Ask the kernel what a launch with the grid and block of ``cache`` and the
        scalars ``key`` touches, and keep the answer; raises, naming the scalars, for a
        launch the kernel cannot make safely."""
        values = key if key.__class__ is tuple else (key,)
        grid, block = cache.geometry[:3], cache.geometry[3:]
        scalars = dict(zip(self._scalar_names, values))
        try:
            declared = {f.arg: f for f in self._footprints(grid, block, scalars)}
        except FootprintError as err:
            raise ValueError(f"{self.name}: {err}; nothing was launched") from None
        need: list[int] = []
        for p in self._pointers:
            f = declared.get(p.name)
            need += [f.nbytes, f.align - 1] if f is not None and f.nbytes else [0, 0]
        answer = tuple(need)
        if len(cache) >= self.SCALARS:
            cache.clear()
        cache[key] = answer
        cache.last = (key, answer)
        return answer

    def need(
        self, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, scalars: tuple[int, ...]
    ) -> tuple[int, ...]:
        """The answer for a launch of that grid and block with the scalar values ``scalars``
        (in order): what the compiled path asks when its own last answer is for another
        launch. The key is made as ``scalars_key`` makes it: the one scalar, or the tuple."""
        key = scalars[0] if len(scalars) == 1 else scalars
        cache = self.at((gx, gy, gz, bx, by, bz))
        need = cache.get(key)
        return need if need is not None else self.compute(cache, key)
