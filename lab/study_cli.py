"""What the bench studies share: their command line (``--out-dir DIR`` and the study's own
options run it, ``run(args)``; ``--summarize DIR [DIR ...] [-o FILE]`` reads runs already
made), the fused variant planned with other planner constants as benchmark methods, the
benchmark run itself, and the summary of planned kernels against other forms of them."""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def study_main(
    doc: str,
    run: Callable[[argparse.Namespace], int],
    summarize: Callable[[list[Path], Path | None], int],
    add_options: Callable[[argparse.ArgumentParser], None],
    argv: list[str] | None = None,
) -> int:
    """Parse ``argv`` (the study's own options from ``add_options``), then summarize or run."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--out-dir", type=Path)
    add_options(p)
    p.add_argument("--summarize", nargs="+", type=Path, help="runs' output folders to read instead")
    p.add_argument("-o", "--output", type=Path, help="with --summarize: write the summary here")
    args = p.parse_args(argv)
    if args.summarize:
        return summarize(args.summarize, args.output)
    return run(args)


def case_options(cases: str, reps: int = 100) -> Callable[[argparse.ArgumentParser], None]:
    """A study's own options over the benchmark's cases: ``--cases REGEX`` (default
    ``cases``) and ``--reps N`` (default ``reps``)."""

    def add(p: argparse.ArgumentParser) -> None:
        p.add_argument("--cases", default=cases)
        p.add_argument("--reps", type=int, default=reps)

    return add


def planned_with(problem: Any, traits: Any, constants: dict[str, int]) -> list[Any]:
    """The fused variant's steps for ``problem`` with ``ptxgen.kernels.fastcat``'s
    ``constants`` set for this plan only (the planner's own values are put back)."""
    from ptxgen.kernels import fastcat
    from runtime.plan import VARIANTS

    fused = next(v for v in VARIANTS if v.name == "fused")
    kept = {name: getattr(fastcat, name) for name in constants}
    for name, value in constants.items():
        setattr(fastcat, name, value)
    try:
        return list(fused.build(problem, traits))
    finally:
        for name, value in kept.items():
            setattr(fastcat, name, value)


def register_forms(forms: dict[str, dict[str, int]]) -> None:
    """Add ``ours: fused<suffix>`` to scripts/bench_methods.py's table for each ``suffix``
    of ``forms``: the fused variant planned with that form's constants (:func:`planned_with`)."""
    import bench_methods as bm

    from runtime.plan import DeviceTraits

    for suffix, constants in forms.items():

        def make(ctx: Any, buffers: Any, constants: dict[str, int] = constants) -> Any:
            steps = planned_with(bm.problem_of(buffers), DeviceTraits.of(ctx.dev), constants)
            families = "+".join(s.kernel.info["family"] for s in steps)
            return buffers.runner(bm.launcher(ctx, buffers, steps), f"{families}, grid {steps[0].grid}")

        bm.method(f"ours: fused{suffix}", "ours", ("split", "concat"), f"planned with {constants}")(make)


def run_bench(cases: str, methods: str, reps: int, out_dir: Path, extra: Sequence[str] = ()) -> int:
    """scripts/bench.py on the cases and methods these regexes match, ``reps`` repetitions
    a cell (the methods' order rotated each round), its output in ``out_dir``; ``extra``:
    more of its arguments (``--sweep N --seed S``)."""
    import bench

    argv = ["--only", cases, "--methods", methods, "--reps", str(reps), "--out-dir", str(out_dir), *extra]
    return bench.main(argv)


def summarize_forms(
    dirs: list[Path], output: Path | None, planned: Sequence[str], suffixes: Sequence[str]
) -> int:
    """From bench runs' ``results.json``: per case and planned method (``ours: NAME`` for
    NAME in ``planned``), its median time over the runs and share of the flat copy, and
    each form ``ours: NAME<suffix>``'s median time over the planned one's; written to
    ``output`` with the median ratio of each form."""
    times: dict[str, dict[str, list[float]]] = {}
    for d in dirs:
        for r in json.loads((d / "results.json").read_text())["results"]:
            if r.get("us") and r.get("correct"):
                case = f"{r['op']} {r['shape']} {r['dtype']}"
                times.setdefault(case, {}).setdefault(r["method"], []).append(r["us"])
    cases: dict[str, Any] = {}
    ratios: dict[str, list[float]] = {}
    for case, methods in times.items():
        flat = statistics.median(methods["flat_copy"])
        for name in planned:
            base = methods.get(f"ours: {name}")
            if not base:
                continue
            row = {"planned_us": round(statistics.median(base), 3)}
            row["planned_of_flat"] = round(flat / row["planned_us"], 3)
            for suffix in suffixes:
                form = methods.get(f"ours: {name}{suffix}")
                if form:
                    key = suffix.strip(", ").replace(" ", "_").replace("-", "_")
                    us = statistics.median(form)
                    row[f"{key}_us"] = round(us, 3)
                    row[f"{key}_over_planned"] = round(us / row["planned_us"], 3)
                    ratios.setdefault(key, []).append(us / row["planned_us"])
            cases[f"{case} ({name})"] = row
            print(f"{case:46s} {name:6s}", json.dumps(row))
    summary = {
        k: {"cells": len(v), "median_over_planned": round(statistics.median(v), 4)} for k, v in ratios.items()
    }
    print(summary)
    if output is not None:
        doc = {"runs": [str(d) for d in dirs], "summary": summary, "cases": cases}
        output.write_text(json.dumps(doc, indent=1) + "\n")
    return 0
