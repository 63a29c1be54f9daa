#!/usr/bin/env python3
"""How the grid and the CTA size set a copy kernel's speed on one GPU (the study behind
the ``rect`` family and one-tile-per-CTA grids, docs/perf/kernels.md).

A STUDY, KEPT AS IT RAN (lab/README.md says what it found). It runs against the tree it
was last run on: the commit before it moved from scripts/ to lab/ (``git log --follow --
lab/fastcat_grid_study.py``). ptxgen has changed since (the planner takes a device's traits;
``FastcatFlatCopy``, vec's slot layouts, load hints and streaming stores, and backward
tiles through cp.async left ptxgen), so to run it again, run it there: ``git worktree
add /tmp/study <that commit>``, then ``python /tmp/study/scripts/fastcat_grid_study.py``.

1. A flat copy of 1 GiB: ``cuMemcpyDtoDAsync`` against ``FastcatFlatCopy`` at each
   unroll, block and slot layout, on one persistent wave of CTAs (as many as fit),
   two waves, eight 256-thread CTAs per SM, and a CTA per piece of work ("all"); and a
   Triton copy kernel (a program per block of elements) where Triton is installed.
2. Gathers, scatters, splits and concats (at least 256 MiB each, fresh random bytes,
   outputs poisoned and every byte and canary checked afterwards): the planner's launch
   (``choose``) against ``rect`` at other unrolls and blocks, the ``vec`` kernel on one
   wave (the rule before), tiles at other unrolls or on one wave, and for short rows
   ``rowpack`` direct and staged through shared memory, and tiles.

3. Sector reads (``--sectors``): a gather of one 32-byte sector a row from rows of 32 to
   256 bytes, to see which bytes DRAM really delivers when a kernel asks for some sectors
   of a region and not others. The bytes read a row that the time implies (at the
   driver copy's rate, measured in the same run, less the bytes written) tell whether a
   lone sector costs 32 bytes of DRAM traffic or more.

CUDA events, median of --reps after warm-up, GPU held by a spin while the host queues;
per-case ceiling: ``cuMemcpyDtoDAsync`` of half the op's honest traffic. Writes
$OUT/grid_study.json (or --json). Needs torch.
"""

# The timing closures are built and run inside one loop iteration, never later.
# ruff: noqa: B023
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import fastcat_experiments as fe  # noqa: E402

import ptxgen.kernels.fastcat as fc  # noqa: E402
from ptxgen.kernels import FastcatFlatCopy  # noqa: E402
from ptxgen.kernels.fastcat_rect import rect_cols  # noqa: E402
from runtime._driver import driver  # noqa: E402

# (op, rows, sizes, element size, chunk, row address mod 16, chunk addresses mod 16)
CASES = [
    ("gather", 16384, (4096, 8192, 4096), 1, 1, 0, None),
    ("gather", 1 << 20, (64, 128, 64), 1, 1, 0, None),
    ("gather", 1 << 20, (64, 128, 64), 4, 1, 0, None),
    ("gather", 524288, (32, 48), 1, 1, 0, None),
    ("gather", 524288, (32, 48), 4, 1, 0, None),
    ("gather", 4194304, (1, 3), 4, 1, 0, None),
    ("gather", 4194304, (1, 3), 8, 1, 0, None),
    # short rows: rowpack reading whole rows against tiles and rect
    ("gather", 4194304, (1, 3), 1, 1, 0, None),
    ("gather", 4194304, (1, 3), 1, 0, 0, None),
    ("gather", 4194304, (1, 3), 2, 1, 0, None),
    ("gather", 4194304, (1, 3), 2, 0, 0, None),
    ("gather", 4194304, (1, 3), 4, 0, 0, None),
    ("gather", 4194304, (3, 5), 1, 1, 0, None),
    ("gather", 4194304, (1, 1, 2), 2, 2, 0, None),
    ("gather", 4194304, (5, 27), 1, 0, 0, None),
    # narrow chunks at 1- and 2-byte granules: rect against vec on a persistent grid
    ("gather", 4194304, (3, 61), 1, 0, 0, None),
    ("gather", 4194304, (7, 9, 48), 1, 1, 0, None),
    ("gather", 4194304, (1, 5, 26), 2, 1, 0, None),
    ("gather", 4194304, (33, 11, 20), 1, 1, 0, None),
    ("gather", 1000003, (17, 200, 39), 1, 2, 3, (1, 5, 7)),
    ("gather", 1000003, (17, 200, 39), 1, 1, 3, (1, 5, 7)),
    ("gather", 300007, (100, 101), 8, 1, 8, (0, 8)),
    ("gather", 200704, (256, 256), 1, 1, 0, None),
    ("gather", 128, (401408, 401408), 4, 0, 0, None),
    ("gather", 102400, (64, 64, 64), 2, 1, 0, None),
    ("scatter", 1 << 20, (64, 128, 64), 1, 1, 0, None),
    ("scatter", 524288, (32, 48), 2, 0, 0, None),
    ("scatter", 4194304, (1, 3), 4, 1, 0, None),
    ("scatter", 16384, (4096, 8192, 4096), 4, 1, 0, None),
    ("scatter", 200704, (256, 256), 2, 1, 0, None),
    ("split", 200704, (256, 256), 2, None, 0, None),
    ("concat", 200704, (256, 256), 2, None, 0, None),
    ("split", 4194304, (1, 3), 2, None, 0, None),
    ("concat", 4194304, (1, 3), 2, None, 0, None),
    ("split", 4194304, (1, 3), 8, None, 0, None),
    ("concat", 4194304, (1, 3), 8, None, 0, None),
    ("concat", 102400, (64, 64, 64), 2, None, 0, None),
    ("split", 16384, (8192, 16384), 1, None, 0, None),
    ("concat", 16384, (8192, 16384), 1, None, 0, None),
    ("split", 524288, (32, 48), 4, None, 0, None),
    ("concat", 524288, (32, 48), 4, None, 0, None),
    ("concat", 51200, (128, 128, 128, 128), 2, None, 0, None),
    ("concat", 512, (64, 64), 4, None, 0, None),
    ("concat", 2048, (3, 5, 24), 8, None, 0, None),
    ("split", 1000003, (17, 200, 39), 1, None, 3, (1, 5, 7)),
    ("concat", 2000001, (33, 47), 2, None, 2, (6, 10)),
    # short rows: rowpack (direct and staged through shared memory) against tiles
    ("split", 4194304, (1, 3), 1, None, 0, None),
    ("concat", 4194304, (1, 3), 1, None, 0, None),
    ("split", 4194304, (1, 3), 4, None, 0, None),
    ("concat", 4194304, (1, 3), 4, None, 0, None),
    ("split", 4194304, (3, 5), 1, None, 0, None),
    ("concat", 4194304, (1, 1, 2), 2, None, 0, None),
    ("split", 4194304, (1, 3), 2, None, 0, None),
    ("concat", 4194304, (1, 3), 2, None, 0, None),
]


def occupancy(fn, block: int) -> int:
    drv = driver()
    err, n = drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(drv.CUfunction(fn.handle), block, 0)
    if int(err):
        raise RuntimeError(f"cuOccupancyMaxActiveBlocksPerMultiprocessor: {err}")
    return int(n)


def flat_copies(gpu, median) -> list[dict]:
    torch, drv = gpu.torch, driver()
    nbytes = 1 << 30
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    n_vec = nbytes // 16
    t = median(lambda: drv.cuMemcpyDtoDAsync(dst.data_ptr(), src.data_ptr(), nbytes, 0))
    out = [{"copy": "cuMemcpyDtoDAsync", "GBps": 2 * nbytes / t / 1e6, "correct": True}]
    for layout in ("block", "grid"):
        for unroll in (1, 2, 4, 8):
            for block in (128, 256, 512):
                k = FastcatFlatCopy(unroll=unroll, block=block, layout=layout, target="sm_90")
                fn = gpu.dev.load(k).function
                fit = occupancy(fn, block)
                grids = {
                    "one wave": fit * gpu.sm,
                    "two waves": 2 * fit * gpu.sm,
                    "8x256 threads a SM": gpu.sm * 2048 // block,
                    "all": -(-n_vec // (block * unroll)),
                }
                for spread, grid in grids.items():
                    t = median(
                        lambda: fn.launch((grid, 1, 1), k.block, (src.data_ptr(), dst.data_ptr(), n_vec))
                    )
                    ok = bool(torch.equal(src, dst))
                    dst.zero_()
                    out.append(
                        {
                            "copy": f"{layout} u{unroll} b{block}",
                            "grid": spread,
                            "ctas": grid,
                            "ctas_a_sm": fit,
                            "registers": fn.num_regs,
                            "GBps": 2 * nbytes / t / 1e6,
                            "correct": ok,
                        }
                    )
                    fe.log(
                        f"  {out[-1]['copy']:<16} {spread:<20} {out[-1]['GBps']:6.0f}{'' if ok else ' WRONG'}"
                    )
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return out

    @triton.jit
    def copy(s, d, n, BLOCK: tl.constexpr):
        i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        tl.store(d + i, tl.load(s + i, mask=i < n), mask=i < n)

    s32, d32 = src.view(torch.int32), dst.view(torch.int32)
    for elems in (1024, 2048, 4096, 8192):
        for warps in (4, 8):
            grid = (-(-s32.numel() // elems),)
            t = median(lambda: copy[grid](s32, d32, s32.numel(), BLOCK=elems, num_warps=warps))
            ok = bool(torch.equal(src, dst))
            dst.zero_()
            out.append(
                {
                    "copy": f"triton i32 BLOCK={elems} num_warps={warps}",
                    "GBps": 2 * nbytes / t / 1e6,
                    "correct": ok,
                }
            )
    return out


def variants(op, rows, sizes, esize, chunk, rule, widths, direction, sm):
    """(label, launches): the rule's, then the alternatives measured against it."""
    out = [("rule", rule)]
    first = rule[0]
    if first.family == "rect":
        spec0 = dict(first.spec)
        w, count = spec0["width"], spec0["chunks"]
        ids = first.chunk_ids
        n = sum(widths[k] for k in ids) // w
        for unroll in (1, 2, 4, 8):
            for block in (128, 256):
                cols = rect_cols(n, block, unroll)
                spec = (
                    ("direction", direction), ("width", w), ("cols", cols), ("chunks", count),
                    ("unroll", unroll), ("block", block),
                )  # fmt: skip
                grid = -(-rows // (block * unroll // cols))
                launch = fc.Launch("rect", spec, ids, grid, "", min(-(-n // cols), 65535))
                if launch.spec != first.spec:
                    out.append((f"rect u{unroll} b{block}", [launch]))
        if op in ("gather", "scatter"):
            unroll = 8 if op == "gather" and w >= 8 else 4
            spec = (("direction", direction), ("width", w), ("chunks", 1), ("unroll", unroll), ("block", 256))
            out.append(("vec, one wave (rule before)", [fc.Launch("vec", spec, ids, sm * 8, "")]))
            if w <= 2:  # narrow accesses: more work a thread, and more threads
                for unroll, waves, block in (
                    (8, 1, 256),
                    (4, 2, 256),
                    (8, 2, 256),
                    (4, 1, 512),
                    (16, 1, 256),
                ):
                    spec = (
                        ("direction", direction), ("width", w), ("chunks", 1), ("unroll", unroll),
                        ("block", block),
                    )  # fmt: skip
                    grid = sm * waves * 2048 // block
                    out.append((f"vec u{unroll} b{block} x{waves}", [fc.Launch("vec", spec, ids, grid, "")]))
                pitch = sum(widths)
                spec = (
                    ("direction", direction), ("chunks", 1), ("granule", w), ("whole_rows", False),
                    ("unroll", 4), ("block", 256), ("loader", "regs"),
                )  # fmt: skip
                tiles = -(-(rows * pitch + 15) // (16 * 4 * 256))
                if op == "gather":
                    out.append(("tile u4", [fc.Launch("tile", spec, ids, tiles, "")]))
        else:  # the shared-memory tiles the rule took before
            pitch = sum(widths)
            loader = "cp.async" if direction == "forward" else "regs"
            spec = (
                ("direction", direction), ("chunks", count), ("granule", w), ("whole_rows", True),
                ("unroll", 4), ("block", 256), ("loader", loader),
            )  # fmt: skip
            tiles = -(-(rows * pitch + 15) // (16 * 4 * 256))
            out.append(("tile (rule before)", [fc.Launch("tile", spec, ids, tiles, "")]))
    elif first.family == "vec":  # a narrow byte-wide gather
        k, pitch = first.chunk_ids[0], sum(widths)
        out.append(("rect (rule before)", [fc._rect(direction, 1, rows, widths[k], [k])]))
        for unroll, waves, block in ((4, 1, 256), (8, 1, 256), (8, 2, 256), (4, 1, 512)):
            spec = (
                ("direction", direction),
                ("width", 1),
                ("chunks", 1),
                ("unroll", unroll),
                ("block", block),
            )
            grid = sm * waves * 2048 // block
            out.append((f"vec u{unroll} b{block} x{waves}", [fc.Launch("vec", spec, (k,), grid, "")]))
        spec = (
            ("direction", direction), ("chunks", 1), ("granule", 1), ("whole_rows", False),
            ("unroll", 4), ("block", 256), ("loader", "regs"),
        )  # fmt: skip
        out.append(("tile u4", [fc.Launch("tile", spec, (k,), -(-(rows * pitch + 15) // 16384), "")]))
    elif first.family == "rowpack" and op == "gather":
        out += _rowpacks(rule, widths, direction, rows, chunk)
        k, pitch = first.chunk_ids[0], sum(widths)
        g = fc.access_width(0, pitch, sum(widths[:k]), widths[k], 0)
        if 3 * widths[k] < pitch:  # the rule before: rect at the granule, else tiles
            out.append(("rect (rule before)", [fc._rect(direction, g, rows, widths[k] // g, [k])]))
        spec = (
            ("direction", direction), ("chunks", 1), ("granule", g), ("whole_rows", False),
            ("unroll", 4), ("block", 256), ("loader", "regs"),
        )  # fmt: skip
        tiles = -(-(rows * pitch + 15) // (16 * 4 * 256))
        out.append(("tile u4" + (" (rule before)" if 3 * widths[k] >= pitch else ""),
                    [fc.Launch("tile", spec, (k,), tiles, "")]))  # fmt: skip
    elif first.family == "tile":
        pitch = sum(widths)
        out += _rowpacks(rule, widths, direction, rows)
        for unroll in (2, 8):
            launches = []
            for t in rule:
                spec = dict(t.spec) | {"unroll": unroll}
                if dict(t.spec)["direction"] == "forward" and unroll == 8:
                    continue  # cp.async staging doubles the shared memory: past 48 KB
                launches.append(
                    fc.Launch(
                        "tile",
                        tuple(spec.items()),
                        t.chunk_ids,
                        -(-(rows * pitch + 15) // (16 * unroll * 256)),
                        "",
                    )
                )
            if launches:
                out.append((f"tile u{unroll}", launches))
        out.append(
            (
                "tile, 4 CTAs a SM (rule before)",
                [fc.Launch(t.family, t.spec, t.chunk_ids, sm * 4, "") for t in rule],
            )
        )
    else:
        out.append(
            (
                "rowpack, one wave (rule before)",
                [fc.Launch(t.family, t.spec, t.chunk_ids, sm * 8, "") for t in rule],
            )
        )
        out += [(label, launches) for label, launches in _rowpacks(rule, widths, direction, rows)]
        pitch = sum(widths)
        g = min(widths[k] & -widths[k] for k in rule[0].chunk_ids)  # the granule the bytes allow
        loader = "cp.async" if direction == "forward" else "regs"
        spec = (
            ("direction", direction), ("chunks", len(widths)), ("granule", min(g, 16)), ("whole_rows", True),
            ("unroll", 4), ("block", 256), ("loader", loader),
        )  # fmt: skip
        tiles = -(-(rows * pitch + 15) // (16 * 4 * 256))
        out.append(("tile u4", [fc.Launch("tile", spec, rule[0].chunk_ids, tiles, "")]))
    return [(label, launches) for label, launches in out if label == "rule" or launches != rule]


def _rowpacks(rule, widths, direction, rows, chunk=None) -> list[tuple[str, list]]:
    """rowpack, direct and staged, where the rows are short enough for it: for a split or
    a concat (a launch that moves every piece), or a gather of piece ``chunk`` (reading
    whole rows, writing that piece only)."""
    from ptxgen.kernels.fastcat_rowpack import rowpack_rows

    ids = tuple(k for k in range(len(widths)) if widths[k])
    narrow = tuple(widths[k] for k in ids)
    if chunk is None:
        outputs, moved = None, ids
        if len(rule) != 1 or tuple(rule[0].chunk_ids) != ids or len(ids) != len(widths):
            return []
    else:
        outputs, moved = (ids.index(chunk),), (chunk,)
    n = rowpack_rows(narrow, outputs)
    if len(ids) > 8 or n * sum(narrow) > 128:
        return []
    out = []
    for staged in (False, True):
        spec = (("direction", direction), ("widths", narrow), ("block", 256), ("staged", staged))
        if outputs is not None:
            spec += (("outputs", outputs),)
        threads = -(-rows // n)  # a thread moves n rows
        launch = fc.Launch("rowpack", spec, moved, -(-threads // 256), "")
        out.append((f"rowpack {'staged' if staged else 'direct'}", [launch]))
    return out


def ops(gpu, median, only: list[str]) -> list[dict]:
    import numpy as np

    torch, drv = gpu.torch, driver()
    records = []
    for op, rows0, sizes, esize, chunk, rmod, cmods in CASES:
        if only and not any(
            f"{op} {rows0}x({'+'.join(map(str, sizes))}) e{esize}".startswith(o) for o in only
        ):
            continue
        cmods = cmods or (0,) * len(sizes)
        widths = [s * esize for s in sizes]
        pitch = sum(widths)
        offs = [sum(widths[:k]) for k in range(len(widths))]
        rows = fe.scaled_rows(rows0, pitch, 256)
        row, chunks = fe.case_arrays(torch, rows, widths, rmod, list(cmods))
        direction = fc.DIRECTION[op]
        ids = [chunk] if chunk is not None else list(range(len(sizes)))
        if op == "gather":
            traffic = fe.honest_gather_bytes(np, rows, pitch, offs[chunk], widths[chunk], rmod)
        elif op == "scatter":
            traffic = fe.honest_scatter_bytes(rows, widths[chunk], cmods[chunk])
        else:
            traffic = 2 * rows * pitch
        scratch = torch.empty(traffic // 2 + 4096, dtype=torch.uint8, device="cuda")
        base = row.ptr - rmod
        t = median(lambda: drv.cuMemcpyDtoDAsync(scratch.data_ptr(), base, traffic // 2, 0))
        ceiling = traffic / t / 1e6
        scratch = None
        rule = fc.choose(op, rows, list(sizes), esize, row_mod16=rmod, chunk_mod16=list(cmods), chunk=chunk)
        name = f"{op} {rows}x({'+'.join(map(str, sizes))}) e{esize}" + (
            f" chunk {chunk}" if chunk is not None else ""
        )
        name += f" mod16 {rmod}/{list(cmods)}" if rmod or any(cmods) else ""
        rec = {
            "case": name,
            "ceiling_GBps": ceiling,
            "rule": [launch.kernel("sm_90").id for launch in rule],
            "pct": {},
        }
        for label, launches in variants(op, rows, sizes, esize, chunk, rule, widths, direction, gpu.sm):
            if direction == "backward":
                row.fill_random()
                for c in chunks:
                    c.poison()
            else:
                for c in chunks:
                    c.fill_random()
                row.poison()
            t = median(
                lambda: gpu.run(
                    launches, "sm_90", row.ptr, [c.ptr for c in chunks], rows, pitch, offs, widths
                )
            )
            err = fe.check_result(torch, direction, rows, widths, ids, row, chunks)
            rec["pct"][label] = (
                round(100 * traffic / t / 1e6 / ceiling, 1) if err is None else f"WRONG: {err}"
            )
        fe.log(f"  {name}: " + ", ".join(f"{k} {v}" for k, v in rec["pct"].items()))
        records.append(rec)
        row = chunks = None
        torch.cuda.empty_cache()
    return records


def sector_reads(gpu, median) -> list[dict]:
    """Part 3: one 32-byte sector a row (16-byte accesses, rect) at each pitch and offset."""
    torch, drv = gpu.torch, driver()
    nbytes = 1 << 29
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    rate = 2 * nbytes / median(lambda: drv.cuMemcpyDtoDAsync(dst.data_ptr(), src.data_ptr(), nbytes, 0)) / 1e6
    src = dst = None
    fe.log(f"  cuMemcpyDtoDAsync of {nbytes >> 20} MiB: {rate:.0f} GB/s read + written")
    out = [{"copy_GBps": rate}]
    for pitch, off in (
        (32, 0),
        (64, 0),
        (64, 32),
        (96, 32),
        (128, 0),
        (128, 32),
        (128, 64),
        (256, 0),
        (256, 96),
    ):
        sizes = tuple(x for x in (off, 32, pitch - 32 - off) if x)
        chunk = 1 if off else 0
        rows = (1 << 30) // pitch
        row, chunks = fe.case_arrays(torch, rows, list(sizes), 0, [0] * len(sizes))
        offs = [sum(sizes[:k]) for k in range(len(sizes))]
        launches = fc.choose("gather", rows, list(sizes), 1, chunk=chunk)
        row.fill_random()
        for c in chunks:
            c.poison()
        t = median(
            lambda: gpu.run(
                launches, "sm_90", row.ptr, [c.ptr for c in chunks], rows, pitch, offs, list(sizes)
            )
        )
        err = fe.check_result(torch, "backward", rows, list(sizes), [chunk], row, chunks)
        moved = t * 1e-3 * rate * 1e9  # bytes the copy would move in that time
        rec = {
            "pitch": pitch,
            "offset": off,
            "rows": rows,
            "us": round(t * 1e3, 1),
            "kernel": launches[0].kernel("sm_90").id,
            "GBps_honest": round(2 * 32 * rows / t / 1e6),
            "implied_read_bytes_a_row": round((moved - 32 * rows) / rows, 1),
            "correct": err is None,
        }
        out.append(rec)
        fe.log(
            f"  pitch {pitch:3} offset {off:3}: {rec['us']:8.1f} us, {rec['GBps_honest']:5} GB/s honest, "
            f"~{rec['implied_read_bytes_a_row']:5.1f} bytes read a row"
            + ("" if err is None else f" WRONG: {err}")
        )
        row = chunks = None
        torch.cuda.empty_cache()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--json", type=Path, default=Path(os.environ.get("OUT", ".")) / "grid_study.json")
    p.add_argument("--skip-flat", action="store_true", help="skip part 1 (the flat copies)")
    p.add_argument("--skip-ops", action="store_true", help="skip part 2 (the ops)")
    p.add_argument("--sectors", action="store_true", help="run part 3 (sector reads)")
    p.add_argument(
        "--only", action="append", default=[], metavar="CASE",
        help="run only the ops whose case starts with this ('split 4194304x(1+3)'); repeatable",
    )  # fmt: skip
    args = p.parse_args(argv)
    import runtime

    reason = runtime.unavailable_reason()
    if reason:
        print(f"no GPU: {reason}; nothing to measure")
        return 0
    import torch

    gpu = fe.Gpu(torch)

    def median(fn) -> float:
        return statistics.median(gpu.elapsed_ms(fn, args.reps, args.warmup))

    doc: dict = {"gpu": torch.cuda.get_device_name(), "flat_copies": []}
    if not args.skip_flat:
        fe.log("flat copies, 1 GiB (GB/s read + written):")
        doc["flat_copies"] = flat_copies(gpu, median)
    doc["ops"] = []
    if not args.skip_ops:
        fe.log("ops (% of the copy ceiling; honest traffic):")
        doc["ops"] = ops(gpu, median, args.only)
    if args.sectors:
        fe.log("sector reads (one 32-byte sector a row):")
        doc["sector_reads"] = sector_reads(gpu, median)
    args.json.write_text(json.dumps(doc, indent=1) + "\n")
    wrong = [r for r in doc["flat_copies"] if not r["correct"]]
    wrong += [r for r in doc["ops"] if any(isinstance(v, str) for v in r["pct"].values())]
    wrong += [r for r in doc.get("sector_reads", [])[1:] if not r["correct"]]
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
