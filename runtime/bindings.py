"""The bindings through which a launch reaches ``cuLaunchKernel``.

cuda-bindings is the default: its Cython call, given a ``CUfunction`` and a ``CUstream``
object, is the cheapest of the three (see ``docs/perf/launch.md``). cffi in ABI mode
(``dlopen`` of libcuda, no compiler) and ctypes declare every handle as ``uintptr_t``,
so Python ints go straight through: a pointer and a ``uintptr_t`` are passed alike by
every C calling convention CUDA runs on (x86-64 System V and Windows, AArch64).
``PTXGEN_LAUNCH_BINDING=cuda.bindings|cffi|ctypes`` picks one; without it the first of
:data:`BINDINGS` that loads is used.

:func:`driver_entry_points` gives the compiled launch path (:mod:`runtime._fastlaunch`)
the addresses of the C functions themselves.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Protocol

from ._driver import _LIBCUDA, driver

__all__ = ["BINDINGS", "Binding", "binding", "driver_entry_points"]

BINDINGS = ("cuda.bindings", "cffi", "ctypes")  # the default order, cheapest call first (measured)
_ENV = "PTXGEN_LAUNCH_BINDING"


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
