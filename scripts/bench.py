#!/usr/bin/env python3
"""Benchmark channel_cat kernels against the copy ceiling and PyTorch, with CUDA events.

For each dtype: a gather of ``chunk_c`` of ``c_total`` channels over ``n_spatial``
rows (hundreds of MB, well past the 60 MB L2), timed as the median of many
single-launch event pairs after warm-up, on fresh random data, every result
checked. Variants are interleaved launch by launch so drift hits all alike.

    * ceiling: cuMemcpyDtoD of the same number of bytes (read + write counted)
    * torch:   dx.copy_(dy[:, off:off+c])  -- the peer
    * call:    the emitted kernel, entry point calling the .func body
    * inline:  the emitted kernel, body inlined in the entry point
    * call#2:  the call variant again, to show run-to-run spread

Also reports host time per ``Function.launch`` call. Writes JSON to $OUT/bench.json
(or --json PATH) and prints a table last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ptxgen
import runtime
from runtime._driver import check, driver


def median_ms(times: list[float]) -> float:
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtypes", default="f32,f16,u8,f64")
    p.add_argument("--n-spatial", type=int, default=1 << 20)
    p.add_argument("--c-total", type=int, default=256)
    p.add_argument("--chunk-c", type=int, default=128)
    p.add_argument("--offset", type=int, default=64)
    p.add_argument("--block-size", type=int, default=256)
    p.add_argument("--reps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)

    reason = runtime.unavailable_reason()
    if reason:
        print(f"no GPU: {reason}; nothing to measure")
        return 0
    import numpy as np

    try:
        import torch
    except ImportError:
        torch = None

    dev = runtime.Device(0)
    drv = driver()
    stream = runtime.Stream(dev)
    events = [(runtime.Event(dev), runtime.Event(dev)) for _ in range(4)]
    results: dict[str, object] = {
        "gpu": dev.name,
        "arch": dev.arch,
        "driver": f"CUDA {dev.driver_version[0]}.{dev.driver_version[1]}",
        "shape": {k: getattr(args, k) for k in ("n_spatial", "c_total", "chunk_c", "offset", "block_size")},
        "rows": [],
    }
    n, c_total, chunk_c, off = args.n_spatial, args.c_total, args.chunk_c, args.offset

    def timed(slot: int, fn) -> float:
        start, end = events[slot]
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        return start.elapsed_ms(end)

    table = []
    for name in args.dtypes.split(","):
        dt = ptxgen.resolve_dtype(name)
        nbytes_moved = 2 * n * chunk_c * dt.itemsize  # read the slice once, write dx once
        dy = dev.empty((n, c_total), dt)
        dx = dev.empty((n, chunk_c), dt)
        # fresh random bits, generated on the device when torch is there
        if torch is not None:
            raw = torch.randint(-128, 128, (dy.nbytes,), dtype=torch.int8, device="cuda")
            check("cuMemcpyDtoD", drv.cuMemcpyDtoD(dy.ptr, raw.data_ptr(), dy.nbytes))
            torch.cuda.synchronize()
            del raw
        else:
            dy.copy_from_host(np.random.default_rng().integers(0, 256, dy.nbytes, dtype=np.uint8))

        kernels = {
            "call": ptxgen.ChannelCatBackward(dt, args.block_size),
            "inline": ptxgen.ChannelCatBackward(dt, args.block_size, inline=True),
        }
        fns = {k: dev.load(kern).function for k, kern in kernels.items()}
        grid = kernels["call"].grid(n, chunk_c)
        block = kernels["call"].block
        launch_args = (dy, dx, chunk_c, c_total, off)
        scratch = dev.empty(nbytes_moved // 2, "u8")

        runs = {
            "ceiling": lambda: check(
                "cuMemcpyDtoDAsync",
                drv.cuMemcpyDtoDAsync(scratch.ptr, dy.ptr, scratch.nbytes, stream.handle),
            ),
            "call": lambda: fns["call"].launch(grid, block, launch_args, stream=stream),
            "inline": lambda: fns["inline"].launch(grid, block, launch_args, stream=stream),
            "call#2": lambda: fns["call"].launch(grid, block, launch_args, stream=stream),
        }
        if torch is not None and dt.name not in ("e4m3", "e5m2", "u16", "u32", "u64"):
            tdy = torch.from_dlpack(dy)
            tdx = torch.empty((n, chunk_c), dtype=tdy.dtype, device="cuda")
            torch_stream = torch.cuda.ExternalStream(stream.handle)

            def torch_copy() -> None:
                with torch.cuda.stream(torch_stream):
                    tdx.copy_(tdy[:, off : off + chunk_c])

            runs["torch"] = torch_copy

        times: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(args.warmup):
            for fn in runs.values():
                timed(0, fn)
        for _ in range(args.reps):
            for k, fn in runs.items():
                times[k].append(timed(0, fn))

        # check the result of each kernel variant: poison, run once, compare every element
        want = dy.to_numpy(bits=True)[:, off : off + chunk_c]
        for k in ("call", "inline"):
            dx.fill_bytes(0xA5)
            runs[k]()
            stream.synchronize()
            if not np.array_equal(dx.to_numpy(bits=True), want):
                print(f"{dt.name} {k}: WRONG RESULT")
                return 1
        del want

        med = {k: median_ms(v) for k, v in times.items()}
        gbs = {k: nbytes_moved / (ms * 1e-3) / 1e9 for k, ms in med.items()}
        row = {
            "dtype": dt.name,
            "bytes_moved": nbytes_moved,
            "median_ms": med,
            "GB_per_s": gbs,
            "call_cost_pct": 100 * (med["call"] - med["inline"]) / med["inline"],
            "spread_pct": 100 * abs(med["call#2"] - med["call"]) / med["call"],
            "vs_ceiling": med["ceiling"] / med["call"],
            "vs_torch": (med["torch"] / med["call"]) if "torch" in med else None,
            "registers": {k: f.num_regs for k, f in fns.items()},
        }
        results["rows"].append(row)
        table.append(row)
        for a in (dy, dx, scratch):
            a.close()

    # host time of one checked launch, nothing waited for (tiny grid, queue drained now and then)
    k = ptxgen.ChannelCatBackward("f32", 128)
    fn = dev.load(k).function
    a, b = dev.empty((1, 2), "f32"), dev.empty((1, 1), "f32")
    host = {}
    for label, launch_args in (
        ("DeviceArray", (a, b, 1, 2, 0)),
        ("int address", (a.ptr, b.ptr, 1, 2, 0)),
    ):
        samples = []
        for _ in range(5):
            stream.synchronize()
            t0 = time.perf_counter()
            for _ in range(2000):
                fn.launch((1, 1, 1), k.block, launch_args, stream=stream)
            samples.append((time.perf_counter() - t0) / 2000 * 1e6)
        host[label] = statistics.median(samples)
    if torch is not None:
        ta, tb = torch.zeros((1, 2), device="cuda"), torch.zeros((1, 1), device="cuda")
        samples = []
        for _ in range(5):
            stream.synchronize()
            t0 = time.perf_counter()
            for _ in range(2000):
                fn.launch((1, 1, 1), k.block, (ta, tb, 1, 2, 0), stream=stream)
            samples.append((time.perf_counter() - t0) / 2000 * 1e6)
        host["torch tensor"] = statistics.median(samples)
    stream.synchronize()
    results["host_us_per_launch"] = host

    out = args.json or (Path(os.environ["OUT"]) / "bench.json" if os.environ.get("OUT") else None)
    if out:
        out.write_text(json.dumps(results, indent=2) + "\n")

    print(
        f"\n{dev.name} ({dev.arch}), {results['driver']}; backward gather of {chunk_c} of {c_total} "
        f"channels x {n} rows, block {args.block_size}; median of {args.reps}"
    )
    print(
        f"{'dtype':<6}{'MB moved':>9}{'ceiling':>10}{'torch':>10}{'call':>10}{'inline':>10}"
        f"{'call#2':>10}  {'call cost':>9} {'spread':>7} {'of ceiling':>10} {'vs torch':>9}"
    )
    for r in table:
        g = r["GB_per_s"]
        torch_gbs = f"{g['torch']:>10.0f}" if "torch" in g else f"{'-':>10}"
        vs_torch = f"{r['vs_torch']:>8.2f}x" if r["vs_torch"] else f"{'-':>9}"
        print(
            f"{r['dtype']:<6}{r['bytes_moved'] / 1e6:>9.0f}{g['ceiling']:>10.0f}{torch_gbs}"
            f"{g['call']:>10.0f}{g['inline']:>10.0f}{g['call#2']:>10.0f}  {r['call_cost_pct']:>8.2f}%"
            f" {r['spread_pct']:>6.2f}% {r['vs_ceiling']:>9.1%} {vs_torch}"
        )
    print("(GB/s counts bytes read + written; call cost = (call - inline) / inline time)")
    print("host us per launch: " + ", ".join(f"{k} {v:.2f}" for k, v in host.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
