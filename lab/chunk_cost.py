#!/usr/bin/env python3
"""Study (CPU): what the row gather's staging costs a thread per chunk, with and without
the chunk table, counted in executed PTX instructions by the interpreter (tests/ptxsim.py).

Without the table (tree b627b501 on, granules under 16 bytes) every thread works out each
chunk's range before staging it; with it, warp 0's lanes work the ranges out once, a lane
a chunk, and every thread reads them back. The first is measured faster on concats of 2-6
pieces (lab/data/ab-no-table-h100-20261207/), but its cost grows with the chunk count and
the tile kernel takes up to 32 chunks. This counts it:

    python lab/chunk_cost.py                      # this tree's ptxgen
    python lab/chunk_cost.py --root /tmp/table    # another tree's (a copy with a patch applied)
    python lab/chunk_cost.py --compare A.json B.json

For each granule and chunk count, one forward row-gather tile kernel (cp.async, 64-thread
CTAs) runs a concat of random widths (a multiple of the granule, 1-300 granules) on three
CTAs at unroll 1 and 4; the executed instructions a thread, fitted as ``fixed + per_vector
* unroll`` (a thread stages ``unroll`` vectors a tile), give the fixed part, where the
chunk ranges are paid, and what a thread spends a vector. Every result is checked.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GRANULES = (1, 2, 4, 8)
CHUNKS = (2, 4, 6, 8, 12, 16, 24, 32)
UNROLLS = (1, 4)
BLOCK, GRID = 64, 3


def count(granule: int, chunks: int, unroll: int, seed: int = 20261207) -> int:
    """Executed instructions on GRID CTAs of one concat, its result checked."""
    from ptxsim import Memory, run_kernel

    from ptxgen.kernels.fastcat_tile import FastcatTile

    rng = random.Random(f"{seed}-{granule}-{chunks}")
    widths = [granule * rng.randint(1, 300) for _ in range(chunks)]
    pitch, offs = sum(widths), [sum(widths[:k]) for k in range(chunks)]
    rows = -(-GRID * 16 * unroll * BLOCK // pitch) + 1  # GRID tiles and a little more
    kernel = FastcatTile(direction="forward", chunks=chunks, granule=granule, whole_rows=True, unroll=unroll,
                         block=BLOCK, loader="cp.async", wide_chunks=tuple(w >= 16 for w in widths),
                         row_gather=True, target="sm_90")  # fmt: skip
    tiles = -(-rows * pitch // kernel.tile_bytes)
    mem = Memory()
    row = mem.alloc(rows * pitch)
    ptrs = [mem.alloc(rows * w) for w in widths]
    data = rng.randbytes(rows * pitch)
    for k, p in enumerate(ptrs):
        lo, hi = offs[k], offs[k] + widths[k]
        mem.view(p)[:] = b"".join(data[i * pitch + lo : i * pitch + hi] for i in range(rows))
    args = {"row_ptr": row, "row_bytes": rows * pitch, "row_pitch": pitch, "rows": rows}
    for k in range(chunks):
        args |= {f"chunk{k}_ptr": ptrs[k], f"chunk{k}_off": offs[k], f"chunk{k}_width": widths[k]}
    grid = kernel.grid(rows, pitch)
    if grid[0] < tiles:
        raise RuntimeError(f"expected a CTA a tile: grid {grid}, {tiles} tiles")
    executed = run_kernel(kernel, grid, args, mem)
    if bytes(mem.view(row)) != data:
        raise RuntimeError(f"granule {granule}, {chunks} chunks, unroll {unroll}: wrong result")
    return executed // (grid[0] * BLOCK)  # a thread, on average over the CTAs


def study(root: Path) -> dict:
    sys.path[:0] = [str(root), str(root / "tests")]
    out = []
    for g in GRANULES:
        for n in CHUNKS:
            per_thread = {u: count(g, n, u) for u in UNROLLS}
            (u0, c0), (u1, c1) = sorted(per_thread.items())
            per_vector = (c1 - c0) / (u1 - u0)
            fixed = round(c0 - per_vector * u0, 1)
            case = {"granule": g, "chunks": n, "per_thread": per_thread, "fixed": fixed}
            out.append(case | {"per_vector": round(per_vector, 1)})
            print(json.dumps(out[-1]), flush=True)
    return {"root": str(root), "block": BLOCK, "grid": GRID, "cases": out}


def compare(a: dict, b: dict) -> None:
    print("granule chunks | fixed a, b, (a-b)/chunk | per vector a, b | a/b at 8 vectors a thread")
    for x, y in zip(a["cases"], b["cases"]):
        d = (x["fixed"] - y["fixed"]) / x["chunks"]
        at8 = (x["fixed"] + 8 * x["per_vector"]) / (y["fixed"] + 8 * y["per_vector"])
        print(f"{x['granule']:7} {x['chunks']:6} | {x['fixed']:7.0f} {y['fixed']:7.0f} {d:6.1f} | "
              f"{x['per_vector']:6.1f} {y['per_vector']:6.1f} | {at8:.2f}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, default=HERE.parent, help="the tree whose ptxgen to count")
    p.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    p.add_argument("-o", "--output", type=Path)
    args = p.parse_args(argv)
    if args.compare:
        compare(*(json.loads(f.read_text()) for f in args.compare))
        return 0
    record = study(args.root.resolve())
    if args.output:
        args.output.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
