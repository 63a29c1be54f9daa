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
    python lab/chunk_cost.py --direction backward # a split's tile (through registers)

For each granule and chunk count, one forward row-gather tile kernel (cp.async, 64-thread
CTAs) runs a concat of random widths (a multiple of the granule, 1-300 granules) on three
CTAs at unroll 1 and 4; the executed instructions a thread, fitted as ``fixed + per_vector
* unroll`` (a thread stages ``unroll`` vectors a tile), give the fixed part, where the
chunk ranges are paid, and what a thread spends a vector. Every result is checked.
``--direction backward`` counts a split's tile instead (through registers, the row side
read whole, each chunk's vectors gathered from the tile), the same shapes.
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


def count(granule: int, chunks: int, unroll: int, seed: int = 20261207, direction: str = "forward") -> int:
    """Executed instructions on GRID CTAs of one concat (or split), its result checked."""
    from ptxsim import Memory, run_kernel

    from ptxgen.kernels.fastcat_tile import FastcatTile

    rng = random.Random(f"{seed}-{granule}-{chunks}")
    widths = [granule * rng.randint(1, 300) for _ in range(chunks)]
    pitch, offs = sum(widths), [sum(widths[:k]) for k in range(chunks)]
    rows = -(-GRID * 16 * unroll * BLOCK // pitch) + 1  # GRID tiles and a little more
    forward = direction == "forward"
    kernel = FastcatTile(direction=direction, chunks=chunks, granule=granule, whole_rows=True, unroll=unroll,
                         block=BLOCK, loader="cp.async" if forward else "regs",
                         wide_chunks=tuple(w >= 16 for w in widths), row_gather=forward,
                         target="sm_90")  # fmt: skip
    tiles = -(-rows * pitch // kernel.tile_bytes)
    mem = Memory()
    row = mem.alloc(rows * pitch)
    ptrs = [mem.alloc(rows * w) for w in widths]
    data = rng.randbytes(rows * pitch)
    cut = [(o, o + w) for o, w in zip(offs, widths)]
    pieces = [b"".join(data[i * pitch + lo : i * pitch + hi] for i in range(rows)) for lo, hi in cut]
    for k, p in enumerate(ptrs):
        mem.view(p)[:] = pieces[k] if forward else b"\xa5" * len(pieces[k])
    if not forward:
        mem.view(row)[:] = data
    args = {"row_ptr": row, "row_bytes": rows * pitch, "row_pitch": pitch, "rows": rows}
    for k in range(chunks):
        args |= {f"chunk{k}_ptr": ptrs[k], f"chunk{k}_off": offs[k], f"chunk{k}_width": widths[k]}
    grid = kernel.grid(rows, pitch)
    if grid[0] < tiles:
        raise RuntimeError(f"expected a CTA a tile: grid {grid}, {tiles} tiles")
    executed = run_kernel(kernel, grid, args, mem)
    if bytes(mem.view(row)) != data or [bytes(mem.view(p)) for p in ptrs] != pieces:
        raise RuntimeError(f"{direction} granule {granule}, {chunks} chunks, unroll {unroll}: wrong result")
    return executed // (grid[0] * BLOCK)  # a thread, on average over the CTAs


def study(root: Path, direction: str = "forward") -> dict:
    sys.path[:0] = [str(root), str(root / "tests")]
    out = []
    for g in GRANULES:
        for n in CHUNKS:
            per_thread = {u: count(g, n, u, direction=direction) for u in UNROLLS}
            (u0, c0), (u1, c1) = sorted(per_thread.items())
            per_vector = (c1 - c0) / (u1 - u0)
            fixed = round(c0 - per_vector * u0, 1)
            case = {"granule": g, "chunks": n, "per_thread": per_thread, "fixed": fixed}
            out.append(case | {"per_vector": round(per_vector, 1)})
            print(json.dumps(out[-1]), flush=True)
    return {"root": str(root), "direction": direction, "block": BLOCK, "grid": GRID, "cases": out}


def compare(a: dict, b: dict, vectors: int = 8) -> None:
    """A against B by granule and chunk count; ``vectors``: a thread's vectors a tile (the
    unroll: 8 for the row gather's 32 KB tiles, 4 for a split's 16 KB ones)."""
    print(f"granule chunks | fixed a, b, (a-b)/chunk | per vector a, b | a/b at {vectors} vectors a thread")
    for x, y in zip(a["cases"], b["cases"]):
        d = (x["fixed"] - y["fixed"]) / x["chunks"]
        at8 = (x["fixed"] + vectors * x["per_vector"]) / (y["fixed"] + vectors * y["per_vector"])
        print(f"{x['granule']:7} {x['chunks']:6} | {x['fixed']:7.0f} {y['fixed']:7.0f} {d:6.1f} | "
              f"{x['per_vector']:6.1f} {y['per_vector']:6.1f} | {at8:.2f}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, default=HERE.parent, help="the tree whose ptxgen to count")
    p.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    p.add_argument("--direction", choices=("forward", "backward"), default="forward")
    p.add_argument("--vectors", type=int, default=8, help="--compare at this many vectors a thread a tile")
    p.add_argument("-o", "--output", type=Path)
    args = p.parse_args(argv)
    if args.compare:
        compare(*(json.loads(f.read_text()) for f in args.compare), args.vectors)
        return 0
    record = study(args.root.resolve(), args.direction)
    if args.output:
        args.output.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
