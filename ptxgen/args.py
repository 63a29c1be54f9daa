"""Launch-argument types: one object per kernel parameter.

An argument type is the one source of truth for a parameter: it gives the PTX
signature its ``.param`` type, ``str()`` reads like the seed's Rust ``Args``
(``*mut f32``, ``i32``), and the launcher packs values from its ``size``,
``ctype_code`` and range, never from the Python value it is handed.
"""

from __future__ import annotations

from dataclasses import dataclass

from .dtypes import DType, resolve_dtype

__all__ = ["ArgType", "ParamSlot", "Pointer", "Scalar", "param_buffer_size", "param_layout"]


@dataclass(frozen=True)
class Pointer:
    """A device pointer to elements of ``dtype``; packed as a 64-bit address.

    ``writes`` says whether the kernel stores through it: a read-only array may be
    passed only where ``writes`` is False.
    """

    dtype: DType
    writes: bool = True

    ptx_type = "u64"
    size = 8
    is_pointer = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", resolve_dtype(self.dtype))

    @property
    def struct_format(self) -> str:
        return "Q"

    @property
    def min(self) -> int:
        return 0

    @property
    def max(self) -> int:
        return (1 << 64) - 1

    def __str__(self) -> str:
        return f"*mut {self.dtype.name}"


_SCALARS = {
    # name: (bits, signed, struct format, the PTX type it is declared as by default)
    "i32": (32, True, "i", "s32"),
    "u32": (32, False, "I", "u32"),
    "i64": (64, True, "q", "s64"),
    "u64": (64, False, "Q", "u64"),
}


@dataclass(frozen=True)
class Scalar:
    """An integer passed by value.

    ``name`` is the API type (``i32``, as the seed's ``Args`` say); ``ptx_type`` is how
    the kernel declares and reads it. Where they differ, as for the seed's ``i32``
    read as ``.u32``, a value must be representable in both: 0 <= v < 2**31.
    """

    name: str
    ptx_type: str = ""

    is_pointer = False

    def __post_init__(self) -> None:
        if self.name not in _SCALARS:
            raise ValueError(f"unknown scalar type {self.name!r}; accepted: {', '.join(_SCALARS)}")
        ptx = self.ptx_type or _SCALARS[self.name][3]
        if ptx not in ("s32", "u32", "b32", "s64", "u64", "b64"):
            raise ValueError(f"unknown PTX parameter type {ptx!r}")
        if int(ptx[1:]) != _SCALARS[self.name][0]:
            raise ValueError(f"{self.name} cannot be passed as .{ptx}: sizes differ")
        object.__setattr__(self, "ptx_type", ptx)

    @property
    def size(self) -> int:
        return _SCALARS[self.name][0] // 8

    @property
    def struct_format(self) -> str:
        return _SCALARS[self.name][2]

    @property
    def min(self) -> int:
        bits, signed, _, _ = _SCALARS[self.name]
        api_min = -(1 << (bits - 1)) if signed else 0
        return max(api_min, 0) if self.ptx_type[0] == "u" else api_min

    @property
    def max(self) -> int:
        bits, signed, _, _ = _SCALARS[self.name]
        api_max = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1
        ptx_max = (1 << (bits - 1)) - 1 if self.ptx_type[0] == "s" else (1 << bits) - 1
        return min(api_max, ptx_max)

    def __str__(self) -> str:
        return self.name


ArgType = Pointer | Scalar


@dataclass(frozen=True)
class ParamSlot:
    """Where one parameter sits in the kernel's parameter buffer.

    The driver lays ``.param`` values out in declaration order, each at the next
    offset that is a multiple of its alignment (its size, for scalars and pointers),
    exactly as a C struct of the same members would be (the layout
    ``CU_LAUNCH_PARAM_BUFFER_POINTER`` expects and ``cuFuncGetParamInfo`` reports).
    """

    name: str
    type: ArgType
    offset: int
    size: int
    align: int


def param_layout(
    arg_names: tuple[str, ...] | list[str], arg_types: tuple[ArgType, ...] | list[ArgType]
) -> tuple[ParamSlot, ...]:
    """The parameter buffer layout of a kernel: one :class:`ParamSlot` per parameter.

    >>> types = (Pointer("f32"), Scalar("i32"), Pointer("f32"))
    >>> [(s.name, s.offset, s.size) for s in param_layout(("p", "n", "q"), types)]
    [('p', 0, 8), ('n', 8, 4), ('q', 16, 8)]
    """
    if len(arg_names) != len(arg_types):
        raise ValueError(f"{len(arg_names)} argument names for {len(arg_types)} argument types")
    slots, offset = [], 0
    for name, t in zip(arg_names, arg_types):
        align = t.size
        offset = -(-offset // align) * align
        slots.append(ParamSlot(name, t, offset, t.size, align))
        offset += t.size
    return tuple(slots)


def param_buffer_size(layout: tuple[ParamSlot, ...]) -> int:
    """Bytes of the whole buffer: the end of the last slot, with no padding after it.

    That is the kernel's parameter size as the driver knows it (``cuFuncGetParamInfo``'s
    last offset plus size), and ``CU_LAUNCH_PARAM_BUFFER_SIZE`` must say exactly that: on
    an H200 (driver 580) a buffer rounded up to the widest alignment, as ``sizeof`` of
    the C struct would be, was refused with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES.
    """
    if not layout:
        return 0
    return layout[-1].offset + layout[-1].size
