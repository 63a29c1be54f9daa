"""Loaded PTX modules and the functions in them.

:class:`Function.launch` is the hot path. Everything that can be decided once is
decided when the function is resolved: the packing of each argument (from the
kernel's ``arg_types``, never from the Python values), one ctypes slot per
parameter and the ``void**`` array pointing at them. A launch checks the values,
writes them into the slots and calls ``cuLaunchKernel``; it never synchronizes.
"""

from __future__ import annotations

import ctypes
import functools
import operator
import re
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from ptxgen.args import Pointer, Scalar
from ptxgen.diagnostics import log_line_numbers, quote_lines
from ptxgen.kernel import Kernel

from ._driver import check, driver, error_strings, raise_error
from .errors import PtxLoadError
from .interop import describe
from .memory import DeviceArray
from .stream import Stream, stream_handle

if TYPE_CHECKING:
    from .device import Device

__all__ = ["Function", "Module"]

_LOG_BYTES = 64 * 1024
_CTYPES = {"Q": ctypes.c_uint64, "q": ctypes.c_int64, "I": ctypes.c_uint32, "i": ctypes.c_int32}


def _c_string(buffer: bytearray) -> str:
    return bytes(buffer).split(b"\0", 1)[0].decode(errors="replace").strip()


def load_module(device: Device, kernel: Kernel) -> Module:
    """``cuModuleLoadDataEx`` on ``kernel.source``, with the JIT's logs captured."""
    drv = driver()
    device._activate()
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
    return Module(device, kernel, handle, _c_string(info_log))


class Module:
    """A loaded PTX module. ``module.function`` is the kernel's entry point."""

    def __init__(self, device: Device, kernel: Kernel, handle: Any, jit_log: str) -> None:
        self.device = device
        self.kernel = kernel
        self.jit_log = jit_log
        self._handle = handle
        self._functions: dict[str, Function] = {}
        self._lock = threading.Lock()
        device._track(self)

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
        self.device._forget_module(self)
        if self.device._closing_or_open():
            self.device._activate()
            check("cuModuleUnload", driver().cuModuleUnload(handle))

    def __enter__(self) -> Module:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<runtime.Module {self.kernel.id}{' closed' if self.closed else ''}>"


def ptx_param_count(source: str, entry: str) -> int | None:
    """How many ``.param`` the ``.entry`` called ``entry`` declares in ``source``, or None."""
    match = re.search(rf"\.entry\s+{re.escape(entry)}\s*\(([^)]*)\)", source)
    if match is None:
        return None
    without_comments = re.sub(r"//[^\n]*|/\*.*?\*/", "", match.group(1), flags=re.S)
    return len(re.findall(r"\.param\b", without_comments))


def _param_count(drv: Any, handle: Any) -> int | None:
    """cuFuncGetParamCount where bindings and driver have it (CUDA 13), else None."""
    get_count = getattr(drv, "cuFuncGetParamCount", None)
    if get_count is None:
        return None
    try:
        err, count = get_count(handle)
    except Exception:  # bindings newer than the driver: the symbol is missing
        return None
    return None if err else int(count)


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
    """One ``.entry`` of a loaded module, with its argument slots prepared."""

    def __init__(
        self,
        module: Module,
        name: str,
        arg_types: Sequence[Pointer | Scalar] | None,
        arg_names: Sequence[str] | None,
        block: tuple[int, int, int] | None,
    ) -> None:
        drv = driver()
        module.device._activate()
        self.module = module
        self.device = module.device
        self.name = name
        self.block = block
        err, handle = drv.cuModuleGetFunction(module.handle, name.encode())
        if err:
            raise_error(f"cuModuleGetFunction({name!r}) in module {module.kernel.id}", err)
        self._handle = handle
        self._default_stream = drv.CUstream(0)
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
        if arg_types is not None:
            self.arg_types = tuple(arg_types)
            names = tuple(arg_names) if arg_names is not None else None
            if names is None:
                names = tuple(f"arg{i}" for i in range(len(self.arg_types)))
            if len(names) != len(self.arg_types):
                raise ValueError(f"{name}: {len(names)} arg_names for {len(self.arg_types)} arg_types")
            self.arg_names: tuple[str, ...] = names
            self._check_params_against_driver(drv)
            self._prepare_slots()

    def _prepare_slots(self) -> None:
        """One C slot per parameter, and the ``void**`` that cuLaunchKernel reads: built once."""
        self._slots = [_CTYPES[t.struct_format]() for t in self.arg_types]
        self._params = (ctypes.c_void_p * max(len(self._slots), 1))(
            *[ctypes.addressof(s) for s in self._slots]
        )
        self._params_address = ctypes.addressof(self._params)
        self._limits = [(t.min, t.max) for t in self.arg_types]
        # One checker per parameter, chosen from its declared type, never from a value.
        self._packers = [
            functools.partial(self._pointer if t.is_pointer else self._scalar, i, t)
            for i, t in enumerate(self.arg_types)
        ]
        self._launch_lock = threading.Lock()

    def _check_params_against_driver(self, drv: Any) -> None:
        """Compare arg_types with the parameters the loaded PTX declares.

        The count comes from cuFuncGetParamCount where the driver has it, else from the
        ``.entry``'s parameter list in the PTX; no query goes past the last parameter, so
        compute-sanitizer sees no failing driver call.
        """
        count = _param_count(drv, self._handle)
        if count is None:  # this driver cannot say: read the .entry's parameter list
            count = ptx_param_count(self.module.kernel.source, self.name)
        declared = len(self.arg_types or ())
        if count is not None and count != declared:
            raise TypeError(f"{self.name}: the PTX declares {count} parameters, arg_types lists {declared}")
        get_info = getattr(drv, "cuFuncGetParamInfo", None)
        if get_info is None:  # drivers before CUDA 12.4 cannot tell
            return
        for index, t in enumerate(self.arg_types or ()):
            err, _offset, size = get_info(self._handle, index)
            if err:
                raise TypeError(f"{self.name}: arg_types lists {declared} parameters, the PTX fewer")
            if int(size) != t.size:
                raise TypeError(
                    f"{self.name}: parameter {index} ({self.arg_names[index]}) is {size} bytes in "
                    f"the PTX, but arg_types says {t} ({t.size} bytes)"
                )

    def __repr__(self) -> str:
        return f"<runtime.Function {self.name}>"

    # --- argument checks ------------------------------------------------------------

    def _ordered(self, args: Any) -> Sequence[Any]:
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

    def _pointer(self, index: int, t: Pointer, value: Any, stream: int = 0) -> int:
        if (
            value.__class__ is DeviceArray
            and value._dtype is t.dtype
            and value.device is self.device
            and value._finalizer.alive
        ):
            return value._ptr  # the common case; anything else gets the full checks below
        name = self.arg_names[index]
        if type(value) is DeviceArray:
            if value.closed:
                raise ValueError(f"argument {name!r} ({t}): the DeviceArray is closed")
            if value.dtype != t.dtype.name:
                raise TypeError(f"argument {name!r} ({t}) got a DeviceArray of {value.dtype}")
            if value.device is not self.device:
                raise ValueError(
                    f"argument {name!r} ({t}) lives on device {value.device.ordinal}, "
                    f"the kernel runs on device {self.device.ordinal}"
                )
            return value._ptr
        if isinstance(value, bool):
            raise TypeError(f"argument {name!r} ({t}) got a bool")
        if isinstance(value, int):
            if not 0 <= value < 1 << 64:
                raise ValueError(f"argument {name!r} ({t}): address {value} is not a 64-bit address")
            return value
        if value is None:
            raise TypeError(f"argument {name!r} ({t}) got None; pass 0 for a null pointer")
        try:
            info = describe(value, stream)
        except TypeError as err:
            raise TypeError(f"argument {name!r} ({t}): {err}") from None
        if info.dtype is not t.dtype:
            raise TypeError(
                f"argument {name!r} ({t}) got a {type(value).__name__} of {info.dtype_text}"
                + (f" ({info.dtype.name})" if info.dtype else "")
            )
        if info.readonly and t.writes:
            raise ValueError(f"argument {name!r} ({t}) is written by the kernel, but the array is read-only")
        if not info.contiguous:
            raise ValueError(
                f"argument {name!r} ({t}): the array is not contiguous; pass a compact "
                "row-major copy (.contiguous() / ascontiguousarray)"
            )
        if info.device_id is not None and info.device_id != self.device.ordinal:
            raise ValueError(
                f"argument {name!r} ({t}) lives on device {info.device_id}, "
                f"the kernel runs on device {self.device.ordinal}"
            )
        return info.ptr

    def _scalar(self, index: int, t: Scalar, value: Any, stream: int = 0) -> int:
        if value.__class__ is int:
            low, high = self._limits[index]
            if low <= value <= high:
                return value
        name = self.arg_names[index]
        if isinstance(value, (bool, str, bytes, float)):
            raise TypeError(f"argument {name!r} ({t}) must be an int, not {type(value).__name__} {value!r}")
        try:
            number = operator.index(value)
        except TypeError:
            raise TypeError(f"argument {name!r} ({t}) must be an int, not {type(value).__name__}") from None
        low, high = self._limits[index]
        if not low <= number <= high:
            signed_api, signed_ptx = t.name[0] == "i", t.ptx_type[0] == "s"
            how = f"{t}, read by the kernel as .{t.ptx_type}" if signed_api != signed_ptx else str(t)
            raise ValueError(f"argument {name!r} ({how}) = {number} is out of range [{low}, {high}]")
        return number

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

    # --- launch ---------------------------------------------------------------------

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
        if self.module._handle is None:
            raise ValueError(f"{self.name}: its module is closed")
        if self.arg_types is None:
            raise TypeError(
                f"{self.name} has no argument types: resolve it with "
                "module.get_function(name, arg_types=[...]) to launch it"
            )
        g, b, shared = self._check_geometry(grid, block, shared_mem)
        # cuda-bindings converts a CUstream faster than an int, so pass the object we hold.
        if stream is None:
            handle, cu_stream = 0, self._default_stream
        elif stream.__class__ is Stream:
            handle, cu_stream = stream._handle_int(), stream._handle
        else:
            handle = cu_stream = stream_handle(stream)
        values = self.pack_args(args, handle)
        self.device._activate()
        drv = driver()
        with self._launch_lock:  # the slots are shared; the driver copies them at launch
            self._fill_slots(values)
            (err,) = drv.cuLaunchKernel(
                self._handle, g[0], g[1], g[2], b[0], b[1], b[2], shared, cu_stream, self._params_address, 0
            )
        if err:
            raise_error(f"cuLaunchKernel({self.name})", err)

    def pack_args(self, args: Sequence[Any] | Mapping[str, Any], stream: int = 0) -> list[int]:
        """Check ``args`` against ``arg_types`` and return the integer each slot will hold.

        Pointer parameters take a DeviceArray, an object with ``__cuda_array_interface__``
        or ``__dlpack__``, or an int address; integer parameters take ints in range.
        Nothing is launched or written.
        """
        if self.arg_types is None:
            raise TypeError(f"{self.name} has no argument types")
        ordered = args if args.__class__ is tuple and len(args) == len(self._packers) else self._ordered(args)
        return [pack(value, stream) for pack, value in zip(self._packers, ordered)]

    def _fill_slots(self, values: list[int]) -> None:
        for slot, value in zip(self._slots, values):
            slot.value = value
