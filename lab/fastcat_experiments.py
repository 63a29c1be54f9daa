#!/usr/bin/env python3
"""Check and time every fast channel-concat kernel variant (ptxgen.kernels.fastcat*) on one GPU.

A STUDY, KEPT AS IT RAN (lab/README.md says what it found). It runs against the tree it
was last run on: the commit before it moved from scripts/ to lab/ (``git log --follow --
lab/fastcat_experiments.py``). ptxgen has changed since (the planner takes a device's traits;
``FastcatFlatCopy``, vec's slot layouts, load hints and streaming stores, and backward
tiles through cp.async left ptxgen), so to run it again, run it there: ``git worktree
add /tmp/study <that commit>``, then ``python /tmp/study/scripts/fastcat_experiments.py``.

One call does it all, because device time is scarce:

1. correctness: every variant (vec widths, tile granules and loaders, sm_75/sm_80/sm_90
   builds, per-chunk and fused, both directions) on odd shapes (1, 3, 17, primes rows;
   odd widths; offsets at start/middle/end; misaligned pointers), with poisoned outputs
   and random guard canaries around every array; plus one op of more than 2**32 bytes;
2. timing: CUDA events, median of --reps after warm-up, fresh random data of at least
   --min-mb MiB per op (rows scaled up where a listed shape is smaller), against the copy
   ceiling measured in the same run (better of cuMemcpyDtoDAsync and a flat 16-byte copy
   kernel, same bytes); every timed result is checked afterwards.

GB/s counts bytes read + written; per-chunk ops count honest traffic (bytes written plus
every 32-byte sector of the source holding needed bytes). Prints a compact table last;
writes everything to $OUT/fastcat_results.json (or --json).

Needs torch (allocation, random data, checks) and the project's runtime.
"""

# The timing closures are built and run inside one loop iteration, never later.
# ruff: noqa: B023
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import ptxgen.kernels.fastcat as fc  # noqa: E402
import runtime  # noqa: E402
from ptxgen.kernels import FastcatFlatCopy  # noqa: E402
from runtime._driver import driver  # noqa: E402

MIB = 1 << 20
POISON = 0xA5
GUARD = 64  # canary bytes on each side of every array (a multiple of 16)

# name: (rows, sizes in channels, per-chunk ops on which chunks)
SHAPES = {
    "200704x(256+256)": (200_704, (256, 256)),
    "16384x(8192+16384)": (16_384, (8_192, 16_384)),
    "524288x(32+48)": (524_288, (32, 48)),
    "4194304x(1+3)": (4_194_304, (1, 3)),
    "128x(401408+401408)": (128, (401_408, 401_408)),
    "1Mx256->128@64": (1 << 20, (64, 128, 64)),
}
# Shapes nobody tuned on, with misaligned pointers: (rows, sizes, dtype size, row mod 16, chunk mods)
HELD_OUT = {
    "ho:1000003x(17+200+39)": (1_000_003, (17, 200, 39), 1, 3, (1, 5, 7)),
    "ho:2000001x(33+47)": (2_000_001, (33, 47), 2, 2, (6, 10)),
    "ho:777777x(5+91+32)": (777_777, (5, 91, 32), 4, 4, (8, 12, 0)),
    "ho:300007x(100+101)": (300_007, (100, 101), 8, 8, (0, 8)),
}


def log(*a) -> None:
    print(*a, flush=True)


class Gpu:
    def __init__(self, torch) -> None:
        self.torch = torch
        self.dev = runtime.Device(0)
        self.sm = self.dev.multiprocessor_count
        self.functions: dict[str, tuple] = {}
        self.load_errors: dict[str, str] = {}

    def function(self, launch: fc.Launch, target: str):
        key = (launch.family, launch.spec, target)
        hit = self.functions.get(key)
        if hit is None:
            kernel = launch.kernel(target)
            fn = self.dev.load(kernel).function
            hit = self.functions[key] = (kernel, fn)
        return hit

    def run(self, launches, target, row_ptr, chunk_ptrs, rows, pitch, offs, widths) -> None:
        for launch in launches:
            kernel, fn = self.function(launch, target)
            args = launch.args(row_ptr, chunk_ptrs, rows, pitch, offs, widths)
            fn.launch((launch.grid, launch.grid_y, 1), kernel.block, args)

    def elapsed_ms(self, fn, reps: int, warmup: int) -> list[float]:
        torch = self.torch
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        pairs = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            # Keep the GPU busy while the host queues the launch: the events then time
            # the kernels, not the host's launch latency.
            torch.cuda._sleep(300_000)
            a.record()
            fn()
            b.record()
            pairs.append((a, b))
        torch.cuda.synchronize()
        return [a.elapsed_time(b) for a, b in pairs]


# --------------------------------------------------------------------------- arrays


class Buf:
    """A byte array inside a larger allocation: random canaries before and after, and
    its start at a chosen address modulo 16."""

    def __init__(self, torch, nbytes: int, mod16: int) -> None:
        self.torch = torch
        self.n = nbytes
        self.whole = torch.empty(nbytes + 2 * GUARD + 32, dtype=torch.uint8, device="cuda")
        base = self.whole.data_ptr()
        lead = GUARD + ((mod16 - (base + GUARD)) % 16)
        self.start = lead
        self.t = self.whole[lead : lead + nbytes]
        self.ptr = base + lead
        assert self.ptr % 16 == mod16 % 16
        # Random canaries on both sides (only there: the array itself is filled later).
        tail = self.whole.numel() - lead - nbytes
        self.lo = torch.randint(0, 256, (lead,), dtype=torch.uint8, device="cuda")
        self.hi = torch.randint(0, 256, (tail,), dtype=torch.uint8, device="cuda")
        self.whole[:lead].copy_(self.lo)
        self.whole[lead + nbytes :].copy_(self.hi)

    def fill_random(self) -> None:
        if self.n:
            self.t.copy_(self.torch.randint(0, 256, (self.n,), dtype=self.torch.uint8, device="cuda"))

    def poison(self) -> None:
        self.t.fill_(POISON)

    def canaries_ok(self) -> bool:
        w, s = self.whole, self.start
        return bool(self.torch.equal(w[:s], self.lo) and self.torch.equal(w[s + self.n :], self.hi))


def case_arrays(torch, rows, widths, row_mod, chunk_mods):
    pitch = sum(widths)
    row = Buf(torch, rows * pitch, row_mod)
    chunks = [Buf(torch, rows * w, m) for w, m in zip(widths, chunk_mods)]
    return row, chunks


def check_result(
    torch, direction, rows, widths, ids, row, chunks, src_row=None, src_chunks=None
) -> str | None:
    """Every byte of every array (poison where nothing should be written) and canaries."""
    pitch = sum(widths)
    offs = [sum(widths[:k]) for k in range(len(widths))]
    for b in [row, *chunks]:
        if not b.canaries_ok():
            return "a guard canary was overwritten"
    if direction == "backward":
        rv = row.t.view(rows, pitch)
        for k, c in enumerate(chunks):
            if widths[k] == 0:
                continue
            got = c.t.view(rows, widths[k])
            if k in ids:
                if not torch.equal(got, rv[:, offs[k] : offs[k] + widths[k]]):
                    bad = int((got != rv[:, offs[k] : offs[k] + widths[k]]).sum())
                    return f"chunk {k}: {bad} wrong bytes"
            elif not bool((c.t == POISON).all()):
                return f"chunk {k} (not in the op) was written"
    else:
        rv = row.t.view(rows, pitch)
        covered = torch.zeros(pitch, dtype=torch.bool, device="cuda")
        for k in ids:
            covered[offs[k] : offs[k] + widths[k]] = True
            if widths[k] and not torch.equal(
                rv[:, offs[k] : offs[k] + widths[k]], chunks[k].t.view(rows, widths[k])
            ):
                bad = int((rv[:, offs[k] : offs[k] + widths[k]] != chunks[k].t.view(rows, widths[k])).sum())
                return f"row side, chunk {k}: {bad} wrong bytes"
        rest = rv[:, ~covered]
        if rest.numel() and not bool((rest == POISON).all()):
            return "row-side bytes outside the op were written"
    return None


# --------------------------------------------------------------------------- variants


def alternatives(op, rows, sizes, esize, row_mod, chunk_mods, sm, chunk=None, *, small=False):
    """(label, launches, target) for the rule's choice and the alternatives measured."""
    out = [
        (
            "rule",
            fc.choose(
                op,
                rows,
                list(sizes),
                esize,
                row_mod16=row_mod,
                chunk_mod16=list(chunk_mods),
                chunk=chunk,
            ),
            "sm_90",
        )
    ]
    widths = [s * esize for s in sizes]
    pitch = sum(widths)
    offs = [sum(widths[:k]) for k in range(len(widths))]
    direction = fc.DIRECTION[op]
    ids = [chunk] if op in ("gather", "scatter") else list(range(len(sizes)))
    ids = [k for k in ids if widths[k]]
    if not ids or rows == 0:
        return out
    g = min(fc.access_width(row_mod, pitch, offs[k], widths[k], chunk_mods[k]) for k in ids)
    whole = offs[ids[0]] == 0 and offs[ids[-1]] + widths[ids[-1]] == pitch
    block = 64 if small else 256

    def tile(loader, unroll, granule=g, target="sm_90", grid=None):
        tiles = -(-(rows * pitch + 15) // (16 * unroll * block))
        spec = (
            ("direction", direction),
            ("chunks", len(ids)),
            ("granule", granule),
            ("whole_rows", whole),
            ("unroll", unroll),
            ("block", block),
            ("loader", loader),
        )
        return [fc.Launch("tile", spec, tuple(ids), grid or max(1, min(tiles, sm * 4)), "")], target

    def vec(width, unroll, grid=None, layout="block", hint=None, target="sm_90"):
        spec = [
            ("direction", direction),
            ("width", width),
            ("chunks", len(ids)),
            ("unroll", unroll),
            ("block", block),
            ("layout", layout),
        ]
        if hint:
            spec.append(("load_hint", hint))
        return [fc.Launch("vec", tuple(spec), tuple(ids), grid or sm * 8, "")], target

    if len(ids) > fc.MAX_CHUNKS:
        return out
    add = lambda label, pair: out.append((label, *pair))  # noqa: E731
    if small:  # correctness: every family, loader, layout and target, on 1 and 3 blocks
        for grid in (1, 3):
            add(f"vec{g}u2.block@{grid}", vec(g, 2, grid))
            add(f"vec{g}u2.grid@{grid}", vec(g, 2, grid, layout="grid"))
            add(f"vec1u2.sm75@{grid}", vec(1, 2, grid, target="sm_75"))
            add(f"tile{g}.regs@{grid}", tile("regs", 1, grid=grid))
            add(f"tile1.regs.sm75@{grid}", tile("regs", 2, granule=1, target="sm_75", grid=grid))
            add(f"tile{g}.cpasync.sm80@{grid}", tile("cp.async", 1, target="sm_80", grid=grid))
            add(f"tile1.cpasync@{grid}", tile("cp.async", 1, granule=1, grid=grid))
            if direction == "backward" and whole:
                add(f"tile{g}.bulk@{grid}", tile("bulk", 1, grid=grid))
        return out
    if op == "split":
        add(f"tile{g}.regs.u4", tile("regs", 4))
        add(f"tile{g}.regs.u8", tile("regs", 8))
        if whole:
            add(f"tile{g}.bulk", tile("bulk", 2))
    elif op == "concat":
        add(f"tile{g}.cpasync", tile("cp.async", 4))
        add(f"vec{g}u8", vec(g, 8))
    elif op == "gather":
        add(f"vec{g}u8", vec(g, 8))
        add(f"vec{g}u4.L2_256B", vec(g, 4, hint="L2::256B"))
        add(f"tile{g}.regs", tile("regs", 4))
    else:
        add(f"vec{g}u4", vec(g, 4))
        add(f"tile{g}.cpasync", tile("cp.async", 4))
    if op in ("split", "gather") and esize < 16 and (g == 16 or chunk is None):
        # the design steps, in order: element accesses, one in flight -> four in flight
        # -> 16-byte vectors -> four, eight in flight -> (split) shared-memory tiles
        add(f"step1.vec{esize}u1", vec(esize, 1, layout="grid"))
        add(f"step2.vec{esize}u4", vec(esize, 4, layout="grid"))
        if g == 16:
            add("step3.vec16u1", vec(16, 1, layout="grid"))
            add("step4.vec16u4", vec(16, 4, layout="grid"))
            add("step5.vec16u8", vec(16, 8))
    return out


def op_list(sizes):
    ops = [("split", None), ("concat", None)]
    for k in range(len(sizes)):
        ops += [("gather", k), ("scatter", k)]
    return ops


# --------------------------------------------------------------------------- correctness


CORRECTNESS_CASES = [
    # rows, sizes, esize, row mod16, chunk mod16s
    (1, (3,), 1, 1, (15,)),
    (1, (5, 11, 7), 1, 3, (1, 0, 6)),
    (3, (1, 3), 1, 0, (0, 0)),
    (17, (2, 6), 1, 2, (4, 2)),
    (101, (16, 32), 1, 0, (0, 0)),
    (37, (5, 11, 7), 1, 3, (1, 0, 6)),
    (9, (120, 8, 3), 1, 5, (0, 9, 3)),
    (3, (700, 333), 1, 7, (1, 2)),
    (61, (1, 3), 4, 4, (8, 12)),
    (4099, (1, 3), 1, 0, (0, 0)),
    (4099, (1, 3), 2, 0, (0, 0)),
    (997, (32, 48), 2, 0, (0, 0)),
    (13, (129, 255), 8, 8, (0, 8)),
    (257, (7,), 4, 12, (4,)),
    (1009, (64, 128, 64), 4, 0, (0, 0, 0)),
    (1009, (63, 1, 64), 4, 4, (4, 8, 12)),
    (2, (40_000, 3), 1, 9, (3, 0)),
    (5, tuple([1, 2, 3, 5, 8] * 7), 2, 2, tuple([0, 2, 4, 6, 8] * 7)),  # 35 chunks: two groups
    (7, (0, 5, 0, 3), 4, 0, (0, 0, 0, 0)),  # empty chunks
    (1000, (3, 5), 1, 0, (0, 0)),  # rowpack: 16 rows of 8 bytes a thread
    (333, (1, 1, 1, 1, 1, 1, 1, 1), 1, 0, (0,) * 8),
    (2, (1, 3), 1, 0, (0, 0)),  # rowpack: fewer rows than one thread's group
    (4099, (1, 3), 4, 0, (0, 0)),
    (4099, (1, 3), 8, 0, (0, 0)),
    (1201, (17, 40, 23), 1, 7, (1, 2, 3)),  # 1-byte granules: odd widths >= 16, odd addresses
]


def correctness_variants(sm: int):
    """(case, op, chunk, label, launches, target) for every correctness run."""
    for rows, sizes, esize, rmod, cmods in CORRECTNESS_CASES:
        for op, chunk in op_list(sizes):
            if op in ("gather", "scatter") and len(sizes) > 4 and chunk not in (0, len(sizes) - 1):
                continue
            for label, launches, target in alternatives(
                op, rows, sizes, esize, rmod, cmods, sm, chunk, small=True
            ):
                yield (rows, sizes, esize, rmod, cmods), op, chunk, label, launches, target


def timing_jobs():
    for name, (rows, sizes) in SHAPES.items():
        for esize in (1, 2, 4, 8):
            yield name, rows, sizes, esize, 0, (0,) * len(sizes)
    for name, (rows, sizes, esize, rmod, cmods) in HELD_OUT.items():
        yield name, rows, sizes, esize, rmod, cmods


def scaled_rows(rows0: int, pitch: int, min_mb: int) -> int:
    return rows0 * max(1, math.ceil(min_mb * MIB / (rows0 * pitch)))


def dry_run(min_mb: int) -> int:
    """Assemble (ptxas, no GPU) every kernel this script would load; report spills."""
    from ptxgen import toolchain

    kernels = {}
    for _case, _op, _chunk, _label, launches, target in correctness_variants(132):
        for launch in launches:
            k = launch.kernel(target)
            kernels[k.id] = k
    for _name, rows0, sizes, esize, rmod, cmods in timing_jobs():
        rows = scaled_rows(rows0, sum(sizes) * esize, min_mb)
        for op, chunk in op_list(sizes):
            for _label, launches, target in alternatives(op, rows, sizes, esize, rmod, cmods, 132, chunk):
                for launch in launches:
                    k = launch.kernel(target)
                    kernels[k.id] = k
    k = FastcatFlatCopy(target="sm_90")
    kernels[k.id] = k
    items = list(kernels.values())
    results = toolchain.assemble_many([(k.source, k.target) for k in items])
    bad = 0
    for k, r in zip(items, results):
        if isinstance(r, Exception):
            bad += 1
            log(f"REFUSED {k.id}: {str(r)[:400]}")
            continue
        fr = r.functions[k.entry_point_name]
        if fr.spill_store_bytes or fr.spill_load_bytes or fr.stack_bytes:
            bad += 1
            log(f"SPILLS {k.id}: {fr}")
    log(f"dry run: {len(items)} kernels assembled, {bad} problems")
    return 1 if bad else 0


def correctness(gpu: Gpu, deadline: float) -> list[dict]:
    torch = gpu.torch
    results = []
    for case, op, chunk, label, launches, target in correctness_variants(gpu.sm):
        rows, sizes, esize, rmod, cmods = case
        if time.time() > deadline:
            log("correctness: deadline reached, skipping the rest")
            break
        widths = [s * esize for s in sizes]
        pitch = sum(widths)
        offs = [sum(widths[:k]) for k in range(len(widths))]
        direction = fc.DIRECTION[op]
        ids = [chunk] if chunk is not None else list(range(len(sizes)))
        row, chunks = case_arrays(torch, rows, widths, rmod, cmods)
        if direction == "backward":
            row.fill_random()
            for c in chunks:
                c.poison()
        else:
            row.poison()
            for c in chunks:
                c.fill_random()
        err = None
        try:
            gpu.run(launches, target, row.ptr, [c.ptr for c in chunks], rows, pitch, offs, widths)
            torch.cuda.synchronize()
            err = check_result(torch, direction, rows, widths, ids, row, chunks)
        except Exception as exc:  # record and go on: one broken variant must not hide the rest
            err = f"{type(exc).__name__}: {exc}"
            if "CUDA_ERROR_ILLEGAL" in str(exc) or "illegal" in str(exc).lower():
                raise
        results.append(
            {
                "rows": rows,
                "sizes": list(sizes),
                "esize": esize,
                "row_mod16": rmod,
                "chunk_mod16": list(cmods),
                "op": op,
                "chunk": chunk,
                "variant": label,
                "target": target,
                "kernels": [launch.kernel(target).id for launch in launches],
                "ok": err is None,
                "error": err,
            }
        )
        if err:
            log(f"FAIL {op}[{chunk}] rows={rows} sizes={sizes} e={esize} mods={rmod},{cmods} {label}: {err}")
    return results


def huge_case(gpu: Gpu) -> list[dict]:
    """More than 2**32 bytes of dy (u8, 1+3 channels): 64-bit offsets everywhere."""
    torch = gpu.torch
    rows = (1 << 30) + 7
    sizes, esize = (1, 3), 1
    widths = [1, 3]
    pitch, offs = 4, [0, 1]
    out = []
    try:
        dy = torch.randint(0, 256, (rows * pitch,), dtype=torch.uint8, device="cuda")
        dx = [torch.full((rows * w,), POISON, dtype=torch.uint8, device="cuda") for w in widths]
        for op, chunk in (("split", None), ("gather", 1)):
            launches = fc.choose(op, rows, list(sizes), esize, chunk=chunk)
            for d in dx:
                d.fill_(POISON)
            gpu.run(launches, "sm_90", dy.data_ptr(), [d.data_ptr() for d in dx], rows, pitch, offs, widths)
            torch.cuda.synchronize()
            v = dy.view(rows, pitch)
            ok = True
            for k in [0, 1] if chunk is None else [chunk]:
                ok &= bool(torch.equal(dx[k].view(rows, widths[k]), v[:, offs[k] : offs[k] + widths[k]]))
            out.append(
                {
                    "op": op,
                    "chunk": chunk,
                    "rows": rows,
                    "bytes": rows * pitch,
                    "ok": ok,
                    "kernels": [x.kernel("sm_90").id for x in launches],
                }
            )
            log(f"huge {op}[{chunk}] {rows * pitch / 2**30:.2f} GiB: {'ok' if ok else 'WRONG'}")
        y = dy  # reuse as the row side of the concat
        y.fill_(POISON)
        for d in dx:
            d.copy_(torch.randint(0, 256, d.shape, dtype=torch.uint8, device="cuda"))
        launches = fc.choose("concat", rows, list(sizes), esize)
        gpu.run(launches, "sm_90", y.data_ptr(), [d.data_ptr() for d in dx], rows, pitch, offs, widths)
        torch.cuda.synchronize()
        v = y.view(rows, pitch)
        ok = bool(torch.equal(v[:, 0:1].reshape(-1), dx[0]) and torch.equal(v[:, 1:4].reshape(-1), dx[1]))
        out.append(
            {
                "op": "concat",
                "rows": rows,
                "bytes": rows * pitch,
                "ok": ok,
                "kernels": [x.kernel("sm_90").id for x in launches],
            }
        )
        log(f"huge concat {rows * pitch / 2**30:.2f} GiB: {'ok' if ok else 'WRONG'}")
        del dy, dx, y
        torch.cuda.empty_cache()
    except Exception as exc:
        out.append({"op": "huge", "ok": False, "error": f"{type(exc).__name__}: {exc}"})
        log("huge case failed:", exc)
        if "illegal" in str(exc).lower():
            raise
    return out


# --------------------------------------------------------------------------- timing


def honest_gather_bytes(np, rows, pitch, off, width, base_mod) -> int:
    """Bytes written + bytes of every distinct 32-byte sector of the row side holding chunk bytes."""
    r = np.arange(rows, dtype=np.int64)
    start = base_mod + r * pitch + off
    s0, s1 = start // 32, (start + width - 1) // 32
    count = int((s1 - s0 + 1).sum())
    overlap = np.maximum(s1[:-1] - s0[1:] + 1, 0).sum() if rows > 1 else 0
    return rows * width + 32 * (count - int(overlap))


def honest_scatter_bytes(rows, width, base_mod) -> int:
    n = rows * width
    first, last = base_mod // 32, (base_mod + n - 1) // 32
    return n + 32 * (last - first + 1)


def timing(gpu: Gpu, args, deadline: float) -> tuple[list[dict], list[dict]]:
    import numpy as np

    torch = gpu.torch
    drv = driver()
    flat = FastcatFlatCopy(target="sm_90")
    flat_fn = gpu.dev.load(flat).function
    records, ceilings = [], []
    jobs = list(timing_jobs())
    dt_of = {1: torch.uint8, 2: torch.float16, 4: torch.float32, 8: torch.float64}
    for name, rows0, sizes, esize, rmod, cmods in jobs:
        if time.time() > deadline:
            log(f"timing: deadline reached before {name} e={esize}")
            break
        pitch = sum(sizes) * esize
        rows = scaled_rows(rows0, pitch, args.min_mb)
        widths = [s * esize for s in sizes]
        offs = [sum(widths[:k]) for k in range(len(widths))]
        nbytes = rows * pitch
        row, chunks = case_arrays(torch, rows, widths, rmod, cmods)
        # --- the ceiling: copy the same bytes (the row side), two destinations ---------
        row.fill_random()
        n_vec = nbytes // 16
        memcpy_ms = []
        for _ in range(2):  # two allocations: the copy's speed varied with their placement
            scratch = torch.empty(nbytes + 4096, dtype=torch.uint8, device="cuda")
            (err,) = drv.cuMemcpyDtoDAsync(scratch.data_ptr(), row.ptr - rmod, nbytes, 0)
            if int(err):
                raise RuntimeError(f"cuMemcpyDtoDAsync failed: {err}")
            memcpy_ms.append(
                statistics.median(
                    gpu.elapsed_ms(
                        lambda: drv.cuMemcpyDtoDAsync(scratch.data_ptr(), row.ptr - rmod, nbytes, 0),
                        args.reps,
                        args.warmup,
                    )
                )
            )
        t_memcpy = min(memcpy_ms)
        t_flat = statistics.median(
            gpu.elapsed_ms(
                lambda: flat_fn.launch(
                    (gpu.sm * 2, 1, 1), flat.block, (row.ptr - rmod, scratch.data_ptr(), n_vec)
                ),
                args.reps,
                args.warmup,
            )
        )
        scratch = None
        ceil_gbps = max(2 * nbytes / t_memcpy, 2 * n_vec * 16 / t_flat) / 1e6
        ceilings.append(
            {
                "shape": name,
                "esize": esize,
                "rows": rows,
                "bytes": nbytes,
                "memcpy_GBps": [2 * nbytes / t / 1e6 for t in memcpy_ms],
                "flat16_GBps": 2 * n_vec * 16 / t_flat / 1e6,
                "ceiling_GBps": ceil_gbps,
            }
        )
        log(
            f"\n== {name} e={esize} rows={rows} ({nbytes / MIB:.0f} MiB) ceiling {ceil_gbps:.0f} GB/s "
            f"(memcpy {' / '.join(f'{2 * nbytes / t / 1e6:.0f}' for t in memcpy_ms)}, "
            f"flat16 {2 * n_vec * 16 / t_flat / 1e6:.0f})"
        )
        for op, chunk in op_list(sizes):
            if time.time() > deadline:
                break
            direction = fc.DIRECTION[op]
            ids = [chunk] if chunk is not None else list(range(len(sizes)))
            if op in ("gather", "scatter"):
                if direction == "backward":
                    traffic = honest_gather_bytes(np, rows, pitch, offs[chunk], widths[chunk], rmod)
                else:
                    traffic = honest_scatter_bytes(rows, widths[chunk], cmods[chunk])
                whole_sectors = (rmod + offs[chunk]) % 32 == 0 and widths[chunk] % 32 == 0 and pitch % 32 == 0
                target_pct = 90 if whole_sectors else 80
            else:
                traffic = 2 * nbytes
                target_pct = 88 if esize == 1 else 92
            # fresh random inputs for each op
            if direction == "backward":
                row.fill_random()
            else:
                for c in chunks:
                    c.fill_random()
            variants = alternatives(op, rows, sizes, esize, rmod, cmods, gpu.sm, chunk)
            # torch reference (typed views; aligned shapes only)
            line = []
            for label, launches, target in variants:
                if direction == "backward":
                    for c in chunks:
                        c.poison()
                else:
                    row.poison()
                rec = {
                    "shape": name,
                    "esize": esize,
                    "rows": rows,
                    "op": op,
                    "chunk": chunk,
                    "variant": label,
                    "target": target,
                    "traffic_bytes": traffic,
                    "ceiling_GBps": ceil_gbps,
                    "target_pct": target_pct,
                }
                try:
                    rec["kernels"] = [launch.kernel(target).id for launch in launches]
                    ms = gpu.elapsed_ms(
                        lambda: gpu.run(
                            launches, target, row.ptr, [c.ptr for c in chunks], rows, pitch, offs, widths
                        ),
                        args.reps,
                        args.warmup,
                    )
                    err = check_result(torch, direction, rows, widths, ids, row, chunks)
                    med = statistics.median(ms)
                    rec.update(
                        {
                            "us": med * 1e3,
                            "us_min": min(ms) * 1e3,
                            "us_max": max(ms) * 1e3,
                            "GBps": traffic / med / 1e6,
                            "pct": 100 * traffic / med / 1e6 / ceil_gbps,
                            "correct": err is None,
                            "error": err,
                        }
                    )
                except Exception as exc:
                    rec.update({"correct": False, "error": f"{type(exc).__name__}: {exc}"})
                    if "illegal" in str(exc).lower():
                        raise
                records.append(rec)
                if "pct" in rec:
                    mark = "" if rec["correct"] else "!WRONG"
                    line.append(f"{label}={rec['pct']:.0f}%{mark}")
                else:
                    line.append(f"{label}=ERR")
                    log(f"   {label}: {rec['error'][:300]}")
            # torch peers for context
            try:
                tdt = dt_of[esize]
                if rmod == 0 and all(m == 0 for m in cmods):
                    rv = row.t.view(tdt).view(rows, sum(sizes))
                    xs = [c.t.view(tdt).view(rows, s) for c, s in zip(chunks, sizes)]
                    coffs = [sum(sizes[:k]) for k in range(len(sizes))]
                    if op == "split":
                        f = lambda: [x.copy_(rv[:, o : o + s]) for x, o, s in zip(xs, coffs, sizes)]  # noqa: E731
                    elif op == "concat":
                        f = lambda: torch.cat(xs, dim=1, out=rv)  # noqa: E731
                    elif op == "gather":
                        f = lambda: xs[chunk].copy_(rv[:, coffs[chunk] : coffs[chunk] + sizes[chunk]])  # noqa: E731
                    else:
                        f = lambda: rv[:, coffs[chunk] : coffs[chunk] + sizes[chunk]].copy_(xs[chunk])  # noqa: E731
                    med = statistics.median(gpu.elapsed_ms(f, args.reps, args.warmup))
                    records.append(
                        {
                            "shape": name,
                            "esize": esize,
                            "rows": rows,
                            "op": op,
                            "chunk": chunk,
                            "variant": "torch",
                            "us": med * 1e3,
                            "GBps": traffic / med / 1e6,
                            "pct": 100 * traffic / med / 1e6 / ceil_gbps,
                            "traffic_bytes": traffic,
                            "ceiling_GBps": ceil_gbps,
                            "correct": None,
                        }
                    )
                    line.append(f"torch={100 * traffic / med / 1e6 / ceil_gbps:.0f}%")
            except Exception as exc:
                line.append(f"torch=ERR({type(exc).__name__})")
            rule = next(
                (
                    r
                    for r in records[::-1]
                    if r["variant"] == "rule"
                    and r["op"] == op
                    and r["chunk"] == chunk
                    and r["shape"] == name
                    and r["esize"] == esize
                ),
                None,
            )
            verdict = ""
            if rule and "pct" in rule:
                verdict = "MEETS" if rule["pct"] >= target_pct and rule["correct"] else "MISS"
            tag = f"{op}[{chunk}]" if chunk is not None else op
            log(f"  {tag:<11} ({verdict} {target_pct}%) " + " ".join(line))
        row = chunks = None
        torch.cuda.empty_cache()
    return records, ceilings


def copy_study(gpu: Gpu, args) -> list[dict]:
    """Which structure copies fastest: slot layout, loads in flight, block size, grid, hints."""
    torch = gpu.torch
    drv = driver()
    nbytes = 1 << 30
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    n_vec = nbytes // 16
    out = []
    ms = gpu.elapsed_ms(
        lambda: drv.cuMemcpyDtoDAsync(dst.data_ptr(), src.data_ptr(), nbytes, 0), args.reps, args.warmup
    )
    out.append({"variant": "cuMemcpyDtoDAsync", "GBps": 2 * nbytes / statistics.median(ms) / 1e6})
    configs = []
    for layout in ("grid", "block"):
        for unroll, block, mult in (
            (4, 256, 8),
            (4, 256, 2),
            (8, 256, 4),
            (4, 1024, 1),
            (1, 256, 0),
            (4, 256, 0),
        ):
            configs.append((layout, unroll, block, mult, None))  # mult 0: a thread per `unroll` vectors
    configs += [("grid", 4, 256, 2, "L2::256B")]
    for layout, unroll, block, mult, hint in configs:
        k = FastcatFlatCopy(unroll=unroll, block=block, layout=layout, load_hint=hint, target="sm_90")
        fn = gpu.dev.load(k).function
        grid = gpu.sm * mult if mult else -(-n_vec // (unroll * block))
        spread = f"{mult}xSM" if mult else "all"
        ms = gpu.elapsed_ms(
            lambda: fn.launch((grid, 1, 1), k.block, (src.data_ptr(), dst.data_ptr(), n_vec)),
            args.reps,
            args.warmup,
        )
        ok = bool(torch.equal(src, dst))
        dst.zero_()
        out.append(
            {
                "variant": f"{layout} u{unroll} b{block} grid={spread} {hint or ''}".strip(),
                "kernel": k.id,
                "GBps": 2 * nbytes / statistics.median(ms) / 1e6,
                "correct": ok,
            }
        )
    again = gpu.elapsed_ms(
        lambda: drv.cuMemcpyDtoDAsync(dst.data_ptr(), src.data_ptr(), nbytes, 0), args.reps, args.warmup
    )
    out.append({"variant": "cuMemcpyDtoDAsync (again)", "GBps": 2 * nbytes / statistics.median(again) / 1e6})
    log("copy study (1 GiB, GB/s read+write):")
    for r in out:
        log(f"  {r['variant']:<36} {r['GBps']:7.0f}{'' if r.get('correct', True) else '  WRONG'}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=25)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--min-mb", type=int, default=256)
    p.add_argument("--budget-s", type=float, default=330, help="stop starting new work after this")
    p.add_argument("--skip-correctness", action="store_true")
    p.add_argument("--skip-huge", action="store_true")
    p.add_argument("--skip-copy-study", action="store_true")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--dry-run", action="store_true", help="assemble every kernel with ptxas; no GPU")
    args = p.parse_args(argv)
    if args.dry_run:
        return dry_run(args.min_mb)
    t0 = time.time()
    import torch

    gpu = Gpu(torch)
    out_dir = Path(os.environ.get("OUT", "."))
    path = args.json or out_dir / "fastcat_results.json"
    result = {
        "gpu": gpu.dev.name,
        "sm_count": gpu.sm,
        "driver": list(gpu.dev.driver_version),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "torch": torch.__version__,
    }
    try:
        if not args.skip_correctness:
            result["correctness"] = correctness(gpu, t0 + args.budget_s * 0.35)
            n_ok = sum(r["ok"] for r in result["correctness"])
            log(
                f"correctness: {n_ok}/{len(result['correctness'])} variant runs correct "
                f"({time.time() - t0:.0f} s)"
            )
        if not args.skip_huge:
            result["huge"] = huge_case(gpu)
        if not args.skip_copy_study:
            result["copy_study"] = copy_study(gpu, args)
        result["timing"], result["ceilings"] = timing(gpu, args, t0 + args.budget_s)
    except Exception:
        result["fatal"] = traceback.format_exc()
        log(result["fatal"])
    finally:
        path.write_text(json.dumps(result, indent=1))
        log(f"wrote {path} ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
