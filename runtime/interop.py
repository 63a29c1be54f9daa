"""Device arrays from other libraries: ``__cuda_array_interface__`` and DLPack.

:func:`describe` turns anything a launch may receive for a pointer parameter into
an :class:`ArrayInfo` (address, dtype, device, read-only, contiguous, element count
and extent in bytes) without
importing the library it came from. :func:`to_dlpack_capsule` goes the other way
for :class:`runtime.DeviceArray`, so ``torch.from_dlpack(array)`` works.
"""

from __future__ import annotations

import ctypes
import math
import threading
from typing import Any, NamedTuple

from ptxgen.dtypes import DType, dtype_from_dlpack, dtype_from_typestr

__all__ = ["ArrayInfo", "describe", "to_dlpack_capsule"]

# DLDeviceType values (dlpack.h)
KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


_CAPSULE_NAME = b"dltensor"
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


class ArrayInfo(NamedTuple):
    """What a launch needs to know of an array argument. (A named tuple: read once or
    twice per array of every call, and a frozen dataclass costs several times more to
    make.)"""

    ptr: int
    dtype: DType | None  # None where the producer's element type is not one of ours
    dtype_text: str  # how the producer spelled it, for error messages
    readonly: bool
    contiguous: bool
    device_id: int | None  # None where the interface does not say (CAI)
    shape: tuple[int, ...]  # the extents, row-major
    size: int  # elements
    nbytes: int  # bytes from ptr to the end of a contiguous array (0 where the itemsize is unknown)
    stream: int | None = None  # CAI v3: the producer's stream, which a consumer must order after
    strides: tuple[int, ...] | None = None  # in elements, where not contiguous (None: row-major)


def _c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...] | None, itemsize: int) -> bool:
    """Whether byte ``strides`` describe a dense row-major layout of ``shape``."""
    if strides is None or 0 in shape:  # an empty array is trivially compact, whatever its strides
        return True
    expected = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def _from_cai(cai: dict[str, Any]) -> ArrayInfo:
    typestr = cai.get("typestr", "?")
    dtype = dtype_from_typestr(typestr)
    shape = cai.get("shape", ())
    if shape.__class__ is not tuple or not all(s.__class__ is int for s in shape):
        shape = tuple(int(s) for s in shape)
    strides = cai.get("strides")
    if dtype is not None:
        itemsize = dtype.itemsize
    else:  # "<V2" -> 2: used only where the dtype is not one of ours
        width = typestr[2:]
        itemsize = int(width) if width.isdigit() else 0
    ptr, readonly = cai["data"]
    if cai.get("mask") is not None:
        raise TypeError("masked arrays (__cuda_array_interface__ 'mask') cannot be passed to a kernel")
    stream = cai.get("stream")
    if stream is not None:
        if isinstance(stream, bool) or not isinstance(stream, int) or not 0 <= stream < 1 << 64:
            raise TypeError(
                f"__cuda_array_interface__ 'stream' must be None or a stream handle, not {stream!r}"
            )
        stream = int(stream) or 1  # v3 forbids 0 for its ambiguity: the legacy default stream
    address = int(ptr or 0)
    if not 0 <= address < 1 << 64:
        raise TypeError(f"__cuda_array_interface__ 'data' holds {address}, which is not a 64-bit address")
    size = math.prod(shape)
    contiguous = strides is None or _c_contiguous(shape, tuple(strides), itemsize)
    return ArrayInfo(
        address, dtype, typestr, bool(readonly), contiguous, None, shape, size, size * itemsize, stream,
        None if contiguous else _element_strides(strides, itemsize),
    )  # fmt: skip


def _element_strides(byte_strides: Any, itemsize: int) -> tuple[int, ...] | None:
    """Byte strides in elements, or None where one is not a whole number of elements."""
    if not itemsize or any(int(s) % itemsize for s in byte_strides):
        return None
    return tuple(int(s) // itemsize for s in byte_strides)


def _from_dlpack(obj: Any, stream: int) -> ArrayInfo:
    device_type, device_id = obj.__dlpack_device__()
    if int(device_type) not in (KDL_CUDA, KDL_CUDA_MANAGED):
        where = (
            "host (CPU)"
            if int(device_type) in (KDL_CPU, KDL_CUDA_HOST)
            else f"DLPack device type {device_type}"
        )
        raise TypeError(
            f"{type(obj).__name__} lives in {where} memory; a kernel needs device memory "
            "(copy it with Device.to_device or the framework's .cuda())"
        )
    # The stream tells the producer where the kernel will run, so it can order its own
    # pending writes before it (DLPack: 1 is CUDA's legacy default stream).
    capsule = obj.__dlpack__(stream=stream or 1)
    if not _api.PyCapsule_IsValid(id(capsule), _CAPSULE_NAME):
        raise TypeError(f"{type(obj).__name__}.__dlpack__() did not return a 'dltensor' capsule")
    address = _api.PyCapsule_GetPointer(id(capsule), _CAPSULE_NAME)
    tensor = _DLManagedTensor.from_address(address).dl_tensor
    ndim = tensor.ndim
    shape = tuple(tensor.shape[i] for i in range(ndim))
    strides = tuple(tensor.strides[i] for i in range(ndim)) if tensor.strides else None
    dt = tensor.dtype
    dtype = dtype_from_dlpack(dt.code, dt.bits, dt.lanes)
    itemsize = dt.bits // 8
    size = math.prod(shape)
    contiguous = _c_contiguous(shape, tuple(s * itemsize for s in strides) if strides else None, itemsize)
    info = ArrayInfo(
        ptr=(tensor.data or 0) + tensor.byte_offset,
        dtype=dtype,
        dtype_text=f"DLPack (code {dt.code}, {dt.bits} bits, {dt.lanes} lanes)",
        readonly=False,
        contiguous=contiguous,
        device_id=int(device_id),
        shape=shape,
        size=size,
        nbytes=size * itemsize * dt.lanes,
        strides=None if contiguous or strides is None else strides,
    )
    del capsule  # unconsumed: its own destructor hands the tensor back to the producer
    return info


def describe(value: Any, stream: int = 0) -> ArrayInfo:
    """Read a device array's address and layout from whichever interface it offers.

    Raises ``TypeError`` for a host array or something that is no array at all.
    """
    cai = None
    try:
        cai = value.__cuda_array_interface__
    except AttributeError:
        pass
    except (TypeError, ValueError, RuntimeError):
        # torch raises for dtypes CAI cannot spell (bfloat16); DLPack can.
        if not hasattr(value, "__dlpack__"):
            raise
    if cai is not None:
        info = _from_cai(cai)
        if info.dtype is None and hasattr(value, "__dlpack__"):
            # CAI cannot spell bf16 or fp8 (torch writes "<V2"); DLPack can.
            return _from_dlpack(value, stream)
        return info
    if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
        return _from_dlpack(value, stream)
    if hasattr(value, "__array_interface__") or hasattr(value, "__array__"):
        raise TypeError(
            f"{type(value).__name__} lives in host (CPU) memory; a kernel needs device memory "
            "(copy it with Device.to_device)"
        )
    raise TypeError(
        f"expected a device array (runtime.DeviceArray, an object with __cuda_array_interface__ "
        f"or __dlpack__) or an int address, not {type(value).__name__}"
    )


# --- exporting DeviceArray through DLPack ----------------------------------------------

# Exported tensors and what keeps their memory alive, by DLManagedTensor address.
_exported: dict[int, tuple[Any, ...]] = {}
_exported_lock = threading.Lock()


@_DELETER
def _managed_deleter(address: int) -> None:
    with _exported_lock:
        _exported.pop(address, None)


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule: int) -> None:
    # A capsule that nobody consumed still carries its tensor: give it back. A consumer
    # renames it "used_dltensor" and calls the deleter itself when it is done.
    try:
        if _api.PyCapsule_IsValid(capsule, _CAPSULE_NAME):
            address = _api.PyCapsule_GetPointer(capsule, _CAPSULE_NAME)
            if address:
                _managed_deleter(address)
    except Exception:  # at interpreter exit the module may be half torn down
        pass


def to_dlpack_capsule(owner: Any, ptr: int, shape: tuple[int, ...], dtype: DType, device_id: int) -> Any:
    """A ``dltensor`` PyCapsule viewing ``owner``'s memory; ``owner`` stays alive
    until the consumer calls the tensor's deleter (or the capsule dies unconsumed)."""
    ndim = len(shape)
    shape_array = (ctypes.c_int64 * max(ndim, 1))(*shape)
    managed = _DLManagedTensor()
    t = managed.dl_tensor
    t.data = ptr or None
    t.device = _DLDevice(KDL_CUDA, device_id)
    t.ndim = ndim
    code, bits = dtype.dlpack
    t.dtype = _DLDataType(code, bits, 1)
    t.shape = ctypes.cast(shape_array, ctypes.POINTER(ctypes.c_int64))
    t.strides = None  # compact row-major
    t.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _managed_deleter
    address = ctypes.addressof(managed)
    with _exported_lock:
        _exported[address] = (managed, shape_array, owner)
    return _api.PyCapsule_New(address, _CAPSULE_NAME, _capsule_destructor)
