"""Study: rect's column tiles narrowed so that fewer of their columns idle (issue 24).

    python lab/rect_cols.py --list [--seeds 20261214,20261213]      # no GPU: which shapes
    python lab/rect_cols.py --out-dir DIR --seed S [--narrow] [--reps N]
    python lab/rect_cols.py --summarize DIR [DIR ...] [-o lab/data/rect-cols.json]

The ``rect`` launch moves a window of ``vectors`` accesses a row in tiles ``cols``
vectors wide, ``cols`` the smallest power of two that holds the row, at most one tile's
accesses (``fastcat_rect.rect_cols``). A row just past a power of two leaves most of its
last column tile idle: 333 16-byte vectors in two tiles of 256 use 65% of the lanes. On
the sweep of seed 20261214 (tree ``59e92e0d``, ``data/records-59e92e0d``) the cells whose
rect launch used under 80% of its columns ran at a median 0.906 of the flat copy (7
cells, lowest 0.870), those that used more at 0.986 (8 cells). Narrower tiles of a power
of two (at least 32 vectors: a warp's row segment) cover such rows with less idle: 333
vectors in eleven tiles of 32 use 95%.

``--list`` plans every sweep shape of the seeds given (no GPU) and prints those whose
rect launch idles columns, with the share used as planned and with the narrowest-idle
tiles (``narrow_cols``). ``--out-dir`` runs ``scripts/bench.py`` on those shapes of
``--seed`` (the fused method, with the ceilings it always times), as planned or with
``--narrow`` (``fastcat._rect_shape`` replaced for this process; the routing rule that
sends idle rect launches to tiles then sees the narrowed share). ``--summarize`` puts
each run's fused time beside the flat copy of the same run. A study: no record.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

USED_BELOW = 0.8  # the shapes studied: a rect launch that uses less of its columns


def narrow_cols(vectors: int, block: int, unroll: int) -> int:
    """The power of two from 32 to ``block * unroll`` whose tiles leave the fewest columns
    of a ``vectors``-long row idle; of equals, the widest. Rows of at most 32 vectors
    keep the planner's tile."""
    from ptxgen.kernels.fastcat_rect import rect_cols

    planned = rect_cols(vectors, block, unroll)
    if vectors <= 32:
        return planned
    best, c = planned, planned
    while c >= 32:
        if -(-vectors // c) * c < -(-vectors // best) * best:
            best = c
        c //= 2
    return best


def _narrow() -> None:
    from ptxgen.kernels import fastcat

    planned = fastcat._rect_shape

    def shape(width: int, vectors: int, chunks: int) -> tuple[int, int, int]:
        block, unroll, _ = planned(width, vectors, chunks)
        return block, unroll, narrow_cols(vectors, block, unroll)

    fastcat._rect_shape = shape


def idle_shapes(seed: int) -> list[tuple[str, float, float]]:
    """(case name, share used as planned, share used narrowed) for each sweep case of
    ``seed`` that has a rect launch using less than USED_BELOW of its columns."""
    from bench_cases import sweep_cases

    from ptxgen.dtypes import resolve_dtype
    from ptxgen.kernels.plan import Problem, make_plan
    from runtime.plan import DeviceTraits

    found = []
    for case in sweep_cases(64, seed):
        op = "backward" if case.op == "split" else "forward"
        plan = make_plan(Problem(op, resolve_dtype(case.dtype), case.rows, tuple(case.sizes)), DeviceTraits())
        for step in plan.steps:
            m = re.search(r"rect_\w+__w(\d+)__c(\d+)__k\d+__u(\d+)__b(\d+)", step.kernel.id)
            if m is None:
                continue
            cols, unroll, block, vectors = int(m[2]), int(m[3]), int(m[4]), int(step.args[3])
            used = vectors / (cols * -(-vectors // cols))
            narrow = narrow_cols(vectors, block, unroll)
            narrowed = vectors / (narrow * -(-vectors // narrow))
            if used < USED_BELOW:
                found.append((case.name, round(used, 3), round(narrowed, 3)))
    return found


def run(args: argparse.Namespace) -> int:
    if args.narrow:
        _narrow()
    names = [name for name, _, _ in idle_shapes(args.seed)]
    if not names:
        print(f"no sweep shape of seed {args.seed} idles rect's columns")
        return 0
    import bench

    only = "|".join(f"^{re.escape(n)}$" for n in names)
    argv = ["--sweep", "64", "--seed", str(args.seed), "--only", only, "--methods", "ours: fused"]
    return bench.main([*argv, "--reps", str(args.reps), "--out-dir", str(args.out_dir)])


def summarize(dirs: list[Path], output: Path | None) -> int:
    rows: dict[str, dict[str, list[float]]] = {}
    for d in dirs:
        variant = d.name.rsplit("-", 1)[0]  # DIR is <variant>-<pass>
        doc = json.loads((d / "results.json").read_text())
        by: dict[str, dict[str, float]] = {}
        for r in doc["results"]:
            if r["GBps"]:
                by.setdefault(f"{r['op']} {r['shape']} {r['dtype']}", {})[r["method"]] = r["GBps"]
        for case, methods in by.items():
            if "ours: fused" in methods and "flat_copy" in methods:
                ratio = methods["ours: fused"] / methods["flat_copy"]
                rows.setdefault(case, {}).setdefault(variant, []).append(round(ratio, 3))
    for case, variants in sorted(rows.items()):
        print(case, {v: statistics.median(r) for v, r in variants.items()})
    if output is not None:
        output.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--seeds", default="20261214", help="for --list: comma-separated")
    parser.add_argument("--seed", type=int, default=20261214)
    parser.add_argument("--narrow", action="store_true")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out-dir", type=Path)
    parser.add_argument("--summarize", type=Path, nargs="+")
    parser.add_argument("-o", "--output", type=Path)
    args = parser.parse_args()
    if args.list:
        for seed in (int(s) for s in args.seeds.split(",")):
            for name, used, narrowed in idle_shapes(seed):
                print(f"{seed} {name:50s} used {used:.2f} -> narrowed {narrowed:.2f}")
        return 0
    if args.summarize:
        return summarize(args.summarize, args.output)
    if args.out_dir is None:
        parser.error("--out-dir, --list or --summarize")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
