#!/usr/bin/env python3
"""The ops as users call them: with and without ``out=``, on torch tensors, CuPy arrays
and DeviceArrays, against PyTorch's own calls and a flat copy of the same bytes.

    python scripts/bench_ops.py             # writes docs/perf/ops.json and docs/perf/ops.md
    python scripts/bench_ops.py --quick     # fewer shapes and repetitions, a first look

For every case (an op, a shape, a dtype, a kind of array, with or without ``out``):
  * ``us``: GPU time, CUDA events around one call on the default stream, the L2 flushed
    (a read of an unrelated 256 MB buffer) before each repetition; the median;
  * ``host_us``: host time of one call from entry to return, the results dropped inside
    the timing (an allocating call pays its frees too), the device idle before; the median
    of ``--host-reps`` calls (100: one call's host time varies more than its GPU time);
  * ``correct``: the results of the last timed repetition compared bit for bit with
    PyTorch's slicing, and those of one more call into poisoned outputs.
``framework_alloc_host_us`` (on the allocating rows) is what the array's own library
charges for the same allocations in the same run (``torch.empty`` / ``cupy.empty`` /
``Device.empty`` per result): the allocating call's host-time target is the ``out=``
call's plus that plus 1 µs. On torch rows, ``binding_alloc_host_us`` is what
``new_empty_strided`` alone costs for the same results (the cheapest allocation torch
offers Python, and the one the ops make), for the table of where an allocating call's
host time goes beside torch's own.

Cases: small shapes (at most 1 MB a side) and the client's (YOLO C2f at 640 px: rows =
batch·H·W at strides 8, 16 and 32, batch 1 and 16, 3–4 pieces of 16–256 channels), in
bf16 and f32. Methods: ``ours`` (runtime.channel_cat_backward / _forward), ``torch``
(``[p.contiguous() for p in dy.split(...)]`` or ``split_with_sizes_copy(out=)``;
``torch.cat``; a channels_last split into ``out=`` copies each piece with ``copy_``, since
torch 2.11's ``split_with_sizes_copy`` leaves channels_last outputs wrong: the record of
tree 2d2d72e9 found all 16 such rows wrong, each done in 6-7 µs whatever its size),
``flat_copy`` (``dst.copy_(src)`` of the same bytes). Layouts:
contiguous for every kind of array, channels_last (N, C, H, W) torch tensors on the
client shapes, and pitched torch tensors (the wide array a view of the first columns of
one half as wide again: a split reads one, a concat with ``out=`` writes one), and
stepped torch tensors (every other column of one twice as wide: strides no fused kernel
takes, so the strided copy runs); a kind of array that cannot hold a dtype (CuPy
without bf16) is listed under ``not_measured``.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import records  # noqa: E402

import runtime  # noqa: E402

FLUSH_BYTES = 256 << 20
POISON = 0xA5
# (name, rows, sizes): small shapes, then YOLO's C2f concats and their gradients at 640 px
# (name, batch, H = W, sizes): rows = batch·H·W; small ones are rows of 1 × 1
SMALL = [("small 512x(64+64)", 512, 1, (64, 64)), ("small 2048x(3+5+24)", 2048, 1, (3, 5, 24))]
CLIENT = [
    (f"yolo b{batch} {hw}x{hw} {'+'.join(map(str, sizes))}", batch, hw, sizes)
    for batch in (1, 16)
    for hw, sizes in (
        (80, (64, 64, 64)),
        (40, (128, 128, 128)),
        (20, (256, 256, 256, 256)),
        (80, (16, 16, 32)),
    )
]
NOT_MEASURED = {
    "strided beyond a step": (
        "transposed, expanded and reversed arrays run the same strided copy as the stepped "
        "layout; only that one is timed"
    ),
}


class Bench:
    """The timing machinery: events, the L2 flush, host timing with the device idle."""

    def __init__(
        self, torch: Any, reps: int, warmup: int, flush: Callable[[int], Any] | None = None,
        host_reps: int | None = None,
    ) -> None:  # fmt: skip
        """``flush(rep)`` empties the L2 before repetition ``rep``; by default a read of an
        unrelated 256 MB buffer, which leaves the L2 clean. ``host_reps``: the calls the
        host time is the median of (default ``reps``); a single call's host time varies
        more than its GPU time, and costs no flush."""
        self.torch, self.reps, self.warmup = torch, reps, warmup
        self.host_reps = reps if host_reps is None else host_reps
        if flush is None:
            buffer = torch.ones(FLUSH_BYTES // 8, dtype=torch.int64, device="cuda")
            flush = lambda rep: buffer.sum()  # noqa: E731
        self._flush = flush
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def gpu_us(self, call: Callable[[], Any]) -> tuple[float, Any]:
        """Median GPU µs of ``call`` (events around it), and the last call's results."""
        times, result = [], None
        for rep in range(self.warmup + self.reps):
            result = None  # the last call's results are freed before the next call
            self._flush(rep)
            self._start.record()
            result = call()
            self._end.record()
            self._end.synchronize()
            if rep >= self.warmup:
                times.append(self._start.elapsed_time(self._end) * 1e3)
        return statistics.median(times), result

    def host_us(self, call: Callable[[], Any]) -> float:
        """Median host µs of ``call`` with its results dropped, the device idle before."""
        times = []
        for rep in range(self.warmup + self.host_reps):
            self.torch.cuda.synchronize()
            start = time.perf_counter()
            result = call()
            del result
            elapsed = time.perf_counter() - start
            if rep >= self.warmup:
                times.append(elapsed * 1e6)
        self.torch.cuda.synchronize()
        return statistics.median(times)


def _bits(torch: Any, t: Any) -> Any:
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _equal(torch: Any, got: list[Any], want: list[Any]) -> bool:
    """Whether every result holds every bit it should (waits for the device)."""
    torch.cuda.synchronize()
    return len(got) == len(want) and all(
        torch.equal(_bits(torch, g), _bits(torch, w)) for g, w in zip(got, want)
    )


def _as_torch(torch: Any, arrays: list[Any]) -> list[Any]:
    """Torch views of results (DLPack for DeviceArrays and CuPy arrays, bf16 included)."""
    return [a if isinstance(a, torch.Tensor) else torch.from_dlpack(a) for a in arrays]


def _poison(torch: Any, t: Any) -> None:
    """Every byte POISON, whatever the tensor's strides (a byte view needs a contiguous
    last dim, which channels_last has not)."""
    width = t.element_size()
    pattern = int.from_bytes(bytes([POISON]) * width, "little", signed=True)
    _bits(torch, t).fill_(pattern)


class NotThisKind(Exception):
    """This kind of array cannot hold the case's dtype (the reason says why)."""


def _convert(dev: Any, torch: Any, cupy: Any, array: str, t: Any, dtype_name: str) -> Any:
    """``t`` (a CUDA tensor) as an array of kind ``array``, holding the same bits."""
    if array == "torch":
        return t
    if array == "cupy":
        try:
            return cupy.from_dlpack(t)
        except (TypeError, NotImplementedError) as err:
            raise NotThisKind(
                f"CuPy {cupy.__version__} takes no {dtype_name} through DLPack ({err})"
            ) from None
    a = dev.empty(tuple(t.shape), dtype_name)
    torch.from_dlpack(a).copy_(t)
    torch.cuda.synchronize()
    return a


def _pitched(torch: Any, rows: int, extent: int, dtype: Any) -> Any:
    """A (rows, extent) view of the first columns of a (rows, 1.5 * extent) tensor."""
    return torch.empty((rows, extent + extent // 2), dtype=dtype, device="cuda")[:, :extent]


def _stepped(torch: Any, rows: int, extent: int, dtype: Any) -> Any:
    """A (rows, extent) view of every other column of a (rows, 2 * extent) tensor: strides
    no fused kernel takes, so the op runs the strided copy."""
    return torch.empty((rows, 2 * extent), dtype=dtype, device="cuda")[:, ::2]


def run_case(bench: Bench, dev: Any, torch: Any, cupy: Any, name: str, batch: int, hw: int,
             sizes: tuple[int, ...], dtype_name: str, op: str, array: str, layout: str,
             ) -> list[dict[str, Any]]:  # fmt: skip
    dtype = getattr(torch, {"bf16": "bfloat16", "f32": "float32"}[dtype_name])
    if layout == "channels_last":  # (batch, C, H, W), N·H·W rows of C in memory
        fmt = torch.channels_last
        wide = torch.empty((batch, sum(sizes), hw, hw), dtype=dtype, device="cuda").contiguous(
            memory_format=fmt
        )
    elif layout == "pitched":  # a view of the first columns of a wider array (x[:, :C])
        fmt = torch.contiguous_format
        wide = _pitched(torch, batch * hw * hw, sum(sizes), dtype)
    elif layout == "stepped":  # every other column of a wider array (x[:, ::2])
        fmt = torch.contiguous_format
        wide = _stepped(torch, batch * hw * hw, sum(sizes), dtype)
    else:
        fmt = torch.contiguous_format
        wide = torch.empty((batch * hw * hw, sum(sizes)), dtype=dtype, device="cuda")
    _bits(torch, wide).random_()
    pieces = [p.contiguous(memory_format=fmt) for p in wide.split(list(sizes), 1)]
    inputs = [_convert(dev, torch, cupy, array, t, dtype_name) for t in ([wide] if op == "split" else pieces)]
    want = pieces if op == "split" else [wide]
    shapes = [tuple(w.shape) for w in want]
    if layout in ("pitched", "stepped") and op == "concat":  # into a view, as a split reads one
        outs_torch = [(_pitched if layout == "pitched" else _stepped)(torch, *wide.shape, dtype)]
    else:
        outs_torch = [torch.empty_like(w) for w in want]
    outs = [_convert(dev, torch, cupy, array, o, dtype_name) for o in outs_torch]
    out_views = _as_torch(torch, outs)  # what the out= calls write, seen by torch

    if op == "split":
        ours_alloc = lambda: runtime.channel_cat_backward(inputs[0], sizes, 1)  # noqa: E731
        ours_out = lambda: runtime.channel_cat_backward(inputs[0], sizes, 1, out=outs)  # noqa: E731
        torch_alloc = lambda: [p.contiguous(memory_format=fmt) for p in wide.split(list(sizes), 1)]  # noqa: E731
        if layout == "channels_last":  # split_with_sizes_copy writes these wrong: each piece's copy_
            torch_out = lambda: [o.copy_(p) for o, p in zip(outs_torch, wide.split(list(sizes), 1))]  # noqa: E731
        else:
            torch_out = lambda: torch.split_with_sizes_copy(wide, list(sizes), dim=1, out=outs_torch)  # noqa: E731
    else:
        ours_alloc = lambda: [runtime.channel_cat_forward(inputs, 1)]  # noqa: E731
        ours_out = lambda: runtime.channel_cat_forward(inputs, 1, out=outs[0])  # noqa: E731
        torch_alloc = lambda: [torch.cat(pieces, 1)]  # noqa: E731
        torch_out = lambda: torch.cat(pieces, 1, out=outs_torch[0])  # noqa: E731
    binding_alloc = None
    if array == "torch":
        framework_alloc = lambda: [torch.empty(s, dtype=dtype, device="cuda") for s in shapes]  # noqa: E731
        # the allocation torch offers Python at its cheapest, which the ops make: each
        # result's shape, dense in the input's memory format, of the input's dtype
        results = [(tuple(w.shape), w.contiguous(memory_format=fmt).stride()) for w in want]
        binding_alloc = lambda: [inputs[0].new_empty_strided(s, st) for s, st in results]  # noqa: E731
    elif array == "cupy":
        cdtype = inputs[0].dtype
        framework_alloc = lambda: [cupy.empty(s, dtype=cdtype) for s in shapes]  # noqa: E731
    else:
        framework_alloc = lambda: [dev.empty(s, dtype_name) for s in shapes]  # noqa: E731
    flat_src = torch.empty(
        sum(w.numel() for w in want) * wide.element_size(), dtype=torch.uint8, device="cuda"
    )
    flat_src.random_(0, 256)
    flat_dst = torch.empty_like(flat_src)

    # (method, out=, the call, the tensors holding its results: None where the call returns them)
    methods: list[tuple[str, bool, Callable[[], Any], list[Any] | None]] = [
        ("ours", False, ours_alloc, None),
        ("ours", True, ours_out, out_views),
    ]
    if array == "torch":
        methods += [("torch", False, torch_alloc, None), ("torch", True, torch_out, outs_torch)]
    alloc_host = bench.host_us(framework_alloc)
    binding_host = bench.host_us(binding_alloc) if binding_alloc is not None else None
    found = []
    for method, with_out, call, written in methods:
        for o in written or []:  # the last timed call's results are checked: poisoned first
            _poison(torch, o)
        us, last = bench.gpu_us(call)
        ok = _equal(torch, written if written is not None else _as_torch(torch, list(last)), want)
        host = bench.host_us(call)
        for o in written or []:  # and one call more, into poisoned outputs
            _poison(torch, o)
        again = call()
        ok = ok and _equal(torch, written if written is not None else _as_torch(torch, list(again)), want)
        row = {"case": f"{op} {name} {dtype_name}", "layout": layout, "array": array,
               "out": with_out, "method": method, "us": round(us, 2), "host_us": round(host, 2),
               "correct": bool(ok)}  # fmt: skip
        if method == "ours" and not with_out:
            row["framework_alloc_host_us"] = round(alloc_host, 2)
            if binding_host is not None:
                row["binding_alloc_host_us"] = round(binding_host, 2)
        found.append(row)
    us, _ = bench.gpu_us(lambda: flat_dst.copy_(flat_src))
    found.append({"case": f"{op} {name} {dtype_name}", "layout": layout, "array": array, "out": True,
                  "method": "flat_copy", "us": round(us, 2), "host_us": None,
                  "correct": bool(torch.equal(flat_dst, flat_src))})  # fmt: skip
    return found


def markdown(record: dict[str, Any]) -> str:
    """The table of ops.md, and each case against the issue's targets."""
    lines = [
        "# The ops as users call them",
        "",
        f"{record['gpu']}, driver {record['driver']}, {record['date']}; tree `{record['tree'][:12]}`; "
        f"`{record['command']}`. Median of {record['reps']} calls after {record['warmup']} warm-up"
        + (f" (host µs: of {record['host_reps']})." if "host_reps" in record else "."),
        "",
        "| case | layout | array | out= | method | GPU µs | host µs | correct |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in record["cases"]:
        host = "–" if c["host_us"] is None else f"{c['host_us']:.1f}"
        lines.append(
            f"| {c['case']} | {c['layout']} | {c['array']} | {'yes' if c['out'] else 'no'} | {c['method']} | "
            f"{c['us']:.1f} | {host} | {'yes' if c['correct'] else 'NO'} |"
        )
    by = {(c["case"], c["layout"], c["array"], c["out"], c["method"]): c for c in record["cases"]}
    lines += [
        "",
        "Allocating calls against their targets (GPU ≤ 1.1× the out= call's; host ≤ out= + the "
        "framework's allocations + 1 µs; both ahead of torch's allocating call):",
        "",
        "| case | layout | array | GPU / out= | host µs (limit) | torch/ours GPU | torch/ours host | met |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (case, layout, array, out, method), c in by.items():
        if method != "ours" or out:
            continue
        with_out = by[(case, layout, array, True, "ours")]
        limit = with_out["host_us"] + c["framework_alloc_host_us"] + 1.0
        gpu_ratio = c["us"] / with_out["us"]
        met = gpu_ratio <= 1.1 and c["host_us"] <= limit
        versus = ("–", "–")
        torch_alloc = by.get((case, layout, array, False, "torch"))
        if torch_alloc is not None:
            versus = (f"{torch_alloc['us'] / c['us']:.2f}×", f"{torch_alloc['host_us'] / c['host_us']:.2f}×")
            met = met and c["us"] <= torch_alloc["us"] and c["host_us"] <= torch_alloc["host_us"]
        lines.append(
            f"| {case} | {layout} | {array} | {gpu_ratio:.2f}× | {c['host_us']:.1f} ({limit:.1f}) | "
            f"{versus[0]} | {versus[1]} | {'yes' if met else 'no'} |"
        )
    lines += allocation_costs(by)
    for wanted, target in (("channels_last", 90), ("pitched", 85)):
        lines += ["", f"{wanted} against the flat copy of the same bytes (target ≥ {target}%):", "",
                  "| case | out= | flat copy / ours, GPU |", "|---|---|---|"]  # fmt: skip
        for (case, layout, array, out, method), c in by.items():
            if layout == wanted and method == "ours":
                flat = by[(case, layout, array, True, "flat_copy")]
                lines.append(f"| {case} | {'yes' if out else 'no'} | {100 * flat['us'] / c['us']:.1f}% |")
    lines += ["", "Not measured:", ""] + [f"- {k}: {v}" for k, v in record["not_measured"].items()]
    return "\n".join(lines) + "\n"


def allocation_costs(by: dict[tuple[Any, ...], dict[str, Any]]) -> list[str]:
    """Where an allocating call on torch tensors spends its host time, beside torch's own
    call: medians per op and layout of what allocating adds to each one's ``out=`` call,
    and what the cheapest allocation torch offers Python (``new_empty_strided``, the one
    the ops make) costs alone in the same run."""
    groups: dict[tuple[str, str], list[tuple[float, ...]]] = {}
    for (case, layout, array, out, method), c in by.items():
        if array != "torch" or method != "ours" or out or "binding_alloc_host_us" not in c:
            continue
        ours_out = by[(case, layout, array, True, "ours")]["host_us"]
        torch_alloc = by[(case, layout, array, False, "torch")]["host_us"]
        torch_out = by[(case, layout, array, True, "torch")]["host_us"]
        groups.setdefault((case.split()[0], layout), []).append(
            (c["host_us"] - ours_out, c["binding_alloc_host_us"], torch_alloc - torch_out,
             torch_out - ours_out, float(c["host_us"] <= torch_alloc))
        )  # fmt: skip
    if not groups:
        return []
    lines = [
        "",
        "Allocating calls on torch tensors, host µs, medians per op and layout: what allocating adds "
        "to ours and to torch's `out=` call, what `new_empty_strided` (torch's cheapest allocation from "
        "Python, the one ours makes) costs alone, and how far ours is ahead with `out=`:",
        "",
        "| op | layout | rows | ours: allocating − out= | new_empty_strided alone | torch: allocating − out= "
        "| torch out= − ours out= | ours ahead allocating |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (op, layout), rows in groups.items():
        med = [statistics.median(col) for col in zip(*rows)]
        ahead = int(sum(r[4] for r in rows))
        lines.append(
            f"| {op} | {layout} | {len(rows)} | {med[0]:.1f} | {med[1]:.1f} | {med[2]:.1f} | {med[3]:.1f} "
            f"| {ahead} of {len(rows)} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="two shapes, fewer repetitions")
    p.add_argument("--reps", type=int, default=None, help="timed calls per method (default 30, --quick 10)")
    p.add_argument(
        "--host-reps", type=int, default=None, help="host-timed calls per method (default 100, --quick 30)"
    )
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "perf")
    args = p.parse_args(argv)
    reason = runtime.unavailable_reason()
    if reason:
        print(f"no GPU: {reason}; nothing to measure")
        return 0
    import torch

    try:
        import cupy
    except ImportError:
        cupy = None
    tree = records.tree_hash()  # of the code that runs, taken before it runs
    dev = runtime.Device(torch.cuda.current_device())
    reps = args.reps if args.reps is not None else (10 if args.quick else 30)
    host_reps = args.host_reps if args.host_reps is not None else (30 if args.quick else 100)
    bench = Bench(torch, reps, args.warmup, host_reps=host_reps)
    shapes = (SMALL + CLIENT)[:: 4 if args.quick else 1]
    arrays = ["torch", "device_array"] + (["cupy"] if cupy is not None else [])
    cases: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    for name, batch, hw, sizes in shapes:
        for dtype in ("bf16", "f32"):
            for op in ("split", "concat"):
                runs = [(array, "contiguous") for array in arrays]
                if hw > 1:  # the client's own layout; torch is the array that has it
                    runs.append(("torch", "channels_last"))
                runs.append(("torch", "pitched"))  # the wide array a view of part of every row
                runs.append(("torch", "stepped"))  # ... of every other column: the strided copy
                for array, layout in runs:
                    try:
                        cases += run_case(
                            bench, dev, torch, cupy, name, batch, hw, sizes, dtype, op, array, layout
                        )
                    except NotThisKind as why:
                        skipped[f"{array} {dtype}"] = str(why)
                        continue
                    print(f"{op} {name} {dtype} {array} {layout}", flush=True)
    if records.tree_hash() != tree:
        print("bench_ops: the tree changed while it ran; not writing ops.json")
        return 1
    record = {
        **records.header(records.command_line(argv), tree),
        "reps": reps,
        "host_reps": host_reps,
        "warmup": args.warmup,
        "not_measured": {
            **NOT_MEASURED,
            **({} if cupy is not None else {"cupy": "CuPy is not importable"}),
            **skipped,
        },
        "cases": cases,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ops.json").write_text(json.dumps(record, indent=1) + "\n")
    table = markdown(record)
    (args.out / "ops.md").write_text(table)
    print(table)
    return 0 if all(c["correct"] for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
