"""A kernel's argument layout: where each parameter sits in the buffer the driver reads.

Built once per function from ``arg_names`` and ``arg_types`` (through
:func:`ptxgen.args.param_layout`, the one place that knows the PTX rules) and then
confirmed against what the driver says of the loaded code: the parameter count, and
each parameter's offset and size where the driver can report them. A launch packs
its values into one buffer with :attr:`ArgumentLayout.struct` and hands the driver
a ``void**`` holding one address per parameter, pointing into that buffer.
"""

from __future__ import annotations

import ctypes
import re
import struct
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from ptxgen.args import ArgType, ParamSlot, param_buffer_size, param_layout

__all__ = ["ArgumentLayout", "ParamBuffer", "ptx_param_count"]


def ptx_param_count(source: str, entry: str) -> int | None:
    """How many ``.param`` the ``.entry`` called ``entry`` declares in ``source``, or None."""
    match = re.search(rf"\.entry\s+{re.escape(entry)}\s*\(([^)]*)\)", source)
    if match is None:
        return None
    without_comments = re.sub(r"//[^\n]*|/\*.*?\*/", "", match.group(1), flags=re.S)
    return len(re.findall(r"\.param\b", without_comments))


class ParamBuffer:
    """One packed parameter buffer and the ``void**`` array pointing into it.

    ``memory`` is writable (``struct.pack_into`` fills it); ``params`` is the address
    cuLaunchKernel takes as ``kernelParams``. Both stay valid while this object lives.
    Given the layout's ``packer``, ``pack(*values)`` writes ``values`` into ``memory``:
    ``packer.pack_into`` with this buffer and offset 0 bound once, so that a launch hands
    its values on as they are, without putting the buffer and offset in front of them.
    """

    __slots__ = ("_pointers", "_storage", "memory", "pack", "params")

    def __init__(self, size: int, offsets: Sequence[int], packer: struct.Struct | None = None) -> None:
        # 8-byte units, so the buffer starts 8-byte aligned as the widest slot needs.
        self._storage = (ctypes.c_uint64 * max(-(-size // 8), 1))()
        base = ctypes.addressof(self._storage)
        self._pointers = (ctypes.c_void_p * max(len(offsets), 1))(*[base + o for o in offsets])
        self.memory = memoryview(self._storage).cast("B")[:size]
        self.params = ctypes.addressof(self._pointers)
        self.pack: Callable[..., None] | None = (
            partial(packer.pack_into, self.memory, 0) if packer is not None else None
        )

    def slot_addresses(self) -> list[int]:
        """What the ``void**`` holds, read back (for tests and graph updates)."""
        count = len(self._pointers)
        return [ctypes.c_void_p.from_address(self.params + 8 * i).value or 0 for i in range(count)]


class ArgumentLayout:
    """The parameter buffer of one kernel entry: names, types, slots and the packer.

    >>> import ptxgen
    >>> layout = ArgumentLayout(("n", "p"), (ptxgen.Scalar("u32"), ptxgen.Pointer("f32")))
    >>> [(s.name, s.offset, s.size) for s in layout.slots], layout.size
    ([('n', 0, 4), ('p', 8, 8)], 16)
    >>> layout.pack([7, 0x1000]).hex()
    '07000000000000000010000000000000'
    """

    def __init__(self, arg_names: Sequence[str], arg_types: Sequence[ArgType]) -> None:
        self.names: tuple[str, ...] = tuple(arg_names)
        self.types: tuple[ArgType, ...] = tuple(arg_types)
        self.slots: tuple[ParamSlot, ...] = param_layout(self.names, self.types)
        self.size: int = param_buffer_size(self.slots)
        self.offsets: tuple[int, ...] = tuple(s.offset for s in self.slots)
        # Little-endian with explicit pad bytes: the buffer is exactly the C struct of
        # the parameters on every host CUDA runs on (x86-64, aarch64).
        parts, position = ["<"], 0
        for slot in self.slots:
            parts.append("x" * (slot.offset - position) + slot.type.struct_format)
            position = slot.offset + slot.size
        parts.append("x" * (self.size - position))
        self.struct = struct.Struct("".join(parts))

    def __len__(self) -> int:
        return len(self.slots)

    def __repr__(self) -> str:
        inner = ", ".join(f"{s.name}: {s.type} @{s.offset}" for s in self.slots)
        return f"<ArgumentLayout ({inner}), {self.size} bytes>"

    def pack(self, values: Sequence[int]) -> bytes:
        """The buffer for ``values`` (ints, already checked), as the driver will read it."""
        return self.struct.pack(*values)

    def new_buffer(self) -> ParamBuffer:
        return ParamBuffer(self.size, self.offsets, self.struct)

    def check_against_driver(self, drv: Any, handle: Any, entry: str, ptx_source: str | None) -> None:
        """Compare the layout with the parameters the loaded code declares.

        The count comes from ``cuFuncGetParamCount`` where the driver has it, else from
        the ``.entry``'s parameter list in the PTX; offsets and sizes from
        ``cuFuncGetParamInfo`` (CUDA 12.4+). No query goes past the last parameter, so
        compute-sanitizer sees no failing driver call.
        """
        count = _param_count(drv, handle)
        if count is None and ptx_source is not None:
            count = ptx_param_count(ptx_source, entry)
        declared = len(self.slots)
        if count is not None and count != declared:
            raise TypeError(f"{entry}: the PTX declares {count} parameters, arg_types lists {declared}")
        get_info = getattr(drv, "cuFuncGetParamInfo", None)
        if get_info is None:  # bindings before CUDA 12.4 cannot ask
            return
        for index, slot in enumerate(self.slots):
            try:
                err, offset, size = get_info(handle, index)
            except Exception:  # bindings newer than the driver: the symbol is missing
                return
            if err:
                raise TypeError(f"{entry}: arg_types lists {declared} parameters, the PTX fewer")
            if int(size) != slot.size:
                raise TypeError(
                    f"{entry}: parameter {index} ({slot.name}) is {size} bytes in "
                    f"the PTX, but arg_types says {slot.type} ({slot.size} bytes)"
                )
            if int(offset) != slot.offset:
                raise TypeError(
                    f"{entry}: parameter {index} ({slot.name}) is at byte {offset} of the "
                    f"parameter buffer in the PTX, but arg_types puts it at {slot.offset}"
                )


def _param_count(drv: Any, handle: Any) -> int | None:
    """cuFuncGetParamCount where bindings and driver have it (CUDA 13), else None."""
    get_count = getattr(drv, "cuFuncGetParamCount", None)
    if get_count is None:
        return None
    try:
        err, count = get_count(handle)
    except Exception:  # bindings newer than the driver: the symbol is missing
        return None
    return None if err else int(count)
