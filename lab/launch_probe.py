"""Probe: which tier takes bench_launch's torch op call, and what it costs (issue 23).

bench_launch's ``channel_cat_backward_2_outputs`` row (torch tensors, ``out=[a, b]``,
``stream=torch.cuda.current_stream()``) went from 1.48x to 1.98x the bare launch between
two records. This times the same call with each kind of stream argument, and asks the C
lane's two entries directly whether they take it. Run on a GPU from the repository's root:
``PYTHONPATH=. python lab/launch_probe.py``.
"""

from __future__ import annotations

import time

import torch

import runtime
from runtime import ops

N, C = 4096, 32


def per_call_us(fn, reps: int = 20, batch: int = 2000) -> float:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    best = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        best.append((time.perf_counter() - t0) / batch * 1e6)
        torch.cuda.synchronize()
    best.sort()
    return best[len(best) // 2]


def main() -> None:
    dy = torch.randn(N, C, device="cuda")
    a, b = torch.empty(N, 12, device="cuda"), torch.empty(N, C - 12, device="cuda")
    sizes, outs = [12, C - 12], [a, b]
    cur = torch.cuda.current_stream()
    streams = {
        "none": None,
        "torch current_stream object": cur,
        "int handle of it": cur.cuda_stream,
    }
    for label, s in streams.items():
        runtime.channel_cat_backward(dy, sizes, 1, out=outs, stream=s)
        torch.cuda.synchronize()
        ok = torch.equal(a, dy[:, :12]) and torch.equal(b, dy[:, 12:])
        quick = ops._quick_c.split(dy, sizes, 1, outs, s) if ops._quick_c is not None else None
        route = ops._quick_c.route_split(dy, sizes, 1, outs, s) if ops._quick_c is not None else None
        us = per_call_us(lambda s=s: runtime.channel_cat_backward(dy, sizes, 1, out=outs, stream=s))
        print(f"{label:32s} correct={ok} C split={quick} C route_split={route} {us:.2f} us/call")
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(5000):
        runtime.channel_cat_backward(dy, sizes, 1, out=outs, stream=cur)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
