"""The launch path: the call into the driver, and the checks in front of it.

**The call.** ``cuLaunchKernel`` is reached through one of three bindings
(:mod:`runtime.bindings`): cuda-bindings by default, cffi in ABI mode or ctypes;
``PTXGEN_LAUNCH_BINDING=cuda.bindings|cffi|ctypes`` picks one.

**The checks.** Everything that can be decided once is decided when a function is
resolved, and kept by the :class:`Launcher` it gets: the parameter count, each
argument's fast test from its declared type (:mod:`runtime.launch_checks`: a DeviceArray
by one identity comparison of its ``launch_key``, an int by its class, a torch tensor
by six attribute reads), the device's limits and the kernel's block. The launch
functions are plain closures made then, over those tests and limits
(:mod:`runtime.launch_python`). Where an argument fails its fast test, the arguments are
taken again in parameter order, each by its fast test or the full check in
:mod:`runtime.arrays`, which accepts it or raises naming the argument. An int's range is
then tested where it is narrower than its C type's and otherwise left to the packing: a
value ``struct`` refuses sends the ints through the full check, which names it. Nothing
is launched until every check has passed (an array that names its producer's stream may
have queued a wait for it by then: harmless). Where the kernel declares footprints, what
the launch touches is checked against each array's extent and address, cached per grid
and block by the scalars; an int address has :data:`UNKNOWN_EXTENT` unless
:func:`check_int_pointers` asks the driver.

**The buffer.** Values are packed with one ``struct.pack_into`` into a buffer laid out
by :class:`runtime.layout.ArgumentLayout`; the driver copies it during the call, so a
buffer is reused right after. Buffers come from a pool (``list.pop``/``append`` are
atomic), so threads launching the same function never share one, without a lock.

**Compiled.** Where the optional C extension :mod:`runtime._fastlaunch` was built (``pip
install`` builds it when a C compiler is there), a function's ``launch`` and its prepared
launches are its objects: the same fast tests, in C, with the buffer packed on the stack
and cuLaunchKernel (cuLaunchKernelEx for a dependent kernel) called at the address found
in libcuda. Whatever they do not take at once (another array type, a failed test, a
footprint to compute that raises, a failed driver call) goes to the Python launch
function (:attr:`Launcher.python_launch`) with the call's arguments, before anything was
launched; every error message is that function's. ``PTXGEN_COMPILED_LAUNCH=0`` (or
:func:`use_compiled_launch`) keeps the Python path.

**The context.** The launch does not ask the driver which context is current: a
``CUfunction`` belongs to its module's context. If the call fails (no context on a
fresh thread, say), the device's context is made current and the launch is tried once
more; a second failure raises :class:`runtime.CudaError`.
"""

from __future__ import annotations

import hashlib
import importlib
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from ptxgen.footprint import Footprint

from . import _driver
from ._driver import raise_error
from ._env import env_flag
from .arrays import PointerParam, ScalarParam, int_pointer_extent, pointer_value, scalar_value

# Re-exported: runtime.launch has always been where these are imported from.
from .bindings import BINDINGS, Binding, binding, driver_entry_points
from .errors import ForkedProcessError
from .launch_checks import UNKNOWN_EXTENT, ArgumentChecks, FootprintCheck, packed_range
from .launch_python import block_fits, python_launch_path
from .layout import ArgumentLayout, ParamBuffer
from .memory import DeviceArray
from .outputs import outputs_of
from .stream import Stream, known_stream_handles, stream_handle

if TYPE_CHECKING:
    from .device import Device

__all__ = [
    "BINDINGS",
    "UNKNOWN_EXTENT",
    "Binding",
    "Launcher",
    "PreparedLaunch",
    "binding",
    "check_int_pointers",
    "compiled_launch_available",
    "compiled_launch_enabled",
    "driver_entry_points",
    "use_compiled_launch",
]


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


def compiled_launch_enabled() -> bool:
    """Whether the compiled launch is switched on, as :func:`use_compiled_launch` (or
    ``PTXGEN_COMPILED_LAUNCH`` at import) left it; whether it is built is
    :func:`compiled_launch_available`'s to say."""
    return _use_compiled[0]


def compiled_ops() -> Any:
    """A ``runtime._fastlaunch.OpLane``, the ops' calls in C for the kinds of call their
    Python path remembered there, or None where the extension is not built. See
    :mod:`runtime.ops`. Its ``enabled`` follows :func:`use_compiled_launch`: switched
    off, its calls answer False and the ops' Python path takes them."""
    if _fastlaunch is None:
        return None
    ops = _fastlaunch.OpLane(
        device_array=DeviceArray,
        stream_class=Stream,
        stream_handle=stream_handle,
        known_streams=known_stream_handles(),
        outputs=outputs_of,
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


# --- the launcher ---------------------------------------------------------------------


class Launcher:
    """The checks and the driver call for one function, made when it is resolved.

    ``launch(grid, block, args, *, stream=None, shared_mem=0)`` and ``pack(args, stream=0)``
    are the functions :class:`runtime.Function` exposes as ``launch`` and ``pack_args``;
    :meth:`prepare` makes a :class:`PreparedLaunch`. :meth:`close` makes every later
    call raise (the module was unloaded: the function handle is gone).

    ``dependent_launch``: the kernel waits for its predecessor (``griddepcontrol.wait``)
    before touching memory, so every launch carries programmatic stream serialization,
    through ``cuLaunchKernelEx``. A binding without it (cffi, ctypes) launches such a
    kernel plainly: the same results, without the overlap.

    ``compiled``: ``launch`` and prepared launches go through :mod:`runtime._fastlaunch`
    (see above), with the Python functions behind them (``python_launch``). None:
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
        self.dependent_launch = dependent_launch and binding.launch_kernel_ex is not None
        self._footprints = FootprintCheck(name, self.params, footprints) if footprints is not None else None
        has_pointers = any(isinstance(p, PointerParam) for p in self.params)
        make_config = binding.config
        if self.dependent_launch:

            def make_config(*geometry: Any) -> Any:
                return binding.config(*geometry, dependent=True)

        self._pool: list[ParamBuffer] = []
        self._torch_bound = False
        self._is_closed = False
        self._function = binding.function(handle)
        self._fast: Any = None
        with _launchers_lock:  # no check_int_pointers() call between reading it and registering
            self._int_checks_on = _int_checks[0]
            self._checks = ArgumentChecks(self.params, self._slow_pointer, check_ints=self._int_checks_on)
            path = python_launch_path(
                layout=layout,
                checks=self._checks,
                footprint_check=self._footprints if has_pointers else None,  # nothing to compare without
                binding=binding,
                function=self._function,
                make_config=make_config,
                dependent=self.dependent_launch,
                device=device,
                max_threads=max_threads_per_block,
                kernel_block=block,
                pool=self._pool,
                relaunch=self._relaunch,
                closed=self._closed,
                ordered=ordered,
                check_geometry=check_geometry,
                out_of_range=self._out_of_range,
            )
            self.launch, self.pack, self._prepare, self._close = path
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
                specs.append(("scalar", slot.offset, slot.size, p.min, p.max, *packed_range(p)))
        device = self._device
        if block is not None and not block_fits(block, device.max_block, max_threads):
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
            footprint=self._footprints.need if self._footprints is not None else None,
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
        self._checks.check_ints = on
        if self._fast is not None:
            self._fast.check_ints = on

    @property
    def closed(self) -> bool:
        return self._is_closed

    def close(self) -> None:
        self._is_closed = True
        self._close()
        if self._fast is not None:
            self._fast.close()

    def _closed(self) -> NoReturn:
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

    def _out_of_range(self, given: Sequence[Any]) -> None:
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

    def _use_torch(self) -> None:
        """Let the fast tests recognise ``torch.Tensor`` (torch is imported by now)."""
        torch = sys.modules["torch"]
        pointers = [p for p in self.params if isinstance(p, PointerParam)]
        dtypes = [getattr(torch, p.dtype.numpy_name, None) for p in pointers]
        for p, dtype in zip(pointers, dtypes):
            p.torch_dtype = dtype  # what the tensor fast test compares a tensor's dtype with
        self._torch_bound = True
        if hasattr(torch.Tensor, "nbytes"):  # the fast test reads it (torch 2.1+); older: the full check
            self._checks.tensor_class = torch.Tensor
            if self._fast is not None:
                self._fast.bind_torch(torch.Tensor, tuple(dtypes))

    def _relaunch(
        self, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, shared: int, stream: Any, buf: ParamBuffer
    ) -> None:
        """The launch failed: make the device's context current and try once more (with
        cuLaunchKernel: a dependent kernel's retry goes without the attribute, which
        costs it the overlap, not its result). The caller hands the buffer back."""
        self._device.context.activate()
        err = self._launch_kernel(self._function, gx, gy, gz, bx, by, bz, shared, stream, buf.params, 0)
        if self.binding.returns_tuple:
            err = err[0]
        if err:
            raise_error(f"cuLaunchKernel({self.name})", err)
