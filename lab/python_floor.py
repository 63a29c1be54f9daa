"""How close a Python path can come to the C lane at all: the floor under issue 23's 2×.

    python lab/python_floor.py [-o lab/data/python-floor.json]

For the ``out=`` calls of ``op_lanes.py`` (torch tensors), four lanes interleaved batch
by batch (``op_lanes.measure``): the op through the C lane, the lane's method alone, the
ops' Python path alone (no extension) and a *floor*: plain Python that does only what no
checked path can skip. It reads of each tensor what the C lane reads (dtype, is_cuda,
is_contiguous, shape, data_ptr, get_device; requires_grad of an output), resolves the
stream, looks its call up in a dict keyed by every shape and dtype, and calls the same
launch function the op's route uses (the C ``Steps``, the launch itself at the driver's
floor). No alignment, overlap or device check, no error message, no object per array.
Whatever the floor costs over the lane is the interpreter's share of the reads and
lookups; 2× the lane leaves the checks the rest. A study: it writes no record.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from op_lanes import measure

import runtime
from runtime import op_routes, ops
from runtime.op_arrays import _recognise, torch_dtype_table
from runtime.stream import stream_handle

DTYPES = torch_dtype_table()


def route_launch(op: str, arrays: list[torch.Tensor], ints: tuple[int, ...], written: int, handle: int):
    """The launch function the op's Python path uses for this call (after one call of it)."""
    read = [_recognise("op", f"a{i}", a, handle, i >= written) for i, a in enumerate(arrays)]
    route = op_routes.remembered(op_routes.route_key(op, ints, (False,), read))
    assert route is not None, "the op has not run this call"
    device = ops._device_for("op", read)
    if op == "backward":
        wide, pieces = read[0].ptr, [a.ptr for a in read[1:]]
    else:
        wide, pieces = read[-1].ptr, [a.ptr for a in read[:-1]]
    return ops._launcher(route, device, handle, wide, pieces)


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


def study(label: str, rows: int, sizes: list[int], dtype: torch.dtype, stream, lane) -> dict[str, dict]:
    """The four lanes on a split and a concat of these shapes with ``out=``."""
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
    split_table = {
        (handle, tuple(sizes), facts(dy, False)[:4], *[facts(o, True)[:4] for o in outs]):
        route_launch("backward", [dy, *outs], (1, *sizes), 1, handle)
    }  # fmt: skip
    join_table = {
        (handle, *[facts(o, False)[:4] for o in outs], facts(y, True)[:4]):
        route_launch("forward", [*outs, y], (1,), len(outs), handle)
    }  # fmt: skip
    cases = {}
    for name, op, c_lane, floor in (
        (
            f"split out= torch {label}",
            lambda: runtime.channel_cat_backward(dy, sizes, 1, out=outs, stream=stream),
            lambda: lane.split(dy, sizes, 1, outs, stream),
            lambda: floor_split(split_table, dy, sizes, outs, stream),
        ),
        (
            f"concat out= torch {label}",
            lambda: runtime.channel_cat_forward(outs, 1, out=y, stream=stream),
            lambda: lane.join(outs, 1, y, stream),
            lambda: floor_join(join_table, outs, y, stream),
        ),
    ):
        row = measure(
            {"op": op, "c_lane": c_lane, "python_alone": op, "floor": floor},
            {"op": c_on, "c_lane": c_on, "python_alone": no_lane, "floor": no_lane},
        )
        c_on()
        row["python_over_c"] = round(row["python_alone"] / row["c_lane"], 2)
        row["floor_over_c"] = round(row["floor"] / row["c_lane"], 2)
        cases[name] = row
        print(name, row, flush=True)
    # the floor launched what the op launches: its result is the op's
    y.zero_()
    floor_join(join_table, outs, y, stream)
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
    for label, rows, sizes, dtype in (
        ("64x(12+20) f32", 64, [12, 20], torch.float32),
        ("6400x(64*4) bf16", 6400, [64] * 4, torch.bfloat16),
    ):
        cases |= study(label, rows, sizes, dtype, stream, lane)
    if args.output:
        record = {"gpu": torch.cuda.get_device_name(), "cases": cases}
        args.output.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
