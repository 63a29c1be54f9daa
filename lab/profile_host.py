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
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import runtime


def stepped(rows: int, extent: int) -> torch.Tensor:
    return torch.empty((rows, 2 * extent), dtype=torch.bfloat16, device="cuda")[:, ::2]


def channels_last(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.randn(shape, device="cuda").to(torch.bfloat16).contiguous(memory_format=torch.channels_last)


def cases() -> list[tuple[str, Callable[[], object]]]:
    """(name, call): ours and torch's same call beside it ("torch ..." is not profiled)."""
    fwd, bwd = runtime.channel_cat_forward, runtime.channel_cat_backward
    found: list[tuple[str, Callable[[], object]]] = []
    # concat 512 x (64+64) bf16: contiguous, into a stepped and a pitched out=, and allocating
    xs = [torch.randn(512, 64, device="cuda").to(torch.bfloat16) for _ in range(2)]
    out_stepped = stepped(512, 128)
    out_flat = torch.empty(512, 128, dtype=torch.bfloat16, device="cuda")
    out_pitched = torch.empty(512, 192, dtype=torch.bfloat16, device="cuda")[:, :128]
    found += [
        ("concat 512x(64+64) out=flat", lambda: fwd(xs, 1, out=out_flat)),
        ("torch.cat out=flat", lambda: torch.cat(xs, 1, out=out_flat)),
        ("concat 512x(64+64) alloc", lambda: fwd(xs, 1)),
        ("torch.cat alloc", lambda: torch.cat(xs, 1)),
        ("concat 512x(64+64) out=stepped", lambda: fwd(xs, 1, out=out_stepped)),
        ("torch.cat out=stepped", lambda: torch.cat(xs, 1, out=out_stepped)),
        ("concat 512x(64+64) out=pitched", lambda: fwd(xs, 1, out=out_pitched)),
    ]
    # split 400 x (256*4) bf16: contiguous and stepped dy, with out= and allocating
    dy_stepped = stepped(400, 1024)
    dy_stepped.copy_(torch.randn(400, 1024, device="cuda"))
    dy_flat = dy_stepped.contiguous()
    pieces = [torch.empty(400, 256, dtype=torch.bfloat16, device="cuda") for _ in range(4)]
    sizes = [256] * 4
    found += [
        ("split 400x1024 flat dy out=", lambda: bwd(dy_flat, sizes, 1, out=pieces)),
        (
            "torch split_with_sizes_copy flat",
            lambda: torch.split_with_sizes_copy(dy_flat, sizes, 1, out=pieces),
        ),
        ("split 400x1024 flat dy alloc", lambda: bwd(dy_flat, sizes, 1)),
        ("torch split+contiguous flat", lambda: [p.contiguous() for p in dy_flat.split(sizes, 1)]),
        ("split 400x1024 stepped dy out=", lambda: bwd(dy_stepped, sizes, 1, out=pieces)),
        ("split 400x1024 stepped dy alloc", lambda: bwd(dy_stepped, sizes, 1)),
        (
            "torch split_with_sizes_copy stepped",
            lambda: torch.split_with_sizes_copy(dy_stepped, sizes, 1, out=pieces),
        ),
    ]
    # channels_last (1, 192, 20, 20) bf16 split into 64 x 3, and the concat back
    wide = channels_last((1, 192, 20, 20))
    parts = [channels_last((1, 64, 20, 20)) for _ in range(3)]
    found += [
        ("split CL 1x192x20x20 out=", lambda: bwd(wide, [64] * 3, 1, out=parts)),
        ("torch split_with_sizes_copy CL", lambda: torch.split_with_sizes_copy(wide, [64] * 3, 1, out=parts)),
        ("split CL 1x192x20x20 alloc", lambda: bwd(wide, [64] * 3, 1)),
        ("concat CL 3x(1x64x20x20) out=", lambda: fwd(parts, 1, out=wide)),
        ("torch.cat CL out=", lambda: torch.cat(parts, 1, out=wide)),
        ("concat CL 3x(1x64x20x20) alloc", lambda: fwd(parts, 1)),
        ("torch.cat CL alloc", lambda: torch.cat(parts, 1)),
    ]
    # DeviceArrays: the pool's allocation beside Device.empty
    dev = runtime.Device(0)
    das = [dev.empty((512, 64), "bf16") for _ in range(2)]
    found += [
        ("concat DeviceArray alloc", lambda: fwd(das, 1)),
        ("Device.empty 512x128 bf16", lambda: dev.empty((512, 128), "bf16")),
    ]
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
        if name.startswith(("torch", "Device")):
            continue
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.calls):
            call()  # type: ignore[operator]
        profile.disable()
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(12)
        print("\n".join(line for line in text.getvalue().splitlines() if line.strip())[:4000])


if __name__ == "__main__":
    main()
