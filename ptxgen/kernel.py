"""The Kernel protocol: what a launcher needs to know about a kernel.

It re-imagines the ``Kernel`` trait of teenygrad: a name, a readable ``id``, the
sources, the PTX entry symbol, a content hash to cache compiled modules by, and the
typed launch arguments. The classes in :mod:`ptxgen.channel_cat` satisfy it, and so
does any user object that carries its own hand-written PTX.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .args import Pointer, Scalar

__all__ = ["Kernel"]


@runtime_checkable
class Kernel(Protocol):
    """Anything the runtime can load and launch."""

    @property
    def name(self) -> str:
        """The kernel function's name, e.g. ``"channel_cat_backward"``."""
        ...

    @property
    def id(self) -> str:
        """Readable identifier: name, dtype and constants joined by ``__``."""
        ...

    @property
    def block_size(self) -> int: ...

    @property
    def kernel_source(self) -> str:
        """Module header and the kernel body."""
        ...

    @property
    def entry_point_source(self) -> str:
        """The ``.entry`` wrapper that reads the parameters."""
        ...

    @property
    def source(self) -> str:
        """``kernel_source + "\\n\\n" + entry_point_source``: what is loaded."""
        ...

    @property
    def entry_point_name(self) -> str:
        """The PTX symbol to launch: ``f"{name}_entry_point"``."""
        ...

    @property
    def content_hash(self) -> str:
        """sha256 hex of ``source``: the cache key for loaded modules."""
        ...

    @property
    def target(self) -> str: ...

    @property
    def ptx_version(self) -> str: ...

    @property
    def arg_names(self) -> tuple[str, ...]: ...

    @property
    def arg_types(self) -> tuple[Pointer | Scalar, ...]: ...

    @property
    def block(self) -> tuple[int, int, int]: ...

    def grid(self, n_spatial: int, chunk_c: int) -> tuple[int, int, int]: ...
