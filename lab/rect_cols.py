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

``--list`` plans every sweep shape of the seeds given (no GPU) as planned and with the
narrowest-idle tiles (``narrow_cols``), and prints those whose plan changes: a rect
launch's tiles, or a launch the planner sent to the tiles for its idle columns that now
stays rect. ``--out-dir`` runs ``scripts/bench.py`` on those shapes of
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


def _plan_ids(case: object) -> tuple[tuple[str, int], ...]:
    from ptxgen.dtypes import resolve_dtype
    from ptxgen.kernels.plan import Problem, make_plan
    from runtime.plan import DeviceTraits

    op = "backward" if case.op == "split" else "forward"
    plan = make_plan(Problem(op, resolve_dtype(case.dtype), case.rows, tuple(case.sizes)), DeviceTraits())
    # per launch: its kernel, and for rect the vectors of its window (its fourth argument)
    return tuple((s.kernel.id, int(s.args[3]) if "rect" in s.kernel.id else 0) for s in plan.steps)


def _family(kernel_id: str) -> str:
    return kernel_id.split("__")[0].removeprefix("fastcat_")


def _used(launches: tuple[tuple[str, int], ...]) -> float:
    """The least share of columns a rect launch of ``launches`` uses (1.0 without one)."""
    shares = [1.0]
    for kernel_id, vectors in launches:
        m = re.search(r"rect_\w+__c(\d+)__", kernel_id)
        if m is not None:
            cols = int(m[1])
            shares.append(vectors / (cols * -(-vectors // cols)))
    return min(shares)


def idle_shapes(seed: int) -> list[tuple[str, float, float, str, str]]:
    """Each sweep case of ``seed`` whose plan narrowing changes: (case name, share of
    columns used as planned and narrowed, the kernels as planned and narrowed). A rect
    launch that idled under 60% of its columns went to the tiles; narrowed, it may stay
    rect, so those cases are here too."""
    from bench_cases import sweep_cases

    from ptxgen.kernels import fastcat

    planned_shape = fastcat._rect_shape
    cases = sweep_cases(64, seed)
    planned = [_plan_ids(c) for c in cases]
    _narrow()
    try:
        narrowed = [_plan_ids(c) for c in cases]
    finally:
        fastcat._rect_shape = planned_shape
    found = []
    for case, before, after in zip(cases, planned, narrowed):
        if before != after:
            names = [" + ".join(_family(k) for k, _ in p) for p in (before, after)]
            found.append((case.name, round(_used(before), 3), round(_used(after), 3), *names))
    return found


def run(args: argparse.Namespace) -> int:
    if args.narrow:
        _narrow()
    names = [found[0] for found in idle_shapes(args.seed)]
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
            for name, used, narrowed, before, after in idle_shapes(seed):
                print(f"{seed} {name:46s} columns used {used:.2f} -> {narrowed:.2f}  {before} -> {after}")
        return 0
    if args.summarize:
        return summarize(args.summarize, args.output)
    if args.out_dir is None:
        parser.error("--out-dir, --list or --summarize")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
