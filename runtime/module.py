"""Loaded PTX modules and the functions in them.

A :class:`Function` is an entry point with its :class:`~runtime.layout.ArgumentLayout`
(where each parameter sits, confirmed against the driver) and its
:class:`~runtime.launch.Launcher` (the checks and the driver call, built once when the
function is resolved). ``Function.launch`` is the launcher's function itself, so a
launch is one Python call; it never synchronizes.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from ptxgen import Kernel, Pointer, Scalar
from ptxgen.diagnostics import log_line_numbers, quote_lines
from ptxgen.kernel import wants_dependent_launch

from ._driver import check, driver, error_strings, raise_error
from .errors import PtxLoadError
from .launch import Binding, Launcher, PreparedLaunch, binding
from .layout import ArgumentLayout, ptx_param_count

if TYPE_CHECKING:
    from .device import Device

__all__ = ["Function", "Module", "function_by_handle", "ptx_param_count"]

_LOG_BYTES = 64 * 1024

# Launchable functions by CUfunction address, so a captured graph node names its Function.
_by_handle: weakref.WeakValueDictionary[int, Function] = weakref.WeakValueDictionary()


def function_by_handle(handle: int) -> Function | None:
    """The open :class:`Function` whose ``CUfunction`` is ``handle``, if any."""
    return _by_handle.get(handle)


def _c_string(buffer: bytearray) -> str:
    return bytes(buffer).split(b"\0", 1)[0].decode(errors="replace").strip()


def load_module(device: Device, kernel: Kernel, cache_key: Any = None) -> Module:
    """``cuModuleLoadDataEx`` on ``kernel.source``, with the JIT's logs captured;
    ``cache_key``: the key ``device`` holds the module under (see :meth:`Device.load`)."""
    drv = driver()
    device.context.activate()
    jit = drv.CUjit_option
    error_log, info_log = bytearray(_LOG_BYTES), bytearray(_LOG_BYTES)
    options = [
        jit.CU_JIT_ERROR_LOG_BUFFER,
        jit.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        jit.CU_JIT_INFO_LOG_BUFFER,
        jit.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
        jit.CU_JIT_LOG_VERBOSE,
    ]
    values = [error_log, _LOG_BYTES, info_log, _LOG_BYTES, 1]
    image = kernel.source.encode() + b"\0"
    err, handle = drv.cuModuleLoadDataEx(image, len(options), options, values)
    if err:
        name, text = error_strings(drv, err)
        errors = _c_string(error_log)
        raise PtxLoadError(
            "cuModuleLoadDataEx",
            int(err),
            name,
            text,
            kernel_id=kernel.id,
            target=kernel.target,
            error_log=errors,
            info_log=_c_string(info_log),
            ptx_lines=quote_lines(kernel.source, log_line_numbers(errors)),
        )
    return Module(device, kernel, handle, _c_string(info_log), cache_key)


class Module:
    """A loaded PTX module. ``module.function`` is the kernel's entry point."""

    def __init__(
        self, device: Device, kernel: Kernel, handle: Any, jit_log: str, cache_key: Any = None
    ) -> None:
        self.device = device
        self.kernel = kernel
        self.jit_log = jit_log
        self.cache_key = cache_key  # what the device's module cache holds it under, if it does
        self._handle = handle
        self._functions: dict[str, Function] = {}
        self._lock = threading.Lock()
        device.context.track(self)

    @property
    def closed(self) -> bool:
        return self._handle is None

    @property
    def handle(self) -> Any:
        if self._handle is None:
            raise ValueError(f"the module of {self.kernel.id} is closed")
        return self._handle

    @property
    def function(self) -> Function:
        """The entry point ``kernel.entry_point_name``, typed by ``kernel.arg_types``."""
        k = self.kernel
        return self.get_function(k.entry_point_name, k.arg_types, k.arg_names, tuple(k.block))

    def get_function(
        self,
        name: str,
        arg_types: Sequence[Pointer | Scalar] | None = None,
        arg_names: Sequence[str] | None = None,
        block: tuple[int, int, int] | None = None,
    ) -> Function:
        """Any ``.entry`` of the module. It can be launched once its ``arg_types`` are known."""
        with self._lock:
            function = self._functions.get(name)
            if function is None:
                function = Function(self, name, arg_types, arg_names, block)
                self._functions[name] = function
            elif arg_types is not None and tuple(arg_types) != function.arg_types:
                raise TypeError(f"{name} was already resolved with other arg_types")
            return function

    def close(self) -> None:
        """Unload the module; its functions can no longer launch. Idempotent."""
        with self._lock:
            if self._handle is None:
                return
            handle, self._handle = self._handle, None
            for function in self._functions.values():
                function._module_closed()  # before the unload: no launch may use the handle after
        self.device.forget_module(self)
        if self.device.context.usable:
            self.device.context.activate()
            check("cuModuleUnload", driver().cuModuleUnload(handle))

    def after_fork(self) -> None:
        """In a forked child (the device's fork handler calls it): the handle is the
        parent's. Stop every launch of it (they raise ForkedProcessError), unload nothing."""
        self._lock = threading.Lock()  # another thread of the parent may have held it
        handle, self._handle = self._handle, None
        if handle is not None:
            for function in self._functions.values():
                function._module_closed()

    def __enter__(self) -> Module:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<runtime.Module {self.kernel.id}{' closed' if self.closed else ''}>"


def _dim3(value: Any, what: str) -> tuple[int, int, int]:
    if value.__class__ is tuple and len(value) == 3 and all(d.__class__ is int for d in value):
        return value  # the common case, already in shape
    dims = (value,) if isinstance(value, int) else value
    try:
        dims = tuple(dims)
    except TypeError:
        raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, not {value!r}") from None
    if not 1 <= len(dims) <= 3 or any(isinstance(d, bool) or not isinstance(d, int) for d in dims):
        raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, not {value!r}")
    return (*dims, 1, 1, 1)[:3]  # type: ignore[return-value]


class Function:
    """One ``.entry`` of a loaded module, with its argument layout and launcher built."""

    def __init__(
        self,
        module: Module,
        name: str,
        arg_types: Sequence[Pointer | Scalar] | None,
        arg_names: Sequence[str] | None,
        block: tuple[int, int, int] | None,
    ) -> None:
        drv = driver()
        module.device.context.activate()
        self.module = module
        self.device = module.device
        self.name = name
        self.block = block
        err, handle = drv.cuModuleGetFunction(module.handle, name.encode())
        if err:
            raise_error(f"cuModuleGetFunction({name!r}) in module {module.kernel.id}", err)
        self._handle = handle
        attribute = drv.CUfunction_attribute
        self.max_threads_per_block = int(
            check(
                "cuFuncGetAttribute",
                drv.cuFuncGetAttribute(attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, handle),
            )
        )
        self.num_regs = int(
            check(
                "cuFuncGetAttribute",
                drv.cuFuncGetAttribute(attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, handle),
            )
        )
        self.arg_types: tuple[Pointer | Scalar, ...] | None = None
        self.layout: ArgumentLayout | None = None
        self._launcher: Launcher | None = None
        if arg_types is not None:
            self.arg_types = tuple(arg_types)
            names = tuple(arg_names) if arg_names is not None else None
            if names is None:
                names = tuple(f"arg{i}" for i in range(len(self.arg_types)))
            if len(names) != len(self.arg_types):
                raise ValueError(f"{name}: {len(names)} arg_names for {len(self.arg_types)} arg_types")
            self.arg_names: tuple[str, ...] = names
            self.layout = ArgumentLayout(names, self.arg_types)
            self.layout.check_against_driver(drv, handle, name, module.kernel.source)
            self._build_launcher(binding())

    def make_launcher(
        self, launch_binding: Binding | str | None = None, *, compiled: bool | None = None
    ) -> Launcher:
        """A launch path of its own for this function, through ``launch_binding`` (a
        :class:`runtime.launch.Binding` or its name, ``"cffi"``, ``"ctypes"`` or
        ``"cuda.bindings"``; None: the default). ``compiled`` as
        :class:`runtime.launch.Launcher` takes it; by default a named binding gets the
        Python launch functions alone (so that its own call is what launches), the
        default binding the compiled path where it is built. For measuring and testing
        the paths; ``launch`` is the default one's."""
        if compiled is None and launch_binding is not None:
            compiled = False
        if launch_binding is None or isinstance(launch_binding, str):
            launch_binding = binding(launch_binding)
        return self._new_launcher(launch_binding, compiled)

    def _new_launcher(self, launch_binding: Binding, compiled: bool | None) -> Launcher:
        if self.layout is None:
            self._no_launcher()
        launcher = Launcher(
            name=self.name,
            handle=self.handle,
            layout=self.layout,
            device=self.device,
            block=self.block,
            max_threads_per_block=self.max_threads_per_block,
            check_geometry=self._check_geometry,
            ordered=self._ordered,
            binding=launch_binding,
            footprints=self._declared_footprints(),
            dependent_launch=self._dependent_launch(),
            compiled=compiled,
        )
        if self.module.closed:
            launcher.close()
        return launcher

    def _declared_footprints(self) -> Any:
        """The kernel's ``footprints`` method when this is its entry point and it declares
        one; launches then refuse arrays that do not cover what they touch. Kernels without
        one launch with their pointers trusted (docs/reliability.md)."""
        kernel = self.module.kernel
        if self.name != kernel.entry_point_name or tuple(self.arg_names) != tuple(kernel.arg_names):
            return None
        return getattr(kernel, "footprints", None)

    def _dependent_launch(self) -> bool:
        """Whether this is the entry point of a kernel built for programmatic dependent
        launch (its ``dependent_launch``): its launches then carry the attribute."""
        kernel = self.module.kernel
        return self.name == kernel.entry_point_name and wants_dependent_launch(kernel)

    def _build_launcher(self, launch_binding: Binding) -> None:
        """Build this function's launch path (see :mod:`runtime.launch`)."""
        self._launcher = self._new_launcher(launch_binding, None)  # compiled where it is built
        # The launcher's functions become this object's ``launch`` and ``pack_args``
        # (instance attributes win over the methods below), so a launch is one call.
        self.launch = self._launcher.launch  # type: ignore[method-assign]
        self.pack_args = self._launcher.pack  # type: ignore[method-assign]
        _by_handle[self.handle] = self

    @property
    def handle(self) -> int:
        """The ``CUfunction`` as an int."""
        return int(self._handle)

    @property
    def launcher(self) -> Launcher | None:
        """The launch path (see :class:`runtime.launch.Launcher`); None without arg_types."""
        return self._launcher

    def _module_closed(self) -> None:
        if self._launcher is not None:
            self._launcher.close()
            if _by_handle.get(self.handle) is self:
                del _by_handle[self.handle]

    def __repr__(self) -> str:
        return f"<runtime.Function {self.name}>"

    # --- argument checks ------------------------------------------------------------

    def _ordered(self, args: Any) -> Sequence[Any]:
        """``args`` in ``arg_names`` order, or the error that says what is wrong with them."""
        names = self.arg_names
        wanted = f"{len(names)} arguments ({', '.join(names)})"
        if isinstance(args, Mapping):
            missing = [n for n in names if n not in args]
            unknown = [k for k in args if k not in names]
            if missing or unknown:
                parts = []
                if missing:
                    parts.append(f"missing {', '.join(map(repr, missing))}")
                if unknown:
                    parts.append(f"unknown {', '.join(map(repr, unknown))}")
                raise TypeError(f"{self.name} takes {wanted}: {'; '.join(parts)}")
            return [args[n] for n in names]
        if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
            raise TypeError(f"args must be a tuple, list or dict of {wanted}, not {type(args).__name__}")
        if len(args) != len(names):
            detail = (
                f"missing {', '.join(map(repr, names[len(args) :]))}"
                if len(args) < len(names)
                else f"{len(args) - len(names)} too many"
            )
            raise TypeError(f"{self.name} takes {wanted}, got {len(args)}: {detail}")
        return args

    def _check_geometry(
        self, grid: Any, block: Any, shared_mem: Any
    ) -> tuple[tuple[int, int, int], tuple[int, int, int], int]:
        g, b = _dim3(grid, "grid"), _dim3(block, "block")
        dev = self.device
        mg, mb = dev.max_grid, dev.max_block
        if (
            0 < g[0] <= mg[0]
            and 0 < g[1] <= mg[1]
            and 0 < g[2] <= mg[2]
            and 0 < b[0] <= mb[0]
            and 0 < b[1] <= mb[1]
            and 0 < b[2] <= mb[2]
            and b[0] * b[1] * b[2] <= self.max_threads_per_block
            and (self.block is None or b == self.block)
            and shared_mem.__class__ is int
            and 0 <= shared_mem <= dev.max_shared_memory_per_block
        ):
            return g, b, shared_mem
        self._explain_geometry(g, b, shared_mem)

    def _explain_geometry(self, g: tuple[int, ...], b: tuple[int, ...], shared_mem: Any) -> NoReturn:
        """Raise the error that says which dimension or limit a launch broke."""
        dev = self.device
        for axis, (n, limit) in enumerate(zip(g, dev.max_grid)):
            if not 1 <= n <= limit:
                raise ValueError(f"grid {g}: dimension {'xyz'[axis]} = {n} is outside 1..{limit}")
        for axis, (n, limit) in enumerate(zip(b, dev.max_block)):
            if not 1 <= n <= limit:
                raise ValueError(f"block {b}: dimension {'xyz'[axis]} = {n} is outside 1..{limit}")
        threads = b[0] * b[1] * b[2]
        if threads > self.max_threads_per_block:
            raise ValueError(
                f"block {b} has {threads} threads; {self.name} allows at most {self.max_threads_per_block}"
            )
        if self.block is not None and b != self.block:
            raise ValueError(f"{self.name} is built for block {self.block}, not {b}")
        if isinstance(shared_mem, bool) or not isinstance(shared_mem, int):
            raise TypeError(f"shared_mem must be an int number of bytes, not {shared_mem!r}")
        raise ValueError(f"shared_mem {shared_mem} is outside 0..{dev.max_shared_memory_per_block} bytes")

    def _no_launcher(self) -> NoReturn:
        raise TypeError(
            f"{self.name} has no argument types: resolve it with "
            "module.get_function(name, arg_types=[...]) to launch it"
        )

    # --- launch ---------------------------------------------------------------------
    # With arg_types, the launcher's functions replace ``launch`` and
    # ``pack_args`` on the instance; these methods document them and serve functions
    # resolved without arg_types, which cannot launch.

    def launch(
        self,
        grid: Any,
        block: Any,
        args: Sequence[Any] | Mapping[str, Any],
        *,
        stream: Any = None,
        shared_mem: int = 0,
    ) -> None:
        """Queue the kernel on ``stream``; returns without waiting for it.

        Every argument is checked against ``arg_types`` and every dimension against
        the device's limits before anything is launched.
        """
        self._no_launcher()

    def pack_args(self, args: Sequence[Any] | Mapping[str, Any], stream: int = 0) -> list[int]:
        """Check ``args`` against ``arg_types`` and return the integer each slot will hold.

        Pointer parameters take a DeviceArray, a torch or CuPy array, an object with
        ``__cuda_array_interface__`` or ``__dlpack__``, or an int address; integer
        parameters take ints in range. Nothing is launched or written.
        """
        self._no_launcher()

    def prepare(self, grid: Any, block: Any, *, stream: Any = None, shared_mem: int = 0) -> PreparedLaunch:
        """A launch with ``grid``, ``block``, ``stream`` and ``shared_mem`` checked and fixed
        now: call it with the arguments alone (checked as :meth:`launch` checks them), or
        its ``raw`` with trusted ints. See :class:`runtime.launch.PreparedLaunch`."""
        if self._launcher is None:
            self._no_launcher()
        if self.module.closed:
            raise ValueError(f"{self.name}: its module is closed")
        g, b, shared = self._check_geometry(grid, block, shared_mem)
        return self._launcher.prepare(g, b, shared, stream)
