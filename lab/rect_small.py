"""Study: the rect launch's shape on the small named shapes (issue 24: >= 0.92 of the copy).

    python lab/rect_small.py --out-dir DIR [--block B --unroll U] [--reps N]
    python lab/rect_small.py --summarize DIR [DIR ...] [-o lab/data/rect-small.json]

The small shapes (2,048 x (3+5+24), 64 KB a side) run as one direct ``rect`` launch at
their narrowest granule (1, 2, 4 or 8 bytes: 128-thread CTAs, 32 bytes a thread), and
reach 87-92% of the driver's copy where their 16-byte-granule siblings (512 x (64+64))
reach 96-99%. This runs ``scripts/bench.py`` on those shapes, the fused method only
(with the ceilings it always times), once with the planner's launch and once per
``--block``/``--unroll`` given for the narrow granules (``fastcat._rect_shape``
replaced for this process: 16-byte granules keep the planner's shape, or the granules of
``--widths``; ``--cases`` takes other cases, e.g. the gathers). ``--summarize``
reads the runs' ``results.json`` files and puts each variant's time beside the driver's
copy of the same run. A study: it writes no record.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

CASES = r"2048x\(3\+5\+24\)"


def run(args: argparse.Namespace) -> int:
    from ptxgen.kernels import fastcat
    from ptxgen.kernels.fastcat_rect import rect_cols

    if args.block:
        planned = fastcat._rect_shape

        def shape(width: int, vectors: int, chunks: int) -> tuple[int, int, int]:
            if width not in args.widths:
                return planned(width, vectors, chunks)
            return args.block, args.unroll, rect_cols(vectors, args.block, args.unroll)

        fastcat._rect_shape = shape
    from study_cli import run_bench

    methods = "ours: (fused|vector)" + ("|triton: 2-D" if args.peer else "")
    return run_bench(args.cases, methods, args.reps, args.out_dir)


def summarize(
    dirs: list[Path], output: Path | None, ceiling: str = "copy: cuMemcpyDtoD", label: str = "of_driver_copy"
) -> int:
    """Per case and variant (``DIR`` is ``<variant>-<pass>``), the median over passes of
    the fused method's speed as a share of ``ceiling``'s in the same run."""
    rows: dict[str, dict[str, list[float]]] = {}
    for d in dirs:
        variant = d.name.rsplit("-", 1)[0]
        doc = json.loads((d / "results.json").read_text())
        by: dict[str, dict[str, float]] = {}
        for r in doc["results"]:
            by.setdefault(f"{r['op']} {r['shape']} {r['dtype']}", {})[r["method"]] = r["us"]
        for case, methods in by.items():
            ours = methods.get("ours: fused") or methods.get("ours: vector")  # a gather's fused method
            if ours and methods.get(ceiling):
                ratio = methods[ceiling] / ours  # the same bytes: times invert
                rows.setdefault(case, {}).setdefault(variant, []).append(round(ratio, 4))
    for case, variants in rows.items():
        print(case, {v: round(statistics.median(r), 3) for v, r in sorted(variants.items())})
    if output:
        output.write_text(json.dumps({label: rows}, indent=1) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out-dir", type=Path)
    p.add_argument("--block", type=int, default=0)
    p.add_argument("--unroll", type=int, default=0)
    p.add_argument("--reps", type=int, default=40)
    p.add_argument("--cases", default=CASES, help="bench.py --only pattern (default: the small shapes)")
    widths = lambda text: {int(w) for w in text.split(",")}  # noqa: E731
    p.add_argument("--widths", type=widths, default={1, 2, 4, 8}, help="granules reshaped (comma-separated)")
    p.add_argument("--peer", action="store_true", help="time the tuned Triton peer too")
    p.add_argument("--summarize", nargs="+", type=Path)
    p.add_argument("-o", "--output", type=Path)
    args = p.parse_args(argv)
    if args.summarize:
        return summarize(args.summarize, args.output)
    if args.out_dir is None:
        p.error("--out-dir is needed to run")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
