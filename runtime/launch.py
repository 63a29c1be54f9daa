"""The launch path: the call into the driver, and the checks in front of it.

**The call.** ``cuLaunchKernel`` is reached through one of three bindings:
cuda-bindings (the default: its Cython call, given a ``CUfunction`` and a ``CUstream``
object, is the cheapest of the three, see ``docs/perf/launch.md``), cffi in ABI mode
(``dlopen`` of libcuda, no compiler) or ctypes. cffi and ctypes declare every handle
as ``uintptr_t``, so Python ints go straight through: a pointer and a ``uintptr_t``
are passed alike by every C calling convention CUDA runs on (x86-64 System V and
Windows, AArch64). ``PTXGEN_LAUNCH_BINDING=cuda.bindings|cffi|ctypes`` picks one;
without it the first of :data:`BINDINGS` that loads is used.

**The checks.** Everything that can be decided once is decided when a function is
resolved, and written into one Python function per launch entry (:attr:`Launcher.source`
shows it): the parameter count, each argument's fast test from its declared type
(a DeviceArray by one identity comparison of its ``launch_key``, an int by its class,
a torch tensor by six attribute reads), the device's limits and the kernel's block as
literals. A value that fails its fast test goes to the full check in
:mod:`runtime.arrays`, which accepts it or raises naming the argument. An int's range
is tested where it is narrower than its C type's and otherwise left to the packing:
a value ``struct`` refuses sends the ints through the full check, which names it.
Nothing is launched until every check has passed (an array that names its producer's
stream may have queued a wait for it by then: harmless). Where the kernel declares
footprints, what the launch touches is checked, after packing, against each array's
extent and address, cached per grid and block by the scalars; an int address has
:data:`UNKNOWN_EXTENT` unless :func:`check_int_pointers` asks the driver.

**The buffer.** Values are packed with one ``struct.pack_into`` into a buffer laid out
by :class:`runtime.layout.ArgumentLayout`; the driver copies it during the call, so a
buffer is reused right after. Buffers come from a pool (``list.pop``/``append`` are
atomic), so threads launching the same function never share one, without a lock.

**Compiled.** Where the optional C extension :mod:`runtime._fastlaunch` was built (``pip
install`` builds it when a C compiler is there), a function's ``launch`` and its prepared
launches are its objects: the same fast tests, in C, with the buffer packed on the stack
and cuLaunchKernel (cuLaunchKernelEx for a dependent kernel) called at the address found
in libcuda. Whatever they do not take at once (another array type, a failed test, a
footprint to compute that raises, a failed driver call) goes to the generated Python
function with the call's arguments, before anything was launched; every error message
is that function's. ``PTXGEN_COMPILED_LAUNCH=0`` (or :func:`use_compiled_launch`) keeps
the Python path.

**The context.** The launch does not ask the driver which context is current: a
``CUfunction`` belongs to its module's context. If the call fails (no context on a
fresh thread, say), the device's context is made current and the launch is tried once
more; a second failure raises :class:`runtime.CudaError`.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import struct
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ptxgen.footprint import Footprint, FootprintError

from . import _driver
from ._driver import _LIBCUDA, driver, raise_error
from ._env import env_flag
from .arrays import PointerParam, ScalarParam, int_pointer_extent, pointer_value, scalar_value
from .errors import ForkedProcessError
from .layout import ArgumentLayout, ParamBuffer
from .memory import DeviceArray
from .stream import Stream, known_stream_handles, stream_handle

if TYPE_CHECKING:
    from .device import Device

__all__ = [
    "BINDINGS",
    "Binding",
    "Launcher",
    "PreparedLaunch",
    "binding",
    "check_int_pointers",
    "compiled_launch_available",
    "use_compiled_launch",
]

BINDINGS = ("cuda.bindings", "cffi", "ctypes")  # the default order, cheapest call first (measured)
_ENV = "PTXGEN_LAUNCH_BINDING"


# --- bindings ---------------------------------------------------------------------------


class Binding(Protocol):
    """``cuLaunchKernel`` through one binding, and the handles it takes.

    ``launch_kernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra)`` takes
    ``f`` as :meth:`function` makes it, ``stream`` as ``streams[handle]`` holds it, the
    rest as ints; it returns the ``CUresult`` (0 on success), or a 1-tuple of it where
    ``returns_tuple`` is set. ``launch_kernel_ex(config, f, params, extra)``, where not
    None, is ``cuLaunchKernelEx`` with a config that :meth:`config` made; ``dependent``
    there adds programmatic stream serialization (programmatic dependent launch).
    ``entry_points()`` gives the addresses of the C functions it calls (see
    :func:`driver_entry_points`), for the compiled launch path.
    """

    name: str
    returns_tuple: bool
    launch_kernel: Callable[..., Any]
    launch_kernel_ex: Callable[..., Any] | None
    streams: dict[int, Any]

    def function(self, handle: int) -> Any: ...

    def config(
        self,
        gx: int,
        gy: int,
        gz: int,
        bx: int,
        by: int,
        bz: int,
        shared: int,
        stream: Any,
        dependent: bool = False,
    ) -> Any: ...

    def entry_points(self) -> tuple[int, int]: ...


def _symbol() -> str:
    """The entry point cuda-bindings itself would call: the per-thread default stream
    variant when CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM is set, as it reads it."""
    return (
        "cuLaunchKernel_ptsz"
        if os.environ.get("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM")
        else "cuLaunchKernel"
    )


_entry_points: list[tuple[int, int]] = []


def driver_entry_points() -> tuple[int, int]:
    """The addresses of ``cuLaunchKernel`` and ``cuLaunchKernelEx`` in libcuda (their
    ``_ptsz`` variants under CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM, as
    :func:`_symbol` says); 0 for one the driver lacks (Ex before CUDA 12.0)."""
    if not _entry_points:
        import ctypes

        lib = ctypes.CDLL(_LIBCUDA)
        found = []
        for name in (_symbol(), _symbol().replace("cuLaunchKernel", "cuLaunchKernelEx")):
            try:
                found.append(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0)
            except AttributeError:
                found.append(0)
        _entry_points.append((found[0], found[1]))
    return _entry_points[0]


class _Streams(dict):
    """Each stream handle as the binding takes it, made once and then looked up."""

    def __init__(self, make: Callable[[int], Any], default: Any) -> None:
        super().__init__({0: default})
        self._make = make

    def __missing__(self, handle: int) -> Any:
        value = self[handle] = self._make(handle)
        return value


class _IntHandles:
    """cffi and ctypes take handles as the ints they are, and launch with cuLaunchKernel."""

    returns_tuple = False
    launch_kernel_ex = None

    def __init__(self) -> None:
        self.streams = _Streams(int, 0)

    def function(self, handle: int) -> int:
        return handle

    def config(self, *geometry: Any, dependent: bool = False) -> None:
        return None  # no cuLaunchKernelEx here: a dependent kernel launches without the attribute

    def entry_points(self) -> tuple[int, int]:
        return driver_entry_points()


class _Cffi(_IntHandles):
    name = "cffi"

    def __init__(self) -> None:
        import cffi

        super().__init__()
        symbol = _symbol()
        ffi = cffi.FFI()
        ffi.cdef(
            f"int {symbol}(uintptr_t f, unsigned int gx, unsigned int gy, unsigned int gz,"
            " unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,"
            " uintptr_t stream, uintptr_t params, uintptr_t extra);"
        )
        lib = ffi.dlopen(_LIBCUDA)
        self._keep = (ffi, lib)
        self.launch_kernel = getattr(lib, symbol)


class _Ctypes(_IntHandles):
    name = "ctypes"

    def __init__(self) -> None:
        import ctypes

        super().__init__()
        lib = ctypes.CDLL(_LIBCUDA)
        handle, uint = ctypes.c_size_t, ctypes.c_uint
        self.launch_kernel = getattr(lib, _symbol())
        self.launch_kernel.argtypes = [handle, *[uint] * 7, handle, handle, handle]
        self.launch_kernel.restype = ctypes.c_int
        self._keep = lib


class _CudaBindings:
    """cuda-bindings converts a ``CUfunction``/``CUstream`` object it made faster than an
    int, and ``None`` (the default stream) fastest: both are made once per handle."""

    name = "cuda.bindings"
    returns_tuple = True

    def __init__(self) -> None:
        drv = driver()
        self.launch_kernel = drv.cuLaunchKernel
        self.launch_kernel_ex = getattr(drv, "cuLaunchKernelEx", None)  # CUDA 12.0+
        self._function = drv.CUfunction
        self._config = drv.CUlaunchConfig
        self.streams = _Streams(drv.CUstream, None)
        if self.launch_kernel_ex is not None:  # made once: every dependent config holds it
            attribute = drv.CUlaunchAttribute()
            attribute.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attribute.value.programmaticStreamSerializationAllowed = 1
            self._dependent_attrs = [attribute]

    def function(self, handle: int) -> Any:
        return self._function(handle)

    def entry_points(self) -> tuple[int, int]:
        return driver_entry_points()

    def config(
        self,
        gx: int,
        gy: int,
        gz: int,
        bx: int,
        by: int,
        bz: int,
        shared: int,
        stream: Any,
        dependent: bool = False,
    ) -> Any:
        """A ``CUlaunchConfig``: what cuLaunchKernel's arguments say and, for a kernel that
        waits for its predecessor (``dependent``), programmatic stream serialization."""
        c = self._config()
        c.gridDimX, c.gridDimY, c.gridDimZ = gx, gy, gz
        c.blockDimX, c.blockDimY, c.blockDimZ = bx, by, bz
        c.sharedMemBytes = shared
        c.hStream = stream
        if dependent:
            c.attrs = self._dependent_attrs
            c.numAttrs = 1
        return c


_MAKERS: dict[str, Callable[[], Binding]] = {"cffi": _Cffi, "ctypes": _Ctypes, "cuda.bindings": _CudaBindings}
_loaded: dict[str, Binding] = {}
_default: list[Binding] = []


def binding(name: str | None = None) -> Binding:
    """The binding called ``name``, or the default one (``PTXGEN_LAUNCH_BINDING``, else
    the first of :data:`BINDINGS` that loads). Raises ``ImportError`` or ``OSError`` if
    the named one cannot load, ``ValueError`` for an unknown name."""
    if name is None:
        if not _default:
            _default.append(_choose_default())
        return _default[0]
    if name not in _MAKERS:
        raise ValueError(f"unknown launch binding {name!r}; accepted: {', '.join(BINDINGS)}")
    if name not in _loaded:
        _loaded[name] = _MAKERS[name]()
    return _loaded[name]


def _choose_default() -> Binding:
    wanted = os.environ.get(_ENV)
    if wanted:
        return binding(wanted)
    failures = []
    for name in BINDINGS:
        try:
            return binding(name)
        except (ImportError, OSError, AttributeError) as err:  # cffi missing, a symbol missing
            failures.append(f"{name}: {err}")
    raise ImportError("no launch binding could be loaded: " + "; ".join(failures))


# --- int pointers ---------------------------------------------------------------------

_int_checks = [env_flag("PTXGEN_CHECK_INT_POINTERS", False)]
_launchers: weakref.WeakSet[Launcher] = weakref.WeakSet()
_launchers_lock = threading.Lock()


def check_int_pointers(on: bool) -> bool:
    """Whether checked launches ask the driver about int addresses; returns the old setting.

    Off by default (``PTXGEN_CHECK_INT_POINTERS=1`` turns it on at import): an int is an
    address the caller vouches for, checked only for its range and alignment. On, each
    int pointer argument costs one ``cuPointerGetAttributes`` call (measured in
    ``docs/perf/launch.md``) and is refused unless it lies in a CUDA allocation on the
    launch's device with room for what the launch touches (the kernel's footprints).
    ``prepared.raw`` is never checked. Applies to every function, loaded or not.

    The allocation is the driver's: memory from a caching allocator (torch's, CuPy's
    pool) is one large block, so an address inside it passes even where no tensor
    lives, or after the tensor there was freed back to the pool.
    """
    if not isinstance(on, bool):
        raise TypeError(f"check_int_pointers takes True or False, not {on!r}")
    with _launchers_lock:
        old, _int_checks[0] = _int_checks[0], on
        for launcher in list(_launchers):
            launcher.set_int_checks(on)
    return old


# --- the compiled path ----------------------------------------------------------------

try:  # built by `pip install` where a C compiler is found
    _fastlaunch: Any = importlib.import_module(f"{__package__}._fastlaunch")
    _fastlaunch_missing = ""
except ModuleNotFoundError:  # not built: the Python path launches alone
    _fastlaunch = None
    _fastlaunch_missing = "it was not compiled at install (no C compiler found?)"
except ImportError as err:  # built, but for another Python or platform
    _fastlaunch = None
    _fastlaunch_missing = f"it does not load: {err}"


def fastlaunch_source_sha256() -> str | None:
    """The sha256 of ``runtime/_fastlaunch.c`` beside this module, or None where the
    source is not shipped (an installed wheel carries only the build)."""
    source = Path(__file__).with_name("_fastlaunch.c")
    return hashlib.sha256(source.read_bytes()).hexdigest() if source.is_file() else None


def _stale_build(module: Any) -> str:
    """Why a built ``_fastlaunch`` does not match the source beside it, or "". A build
    left from an older source would run checks the Python path no longer makes."""
    source = fastlaunch_source_sha256()
    built = getattr(module, "SOURCE_SHA256", "unknown")
    if source is None or built == source:
        return ""
    return (
        f"the build is stale, made from another runtime/_fastlaunch.c (build {built[:12]}, source "
        f"{source[:12]}); rebuild it with pip install -e . or python setup.py build_ext --inplace"
    )


if _fastlaunch is not None:
    _fastlaunch_missing = _stale_build(_fastlaunch)
    if _fastlaunch_missing:
        _fastlaunch = None
_use_compiled = [env_flag("PTXGEN_COMPILED_LAUNCH", True)]

# CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION in cuda.h's CUlaunchAttributeID
PROGRAMMATIC_STREAM_SERIALIZATION = 6


def compiled_launch_available() -> str:
    """Why the compiled launch path cannot be used, or "" where it can (the extension
    was built and imports)."""
    return "" if _fastlaunch is not None else f"runtime._fastlaunch is not available: {_fastlaunch_missing}"


def use_compiled_launch(on: bool) -> bool:
    """Whether functions resolved from now on launch through the compiled path where it
    is built (on by default; ``PTXGEN_COMPILED_LAUNCH=0`` turns it off at import);
    returns the old setting. Functions already resolved keep theirs; the ops' calls
    read it each time (:func:`compiled_ops`)."""
    if not isinstance(on, bool):
        raise TypeError(f"use_compiled_launch takes True or False, not {on!r}")
    old, _use_compiled[0] = _use_compiled[0], on
    for ops in list(_compiled_ops):
        ops.enabled = on
    return old


def compiled_ops(table: dict[Any, Any]) -> Any:
    """A ``runtime._fastlaunch.QuickOps`` over the ops' quick-call table, or None where
    the extension is not built. See :mod:`runtime.ops`. Its ``enabled`` follows
    :func:`use_compiled_launch`: switched off, its calls answer False and the ops' Python
    path takes them."""
    if _fastlaunch is None:
        return None
    ops = _fastlaunch.QuickOps(
        table=table,
        device_array=DeviceArray,
        stream_class=Stream,
        stream_handle=stream_handle,
        known_streams=known_stream_handles(),
        enabled=False,
    )
    _compiled_ops.add(ops)  # first, so that a use_compiled_launch from now on reaches it
    ops.enabled = _use_compiled[0]
    return ops


_compiled_ops: weakref.WeakSet[Any] = weakref.WeakSet()


def compiled_steps(
    pieces: int, steps: Sequence[tuple[Any, tuple[Any, ...]]], python: Callable[..., None]
) -> Any:
    """The ops' steps as one ``runtime._fastlaunch.Steps``, ``launch(wide, *pieces)``,
    doing what the Python function ``python`` does; or None where a step's raw launch is
    not compiled (or the extension is not built, or the plan has more pieces than it
    takes). Each step is ``(prepared.raw, recipe)``: per kernel parameter an int, or
    ``(array, byte_offset)`` with array 0 the wide array and ``i + 1`` piece ``i``."""
    if _fastlaunch is None:
        return None
    try:  # Steps refuses what C cannot hold; the Python function raises at launch for that
        return _fastlaunch.Steps(pieces, tuple((raw, tuple(recipe)) for raw, recipe in steps), python)
    except (TypeError, ValueError):
        return None


# --- prepared launches ----------------------------------------------------------------


class PreparedLaunch(Protocol):
    """What :meth:`runtime.Function.prepare` returns: a function of the arguments alone.

    ``prepared(*args)`` checks every argument (as :meth:`Function.launch` does) and
    launches with the grid, block, stream and shared memory fixed at preparation.
    ``prepared.raw(*values)`` is the trusted path: ints only (addresses and scalars, in
    ``arg_names`` order), packed as they are with no check beyond what ``struct``
    refuses (a value that does not fit its C type); a wrong address there is a fault
    on the GPU, not an exception.
    """

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    stream: Any

    def __call__(self, *args: Any) -> None: ...

    def raw(self, *values: int) -> None: ...


# --- the generated launch functions ---------------------------------------------------
# Each helper returns source lines. Names in capitals are parameters of the generated
# ``build`` function (constants and helpers), so the launch functions read them as
# closure cells; numbers (limits, ranges, the block) are written in as literals.

_MAX_ADDRESS = (1 << 64) - 1
UNKNOWN_EXTENT = 1 << 64  # the extent of a trusted int address: more than any launch needs


class _FootprintCache(dict):
    """Per scalar values, what a launch with one grid and block needs of each pointer;
    ``last`` is the scalars of the latest answer followed by that answer (a launch
    repeating its scalars compares them and reads no dict)."""

    __slots__ = ("geometry", "last")

    def __init__(self, geometry: tuple[int, ...], scalars: int, pointers: int) -> None:
        super().__init__()
        self.geometry = geometry
        self.last: tuple[Any, ...] = (None,) * scalars + (0, 0) * pointers  # None equals no int


class _Miss:
    """Matches nothing: the tensor class until torch is seen, and the launch cache's
    first entry."""


def _pointer_check(p: PointerParam, indent: str, extents: bool, ranges: bool) -> list[str]:
    """The fast test of one pointer argument: ``v<i>`` its address and, where the kernel
    declares footprints (``extents``), ``e<i>`` the bytes from it to the end of the array
    (:data:`UNKNOWN_EXTENT` for a trusted int address). Without ``ranges`` an int's range
    is left to the packing that follows (``struct`` refuses what does not fit)."""
    i, mask = p.index, p.itemsize - 1
    slow = (
        f"v{i}, e{i} = SLOW_POINTER(P{i}, a{i}, s)" if extents else f"v{i} = SLOW_POINTER(P{i}, a{i}, s)[0]"
    )
    aligned = [f"{indent}    if v{i} & {mask}:", f"{indent}        {slow}"]
    nbytes = f"(e{i} := a{i}.nbytes)" if extents else f"a{i}.nbytes"  # 0: empty, the full check says so
    in_range = f" and 0 <= a{i} <= {_MAX_ADDRESS}" if ranges else ""
    # An int is trusted unless check_int_pointers() is on: then the full check asks the
    # driver where its allocation ends.
    trusted = [
        f"{indent}        v{i} = a{i}",
        *([f"{indent}        e{i} = {UNKNOWN_EXTENT}"] if extents else []),
    ]
    return [
        f"{indent}c = a{i}.__class__",
        f"{indent}if c is DeviceArray and a{i}.launch_key is K{i}:",
        f"{indent}    v{i} = a{i}.address",
        *([f"{indent}    e{i} = a{i}.nbytes"] if extents else []),
        f"{indent}elif c is int{in_range}:",
        f"{indent}    if CHECK_INTS:",
        f"{indent}        {slow}",
        f"{indent}    else:",
        *trusted,
        f"{indent}elif (c is TENSOR and a{i}.dtype is TD{i} and a{i}.is_cuda",
        f"{indent}        and a{i}.get_device() == {p.ordinal} and a{i}.is_contiguous() and {nbytes}):",
        f"{indent}    v{i} = a{i}.data_ptr()",
        *(aligned if mask else []),
        f"{indent}else:",
        f"{indent}    {slow}",
    ]


def _footprint_check(params: Sequence[PointerParam | ScalarParam], indent: str) -> list[str]:
    """After every argument passed its own test and was packed: what this launch touches
    through each pointer (from the kernel's ``footprints``) against each array's extent
    and address. ``fpc`` is the footprint cache of the launch's grid and block; its
    ``last`` holds the scalars it last answered for and, per pointer, the bytes needed
    and an alignment mask: one tuple, read at once, so threads never see half of one."""
    pointers = [p for p in params if isinstance(p, PointerParam)]
    scalars = [f"a{p.index}" for p in params if isinstance(p, ScalarParam)]
    key = scalars[0] if len(scalars) == 1 else f"({', '.join(scalars)},)"
    needs = "".join(f"n{p.index}, m{p.index}, " for p in pointers)
    last = "".join(f"k{a[1:]}, " for a in scalars)
    same = " and ".join(f"{a} == k{a[1:]}" for a in scalars)
    fails = " or ".join(f"e{p.index} < n{p.index} or v{p.index} & m{p.index}" for p in pointers)
    given = ", ".join(f"v{p.index}, e{p.index}" for p in pointers)

    def computed(target: str, at: str) -> list[str]:
        # the footprint may refuse the scalars: the buffer goes back to the pool first
        return [
            f"{at}try:",
            f"{at}    {target}FOOTPRINT(fpc, {key})",
            f"{at}except BaseException:",
            f"{at}    POOL.append(buf)",
            f"{at}    raise",
        ]

    if scalars:
        lookup = [
            f"{indent}{last}{needs}= fpc.last",
            f"{indent}if not ({same}):  # other scalars than the last launch's at this geometry",
            f"{indent}    need = fpc.get({key})",
            f"{indent}    if need is None:",
            *computed("need = ", f"{indent}        "),
            f"{indent}    {needs}= need",
        ]
    else:  # one answer per geometry: ``last`` is set before the cache holds it
        key = "()"
        lookup = [f"{indent}if not fpc:", *computed("", f"{indent}    "), f"{indent}{needs}= fpc.last"]
    return [
        *lookup,
        f"{indent}if {fails}:",
        f"{indent}    POOL.append(buf)",
        f"{indent}    FOOTPRINT_FAIL(({needs}), ({given},))",
    ]


def _packed_range(p: ScalarParam) -> tuple[int, int]:
    """The values ``struct`` packs for the parameter's C type (it refuses the rest)."""
    fmt = p.type.struct_format
    bits = 8 * struct.calcsize(fmt)
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if fmt.islower() else (0, (1 << bits) - 1)


def _scalar_checks(group: list[ScalarParam], indent: str, ranges: bool) -> list[str]:
    """Consecutive integer parameters tested together; the full check names the culprit.
    Without ``ranges``, a bound is tested only where it is narrower than what ``struct``
    packs (a seed ``i32`` read as ``.u32`` must not be negative); the packing refuses the rest."""
    tests = [f"a{p.index}.__class__ is int" for p in group]
    for p in group:
        low, high = _packed_range(p) if not ranges else (None, None)
        if p.min != low:
            tests.append(f"a{p.index} >= {p.min}")
        if p.max != high:
            tests.append(f"a{p.index} <= {p.max}")
    joined = f"\n{indent}        and ".join(" and ".join(tests[i : i + 3]) for i in range(0, len(tests), 3))
    return [
        f"{indent}if not ({joined}):",
        *[f"{indent}    a{p.index} = SCALAR(S{p.index}, a{p.index})" for p in group],
    ]


def _checks(
    params: Sequence[PointerParam | ScalarParam], indent: str, footprints: bool, ranges: bool
) -> list[str]:
    """One fast test per argument, in parameter order, from its declared type. The
    footprint check comes later (:func:`_footprint_check`), once the values are packed."""
    lines: list[str] = []
    group: list[ScalarParam] = []
    for p in params:
        if isinstance(p, ScalarParam):
            group.append(p)
            continue
        if group:
            lines += _scalar_checks(group, indent, ranges)
            group = []
        lines += _pointer_check(p, indent, footprints, ranges)
    if group:
        lines += _scalar_checks(group, indent, ranges)
    return lines


def _values(params: Sequence[PointerParam | ScalarParam], raw: bool) -> str:
    """The names holding each packed value: ``v<i>`` for checked pointers, ``a<i>`` otherwise."""
    checked = (not raw and isinstance(p, PointerParam) for p in params)
    return ", ".join(f"{'v' if v else 'a'}{p.index}" for v, p in zip(checked, params))


def _call(
    values: str,
    returns_tuple: bool,
    config: str | None,
    indent: str,
    checked: tuple[str, list[str]] | None = None,
) -> list[str]:
    """Pack into a pooled buffer and call the driver: ``cuLaunchKernelEx`` with the
    launch's prebuilt config where there is one (``config``, a name or an expression
    that may be None), else ``cuLaunchKernel``; on failure, the retry (see above).

    ``checked``, for a checked launch: the arguments as passed and the footprint check.
    ``struct`` refuses an int out of its C type's range; the full checks then name the
    argument. The footprint check follows the packing, so its scalars are in range.
    """
    packed = f", {values}" if values else ""
    r = "[0]" if returns_tuple else ""
    plain = f"LAUNCH(FN, gx, gy, gz, bx, by, bz, shared_mem, ns, buf.params, 0){r}"
    relaunch = f"{indent}    RELAUNCH(gx, gy, gz, bx, by, bz, shared_mem, ns, buf)"
    lines = [
        f"{indent}try:",
        f"{indent}    buf = POOL.pop()",
        f"{indent}except IndexError:",
        f"{indent}    buf = NEW_BUFFER()",
    ]
    if checked is None:
        lines.append(f"{indent}PACK(buf.memory, 0{packed})")
    else:
        given, footprint = checked
        lines += [
            f"{indent}try:",
            f"{indent}    PACK(buf.memory, 0{packed})",
            f"{indent}except PACK_ERROR:  # an int out of its type's range",
            f"{indent}    POOL.append(buf)",
            f"{indent}    OUT_OF_RANGE(({given}))",
            f"{indent}    raise",
            *footprint,
        ]
    if config is None:
        lines += [f"{indent}if {plain}:", relaunch]
    elif config == "CFG":  # prepared: always there
        lines += [f"{indent}if LAUNCH_EX(CFG, FN, buf.params, 0){r}:", relaunch]
    else:  # the checked launch: a config once the same launch repeats
        lines += [
            f"{indent}if {config} is None:",
            f"{indent}    if {plain}:",
            f"{indent}    {relaunch}",
            f"{indent}elif LAUNCH_EX({config}, FN, buf.params, 0){r}:",
            f"{indent}    gx, gy, gz, bx, by, bz, ns = rest",
            relaunch,
        ]
    return [*lines, f"{indent}POOL.append(buf)"]


def _unpack(n: int, indent: str) -> list[str]:
    if n == 0:
        return [f"{indent}if args.__class__ is not tuple or args:", f"{indent}    ORDERED(args)"]
    names = "".join(f"a{i}, " for i in range(n))
    return [
        f"{indent}try:",
        f"{indent}    if args.__class__ is not tuple:",
        f"{indent}        raise ValueError",
        f"{indent}    {names}= args",
        f"{indent}except ValueError:  # not a tuple of {n}: a list, a dict, or the error saying why",
        f"{indent}    {names}= ORDERED(args)",
    ]


def _block_fits(block: tuple[int, int, int], max_block: Sequence[int], max_threads: int) -> bool:
    """Whether the device runs a block of this shape: each side within its limit, and no
    more threads than the function allows."""
    return all(0 < b <= m for b, m in zip(block, max_block)) and block[0] * block[1] * block[2] <= max_threads


def _geometry(
    block: tuple[int, int, int] | None,
    device: Device,
    max_threads: int,
    ex: bool,
    footprints: bool,
    dependent: bool = False,
) -> list[str]:
    """Grid, block, shared memory and stream.

    The objects of the last launch are known good: a tuple of ints cannot change, and a
    stream object names one stream for its life (a runtime.Stream is asked whether it
    is still open); the cache holds them until another launch replaces them. The
    second launch in a row with the same objects builds the ``CUlaunchConfig`` that
    later ones reuse (a ``dependent`` kernel's first: only the config carries its
    launch attribute). Other values get the common case as literals (three ints in
    range, the kernel's block) and anything else the full check. Where the kernel
    declares footprints, ``fpc`` is the footprint cache of the grid and block.
    """
    mg, mb, shm = device.max_grid, device.max_block, device.max_shared_memory_per_block
    tests = [
        "gx.__class__ is int and gy.__class__ is int and gz.__class__ is int",
        "bx.__class__ is int and by.__class__ is int and bz.__class__ is int",
        "shared_mem.__class__ is int",
        f"0 < gx <= {mg[0]} and 0 < gy <= {mg[1]} and 0 < gz <= {mg[2]} and 0 <= shared_mem <= {shm}",
    ]
    if block is not None:
        # A block the device cannot run never passes the fast test; the full check says why.
        fits = _block_fits(block, mb, max_threads)
        tests.append(f"bx == {block[0]} and by == {block[1]} and bz == {block[2]}" if fits else "False")
    else:
        tests.append(f"0 < bx <= {mb[0]} and 0 < by <= {mb[1]} and 0 < bz <= {mb[2]}")
        tests.append(f"bx * by * bz <= {max_threads}")
    joined = "\n                    and ".join(tests)
    if ex:  # the Ex launch needs only the config; the values are unpacked to build one
        hit = [
            "            if cfg is None:",
            "                gx, gy, gz, bx, by, bz, ns = rest",
            "                cfg = CONFIG(gx, gy, gz, bx, by, bz, shared_mem, ns)",
            "                LAST = (grid, block, shared_mem, stream, cfg, s, rest, fpc)",
        ]
    else:
        hit = ["            gx, gy, gz, bx, by, bz, ns = rest"]
    return [
        "        last_grid, last_block, last_shared, last_stream, cfg, s, rest, fpc = LAST",
        "        if (grid is last_grid and block is last_block and shared_mem is last_shared",
        "                and stream is last_stream):",
        "            if stream.__class__ is Stream:",
        "                stream.handle  # raises once the Stream is closed",
        *hit,
        "        else:",
        "            try:",
        "                gx, gy, gz = grid",
        "                bx, by, bz = block",
        "            except (TypeError, ValueError):",
        "                gx = None  # not three of each: the full check below",
        f"            if not ({joined}):",
        "                (gx, gy, gz), (bx, by, bz), shared_mem = GEOMETRY(grid, block, shared_mem)",
        "            if stream is None:",
        "                s = 0",
        "            elif stream.__class__ is Stream:",
        "                s = stream.handle",
        "            else:",
        "                s = STREAM_HANDLE(stream)",
        "            ns = STREAMS[s]",
        f"            cfg = {'CONFIG(gx, gy, gz, bx, by, bz, shared_mem, ns)' if dependent else 'None'}",
        "            rest = (gx, gy, gz, bx, by, bz, ns)",
        "            fpc = FOOTPRINTS_AT((gx, gy, gz, bx, by, bz))"
        if footprints
        else "            fpc = None",
        "            if grid.__class__ is tuple and block.__class__ is tuple:",
        "                LAST = (grid, block, shared_mem, stream, cfg, s, rest, fpc)",
    ]


_HELPERS = (
    "OPEN, FN, POOL, NEW_BUFFER, PACK, LAUNCH, LAUNCH_EX, CONFIG, RELAUNCH, CLOSED, ORDERED, GEOMETRY,"
    " STREAM_HANDLE, STREAMS, Stream, DeviceArray, TENSOR, SLOW_POINTER, SCALAR, LAST,"
    " FOOTPRINTS_AT, FOOTPRINT, FOOTPRINT_FAIL, CHECK_INTS, PACK_ERROR, OUT_OF_RANGE"
)


def _source(
    params: Sequence[PointerParam | ScalarParam],
    block: tuple[int, int, int] | None,
    device: Device,
    max_threads: int,
    returns_tuple: bool,
    ex: bool,
    footprints: bool = False,
    dependent: bool = False,
) -> str:
    """The Python source of ``build(...)``, which returns the launch functions.

    ``ex``: launch through ``cuLaunchKernelEx`` with a prebuilt config where one is
    known (cuda-bindings converts one config object faster than seven ints and a stream).
    ``dependent`` (with ``ex``): every launch goes with a config, which carries the
    kernel's programmatic-dependent-launch attribute.
    """
    n = len(params)
    pointers = [p for p in params if isinstance(p, PointerParam)]
    constants = [
        name
        for p in params
        for name in ((f"P{p.index}", f"K{p.index}", f"TD{p.index}") if p in pointers else (f"S{p.index}",))
    ]
    names = "".join(f"a{i}, " for i in range(n))
    checked, raw = _values(params, raw=False), _values(params, raw=True)
    footprint = _footprint_check(params, "        ") if footprints and pointers else []
    # the checked launches' arguments as passed, and their footprint check (see _call)
    at_launch, at_prepared = (names, footprint), (names, [f"    {line}" for line in footprint])
    torch_cells = ", ".join(["TENSOR", *(f"TD{p.index}" for p in pointers)])
    lines = [
        f"def build({', '.join([_HELPERS, *constants])}):",
        "    def launch(grid, block, args, *, stream=None, shared_mem=0):",
        "        nonlocal LAST",
        "        if not OPEN:",
        "            CLOSED()",
        *_unpack(n, "        "),
        *_geometry(block, device, max_threads, ex, footprints, dependent and ex),
        *_checks(params, "        ", footprints, ranges=False),
        *_call(checked, returns_tuple, "cfg" if ex else None, "        ", at_launch),
        "",
        "    def pack(args, stream=0):",
        "        s = stream",
        *_unpack(n, "        "),
        *_checks(params, "        ", footprints=False, ranges=True),
        f"        return [{checked}]",
        "",
        "    def prepare(gx, gy, gz, bx, by, bz, shared_mem, s, ns, stream):",
        *(["        CFG = CONFIG(gx, gy, gz, bx, by, bz, shared_mem, ns)"] if ex else []),
        *(["        fpc = FOOTPRINTS_AT((gx, gy, gz, bx, by, bz))"] if footprints else []),
        "",
        f"        def prepared({names}):",
        "            if not OPEN:",
        "                CLOSED()",
        "            if stream is not None:",
        "                stream.handle  # raises once the Stream is closed",
        *_checks(params, "            ", footprints, ranges=False),
        *_call(checked, returns_tuple, "CFG" if ex else None, "            ", at_prepared),
        "",
        f"        def raw({names}):",
        "            if not OPEN:",
        "                CLOSED()",
        *_call(raw, returns_tuple, "CFG" if ex else None, "            "),
        "",
        "        return prepared, raw",
        "",
        "    def close():",
        "        nonlocal OPEN",
        "        OPEN = False",
        "",
        f"    def bind_torch({torch_cells.lower()}):",
        f"        nonlocal {torch_cells}",
        f"        {torch_cells} = {torch_cells.lower()}",
        "",
        "    def check_ints(on):",
        "        nonlocal CHECK_INTS",
        "        CHECK_INTS = on",
        "",
        "    return launch, pack, prepare, close, bind_torch, check_ints",
    ]
    return "\n".join(lines) + "\n"


class Launcher:
    """The checks and the driver call for one function, generated when it is resolved.

    ``launch(grid, block, args, *, stream=None, shared_mem=0)`` and ``pack(args, stream=0)``
    are the functions :class:`runtime.Function` exposes as ``launch`` and ``pack_args``;
    :meth:`prepare` makes a :class:`PreparedLaunch`. :meth:`close` makes every later
    call raise (the module was unloaded: the function handle is gone).

    ``dependent_launch``: the kernel waits for its predecessor (``griddepcontrol.wait``)
    before touching memory, so every launch carries programmatic stream serialization,
    through ``cuLaunchKernelEx``. A binding without it (cffi, ctypes) launches such a
    kernel plainly: the same results, without the overlap.

    ``compiled``: ``launch`` and prepared launches go through :mod:`runtime._fastlaunch`
    (see above), with the generated functions behind them (``python_launch``). None:
    where it is built, :func:`use_compiled_launch` is on and the binding gives its entry
    points; True insists (ImportError where it is not built); False: never.
    """

    def __init__(
        self,
        *,
        name: str,
        handle: int,
        layout: ArgumentLayout,
        device: Device,
        block: tuple[int, int, int] | None,
        max_threads_per_block: int,
        check_geometry: Callable[[Any, Any, Any], tuple[tuple[int, int, int], tuple[int, int, int], int]],
        ordered: Callable[[Any], Sequence[Any]],
        binding: Binding,
        footprints: Callable[..., Sequence[Footprint]] | None = None,
        dependent_launch: bool = False,
        compiled: bool | None = None,
    ) -> None:
        self.name = name
        self.handle = handle
        self.layout = layout
        self.binding = binding
        self._device = device
        self._launch_kernel = binding.launch_kernel
        self.params: tuple[PointerParam | ScalarParam, ...] = tuple(
            PointerParam(i, slot.name, slot.type, device)
            if slot.type.is_pointer
            else ScalarParam(i, slot.name, slot.type)
            for i, slot in enumerate(layout.slots)
        )
        ex = binding.launch_kernel_ex is not None
        self.dependent_launch = dependent_launch and ex
        self._footprints = footprints
        self._footprint_caches: dict[tuple[int, ...], _FootprintCache] = {}
        self._scalar_count = sum(isinstance(p, ScalarParam) for p in self.params)
        self._pointer_count = len(self.params) - self._scalar_count
        self._footprint_lock = threading.Lock()
        self.source = _source(
            self.params,
            block,
            device,
            max_threads_per_block,
            binding.returns_tuple,
            ex,
            footprints is not None,
            self.dependent_launch,
        )
        config = binding.config
        if self.dependent_launch:

            def config(*geometry: Any) -> Any:
                return binding.config(*geometry, dependent=True)

        constants: list[Any] = []
        for p in self.params:
            # A tensor class and dtypes no value can have, until torch is seen.
            constants += [p, p.key, None] if isinstance(p, PointerParam) else [p]
        namespace: dict[str, Any] = {}
        exec(compile(self.source, f"<launch {name}>", "exec"), namespace)
        self._pool: list[ParamBuffer] = []
        self._torch_bound = False
        self._is_closed = False
        self._function = binding.function(handle)
        miss = (_Miss, _Miss, _Miss, _Miss, None, 0, None, None)  # matches no launch
        self._fast: Any = None
        with _launchers_lock:  # no check_int_pointers() call between reading it and registering
            self._int_checks_on = _int_checks[0]
            functions = namespace["build"](
                True, self._function, self._pool, layout.new_buffer, layout.struct.pack_into,
                self._launch_kernel, binding.launch_kernel_ex, config, self._relaunch, self._closed,
                ordered, check_geometry, stream_handle, binding.streams, Stream, DeviceArray, _Miss,
                self._slow_pointer, scalar_value, miss, self._footprints_at, self._footprint,
                self._footprint_fail, self._int_checks_on, struct.error, self._out_of_range, *constants,
            )  # fmt: skip
            self.launch, self.pack, self._prepare, self._close, self._bind_torch, self._check_ints = functions
            self.python_launch = self.launch
            if compiled or (compiled is None and _use_compiled[0] and _fastlaunch is not None):
                self._fast = self._compiled(binding, block, max_threads_per_block, compiled)
            _launchers.add(self)
        if self._fast is not None:
            self.launch = self._fast
        if "torch" in sys.modules:
            self._use_torch()

    def _compiled(
        self,
        binding: Binding,
        block: tuple[int, int, int] | None,
        max_threads: int,
        insist: bool | None,
    ) -> Any:
        """The compiled launch (a ``runtime._fastlaunch.Launch``), or None where this
        function or binding cannot have one: a binding without entry points, a driver
        whose entry points cannot be found, more parameters or a larger buffer than the C
        path holds on its stack. A dependent kernel goes through cuLaunchKernelEx exactly
        where the Python path would (``dependent_launch``: the binding has the Ex call)."""
        why = compiled_launch_available()
        entry_points = getattr(binding, "entry_points", None)
        if not why and entry_points is None:
            why = f"the {binding.name} binding gives no entry points"
        if not why:
            try:
                launch_kernel, launch_kernel_ex = entry_points()
            except (OSError, AttributeError) as err:  # libcuda without the symbols asked for
                why = f"the driver's entry points: {err}"
        if not why:
            if not launch_kernel or (self.dependent_launch and not launch_kernel_ex):
                why = "the driver has no cuLaunchKernel, or no cuLaunchKernelEx for this dependent kernel"
            elif len(self.params) > _fastlaunch.MAX_PARAMS or self.layout.size > _fastlaunch.MAX_BUFFER:
                why = f"{len(self.params)} parameters in {self.layout.size} bytes is more than it holds"
        if why:
            if insist:
                raise ImportError(f"{self.name}: no compiled launch: {why}")
            return None
        specs: list[tuple[Any, ...]] = []
        for p, slot in zip(self.params, self.layout.slots):
            if isinstance(p, PointerParam):
                specs.append(("pointer", slot.offset, p.itemsize - 1, p.ordinal, p.key))
            else:
                specs.append(("scalar", slot.offset, slot.size, p.min, p.max, *_packed_range(p)))
        device = self._device
        if block is not None and not _block_fits(block, device.max_block, max_threads):
            block = (0, 0, 0)  # one the device cannot run: no launch passes, the Python path says why
        return _fastlaunch.Launch(
            fallback=self.python_launch,
            params=specs,
            function=self.handle,
            launch_kernel=launch_kernel,
            launch_kernel_ex=launch_kernel_ex,
            device_array=DeviceArray,
            stream_class=Stream,
            stream_handle=stream_handle,
            known_streams=known_stream_handles(),
            max_grid=device.max_grid,
            max_block=device.max_block,
            max_threads=max_threads,
            max_shared=device.max_shared_memory_per_block,
            block=block,
            footprint=self._footprint_need if self._footprints is not None else None,
            dependent=self.dependent_launch,
            attribute_id=PROGRAMMATIC_STREAM_SERIALIZATION,
            check_ints=self._int_checks_on,
        )

    @property
    def compiled(self) -> bool:
        """Whether ``launch`` and prepared launches go through the compiled path."""
        return self._fast is not None

    def prepare(
        self,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_mem: int,
        stream: Any,
    ) -> PreparedLaunch:
        """A launch with checked geometry and a resolved stream; see :class:`PreparedLaunch`."""
        live = stream if stream.__class__ is Stream else None
        handle = live.handle if live is not None else stream_handle(stream)
        prepared, raw = self._prepare(*grid, *block, shared_mem, handle, self.binding.streams[handle], live)
        if self._fast is not None:
            fixed = dict(launch=self._fast, grid=grid, block=block, shared_mem=shared_mem)
            fixed["stream_handle"] = handle
            raw = _fastlaunch.Prepared(fallback=raw, stream=None, raw=True, **fixed)  # trusted: not asked
            prepared = _fastlaunch.Prepared(fallback=prepared, stream=live, raw=False, **fixed)
        prepared.raw = raw
        prepared.grid, prepared.block, prepared.shared_mem, prepared.stream = grid, block, shared_mem, stream
        prepared.__name__ = prepared.__qualname__ = f"prepared_{self.name}"
        prepared.__doc__ = PreparedLaunch.__doc__
        return prepared

    def set_int_checks(self, on: bool) -> None:
        """See :func:`check_int_pointers`, which sets this for every launcher (and so
        overrides what was set here)."""
        if not isinstance(on, bool):
            raise TypeError(f"set_int_checks takes True or False, not {on!r}")
        self._int_checks_on = on
        self._check_ints(on)
        if self._fast is not None:
            self._fast.set_check_ints(on)

    @property
    def closed(self) -> bool:
        return self._is_closed

    def close(self) -> None:
        self._is_closed = True
        self._close()
        if self._fast is not None:
            self._fast.close()

    def _closed(self) -> None:
        if _driver.forked:
            raise ForkedProcessError(_driver.FORKED_MESSAGE, "fork")
        raise ValueError(f"{self.name}: its module is closed")

    def _slow_pointer(self, param: PointerParam, value: Any, stream: int) -> tuple[int, int]:
        """The full check of a pointer argument (see :mod:`runtime.arrays`): address and
        extent (:data:`UNKNOWN_EXTENT` for an int address, unless the driver is asked)."""
        if not self._torch_bound and "torch" in sys.modules:
            self._use_torch()  # torch was imported after this function was resolved
        address, extent = pointer_value(param, value, stream)
        if extent is None:  # an int, or an integer type such as numpy.uint64
            extent = int_pointer_extent(param, address) if self._int_checks_on else UNKNOWN_EXTENT
        return address, extent

    def _out_of_range(self, given: tuple[Any, ...]) -> None:
        """``struct`` refused a value: the full check of each int says which, and why
        (raised from here, not from the ``struct.error`` it replaces)."""
        try:
            for p, value in zip(self.params, given):
                if value.__class__ is int:
                    if isinstance(p, PointerParam):
                        pointer_value(p, value)
                    else:
                        scalar_value(p, value)
        except (TypeError, ValueError) as err:
            raise err from None

    _GEOMETRIES = 64  # grid and block pairs whose footprint caches are kept per function
    _SCALARS = 512  # scalar combinations kept per grid and block

    def _footprints_at(self, geometry: tuple[int, ...]) -> _FootprintCache:
        """The footprint cache of one grid and block (``(gx, gy, gz, bx, by, bz)``),
        keyed by the launch's scalars: a launch that repeats its geometry keeps it, so
        its check is one lookup of a short key."""
        found = self._footprint_caches.get(geometry)
        if found is None:
            with self._footprint_lock:
                if len(self._footprint_caches) >= self._GEOMETRIES:
                    self._footprint_caches.clear()
                found = self._footprint_caches.setdefault(
                    geometry, _FootprintCache(geometry, self._scalar_count, self._pointer_count)
                )
        return found

    def _footprint(self, cache: _FootprintCache, key: Any) -> tuple[int, ...]:
        """Per pointer parameter, bytes a launch touches and the alignment mask its address
        must clear, for the geometry of ``cache`` and the scalars ``key`` (one int for a
        kernel with one scalar, else a tuple); raises (naming the scalars) for a launch
        the kernel cannot make safely. Called by the generated launch code when ``cache``
        has no answer for ``key`` (it looked); the answer becomes ``cache.last``."""
        assert self._footprints is not None
        values = key if key.__class__ is tuple else (key,)
        names = [p.name for p in self.params if isinstance(p, ScalarParam)]
        grid, block = cache.geometry[:3], cache.geometry[3:]
        try:
            declared = {f.arg: f for f in self._footprints(grid, block, dict(zip(names, values)))}
        except FootprintError as err:
            raise ValueError(f"{self.name}: {err}; nothing was launched") from None
        need: list[int] = []
        for p in self.params:
            if isinstance(p, PointerParam):
                f = declared.get(p.name)
                need += [f.nbytes, f.align - 1] if f is not None and f.nbytes else [0, 0]
        result = tuple(need)
        if len(cache) >= self._SCALARS:
            cache.clear()
        cache.last = (*values, *result)  # first: a cache that holds a key has its ``last`` set
        cache[key] = result
        return result

    def _footprint_need(self, *geometry_and_key: Any) -> tuple[int, ...]:
        """:meth:`_footprint`'s answer for the compiled path, which keeps the last one."""
        *geometry, key = geometry_and_key  # gx, gy, gz, bx, by, bz, the scalars' key
        cache = self._footprints_at(tuple(geometry))
        need = cache.get(key)
        return need if need is not None else self._footprint(cache, key)

    def _footprint_fail(self, need: tuple[int, ...], given: tuple[Any, ...]) -> None:
        """Raise the error that names the argument, what the launch needs and what was given."""
        pointers = [p for p in self.params if isinstance(p, PointerParam)]
        for n, p in enumerate(pointers):
            nbytes, mask = need[2 * n], need[2 * n + 1]
            address, extent = given[2 * n], given[2 * n + 1]
            touches = "writes" if p.type.writes else "reads"
            if extent < nbytes:
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

    def _use_torch(self) -> None:
        """Let the fast test recognise ``torch.Tensor`` (torch is imported by now)."""
        torch = sys.modules["torch"]
        pointers = [p for p in self.params if isinstance(p, PointerParam)]
        dtypes = [getattr(torch, p.dtype.numpy_name, None) for p in pointers]
        for p, dtype in zip(pointers, dtypes):
            p.torch_dtype = dtype
        self._torch_bound = True
        if hasattr(torch.Tensor, "nbytes"):  # the fast test reads it (torch 2.1+); older: the full check
            self._bind_torch(torch.Tensor, *dtypes)
            if self._fast is not None:
                self._fast.bind_torch(torch.Tensor, tuple(dtypes))

    def _relaunch(
        self, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, shared: int, stream: Any, buf: ParamBuffer
    ) -> None:
        """The launch failed: make the device's context current and try once more (with
        cuLaunchKernel: a dependent kernel's retry goes without the attribute, which
        costs it the overlap, not its result)."""
        self._device.context.activate()
        err = self._launch_kernel(self._function, gx, gy, gz, bx, by, bz, shared, stream, buf.params, 0)
        if self.binding.returns_tuple:
            err = err[0]
        if err:
            raise_error(f"cuLaunchKernel({self.name})", err)
        self._pool.append(buf)
