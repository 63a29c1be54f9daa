"""The Kernel protocol, and a base class that gives a kernel everything derivable.

The protocol re-imagines teenygrad's ``Kernel`` trait (the seed project this one
started from): what a loader and a checked launcher need, and nothing specific to
one kernel. Geometry (how many CTAs for which shape) belongs to each kernel class:
``ChannelCatBackward.grid(n_spatial, chunk_c)``.

:class:`KernelBase` derives ``source``, ``entry_point_name``, ``content_hash``
(computed once) and ``param_layout``, and memoises construction: the same class
and arguments give the same object, emitted once. :class:`PtxKernel` wraps PTX a
person wrote, so hand-written kernels load and launch like emitted ones.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Hashable, Sequence
from functools import cached_property
from typing import Any, ClassVar, Protocol, runtime_checkable

from .args import ArgType, ParamSlot, Pointer, Scalar, param_layout
from .targets import isa_key, target_capability

__all__ = ["KERNEL_MEMBERS", "Kernel", "KernelBase", "PtxKernel", "conformance_problems"]


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
    def kernel_source(self) -> str:
        """Module header and the kernel body."""
        ...

    @property
    def entry_point_source(self) -> str:
        """The ``.entry`` that reads the parameters."""
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
    def target(self) -> str:
        """The ``.target`` of the PTX, e.g. ``"sm_75"``."""
        ...

    @property
    def ptx_version(self) -> str:
        """The ``.version`` of the PTX, e.g. ``"6.3"``."""
        ...

    @property
    def arg_names(self) -> tuple[str, ...]: ...

    @property
    def arg_types(self) -> tuple[ArgType, ...]: ...

    @property
    def block(self) -> tuple[int, int, int]:
        """The CTA shape the kernel is built for (``.reqntid``)."""
        ...


# The protocol's members, read from the protocol itself: the runtime checks against this.
KERNEL_MEMBERS: tuple[str, ...] = tuple(
    name for name in vars(Kernel) if not name.startswith("_") and isinstance(vars(Kernel)[name], property)
)


def conformance_problems(kernel: object) -> list[str]:
    """What keeps ``kernel`` from being a usable :class:`Kernel`: missing members, wrong
    types, inconsistent derived members. Empty when it conforms."""
    missing = [m for m in KERNEL_MEMBERS if not hasattr(kernel, m)]
    if missing:
        return [f"missing {', '.join(missing)}"]
    k: Any = kernel
    problems = []
    for member in ("name", "id", "kernel_source", "entry_point_source", "source", "entry_point_name",
                   "content_hash", "target", "ptx_version"):  # fmt: skip
        if not isinstance(getattr(k, member), str):
            problems.append(f"{member} is {type(getattr(k, member)).__name__}, not str")
    if problems:
        return problems
    names, types = tuple(k.arg_names), tuple(k.arg_types)
    if len(names) != len(types):
        problems.append(f"{len(names)} arg_names for {len(types)} arg_types")
    bad = [t for t in types if not isinstance(t, (Pointer, Scalar))]
    if bad:
        problems.append(f"arg_types must be ptxgen.Pointer or ptxgen.Scalar, not {bad[0]!r}")
    block = k.block
    if not (isinstance(block, tuple) and len(block) == 3 and all(type(d) is int and d >= 1 for d in block)):
        problems.append(f"block must be a tuple of 3 ints >= 1, not {block!r}")
    if k.entry_point_name != f"{k.name}_entry_point":
        problems.append(f"entry_point_name {k.entry_point_name!r} is not {k.name + '_entry_point'!r}")
    return problems


def wants_dependent_launch(kernel: object) -> bool:
    """Whether ``kernel`` asks to be launched with programmatic stream serialization: its
    ``dependent_launch`` is True (an optional attribute of the protocol; see KernelBase)."""
    return getattr(kernel, "dependent_launch", False) is True


class _Memoised(type):
    """Construction returns the cached object for the same class and ``cache_key``."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        key_of = getattr(cls, "cache_key", None)
        key = key_of(*args, **kwargs) if key_of is not None else None
        if key is None:
            return super().__call__(*args, **kwargs)
        cache: dict[Hashable, Any] = cls.__dict__.get("_instances", {})
        if "_instances" not in cls.__dict__:
            cls._instances = cache  # type: ignore[attr-defined]
        found = cache.get(key)
        if found is not None:
            return found
        with _build_lock:
            found = cache.get(key)
            if found is None:
                found = super().__call__(*args, **kwargs)
                cache[key] = found
        return found


_build_lock = threading.Lock()


class KernelBase(metaclass=_Memoised):
    """What every kernel derives the same way; a subclass writes only what is its own.

    A subclass sets ``name`` (class attribute) and, in ``__init__``, the attributes
    ``id``, ``kernel_source``, ``entry_point_source``, ``target``, ``ptx_version``,
    ``arg_names``, ``arg_types`` and ``block``. It may define a classmethod
    ``cache_key(*args, **kwargs)`` returning a hashable key of its normalised
    arguments: then constructing it twice with the same arguments returns the same
    object, emitted once.

    ``dependent_launch`` (False here): True for a kernel whose every thread waits in
    ``griddepcontrol.wait`` for the previous grid before touching memory; runtimes may
    then launch it with programmatic stream serialization (sm_90+), which overlaps its
    launch with its predecessor's run.
    """

    dependent_launch: bool = False
    name: ClassVar[str]
    id: str
    kernel_source: str
    entry_point_source: str
    target: str
    ptx_version: str
    arg_names: tuple[str, ...]
    arg_types: tuple[ArgType, ...]
    block: tuple[int, int, int]

    @cached_property
    def source(self) -> str:
        return self.kernel_source + "\n\n" + self.entry_point_source

    @property
    def entry_point_name(self) -> str:
        return f"{self.name}_entry_point"

    @cached_property
    def content_hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    @cached_property
    def param_layout(self) -> tuple[ParamSlot, ...]:
        """Where each argument sits in the parameter buffer (see :func:`ptxgen.args.param_layout`)."""
        return param_layout(self.arg_names, self.arg_types)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KernelBase) or type(other) is not type(self):
            return NotImplemented
        return other is self or (
            other.content_hash == self.content_hash
            and other.arg_types == self.arg_types
            and other.arg_names == self.arg_names
            and other.block == self.block
        )

    def __hash__(self) -> int:
        return hash((type(self), self.content_hash))


class PtxKernel(KernelBase):
    """A kernel from PTX text a person wrote, typed by its launch arguments.

    ``ptx`` must define ``.entry <name>_entry_point``; it is the
    ``entry_point_source``, and ``kernel_source`` holds ``header`` (comments, say).
    The target and PTX version are read from the text's ``.target`` and ``.version``
    unless given.
    """

    def __init__(
        self,
        name: str,
        ptx: str,
        arg_names: Sequence[str],
        arg_types: Sequence[ArgType],
        block: tuple[int, int, int] | int,
        *,
        header: str = "",
        kernel_id: str | None = None,
    ) -> None:
        self.name = name  # type: ignore[misc]
        self.id = kernel_id or name
        self.kernel_source = header
        self.entry_point_source = ptx
        self.arg_names = tuple(arg_names)
        self.arg_types = tuple(arg_types)
        self.block = (block, 1, 1) if isinstance(block, int) else tuple(block)  # type: ignore[assignment]
        self.target, self.ptx_version = _read_target_and_version(ptx)
        problems = conformance_problems(self)
        if f".entry {self.entry_point_name}" not in ptx:
            problems.append(f"the PTX defines no .entry {self.entry_point_name}")
        if problems:
            raise ValueError(f"PtxKernel {name!r}: {'; '.join(problems)}")


def _read_target_and_version(ptx: str) -> tuple[str, str]:
    target = version = None
    for line in ptx.splitlines():
        words = line.split("//")[0].split()
        if len(words) >= 2 and words[0] == ".target":
            target = words[1].rstrip(",")
        elif len(words) >= 2 and words[0] == ".version":
            version = words[1]
    if target is None or version is None:
        raise ValueError("the PTX must carry .version and .target lines")
    target_capability(target)  # raises for a target that names no compute capability
    isa_key(version)
    return target, version
