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
Triton peer: ``ours: vector, no dependent launch`` (the same plan built without it) and
``ours: lean gather`` (written here: the same tile and slots, one tile a CTA, no loops, no
dependent launch, straight to the loads). ``--summarize`` puts each method's median time
beside the flat copy and the Triton peer of the same run. A study: it writes no record.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

CASES = r"^gather 524288x80->48@32 "
VECTOR = 16  # bytes an access moves
THREADS = 128  # a CTA, as the planned rect launch


def lean_ptx(columns: int) -> str:
    """A gather of ``window`` 16-byte vectors a row (at most ``columns``, a power of two)
    in tiles of two slots of ``THREADS / columns`` rows: one tile a CTA, no loop."""
    shift = columns.bit_length() - 1
    rows_per_slot = THREADS // columns
    return f"""\
.version 7.8
.target sm_90
.address_size 64

// dst[row, v] = src[row, v] for the vectors v < window of each row (pitches in bytes)
.visible .entry lean_gather_{columns}_entry_point(.param .u64 src, .param .u64 pitch,
    .param .u64 rows, .param .u32 window, .param .u64 dst, .param .u64 dst_pitch)
{{
    .reg .pred %col_live, %live0, %live1;
    .reg .u32 %thread, %cta, %t_row, %t_col, %window;
    .reg .u64 %src, %pitch, %rows, %dst, %dst_pitch, %row0, %row1, %col_bytes, %t;
    .reg .u64 %s0, %s1, %d0, %d1;
    .reg .b32 %a<4>, %b<4>;

    ld.param.u64 %src, [src];
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
    @%live0 ld.global.v4.u32 {{%a0, %a1, %a2, %a3}}, [%s0];
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

    import ptxgen
    from runtime.plan import VARIANTS, DeviceTraits, Ptr, Step

    vector = next(v for v in VARIANTS if v.name == "vector")

    @bm.method(
        "ours: vector, no dependent launch", "ours", ("gather",), "the planned rect, built without PDL"
    )
    def _no_pdl(ctx, buffers):  # type: ignore[no-untyped-def]
        problem = bm._problem(buffers)
        traits = dataclasses.replace(DeviceTraits.of(ctx.dev), dependent_launch=False)
        steps = [s for i in buffers.indices for s in vector.build(problem.chunk(i), traits)]
        return buffers.runner(bm._launcher(ctx, buffers, steps), "no PDL")

    @bm.method("ours: lean gather", "ours", ("gather",), "written in lab/gather_prologue.py")
    def _lean(ctx, buffers):  # type: ignore[no-untyped-def]
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
        kernel = bm.PtxKernel(
            f"lean_gather_{columns}", lean_ptx(columns), names, types, block_size=THREADS,
            target="sm_90", ptx_version="7.8", kernel_source="// lab/gather_prologue.py\n",
        )  # fmt: skip
        tile_rows = 2 * THREADS // columns
        grid = (-(-case.rows // tile_rows), 1, 1)
        args = (Ptr(-1, offset), pitch, case.rows, window, Ptr(i, 0), width)
        step = Step(kernel, grid, kernel.block, args)
        return buffers.runner(
            bm._launcher(ctx, buffers, [step]), f"{columns} columns, {tile_rows} rows a CTA"
        )


def run(args: argparse.Namespace) -> int:
    register()
    import bench

    methods = "ours: (vector|lean)|triton: 2-D"
    argv = ["--only", args.cases, "--methods", methods, "--reps", str(args.reps)]
    return bench.main([*argv, "--out-dir", str(args.out_dir)])


def summarize(dirs: list[Path], output: Path | None) -> int:
    """Per case and method, the median time of each run, and its share of the flat copy's
    and the Triton peer's speed in the same run."""
    rows: dict[str, dict[str, list[dict[str, float]]]] = {}
    for d in dirs:
        doc = json.loads((d / "results.json").read_text())
        by_case: dict[str, dict[str, float]] = {}
        for r in doc["results"]:
            if r.get("us") and r.get("correct"):
                by_case.setdefault(f"{r['op']} {r['shape']} {r['dtype']}", {})[r["method"]] = r["us"]
        for case, times in by_case.items():
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out-dir", type=Path)
    p.add_argument("--cases", default=CASES)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--summarize", nargs="+", type=Path)
    p.add_argument("-o", "--output", type=Path)
    args = p.parse_args(argv)
    if args.summarize:
        return summarize(args.summarize, args.output)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
