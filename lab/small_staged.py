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
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

CASES = r"2048x\(3\+5\+24\)|512x\(64\*2\)"
STAGED = ", without the small-op rule"


def staged_steps(problem: Any, traits: Any) -> list[Any]:
    """The fused variant's plan for ``problem`` with the small-op rule off."""
    from ptxgen.kernels import fastcat
    from runtime.plan import VARIANTS

    fused = next(v for v in VARIANTS if v.name == "fused")
    kept = fastcat.SMALL_OP_BYTES
    fastcat.SMALL_OP_BYTES = 0
    try:
        return list(fused.build(problem, traits))
    finally:
        fastcat.SMALL_OP_BYTES = kept


def register() -> None:
    """Add ``ours: fused, without the small-op rule`` to scripts/bench_methods.py's table."""
    import bench_methods as bm

    from runtime.plan import DeviceTraits

    @bm.method(f"ours: fused{STAGED}", "ours", ("split", "concat"), "planned without SMALL_OP_BYTES")
    def _staged(ctx: Any, buffers: Any) -> Any:
        steps = staged_steps(bm._problem(buffers), DeviceTraits.of(ctx.dev))
        families = "+".join(s.kernel.info["family"] for s in steps)
        return buffers.runner(bm._launcher(ctx, buffers, steps), f"{families}, grid {steps[0].grid}")


def run(args: argparse.Namespace) -> int:
    register()
    import bench

    methods = rf"^ours: fused({STAGED})?$"
    argv = [
        "--only",
        args.cases,
        "--methods",
        methods,
        "--reps",
        str(args.reps),
        "--out-dir",
        str(args.out_dir),
    ]
    return bench.main(argv)


def summarize(dirs: list[Path], output: Path | None) -> int:
    """The staged plan beside the planned one (:func:`study_cli.summarize_forms`)."""
    from study_cli import summarize_forms

    return summarize_forms(dirs, output, ("fused",), (STAGED,))


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cases", default=CASES)
    p.add_argument("--reps", type=int, default=100)


def main(argv: list[str] | None = None) -> int:
    from study_cli import study_main

    return study_main(__doc__, run, summarize, _options, argv)


if __name__ == "__main__":
    sys.exit(main())
