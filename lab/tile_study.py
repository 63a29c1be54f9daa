#!/usr/bin/env python3
"""Study: this tree's tile kernels against an earlier version of them, in one GPU run.

    git show 358a72c:ptxgen/kernels/fastcat_tile.py > lab/tmp/fastcat_tile_base.py   # here
    python lab/tile_study.py --base lab/tmp/fastcat_tile_base.py                      # on the GPU
    python lab/tile_study.py --base FILE --shapes 16 --seed 20261201 --reps 30

Every shape of the random sweep (``scripts/bench_cases.sweep_cases(shapes, seed)``: 1-,
2-, 4- and 8-byte types, 2-6 pieces of 1-300 elements, 64-192 MB a side), as a split and
a concat through ``runtime.channel_cat_backward`` / ``_forward`` with ``out=`` given (torch
tensors), timed the way ``scripts/bench_ops.py`` times an op (CUDA events around one call,
a read of an unrelated 256 MB buffer before it, the median): once as the planner builds
this tree's ``FastcatTile`` (``ours``), once with the base file's ``FastcatTile`` in its
place (``base``; the planner's rule and every other family unchanged), and the flat copy
of the same bytes (``dst.copy_(src)``). Every result of every side is compared
with torch's slicing. The base file is loaded as a module, its relative imports made
absolute; nothing of it is kept.

Prints one line per case and writes ``lab/data/tile-study.json``: the header of
``scripts/records.py``, the base file's sha256, and per case the GPU µs of each side, the
flat copy's, and whether every side was exact.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

import records  # noqa: E402
from bench_cases import sweep_cases  # noqa: E402

OUT = ROOT / "lab" / "data" / "tile-study.json"
TORCH_DTYPES = {"u8": "uint8", "bf16": "bfloat16", "f32": "float32", "f64": "float64"}


def load_base(path: Path) -> Any:
    """The ``FastcatTile`` class of ``path`` (a copy of ptxgen/kernels/fastcat_tile.py)."""
    text = path.read_text()
    text = re.sub(r"^from \.\.(\w+)", r"from ptxgen.\1", text, flags=re.M)
    text = re.sub(r"^from \.(\w+)", r"from ptxgen.kernels.\1", text, flags=re.M)
    with tempfile.TemporaryDirectory() as tmp:
        module_path = Path(tmp, "fastcat_tile_base.py")
        module_path.write_text(text)
        spec = importlib.util.spec_from_file_location("fastcat_tile_base", module_path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module.FastcatTile


def tiles_in_plan(runtime: Any, case: Any) -> int:
    """How many steps of the case's plan are tile kernels (0: the study does not apply)."""
    op = "backward" if case.op == "split" else "forward"
    plan = runtime.ops.plan_for(op, case.dtype, case.rows, case.sizes)
    return sum(getattr(step.kernel, "info", {}).get("family") == "tile" for step in plan.steps)


def run_case(bench: Any, torch: Any, runtime: Any, sides: dict[str, Any], case: Any) -> dict[str, Any]:
    """One case: the flat copy, then the op with each side's FastcatTile in the planner."""
    from ptxgen.kernels import fastcat_tile

    dtype = getattr(torch, TORCH_DTYPES[case.dtype])
    rows, sizes = case.rows, list(case.sizes)
    wide = torch.empty((rows, sum(sizes)), dtype=dtype, device="cuda")
    wide.view(torch.uint8).random_()
    pieces = [p.contiguous() for p in wide.split(sizes, 1)]
    if case.op == "split":
        outs = [torch.empty_like(p) for p in pieces]

        def call() -> Any:
            return runtime.channel_cat_backward(wide, sizes, 1, out=outs)

        def exact() -> bool:
            return all(torch.equal(o.view(torch.uint8), p.view(torch.uint8)) for o, p in zip(outs, pieces))
    else:
        y = torch.empty_like(wide)

        def call() -> Any:
            return runtime.channel_cat_forward(pieces, 1, out=y)

        def exact() -> bool:
            return torch.equal(y.view(torch.uint8), wide.view(torch.uint8))

    flat_src, flat_dst = wide.view(-1), torch.empty_like(wide).view(-1)
    flat_us, _ = bench.gpu_us(lambda: flat_dst.copy_(flat_src))
    ours = fastcat_tile.FastcatTile
    timed: dict[str, float] = {}
    correct: dict[str, bool] = {}
    for side, cls in sides.items():
        fastcat_tile.FastcatTile = cls  # the planner imports it at each plan
        runtime.ops.clear_plans()
        try:
            timed[side], _ = bench.gpu_us(call)
            torch.cuda.synchronize()
            correct[side] = exact()
        finally:
            fastcat_tile.FastcatTile = ours
            runtime.ops.clear_plans()
    entry: dict[str, Any] = {"op": case.op, "dtype": case.dtype, "rows": rows, "sizes": sizes}
    entry["tiles"] = tiles_in_plan(runtime, case)
    entry["flat_copy_us"] = round(flat_us, 2)
    for side in sides:
        entry[f"{side}_us"] = round(timed[side], 2)
        entry[f"{side}_of_flat"] = round(flat_us / timed[side], 4)
    entry["correct"] = all(correct.values())
    return entry


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from bench_ops import Bench

    import runtime
    from ptxgen.kernels import fastcat_tile

    tree = records.tree_hash()
    sides = {"ours": fastcat_tile.FastcatTile, "base": load_base(args.base)}
    bench = Bench(torch, reps=args.reps, warmup=5)
    results = []
    for case in sweep_cases(args.shapes, args.seed):
        entry = run_case(bench, torch, runtime, sides, case)
        results.append(entry)
        shape = f"{entry['rows']}x({'+'.join(map(str, entry['sizes']))})"
        shares = ", ".join(f"{side} {entry[f'{side}_of_flat']:.3f}" for side in sides)
        print(
            f"{case.op:6} {case.dtype:4} {shape}: {shares} of the flat copy; {entry['tiles']} tile "
            f"launch(es); {'exact' if entry['correct'] else 'WRONG'}",
            flush=True,
        )
    tiled = [r for r in results if r["tiles"]]
    summary = {
        side: {
            op: round(statistics.median(r[f"{side}_of_flat"] for r in tiled if r["op"] == op), 4)
            for op in ("split", "concat")
            if any(r["op"] == op for r in tiled)
        }
        for side in sides
    }
    return {
        **records.header(records.command_line(), tree),
        "base_file_sha256": hashlib.sha256(args.base.read_bytes()).hexdigest(),
        "seed": args.seed,
        "reps": args.reps,
        "median_of_flat_where_tiles_run": summary,
        "cases": results,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", type=Path, required=True, help="an earlier ptxgen/kernels/fastcat_tile.py")
    p.add_argument("--shapes", type=int, default=16, help="sweep shapes, each a split and a concat")
    p.add_argument("--seed", type=int, default=20261201, help="the sweep's seed (the record of 2026-12-01)")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("-o", "--output", type=Path, default=OUT)
    args = p.parse_args(argv)
    if not args.base.is_file():
        p.error(
            f"--base {args.base}: no such file (make it with git show COMMIT:ptxgen/kernels/fastcat_tile.py)"
        )
    record = run(args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(record, indent=2) + "\n")
    print(
        f"wrote {args.output}; where tiles run, the median of the flat copy: "
        f"{record['median_of_flat_where_tiles_run']}"
    )
    return 0 if all(c["correct"] for c in record["cases"]) else 1


if __name__ == "__main__":
    sys.exit(main())
