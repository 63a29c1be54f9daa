"""Loading the CUDA driver lazily and checking every call.

Importing :mod:`runtime` touches nothing; the first call that needs the driver
loads ``cuda.bindings.driver`` and runs ``cuInit``. Every driver call goes through
:func:`check`, which unpacks cuda-bindings' ``(err, *values)`` tuples the way
cuda.core's ``handle_return`` does and raises :class:`CudaError` on failure.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from types import ModuleType
from typing import Any

from .errors import CudaError, CudaUnavailable, ForkedProcessError

_lock = threading.Lock()
_driver: ModuleType | None = None
# Why the driver could not be loaded, kept as the exception's arguments rather than the
# exception: re-raising one cached object would chain every caller's frames onto its
# traceback (it grew without bound while no GPU was present, and printed tracebacks
# showed earlier, unrelated calls). Each caller gets a fresh exception instead.
_failure: tuple[str, str, int, str] | None = None

_LIBCUDA = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"

FORKED_MESSAGE = (
    "this process is a fork of one that had initialised CUDA, and CUDA cannot be used in such "
    "a child: start workers with multiprocessing's 'spawn' or 'forkserver' method, or fork "
    "before the first runtime call"
)
forked = False  # set in the child of a fork made after CUDA was initialised


def _after_fork_in_child() -> None:
    """A child forked after ``cuInit`` inherits a driver state it must not touch: the
    driver's calls there fail or hang. Every runtime entry point then raises instead."""
    global _driver, _failure, _lock, forked
    _lock = threading.Lock()  # the parent may have held it mid-call
    if _driver is not None:
        forked = True
        _driver = None
        _failure = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


INSTALL_RUNTIME = "pip install -e '.[runtime]' from a clone, or pip install cuda-bindings numpy"


def _bindings_missing(err: ImportError) -> str:
    """One line for a cuda-bindings that cannot be imported: the light install (``pip
    install .``) has none, and saying only that the driver is missing would hide it."""
    if isinstance(err, ModuleNotFoundError) and err.name in ("cuda", "cuda.bindings"):
        return f"cuda-bindings is not installed; runtime needs it to load and launch: {INSTALL_RUNTIME}"
    return f"cuda-bindings is not importable ({err}); reinstall it: {INSTALL_RUNTIME}"


def _load() -> ModuleType:
    no_driver = None
    try:
        ctypes.CDLL(_LIBCUDA)
    except OSError as err:
        reason = str(err).split(":")[-1].strip() or "not found"
        no_driver = f"no NVIDIA driver found ({_LIBCUDA}: {reason}); this machine cannot run CUDA kernels"
    try:
        from cuda.bindings import driver
    except ImportError as err:
        # cuda-bindings first: it is what the install lacks. A missing driver as well is said after it.
        raise CudaUnavailable(_bindings_missing(err) + (f"; also {no_driver}" if no_driver else "")) from None
    except Exception:
        if no_driver is None:
            raise
        raise CudaUnavailable(no_driver) from None
    if no_driver is not None:
        raise CudaUnavailable(no_driver)
    try:
        (err,) = driver.cuInit(0)
    except Exception as exc:  # cuda.pathfinder raises its own errors when libcuda is odd
        raise CudaUnavailable(f"the CUDA driver could not be loaded: {exc}") from None
    if err:
        name, text = error_strings(driver, err)
        if int(err) == int(driver.CUresult.CUDA_ERROR_NO_DEVICE):
            raise CudaUnavailable(f"no CUDA GPU found (cuInit: {name}): {text}", "cuInit", int(err), name)
        raise CudaUnavailable(
            f"the CUDA driver did not start (cuInit: {name}): {text}", "cuInit", int(err), name
        )
    return driver


def driver() -> ModuleType:
    """``cuda.bindings.driver``, initialised; raises :class:`CudaUnavailable` if it cannot be."""
    global _driver, _failure
    if _driver is not None:
        return _driver
    if forked:
        raise ForkedProcessError(FORKED_MESSAGE, "fork")
    with _lock:
        if _driver is None:
            if _failure is None:
                try:
                    _driver = _load()
                except CudaUnavailable as err:
                    _failure = (str(err), err.call, err.code, err.name)
            if _failure is not None:
                raise CudaUnavailable(*_failure) from None
    return _driver


def error_strings(drv: ModuleType, err: Any) -> tuple[str, str]:
    """``cuGetErrorName`` and ``cuGetErrorString`` of ``err``, never raising."""
    try:
        e1, name = drv.cuGetErrorName(err)
        e2, text = drv.cuGetErrorString(err)
    except Exception:
        return f"CUresult {int(err)}", "unknown error"
    name = name.decode() if not e1 and name else f"CUresult {int(err)}"
    text = text.decode() if not e2 and text else "unknown error"
    return name, text


def raise_error(call: str, err: Any) -> None:
    drv = driver()
    name, text = error_strings(drv, err)
    raise CudaError(call, int(err), name, text)


def check(call: str, result: tuple) -> Any:
    """Unpack ``(err, *values)``: raise on error, else return the value(s).

    One value comes back bare, several as a tuple, none as ``None``.
    """
    err = result[0]
    if err:  # CUresult is an int enum; CUDA_SUCCESS is 0
        raise_error(call, err)
    if len(result) == 2:
        return result[1]
    return result[1:] if len(result) > 2 else None


def call(name: str, *args: Any) -> Any:
    """Call the driver function ``name`` with ``args`` and :func:`check` it."""
    drv = driver()
    return check(name, getattr(drv, name)(*args))
