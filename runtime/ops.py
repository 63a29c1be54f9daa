"""High-level ops: the split of a concatenation's gradient, and the concatenation.

    runtime.channel_cat_backward(dy, sizes, dim=1)  ->  [dx_0, dx_1, ...]
    runtime.channel_cat_forward([x_0, x_1, ...], dim=1)  ->  y

Any rank: the dims before ``dim`` are rows, ``dim`` and the dims after it make one
row's channel extent, so a piece of ``s`` along ``dim`` is ``s * prod(shape[dim+1:])``
contiguous elements of each row. Arrays may be :class:`runtime.DeviceArray` or
anything with ``__cuda_array_interface__`` or DLPack (PyTorch, CuPy, Numba), compact
and row-major.

Every argument is checked before anything is allocated or launched, on one path in two
steps: the arrays are read (:mod:`runtime.op_arrays`) and what their shapes, dtypes,
strides and kinds decide is looked up, or worked out and checked once, as a route
(:mod:`runtime.op_routes`: the fused kernels, or the strided copy); then what depends on
the addresses is checked (alignment, overlap, one device), the results made where not
given, and the route's plan (:mod:`runtime.op_plans`, made once per device and
alignment) launched. Where the extension is built, a call of a kind this path has run
goes through C instead (``runtime._fastlaunch.OpLane``): after each call it ran, this
path hands the lane the call and what it decided (the route, the device, the launch
function), and the lane runs the next call of that kind with the same per-call checks,
or leaves it here. Where it is not built (``_lane`` None) or switched off
(``use_compiled_launch(False)``), this path keeps a step of its own for that
(``_known``): a call of a kind it has run, of row-major torch tensors and DeviceArrays,
is read as plain values, found under the same key, its addresses checked in one pass
and launched; anything that pass does not plainly accept (other arrays, inputs sharing
memory beside an ``out``, a new alignment's first call) goes the whole way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import launch as _launch
from .arrays import cupy_current_stream, cupy_dtype_table, torch_dtype_table
from .device import device_of
from .op_arrays import (
    CUPY,
    TORCH,
    OpArray,
    check_aligned,
    device_for,
    is_sequence,
    known_facts,
    recognise,
)
from .op_plans import (
    cleared_plans,
    compiled_for,
    compiled_strided_for,
    exact_ints,
    plan_for,
)
from .op_routes import Route, clear_routes, join_route, key_of, remembered, route_key, split_route
from .outputs import outputs_of, torch_stream_reader
from .stream import order_after, stream_handle
from .strided_ops import check_disjoint

__all__ = ["channel_cat_backward", "channel_cat_forward", "clear_plans", "plan_for"]

# The ops' calls in C (runtime._fastlaunch.OpLane), tried first, for the kinds of call
# this module's path has run and handed it; None where the extension is not built.
_lane = _launch.compiled_ops()


def _bind_torch(tensor: type) -> None:
    """Lets the C lane read torch tensors, once the array reader has seen torch imported,
    and make their results where torch's current stream is the op's (as
    :func:`runtime.outputs.new_outputs` does), given torch's raw current-stream reader."""
    if _lane is not None:
        _lane.bind_torch(tensor, torch_dtype_table(), torch_stream_reader())


TORCH.when_seen(_bind_torch)


def _bind_cupy(ndarray: type) -> None:
    """Lets the C lane read contiguous CuPy arrays, once the array reader has read one (it
    makes their results with :func:`runtime.outputs.outputs_of`)."""
    if _lane is not None:
        _lane.bind_cupy(ndarray, cupy_dtype_table(), cupy_current_stream)


CUPY.when_seen(_bind_cupy)


def clear_plans() -> None:
    """Forget every plan and remembered shape: the next call of each shape plans again
    (after the planner's settings changed, say). Loaded modules stay with their device."""
    with cleared_plans():
        clear_routes()
        if _lane is not None:
            _lane.forget()


# --- the path: a call's route, then its addresses -------------------------------------------


def addresses_clear(route: Route, ptrs: Sequence[int], given: bool) -> bool:
    """Whether arrays at ``ptrs`` (listed as ``route`` lists them) pass the address checks
    at a glance: each on its element boundary and, with ``out`` given, no two sharing a
    byte. False where a check must look closer: an address off its boundary (an empty
    array's may be), or two arrays that share bytes (inputs may). The one pass both steps
    make on every call: :func:`_launch_route` then runs the full checks, which raise or
    accept; :func:`_known` leaves such a call to it."""
    mask, bounds = route.dtype.itemsize - 1, []
    for ptr, (lo, hi) in zip(ptrs, route.spans):
        if ptr & mask:
            return False
        if given and lo < hi:  # without out, the results made afterwards share no byte
            bounds.append((ptr + lo, ptr + hi))
    # Sorted by address, the arrays share no byte when each starts at or past the end of
    # the one before: the common call's check ends here.
    bounds.sort()
    end = 0
    for start, stop in bounds:
        if start < end:
            return False
        end = stop
    return True


def _launch_route(op: str, route: Route, arrays: list[OpArray], given: bool, like: Any,
                  handle: int) -> tuple[list[Any] | None, list[int], Any, Any]:  # fmt: skip
    """Runs ``route`` on ``arrays`` (inputs, then outputs where ``given``): every check of
    their addresses (alignment, overlap, one device) before anything is allocated or
    launched; then the results made (of ``like``'s kind, on the op's stream) where not
    given, and the launches. Returns the results made (None where given), the outputs'
    addresses, the device and the launch function (for the C lane)."""
    ptrs, producers = [], False
    for a in arrays:  # the addresses, and whether an array names a producer's stream
        ptrs.append(a.ptr)
        if a.stream is not None:
            producers = True
    if not addresses_clear(route, ptrs, given):
        # The full checks: they raise naming the array off its element boundary (an empty
        # one may be) or the pair that may not share bytes (inputs may), or accept the call.
        for a in arrays:
            check_aligned(op, a.what, a)
        if given:
            spans = [(a.what, ptr + lo, ptr + hi) for a, ptr, (lo, hi) in zip(arrays, ptrs, route.spans)]
            check_disjoint(op, spans, route.first_output, route.strided)
    device = device_for(op, arrays)
    if producers:
        for a in arrays:  # the op's stream waits for each producer an array's interface names
            if a.stream is not None:
                order_after(device, handle, a.stream)
    made = None
    if given:
        outputs = ptrs[route.first_output :]
    else:
        made, outputs = outputs_of(like, device, handle, route.results, route.dtype, route.order)
    if route.op == "backward":
        wide, pieces = ptrs[0], outputs
    else:
        wide, pieces = outputs[0], ptrs[: route.first_output]
    launch = _launcher(route, device, handle, wide, pieces)
    launch(wide, *pieces)
    return made, outputs, device, launch


def _known(op: str, ints: tuple[Any, ...], arrays: Sequence[Any], first_output: int, given: bool, like: Any,
           handle: int) -> tuple[list[Any] | None, list[int]] | None:  # fmt: skip
    """A call of a kind this path has run, on plain values: its arrays read as the C lane
    reads them (:func:`known_facts`), all on one device, its route found by its key
    (:func:`key_of`), its addresses passed at a glance (:func:`addresses_clear`), the
    results made where not ``given``, and the launch. None, having done nothing, for a
    call that is not plainly good: a new kind, an array read only the whole way, or an
    address any check would look at twice. That call then goes the whole way, which
    accepts it or raises what is wrong: this decides nothing the whole way does not.
    Returns the results made (None where given) and the outputs' addresses."""
    if not exact_ints(ints):
        return None
    read = known_facts(arrays, first_output)
    if read is None:
        return None
    facts, ptrs, ordinal, device = read
    route = remembered(key_of(op, ints, (not given,), facts))
    if route is None or not addresses_clear(route, ptrs, given):
        return None
    if device is None:
        device = device_of(ordinal)
    made = None
    if given:
        outputs = ptrs[first_output:]
    else:
        made, outputs = outputs_of(like, device, handle, route.results, route.dtype, route.order)
    if op == "backward":
        wide, pieces = ptrs[0], outputs
    else:
        wide, pieces = outputs[0], ptrs[:first_output]
    _launcher(route, device, handle, wide, pieces)(wide, *pieces)
    return made, outputs


def _launcher(route: Route, device: Any, handle: int, wide: int, pieces: list[int]) -> Any:
    """The launch function of ``route`` on ``device`` and the stream ``handle``, for
    arrays at these addresses: the plan's, made for the addresses modulo 16. The route
    keeps the last one per stream and alignments, with its device (another device's, or
    none kept, asks the plan table)."""
    key = (handle, wide & 15, *[p & 15 for p in pieces])
    found = route.launches.get(key)
    if found is not None and found[0] is device:
        return found[1]
    if route.problem is not None:  # the strided copy's plan does not depend on alignment
        compiled = compiled_strided_for(device, route.problem)
    else:
        compiled = compiled_for(device, route.op, route.dtype, route.rows, route.extents, key[1], key[2:],
                             route.pitch)  # fmt: skip
    launch = compiled.launcher(handle)
    if len(route.launches) >= _LAUNCHES_KEPT:
        route.launches.clear()
    route.launches[key] = (device, launch)
    return launch


_LAUNCHES_KEPT = 16  # per route: streams × alignments a model uses; past this it starts over


# The arrays' names in messages, made once: a call's f-strings cost more than its reads.
_OUT_NAMES = tuple(f"out[{i}]" for i in range(64))
_XS_NAMES = tuple(f"xs[{i}]" for i in range(64))


def _names(table: tuple[str, ...], prefix: str, n: int) -> Sequence[str]:
    return table[:n] if n <= len(table) else [f"{prefix}[{i}]" for i in range(n)]


def _read_each(op: str, values: Sequence[Any], names: Sequence[str], handle: int) -> list[OpArray] | None:
    """Each of ``values`` read, for a route's key; None where one cannot be read (the
    route's checks then read them in their turn, and raise in their order)."""
    try:
        return [recognise(op, what, v, handle) for what, v in zip(names, values)]
    except (TypeError, ValueError):
        return None


# --- the ops ----------------------------------------------------------------------------


def channel_cat_backward(
    dy: Any, sizes: Sequence[int], dim: int = 1, *, out: Sequence[Any] | None = None, stream: Any = None
) -> list[Any]:
    """Split ``dy`` along ``dim`` into pieces of ``sizes``: the gradient of each input
    of ``cat(inputs, dim)``.

    Returns one array per size (of dy's kind: a torch tensor, a CuPy array or a
    ``runtime.DeviceArray``), or the arrays of ``out`` as given. A size of 0 gives an
    empty array. Nothing is allocated or launched unless every argument is valid; the
    launches are queued on ``stream`` and not waited for.
    """
    op = "channel_cat_backward"
    if _lane is not None:  # True, or without out the results; else False, nothing done
        done = _lane.split(dy, sizes, dim, out, stream)
        if done is not False:
            return list(out) if out is not None else done
    handle = stream_handle(stream)
    if (_lane is None or not _lane.enabled) and (sizes.__class__ is list or sizes.__class__ is tuple):
        if out is None:
            done = _known("backward", (dim, *sizes), (dy,), 1, False, dy, handle)
            if done is not None:
                return done[0]
        elif (out.__class__ is list or out.__class__ is tuple) and _known(
            "backward", (dim, *sizes), (dy, *out), 1, True, dy, handle
        ) is not None:
            return list(out)
    src = recognise(op, "dy", dy, handle, written=False)
    names = _names(_OUT_NAMES, "out", len(out)) if is_sequence(out) else ()
    outs = _read_each(op, out, names, handle) if names else None
    key = None
    if sizes.__class__ is list or sizes.__class__ is tuple:
        key = route_key("backward", (dim, *sizes), (out is None,), [src, *(outs or [])])
        key = key if out is None or outs is not None else None
    route = remembered(key) or split_route(op, key, src, sizes, dim, out, outs, handle)
    arrays = [src]
    if out is not None:
        if outs is None:  # the route read each in its turn; read again, they raise as they did
            outs = [recognise(op, what, o, handle) for what, o in zip(names, out)]
        arrays += outs
    made, outputs, device, launch = _launch_route(op, route, arrays, out is not None, dy, handle)
    if _lane is not None:  # the next call of this kind runs in C
        seen, made_at = [(a.ptr, a.shape) for a in arrays], outputs if made is not None else []
        _lane.remember_split(dy, sizes, dim, out, stream, route.entry, device, seen, made_at, launch)
    return list(out) if made is None else made


def channel_cat_forward(xs: Sequence[Any], dim: int = 1, *, out: Any = None, stream: Any = None) -> Any:
    """Concatenate ``xs`` along ``dim``: ``y`` with every input's channels in order.

    All inputs share dtype, device and every extent but ``dim``'s (which may be 0).
    Returns an array of xs[0]'s kind (a torch tensor keeps the inputs' memory format),
    or ``out`` as given. Nothing is allocated or launched unless every argument is
    valid; the launches are queued on ``stream``.
    """
    op = "channel_cat_forward"
    if _lane is not None:  # True, or without out the result; else False, nothing done
        done = _lane.join(xs, dim, out, stream)
        if done is not False:
            return out if out is not None else done
    handle = stream_handle(stream)
    if (_lane is None or not _lane.enabled) and (xs.__class__ is list or xs.__class__ is tuple) and xs:
        done = _known("forward", (dim,), (*xs, out) if out is not None else xs, len(xs), out is not None,
                      xs[0], handle)  # fmt: skip
        if done is not None:
            return out if out is not None else done[0][0]
    if (xs.__class__ is not list and xs.__class__ is not tuple) and (
        isinstance(xs, (str, bytes)) or not isinstance(xs, Sequence)
    ):
        raise TypeError(f"{op}: xs must be a list or tuple of arrays, not {type(xs).__name__}")
    if not xs:
        raise ValueError(f"{op}: xs is empty; give at least one array to concatenate")
    xs_names = _names(_XS_NAMES, "xs", len(xs))
    inputs = [recognise(op, what, x, handle, written=False) for what, x in zip(xs_names, xs)]
    dst = _read_each(op, [out], ["out"], handle) if out is not None else None
    key = None
    if out is None or dst is not None:
        key = route_key("forward", (dim,), (out is None,), [*inputs, *(dst or [])])
    route = remembered(key) or join_route(op, key, inputs, dim, out, dst[0] if dst else None, handle)
    arrays = inputs
    if out is not None:
        # where it could not be read for the key, the route read it; read again, it raises as it did
        arrays = [*inputs, dst[0] if dst else recognise(op, "out", out, handle)]
    made, outputs, device, launch = _launch_route(op, route, arrays, out is not None, xs[0], handle)
    if _lane is not None:
        seen, made_at = [(a.ptr, a.shape) for a in arrays], outputs if made is not None else []
        _lane.remember_join(xs, dim, out, stream, route.entry, device, seen, made_at, launch)
    return out if made is None else made[0]
