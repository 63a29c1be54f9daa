#!/usr/bin/env python3
"""Study: where the tile kernel's time goes on odd-width splits and concats (issue 24).

    python lab/tile_variants.py                   # on the GPU: time every variant, write JSON
    python lab/tile_variants.py --profile-only    # the default plan of each case once (for ncu)
    git show COMMIT:ptxgen/kernels/fastcat_tile.py > lab/tmp/fastcat_tile_base.py
    python lab/tile_variants.py --base lab/tmp/fastcat_tile_base.py --sweep 32 --variants planned,base

Each case (sweep shapes of seed 20261201 where the tile kernel runs, the worst first) is
run through ``runtime.channel_cat_backward`` / ``_forward`` with ``out=`` (torch tensors)
once as the planner plans it and once per variant: the planner's tile launches rewritten
(``unroll``, ``block``, ``loader``, and the grid: one CTA a tile, or a persistent grid of
``waves`` x SMs x CTAs per SM, each CTA then walking several tiles). Every result is
compared with torch's slicing; the flat copy of the same bytes is timed in the same run.
Writes ``lab/data/tile-variants.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

import records  # noqa: E402
from tile_ablation import (  # noqa: E402
    ABLATIONS,
    LAST_TILE_NO_END_BAR,
    NO_TABLE,
    SCANNED_LOCATE,
    TABLE_FREE,
    WITH_TABLE,
    ablation_tile,
    last_tile_no_end_bar,
    no_table,
    scanned_locate_tile,
    table_free_tile,
    with_table_tile,
)

OUT = ROOT / "lab" / "data" / "tile-variants.json"
TORCH_DTYPES = {"u8": "uint8", "bf16": "bfloat16", "f32": "float32", "f64": "float64"}
CASES = [
    ("split", "u8", 177954, (240, 297, 55, 262, 187)),
    ("concat", "u8", 177954, (240, 297, 55, 262, 187)),
    ("split", "u8", 157146, (157, 73, 164, 276, 179, 186)),
    ("concat", "u8", 157146, (157, 73, 164, 276, 179, 186)),
    ("split", "bf16", 265923, (35, 44, 118)),
    ("concat", "bf16", 265923, (35, 44, 118)),
    ("split", "f32", 94709, (20, 233, 90, 50)),
    ("concat", "f32", 94709, (20, 233, 90, 50)),
]
# (name, changes to the tile spec, grid: None = one CTA a tile, else CTAs per SM)
VARIANTS: list[tuple[str, Any, int | None]] = [
    ("planned", {}, None),
    ("u2", {"unroll": 2}, None),
    ("u1", {"unroll": 1}, None),
    ("b128", {"block": 128}, None),
    ("b512_u2", {"block": 512, "unroll": 2}, None),
    ("persist8", {}, 8),
    ("persist8_u2", {"unroll": 2}, 8),
]
VARIANTS += [("no_w16", {"wide_chunks": False}, None), ("u8", {"unroll": 8}, None)]
# 32 KB tiles at the same registers a thread: twice the threads a CTA, half the CTAs an SM
# (the chunk table, the edge pass and the barriers paid once per 32 KB instead of 16).
VARIANTS += [("b512", {"block": 512}, None), ("b1024_u2", {"block": 1024, "unroll": 2}, None)]
BACKWARD_ONLY = [("bulk_persist4", {"loader": "bulk"}, 4), ("bulk_persist2_u4", {"loader": "bulk"}, 2)]
# The byte walk the word windows replaced (byte granules, wide chunks): the shipped
# kernel with its word windows turned off (``byte_walk_tile``).
BACKWARD_ONLY += [("bytes", {}, None)]


def _group_flag(spec: dict[str, Any]) -> dict[str, Any]:
    """``wide_chunks`` one flag for the whole group, as before it was a flag a chunk."""
    wide = spec["wide_chunks"]
    return {"wide_chunks": all(wide) if isinstance(wide, tuple) else wide}


VARIANTS += [("group_flag", _group_flag, None)]
FORWARD_ONLY = [("regs", {"loader": "regs"}, None), ("regs_u2", {"loader": "regs", "unroll": 2}, None)]


def _row_gather(unroll: int | None = None, narrow: bool = False) -> Any:
    """The row vectors read straight out of the staging area (``row_gather``), where the
    planned launch allows it (cp.async, whole rows, every chunk wide, or with ``narrow``
    any chunks: a window a piece); else the planned."""

    def change(spec: dict[str, Any]) -> dict[str, Any]:
        wide = spec.get("wide_chunks")
        every = all(wide) if isinstance(wide, tuple) else bool(wide)
        if spec.get("loader") == "cp.async" and spec.get("whole_rows", True) and (every or narrow):
            return {"row_gather": True, **({"unroll": unroll} if unroll else {})}
        return {}

    return change


FORWARD_ONLY += [("rg", _row_gather(), None), ("rg_u8", _row_gather(8), None)]
FORWARD_ONLY += [("rg_any_u8", _row_gather(8, narrow=True), None)]
# Resident CTAs an SM asked of ptxas (resident_tile): for the planned tile, and for
# smaller tiles that hold fewer loaded vectors (so fewer registers) in more CTAs.
RESIDENT = {f"r{n}": n for n in (4, 5, 6)} | {"u2_r6": 6, "u2_r8": 8, "u4_r5": 5}
VARIANTS += [(name, {"unroll": int(name[1])} if name.startswith("u") else {}, None) for name in RESIDENT]


def patched_choose(original: Any, change: dict[str, Any], per_sm: int | None, sms: int) -> Any:
    def choose(*args: Any, **kwargs: Any) -> Any:
        out = []
        for launch in original(*args, **kwargs):
            if launch.family == "tile":
                spec = dict(launch.spec)
                spec.update(change(spec) if callable(change) else change)
                planned = dict(launch.spec)
                tile_bytes = 16 * planned["unroll"] * planned["block"]
                tiles = launch.grid * tile_bytes // (16 * spec["unroll"] * spec["block"])
                grid = tiles if per_sm is None else min(tiles, per_sm * sms)
                launch = dataclasses.replace(launch, spec=tuple(spec.items()), grid=max(1, grid))
            out.append(launch)
        return out

    return choose


def case_calls(torch: Any, runtime: Any, op: str, dt: str, rows: int, sizes: tuple[int, ...]) -> Any:
    """(call, exact, reset, wide) for one case: the op with ``out=``, its check, a poison."""
    dtype = getattr(torch, TORCH_DTYPES[dt])
    wide = torch.empty((rows, sum(sizes)), dtype=dtype, device="cuda")
    wide.view(torch.uint8).random_()
    pieces = [p.contiguous() for p in wide.split(list(sizes), 1)]
    outs = [torch.empty_like(p) for p in pieces]
    y = torch.empty_like(wide)
    as_bytes = [(o.view(torch.uint8), p.view(torch.uint8)) for o, p in zip(outs, pieces)]

    def reset() -> None:
        for o in outs:
            o.view(torch.uint8).fill_(0xA5)
        y.view(torch.uint8).fill_(0xA5)

    if op == "split":
        return (
            lambda: runtime.channel_cat_backward(wide, sizes, 1, out=outs),
            lambda: all(torch.equal(o, p) for o, p in as_bytes),
            reset,
            wide,
        )
    return (
        lambda: runtime.channel_cat_forward(pieces, 1, out=y),
        lambda: torch.equal(y.view(torch.uint8), wide.view(torch.uint8)),
        reset,
        wide,
    )


def byte_walk_tile() -> Any:
    """``FastcatTile`` gathering byte-granule vectors a byte at a time (the two-piece
    walk), as it did before the word windows: the variant ``bytes``."""
    from ptxgen.kernels.fastcat_tile import FastcatTile

    class ByteWalkTile(FastcatTile):
        # FastcatTile.__init__ sets word_windows; this class keeps it off.
        word_windows = property(lambda self: False, lambda self, value: None)

    return ByteWalkTile


def resident_tile(ctas: int, base: Any = None) -> Any:
    """``FastcatTile`` asking ptxas for room for ``ctas`` resident CTAs an SM
    (``.minnctapersm``, which caps its registers at 64K / (ctas * block)), where the shipped
    rule asks for min(1024 / block, 16 / unroll): 2 for 32 KB tiles of 256 threads, which
    left the row gather at 79 registers, three CTAs an SM. The variants ``r4``-``r6``."""
    import re
    from functools import cached_property

    from ptxgen.kernels.fastcat_tile import FastcatTile

    base = FastcatTile if base is None else base

    class ResidentTile(base):
        @cached_property
        def source(self) -> str:
            return re.sub(r"\.minnctapersm\s+\d+", f".minnctapersm {ctas}", base.source.func(self))

    return ResidentTile


# The row gather's windows (tile-variants-15): ``planned`` reads a one-piece vector's
# second window as one broadcast and, at granules of 4 bytes or more, aligned windows;
# ``rg_old`` is the kernel before both (the first window read again, five words and
# funnel shifts at every granule); ``rg_bcast`` the broadcast alone; ``rg_v4`` the
# planned kernel with each window below an 8-byte granule read as two aligned 16-byte
# vectors and put in place by selects (8 shared wavefronts a warp's window, against up to
# 20 for five words 4-way conflicted; 11-15 more instructions).
# ``rg_v2``: each window below a 4-byte granule read as three aligned 8-byte loads (12
# wavefronts a warp's window against 20, 2 load instructions fewer; five selects by the
# offset's bit 2: 5 more SASS instructions a window, at 48 registers without spills
# where ``rg_v4`` spills 4 bytes at 32 KB tiles).
# ``bw_old``: the backward word windows as before (a one-piece vector's second window
# read at its first again, in every thread), where the planned kernel branches past it.
WINDOWS = ("rg_old", "rg_bcast", "rg_v4", "rg_v2", "bw_old")
FORWARD_ONLY += [(name, {}, None) for name in WINDOWS[:-1]]
BACKWARD_ONLY += [(WINDOWS[-1], {}, None)]


def _old_window(self: Any, regs: list[str], base: str) -> None:
    e = self.e
    e.reg("u32", "w_at", "w_sh")
    e.reg("b32", *[f"w{i}" for i in range(5)])
    e("and.b32", "w_at", base, -4)
    e("and.b32", "w_sh", base, 3)
    e("shl.b32", "w_sh", "w_sh", 3)
    for i in range(5):
        e("ld.shared.u32", f"w{i}", e.at("w_at", 4 * i))
    for j in range(4):
        e("shf.r.clamp.b32", regs[j], f"w{j}", f"w{j + 1}", "w_sh")


def _old_merge_from(self: Any, out: list[str], other: list[str], left: str) -> None:
    e = self.e
    e.reg("u32", "w_bits", "w_mask", "w_diff")
    e("shl.b32", "w_bits", left, 3)
    for j in range(4):
        if j:
            e("max.u32", "w_bits", "w_bits", 32)
            e("sub.u32", "w_bits", "w_bits", 32)
        e("shl.b32", "w_mask", -1, "w_bits")
        e("xor.b32", "w_diff", out[j], other[j])
        e("and.b32", "w_diff", "w_diff", "w_mask")
        e("xor.b32", out[j], out[j], "w_diff")


def _v4_window(self: Any, regs: list[str], base: str) -> None:
    """Two aligned 16-byte loads from the vector holding the window's byte 0, then the
    window's words chosen by the offset's bits 3 and 2 (selects) and 1-0 (funnel shifts).
    Reads up to 31 bytes past %base: inside the staging area's 32 bytes of padding."""
    e = self.e
    e.reg("u32", "w_at", "w_q", "w_sh")
    v = [f"v4w{i}" for i in range(8)]
    t = [f"v4t{i}" for i in range(6)]
    u = [f"v4u{i}" for i in range(5)]
    e.reg("b32", *v, *t, *u)
    e.reg("pred", "w_p8", "w_p4")
    e("and.b32", "w_at", base, -16)
    e("ld.shared.v4.u32", v[:4], e.at("w_at"))
    e("ld.shared.v4.u32", v[4:], e.at("w_at", 16))
    e("and.b32", "w_q", base, 8)
    e("setp.ne.u32", "w_p8", "w_q", 0)
    for i in range(6):
        e("selp.b32", t[i], v[i + 2], v[i], "w_p8")
    _window_from_six(self, regs, t, u, base)


def _window_from_six(self: Any, regs: list[str], six: list[str], five: list[str], base: str) -> None:
    """%regs = the window in the six aligned words %six, whose first or second word holds
    its byte 0 (bit 2 of %base says which): the five words from there (selects into %five),
    funnel-shifted by %base's bits 1-0; at a 4-byte granule the four words as they are."""
    e = self.e
    e("and.b32", "w_q", base, 4)
    e("setp.ne.u32", "w_p4", "w_q", 0, why="byte 0 in the second word")
    if self.granule == 4:
        for j in range(4):
            e("selp.b32", regs[j], six[j + 1], six[j], "w_p4")
        return
    for j in range(5):
        e("selp.b32", five[j], six[j + 1], six[j], "w_p4")
    e("and.b32", "w_sh", base, 3)
    e("shl.b32", "w_sh", "w_sh", 3)
    for j in range(4):
        e("shf.r.clamp.b32", regs[j], five[j], five[j + 1], "w_sh")


def _v2_window(self: Any, regs: list[str], base: str) -> None:
    """Three aligned 8-byte loads from the doubleword holding the window's byte 0, the
    window's five words chosen by the offset's bit 2 (selects) and put in place by its
    bits 1-0 (funnel shifts). Reads from 7 bytes before %base to 23 past it: inside the
    staging area's 32 bytes of padding on either side (a second window's base lies up
    to 15 bytes before its piece's first staged byte)."""
    e = self.e
    e.reg("u32", "w_at", "w_q", "w_sh")
    a = [f"v2w{i}" for i in range(6)]
    u = [f"v2u{i}" for i in range(5)]
    e.reg("b32", *a, *u)
    e.reg("pred", "w_p4")
    e("and.b32", "w_at", base, -8, why="the aligned doubleword holding the window's byte 0")
    for i in range(3):
        e("ld.shared.v2.u32", a[2 * i : 2 * i + 2], e.at("w_at", 8 * i))
    _window_from_six(self, regs, a, u, base)


def window_tile(name: str) -> Any:
    """``FastcatTile`` with the row gather's windows as in variant ``name`` (WINDOWS)."""
    from ptxgen.kernels.fastcat_tile import FastcatTile

    class WindowTile(FastcatTile):
        def _merge_windows(self, out: list[str], first: str, second_base: str, left: str) -> None:
            if name == "rg_old" and self.direction == "forward":
                # a one-piece vector's second window at its first again, as before
                self.e("selp.u32", second_base, second_base, first, "rg_two")
            super()._merge_windows(out, first, second_base, left)

        def _word_gather(self, out: list[str]) -> None:
            if name != "bw_old":
                return super()._word_gather(out)
            e = self.e
            e.reg("u32", "left", "wb_base")
            e.reg("pred", "two_pieces")
            e("sub.u32", "left", "c_w", "rem")
            e("setp.lt.u32", "two_pieces", "left", 16)
            e("add.u32", "wb_base", "s", "c_jump")
            e("selp.u32", "wb_base", "wb_base", "s", "two_pieces")
            self._merge_windows(out, "s", "wb_base", "left")

        def _window(self, regs: list[str], base: str) -> None:
            if self.direction == "forward" and name in ("rg_old", "rg_bcast"):
                return _old_window(self, regs, base)
            if self.direction == "forward" and name == "rg_v4" and self.granule < 8:
                return _v4_window(self, regs, base)
            if self.direction == "forward" and name == "rg_v2" and self.granule < 4:
                return _v2_window(self, regs, base)
            return super()._window(regs, base)

        def _merge_from(self, out: list[str], other: list[str], left: str) -> None:
            if self.direction == "forward" and name in ("rg_old", "rg_bcast"):
                return _old_merge_from(self, out, other, left)
            return super()._merge_from(out, other, left)

    return WindowTile


# ``identity``: the planned row gather with its gather replaced by the staging area read
# back in place (row vector i from staged vector i, one aligned 16-byte load a vector):
# the concat's DRAM traffic, cp.async staging, barriers and stores, without the
# re-indexing (no locate, no windows, no merge). Its results are wrong by design (the
# check says so); its time is what the tile's structure costs without the gather.
# Where the structure's cost goes (tile-identity-h200.json: identity at 0.955 of the flat
# copy): the same bytes in flight an SM in tiles half as large, each barrier waiting on
# half the copies (128 threads, 16 KB, ten resident CTAs against five of 256 threads and
# 32 KB), with and without the gather; and 16 KB tiles of 256 threads (half the bytes in
# flight). name -> (changes to the spec, identity, resident CTAs asked or None).
STRUCTURE = {
    "identity": ({}, True, None),
    "id_b128_r10": ({"block": 128}, True, 10),
    "b128_r10": ({"block": 128}, False, 10),
    "id_u4": ({"unroll": 4}, True, None),
    "id_b128_r12": ({"block": 128}, True, 12),  # more in flight: 12 x 16 KB (40 registers)
}
# identity over WITH_TABLE: the structure the ablations take apart (tile_ablation.py)
ID_TABLE = "id_table"
FORWARD_ONLY += [(name, change, None) for name, (change, _, _) in STRUCTURE.items()]


def identity_tile(base: Any = None) -> Any:
    """``FastcatTile`` (or ``base``) whose row gather stores staged vector i as row vector
    i (the variant ``identity``): a traffic bound, not a copy."""
    from ptxgen.kernels.fastcat_tile import FastcatTile

    class IdentityTile(FastcatTile if base is None else base):
        def _gather_rows(self) -> None:
            e = self.e
            e.reg("u32", "id_at")
            e.reg("u64", "rg_g")
            out = e.data("rg_v", 16)
            for u in range(self.unroll):
                self._row_vector(u)
                skip = e.label("ID_SKIP")
                e.bra(skip, guard=f"full_{u}", neg=True)
                e("add.u32", "id_at", "staging", f"off_{u}")
                e("ld.shared.v4.u32", out, e.at("id_at"), why="staged vector i, aligned")
                self._store_row_vector(u, out)
                e.place(skip)

    return IdentityTile


# the structure taken apart (tile_ablation.py)
STRUCTURE_APART = [
    *ABLATIONS, LAST_TILE_NO_END_BAR, NO_TABLE, WITH_TABLE, ID_TABLE, TABLE_FREE, SCANNED_LOCATE,
]  # fmt: skip
FORWARD_ONLY += [(name, {}, None) for name in STRUCTURE_APART]


def base_factory(path: Path) -> Any:
    """A stand-in for ``FastcatTile`` built from an earlier copy of fastcat_tile.py (the
    keyword arguments it does not know dropped), loaded as ``lab/tile_study.py`` loads one."""
    import inspect

    from tile_study import load_base

    base = load_base(path)
    known = set(inspect.signature(base.cache_key).parameters)

    def make(**kwargs: Any) -> Any:
        return base(**{k: v for k, v in kwargs.items() if k in known})

    return make


def stand_in(name: str, base: Any = None) -> Any:
    """The class ``run_case`` puts in ``FastcatTile``'s place for the variant ``name``
    (``FastcatTile`` itself where the variant changes the launch only)."""
    from ptxgen.kernels.fastcat_tile import FastcatTile

    if name == "base":
        return base
    if name == "bytes":
        return byte_walk_tile()
    if name in RESIDENT:
        return resident_tile(RESIDENT[name])
    if name in WINDOWS:
        return window_tile(name)
    if name in STRUCTURE:
        _, identity, ctas = STRUCTURE[name]
        made = resident_tile(ctas) if ctas else FastcatTile
        return identity_tile(made) if identity else made
    if name in ABLATIONS:
        return ablation_tile(ABLATIONS[name], identity_tile(with_table_tile()))
    if name == WITH_TABLE:
        return with_table_tile()
    if name == TABLE_FREE:
        return table_free_tile()
    if name == SCANNED_LOCATE:
        return scanned_locate_tile()
    if name == ID_TABLE:
        return identity_tile(with_table_tile())
    if name == LAST_TILE_NO_END_BAR:
        return last_tile_no_end_bar()
    if name == NO_TABLE:
        return no_table()
    return FastcatTile


def run_case(
    bench: Any, torch: Any, runtime: Any, planner: Any, sms: int, case: Any, wanted: set[str], base: Any
) -> dict[str, Any]:
    op, dt, rows, sizes = case
    call, exact, reset, wide = case_calls(torch, runtime, op, dt, rows, sizes)
    flat_src, flat_dst = wide.view(-1), torch.empty_like(wide).view(-1)
    flat_us, _ = bench.gpu_us(lambda: flat_dst.copy_(flat_src))
    entry: dict[str, Any] = {"op": op, "dtype": dt, "rows": rows, "sizes": list(sizes), "flat_us": flat_us}
    from ptxgen.kernels import fastcat_tile

    extra = BACKWARD_ONLY if op == "split" else FORWARD_ONLY
    extra = extra + ([("base", {}, None)] if base is not None else [])
    original, ours = planner.choose, fastcat_tile.FastcatTile
    line = []
    for name, change, per_sm in VARIANTS + extra:
        if wanted and name not in wanted:
            continue
        planner.choose = patched_choose(original, change, per_sm, sms)
        fastcat_tile.FastcatTile = stand_in(name, base)  # Launch.kernel imports it at each plan
        runtime.ops.clear_plans()
        reset()
        try:
            us, _ = bench.gpu_us(call)
            torch.cuda.synchronize()
            ok = exact()
            entry[name] = {"us": round(us, 2), "of_flat": round(flat_us / us, 4), "correct": ok}
            line.append(f"{name} {flat_us / us:.3f}{'' if ok else ' WRONG'}")
        except Exception as exc:  # a variant the kernel refuses: recorded, not fatal
            entry[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            line.append(f"{name} refused")
        finally:
            planner.choose, fastcat_tile.FastcatTile = original, ours
            runtime.ops.clear_plans()
    print(f"{op:6} {dt:4} {rows}x({'+'.join(map(str, sizes))}): " + ", ".join(line), flush=True)
    return entry


def pieces_cases(args: argparse.Namespace) -> list[Any]:
    """``--sweep N --pieces LO-HI``: the benchmark's sweep (``bench_cases.sweep_cases``, its
    dtypes, widths and sizes) with LO to HI pieces a shape, for kernels whose cost grows
    with the piece count (up to MAX_CHUNKS = 32 in one tile kernel) where the sweep's 2-6
    pieces do not reach."""
    import bench_cases

    return bench_cases.sweep_cases(args.sweep, args.seed, pieces=args.pieces)


def _piece_range(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition("-")
    lo_n, hi_n = int(lo), int(hi or lo)
    if not 1 <= lo_n <= hi_n:
        raise argparse.ArgumentTypeError(f"--pieces {text!r}: want LO-HI with 1 <= LO <= HI")
    return lo_n, hi_n


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from bench_ops import Bench

    import runtime
    from ptxgen.kernels import plan as planner

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if args.profile_only:
        for op, dt, rows, sizes in CASES:
            call, _, _, _ = case_calls(torch, runtime, op, dt, rows, sizes)
            call()
            torch.cuda.synchronize()
        return {}
    bench = Bench(torch, reps=args.reps, warmup=3)
    cases = [c for c in CASES if c[0] in args.ops.split(",")]
    if args.sweep:
        from bench_cases import sweep_cases

        drawn = sweep_cases(args.sweep, args.seed) if args.pieces is None else pieces_cases(args)
        for c in drawn:
            op = "backward" if c.op == "split" else "forward"
            plan = runtime.ops.plan_for(op, c.dtype, c.rows, c.sizes)
            tile = any(getattr(s.kernel, "info", {}).get("family") == "tile" for s in plan.steps)
            if tile and c.op in args.ops.split(","):
                cases.append((c.op, c.dtype, c.rows, tuple(c.sizes)))
    wanted = set(args.variants.split(",")) if args.variants else set()
    base = base_factory(args.base) if args.base else None
    results = [run_case(bench, torch, runtime, planner, sms, case, wanted, base) for case in cases]
    summary: dict[str, Any] = {}
    for name in {k for r in results for k, v in r.items() if isinstance(v, dict) and "of_flat" in v}:
        for op in ("split", "concat"):
            # the op's cells, then by dtype: the H200's 1-byte concats trail its others
            for dt in (None, *TORCH_DTYPES):
                got = [
                    r[name]["of_flat"]
                    for r in results
                    if r["op"] == op and dt in (None, r["dtype"]) and "of_flat" in r.get(name, {})
                ]
                if got:
                    key = f"{name} {op}" if dt is None else f"{name} {op} {dt}"
                    summary[key] = {"median": statistics.median(got), "min": min(got), "n": len(got)}
    for key in sorted(summary):
        print(f"{key}: {summary[key]}")
    header = records.header(records.command_line(), records.tree_hash())
    return {**header, "summary": summary, "cases": results}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--profile-only", action="store_true")
    p.add_argument("--base", type=Path, help="an earlier fastcat_tile.py, timed as variant 'base'")
    p.add_argument("--sweep", type=int, default=0, help="also the sweep's shapes where a tile runs")
    p.add_argument("--seed", type=int, default=20261201)
    p.add_argument("--pieces", type=_piece_range, help="with --sweep: LO-HI pieces a shape (default 2-6)")
    p.add_argument("--variants", default="", help="comma-separated variant names (default: all)")
    p.add_argument("--ops", default="split,concat", help="comma-separated: split, concat (default both)")
    p.add_argument("-o", "--output", type=Path, default=OUT)
    args = p.parse_args(argv)
    record = run(args)
    if not args.profile_only:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
