"""Probe: the one embed case where the C program trails the Python op (issue 25's 1.03x).

    python lab/embed_gap_probe.py [--rounds N] [--reps N] [-o lab/data/embed-gap.json]

In every embed record since tree ``2d2d72e9`` the split bf16 1,600 x (128+128+128) (the
YOLO C2f gradient at batch 1, 20 x 20) took about 5.3 us from examples/c against 5.07
from Python, the same plan and kernel, both timed with events around one op after the
same 256 MB ``cuMemsetD8Async`` flush; alternating which side runs first (tree
``d0203dba``) left it at 5.34 against 5.07. What else differs: the C program times on a
stream it creates non-blocking, with arrays from ``cuMemAlloc``; scripts/bench_embed.py's
Python side on torch's current stream (the legacy default stream) with torch's arrays.

This times, round by round in a rotating order, the C program (``--time``) and
scripts/bench_embed.py's own Python side (torch's default stream), and prints and writes
each one's time per round and median. (Its first run also timed the Python side under a
``torch.cuda.Stream`` context; the op takes ``stream=None`` as the default stream, not
torch's current one, so that row timed nothing and the side is gone.) A probe: it
writes no record.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

CASE = {"op": "split", "dtype": "bf16", "rows": 1600, "sizes": [128, 128, 128], "group": "client"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("-o", "--output", type=Path)
    args = p.parse_args(argv)

    import bench_embed
    import torch
    from bench_ops import Bench

    import runtime
    from ptxgen.bundle import OpShape, write_op_bundle
    from runtime.plan import DeviceTraits

    traits = DeviceTraits.of(runtime.Device(0))
    work = Path(tempfile.mkdtemp())
    write_op_bundle([OpShape(CASE["op"], CASE["dtype"], tuple(CASE["sizes"]))], traits, work / "ops")
    made = subprocess.run(["make", "-s", "-C", str(ROOT / "examples" / "c"), f"BUILD={work / 'build'}"],
                          capture_output=True, text=True)  # fmt: skip
    if made.returncode:
        raise SystemExit(f"examples/c does not build:\n{made.stdout}{made.stderr}")
    program = [str(work / "build" / "channel_cat_example"), "--op", bench_embed.op_id(CASE), "--rows"]
    program += [str(CASE["rows"]), "--time", str(args.reps), str(work / "ops")]
    bench = Bench(torch, reps=args.reps, warmup=10, flush=bench_embed.write_flush(torch))

    def c_side() -> float:
        out = subprocess.run(program, capture_output=True, text=True, check=True, timeout=120)
        return bench_embed.parse_c_timing(out.stdout)["c_us"]

    def python_side() -> float:
        # bench_embed.py's own Python side, timed as the record times it
        us, _, correct = bench_embed._python_case(bench, torch, CASE)
        if not correct:
            raise SystemExit("the Python op's result differs from torch's")
        return us

    sides = {"c: examples/c, its non-blocking stream": c_side, "python: torch's default stream": python_side}
    names = list(sides)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            times[name].append(round(sides[name](), 3))
        print(f"round {r}: " + ", ".join(f"{n.split(':')[0]}{i} {times[n][-1]}" for i, n in enumerate(names)))
    summary = {name: {"median_us": statistics.median(t), "rounds_us": t} for name, t in times.items()}
    for name, row in summary.items():
        print(f"{name:48s} {row['median_us']:.3f} us")
    if args.output:
        doc = {"case": CASE, "gpu": torch.cuda.get_device_name(), "reps": args.reps, "sides": summary}
        args.output.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
