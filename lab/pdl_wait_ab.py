"""Study: the dependent-launch wait after the set-up against at the top, in one run.

    python lab/pdl_wait_ab.py --out-dir DIR [--only REGEX] [--reps N]
    python lab/pdl_wait_ab.py --summarize DIR [DIR ...] [-o lab/data/pdl-wait-ab.json]

``lab/gather_prologue.py`` found the planned ``rect`` gather 1.7-2.7% faster on an H100
with its ``griddepcontrol.wait`` moved from the top of the kernel to just before its
first global access (``lab/data/gather-prologue-3.json``): the set-up then runs while the
previous grid drains. ``lab/patches/pdl-wait-late.patch`` does that in every fast family
(``rect``, ``vec``, ``tile``, ``rowpack``). Run in a tree with the patch applied, this
times its kernels (``ours: fused``, ``ours: vector``) beside the same plans built with
the wait at the top as before (``... , wait first``: the patch's two emitters put back
for the build), the ceilings and the tuned Triton peer, on the named shapes the patch
should move most (the small shapes and the gathers by default). ``--summarize`` puts
each pair side by side. A study: it writes no record.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts"), str(ROOT / "lab")]

ONLY = r"^(split|concat) 2048x|^(split|concat) 512x|^gather 524288x80|^gather 4194304x4"
FAMILY_MODULES = ("fastcat_rect", "fastcat_vec", "fastcat_tile", "fastcat_rowpack")


@contextlib.contextmanager
def wait_first() -> Iterator[None]:
    """Kernels built inside emit the wait at the top, as before the patch; the kernel
    caches are emptied on the way in and out so neither form is handed out for the other."""
    import importlib

    from ptxgen.kernel import KernelBase
    from ptxgen.kernels import fastcat_common

    modules = [importlib.import_module(f"ptxgen.kernels.{m}") for m in FAMILY_MODULES]
    original = fastcat_common.emit_dependent_launch
    saved = [(m, m.emit_dependent_launch, m.emit_dependent_wait) for m in modules]

    def clear() -> None:  # a class's cache appears at its first construction
        for m in modules:
            for c in vars(m).values():
                if isinstance(c, type) and issubclass(c, KernelBase) and "_instances" in vars(c):
                    c._instances.clear()

    clear()
    for m in modules:
        m.emit_dependent_launch = lambda fn, wait=True: original(fn, True)
        m.emit_dependent_wait = lambda fn: None
    try:
        yield
    finally:
        for m, launch, wait in saved:
            m.emit_dependent_launch, m.emit_dependent_wait = launch, wait
        clear()


def register() -> None:
    import bench_methods as bm

    from runtime.plan import VARIANTS

    for variant in VARIANTS:
        if variant.name not in ("fused", "vector"):
            continue
        make = bm.variant_method(variant)
        ops = ("split", "concat") if variant.scope == "op" else ("gather", "split", "concat")

        def first(ctx: Any, buffers: Any, make: Any = make) -> Any:
            with wait_first():
                runner = make(ctx, buffers)
            return runner

        bm.method(f"ours: {variant.name}, wait first", "ours", ops, "the wait at the top, as before")(first)


def run(args: argparse.Namespace) -> int:
    register()
    from study_cli import run_bench

    return run_bench(args.only, "^ours: (fused|vector)|^triton: 2-D", args.reps, args.out_dir)


def summarize(dirs: list[Path], output: Path | None) -> int:
    """Per case: each pass's time of the patched kernel, of the same plan with the wait
    first, and their ratio; the flat copy's share for both."""
    rows: dict[str, list[dict[str, float]]] = {}
    from gather_prologue import times_by_case

    for d in dirs:
        for case, t in times_by_case(d).items():
            for name in ("ours: fused", "ours: vector"):
                if name in t and f"{name}, wait first" in t:
                    late, first, flat = t[name], t[f"{name}, wait first"], t["flat_copy"]
                    rows.setdefault(f"{case} ({name[6:]})", []).append(
                        {"late_us": late, "first_us": first, "late_over_first": round(late / first, 3),
                         "late_of_flat": round(flat / late, 3), "first_of_flat": round(flat / first, 3)}
                    )  # fmt: skip
    for case, runs in rows.items():
        cells = "  ".join(
            f"{r['late_us']:7.2f}/{r['first_us']:7.2f} {r['late_over_first']:.3f}" for r in runs
        )
        print(f"{case:58s} {cells}")
    ratios = sorted(r["late_over_first"] for runs in rows.values() for r in runs)
    if ratios:
        print(
            f"late/first over {len(ratios)} cells: median {ratios[len(ratios) // 2]:.3f},",
            f"{ratios[0]:.3f}-{ratios[-1]:.3f}",
        )
    if output is not None:
        output.write_text(json.dumps({"runs": [d.name for d in dirs], "cases": rows}, indent=1) + "\n")
    return 0


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--only", default=ONLY)
    p.add_argument("--reps", type=int, default=30)


def main(argv: list[str] | None = None) -> int:
    from study_cli import study_main

    return study_main(__doc__, run, summarize, _options, argv)


if __name__ == "__main__":
    sys.exit(main())
