"""Where an op's host time goes, per call, on the cases ops.json shows slow on the host.

    python lab/profile_host.py [--calls N]

For each case: the host µs per call (median of five runs of N back-to-back calls, the
stream synchronised after each run), then cProfile over N calls, the functions that
hold the most time of their own. A study: it writes no record.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import runtime


def stepped(rows: int, extent: int) -> torch.Tensor:
    return torch.empty((rows, 2 * extent), dtype=torch.bfloat16, device="cuda")[:, ::2]


def cases() -> list[tuple[str, object]]:
    found = []
    # concat 512 x (64+64) bf16
    xs = [torch.randn(512, 64, device="cuda").to(torch.bfloat16) for _ in range(2)]
    out_stepped, out_flat = stepped(512, 128), torch.empty(512, 128, dtype=torch.bfloat16, device="cuda")
    found.append(
        ("concat 512x(64+64) out=stepped", lambda: runtime.channel_cat_forward(xs, 1, out=out_stepped))
    )
    found.append(("concat 512x(64+64) out=flat", lambda: runtime.channel_cat_forward(xs, 1, out=out_flat)))
    found.append(("concat 512x(64+64) alloc", lambda: runtime.channel_cat_forward(xs, 1)))
    found.append(("torch.cat out=stepped", lambda: torch.cat(xs, 1, out=out_stepped)))
    # split YOLO b1 20x20, 4 x 256 bf16, of a stepped dy
    dy_stepped = stepped(400, 1024)
    dy_stepped.copy_(torch.randn(400, 1024, device="cuda"))
    dy_flat = dy_stepped.contiguous()
    pieces = [torch.empty(400, 256, dtype=torch.bfloat16, device="cuda") for _ in range(4)]
    sizes = [256] * 4
    found.append(
        (
            "split 400x1024 stepped dy out=",
            lambda: runtime.channel_cat_backward(dy_stepped, sizes, 1, out=pieces),
        )
    )
    found.append(
        ("split 400x1024 stepped dy alloc", lambda: runtime.channel_cat_backward(dy_stepped, sizes, 1))
    )
    found.append(
        ("split 400x1024 flat dy out=", lambda: runtime.channel_cat_backward(dy_flat, sizes, 1, out=pieces))
    )
    found.append(("split 400x1024 flat dy alloc", lambda: runtime.channel_cat_backward(dy_flat, sizes, 1)))
    found.append(
        (
            "torch split_with_sizes_copy stepped",
            lambda: torch.split_with_sizes_copy(dy_stepped, sizes, 1, out=pieces),
        )
    )
    return found


def host_us(call: object, calls: int) -> float:
    runs = []
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            call()  # type: ignore[operator]
        runs.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(runs)


def gpu_us(call: object, calls: int) -> float:
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        call()  # type: ignore[operator]
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) * 1e3 / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    for name, call in cases():
        for _ in range(50):
            call()  # type: ignore[operator]
        host = host_us(call, args.calls)
        gpu = gpu_us(call, args.calls)
        print(f"\n=== {name}: host {host:.1f} us/call, GPU (back to back) {gpu:.1f} us/call")
        if name.startswith("torch"):
            continue
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.calls):
            call()  # type: ignore[operator]
        profile.disable()
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(18)
        print("\n".join(line for line in text.getvalue().splitlines() if line.strip())[:4000])


if __name__ == "__main__":
    main()
