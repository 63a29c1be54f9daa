"""A GPU and its primary context."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from ptxgen.dtypes import resolve_dtype
from ptxgen.kernel import Kernel, conformance_problems
from ptxgen.targets import min_cuda_for_isa, newest_isa_for_cuda, target_capability

from ._driver import check, driver
from .context import Context
from .memory import DeviceArray, check_byte_order, empty_group
from .pool import MemoryPool

__all__ = ["Device"]

_instances: dict[int, Device] = {}
_instances_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """Devices opened by the parent are the parent's: in the child they only refuse."""
    global _instances_lock
    _instances_lock = threading.Lock()
    for device in _instances.values():
        device.context.state = "forked"
        device._lock = threading.RLock()
        for module in list(device._modules.values()):
            module.after_fork()
        device._modules.clear()
    _instances.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def device_of(ordinal: int) -> Device:
    """``Device(ordinal)`` without taking the lock when it is already open: the ops ask
    once per call for the device an array lives on."""
    existing = _instances.get(ordinal)
    if existing is not None and existing.context.state == "open":
        return existing
    return Device(ordinal)


class Device:
    """One GPU. ``Device(0)`` retains its primary context once; ``Device(0)`` again
    returns the same object until it is closed.

    Any thread may use it: every call makes the context current on the calling
    thread first. :meth:`close` frees what it allocated, unloads its modules and
    releases the context.
    """

    ordinal: int

    def __new__(cls, ordinal: int = 0) -> Device:
        if isinstance(ordinal, bool) or not isinstance(ordinal, int):
            raise TypeError(f"device ordinal must be an int, not {type(ordinal).__name__} {ordinal!r}")
        with _instances_lock:
            existing = _instances.get(ordinal)
            if existing is not None and existing.context.state == "open":
                return existing  # the common case: no driver call
            drv = driver()
            count = check("cuDeviceGetCount", drv.cuDeviceGetCount())
            if not 0 <= ordinal < count:
                raise ValueError(
                    f"no CUDA device {ordinal}: this machine has {count} GPU{'s' * (count != 1)}"
                    f" (valid ordinals: {', '.join(map(str, range(count)))})"
                )
            self = super().__new__(cls)
            self._open(ordinal)
            _instances[ordinal] = self
            return self

    def __init__(self, ordinal: int = 0) -> None:
        pass  # all set up in __new__, which may hand back an open instance

    def _open(self, ordinal: int) -> None:
        drv = driver()
        self.ordinal = ordinal
        self.context = Context(ordinal)
        self._lock = threading.RLock()
        self._modules: dict[str, Any] = {}
        self._pool: MemoryPool | None = None
        attr = drv.CUdevice_attribute

        def get(a: Any) -> int:
            return int(check("cuDeviceGetAttribute", drv.cuDeviceGetAttribute(a, self.context.device)))

        self.compute_capability = (
            get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
        )
        self.name = check("cuDeviceGetName", drv.cuDeviceGetName(256, self.context.device))
        self.name = self.name.split(b"\0", 1)[0].decode()
        self.total_memory = int(check("cuDeviceTotalMem", drv.cuDeviceTotalMem(self.context.device)))
        version = int(check("cuDriverGetVersion", drv.cuDriverGetVersion()))
        self.driver_version = (version // 1000, version % 1000 // 10)
        self.multiprocessor_count = get(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        self.max_threads_per_block = get(attr.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
        self.max_block = (
            get(attr.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X),
            get(attr.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y),
            get(attr.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z),
        )
        self.max_grid = (
            get(attr.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X),
            get(attr.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y),
            get(attr.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z),
        )
        self.max_shared_memory_per_block = get(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)

    # --- properties -------------------------------------------------------------------

    @property
    def arch(self) -> str:
        """``'sm_90'`` for compute capability 9.0."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    @property
    def closed(self) -> bool:
        return self.context.state == "closed"

    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        return f"<runtime.Device {self.ordinal}: {self.name} ({self.arch}){state}>"

    # --- context ----------------------------------------------------------------------

    def synchronize(self) -> None:
        """Wait until all work on this device has finished."""
        self.context.activate()
        check("cuCtxSynchronize", driver().cuCtxSynchronize())

    def memory_info(self) -> tuple[int, int]:
        """``(free, total)`` bytes of device memory."""
        self.context.activate()
        free, total = check("cuMemGetInfo", driver().cuMemGetInfo())
        return int(free), int(total)

    # --- memory -----------------------------------------------------------------------

    @property
    def memory_pool(self) -> MemoryPool:
        """The device's stream-ordered pool, made at first use (:mod:`runtime.pool`)."""
        pool = self._pool
        if pool is None:
            with self._lock:
                if self._pool is None:
                    self.context.activate()  # says why: closed, or a forked child
                    self._pool = MemoryPool(self)
                pool = self._pool
        return pool

    def empty(self, shape: Any, dtype: Any, *, stream: Any = None) -> DeviceArray:
        """Uninitialised device memory for ``shape`` elements of ``dtype``, from the
        device's pool, ordered on ``stream`` (default: the legacy default stream). It is
        ready for work queued on that stream after this call; see :mod:`runtime.pool`."""
        return DeviceArray(self, shape, dtype, stream=stream)

    def empty_group(self, shapes: Sequence[Any], dtype: Any, *, stream: Any = None) -> list[DeviceArray]:
        """One uninitialised array per shape of ``shapes`` (a list of tuples), as
        :meth:`empty` makes it, all of ``dtype`` and ordered on ``stream``, in one
        allocation from the pool (each 256-byte aligned, so up to 255 bytes of padding an
        array): one driver allocation and one free for all of them, which is what an op's
        results are made with. An array of no element lies outside it (address 0). The
        memory goes back when the last array holding it is closed or collected, so one
        kept holds the whole allocation, as a view does in torch; ``record_stream`` on
        any of them orders that one free after the stream."""
        return empty_group(self, shapes, dtype, stream=stream)

    def to_device(self, array: Any, dtype: Any = None) -> DeviceArray:
        """Copy a numpy array to the device.

        ``dtype`` defaults to the array's own; give it to reinterpret bits of the same
        width, e.g. ``to_device(bits_u16, dtype="bf16")``.
        """
        import numpy as np

        host = np.asarray(array, order="C")  # ascontiguousarray would make 0-d arrays 1-d
        check_byte_order(host)  # before anything is allocated
        target = resolve_dtype(host.dtype if dtype is None else dtype)
        if host.dtype.itemsize != target.itemsize:
            raise ValueError(
                f"cannot store {host.dtype} ({host.dtype.itemsize} bytes) as {target.name} "
                f"({target.itemsize} bytes)"
            )
        out = DeviceArray(self, host.shape, target)
        return out.copy_from_host(host)

    # --- modules ----------------------------------------------------------------------

    def load(self, kernel: Kernel) -> Any:
        """Load ``kernel``'s PTX (cached by content hash) and return its :class:`Module`."""
        from .module import load_module

        if self.context.state != "open":
            self.context.activate()  # says why: closed, or a forked child
        problems = conformance_problems(kernel)
        if problems:
            raise TypeError(f"{type(kernel).__name__} is not a usable ptxgen.Kernel: {'; '.join(problems)}")
        self._check_compatible(kernel)
        # The PTX decides what is loaded; the typing decides how it is launched, and the
        # kernel's id names the contract its launches are checked against (footprints):
        # kernels of one source may differ there (the row gather's PTX is the same for every
        # set of wide-chunk flags beside a narrow chunk, its checks are not). Two kernel
        # objects with the same source, typing and id share one module.
        key = (
            kernel.content_hash,
            kernel.id,
            kernel.entry_point_name,
            tuple(kernel.arg_types),
            tuple(kernel.arg_names),
            tuple(kernel.block),
        )
        with self._lock:
            module = self._modules.get(key)
            if module is not None and not module.closed:
                return module
            module = self._modules[key] = load_module(self, kernel, key)
            return module

    def forget_module(self, module: Any) -> None:
        """Drop ``module`` from this device's module cache, where it is the one held under
        its ``cache_key`` (a closing module does this; the next load of its kernel loads anew)."""
        with self._lock:
            if self._modules.get(module.cache_key) is module:
                del self._modules[module.cache_key]

    def _check_compatible(self, kernel: Kernel) -> None:
        """Refuse, before the driver sees it, a kernel this GPU or driver cannot run."""
        try:
            wanted = target_capability(kernel.target)
        except ValueError:
            raise ValueError(
                f"kernel {kernel.id}: cannot read a compute capability from target {kernel.target!r}"
            ) from None
        have = self.compute_capability
        suffix = kernel.target[-1] if kernel.target[-1] in "af" else ""
        if wanted > have or (suffix == "a" and wanted != have) or (suffix == "f" and wanted[0] != have[0]):
            raise ValueError(
                f"kernel {kernel.id} targets {kernel.target}, which {self.name} ({self.arch}) "
                f"cannot run; emit it for {self.arch} or an older target (the default sm_75 runs everywhere)"
            )
        needed = min_cuda_for_isa(kernel.ptx_version)
        if needed is not None and needed > self.driver_version:
            supported = newest_isa_for_cuda(self.driver_version)
            raise ValueError(
                f"kernel {kernel.id} is PTX ISA {kernel.ptx_version}, which needs a CUDA "
                f"{needed[0]}.{needed[1]} driver or newer; this driver supports CUDA "
                f"{self.driver_version[0]}.{self.driver_version[1]} (PTX ISA up to {supported})"
            )

    # --- lifetime ---------------------------------------------------------------------

    def close(self) -> None:
        """Free this device's arrays, streams and events, unload its modules, destroy its
        memory pool and release the primary context. Idempotent."""
        with _instances_lock, self._lock:
            if self.context.state != "open":
                return
            self.context.state = "closing"
            try:
                for resource in self.context.tracked():
                    resource.close()
                for module in list(self._modules.values()):
                    module.close()
                self._modules.clear()
                if self._pool is not None:
                    self._pool.close()
            finally:
                if _instances.get(self.ordinal) is self:
                    del _instances[self.ordinal]
                self.context.release()

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
