"""Exceptions raised by the runtime."""

from __future__ import annotations

__all__ = ["STICKY_ERRORS", "CudaError", "CudaUnavailable", "ForkedProcessError", "PtxLoadError"]


# CUresults after which the context is unusable: a kernel faulted, and every later call
# in this process returns the same error (the CUDA driver API's "sticky" errors).
STICKY_ERRORS = frozenset({700, 702, 714, 715, 716, 717, 718, 719})
_STICKY_NOTE = (
    "A kernel faulted: the CUDA context of this process is now unusable, and every later "
    "CUDA call in it fails with this error. Restart the process (memory and modules are lost)."
)


class CudaError(RuntimeError):
    """A CUDA driver call returned something other than ``CUDA_SUCCESS``.

    ``call`` is the driver function, ``code`` the ``CUresult`` value, ``name`` and
    ``description`` what ``cuGetErrorName`` and ``cuGetErrorString`` say of it.
    ``sticky`` is True for errors that leave the context unusable (a kernel fault).
    """

    def __init__(self, call: str, code: int, name: str, description: str, detail: str = "") -> None:
        self.call = call
        self.code = code
        self.name = name
        self.description = description
        self.sticky = code in STICKY_ERRORS
        message = f"{call} failed: {name} ({code}): {description}"
        if self.sticky:
            message += "\n" + _STICKY_NOTE
        super().__init__(f"{message}\n{detail}" if detail else message)


class CudaUnavailable(CudaError):
    """No usable NVIDIA driver or GPU here; the message is one line saying which."""

    def __init__(self, message: str, call: str = "", code: int = -1, name: str = "") -> None:
        self.call, self.code, self.name, self.description = call, code, name, message
        self.sticky = False
        RuntimeError.__init__(self, message)


class PtxLoadError(CudaError):
    """The driver's JIT compiler refused a PTX module.

    Carries the full JIT error and info logs, the kernel's ``id`` and target, and
    the PTX lines the log points at.
    """

    def __init__(
        self,
        call: str,
        code: int,
        name: str,
        description: str,
        *,
        kernel_id: str,
        target: str,
        error_log: str,
        info_log: str,
        ptx_lines: str,
    ) -> None:
        self.kernel_id = kernel_id
        self.target = target
        self.error_log = error_log
        self.info_log = info_log
        self.ptx_lines = ptx_lines
        parts = [f"while loading kernel {kernel_id} (target {target})"]
        if error_log:
            parts.append("JIT error log:\n" + error_log)
        if info_log:
            parts.append("JIT info log:\n" + info_log)
        if ptx_lines:
            parts.append("PTX lines the log points at:\n" + ptx_lines)
        super().__init__(call, code, name, description, "\n".join(parts))


class ForkedProcessError(CudaUnavailable):
    """The process was forked after it had initialised CUDA: the child cannot use CUDA."""
