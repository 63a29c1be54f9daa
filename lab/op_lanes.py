"""Host µs per op call through each of the ops' lanes, on the same arrays, in one run.

    python lab/op_lanes.py [-o lab/data/op-lanes.json]

The ops try the C lane (``runtime._fastlaunch.OpLane``: ``split``/``join``), which runs
the kinds of call the Python path has run and handed it, then the Python path. This
study calls each directly on the common calls (64 × 32 f32 as ``bench_launch.py``'s op
rows, and a bf16 YOLO-sized split): ``op`` the public call (the C lane where it takes
the call), ``c_lane`` the lane's method alone, ``python`` the op with the lane off
(``use_compiled_launch`` leaves the launch functions compiled: only the op's own checks
move to Python; the lane's two calls a call, answering False and being handed the call,
stay), ``python_alone`` the op with no lane at all (``ops._lane = None``: the path as
it runs where the extension is not built). Each figure: median over 15 batches of 250
calls, the stream drained before each batch, the four interleaved batch by batch. A study: it writes
no record.
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

# The calls every lanes study times: (label, rows, sizes, torch dtype name).
CASES = (("64x(12+20) f32", 64, [12, 20], "float32"), ("6400x(64*4) bf16", 6400, [64] * 4, "bfloat16"))


def write(output: Path | None, cases: dict[str, dict[str, float]]) -> None:
    """A study's cases as JSON, where asked."""
    if output:
        record = {"gpu": torch.cuda.get_device_name(), "cases": cases}
        output.write_text(json.dumps(record, indent=1) + "\n")


def measure(paths: dict[str, Callable[[], object]], lanes: dict[str, Callable[[], object]],
            reps: int = 15, batch: int = 250) -> dict[str, float]:  # fmt: skip
    """Each path's host µs per call; a path's batch runs with its lane set (``lanes[name]``
    puts the lane in place before the batch), the paths interleaved batch by batch, so a
    drift of the host's speed falls on all of them alike."""
    samples: dict[str, list[float]] = {k: [] for k in paths}
    for rep in range(reps + 1):
        for name, call in paths.items():
            lanes[name]()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(batch):
                call()
            elapsed = time.perf_counter() - t0
            if rep:
                samples[name].append(elapsed / batch * 1e6)
    torch.cuda.synchronize()
    return {k: round(statistics.median(v), 3) for k, v in samples.items()}


def lanes(op: Callable[[], object], lane: Callable[[], object]) -> dict[str, float]:
    op()  # the Python path runs it and hands it to the lane
    assert lane() is not False, "the C lane did not take the call"
    lane_object = ops._lane

    def c_on() -> None:
        ops._lane, lane_object.enabled = lane_object, True

    def c_off() -> None:
        ops._lane, lane_object.enabled = lane_object, False

    def no_lane() -> None:  # the path as it runs where the extension is not built
        ops._lane, lane_object.enabled = None, True

    try:
        return measure(
            {"op": op, "c_lane": lane, "python": op, "python_alone": op},
            {"op": c_on, "c_lane": c_on, "python": c_off, "python_alone": no_lane},
        )
    finally:
        c_on()


def lanes_split(dy, sizes, out, stream) -> dict[str, float]:
    return lanes(
        lambda: runtime.channel_cat_backward(dy, sizes, 1, out=out, stream=stream),
        lambda: ops._lane.split(dy, sizes, 1, out, stream),
    )


def lanes_join(xs, out, stream) -> dict[str, float]:
    return lanes(
        lambda: runtime.channel_cat_forward(xs, 1, out=out, stream=stream),
        lambda: ops._lane.join(xs, 1, out, stream),
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", type=Path)
    args = p.parse_args()
    dev = runtime.Device(0)
    stream = torch.cuda.current_stream()
    rstream = runtime.Stream(dev)
    cases = {}
    for label, rows, sizes, dtype_name in CASES:
        dtype = getattr(torch, dtype_name)
        dy = torch.randn(rows, sum(sizes), device="cuda").to(dtype)
        outs = [torch.empty(rows, s, device="cuda", dtype=dtype) for s in sizes]
        xs = [torch.randn(rows, s, device="cuda").to(dtype) for s in sizes]
        y = torch.empty(rows, sum(sizes), device="cuda", dtype=dtype)
        for name, row in (
            (f"split out= torch {label}", lanes_split(dy, sizes, outs, stream)),
            (f"split fresh torch {label}", lanes_split(dy, sizes, None, stream)),
            (f"concat out= torch {label}", lanes_join(xs, y, stream)),
            (f"concat fresh torch {label}", lanes_join(xs, None, stream)),
        ):
            cases[name] = row
            print(name, row, flush=True)
        if dtype is torch.float32:
            ddy = dev.to_device(dy.cpu().numpy())
            douts = [dev.empty((rows, s), "f32") for s in sizes]
            for name, row in (
                (f"split out= DeviceArray {label}", lanes_split(ddy, sizes, douts, rstream)),
                (f"split fresh DeviceArray {label}", lanes_split(ddy, sizes, None, rstream)),
            ):
                cases[name] = row
                print(name, row, flush=True)
        torch.testing.assert_close(torch.cat(xs, 1), runtime.channel_cat_forward(xs, 1))
    write(args.output, cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
