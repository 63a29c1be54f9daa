"""Which dtype-like objects resolve, and the ones refused: big-endian numpy dtypes
(same name as the native ones, swapped bytes)."""

from __future__ import annotations

import copy
import pickle
from types import SimpleNamespace

import pytest

import ptxgen
import runtime
from ptxgen.dtypes import DTYPES, resolve_dtype

np = pytest.importorskip("numpy")


@pytest.mark.parametrize("spelling", [">f4", ">f2", ">i8", ">u2", ">f8"])
def test_big_endian_numpy_dtypes_are_refused(spelling):
    dtype = np.dtype(spelling)
    assert dtype.name in ("float32", "float16", "int64", "uint16", "float64")  # what fooled the lookup
    with pytest.raises(
        ValueError, match=f"dtype '{spelling}' is big-endian; accepted: little-endian or native"
    ):
        ptxgen.resolve_dtype(dtype)
    with pytest.raises(ValueError, match="is big-endian"):
        ptxgen.ChannelCatBackward(dtype, 128)


@pytest.mark.parametrize(
    "spelling, name",
    [("<f4", "f32"), ("=f2", "f16"), ("<i8", "i64"), (">u1", "u8"), ("|i1", "i8"), ("float64", "f64")],
)
def test_little_endian_native_and_single_byte_dtypes_resolve(spelling, name):
    assert ptxgen.resolve_dtype(np.dtype(spelling)).name == name


def test_big_endian_host_arrays_are_refused_before_anything_is_allocated():
    swapped = np.arange(6, dtype=">f4").reshape(2, 3)
    nothing = SimpleNamespace()  # a device without a driver: any use of it would fail
    with pytest.raises(ValueError, match="host array dtype '>f4' is big-endian"):
        runtime.Device.to_device(nothing, swapped)
    # Reinterpreting the bits of a big-endian array is refused too: they would land swapped.
    with pytest.raises(ValueError, match="host array dtype '>u2' is big-endian"):
        runtime.Device.to_device(nothing, swapped.view(">u2"), dtype="bf16")
    fake_array = SimpleNamespace(nbytes=swapped.nbytes)
    with pytest.raises(ValueError, match="is big-endian"):
        runtime.DeviceArray.copy_from_host(fake_array, swapped)


def test_ml_dtypes_resolve():
    ml = pytest.importorskip("ml_dtypes", reason="ml_dtypes is part of the test extra")
    assert ptxgen.resolve_dtype(np.dtype(ml.bfloat16)).name == "bf16"
    assert ptxgen.resolve_dtype(ml.bfloat16).name == "bf16"
    assert ptxgen.resolve_dtype(np.dtype(ml.float8_e4m3fn)).name == "e4m3"
    assert ptxgen.resolve_dtype(ml.float8_e5m2).name == "e5m2"
    with pytest.raises(ValueError, match="unknown dtype 'float8_e4m3fnuz'"):
        ptxgen.resolve_dtype(ml.float8_e4m3fnuz)


class TorchLikeDtype:
    """What ptxgen sees of a torch dtype: its type lives in the ``torch`` module and
    ``str()`` is ``torch.<name>``. torch itself is a multi-GB install the test extra does
    not carry, and a test that needs it would skip with the README's set-up. The GPU
    suite launches on real torch tensors (test_gpu_interop.py)."""

    __module__ = "torch"

    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return f"torch.{self.name}"


@pytest.mark.parametrize(
    "name, canonical",
    [("float32", "f32"), ("bfloat16", "bf16"), ("half", "f16"), ("float8_e5m2", "e5m2"), ("uint8", "u8")],
)
def test_torch_dtypes_resolve_by_name(name, canonical):
    assert ptxgen.resolve_dtype(TorchLikeDtype(name)).name == canonical


def test_torch_dtypes_without_kernels_are_refused():
    with pytest.raises(ValueError, match=r"unknown dtype 'torch\.complex64'"):
        ptxgen.resolve_dtype(TorchLikeDtype("complex64"))


def test_each_dtype_is_one_object_through_copies_and_pickles():
    """Equality and hashing are by identity (the ops key their calls by dtype), so a copy
    or an unpickled DType must be the table's own object."""
    for dtype in DTYPES.values():
        for again in (copy.copy(dtype), copy.deepcopy(dtype), pickle.loads(pickle.dumps(dtype))):
            assert again is dtype
        assert resolve_dtype(dtype.name) is dtype and hash(dtype) == object.__hash__(dtype)
    assert DTYPES["f16"] != DTYPES["bf16"] and len(set(DTYPES.values())) == len(DTYPES)
