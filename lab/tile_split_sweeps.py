#!/usr/bin/env python3
"""Study: tile variants on the sweeps' splits alone, by piece count (issue 24).

    python lab/tile_split_sweeps.py SEEDS VARIANTS DTYPES OUTPUT
    python lab/tile_split_sweeps.py 20261217,20261214 planned,b512,b1024_u2 u8,bf16 out.json

Every split of the benchmark's sweeps (``scripts/bench_cases.sweep_cases(64, seed)``) of
the given dtypes that the planner sends to the tile kernel, through
``tile_variants.run_case`` (the op with ``out=`` into torch tensors, each variant against
the flat copy of the same bytes in the same run, every result checked), summarised by
the number of pieces. The JSON is rewritten after each case, so a run cut short keeps
what it measured. ``lab/data/tile-variants-17.json`` was written by this code when it was
``lab/tmp/six.py`` (its ``command`` says so).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts"), str(ROOT / "lab")]


def main(argv: list[str]) -> int:
    import records
    import tile_variants as tv
    import torch
    from bench_cases import sweep_cases
    from bench_ops import Bench

    import runtime
    from ptxgen.kernels import plan as planner

    if len(argv) != 4:
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    seeds = [int(s) for s in argv[0].split(",")]
    wanted, dtypes, output = set(argv[1].split(",")), argv[2].split(","), Path(argv[3])
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    bench = Bench(torch, reps=15, warmup=3)
    out: list[dict] = []
    for seed in seeds:
        for c in sweep_cases(64, seed):
            if c.op != "split" or c.dtype not in dtypes:
                continue
            plan = runtime.ops.plan_for("backward", c.dtype, c.rows, c.sizes)
            if not any(getattr(s.kernel, "info", {}).get("family") == "tile" for s in plan.steps):
                continue
            case = ("split", c.dtype, c.rows, tuple(c.sizes))
            entry = tv.run_case(bench, torch, runtime, planner, sms, case, wanted, None)
            out.append({**entry, "seed": seed})
            output.write_text(json.dumps({"partial": True, "cases": out}))
    summary = {}
    for name in sorted(wanted):
        for n in (*range(2, 7), None):
            got = [
                r[name]["of_flat"]
                for r in out
                if (n is None or len(r["sizes"]) == n) and "of_flat" in r.get(name, {})
            ]
            if got:
                key = f"{name} {'all' if n is None else f'{n} pieces'}"
                summary[key] = {"median": round(statistics.median(got), 4), "min": min(got), "n": len(got)}
    for key in sorted(summary):
        print(key, summary[key])
    header = records.header(records.command_line(), records.tree_hash())
    output.write_text(json.dumps({**header, "summary": summary, "cases": out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
