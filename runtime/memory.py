"""Device memory: :class:`DeviceArray`, a typed, compact, row-major block of GPU memory."""

from __future__ import annotations

import math
import weakref
from typing import TYPE_CHECKING, Any

from ptxgen.dtypes import DType, resolve_dtype

from ._driver import check, driver
from .interop import KDL_CUDA, to_dlpack_capsule

if TYPE_CHECKING:
    import numpy as np

    from .device import Device

__all__ = ["DeviceArray", "launch_key", "numpy_dtype"]

# One key object per (device, dtype): a launcher recognises an open, non-empty array
# of the right device and dtype by one identity comparison with it.
_launch_keys: dict[tuple[Any, DType], tuple[Any, DType]] = {}


def launch_key(device: Device, dtype: DType) -> tuple[Device, DType]:
    """The :attr:`DeviceArray.launch_key` of open, non-empty arrays of ``dtype`` on ``device``."""
    key = (device, dtype)
    return _launch_keys.setdefault(key, key)


def check_byte_order(host: np.ndarray) -> None:
    """Refuse a big-endian host array: its bytes are copied as they are, so they would
    land swapped on the (little-endian) device."""
    if host.dtype.byteorder == ">":
        raise ValueError(
            f"host array dtype {host.dtype.str!r} is big-endian; convert it first with "
            f"array.astype(array.dtype.newbyteorder('<'))"
        )


def numpy_dtype(dtype: DType, bits: bool = False) -> np.dtype:
    """The numpy dtype for ``dtype``; ``bits=True`` gives the unsigned int of its width.

    bf16 and the fp8 formats need ml_dtypes (numpy has none of its own).
    """
    import numpy as np

    if bits:
        return np.dtype(f"uint{dtype.itemsize * 8}")
    try:
        return np.dtype(dtype.numpy_name)
    except TypeError:
        pass
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError(
            f"numpy has no {dtype.name}; install ml_dtypes for it, or pass bits=True "
            f"for the raw uint{dtype.itemsize * 8} bit patterns"
        ) from None
    return np.dtype(getattr(ml_dtypes, dtype.numpy_name))


def _shape_of(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a tuple of ints, not {shape!r}") from None
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            raise ValueError(f"shape {shape!r}: every extent must be an int >= 0")
    return dims


class DeviceArray:
    """GPU memory holding ``shape`` elements of ``dtype``, row-major and compact.

    Made by :meth:`Device.empty` and :meth:`Device.to_device`. Freed exactly once:
    on :meth:`close`, when the array is garbage-collected, or when its device closes.
    Offers ``__cuda_array_interface__`` and ``__dlpack__``, so torch, CuPy and Numba
    can view it without a copy.

    For launchers: ``address`` is the device address (0 once closed, where ``ptr``
    raises instead) and ``launch_key`` is ``launch_key(device, dtype)`` while the array
    is open and holds at least one element, else None.
    """

    address: int
    launch_key: tuple[Device, DType] | None

    def __init__(self, device: Device, shape: Any, dtype: Any) -> None:
        self.device = device
        self.shape = _shape_of(shape)
        self._dtype = resolve_dtype(dtype)
        self.size = math.prod(self.shape)
        self.nbytes = self.size * self._dtype.itemsize
        self._ptr = 0
        if self.nbytes:
            device._activate()
            self._ptr = int(check("cuMemAlloc", driver().cuMemAlloc(self.nbytes)))
        self._finalizer = weakref.finalize(self, _free, device, self._ptr)
        self.address = self._ptr
        self.launch_key = launch_key(device, self._dtype) if self.nbytes else None
        device._track(self)

    # --- what it is -------------------------------------------------------------------

    @property
    def dtype(self) -> str:
        """The canonical element type name, e.g. ``'f32'``."""
        return self._dtype.name

    @property
    def itemsize(self) -> int:
        return self._dtype.itemsize

    @property
    def ptr(self) -> int:
        """The device address; raises once the array is closed."""
        if not self._finalizer.alive:
            raise ValueError("this DeviceArray is closed")
        return self._ptr

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d DeviceArray")
        return self.shape[0]

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"ptr={self._ptr:#x}"
        return f"<runtime.DeviceArray shape={self.shape} dtype={self.dtype} {state}>"

    # --- copies -----------------------------------------------------------------------

    def copy_from_host(self, array: Any) -> DeviceArray:
        """Copy a numpy array of the same size in bytes into this array (synchronous)."""
        import numpy as np

        host = np.asarray(array, order="C")  # ascontiguousarray would make 0-d arrays 1-d
        check_byte_order(host)
        if host.nbytes != self.nbytes:
            raise ValueError(f"host array has {host.nbytes} bytes, this DeviceArray {self.nbytes}")
        if self.nbytes:
            self.device._activate()
            check("cuMemcpyHtoD", driver().cuMemcpyHtoD(self.ptr, host.ctypes.data, self.nbytes))
        return self

    def to_numpy(self, bits: bool = False) -> np.ndarray:
        """Copy to a new numpy array (synchronous; waits for work on the default stream).

        ``bits=True`` returns the raw bit patterns as unsigned integers, which needs
        no ml_dtypes for bf16 and fp8.
        """
        import numpy as np

        out = np.empty(self.shape, dtype=numpy_dtype(self._dtype, bits))
        if self.nbytes:
            self.device._activate()
            check("cuMemcpyDtoH", driver().cuMemcpyDtoH(out.ctypes.data, self.ptr, self.nbytes))
        return out

    def fill_bytes(self, value: int) -> DeviceArray:
        """Set every byte to ``value`` (0..255), e.g. to poison an output before a test."""
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
            raise ValueError(f"fill_bytes takes a byte value 0..255, not {value!r}")
        if self.nbytes:
            self.device._activate()
            check("cuMemsetD8", driver().cuMemsetD8(self.ptr, value, self.nbytes))
        return self

    # --- interop ----------------------------------------------------------------------

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        typestr = self._dtype.typestr or f"|V{self.itemsize}"
        return {
            "shape": self.shape,
            "typestr": typestr,
            "data": (self.ptr, False),
            "strides": None,
            "version": 3,
            "stream": None,
        }

    def __dlpack_device__(self) -> tuple[int, int]:
        return (KDL_CUDA, self.device.ordinal)

    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """A DLPack capsule viewing this memory (legacy ``dltensor``, no copy).

        The runtime does not track which streams wrote the array, so when the
        consumer names a stream it waits for the whole device to be idle first.
        """
        if copy:
            raise BufferError("DeviceArray.__dlpack__ does not copy; pass copy=None or False")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"DeviceArray lives on {self.__dlpack_device__()}, not {dl_device}")
        if stream is not None and stream != -1:
            self.device.synchronize()
        return to_dlpack_capsule(self, self.ptr, self.shape, self._dtype, self.device.ordinal)

    # --- lifetime ---------------------------------------------------------------------

    def close(self) -> None:
        """Free the memory now; idempotent. Views handed to other libraries become invalid."""
        self.launch_key = None  # first: no launch may pick up the address once it is freed
        self.address = 0
        self._finalizer()

    def __enter__(self) -> DeviceArray:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _free(device: Device, ptr: int) -> None:
    if ptr and device._closing_or_open():
        device._activate()
        check("cuMemFree", driver().cuMemFree(ptr))
