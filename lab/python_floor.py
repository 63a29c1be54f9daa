"""How close a Python path can come to the C lane at all: the floor under issue 23's 2×.

    python lab/python_floor.py [-o lab/data/python-floor.json]

For the ``out=`` calls of ``op_lanes.py`` (torch tensors), five lanes interleaved batch
by batch (``op_lanes.measure``): the op through the C lane, the lane's method alone, the
ops' Python path alone (no extension), a *floor* and a *checked floor*. The floor is plain
Python that does only what no path can skip: it reads of each tensor what the C lane
reads (dtype, is_cuda, is_contiguous, shape, data_ptr, get_device; requires_grad of an
output), resolves the stream, looks its call up in a dict keyed by every shape and dtype,
and calls the same launch function the op's route uses (the C ``Steps``, the launch
itself at the driver's floor). The checked floor adds what a known kind of call must
still check per call, in one pass over plain tuples: exact int sizes, each address on its
element boundary, every array on one device, no shared bytes, and the launch function
chosen by the addresses modulo 16 (no object per array, no message until one fails).
Whatever the checked floor costs over the lane is what a Python path with the checks
needs at least; 2× the lane is the issue's bound. A study: it writes no record.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from op_lanes import CASES, measure, write

import runtime
from runtime import op_routes, ops
from runtime.op_arrays import recognise, torch_dtype_table
from runtime.stream import stream_handle

DTYPES = torch_dtype_table()


def route_launch(op: str, arrays: list[torch.Tensor], ints: tuple[int, ...], written: int, handle: int):
    """The route and launch function the op's Python path uses for this call (after one call of it)."""
    read = [recognise("op", f"a{i}", a, handle, i >= written) for i, a in enumerate(arrays)]
    route = op_routes.remembered(op_routes.route_key(op, ints, (False,), read))
    assert route is not None, "the op has not run this call"
    device = ops.device_for("op", read)
    if op == "backward":
        wide, pieces = read[0].ptr, [a.ptr for a in read[1:]]
    else:
        wide, pieces = read[-1].ptr, [a.ptr for a in read[:-1]]
    return route, ops._launcher(route, device, handle, wide, pieces)


def facts(t: torch.Tensor, written: bool) -> tuple:
    """What the C lane reads of a tensor, in plain Python."""
    dtype = DTYPES.get(t.dtype)
    if dtype is None or not t.is_cuda or not t.is_contiguous():
        raise ValueError("not the floor's call")
    grad = t.requires_grad if written else False
    return t.shape, dtype, t.get_device(), grad, t.data_ptr()


def floor_split(table: dict, dy: torch.Tensor, sizes: list[int], out: list[torch.Tensor], stream) -> None:
    handle = stream_handle(stream)
    src = facts(dy, False)
    got = [facts(o, True) for o in out]
    launch = table[(handle, tuple(sizes), src[:4], *[g[:4] for g in got])]
    launch(src[4], *[g[4] for g in got])


def floor_join(table: dict, xs: list[torch.Tensor], y: torch.Tensor, stream) -> None:
    handle = stream_handle(stream)
    got = [facts(x, False) for x in xs]
    dst = facts(y, True)
    launch = table[(handle, *[g[:4] for g in got], dst[:4])]
    launch(dst[4], *[g[4] for g in got])


def checked_entry(route, launch, ptrs: list[int], handle: int) -> tuple:
    """What the checked floor keeps per kind of call: the element mask, the route's spans
    and the launch function per stream and addresses modulo 16 (``ptrs`` in the order
    the op names its arrays, inputs first)."""
    return route.dtype.itemsize - 1, route.spans, {(handle, *[p & 15 for p in ptrs]): launch}


def addresses_checked(entry: tuple, arrays: list[tuple], handle: int) -> Any:
    """The per-call checks a known kind of call still needs, in one pass: each address on
    its element boundary, every array on one device, no two arrays' bytes shared (the
    full check, which lets inputs share, is left out: this call has none that do). Then
    the launch function for the stream and the addresses modulo 16."""
    mask, spans, launches = entry
    ordinal = arrays[0][2]
    bounds = []
    for f, (lo, hi) in zip(arrays, spans):
        ptr = f[4]
        if ptr & mask or f[2] != ordinal:
            raise ValueError("misaligned, or on another device")
        if lo < hi:
            bounds.append((ptr + lo, ptr + hi))
    bounds.sort()
    end = 0
    for start, stop in bounds:
        if start < end:
            raise ValueError("overlap")
        end = stop
    return launches[(handle, *[f[4] & 15 for f in arrays])]


def checked_split(table: dict, dy: torch.Tensor, sizes: list[int], out: list[torch.Tensor], stream) -> None:
    handle = stream_handle(stream)
    for s in sizes:  # exact ints, as the route key asks
        if s.__class__ is not int:
            raise TypeError("sizes")
    arrays = [facts(dy, False), *[facts(o, True) for o in out]]
    entry = table[(tuple(sizes), *[f[:4] for f in arrays])]
    addresses_checked(entry, arrays, handle)(*[f[4] for f in arrays])


def checked_join(table: dict, xs: list[torch.Tensor], y: torch.Tensor, stream) -> None:
    handle = stream_handle(stream)
    arrays = [*[facts(x, False) for x in xs], facts(y, True)]
    entry = table[tuple(f[:4] for f in arrays)]
    launch = addresses_checked(entry, arrays, handle)
    launch(arrays[-1][4], *[f[4] for f in arrays[:-1]])


def study(label: str, rows: int, sizes: list[int], dtype: torch.dtype, stream, lane) -> dict[str, dict]:
    """The five lanes on a split and a concat of these shapes with ``out=``."""
    handle = stream_handle(stream)

    def c_on() -> None:
        ops._lane = lane

    def no_lane() -> None:
        ops._lane = None

    dy = torch.randn(rows, sum(sizes), device="cuda").to(dtype)
    outs = [torch.empty(rows, s, device="cuda", dtype=dtype) for s in sizes]
    y = torch.empty(rows, sum(sizes), device="cuda", dtype=dtype)
    runtime.channel_cat_backward(dy, sizes, 1, out=outs, stream=stream)
    runtime.channel_cat_forward(outs, 1, out=y, stream=stream)
    split_route, split_launch = route_launch("backward", [dy, *outs], (1, *sizes), 1, handle)
    join_route, join_launch = route_launch("forward", [*outs, y], (1,), len(outs), handle)
    split_facts = [facts(dy, False), *[facts(o, True) for o in outs]]
    join_facts = [*[facts(o, False) for o in outs], facts(y, True)]
    split_table = {(handle, tuple(sizes), *[f[:4] for f in split_facts]): split_launch}
    join_table = {(handle, *[f[:4] for f in join_facts]): join_launch}
    split_checked = {
        (tuple(sizes), *[f[:4] for f in split_facts]):
        checked_entry(split_route, split_launch, [f[4] for f in split_facts], handle)
    }  # fmt: skip
    join_checked = {
        tuple(f[:4] for f in join_facts):
        checked_entry(join_route, join_launch, [f[4] for f in join_facts], handle)
    }  # fmt: skip
    cases = {}
    for name, op, c_lane, floor, checked in (
        (
            f"split out= torch {label}",
            lambda: runtime.channel_cat_backward(dy, sizes, 1, out=outs, stream=stream),
            lambda: lane.split(dy, sizes, 1, outs, stream),
            lambda: floor_split(split_table, dy, sizes, outs, stream),
            lambda: checked_split(split_checked, dy, sizes, outs, stream),
        ),
        (
            f"concat out= torch {label}",
            lambda: runtime.channel_cat_forward(outs, 1, out=y, stream=stream),
            lambda: lane.join(outs, 1, y, stream),
            lambda: floor_join(join_table, outs, y, stream),
            lambda: checked_join(join_checked, outs, y, stream),
        ),
    ):
        row = measure(
            {"op": op, "c_lane": c_lane, "python_alone": op, "floor": floor, "checked": checked},
            {"op": c_on, "c_lane": c_on, "python_alone": no_lane, "floor": no_lane, "checked": no_lane},
        )
        c_on()
        row["python_over_c"] = round(row["python_alone"] / row["c_lane"], 2)
        row["floor_over_c"] = round(row["floor"] / row["c_lane"], 2)
        row["checked_over_c"] = round(row["checked"] / row["c_lane"], 2)
        cases[name] = row
        print(name, row, flush=True)
    # the floors launched what the op launches: their result is the op's
    for run in (
        lambda: floor_join(join_table, outs, y, stream),
        lambda: checked_join(join_checked, outs, y, stream),
    ):
        y.zero_()
        run()
        torch.testing.assert_close(y, torch.cat(outs, 1))
    return cases


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", type=Path)
    args = p.parse_args()
    runtime.Device(0)
    stream = torch.cuda.current_stream()
    lane = ops._lane
    assert lane is not None, "the study needs the compiled lane beside the Python path"
    cases = {}
    for label, rows, sizes, dtype_name in CASES:
        cases |= study(label, rows, sizes, getattr(torch, dtype_name), stream, lane)
    write(args.output, cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
