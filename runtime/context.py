"""A GPU's primary context, as everything the runtime makes on that GPU uses it.

Arrays, streams, events, modules and graphs each hold their :class:`runtime.Device`
and reach the driver through its ``context``: :meth:`Context.activate` before a call,
:attr:`Context.usable` before a handle is given back (never after the device closed,
nor in a forked child, whose handles are the parent's), :meth:`Context.track` so the
device frees them when it closes. These are the only calls one runtime object makes on
another's behalf.
"""

from __future__ import annotations

import weakref
from typing import Any

from ._driver import FORKED_MESSAGE, check, driver
from .errors import ForkedProcessError

__all__ = ["Context"]


class Context:
    """The primary context of device ``ordinal``, retained once.

    ``state`` is "open", "closing" (its device is freeing what it made), "closed", or
    "forked" (this is a child of the process that opened it). ``device`` is the
    ``CUdevice`` and ``handle`` the ``CUcontext``.
    """

    def __init__(self, ordinal: int) -> None:
        drv = driver()
        self.ordinal = ordinal
        self.device = check("cuDeviceGet", drv.cuDeviceGet(ordinal))
        self.handle = check("cuDevicePrimaryCtxRetain", drv.cuDevicePrimaryCtxRetain(self.device))
        self._handle_int = int(self.handle)
        self.state = "open"
        self._resources: weakref.WeakSet[Any] = weakref.WeakSet()

    def activate(self) -> None:
        """Make this context current on the calling thread (one query where it is), or
        raise: the device is closed, or this is a forked child."""
        if self.state != "open" and self.state != "closing":
            if self.state == "forked":
                raise ForkedProcessError(FORKED_MESSAGE, "fork")
            raise ValueError(f"Device {self.ordinal} is closed")
        drv = driver()
        current = check("cuCtxGetCurrent", drv.cuCtxGetCurrent())
        if int(current) != self._handle_int:
            check("cuCtxSetCurrent", drv.cuCtxSetCurrent(self.handle))

    @property
    def usable(self) -> bool:
        """Whether this process may still give the context's handles back: not after the
        device closed, and not in a forked child (the parent owns them)."""
        return self.state == "open" or self.state == "closing"

    def track(self, resource: Any) -> None:
        """Free ``resource`` (its ``close()``) when the device closes; held weakly."""
        self._resources.add(resource)

    def tracked(self) -> list[Any]:
        """The resources still alive, in no particular order."""
        return list(self._resources)

    def release(self) -> None:
        """Release the primary context (once; the device is closed)."""
        self.state = "closed"
        check("cuDevicePrimaryCtxRelease", driver().cuDevicePrimaryCtxRelease(self.device))

    def __repr__(self) -> str:
        return f"<runtime.Context of device {self.ordinal}: {self.state}>"
