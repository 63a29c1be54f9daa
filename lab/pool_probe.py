"""Study: what one ``Device.empty`` and its drop cost the host, part by part (issue 23).

    python lab/pool_probe.py [-o lab/data/pool-probe.json]

``scripts/bench_ops.py`` charges a DeviceArray about 23-25 µs of host time per result
(``framework_alloc_host_us``: ``Device.empty`` and the drop), where ``torch.empty`` costs
3-5 µs; an allocating split of DeviceArrays then misses its GPU-time target, since the
device waits for the host's allocations before the launch. This probe times, in a tight
loop on an idle device (median of ``--reps`` batches of ``--loop`` calls, per call):
``Device.empty`` + drop, each driver call the pool makes through cuda-bindings, the same
calls through ctypes, and the Python parts (``weakref.finalize``, the array's own
bookkeeping); with ``torch.empty`` + drop beside them. A study: it writes no record.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import runtime
from runtime import memory, pool
from runtime._driver import driver


def per_call_us(call: Callable[[], Any], loop: int, reps: int) -> float:
    for _ in range(loop):  # warm-up
        call()
    batches = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(loop):
            call()
        batches.append((time.perf_counter() - start) / loop * 1e6)
    return round(statistics.median(batches), 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", type=Path, default=None)
    parser.add_argument("--loop", type=int, default=200)
    parser.add_argument("--reps", type=int, default=25)
    args = parser.parse_args()
    dev = runtime.Device(0)
    drv = driver()
    mp = dev.memory_pool
    handle = mp._pool  # a study reads the pool's handle; the product never does
    relaxed = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    nbytes = 512 * 64 * 2
    times: dict[str, float] = {}

    def run(name: str, call: Callable[[], Any]) -> None:
        times[name] = per_call_us(call, args.loop, args.reps)
        print(f"{name:48s} {times[name]:8.3f} µs", flush=True)

    run("nothing", lambda: None)
    run("Device.empty + drop", lambda: dev.empty((512, 64), "bf16"))
    keep = [dev.empty((512, 64), "bf16") for _ in range(4)]
    run("Device.empty, 4 live", lambda: keep.append(dev.empty((512, 64), "bf16")) or keep.pop(0))
    run("pool.allocate + pool.free", lambda: mp.free(mp.allocate(nbytes, 0)[0], pool.Waits(0)))

    def alloc_free() -> None:
        _, address = drv.cuMemAllocFromPoolAsync(nbytes, handle, 0)
        drv.cuMemFreeAsync(address, 0)

    run("cuda-bindings: alloc + free", alloc_free)
    run("cuda-bindings: cuCtxGetCurrent", drv.cuCtxGetCurrent)
    run("cuda-bindings: cuStreamIsCapturing(0)", lambda: drv.cuStreamIsCapturing(0))
    run("cuda-bindings: exchange capture mode", lambda: drv.cuThreadExchangeStreamCaptureMode(relaxed))
    run("context.activate", dev.context.activate)

    def relaxed_block() -> None:
        with pool.relaxed_capture_mode(drv):
            pass

    run("relaxed_capture_mode enter + exit", relaxed_block)

    lib = ctypes.CDLL("libcuda.so.1")
    c_alloc, c_free = lib.cuMemAllocFromPoolAsync, lib.cuMemFreeAsync
    c_alloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p]
    c_free.argtypes = [ctypes.c_uint64, ctypes.c_void_p]
    c_cap, c_mode, c_cur = lib.cuStreamIsCapturing, lib.cuThreadExchangeStreamCaptureMode, lib.cuCtxGetCurrent
    c_cap.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    c_mode.argtypes = [ctypes.POINTER(ctypes.c_int)]
    c_cur.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    pool_ptr = int(handle)
    addr, status, mode, ctx = ctypes.c_uint64(), ctypes.c_int(), ctypes.c_int(), ctypes.c_void_p()

    def c_alloc_free() -> None:
        c_alloc(addr, nbytes, pool_ptr, None)
        c_free(addr.value, None)

    run("ctypes: alloc + free", c_alloc_free)
    run("ctypes: cuCtxGetCurrent", lambda: c_cur(ctx))
    run("ctypes: cuStreamIsCapturing(0)", lambda: c_cap(None, status))
    run("ctypes: exchange capture mode", lambda: c_mode(mode))

    class Target:
        pass

    target, tracked = Target(), weakref.WeakSet()
    run("weakref.finalize + detach", lambda: weakref.finalize(target, print).detach())
    run("WeakSet add + discard", lambda: tracked.add(target) or tracked.discard(target))
    run("DeviceArray of no element + drop", lambda: dev.empty((0, 64), "bf16"))
    run("memory._shape_of", lambda: memory._shape_of((512, 64)))
    run("resolve_dtype", lambda: memory.resolve_dtype("bf16"))

    try:
        import torch

        torch.empty(1, device="cuda")
        run("torch.empty + drop", lambda: torch.empty((512, 64), dtype=torch.bfloat16, device="cuda"))
    except ImportError:
        pass
    try:
        import cupy

        run("cupy.empty + drop", lambda: cupy.empty((512, 64), dtype=cupy.float32))
    except ImportError:
        pass
    if args.out is not None:
        record = {"gpu": dev.name, "loop": args.loop, "reps": args.reps, "us": times}
        args.out.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
