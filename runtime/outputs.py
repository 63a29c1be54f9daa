"""The arrays an op makes for the results its caller did not pass: of the caller's kind.

A torch tensor in gives torch tensors out, from torch's caching allocator; a CuPy array
gives CuPy arrays, from CuPy's pool; anything else (a :class:`runtime.DeviceArray`, a
Numba array, any ``__cuda_array_interface__`` or DLPack object) gives DeviceArrays from
the device's stream-ordered pool (:mod:`runtime.pool`), all of a call's in one allocation
(:meth:`runtime.Device.empty_group`). Each is allocated on the stream
the op runs on, so its memory is ordered as the allocator that made it orders memory:
the op's writes come after the allocation, and a later free of the result waits for
them. Nothing here is launched or written; an allocation that fails raises before the
op launches anything.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .stream import same_stream
from .strides import dense_strides, describe_order, inverse, permuted

if TYPE_CHECKING:
    from ptxgen.dtypes import DType

    from .device import Device

__all__ = ["array_kind", "new_outputs", "outputs_of", "torch_stream_reader"]


def array_kind(like: Any) -> str:
    """ "torch", "cupy" or "device_array": the kind of results an op given ``like`` returns."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(like, torch.Tensor):
        return "torch"
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(like, cupy.ndarray):
        return "cupy"
    return "device_array"


def new_outputs(
    like: Any,
    device: Device,
    stream: int,
    shapes: Sequence[tuple[int, ...]],
    dtype: DType,
    order: tuple[int, ...] | None = None,
) -> tuple[list[Any], list[int]]:
    """``(arrays, addresses)``: one new, uninitialised array per shape, of ``like``'s
    kind, dtype ``dtype`` (``like``'s), on ``device``, ordered on ``stream``; dense in
    memory ``order`` where one is given (``like``'s, channels_last say), else row-major.
    A DeviceArray is row-major only: an order for one is refused, before anything is
    allocated."""
    results = [(s, dense_strides(s, order or range(len(s)))) for s in shapes]
    return outputs_of(like, device, stream, results, dtype, order)


def outputs_of(
    like: Any,
    device: Device,
    stream: int,
    results: Sequence[tuple[tuple[int, ...], tuple[int, ...]]],
    dtype: DType,
    order: tuple[int, ...] | None,
) -> tuple[list[Any], list[int]]:
    """:func:`new_outputs` given each result's ``(shape, strides)``, dense in ``order``:
    a route's ``results``, worked out once for every call of its kind. The C lane makes
    the results of calls on CuPy arrays and DeviceArrays with it too."""
    # CuPy first: the C lane makes torch's results itself and calls this for CuPy's and
    # DeviceArrays' only.
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(like, cupy.ndarray):
        arrays = _cupy_outputs(cupy, like, stream, results, order)
        return arrays, [a.data.ptr for a in arrays]
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(like, torch.Tensor):
        arrays = _torch_outputs(torch, like, stream, results)
        return arrays, [a.data_ptr() for a in arrays]
    if order is not None:
        raise ValueError(
            f"the results would be runtime.DeviceArrays, which are row-major, and the input is "
            f"{describe_order(order, len(order))}: pass out= arrays in the input's memory order, "
            "or a row-major input"
        )
    arrays = device.empty_group([shape for shape, _ in results], dtype, stream=stream)
    return arrays, [a.ptr for a in arrays]


def torch_stream_reader() -> Callable[[int], int] | None:
    """torch's raw current stream of a device index (one C call, no Stream object), where
    torch is imported and has it; else None."""
    torch = sys.modules.get("torch")
    return getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)


def _torch_current_stream(torch: Any, index: int) -> int:
    raw = torch_stream_reader()
    if raw is not None:
        return int(raw(index))
    return int(torch.cuda.current_stream(index).cuda_stream)


def _torch_outputs(
    torch: Any, like: Any, stream: int, results: Sequence[tuple[tuple[int, ...], tuple[int, ...]]]
) -> list[Any]:
    # new_empty_strided: like's dtype and device, outside autograd (an op's result is a
    # new leaf), dense in the input's memory order in one call: new_empty then permute
    # would take two, and even for a row-major result it costs torch's binding less than
    # new_empty (4.2-4.3 against 4.9-5.1 us a call on an H200's host,
    # lab/data/alloc-probe-04ffd101.json; the lane's allocating concat, over its out= call:
    # 3.1-5.2 us with new_empty, 1.1-2.7 with this, lab/data/alloc-probe-strided-ab.json).
    # torch hands a block to the stream current at allocation: the op's. The C lane makes
    # them the same way, from Route.results.
    def make() -> list[Any]:
        return [like.new_empty_strided(shape, strides) for shape, strides in results]

    if same_stream(_torch_current_stream(torch, like.get_device()), stream):
        return make()
    # torch.cuda.ExternalStream(0) would be a stream of torch's pool, not the default one
    named = (
        torch.cuda.default_stream(like.device)
        if stream in (0, 1)
        else torch.cuda.ExternalStream(stream, device=like.device)
    )
    with torch.cuda.stream(named):
        return make()


def _cupy_outputs(
    cupy: Any,
    like: Any,
    stream: int,
    results: Sequence[tuple[tuple[int, ...], tuple[int, ...]]],
    order: tuple[int, ...] | None,
) -> list[Any]:
    # CuPy's pool keeps an arena per device and stream, the ones current at allocation: like's
    # device and the op's stream. Where both are current already (every call the C lane
    # hands here), nothing is switched; else the stream alone where the device is current,
    # or the device and then the stream (a Device context costs CuPy two runtime calls and
    # a Python object a call). This runs on every allocating call on CuPy arrays, so it
    # reads as little as it can: the C lane's rows missed issue 23's host limit by 0.3-0.7 us
    # while this branch cost 1.3-1.4 us more than cupy.empty itself
    # (lab/data/alloc-state-1fee6bc2.json; 0.6-0.9 since, alloc-state-e9765b6b.json).
    cuda, ndarray, dtype = cupy.cuda, cupy.ndarray, like.dtype
    device = like.data.device_id
    if cuda.runtime.getDevice() == device:
        if same_stream(cuda.get_current_stream().ptr, stream):
            return _cupy_empty(ndarray, dtype, results, order)
        switch_device: Any = contextlib.nullcontext()
    else:
        switch_device = cuda.Device(device)
    with switch_device, _cupy_stream(cupy, stream):
        return _cupy_empty(ndarray, dtype, results, order)


def _cupy_empty(
    ndarray: Any,
    dtype: Any,
    results: Sequence[tuple[tuple[int, ...], tuple[int, ...]]],
    order: tuple[int, ...] | None,
) -> list[Any]:
    # ndarray(shape, dtype) is what cupy.empty calls, without its Python frame; a result in
    # another memory order is made in that order and viewed back in the input's.
    if order is None:
        return [ndarray(shape, dtype) for shape, _ in results]
    back = inverse(order)
    return [ndarray(permuted(shape, order), dtype).transpose(back) for shape, _ in results]


class _StreamHandle:
    """A raw stream handle, as the CUDA stream protocol names one."""

    __slots__ = ("handle",)

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


def _cupy_stream(cupy: Any, stream: int) -> Any:
    """The op's stream as a CuPy stream: its null stream for the legacy default one (0, 1);
    any other handle through ``Stream.from_external`` (CuPy 14 deprecates ``ExternalStream``,
    which older ones have alone)."""
    if stream in (0, 1):
        return cupy.cuda.Stream.null
    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None:
        return from_external(_StreamHandle(stream))
    return cupy.cuda.ExternalStream(stream)
