"""Study: ``rect`` against the tile kernel where the planner picks ``rect`` for its
8- and 16-byte granules (issue 24).

The sweep of seed 20261205 (``docs/perf/results.json``) has its lowest split there: f64
45,795 × (219+58+263), rows of 4,320 bytes, 0.655 of the flat copy and below torch. This
times, on the sweeps' shapes whose plan launches ``rect`` (small ops left out), the
planned op against the same op with ``RECT_GRANULE`` raised past 16 (so the tile kernel
takes them), each against the flat copy of the same bytes, every result checked.

    PYTHONPATH=.:scripts:lab python lab/rect_vs_tile.py --seeds 20261203,20261204,20261205 -o out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts"), str(ROOT / "lab")]

import records  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="20261203,20261204,20261205")
    p.add_argument("--shapes", type=int, default=64)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("-o", "--output", type=Path, required=True)
    args = p.parse_args(argv)
    import torch
    from bench_cases import sweep_cases
    from bench_ops import Bench
    from tile_variants import case_calls

    import runtime
    from ptxgen.kernels import fastcat

    bench = Bench(torch, reps=args.reps, warmup=3)
    cases = []
    for seed in map(int, args.seeds.split(",")):
        for c in sweep_cases(args.shapes, seed):
            op = "backward" if c.op == "split" else "forward"
            plan = runtime.ops.plan_for(op, c.dtype, c.rows, c.sizes)
            families = {getattr(s.kernel, "info", {}).get("family") for s in plan.steps}
            if "rect" in families:  # the sweep's shapes are 64 MB a side or more: no small ops
                cases.append((seed, c.op, c.dtype, c.rows, tuple(c.sizes)))
    results = []
    original = fastcat.RECT_GRANULE
    for seed, op, dt, rows, sizes in cases:
        call, exact, reset, wide = case_calls(torch, runtime, op, dt, rows, sizes)
        flat_src, flat_dst = wide.view(-1), torch.empty_like(wide).view(-1)
        flat_us, _ = bench.gpu_us(lambda dst=flat_dst, src=flat_src: dst.copy_(src))
        entry: dict[str, Any] = {"seed": seed, "op": op, "dtype": dt, "rows": rows, "sizes": list(sizes)}
        entry["flat_us"] = flat_us
        for name, granule in (("planned", original), ("tile", 32)):
            fastcat.RECT_GRANULE = granule
            runtime.ops.clear_plans()
            reset()
            try:
                us, _ = bench.gpu_us(call)
                torch.cuda.synchronize()
                entry[name] = {"us": round(us, 2), "of_flat": round(flat_us / us, 4), "correct": exact()}
            finally:
                fastcat.RECT_GRANULE = original
                runtime.ops.clear_plans()
        shown = f"{op:6} {dt:4} {rows}x({'+'.join(map(str, sizes))})"
        planned, tile = entry["planned"]["of_flat"], entry["tile"]["of_flat"]
        print(f"{shown}: planned {planned:.3f} tile {tile:.3f}", flush=True)
        results.append(entry)
    summary = {}
    for name in ("planned", "tile"):
        for op in ("split", "concat"):
            got = [r[name]["of_flat"] for r in results if r["op"] == op]
            if got:
                summary[f"{name} {op}"] = {"median": statistics.median(got), "min": min(got), "n": len(got)}
    print(json.dumps(summary))
    header = records.header(records.command_line(argv), records.tree_hash())
    args.output.write_text(json.dumps({**header, "summary": summary, "cases": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
