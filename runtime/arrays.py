"""What a launch is given for each parameter, recognised and checked.

A pointer parameter takes a :class:`DeviceArray`, a ``torch.Tensor``, a CuPy array,
anything else with ``__cuda_array_interface__`` or ``__dlpack__``, or an int address.
Each kind is recognised by its class, once, through a table from class to reader, so
a launch does one dictionary lookup and reads the few attributes it needs: a torch
tensor gives ``data_ptr()``, ``dtype``, ``is_cuda``, ``get_device()``,
``is_contiguous()`` and ``numel()``, with no ``__cuda_array_interface__`` dict built.
torch and CuPy are never imported here: a class is matched against them only when the
user's value is one of theirs, which means they are already in ``sys.modules``.

Every reader returns ``(address, extent)``: the extent is the bytes from the address
to the end of the array (None for an int address, which carries none: the launcher
trusts it, or asks the driver with :func:`int_pointer_extent`), so a check of what a
launch touches is one comparison. An array whose interface names a producer's stream
(CAI v3; CuPy's current stream) is ordered after it (:func:`runtime.stream.order_after`)
as it is read, so such a wait may be queued for a launch a later check refuses:
harmless, nothing is written. Every reader refuses, naming the argument:
the wrong dtype, another device, host memory, a non-contiguous layout, a read-only
array for a parameter the kernel writes, an array with no elements, and an address
that is not a multiple of the element size.
"""

from __future__ import annotations

import ctypes
import operator
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from ptxgen.args import Pointer, Scalar
from ptxgen.dtypes import DType, dtype_from_typestr, resolve_dtype

from ._driver import _LIBCUDA, driver
from .interop import ArrayInfo, describe
from .memory import DeviceArray, launch_key
from .stream import order_after, trust_stream_handle

if TYPE_CHECKING:
    from .device import Device

__all__ = ["PointerParam", "ScalarParam", "int_pointer_extent", "pointer_value", "scalar_value"]

_MAX_ADDRESS = (1 << 64) - 1


class PointerParam:
    """A pointer parameter of one function: what it accepts, decided once."""

    __slots__ = ("device", "dtype", "index", "itemsize", "key", "name", "ordinal", "torch_dtype", "type")

    def __init__(self, index: int, name: str, type_: Pointer, device: Device) -> None:
        self.index = index
        self.name = name
        self.type = type_
        self.dtype: DType = type_.dtype
        self.itemsize = type_.dtype.itemsize
        self.device = device
        self.ordinal: int = device.ordinal
        self.key = launch_key(device, type_.dtype)
        self.torch_dtype: Any = None  # torch's dtype object, looked up at the first tensor

    @property
    def label(self) -> str:
        return f"argument {self.name!r} ({self.type})"


class ScalarParam:
    """An integer parameter: its name, type and accepted range."""

    __slots__ = ("index", "max", "min", "name", "type")

    def __init__(self, index: int, name: str, type_: Scalar) -> None:
        self.index = index
        self.name = name
        self.type = type_
        self.min: int = type_.min
        self.max: int = type_.max


# --- scalars --------------------------------------------------------------------------


def scalar_value(param: ScalarParam, value: Any) -> int:
    """``value`` as the int the parameter will hold; raises naming the argument."""
    if value.__class__ is int and param.min <= value <= param.max:
        return value
    t = param.type
    if isinstance(value, (bool, str, bytes, float)):
        raise TypeError(f"argument {param.name!r} ({t}) must be an int, not {type(value).__name__} {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"argument {param.name!r} ({t}) must be an int, not {type(value).__name__}") from None
    if not param.min <= number <= param.max:
        signed_api, signed_ptx = t.name[0] == "i", t.ptx_type[0] == "s"
        how = f"{t}, read by the kernel as .{t.ptx_type}" if signed_api != signed_ptx else str(t)
        raise ValueError(
            f"argument {param.name!r} ({how}) = {number} is out of range [{param.min}, {param.max}]"
        )
    return number


# --- pointers -------------------------------------------------------------------------

Reader = Callable[[PointerParam, Any, int], "tuple[int, int | None]"]


def pointer_value(param: PointerParam, value: Any, stream: int = 0) -> tuple[int, int | None]:
    """``(address, extent in bytes)`` of what was passed for ``param``; raises naming it.

    ``stream`` is where the kernel will run; a DLPack producer is told, as the
    protocol asks.
    """
    reader = _READERS.get(value.__class__)
    if reader is None:
        reader = _reader_for(value.__class__)
    return reader(param, value, stream)


def _device_array(param: PointerParam, value: DeviceArray, stream: int) -> tuple[int, int | None]:
    if value.launch_key is param.key:
        return value.address, value.nbytes
    label = param.label
    if value.closed:
        raise ValueError(f"{label}: the DeviceArray is closed")
    if value.dtype != param.dtype.name:
        raise TypeError(f"{label} got a DeviceArray of {value.dtype}")
    if value.device is not param.device:
        raise ValueError(
            f"{label} lives on device {value.device.ordinal}, the kernel runs on device {param.ordinal}"
        )
    if not value.nbytes:
        _refuse_empty(param, "DeviceArray", value.shape)
    return value.address, value.nbytes  # every check above passed


def _int(param: PointerParam, value: int, stream: int) -> tuple[int, int | None]:
    # An int is an address the caller vouches for: only its range can be checked.
    if not 0 <= value <= _MAX_ADDRESS:
        raise ValueError(f"{param.label}: address {value} is not a 64-bit address")
    return int(value), None


_POINTER_QUERY: list[Any] = []  # libcuda's cuPointerGetAttributes and the attributes asked, made once


def _pointer_query() -> tuple[Any, Any]:
    """libcuda's own ``cuPointerGetAttributes`` (through ctypes) and the attributes
    :func:`allocation_of` asks for: range start, range size, device ordinal. Not through
    cuda-bindings: its reader returns 0 for ``CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL``
    whatever the device (NVIDIA/cuda-python#2928; 13.3.1 does), which the two-GPU test
    caught."""
    if not _POINTER_QUERY:
        attr = driver().CUpointer_attribute
        call = ctypes.CDLL(_LIBCUDA).cuPointerGetAttributes
        call.argtypes = [
            ctypes.c_uint, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64,
        ]  # fmt: skip
        call.restype = ctypes.c_int
        asked = (ctypes.c_int * 3)(
            int(attr.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR),
            int(attr.CU_POINTER_ATTRIBUTE_RANGE_SIZE),
            int(attr.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL),
        )
        _POINTER_QUERY[:] = [call, asked]
    return _POINTER_QUERY[0], _POINTER_QUERY[1]


def allocation_of(address: int, device: Device) -> tuple[int, int, int]:
    """``(start, size, device ordinal)`` of the CUDA allocation holding ``address``, asked
    of the driver (one ``cuPointerGetAttributes`` call, a few µs). The query needs a
    context (any: addresses are unified); ``device``'s is made current if none is.
    Raises ``LookupError``, saying why, for an address in no allocation CUDA knows
    (freed memory, host memory never registered, a made-up number)."""
    call, asked = _pointer_query()
    start, size, ordinal = ctypes.c_uint64(), ctypes.c_size_t(), ctypes.c_int(-1)
    data = (ctypes.c_void_p * 3)(ctypes.addressof(start), ctypes.addressof(size), ctypes.addressof(ordinal))
    err = call(3, asked, data, address)
    if err:  # no context current on this thread
        device.context.activate()
        err = call(3, asked, data, address)
    if err:
        try:
            name = driver().CUresult(err).name
        except ValueError:  # a code this cuda-bindings does not know
            name = str(err)
        raise LookupError(f"the driver cannot say what address {address:#x} is ({name})")
    first, length, where = start.value, size.value, ordinal.value
    if length == 0 or not first <= address < first + length or where < 0:
        raise LookupError(f"address {address:#x} is in no CUDA allocation")
    return first, length, where


def int_pointer_extent(param: PointerParam, address: int) -> int:
    """The bytes from ``address`` to the end of the CUDA allocation holding it
    (:func:`allocation_of`): what a launch checks an int address against once
    :func:`runtime.check_int_pointers` is on.

    Address 0 (a null pointer) has an extent of 0, so a launch that touches nothing
    through it passes. Raises, naming the argument, for an address in no allocation
    CUDA knows and for memory of another GPU.
    """
    if address == 0:
        return 0
    try:
        start, size, ordinal = allocation_of(address, param.device)
    except LookupError as err:
        raise ValueError(
            f"{param.label}: {err} (freed, host memory, or not an address); pass a device array "
            "or an address inside one"
        ) from None
    if ordinal != param.ordinal:
        raise ValueError(
            f"{param.label}: address {address:#x} is memory of device {ordinal}, the kernel runs on "
            f"device {param.ordinal}"
        )
    return start + size - address


def _bool(param: PointerParam, value: bool, stream: int) -> tuple[int, int | None]:
    raise TypeError(f"{param.label} got a bool")


def _none(param: PointerParam, value: None, stream: int) -> tuple[int, int | None]:
    raise TypeError(f"{param.label} got None; pass 0 for a null pointer")


def _refuse_empty(param: PointerParam, kind: str, shape: tuple[int, ...] | None) -> NoReturn:
    of_shape = f" (shape {shape})" if shape is not None else ""
    raise ValueError(
        f"{param.label}: the {kind} has no elements{of_shape}; a kernel needs memory "
        "to point at (pass 0 for a null pointer)"
    )


def _check_address(param: PointerParam, ptr: int) -> None:
    if ptr % param.itemsize:
        raise ValueError(
            f"{param.label}: address {ptr:#x} is not a multiple of {param.itemsize} bytes, "
            f"the size of one {param.dtype.name}"
        )


def _torch_tensor(param: PointerParam, value: Any, stream: int) -> tuple[int, int | None]:
    if (
        value.dtype is param.torch_dtype
        and value.is_cuda
        and value.get_device() == param.ordinal
        and value.is_contiguous()
    ):
        size = value.numel()
        ptr = value.data_ptr()
        if size and not ptr % param.itemsize:
            return ptr, size * param.itemsize
    return _torch_slow(param, value)


def _torch_slow(param: PointerParam, value: Any) -> tuple[int, int | None]:
    """The tensor failed the fast path (or is the first one seen): say why, or accept it."""
    import torch  # the value is a tensor, so torch is already imported

    label, kind = param.label, type(value).__name__
    if param.torch_dtype is None:
        param.torch_dtype = getattr(torch, param.dtype.numpy_name, None)
    try:  # fake, meta and sparse tensors raise their own errors, which name no argument
        is_cuda = value.is_cuda
        where = value.device.type
        contiguous = value.is_contiguous() if is_cuda else True
        ordinal = value.get_device() if is_cuda else -1
        size = value.numel()
        ptr = value.data_ptr() if is_cuda and size else 0
    except Exception as err:
        raise TypeError(f"{label}: torch cannot give this {kind}'s device memory: {err}") from None
    if not is_cuda:
        if where == "cpu":
            raise TypeError(
                f"{label}: {kind} lives in host (CPU) memory; a kernel needs device memory "
                "(copy it with Device.to_device or the framework's .cuda())"
            )
        raise TypeError(f"{label}: {kind} lives on the {where!r} device, not on a CUDA GPU")
    if value.dtype is not param.torch_dtype:
        dtype = dtype_of_torch(value.dtype)
        spelled = (dtype.typestr if dtype is not None else None) or str(value.dtype)
        raise TypeError(f"{label} got a {kind} of {spelled}" + (f" ({dtype.name})" if dtype else ""))
    if not contiguous:
        raise ValueError(
            f"{label}: the array is not contiguous; pass a compact row-major copy "
            "(.contiguous() / ascontiguousarray)"
        )
    if ordinal != param.ordinal:
        raise ValueError(f"{label} lives on device {ordinal}, the kernel runs on device {param.ordinal}")
    if size == 0:
        _refuse_empty(param, kind, tuple(value.shape))
    _check_address(param, ptr)
    return ptr, size * param.itemsize


_torch_dtypes: dict[Any, DType | None] = {}


def torch_dtype_table() -> dict[Any, DType | None]:
    """The live table behind :func:`dtype_of_torch` (torch dtype -> our dtype or None),
    for the compiled ops' path, which reads it and leaves misses to that function."""
    return _torch_dtypes


def dtype_of_torch(torch_dtype: Any) -> DType | None:
    """Our dtype for a ``torch.dtype`` (None where we have none), looked up once per dtype."""
    try:
        return _torch_dtypes[torch_dtype]
    except KeyError:
        pass
    try:
        found: DType | None = resolve_dtype(torch_dtype)
    except (TypeError, ValueError):
        found = None
    _torch_dtypes[torch_dtype] = found
    return found


_cupy_dtypes: dict[Any, DType | None] = {}


def cupy_dtype_table() -> dict[Any, DType | None]:
    """The live table behind :func:`dtype_of_cupy`, for the compiled ops' path, which
    reads it and leaves misses to that function."""
    return _cupy_dtypes


def cupy_current_stream() -> int:
    """The stream a CuPy array's ``__cuda_array_interface__`` would name: CuPy's current
    one, a handle CuPy hands out and so one to trust (1, the legacy default stream, for
    CuPy's null stream)."""
    producer = sys.modules["cupy"].cuda.get_current_stream().ptr
    return trust_stream_handle(producer) if producer else 1


def dtype_of_cupy(cupy_dtype: Any) -> DType | None:
    """Our dtype for a CuPy array's numpy dtype (None where we have none), looked up once
    per dtype. ``__cuda_array_interface__`` cannot spell bf16 and fp8 (ml_dtypes gives
    ``'<V2'``, ``'<V1'`` and ``'<f1'``): those are known by ml_dtypes' names, ``bfloat16``
    say, as DLPack would name them; a void type of no such name is none of ours."""
    try:
        return _cupy_dtypes[cupy_dtype]
    except KeyError:
        pass
    found = dtype_from_typestr(cupy_dtype.str)
    if found is None and cupy_dtype.kind in ("V", "f"):
        try:
            found = resolve_dtype(cupy_dtype)
        except (TypeError, ValueError):
            found = None
    _cupy_dtypes[cupy_dtype] = found
    return found


def _cupy_array(param: PointerParam, value: Any, stream: int) -> tuple[int, int | None]:
    label = param.label
    dtype = dtype_of_cupy(value.dtype)
    if dtype is not param.dtype:
        raise TypeError(
            f"{label} got a {type(value).__name__} of {value.dtype.str}"
            + (f" ({dtype.name})" if dtype else "")
        )
    if not value.flags.c_contiguous:
        raise ValueError(
            f"{label}: the array is not contiguous; pass a compact row-major copy "
            "(.contiguous() / ascontiguousarray)"
        )
    if value.device.id != param.ordinal:
        raise ValueError(
            f"{label} lives on device {value.device.id}, the kernel runs on device {param.ordinal}"
        )
    if value.size == 0:
        _refuse_empty(param, type(value).__name__, tuple(value.shape))
    ptr = int(value.data.ptr)
    _check_address(param, ptr)
    order_after(param.device, stream, cupy_current_stream())
    return ptr, value.size * param.itemsize


def _generic(param: PointerParam, value: Any, stream: int) -> tuple[int, int | None]:
    """``__cuda_array_interface__`` or DLPack: Numba, JAX, our own test doubles."""
    label = param.label
    try:
        info: ArrayInfo = describe(value, stream)
    except TypeError as err:
        raise TypeError(f"{label}: {err}") from None
    except Exception as err:  # the exporter's own error (BufferError, a malformed interface dict)
        raise TypeError(
            f"{label}: the {type(value).__name__} could not describe its memory ({type(err).__name__}: {err})"
        ) from None
    t = param.type
    if info.dtype is not t.dtype:
        raise TypeError(
            f"{label} got a {type(value).__name__} of {info.dtype_text}"
            + (f" ({info.dtype.name})" if info.dtype else "")
        )
    if info.readonly and t.writes:
        raise ValueError(f"{label} is written by the kernel, but the array is read-only")
    if not info.contiguous:
        raise ValueError(
            f"{label}: the array is not contiguous; pass a compact row-major copy "
            "(.contiguous() / ascontiguousarray)"
        )
    if info.device_id is not None and info.device_id != param.ordinal:
        raise ValueError(
            f"{label} lives on device {info.device_id}, the kernel runs on device {param.ordinal}"
        )
    if info.size == 0:
        _refuse_empty(param, type(value).__name__, None)
    _check_address(param, info.ptr)
    order_after(param.device, stream, info.stream)
    return info.ptr, info.nbytes


_READERS: dict[type, Reader] = {
    DeviceArray: _device_array,
    int: _int,
    bool: _bool,
    type(None): _none,
}


def _reader_for(cls: type) -> Reader:
    """Classify a class seen for the first time, and remember it."""
    torch = sys.modules.get("torch")
    cupy = sys.modules.get("cupy")
    if issubclass(cls, bool):
        reader: Reader = _bool
    elif issubclass(cls, int):
        reader = _int
    elif torch is not None and issubclass(cls, torch.Tensor):
        reader = _torch_tensor
    elif cupy is not None and issubclass(cls, cupy.ndarray):
        reader = _cupy_array
    else:
        reader = _generic
    _READERS[cls] = reader
    return reader
