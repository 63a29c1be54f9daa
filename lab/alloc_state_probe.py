"""Study: where an allocating op's host time goes beyond its ``out=`` call (issue 23).

    python lab/alloc_state_probe.py [--reps N] [--out lab/data/alloc-state.json]

``scripts/bench_ops.py`` holds an allocating call to its ``out=`` call plus what the
array's own library charges for the same allocations (``Device.empty``, ``cupy.empty``
made and dropped on an idle device). This times, the same way (the device idle before
each call, the call and the drop of its results timed together, median after warm-up),
the parts of an allocating concat and split of DeviceArrays and CuPy arrays: the
allocation alone, the ``out=`` call, the ``out=`` call followed by the allocation (the
same driver calls, the free now behind a kernel in flight), the allocating call, and the
allocating call with its results dropped outside the timed span. Three passes, methods
interleaved within each. A study: it writes its own JSON, not a record.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path.cwd()
sys.path.insert(0, str(ROOT))

import runtime  # noqa: E402
from runtime import outputs  # noqa: E402

CASES = [  # (name, rows, sizes, op)
    ("small 512x(64+64)", 512, (64, 64), "concat"),
    ("yolo b16 80x80 64+64+64", 102400, (64, 64, 64), "concat"),
    ("small 512x(64+64)", 512, (64, 64), "split"),
    ("yolo b16 80x80 64+64+64", 102400, (64, 64, 64), "split"),
]


def host_us(torch: Any, call: Callable[[], Any], reps: int, keep: bool = False) -> float:
    """Median host µs of ``call`` with its results dropped inside the timed span (or
    after it, ``keep``), the device idle before each call."""
    times = []
    for rep in range(5 + reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        result = call()
        if not keep:
            del result
        elapsed = time.perf_counter() - start
        if keep:
            del result
        if rep >= 5:
            times.append(elapsed * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def methods(dev: Any, torch: Any, cupy: Any, kind: str, rows: int, sizes: tuple[int, ...], op: str) -> dict:
    width = sum(sizes)
    wide_t = torch.randn(rows, width, device="cuda").to(torch.bfloat16)
    pieces_t = [torch.randn(rows, s, device="cuda").to(torch.bfloat16) for s in sizes]
    if kind == "cupy":
        convert = cupy.from_dlpack
        empty = lambda s: cupy.empty(s, dtype=wide.dtype)  # noqa: E731
    else:

        def convert(t: Any) -> Any:
            a = dev.empty(tuple(t.shape), "bf16")
            torch.from_dlpack(a).copy_(t)
            return a

        empty = lambda s: dev.empty(s, "bf16")  # noqa: E731
    wide, pieces = convert(wide_t), [convert(p) for p in pieces_t]
    torch.cuda.synchronize()
    if op == "concat":
        shapes = [(rows, width)]
        out = empty(shapes[0])
        alloc = lambda: runtime.channel_cat_forward(pieces, 1)  # noqa: E731
        with_out = lambda: runtime.channel_cat_forward(pieces, 1, out=out)  # noqa: E731
        like = pieces[0]
    else:
        shapes = [(rows, s) for s in sizes]
        outs = [empty(s) for s in shapes]
        alloc = lambda: runtime.channel_cat_backward(wide, sizes, 1)  # noqa: E731
        with_out = lambda: runtime.channel_cat_backward(wide, sizes, 1, out=outs)  # noqa: E731
        like = wide
    results = [(s, (s[1], 1)) for s in shapes]
    from ptxgen.dtypes import resolve_dtype

    bf16 = resolve_dtype("bf16")
    return {
        "framework alloc": lambda: [empty(s) for s in shapes],
        "outputs_of": lambda: outputs.outputs_of(like, dev, 0, results, bf16, None),
        "op out=": with_out,
        "op out= then framework alloc": lambda: (with_out(), [empty(s) for s in shapes]),
        "op out= then outputs_of": lambda: (
            with_out(),
            outputs.outputs_of(like, dev, 0, results, bf16, None),
        ),
        "op allocating": alloc,
        "op allocating, kept": ("keep", alloc),
        "framework alloc, kept": ("keep", lambda: [empty(s) for s in shapes]),
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "lab" / "data" / "alloc-state.json")
    args = p.parse_args()
    import cupy
    import torch

    dev = runtime.Device(torch.cuda.current_device())
    found = []
    for kind in ("device_array", "cupy"):
        for name, rows, sizes, op in CASES:
            ms = methods(dev, torch, cupy, kind, rows, sizes, op)
            for pass_ in range(args.passes):
                for label, m in ms.items():
                    keep = isinstance(m, tuple)
                    us = host_us(torch, m[1] if keep else m, args.reps, keep=keep)
                    found.append({"kind": kind, "case": f"{op} {name} bf16", "pass": pass_,
                                  "method": label, "host_us": round(us, 2)})  # fmt: skip
                    print(f"{kind:12} {op} {name:26} pass {pass_} {label:30} {us:7.2f}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name()
    args.out.write_text(json.dumps({"gpu": gpu, "tree": "see commit", "cases": found}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
