#!/usr/bin/env python3
"""Study: tile variants on the sweeps' tile cells, by op and piece count (issue 24).

    python lab/sweep_variants.py "SEED:OP:DTYPES;..." VARIANTS OUTPUT
    python lab/sweep_variants.py "20261217:split:u8,bf16;20261217:concat:u8" planned,old out.json

For each job, the sweep's cases of that op and those dtypes that the planner sends to
the tile kernel (``scripts/bench_cases.sweep_cases(64, SEED)``), through
``tile_variants.run_case`` (``out=`` into torch tensors, every result checked, the flat
copy of the same bytes in the same run); the JSON is rewritten after each case, so a
run cut short keeps what it measured. Variants: ``tile_variants.py``'s (``planned``,
``b512``, ...) and ``old`` and ``new_ask4`` (``old_table_tile.py``: the chunk table
filled a warp a chunk, on a tree with the lane table).

Written by this code when it was ``lab/tmp/six.py`` (splits only) and
``lab/tmp/table_study.py`` (their ``command``): ``lab/data/tile-variants-17.json``
(``"20261217:split:u8,bf16;20261214:split:u8,bf16" planned,b512,b1024_u2``) and
``lab/data/tile-variants-18.json``.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts"), str(ROOT / "lab")]


def main(argv: list[str]) -> int:
    import old_table_tile
    import records
    import tile_variants as tv
    import torch
    from bench_cases import sweep_cases
    from bench_ops import Bench

    import runtime
    from ptxgen.kernels import plan as planner

    if len(argv) != 3:
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    classes = {"old": old_table_tile.OldTableTile, "new_ask4": old_table_tile.NewTableAsk4}
    original = tv.window_tile
    tv.WINDOWS = (*tv.WINDOWS, *classes)  # run_case swaps in window_tile(name) for these
    tv.window_tile = lambda name: classes[name] if name in classes else original(name)
    tv.BACKWARD_ONLY += [(n, {}, None) for n in classes]
    tv.FORWARD_ONLY += [(n, {}, None) for n in classes]
    jobs = [job.split(":") for job in argv[0].split(";")]
    wanted, output = set(argv[1].split(",")), Path(argv[2])
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    bench = Bench(torch, reps=15, warmup=3)
    out: list[dict] = []
    for seed, op, dtypes in jobs:
        for c in sweep_cases(64, int(seed)):
            if c.op != op or c.dtype not in dtypes.split(","):
                continue
            plan = runtime.ops.plan_for("backward" if op == "split" else "forward", c.dtype, c.rows, c.sizes)
            if not any(getattr(s.kernel, "info", {}).get("family") == "tile" for s in plan.steps):
                continue
            case = (op, c.dtype, c.rows, tuple(c.sizes))
            entry = tv.run_case(bench, torch, runtime, planner, sms, case, wanted, None)
            out.append({**entry, "seed": int(seed)})
            output.write_text(json.dumps({"partial": True, "cases": out}))
    summary = {}
    for name in sorted(wanted):
        for op in ("split", "concat"):
            for n in (2, 3, 4, 5, 6, None):
                got = [
                    r[name]["of_flat"]
                    for r in out
                    if r["op"] == op and (n is None or len(r["sizes"]) == n) and "of_flat" in r.get(name, {})
                ]
                if got:
                    key = f"{name} {op} {'all' if n is None else n}"
                    median = round(statistics.median(got), 4)
                    summary[key] = {"median": median, "min": min(got), "n": len(got)}
    for key in sorted(summary):
        print(key, summary[key])
    header = records.header(records.command_line(), records.tree_hash())
    output.write_text(json.dumps({**header, "summary": summary, "cases": out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
