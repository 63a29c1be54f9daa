"""Study: rect's column tiles chosen so that fewer of their columns idle (issue 24).

    python lab/rect_cols.py --list [--seeds 20261214,20261213] [--rule narrow]   # no GPU
    python lab/rect_cols.py --out-dir DIR --seed S --rule old|narrow|exact [--reps N]
    python lab/rect_cols.py --summarize DIR [DIR ...] [-o lab/data/rect-cols.json]

The ``rect`` launch moves a window of ``vectors`` accesses a row in tiles ``cols``
vectors wide. Main's rule (``old``) takes the smallest power of two that holds the row, at
most one tile's accesses: a row just past a power of two leaves most of its last column
tile idle (333 16-byte vectors in two tiles of 256 use 65% of the lanes), and a short
window that is no power of two idles a column or more in every tile (the benchmark's
80 -> 48 @ 32 gather: 3, 6, 12 or 24 vectors in tiles of 4, 8, 16 or 32). On the sweep of
seed 20261214 (tree ``59e92e0d``, ``data/records-59e92e0d``) the cells whose rect launch
used under 80% of its columns ran at a median 0.906 of the flat copy (7 cells, lowest
0.870), those that used more at 0.986 (8 cells). The rules studied:

- ``narrow``: rows over 32 vectors whose ``old`` tiles idle more than a tenth of their
  columns in the power of two from 32 up that leaves the fewest idle (333 vectors in
  eleven tiles of 32 use 95%); others as ``old``;
- ``exact``: ``narrow``, and windows of at most 32 vectors in tiles exactly as wide
  (``lab/patches/rect-narrow-cols.patch``'s rule; only a tree with that patch has rect
  kernels of a width that is no power of two).

``--list`` plans every sweep shape of the seeds given (no GPU) under ``old`` and under
``--rule``, and prints those whose plan changes: a rect launch's tiles, or a launch the
planner sent to the tiles for its idle columns that now stays rect. ``--out-dir`` runs
``scripts/bench.py`` on those shapes of ``--seed`` (the fused method, with the ceilings it
always times) under ``--rule`` (``fastcat._rect_shape`` replaced for this process; the
routing rule that sends idle rect launches to tiles sees the new share), and, with
``--named``, on the benchmark's gathers too. Run each rule alternating, two passes each,
on the same tree. ``--summarize`` puts each run's fused time beside the flat copy of the
same run. A study: no record.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]


def old_cols(vectors: int, block: int, unroll: int) -> int:
    """Main's rule: the smallest power of two that holds the row, at most a tile."""
    c = 1
    while c < vectors and c < block * unroll:
        c *= 2
    return c


def narrow_cols(vectors: int, block: int, unroll: int) -> int:
    """Where ``old_cols``'s column tiles leave more than a tenth of their columns idle past
    a row of more than 32 vectors: the power of two from 32 to ``block * unroll`` that
    leaves the fewest, of equals the widest. Otherwise ``old_cols``."""
    best = c = old_cols(vectors, block, unroll)

    def covered(cols: int) -> int:
        return -(-vectors // cols) * cols

    if vectors <= 32 or 10 * (covered(c) - vectors) <= covered(c):
        return best
    while c > 32:
        c //= 2
        if covered(c) < covered(best):
            best = c
    return best


def exact_cols(vectors: int, block: int, unroll: int) -> int:
    """``narrow_cols``, and a window of at most 32 vectors in a tile exactly as wide."""
    return max(vectors, 1) if vectors <= 32 else narrow_cols(vectors, block, unroll)


def short_cols(vectors: int, block: int, unroll: int) -> int:
    """A window of at most 32 vectors in a tile exactly as wide; longer rows as ``old``
    (the narrowed long rows of ``narrow`` measured slower on 27 of 28 cells)."""
    return max(vectors, 1) if vectors <= 32 else old_cols(vectors, block, unroll)


RULES = {"old": old_cols, "narrow": narrow_cols, "exact": exact_cols, "short": short_cols}


def _use(rule: str) -> None:
    """Plan this process's rect launches with ``rule``'s tile widths."""
    from ptxgen.kernels import fastcat

    if not hasattr(fastcat, "_planned_rect_shape"):
        fastcat._planned_rect_shape = fastcat._rect_shape
    planned, cols_of = fastcat._planned_rect_shape, RULES[rule]

    def shape(width: int, vectors: int, chunks: int, *rest: int) -> tuple[int, int, int]:
        block, unroll, _ = planned(width, vectors, chunks)
        return block, unroll, cols_of(vectors, block, unroll)

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


def idle_shapes(seed: int, rule: str) -> list[tuple[str, float, float, str, str]]:
    """Each sweep case of ``seed`` whose plan changes from ``old`` to ``rule``: (case
    name, share of columns used under each, the kernels under each). A rect launch that
    idled under 60% of its columns went to the tiles; under ``rule`` it may stay rect, so
    those cases are here too."""
    from bench_cases import sweep_cases

    from ptxgen.kernels import fastcat

    cases = sweep_cases(64, seed)
    shape = fastcat._rect_shape
    try:
        _use("old")
        before = [_plan_ids(c) for c in cases]
        _use(rule)
        after = [_plan_ids(c) for c in cases]
    finally:
        fastcat._rect_shape = shape
    found = []
    for case, planned, changed in zip(cases, before, after):
        if planned != changed:
            names = [" + ".join(_family(k) for k, _ in p) for p in (planned, changed)]
            found.append((case.name, round(_used(planned), 3), round(_used(changed), 3), *names))
    return found


def run(args: argparse.Namespace) -> int:
    against = args.against if args.rule == "old" else args.rule
    names = [] if args.named_only else [found[0] for found in idle_shapes(args.seed, against)]
    _use(args.rule)
    patterns = [f"^{re.escape(n)}$" for n in names]
    if args.named or args.named_only:
        patterns.append(r"^gather 524288x80->48@32 ")
    if not patterns:
        print(f"no sweep shape of seed {args.seed} changes under {args.rule}")
        return 0
    import bench

    argv = [
        "--sweep",
        "64",
        "--seed",
        str(args.seed),
        "--only",
        "|".join(patterns),
        "--methods",
        "ours: (fused|vector)" + ("|triton: 2-D" if args.peer else ""),
    ]
    return bench.main([*argv, "--reps", str(args.reps), "--out-dir", str(args.out_dir)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--seeds", default="20261214", help="for --list: comma-separated")
    parser.add_argument("--seed", type=int, default=20261214)
    parser.add_argument("--rule", choices=sorted(RULES), default="narrow")
    parser.add_argument("--named", action="store_true", help="the benchmark's 80 -> 48 @ 32 gathers too")
    parser.add_argument("--against", choices=sorted(RULES), default="exact", help="old: whose cells")
    parser.add_argument("--named-only", action="store_true", help="the gathers alone (implies --named)")
    parser.add_argument("--peer", action="store_true", help="time the tuned Triton peer too")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out-dir", type=Path)
    parser.add_argument("--summarize", type=Path, nargs="+")
    parser.add_argument("-o", "--output", type=Path)
    args = parser.parse_args()
    if args.list:
        for seed in (int(s) for s in args.seeds.split(",")):
            for name, used, narrowed, before, after in idle_shapes(seed, args.rule):
                print(f"{seed} {name:46s} columns used {used:.2f} -> {narrowed:.2f}  {before} -> {after}")
        return 0
    if args.summarize:
        from rect_small import summarize  # the same summary, over the flat copy

        return summarize(args.summarize, args.output, ceiling="flat_copy", label="of_flat_copy")
    if args.out_dir is None:
        parser.error("--out-dir, --list or --summarize")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
