"""Probe: where the small shapes' fixed 0.3 us goes (issue 24: >= 0.92 of the copy).

    python lab/small_rect_probe.py [--rounds N] [--reps N] [-o lab/data/small-rect-probe.json]

The planned split of 2,048 x (3+5+24) (64-256 KB a side) is one ``rect`` launch of
element-wide accesses over 3 chunks (4 arrays), and takes about 0.3 us more than a flat
copy of the same bytes; its prologue's length is not the cause (``rect_prologue.py``),
nor the dependent launch, nor loading and launching PTX (the project's own 16-byte copy
kernel runs level with ``cuMemcpyDtoD``). This times, on the same arrays, with CUDA
events around each launch after scripts/bench_embed.py's 256 MB ``cuMemsetD8Async``
flush, in an order that rotates round by round:

* the planned split (rect, 3 chunks, the planner's granule and slots: 4 arrays);
* the same rect kernel as one chunk over the whole row (a copy of the wide array into
  one output: 2 arrays, the same granule, slots and grid);
* rect as one chunk over the whole row in 16-byte accesses (2 arrays, the planner's
  16-byte shape);
* torch's ``copy_`` of the wide array into one output (the flat copy).

If the one-chunk copy at the planned granule runs as the flat copy, the cost is in the
chunks (the arrays or the choice of chunk); if it runs as the split, in element-wide
accesses. Every output is checked. A probe: it writes no record.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

ROWS, SIZES = 2048, (3, 5, 24)


def variants(
    torch: Any, dtype: str, forms: list[tuple[int, int, int]] = ()
) -> tuple[dict[str, Any], dict[str, Any], tuple[list[Any], Any]]:
    """For one dtype, on fresh arrays: name -> call, name -> its check, and the outputs
    (the split's pieces, the whole-row copy's array). ``forms``: more one-chunk copies of
    the whole row, as ``(width, unroll, block)``, where the width divides the row."""
    import runtime
    from ptxgen import resolve_dtype
    from ptxgen.kernels.fastcat_rect import FastcatRect, rect_cols
    from runtime.ops import plan_for
    from runtime.plan import Ptr

    device = runtime.Device(0)
    isz = resolve_dtype(dtype).itemsize
    row_bytes = sum(SIZES) * isz
    wide = torch.randint(0, 256, (ROWS, row_bytes), dtype=torch.uint8, device="cuda")
    pieces = [torch.empty(ROWS, s * isz, dtype=torch.uint8, device="cuda") for s in SIZES]
    whole = torch.empty_like(wide)
    expected = list(wide.split([s * isz for s in SIZES], dim=1))

    plan = plan_for("backward", dtype, ROWS, SIZES, device)
    bases = [p.data_ptr() for p in pieces] + [wide.data_ptr()]
    planned = []
    for step in plan.steps:
        args = tuple(bases[a.array] + a.byte_offset if isinstance(a, Ptr) else a for a in step.args)
        planned.append((device.load(step.kernel).function, step.grid, step.block, args))
    (planned_kernel,) = [s.kernel for s in plan.steps]
    family = planned_kernel.info["family"]
    if family == "rect":
        width, unroll = planned_kernel.width, planned_kernel.unroll
        label = f"planned split: rect, {len(SIZES)} chunks, {width}-byte x {unroll}"
    else:  # direct rowpack since c0a7e37; the rect planned before it: the element's width, 32 B a thread
        width, unroll = isz, min(8, 32 // isz)
        label = f"planned split: {family}"

    def one_chunk(width: int, unroll: int, block: int = 128) -> tuple[Any, Any, Any, tuple[int, ...]]:
        vectors = row_bytes // width
        kernel = FastcatRect(
            direction="backward", width=width, cols=rect_cols(vectors, block, unroll), chunks=1,
            unroll=unroll, block=block, target=planned_kernel.target,
            dependent_launch=planned_kernel.dependent_launch,
        )  # fmt: skip
        args = (wide.data_ptr(), row_bytes, ROWS, vectors, whole.data_ptr(), row_bytes)
        return device.load(kernel).function, kernel.grid(ROWS, vectors), kernel.block, args

    launches = {
        label: planned,
        f"rect, 1 chunk, whole row, {width}-byte x {unroll}": [one_chunk(width, unroll)],
        "rect, 1 chunk, whole row, 16-byte x 2": [one_chunk(16, 2)],
    }
    for width, unroll, block in forms:
        if row_bytes % width == 0:
            name = f"rect, 1 chunk, whole row, {width}-byte x {unroll}, block {block}"
            launches.setdefault(name, [one_chunk(width, unroll, block)])

    def run(steps: list[Any]) -> Any:
        def call() -> None:
            for fn, grid, block, args in steps:
                fn.launch(grid, block, args)

        return call

    calls = {name: run(steps) for name, steps in launches.items()}
    calls["torch: copy_ of the wide array"] = lambda: whole.copy_(wide)

    def split_right() -> bool:
        return all(torch.equal(p, e) for p, e in zip(pieces, expected))

    def copy_right() -> bool:
        return torch.equal(whole, wide)

    checks = {name: split_right if name.startswith("planned") else copy_right for name in calls}
    return calls, checks, (pieces, whole)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--dtypes", default="u8,bf16,f32")
    p.add_argument(
        "--forms",
        default="",
        help="more whole-row copies, comma-separated WIDTHxUNROLL[@BLOCK] (e.g. 4x2,16x1@256)",
    )
    p.add_argument("-o", "--output", type=Path)
    args = p.parse_args(argv)
    forms = []
    for form in filter(None, args.forms.split(",")):
        shape, _, block = form.partition("@")
        width, unroll = shape.split("x")
        forms.append((int(width), int(unroll), int(block or 128)))

    import bench_embed
    import torch
    from bench_ops import Bench

    bench = Bench(torch, reps=args.reps, warmup=10, flush=bench_embed.write_flush(torch))
    doc: dict[str, Any] = {"rows": ROWS, "sizes": SIZES, "gpu": torch.cuda.get_device_name(), "dtypes": {}}
    for dtype in args.dtypes.split(","):
        calls, checks, outputs = variants(torch, dtype, forms)
        names = list(calls)
        times: dict[str, list[float]] = {name: [] for name in names}
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                for out in (*outputs[0], outputs[1]):
                    out.fill_(0xA5)  # poison: each check sees this method's bytes
                times[name].append(round(bench.gpu_us(calls[name])[0], 3))
                torch.cuda.synchronize()
                if not checks[name]():
                    raise SystemExit(f"{dtype} {name}: wrong result")
        flat = statistics.median(times["torch: copy_ of the wide array"])
        rows = {n: {"median_us": statistics.median(t), "of_flat_copy": round(flat / statistics.median(t), 3),
                    "rounds_us": t} for n, t in times.items()}  # fmt: skip
        doc["dtypes"][dtype] = rows
        for name, row in rows.items():
            print(f"{dtype:5s} {name:56s} {row['median_us']:6.3f} us  {row['of_flat_copy']:.3f} of the copy")
    if args.output:
        args.output.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
