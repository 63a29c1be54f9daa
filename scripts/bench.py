#!/usr/bin/env python3
"""Benchmark channel_cat kernels against the copy ceiling and PyTorch, with CUDA events.

For each dtype: a gather of ``chunk_c`` of ``c_total`` channels over ``n_spatial``
rows (hundreds of MB, well past the 60 MB L2), timed as the median of many
single-launch event pairs after warm-up, on fresh random data, every result
checked. Variants are interleaved launch by launch so drift hits all alike.

    * ceiling: cuMemcpyDtoD of the same number of bytes (read + write counted)
    * torch:   dx.copy_(dy[:, off:off+c])  -- the peer
    * inline:  the emitted kernel as it ships: body inlined in the entry point
    * call:    the entry point calling the .func body (inline=False)
    * inline#2: the shipped kernel again, to show run-to-run spread

Two shapes: narrow rows (128 of 256 channels, 1M rows) and wide rows (8192 of
16384 channels, 16K rows). Also reports host time per ``Function.launch`` call and
where it goes, in batches short enough not to fill the launch queue. Writes JSON to $OUT/bench.json
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

# name: (n_spatial, c_total, chunk_c, offset, block_size)
SHAPES = {
    "narrow": (1 << 20, 256, 128, 64, 128),
    "wide": (1 << 14, 16384, 8192, 4096, 256),
}


def per_call_us(fn, batch: int = 200, samples: int = 15, drain=None) -> float:
    """Median host microseconds per call of ``fn``, in batches the launch queue absorbs."""
    times = []
    for _ in range(samples):
        if drain:
            drain()
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        times.append((time.perf_counter() - t0) / batch * 1e6)
    return statistics.median(times)


def host_overhead(dev, stream, torch) -> dict[str, float]:
    """Host time of one checked launch (nothing waited for) and of its parts."""
    from runtime.stream import stream_handle

    k = ptxgen.ChannelCatBackward("f32", 128)
    fn = dev.load(k).function
    a, b = dev.empty((1, 2), "f32"), dev.empty((1, 1), "f32")
    grid, block = k.grid(1, 1), k.block
    drv = driver()
    arrays, ints = (a, b, 1, 2, 0), (a.ptr, b.ptr, 1, 2, 0)
    drain = stream.synchronize
    out = {
        "launch(DeviceArray)": per_call_us(
            lambda: fn.launch(grid, block, arrays, stream=stream), drain=drain
        ),
        "launch(int)": per_call_us(lambda: fn.launch(grid, block, ints, stream=stream), drain=drain),
        "check_geometry": per_call_us(lambda: fn._check_geometry(grid, block, 0)),
        "stream_handle": per_call_us(lambda: stream_handle(stream)),
        "pack_args": per_call_us(lambda: fn.pack_args(arrays)),
        "activate": per_call_us(dev._activate),
        "cuCtxGetCurrent": per_call_us(drv.cuCtxGetCurrent),
    }
    buffer = fn.layout.new_buffer()  # a void** of our own, packed once: the bare call
    fn.layout.struct.pack_into(buffer.memory, 0, *fn.pack_args(arrays))
    h, handle, params = drv.CUstream(stream.handle), drv.CUfunction(fn.handle), buffer.params
    out["raw cuLaunchKernel"] = per_call_us(
        lambda: drv.cuLaunchKernel(handle, 1, 1, 1, 128, 1, 1, 0, h, params, 0), drain=drain
    )
    if torch is not None:
        ta, tb = torch.zeros((1, 2), device="cuda"), torch.zeros((1, 1), device="cuda")
        out["launch(torch)"] = per_call_us(
            lambda: fn.launch(grid, block, (ta, tb, 1, 2, 0), stream=stream), drain=drain
        )
    stream.synchronize()
    a.close()
    b.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtypes", default="f32,f16,u8,f64")
    p.add_argument("--shapes", default="narrow,wide", help=f"from {', '.join(SHAPES)}")
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
        "rows": [],
    }

    def timed(slot: int, fn) -> float:
        start, end = events[slot]
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        return start.elapsed_ms(end)

    table = []
    cases = [(shape, name) for shape in args.shapes.split(",") for name in args.dtypes.split(",")]
    for shape, name in cases:
        n, c_total, chunk_c, off, block_size = SHAPES[shape]
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
            "inline": ptxgen.ChannelCatBackward(dt, block_size),
            "call": ptxgen.ChannelCatBackward(dt, block_size, inline=False),
        }
        fns = {k: dev.load(kern).function for k, kern in kernels.items()}
        grid = kernels["inline"].grid(n, chunk_c)
        block = kernels["inline"].block
        launch_args = (dy, dx, chunk_c, c_total, off)
        scratch = dev.empty(nbytes_moved // 2, "u8")

        runs = {
            "ceiling": lambda: check(
                "cuMemcpyDtoDAsync",
                drv.cuMemcpyDtoDAsync(scratch.ptr, dy.ptr, scratch.nbytes, stream.handle),
            ),
            "inline": lambda: fns["inline"].launch(grid, block, launch_args, stream=stream),
            "call": lambda: fns["call"].launch(grid, block, launch_args, stream=stream),
            "inline#2": lambda: fns["inline"].launch(grid, block, launch_args, stream=stream),
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

        med = {k: statistics.median(v) for k, v in times.items()}
        gbs = {k: nbytes_moved / (ms * 1e-3) / 1e9 for k, ms in med.items()}
        row = {
            "shape": shape,
            "n_spatial": n,
            "c_total": c_total,
            "chunk_c": chunk_c,
            "block_size": block_size,
            "dtype": dt.name,
            "bytes_moved": nbytes_moved,
            "median_ms": med,
            "GB_per_s": gbs,
            "call_cost_pct": 100 * (med["call"] - med["inline"]) / med["inline"],
            "spread_pct": 100 * abs(med["inline#2"] - med["inline"]) / med["inline"],
            "vs_ceiling": med["ceiling"] / med["inline"],
            "vs_torch": (med["torch"] / med["inline"]) if "torch" in med else None,
            "registers": {k: f.num_regs for k, f in fns.items()},
        }
        results["rows"].append(row)
        table.append(row)
        for a in (dy, dx, scratch):
            a.close()

    results["host_us"] = host_overhead(dev, stream, torch)

    out = args.json or (Path(os.environ["OUT"]) / "bench.json" if os.environ.get("OUT") else None)
    if out:
        out.write_text(json.dumps(results, indent=2) + "\n")

    print(f"\n{dev.name} ({dev.arch}), {results['driver']}; channel_cat_backward; median of {args.reps}")
    print(
        f"{'shape':<7}{'dtype':<6}{'block':>6}{'MB moved':>9}{'ceiling':>9}{'torch':>8}{'inline':>8}"
        f"{'call':>8}{'inline#2':>9}  {'call cost':>9} {'spread':>7} {'of ceiling':>10} {'vs torch':>9}"
    )
    for r in table:
        g = r["GB_per_s"]
        torch_gbs = f"{g['torch']:>8.0f}" if "torch" in g else f"{'-':>8}"
        vs_torch = f"{r['vs_torch']:>8.2f}x" if r["vs_torch"] else f"{'-':>9}"
        print(
            f"{r['shape']:<7}{r['dtype']:<6}{r['block_size']:>6}{r['bytes_moved'] / 1e6:>9.0f}"
            f"{g['ceiling']:>9.0f}{torch_gbs}{g['inline']:>8.0f}{g['call']:>8.0f}{g['inline#2']:>9.0f}"
            f"  {r['call_cost_pct']:>8.2f}% {r['spread_pct']:>6.2f}% {r['vs_ceiling']:>9.1%} {vs_torch}"
        )
    print("(GB/s: bytes read + written over time; call cost = (call - inline) / inline time)")
    print("host us per launch: " + ", ".join(f"{k} {v:.2f}" for k, v in results["host_us"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
