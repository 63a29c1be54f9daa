"""Study: the ``rect`` kernel with one column a thread against its per-slot prologue.

    python lab/rect_prologue.py --out-dir DIR [--reps N] [--cases REGEX] [--sweep N --seed S]
    python lab/rect_prologue.py --summarize DIR [DIR ...] [-o lab/data/rect-prologue.json]

Where a tile row is no wider than the block (``cols <= block``), every slot of a thread
sits in the thread's column. The shipped ``rect`` still works out each slot's column,
chunk (a ``selp`` chain per slot), liveness, row step and two 64-bit addresses on its
own: on the small shapes 2,048 x (3+5+24) (8 slots of 3 chunks) ptxas leaves 173 SASS
instructions before the first load, and those shapes ran a fixed 0.3 us behind the copy
(``data/small-reps-200.json``). ``patches/rect-one-column.patch`` works them out once and
moves each further slot down from slot 0 by one 64-bit multiply-add (145 instructions
there; 142 where each slot was one add on the one before, the first form tried; the
gathers' two slots of one chunk: 79 either way).

This runs ``scripts/bench.py`` with, beside the planned kernels (``ours: fused`` for
splits and concats, ``ours: vector`` for the gathers), the same plans with every ``rect``
step built from the patched emitter (applied to a copy of the shipped module in memory,
:func:`one_column_class`; the tree itself is not touched): ``ours: fused, one-column
rect`` and ``ours: vector, one-column rect``, and the planned kernels built without
programmatic dependent launch (``ours: fused, no dependent launch``). bench.py rotates
the methods' order round by round. ``--summarize`` puts each form beside the planned one,
each as a share of the flat copy of the same run. A study: it writes no record.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

CASES = r"2048x\(3\+5\+24\)|512x\(64\*2\)|^gather 524288x80->48@32 |409600x"
PATCH = ROOT / "lab" / "patches" / "rect-one-column.patch"
ONE_COLUMN, NO_PDL = ", one-column rect", ", no dependent launch"
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")


def patched_source(source: str, patch: str, path: str) -> str:
    """``source`` with the hunks of ``patch`` for ``path`` applied (unified diff; every
    context and removed line must match where its hunk says, else ValueError)."""
    lines, out, at = source.split("\n"), [], 0
    sections = re.split(r"^diff --git ", patch, flags=re.M)
    (section,) = [x for x in sections if x.startswith(f"a/{path} ")]
    for hunk in re.split(r"^(?=@@ )", section, flags=re.M)[1:]:
        header, *body = hunk.rstrip("\n").split("\n")
        start = int(_HUNK.match(header).group(1)) - 1  # type: ignore[union-attr]
        out += lines[at:start]
        at = start
        for line in body:
            tag, text = line[:1], line[1:]
            if tag in (" ", "-"):
                if lines[at] != text:
                    raise ValueError(
                        f"{path}:{at + 1}: the patch expects {text!r}, the file has {lines[at]!r}"
                    )
                at += 1
            if tag in (" ", "+"):
                out.append(text)
    return "\n".join(out + lines[at:])


def one_column_class() -> type:
    """The shipped ``FastcatRect`` with ``patches/rect-one-column.patch`` applied, loaded as
    a module of its own (imports made absolute, ``__one_column`` added to kernel ids so
    the two builds never share a module cache entry)."""
    shipped = ROOT / "ptxgen" / "kernels" / "fastcat_rect.py"
    source = patched_source(shipped.read_text(), PATCH.read_text(), "ptxgen/kernels/fastcat_rect.py")
    source = re.sub(r"^from \.\.(\w+) import", r"from ptxgen.\1 import", source, flags=re.M)
    source = re.sub(r"^from \.(\w+) import", r"from ptxgen.kernels.\1 import", source, flags=re.M)
    source = source.replace('{tag}__{self.target}"', '{tag}__{self.target}__one_column"')
    path = Path(tempfile.mkdtemp()) / "fastcat_rect_one_column.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("fastcat_rect_one_column", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.FastcatRect


def rebuilt_steps(steps: list[Any], one_column: type | None, dependent_launch: bool) -> list[Any]:
    """The steps with each ``rect`` kernel rebuilt: by ``one_column`` (the patched class;
    the same arguments, the two differ only in how a thread finds its slots' addresses),
    or by the shipped class with ``dependent_launch`` as given."""
    from ptxgen.kernels.fastcat_rect import FastcatRect

    out = []
    for step in steps:
        k = step.kernel
        if isinstance(k, FastcatRect):
            cls = one_column or FastcatRect
            kernel = cls(
                direction=k.direction, width=k.width, cols=k.cols, chunks=k.chunks, unroll=k.unroll,
                block=k.block_size, target=k.target, dependent_launch=dependent_launch,
            )  # fmt: skip
            step = dataclasses.replace(step, kernel=kernel)
        out.append(step)
    return out


def register() -> None:
    """Add the one-column and no-dependent-launch forms of ``ours: fused`` and ``ours:
    vector`` to scripts/bench_methods.py's table (this process only)."""
    import bench_methods as bm

    from runtime.plan import VARIANTS, DeviceTraits

    one_column = one_column_class()
    for variant in (v for v in VARIANTS if v.name in ("fused", "vector")):
        ops = ("gather", "split", "concat") if variant.scope == "chunk" else ("split", "concat")
        for suffix in (ONE_COLUMN, NO_PDL):

            def make(ctx: Any, buffers: Any, variant: Any = variant, suffix: str = suffix) -> Any:
                problem, traits = bm.problem_of(buffers), DeviceTraits.of(ctx.dev)
                if variant.scope == "op":
                    if buffers.case.op == "gather" or not variant.accepts(problem, traits):
                        raise bm.Unsupported(f"variant {variant.name} does not take this shape")
                    steps = list(variant.build(problem, traits))
                else:
                    steps = []
                    for i in buffers.indices:
                        if not variant.accepts(problem.chunk(i), traits):
                            raise bm.Unsupported(f"variant {variant.name} does not take piece {i}")
                        steps += variant.build(problem.chunk(i), traits)
                if suffix == ONE_COLUMN:
                    steps = rebuilt_steps(steps, one_column, traits.dependent_launch)
                else:
                    steps = rebuilt_steps(steps, None, False)
                return buffers.runner(bm.launcher(ctx, buffers, steps), f"rect{suffix}")

            bm.method(f"ours: {variant.name}{suffix}", "ours", ops, f"the plan, rect{suffix}")(make)


def run(args: argparse.Namespace) -> int:
    register()
    import bench
    from study_cli import run_bench

    for suffix in (ONE_COLUMN, NO_PDL):  # the sweep times only the methods named there
        bench.SWEEP_METHODS.add(f"ours: fused{suffix}")
    methods = rf"^ours: (fused|vector)({ONE_COLUMN}|{NO_PDL})?$"
    sweep = ["--sweep", str(args.sweep), "--seed", str(args.seed)] if args.sweep else []
    return run_bench(args.cases, methods, args.reps, args.out_dir, sweep)


def summarize(dirs: list[Path], output: Path | None) -> int:
    """Each form beside the planned kernel (:func:`study_cli.summarize_forms`)."""
    from study_cli import summarize_forms

    return summarize_forms(dirs, output, ("fused", "vector"), (ONE_COLUMN, NO_PDL))


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cases", default=CASES)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--sweep", type=int, default=0)
    p.add_argument("--seed", type=int, default=20261207)


def main(argv: list[str] | None = None) -> int:
    from study_cli import study_main

    return study_main(__doc__, run, summarize, _options, argv)


if __name__ == "__main__":
    sys.exit(main())
