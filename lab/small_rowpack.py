"""Study: the small shapes as direct rowpack with narrow chunks (the planner's rule
``fastcat._small_rowpack``, landed in c0a7e37), against the rect launch planned for them
before it (issue 24: >= 0.92 of the copy).

    python lab/small_rowpack.py --out-dir DIR [--reps N] [--cases REGEX]
    python lab/small_rowpack.py --summarize DIR [DIR ...] [-o lab/data/small-rowpack.json]

A split or concat of at most ``fastcat.SMALL_OP_BYTES`` a side at a granule under 8
bytes, whose rows make whole 16-byte vectors in groups of at most
``fastcat.SMALL_ROWPACK_GROUP`` bytes, is planned as one direct ``rowpack`` launch with
``narrow_chunks``: a thread moves its rows' bytes as 16-byte vectors and each chunk's in
the widest access its group allows (2,048 x (3+5+24) in u8: two 16-byte loads, then
1-, 1- and 8-byte stores). Before that rule it was one ``rect`` launch of element-wide
accesses, 32 bytes a thread, which ``small_rect_probe.py`` found 0.16-0.19 us slower
than the same rect in 16-byte accesses. This times ``ours: fused`` (the planned kernel)
beside ``ours: fused, as rect`` (the same variant planned with
``SMALL_ROWPACK_GROUP`` at 0 for this process's plans: the rect launch) and beside the
rowpack launch in CTAs of 64 and 256 threads (``SMALL_ROWPACK_BLOCK``; the planner's
128), through ``scripts/bench.py`` (the methods' order rotated each round), every
result checked. A study: it writes no record.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

CASES = r"2048x\(3\+5\+24\)|512x\(64\*2\)"
# each form: the planner's constants it sets, for this process's plans of that method
FORMS = {
    ", as rect": {"SMALL_ROWPACK_GROUP": 0},
    ", block 64": {"SMALL_ROWPACK_BLOCK": 64},
    ", block 256": {"SMALL_ROWPACK_BLOCK": 256},
}


def run(args: argparse.Namespace) -> int:
    from study_cli import register_forms, run_bench

    register_forms(FORMS)
    forms = "|".join(re.escape(suffix) for suffix in FORMS)
    return run_bench(args.cases, rf"^ours: (fused({forms})?|runtime op)$", args.reps, args.out_dir)


def summarize(dirs: list[Path], output: Path | None) -> int:
    """Each form beside the planned kernel (:func:`study_cli.summarize_forms`)."""
    from study_cli import summarize_forms

    return summarize_forms(dirs, output, ("fused",), tuple(FORMS))


def main(argv: list[str] | None = None) -> int:
    from study_cli import case_options, study_main

    return study_main(__doc__, run, summarize, case_options(CASES), argv)


if __name__ == "__main__":
    sys.exit(main())
