"""Where the ops' Python path spends its host time, part by part, against the C lane.

    python lab/profile_python_path.py

For a split and a concat with and without ``out=`` (64 × (12+20) f32 and 6400 × (64·4)
bf16 torch tensors, and DeviceArrays): the op through the C lane, with the lane switched
off (``enabled = False``) and with no lane at all (``ops._lane = None``, the path a build
without the extension runs, its launch functions still compiled); then each part of the
Python path timed alone (the stream's handle, one tensor read, the route's key and
lookup, the address checks and launch, the launch alone, the lane's ``remember``), and
cProfile's top functions over 3,000 calls. Each figure: the median of 7 runs of 2,000
calls after 200 warm-up calls, the stream drained around each run. A study: it writes no
record. Its output of 2026-12-03: ``data/profile-host-python-path.txt``.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import runtime
from runtime import op_arrays, op_routes, ops
from runtime import stream as runtime_stream
from runtime.op_arrays import recognise


def per_call(call: Callable[[], object], n: int = 2000, reps: int = 7) -> float:
    for _ in range(200):
        call()
    samples = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            call()
        samples.append((time.perf_counter() - t0) / n * 1e6)
    torch.cuda.synchronize()
    return round(statistics.median(samples), 3)


def top(call: Callable[[], object], lines: int) -> str:
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(3000):
        call()
    profile.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(lines)
    return text.getvalue()


def lanes(label: str, call: Callable[[], object]) -> None:
    lane = ops._lane
    with_c = per_call(call)
    lane.enabled = False
    off = per_call(call)
    lane.enabled = True
    ops._lane = None
    try:
        alone = per_call(call)
    finally:
        ops._lane = lane
    print(f"{label}: C {with_c}  lane off {off}  no lane {alone}  ({alone / with_c:.2f}x)", flush=True)


def study(label: str, rows: int, sizes: list[int], dtype: torch.dtype, stream: torch.cuda.Stream) -> None:
    dy = torch.randn(rows, sum(sizes), device="cuda").to(dtype)
    outs = [torch.empty(rows, s, device="cuda", dtype=dtype) for s in sizes]
    xs = [torch.randn(rows, s, device="cuda").to(dtype) for s in sizes]
    y = torch.empty(rows, sum(sizes), device="cuda", dtype=dtype)

    def split() -> object:
        return runtime.channel_cat_backward(dy, sizes, 1, out=outs, stream=stream)

    lanes(f"{label} split out=", split)
    lanes(f"{label} split fresh", lambda: runtime.channel_cat_backward(dy, sizes, 1, stream=stream))
    lanes(f"{label} concat out=", lambda: runtime.channel_cat_forward(xs, 1, out=y, stream=stream))
    lanes(f"{label} concat fresh", lambda: runtime.channel_cat_forward(xs, 1, stream=stream))
    handle = runtime_stream.stream_handle(stream)
    src = recognise("op", "dy", dy, handle)
    read = [recognise("op", f"out[{i}]", o, handle) for i, o in enumerate(outs)]
    key = op_routes.route_key("backward", (1, *sizes), (False,), [src, *read])
    route = op_routes.remembered(key)
    arrays = [src, *read]
    _, outputs, device, launch = ops._launch_route("op", route, arrays, True, dy, handle)
    addresses = [dy.data_ptr(), *outputs]
    seen = [(a.ptr, a.shape) for a in arrays]
    lane = ops._lane
    parts = {
        "stream_handle": lambda: runtime_stream.stream_handle(stream),
        "one tensor read": lambda: recognise("op", "dy", dy, handle),
        "route_key": lambda: op_routes.route_key("backward", (1, *sizes), (False,), [src, *read]),
        "remembered": lambda: op_routes.remembered(key),
        "every out read": lambda: ops._read_each(
            "op", outs, ops._names(ops._OUT_NAMES, "out", len(outs)), handle
        ),
        "_launch_route (checks, launch)": lambda: ops._launch_route("op", route, arrays, True, dy, handle),
        "the launch alone": lambda: launch(*addresses),
        "_launcher": lambda: ops._launcher(route, device, handle, addresses[0], addresses[1:]),
        "device_for": lambda: op_arrays.device_for("op", arrays),
        "remember_split": lambda: lane.remember_split(
            dy, sizes, 1, outs, stream, route.entry, device, seen, [], launch
        ),
    }
    for name, part in parts.items():
        print(f"  {name}: {per_call(part)}", flush=True)
    ops._lane = None
    try:
        print(top(split, 22)[-4500:])
    finally:
        ops._lane = lane


def main() -> int:
    dev = runtime.Device(0)
    stream = torch.cuda.current_stream()
    study("64x(12+20) f32", 64, [12, 20], torch.float32, stream)
    study("6400x(64*4) bf16", 6400, [64] * 4, torch.bfloat16, stream)
    rstream = runtime.Stream(dev)
    dy = dev.empty((64, 32), "f32")
    outs = [dev.empty((64, s), "f32") for s in (12, 20)]
    lanes(
        "DeviceArray split out=",
        lambda: runtime.channel_cat_backward(dy, [12, 20], 1, out=outs, stream=rstream),
    )
    lanes("DeviceArray split fresh", lambda: runtime.channel_cat_backward(dy, [12, 20], 1, stream=rstream))
    print(f"  Device.empty and its drop: {per_call(lambda: dev.empty((64, 12), 'f32', stream=rstream))}")
    print(top(lambda: dev.empty((64, 12), "f32", stream=rstream), 20)[-3500:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
