"""Study: what each of torch's ways to allocate a tensor from outside torch costs the host
(issue 23's allocating concats of torch tensors).

    python lab/torch_alloc_options.py [--out lab/data/torch-alloc-options.json]

``ops.json``'s allocating concats of torch tensors lose to ``torch.cat`` on the host by
about what our allocation costs over torch's own: the C lane makes each result with
``like.new_empty_strided(shape, strides)``, while ``torch.cat`` allocates inside its C++.
This times, for a concat's result (row-major and channels_last), every Python-reachable
allocation that gives the same tensor, made and dropped, methods interleaved batch by
batch (median of 21 batches of 500 after a warm-up batch), beside torch's current-stream
read (which the lane makes before allocating) and ``torch.cat`` with and without ``out=``.
A study: it writes its own JSON, not a record.
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

sys.path.insert(0, str(Path.cwd()))

BATCH, BATCHES = 500, 21


def per_call_us(calls: dict[str, Callable[[], Any]], torch: Any) -> dict[str, float]:
    """Median host µs per call of each, batches interleaved so a drift of the host's speed
    falls on all of them."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for batch in range(BATCHES + 1):
        for name, call in calls.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(BATCH):
                call()
            elapsed = (time.perf_counter() - start) / BATCH * 1e6
            if batch:  # the first batch warms up
                times[name].append(elapsed)
    torch.cuda.synchronize()
    return {name: round(statistics.median(t), 3) for name, t in times.items()}


def layout_calls(torch: Any, layout: str) -> dict[str, Callable[[], Any]]:
    """The calls for one concat result: a YOLO b1 80x80 concat of 64+64+64 channels,
    (1, 192, 80, 80) bf16, in ``layout``."""
    import runtime

    dev, bf16 = torch.device("cuda", torch.cuda.current_device()), torch.bfloat16
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    pieces = [torch.randn(1, 64, 80, 80, device=dev).to(bf16).contiguous(memory_format=fmt) for _ in range(3)]
    like, out = pieces[0], torch.cat(pieces, 1)
    shape, strides = tuple(out.shape), tuple(out.stride())
    size, index = torch.Size(shape), dev.index
    new_empty_strided, empty_strided = torch.Tensor.new_empty_strided, torch.ops.aten.empty_strided.default
    calls = {
        "new_empty_strided(shape, strides)": lambda: like.new_empty_strided(shape, strides),
        "new_empty_strided(Size, strides)": lambda: like.new_empty_strided(size, strides),
        "Tensor.new_empty_strided(like, ...)": lambda: new_empty_strided(like, shape, strides),
        "torch.empty_strided(shape, strides, dtype=, device=)": lambda: torch.empty_strided(
            shape, strides, dtype=bf16, device=dev
        ),
        "torch.empty(shape, dtype=, device=, memory_format=)": lambda: torch.empty(
            shape, dtype=bf16, device=dev, memory_format=fmt
        ),
        "new_empty(shape)": lambda: like.new_empty(shape),
        "aten.empty_strided.default": lambda: empty_strided(shape, strides, dtype=bf16, device=dev),
        "empty_like(result) (same shape: a floor)": lambda: torch.empty_like(out),
        "torch.cat(pieces, 1)": lambda: torch.cat(pieces, 1),
        "torch.cat(pieces, 1, out=)": lambda: torch.cat(pieces, 1, out=out),
        "runtime.channel_cat_forward(pieces, 1)": lambda: runtime.channel_cat_forward(pieces, 1),
        "runtime.channel_cat_forward(pieces, 1, out=)": lambda: runtime.channel_cat_forward(
            pieces, 1, out=out
        ),
    }
    if layout == "contiguous":
        calls["like.new(*shape) (legacy)"] = lambda: like.new(*shape)
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        calls["_cuda_getCurrentRawStream(index)"] = lambda: raw(index)
    return calls


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, default=Path("lab/data/torch-alloc-options.json"))
    args = p.parse_args()
    import torch

    results = []
    for layout in ("contiguous", "channels_last"):
        calls = layout_calls(torch, layout)
        for name, call in list(calls.items()):  # a way this torch refuses is reported, not timed
            try:
                call()
            except Exception as err:
                print(f"{layout:14} {name}: {type(err).__name__}: {err}", flush=True)
                results.append({"layout": layout, "method": name, "error": f"{type(err).__name__}: {err}"})
                del calls[name]
        for pass_ in range(2):
            for name, us in per_call_us(calls, torch).items():
                results.append({"layout": layout, "pass": pass_, "method": name, "host_us": us})
                print(f"{layout:14} pass {pass_} {name:55} {us:7.3f}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "tree": "see commit"}
    args.out.write_text(json.dumps({**meta, "cases": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
