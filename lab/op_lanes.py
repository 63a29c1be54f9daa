"""Host µs per op call through each of the ops' lanes, on the same arrays, in one run.

    python lab/op_lanes.py [-o lab/data/op-lanes.json]

The ops try, in order: the C quick table (``QuickOps.split``/``join``), the C route
lane (``QuickOps.route_split``/``route_join``), the Python quick path
(``op_quick``), the Python general path (``op_routes``). This study calls each lane
directly on the common calls (64 × 32 f32 as ``bench_launch.py``'s op rows, and a
bf16 YOLO-sized split), so that a change that drops a lane knows what its calls cost
through the one left. Each figure: median over 15 batches of 250 calls, the stream
drained before each batch, the lanes interleaved. A study: it writes no record.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import runtime
from runtime import ops


class _RoutesOnly:
    """Stands in for the C lanes while the general path registers a route's launches."""

    def __init__(self, real):
        self.real = real

    def split(self, *args):
        return False

    def join(self, *args):
        return False

    def route_split(self, *args):
        return False

    def route_join(self, *args):
        return False


def python_routes(call: Callable[[], object]) -> None:
    """Runs ``call`` once through the Python general path, leaving its route's launches
    registered for the C route lane."""
    saved = ops._quick_c, ops._backward_quick, ops._forward_quick, ops._backward_fresh, ops._forward_fresh
    ops._quick_c = _RoutesOnly(saved[0])
    ops._backward_quick = ops._forward_quick = lambda *a: False
    ops._backward_fresh = ops._forward_fresh = lambda *a: None
    try:
        call()
    finally:
        ops._quick_c, ops._backward_quick, ops._forward_quick, ops._backward_fresh, ops._forward_fresh = saved


def measure(paths: dict[str, Callable[[], object]], reps: int = 15, batch: int = 250) -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in paths}
    for rep in range(reps + 1):
        for name, call in paths.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(batch):
                call()
            elapsed = time.perf_counter() - t0
            if rep:
                samples[name].append(elapsed / batch * 1e6)
    torch.cuda.synchronize()
    return {k: round(statistics.median(v), 3) for k, v in samples.items()}


def lanes_split(dy, sizes, out, stream) -> dict[str, Callable[[], object]]:
    c = ops._quick_c
    op = lambda: runtime.channel_cat_backward(dy, sizes, 1, out=out, stream=stream)  # noqa: E731
    op()
    python_routes(op)
    assert c.split(dy, sizes, 1, out, stream) is not False, "C quick lane did not take the call"
    assert c.route_split(dy, sizes, 1, out, stream) is not False, "C route lane did not take the call"
    return {
        "op": op,
        "c_quick": lambda: c.split(dy, sizes, 1, out, stream),
        "c_route": lambda: c.route_split(dy, sizes, 1, out, stream),
    }


def lanes_join(xs, out, stream) -> dict[str, Callable[[], object]]:
    c = ops._quick_c
    op = lambda: runtime.channel_cat_forward(xs, 1, out=out, stream=stream)  # noqa: E731
    op()
    python_routes(op)
    assert c.join(xs, 1, out, stream) is not False, "C quick lane did not take the call"
    assert c.route_join(xs, 1, out, stream) is not False, "C route lane did not take the call"
    return {
        "op": op,
        "c_quick": lambda: c.join(xs, 1, out, stream),
        "c_route": lambda: c.route_join(xs, 1, out, stream),
    }


def python_lanes(op: Callable[[], object]) -> dict[str, float]:
    """The op with the C lanes off: the Python quick path, then the general path alone."""
    c = ops._quick_c
    c.enabled = False
    try:
        quick = measure({"py_quick": op})
        saved = ops._backward_quick, ops._forward_quick, ops._backward_fresh, ops._forward_fresh
        ops._backward_quick = ops._forward_quick = lambda *a: False
        ops._backward_fresh = ops._forward_fresh = lambda *a: None
        try:
            route = measure({"py_route": op})
        finally:
            ops._backward_quick, ops._forward_quick, ops._backward_fresh, ops._forward_fresh = saved
    finally:
        c.enabled = True
    return quick | route


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", type=Path)
    args = p.parse_args()
    dev = runtime.Device(0)
    stream = torch.cuda.current_stream()
    rstream = runtime.Stream(dev)
    cases = {}
    for label, rows, sizes, dtype in (
        ("64x(12+20) f32", 64, [12, 20], torch.float32),
        ("6400x(64*4) bf16", 6400, [64] * 4, torch.bfloat16),
    ):
        dy = torch.randn(rows, sum(sizes), device="cuda").to(dtype)
        outs = [torch.empty(rows, s, device="cuda", dtype=dtype) for s in sizes]
        xs = [torch.randn(rows, s, device="cuda").to(dtype) for s in sizes]
        y = torch.empty(rows, sum(sizes), device="cuda", dtype=dtype)
        for name, lanes in (
            (f"split out= torch {label}", lanes_split(dy, sizes, outs, stream)),
            (f"split fresh torch {label}", lanes_split(dy, sizes, None, stream)),
            (f"concat out= torch {label}", lanes_join(xs, y, stream)),
            (f"concat fresh torch {label}", lanes_join(xs, None, stream)),
        ):
            row = measure(lanes) | python_lanes(lanes["op"])
            cases[name] = row
            print(name, row, flush=True)
        if dtype is torch.float32:
            ddy = dev.to_device(dy.cpu().numpy())
            douts = [dev.empty((rows, s), "f32") for s in sizes]
            for name, lanes in (
                (f"split out= DeviceArray {label}", lanes_split(ddy, sizes, douts, rstream)),
                (f"split fresh DeviceArray {label}", lanes_split(ddy, sizes, None, rstream)),
            ):
                row = measure(lanes) | python_lanes(lanes["op"])
                cases[name] = row
                print(name, row, flush=True)
        torch.testing.assert_close(torch.cat(xs, 1), runtime.channel_cat_forward(xs, 1))
    if args.output:
        record = {"gpu": torch.cuda.get_device_name(), "cases": cases}
        args.output.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
