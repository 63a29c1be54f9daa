"""Study: ``rect`` against the tile kernel where the planner picks ``rect`` for its
8- and 16-byte granules (issue 24).

The sweep of seed 20261205 (``docs/perf/results.json``) has its lowest split there: f64
45,795 × (219+58+263), rows of 4,320 bytes, 0.655 of the flat copy and below torch. This
times, on the sweeps' shapes whose plan launches ``rect`` (small ops left out), the
planned op against the same op with ``RECT_GRANULE`` raised past 16 (so the tile kernel
takes them), each against the flat copy of the same bytes, every result checked.

    PYTHONPATH=.:scripts:lab python lab/rect_vs_tile.py --seeds 20261203,20261204,20261205 -o out.json

``--client``: instead, the splits of YOLO's C2f/SPPF pieces at 640 px (80x80 × (64+64+64)
and (16+16+32), 40x40 × 3·128, 20x20 × 4·256) at batch 1, 4, 16 and 64, bf16 and f32:
the planned tile against ``rect``, which the planner took for them before it sent
whole-row splits at 8- and 16-byte granules to the tile (forced here by raising
``SMALL_OP_BYTES``, under which a window of any granule goes to rect).
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
    p.add_argument("--client", action="store_true", help="the YOLO splits at batch 1-64 instead")
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
    client = [(80 * 80, (64, 64, 64)), (80 * 80, (16, 16, 32)), (40 * 40, (128,) * 3), (20 * 20, (256,) * 4)]
    for batch in (1, 4, 16, 64) if args.client else ():
        for hw, sizes in client:
            for dt in ("bf16", "f32"):
                cases.append((0, "split", dt, batch * hw, sizes))
    for seed in map(int, args.seeds.split(",")) if not args.client else ():
        for c in sweep_cases(args.shapes, seed):
            op = "backward" if c.op == "split" else "forward"
            plan = runtime.ops.plan_for(op, c.dtype, c.rows, c.sizes)
            families = {getattr(s.kernel, "info", {}).get("family") for s in plan.steps}
            if "rect" in families:  # the sweep's shapes are 64 MB a side or more: no small ops
                cases.append((seed, c.op, c.dtype, c.rows, tuple(c.sizes)))
    results = []
    forced = ("rect", "SMALL_OP_BYTES", 1 << 40) if args.client else ("tile", "RECT_GRANULE", 32)
    for seed, op, dt, rows, sizes in cases:
        call, exact, reset, wide = case_calls(torch, runtime, op, dt, rows, sizes)
        flat_src, flat_dst = wide.view(-1), torch.empty_like(wide).view(-1)
        flat_us, _ = bench.gpu_us(lambda dst=flat_dst, src=flat_src: dst.copy_(src))
        entry: dict[str, Any] = {"seed": seed, "op": op, "dtype": dt, "rows": rows, "sizes": list(sizes)}
        entry["flat_us"] = flat_us
        for name, value in (("planned", None), (forced[0], forced[2])):
            kept = getattr(fastcat, forced[1])
            if value is not None:
                setattr(fastcat, forced[1], value)
            runtime.ops.clear_plans()
            reset()
            try:
                plan = runtime.ops.plan_for("backward" if op == "split" else "forward", dt, rows, sizes)
                us, _ = bench.gpu_us(call)
                torch.cuda.synchronize()
                entry[name] = {"us": round(us, 2), "of_flat": round(flat_us / us, 4), "correct": exact(),
                               "kernels": [s.kernel.id for s in plan.steps]}  # fmt: skip
            finally:
                setattr(fastcat, forced[1], kept)
                runtime.ops.clear_plans()
        shown = f"{op:6} {dt:4} {rows}x({'+'.join(map(str, sizes))})"
        planned, other = entry["planned"], entry[forced[0]]
        print(f"{shown}: planned {planned['of_flat']:.3f} ({planned['us']} us) {forced[0]} "
              f"{other['of_flat']:.3f} ({other['us']} us)", flush=True)  # fmt: skip
        results.append(entry)
    summary = {}
    for name in ("planned", forced[0]):
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
