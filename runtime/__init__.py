"""runtime: load, check and launch ptxgen kernels through the CUDA driver API.

>>> import ptxgen, runtime
>>> if runtime.is_available():
...     dev = runtime.Device(0)
...     kernel = ptxgen.ChannelCatBackward("f32", 128)
...     fn = dev.load(kernel).function
...     # fn.launch(kernel.grid(n_spatial, chunk_c), kernel.block, (dy, dx, chunk_c, c_total, offset))

Importing this package never touches the driver; the first :class:`Device` does.
"""

from __future__ import annotations

from ._driver import check, driver
from .device import Device
from .errors import CudaError, CudaUnavailable, ForkedProcessError, PtxLoadError
from .graph import Graph, KernelNode
from .launch import PreparedLaunch, check_int_pointers
from .layout import ArgumentLayout
from .memory import DeviceArray
from .module import Function, Module
from .ops import channel_cat_backward, channel_cat_forward
from .stream import Event, Stream

__all__ = [
    "ArgumentLayout",
    "CudaError",
    "CudaUnavailable",
    "Device",
    "DeviceArray",
    "Event",
    "ForkedProcessError",
    "Function",
    "Graph",
    "KernelNode",
    "Module",
    "PreparedLaunch",
    "PtxLoadError",
    "Stream",
    "channel_cat_backward",
    "channel_cat_forward",
    "check_int_pointers",
    "is_available",
    "unavailable_reason",
]


def unavailable_reason() -> str | None:
    """``None`` if a CUDA GPU can be used here, else one line saying why not."""
    try:
        count = check("cuDeviceGetCount", driver().cuDeviceGetCount())
    except CudaError as err:  # CudaUnavailable included
        return str(err).splitlines()[0]
    except Exception as err:  # never let a probe raise
        return f"the CUDA driver could not be queried: {err}"
    return None if count > 0 else "the CUDA driver reports no GPUs"


def is_available() -> bool:
    """True when the driver loads and at least one GPU is visible. Never raises."""
    return unavailable_reason() is None
