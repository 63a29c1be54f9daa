"""Study: what an allocating concat costs the host, part by part, against ``torch.cat`` (issue 23).

    python lab/alloc_probe.py [-o lab/data/alloc-probe.json]

``scripts/bench_ops.py`` finds the ops' allocating concats of torch tensors 0.1-1.4 µs
behind ``torch.cat``'s host time, while their ``out=`` calls are 1-2 µs ahead of
``torch.cat(out=)``. This probe times, on the same arrays and the same way as that
benchmark's ``host_us`` (one call, the device idle before it, the result dropped inside
the timing; median of ``--reps``), the op with and without ``out=`` (through the C lane,
and through the Python path alone, ``ops._lane = None``), ``torch.cat`` with and without
``out=``, and the ways torch offers Python to allocate the result (``new_empty`` with a
tuple or a ``torch.Size``, ``new_empty_strided``, ``torch.empty``, ``empty_like``): what
the op's allocation can cost at least, next to what ``torch.cat`` pays inside C++. A
study: it writes no record.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import runtime
from runtime import ops


def host_us(call: Callable[[], Any], reps: int, warmup: int = 5) -> float:
    times = []
    for rep in range(warmup + reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        result = call()
        del result
        elapsed = time.perf_counter() - start
        if rep >= warmup:
            times.append(elapsed * 1e6)
    torch.cuda.synchronize()
    return round(statistics.median(times), 2)


def probe(rows: int, sizes: list[int], dtype: Any, reps: int) -> dict[str, float]:
    xs = [torch.randn(rows, s, device="cuda").to(dtype) for s in sizes]
    y = torch.empty(rows, sum(sizes), device="cuda", dtype=dtype)
    shape = (rows, sum(sizes))
    size = torch.Size(shape)
    lane = ops._lane

    def python_path(call: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            ops._lane = None
            try:
                return call()
            finally:
                ops._lane = lane

        return run

    calls: dict[str, Callable[[], Any]] = {
        "ours alloc": lambda: runtime.channel_cat_forward(xs, 1),
        "ours out=": lambda: runtime.channel_cat_forward(xs, 1, out=y),
        "python path alloc": python_path(lambda: runtime.channel_cat_forward(xs, 1)),
        "python path out=": python_path(lambda: runtime.channel_cat_forward(xs, 1, out=y)),
        "torch.cat alloc": lambda: torch.cat(xs, 1),
        "torch.cat out=": lambda: torch.cat(xs, 1, out=y),
        "new_empty(tuple)": lambda: xs[0].new_empty(shape),
        "new_empty(Size)": lambda: xs[0].new_empty(size),
        "new_empty_strided": lambda: xs[0].new_empty_strided(shape, (shape[1], 1)),
        "torch.empty(kwargs)": lambda: torch.empty(shape, dtype=dtype, device="cuda"),
        "empty_like(y)": lambda: torch.empty_like(y),
        "nothing": lambda: None,
    }
    torch.testing.assert_close(runtime.channel_cat_forward(xs, 1), torch.cat(xs, 1))
    torch.testing.assert_close(python_path(lambda: runtime.channel_cat_forward(xs, 1))(), torch.cat(xs, 1))
    row: dict[str, float] = {}
    for _ in range(2):  # interleaved twice: the second pass's figures are kept
        row = {name: host_us(call, reps) for name, call in calls.items()}
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", type=Path)
    p.add_argument("--reps", type=int, default=200)
    args = p.parse_args()
    runtime.Device(0)
    print("runtime from", runtime.__file__, flush=True)
    cases = {}
    for label, rows, sizes, dtype in (
        ("small 512x(64+64) bf16", 512, [64, 64], torch.bfloat16),
        ("yolo b1 80x80 64+64+64 bf16", 6400, [64, 64, 64], torch.bfloat16),
        ("yolo b16 20x20 256*4 f32", 6400, [256] * 4, torch.float32),
    ):
        cases[label] = probe(rows, sizes, dtype, args.reps)
        print(label, cases[label], flush=True)
    if args.output:
        record = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
        record |= {"runtime": runtime.__file__, "cases": cases}
        args.output.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
