"""Study: why the short-row gathers trail the tuned Triton peer (issue 24: within 3%).

    python lab/gather_prologue.py --out-dir DIR [--reps N] [--cases REGEX]
    python lab/gather_prologue.py --summarize DIR [DIR ...] [-o lab/data/gather-prologue.json]

In every record since tree ``2d2d72e9`` the u8 524,288 x 80 -> 48 @ 32 gather ran 2.7-4.5%
behind the tuned Triton peer (64 x 64 tiles, 4 warps) and the bf16 one 1-4% behind, though
the planned ``rect`` launch has the same tiles: 64 rows x 4 16-byte vectors a CTA, two
slots a thread, one tile a CTA, loads before stores. What differs is what runs before the
first load: ``rect``'s SASS has about 78 instructions there (the dependent-launch
prologue, two grid-stride loops' set-up, 64-bit addresses of both slots with their steps),
and each CTA moves only 3-6 KB, so its start is a fair part of its life.

This runs ``scripts/bench.py`` on those cases with, beside the planned kernel and the
Triton peer: ``ours: vector, no dependent launch`` (the same plan built without it),
``ours: vector, wait before loads`` (the planned kernel with its ``griddepcontrol.wait``
moved below the address set-up, to just before the row loop), the planned kernel on
grids capped at 1 or 2 waves of resident CTAs (with and without the dependent launch;
``--methods`` picks them), and ``ours: lean gather`` (written here: the same tile and
slots, one tile a CTA, no loops, straight to the loads), plain and as a dependent kernel
waiting first or just before its loads. ``--summarize`` puts each method's median time
beside the flat copy and the Triton peer of the same run. A study: it writes no record.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

CASES = r"^gather 524288x80->48@32 "
VECTOR = 16  # bytes an access moves
THREADS = 128  # a CTA, as the planned rect launch


def lean_ptx(columns: int, wait: str = "") -> str:
    """A gather of ``window`` 16-byte vectors a row (at most ``columns``, a power of two)
    in tiles of two slots of ``THREADS / columns`` rows: one tile a CTA, no loop. ``wait``
    ("first" or "before loads"): where a dependent kernel waits for the previous grid."""
    shift = columns.bit_length() - 1
    rows_per_slot = THREADS // columns
    first = "    griddepcontrol.wait;\n" if wait == "first" else ""
    before_loads = "    griddepcontrol.wait;\n" if wait == "before loads" else ""
    name = f"lean_gather_{columns}" + {"": "", "first": "_wait_first", "before loads": "_wait_late"}[wait]
    return f"""\
.version 7.8
.target sm_90
.address_size 64

// dst[row, v] = src[row, v] for the vectors v < window of each row (pitches in bytes)
.visible .entry {name}_entry_point(.param .u64 src, .param .u64 pitch,
    .param .u64 rows, .param .u32 window, .param .u64 dst, .param .u64 dst_pitch)
{{
    .reg .pred %col_live, %live0, %live1;
    .reg .u32 %thread, %cta, %t_row, %t_col, %window;
    .reg .u64 %src, %pitch, %rows, %dst, %dst_pitch, %row0, %row1, %col_bytes, %t;
    .reg .u64 %s0, %s1, %d0, %d1;
    .reg .b32 %a<4>, %b<4>;

{first}    ld.param.u64 %src, [src];
    ld.param.u64 %pitch, [pitch];
    ld.param.u64 %rows, [rows];
    ld.param.u32 %window, [window];
    mov.u32 %thread, %tid.x;
    mov.u32 %cta, %ctaid.x;
    shr.u32 %t_row, %thread, {shift};
    and.b32 %t_col, %thread, {columns - 1};
    setp.lt.u32 %col_live, %t_col, %window;
    mul.wide.u32 %row0, %cta, {2 * rows_per_slot};
    cvt.u64.u32 %t, %t_row;
    add.u64 %row0, %row0, %t;
    add.u64 %row1, %row0, {rows_per_slot};
    setp.lt.and.u64 %live0, %row0, %rows, %col_live;
    setp.lt.and.u64 %live1, %row1, %rows, %col_live;
    mul.wide.u32 %col_bytes, %t_col, {VECTOR};
    add.u64 %s0, %src, %col_bytes;
    mad.lo.u64 %s0, %row0, %pitch, %s0;
    mad.lo.u64 %s1, %pitch, {rows_per_slot}, %s0;
{before_loads}    @%live0 ld.global.v4.u32 {{%a0, %a1, %a2, %a3}}, [%s0];
    @%live1 ld.global.v4.u32 {{%b0, %b1, %b2, %b3}}, [%s1];
    ld.param.u64 %dst, [dst];
    ld.param.u64 %dst_pitch, [dst_pitch];
    add.u64 %d0, %dst, %col_bytes;
    mad.lo.u64 %d0, %row0, %dst_pitch, %d0;
    mad.lo.u64 %d1, %dst_pitch, {rows_per_slot}, %d0;
    @%live0 st.global.v4.u32 [%d0], {{%a0, %a1, %a2, %a3}};
    @%live1 st.global.v4.u32 [%d1], {{%b0, %b1, %b2, %b3}};
    ret;
}}
"""


def register() -> None:
    """Add the two methods to scripts/bench_methods.py's table (this process only)."""
    import bench_methods as bm

    from runtime.plan import VARIANTS, DeviceTraits

    vector = next(v for v in VARIANTS if v.name == "vector")

    @bm.method(
        "ours: vector, no dependent launch", "ours", ("gather",), "the planned rect, built without PDL"
    )
    def _no_pdl(ctx, buffers):  # type: ignore[no-untyped-def]
        problem = bm.problem_of(buffers)
        traits = dataclasses.replace(DeviceTraits.of(ctx.dev), dependent_launch=False)
        steps = [s for i in buffers.indices for s in vector.build(problem.chunk(i), traits)]
        return buffers.runner(bm.launcher(ctx, buffers, steps), "no PDL")

    for waves in (1, 2):
        for pdl in (True, False):
            plural, without = "s" if waves > 1 else "", "" if pdl else ", no dependent launch"
            name = f"ours: vector, {waves} wave{plural}{without}"
            bm.method(name, "ours", ("gather",), "the planned rect on a capped grid")(
                _capped(vector, waves, pdl)
            )

    for wait in ("", "first", "before loads"):
        name = "ours: lean gather" + (f", dependent, wait {wait}" if wait else "")
        bm.method(name, "ours", ("gather",), "written in lab/gather_prologue.py")(_lean(wait))

    @bm.method("ours: vector, wait before loads", "ours", ("gather",), "the planned rect, its wait moved")
    def _wait_late(ctx, buffers):  # type: ignore[no-untyped-def]
        problem, traits = bm.problem_of(buffers), DeviceTraits.of(ctx.dev)
        steps = [s for i in buffers.indices for s in vector.build(problem.chunk(i), traits)]
        return buffers.runner(bm.launcher(ctx, buffers, [_wait_moved(s) for s in steps]), "wait before ROWS")


def _wait_moved(step):  # type: ignore[no-untyped-def]
    """The step with its dependent kernel's ``griddepcontrol.wait`` moved from the
    prologue to just before the row loop, the first global access (the addresses are
    worked out before it)."""
    kernel = step.kernel
    if not kernel.dependent_launch:
        raise RuntimeError("the planned kernel is not a dependent one: nothing to move")
    lines = kernel.entry_point_source.split("\n")
    (wait,) = [i for i, line in enumerate(lines) if "griddepcontrol.wait" in line]
    moved = lines.pop(wait)
    lines.insert(next(i for i, line in enumerate(lines) if line.startswith("ROWS:")), moved)
    edited = copy.copy(kernel)
    for cached in ("source", "content_hash"):
        edited.__dict__.pop(cached, None)
    edited.entry_point_source = "\n".join(lines)
    edited.id = kernel.id + "__wait_late"
    return dataclasses.replace(step, kernel=edited)


@dataclasses.dataclass(frozen=True)
class _DependentPtxKernel:
    """A hand-written kernel the runtime launches as a dependent one."""

    base: Any
    dependent_launch: bool = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)


def _lean(wait: str):  # type: ignore[no-untyped-def]
    import bench_methods as bm

    import ptxgen
    from runtime.plan import Ptr, Step

    def make(ctx, buffers):  # type: ignore[no-untyped-def]
        case = buffers.case
        (i,) = buffers.indices
        isz = ptxgen.resolve_dtype(case.dtype).itemsize
        offset, width, pitch = case.offsets[i] * isz, case.sizes[i] * isz, case.channels * isz
        if offset % VECTOR or width % VECTOR or pitch % VECTOR:
            raise bm.Unsupported("the lean gather moves whole 16-byte vectors")
        window = width // VECTOR
        columns = 1 << (window - 1).bit_length()
        if columns > THREADS:
            raise bm.Unsupported("rows wider than a CTA")
        names = ("src", "pitch", "rows", "window", "dst", "dst_pitch")
        u64, u32 = ptxgen.Scalar("u64"), ptxgen.Scalar("u32")
        types = (ptxgen.Pointer("u8", writes=False), u64, u64, u32, ptxgen.Pointer("u8"), u64)
        source = lean_ptx(columns, wait)
        entry = source[
            source.index(".visible .entry ") + len(".visible .entry ") : source.index("_entry_point(")
        ]
        kernel = bm.PtxKernel(
            entry, source, names, types, block_size=THREADS,
            target="sm_90", ptx_version="7.8", kernel_source="// lab/gather_prologue.py\n",
        )  # fmt: skip
        if wait:
            kernel = _DependentPtxKernel(kernel)
        tile_rows = 2 * THREADS // columns
        grid = (-(-case.rows // tile_rows), 1, 1)
        args = (Ptr(-1, offset), pitch, case.rows, window, Ptr(i, 0), width)
        step = Step(kernel, grid, (THREADS, 1, 1), args)
        return buffers.runner(bm.launcher(ctx, buffers, [step]), f"{columns} columns, {tile_rows} rows a CTA")

    return make


def _capped(vector, waves: int, pdl: bool):  # type: ignore[no-untyped-def]
    """The planned rect launch on a grid of at most ``waves`` waves of resident CTAs (the
    kernel strides over the row tiles, so each CTA takes several): fewer CTA starts, each
    with its dependent-launch prologue."""
    import bench_methods as bm

    from runtime.plan import DeviceTraits

    def make(ctx, buffers):  # type: ignore[no-untyped-def]
        problem, traits = bm.problem_of(buffers), DeviceTraits.of(ctx.dev)
        traits = traits if pdl else dataclasses.replace(traits, dependent_launch=False)
        steps = [s for i in buffers.indices for s in vector.build(problem.chunk(i), traits)]
        wave = traits.sm_count * (traits.max_threads_per_sm // steps[0].block[0])
        steps = [dataclasses.replace(s, grid=(min(s.grid[0], waves * wave), *s.grid[1:])) for s in steps]
        return buffers.runner(bm.launcher(ctx, buffers, steps), f"grid {steps[0].grid}")

    return make


def run(args: argparse.Namespace) -> int:
    register()
    from study_cli import run_bench

    return run_bench(args.cases, args.methods, args.reps, args.out_dir)


def times_by_case(run_dir: Path) -> dict[str, dict[str, float]]:
    """A bench run's ``results.json``: per case (``op shape dtype``), each correct method's
    median microseconds."""
    by_case: dict[str, dict[str, float]] = {}
    for r in json.loads((run_dir / "results.json").read_text())["results"]:
        if r.get("us") and r.get("correct"):
            by_case.setdefault(f"{r['op']} {r['shape']} {r['dtype']}", {})[r["method"]] = r["us"]
    return by_case


def summarize(dirs: list[Path], output: Path | None) -> int:
    """Per case and method, the median time of each run, and its share of the flat copy's
    and the Triton peer's speed in the same run."""
    rows: dict[str, dict[str, list[dict[str, float]]]] = {}
    for d in dirs:
        for case, times in times_by_case(d).items():
            flat, peer = times.get("flat_copy"), times.get("triton: 2-D tiles, tuned")
            for name, us in times.items():
                if name.startswith("ours") or name.startswith("triton"):
                    rows.setdefault(case, {}).setdefault(name, []).append(
                        {"us": us, "of_flat_copy": round(flat / us, 3), "over_triton": round(us / peer, 3)}
                    )
    for case, methods in rows.items():
        print(case)
        for name, runs in methods.items():
            cells = (f"{r['us']:7.2f} us {r['of_flat_copy']:.3f} {r['over_triton']:.3f}x" for r in runs)
            print(f"  {name:38s}", "  ".join(cells))
    if output is not None:
        output.write_text(json.dumps({"runs": [str(d) for d in dirs], "cases": rows}, indent=1) + "\n")
    return 0


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cases", default=CASES)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument(
        "--methods",
        default="^ours: (vector|vector, (no dependent launch|wait before loads)|lean.*)$|^triton: 2-D",
        help="which (a regex on the names; the capped grids' 'wave' variants: add them here)",
    )


def main(argv: list[str] | None = None) -> int:
    from study_cli import study_main

    return study_main(__doc__, run, summarize, _options, argv)


if __name__ == "__main__":
    sys.exit(main())
