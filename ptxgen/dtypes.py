"""The element types ptxgen knows, in one table.

Each entry separates how an element sits in memory (the type suffix of ``ld``/``st``)
from the register that holds it while the kernel works on it. PTX does have 8-bit
registers (``.reg .b8`` assembles), but only ``ld``, ``st`` and ``cvt`` take them:
ptxas 13.5 refuses ``mov.u8`` and ``add.u8``. So 8-bit elements are loaded and stored
as ``.b8`` into 16-bit registers, where any later instruction may use them (nvcc does
the same for a ``char``), and f16/bf16 move as plain ``.b16`` bits, since the copy
kernels do no arithmetic on them.

Nothing here imports numpy or any framework: callers may pass numpy dtypes,
numpy scalar types or torch dtypes, and they are recognised by their names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["DTYPES", "DType", "resolve_dtype"]


# eq=False: the table's DTypes are the only ones, so equality is identity and hashing
# is the interpreter's own. The generated __hash__ hashed every field in Python, about a
# microsecond for each array an op's call is keyed by (runtime/op_routes.py).
@dataclass(frozen=True, eq=False)
class DType:
    """One element type: its canonical name and how PTX moves it. One object a type:
    compared and hashed by identity, and copied or unpickled as the table's own."""

    name: str  # canonical, e.g. "bf16"; also what the seed's Rust `Args` spell
    itemsize: int  # bytes per element
    mem_type: str  # ld/st type suffix, e.g. "b16"
    reg_type: str  # register type the element is held in, e.g. "b16"
    dlpack: tuple[int, int]  # (DLDataTypeCode, bits)
    typestr: str | None  # __cuda_array_interface__ typestr, None where it has none
    numpy_name: str  # numpy / ml_dtypes / torch spelling
    aliases: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.name

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return resolve_dtype, (self.name,)


# DLPack type codes (dlpack.h, v1.1): kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4,
# kDLFloat8_e4m3fn 10, kDLFloat8_e5m2 12.
_TABLE = (
    DType("f16", 2, "b16", "b16", (2, 16), "<f2", "float16", ("float16", "half")),
    DType("bf16", 2, "b16", "b16", (4, 16), None, "bfloat16", ("bfloat16",)),
    DType("f32", 4, "f32", "f32", (2, 32), "<f4", "float32", ("float32", "single")),
    DType("f64", 8, "f64", "f64", (2, 64), "<f8", "float64", ("float64", "double")),
    DType("i8", 1, "b8", "b16", (0, 8), "|i1", "int8", ("int8",)),
    DType("i16", 2, "s16", "s16", (0, 16), "<i2", "int16", ("int16", "short")),
    DType("i32", 4, "s32", "s32", (0, 32), "<i4", "int32", ("int32",)),
    DType("i64", 8, "s64", "s64", (0, 64), "<i8", "int64", ("int64", "long")),
    DType("u8", 1, "b8", "b16", (1, 8), "|u1", "uint8", ("uint8",)),
    DType("u16", 2, "u16", "u16", (1, 16), "<u2", "uint16", ("uint16",)),
    DType("u32", 4, "u32", "u32", (1, 32), "<u4", "uint32", ("uint32",)),
    DType("u64", 8, "u64", "u64", (1, 64), "<u8", "uint64", ("uint64",)),
    DType("e4m3", 1, "b8", "b16", (10, 8), None, "float8_e4m3fn",
          ("float8_e4m3fn", "fp8_e4m3", "f8e4m3")),
    DType("e5m2", 1, "b8", "b16", (12, 8), None, "float8_e5m2",
          ("float8_e5m2", "fp8_e5m2", "f8e5m2")),
)  # fmt: skip

DTYPES: dict[str, DType] = {d.name: d for d in _TABLE}

_BY_NAME: dict[str, DType] = {}
for _d in _TABLE:
    for _spelling in (_d.name, *_d.aliases):
        _BY_NAME[_spelling] = _d

_BY_DLPACK: dict[tuple[int, int], DType] = {d.dlpack: d for d in _TABLE}
# DLPack spells fp8 either with its own codes or as kDLFloat with 8 bits on older
# producers; the latter is ambiguous and is refused rather than guessed.
_BY_TYPESTR: dict[str, DType] = {d.typestr: d for d in _TABLE if d.typestr}
# Little-endian and native-order spellings mean the same on every CUDA host.
for _d in list(_BY_TYPESTR.values()):
    _BY_TYPESTR["=" + _d.typestr[1:]] = _d
    if _d.itemsize == 1:
        _BY_TYPESTR["<" + _d.typestr[1:]] = _d


def accepted_dtypes() -> str:
    return ", ".join(DTYPES)


def _spelling_of(value: object) -> str | None:
    """The name a dtype-like object goes by, without importing its library."""
    if isinstance(value, str):
        return value
    if isinstance(value, type):
        # numpy.float32 and ml_dtypes.bfloat16 are classes; Python's own float and
        # int are not dtypes (float is f64 to numpy but f32 to torch), so refuse them.
        if value.__module__.split(".")[0] in ("numpy", "ml_dtypes"):
            return value.__name__
        return None
    if type(value).__module__.split(".")[0] == "torch":
        return str(value)  # torch.float32 prints as "torch.float32"
    name = getattr(value, "name", None)
    if isinstance(name, str) and isinstance(getattr(value, "itemsize", None), int):
        return name  # numpy.dtype, including ml_dtypes' extension dtypes
    return None


def _check_byte_order(value: object) -> None:
    """Refuse a big-endian numpy dtype: its ``name`` is the same as the native one's
    (``>f4`` is ``float32``), but its bytes are swapped on every CUDA host, so a copy
    would silently put wrong values on the device."""
    typestr = getattr(value, "str", None)  # numpy.dtype: '<f4', '>f4', '|u1'
    if isinstance(typestr, str) and typestr.startswith(">") and not isinstance(value, type):
        raise ValueError(
            f"dtype {typestr!r} is big-endian; accepted: little-endian or native byte order "
            f"(convert with array.astype(array.dtype.newbyteorder('<')))"
        )


def resolve_dtype(value: object) -> DType:
    """Turn a dtype name, alias, numpy dtype or torch dtype into a :class:`DType`.

    Raises ``TypeError`` for something that is no dtype at all and ``ValueError``
    for a dtype ptxgen has no kernels for, or a big-endian numpy dtype.
    """
    if isinstance(value, DType):
        return value
    if value.__class__ is str and value in _BY_NAME:  # a name as the table spells it: the common call
        return _BY_NAME[value]
    spelling = _spelling_of(value)
    _check_byte_order(value)
    if spelling is None:
        raise TypeError(
            f"dtype must be a name such as 'f32', a numpy dtype or a torch dtype, "
            f"not {type(value).__name__} {value!r}; accepted names: {accepted_dtypes()}"
        )
    key = spelling.strip()
    if key.startswith("torch."):
        key = key[len("torch.") :]
    found = _BY_NAME.get(key) or _BY_NAME.get(key.lower())
    if found is None:
        raise ValueError(
            f"unknown dtype {spelling!r}; accepted: {accepted_dtypes()} "
            f"(and aliases such as float32, bfloat16, int64, float8_e4m3fn)"
        )
    return found


def dtype_from_dlpack(code: int, bits: int, lanes: int = 1) -> DType | None:
    """The DType for a DLPack ``DLDataType``, or None if ptxgen has none."""
    if lanes != 1:
        return None
    return _BY_DLPACK.get((code, bits))


def dtype_from_typestr(typestr: str) -> DType | None:
    """The DType for a ``__cuda_array_interface__`` typestr such as ``'<f4'``."""
    return _BY_TYPESTR.get(typestr)
