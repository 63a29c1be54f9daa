"""Where an op's host time goes on CuPy arrays, beside the same call on torch tensors and
DeviceArrays, and what ``Device.empty`` and its drop cost part by part.

    python lab/cupy_probe.py [--calls N]

For each case: host µs per call (median of seven runs of N back-to-back calls, the stream
synchronised around each run), then cProfile's top functions over 3,000 calls (both as
``profile_python_path.py`` times and profiles). Then one
array's read by the ops (``op_arrays.recognise``) for each kind and dtype. A study: it
writes no record.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy
import torch

import runtime
from runtime import ops
from runtime.op_arrays import recognise

sys.path.insert(0, str(Path(__file__).resolve().parent))
from profile_python_path import per_call, top  # the same timing and profile


def kinds(t: torch.Tensor, dev: runtime.Device) -> dict[str, object]:
    a = dev.empty(tuple(t.shape), {torch.float32: "f32", torch.bfloat16: "bf16"}[t.dtype])
    torch.from_dlpack(a).copy_(t)
    return {"torch": t, "cupy": cupy.from_dlpack(t), "device_array": a}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    dev = runtime.Device(0)
    bwd, fwd = runtime.channel_cat_backward, runtime.channel_cat_forward
    for dtype in (torch.float32, torch.bfloat16):
        dy = torch.randn(6400, 256, device="cuda").to(dtype)
        sizes = [64] * 4
        pieces = [torch.empty(6400, 64, device="cuda", dtype=dtype) for _ in sizes]
        dys, outs = kinds(dy, dev), [kinds(p, dev) for p in pieces]
        for kind in ("torch", "cupy", "device_array"):
            d, o = dys[kind], [x[kind] for x in outs]
            for label, call in (
                (f"split 6400x(64*4) {dtype} {kind} out=", lambda d=d, o=o, s=sizes: bwd(d, s, 1, out=o)),
                (f"split 6400x(64*4) {dtype} {kind} alloc", lambda d=d, s=sizes: bwd(d, s, 1)),
                (f"concat 6400x(64*4) {dtype} {kind} out=", lambda d=d, o=o: fwd(o, 1, out=d)),
            ):
                host = per_call(call, args.calls)
                print(f"\n=== {label}: host {host:.2f} us/call", flush=True)
                if kind == "cupy" or ("out=" in label and kind == "torch" and dtype == torch.bfloat16):
                    print(top(call, 14), flush=True)
            for label, value in (("dy", d), ("out[0]", o[0])):
                us = per_call(lambda value=value, what=label: recognise("op", what, value, 0), 20000)
                print(f"read {kind} {dtype} {label}: {us:.3f} us", flush=True)
    # the Python path alone (no C lane) on DeviceArrays and torch
    lane = ops._lane
    ops._lane = None
    try:
        for dtype in (torch.float32,):
            dy = torch.randn(64, 32, device="cuda").to(dtype)
            pieces = [torch.empty(64, s, device="cuda", dtype=dtype) for s in (12, 20)]
            dys, outs = kinds(dy, dev), [kinds(p, dev) for p in pieces]
            for kind in ("torch", "device_array"):
                d, o = dys[kind], [x[kind] for x in outs]
                call = lambda d=d, o=o: bwd(d, [12, 20], 1, out=o)  # noqa: E731
                host = per_call(call, args.calls)
                print(f"\n=== Python path split 64x(12+20) f32 {kind} out=: host {host:.2f}")
                print(top(call, 20), flush=True)
    finally:
        ops._lane = lane
    # Device.empty and its drop
    for shape in ((512, 128), (6400, 64)):
        call = lambda shape=shape: dev.empty(shape, "bf16")  # noqa: E731
        print(f"\n=== Device.empty {shape} bf16 + drop: host {per_call(call, args.calls):.2f}")
        print(top(call, 22), flush=True)
    for label, call in (
        ("torch.empty + drop", lambda: torch.empty((512, 128), dtype=torch.bfloat16, device="cuda")),
        ("cupy.empty + drop", lambda: cupy.empty((512, 128), dtype=cupy.float32)),
    ):
        print(f"=== {label}: host {per_call(call, args.calls):.2f}", flush=True)


if __name__ == "__main__":
    main()
