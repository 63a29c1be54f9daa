"""Study: the small shapes in 16-byte vectors through shared memory, against rect's
element-wide accesses (issue 24: >= 0.92 of the copy).

    python lab/small_staged.py --out-dir DIR [--reps N] [--cases REGEX]
    python lab/small_staged.py --summarize DIR [DIR ...] [-o lab/data/small-staged.json]

``fastcat.SMALL_OP_BYTES`` sends every split and concat of at most 1 MB a side to a direct
``rect`` launch at any granule ("a tile's trip through shared memory is latency"), and
2,048 x (3+5+24) goes as 1-8-byte accesses, 32 bytes a thread. ``small_rect_probe.py``
found those element-wide accesses cost 0.16-0.19 us on 64-128 KB (the chunks and arrays
nothing). Without that rule the planner sends these shapes to the staged ``tile`` family
(16-byte loads and stores on both sides, re-indexed in shared memory; one 128-thread CTA
per 2 KB tile; f64 concats stay rect). This times ``ours: fused`` (the planned rect)
beside ``ours: fused, without the small-op rule`` (the same variant planned with
``SMALL_OP_BYTES`` set to 0 for this process's plans) through ``scripts/bench.py`` (the
methods' order rotated each round), every result checked. A study: it writes no record.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

CASES = r"2048x\(3\+5\+24\)|512x\(64\*2\)"
STAGED = ", without the small-op rule"


def run(args: argparse.Namespace) -> int:
    from study_cli import register_forms, run_bench

    register_forms({STAGED: {"SMALL_OP_BYTES": 0}})
    return run_bench(args.cases, rf"^ours: fused({STAGED})?$", args.reps, args.out_dir)


def summarize(dirs: list[Path], output: Path | None) -> int:
    """The staged plan beside the planned one (:func:`study_cli.summarize_forms`)."""
    from study_cli import summarize_forms

    return summarize_forms(dirs, output, ("fused",), (STAGED,))


def main(argv: list[str] | None = None) -> int:
    from study_cli import case_options, study_main

    return study_main(__doc__, run, summarize, case_options(CASES), argv)


if __name__ == "__main__":
    sys.exit(main())
