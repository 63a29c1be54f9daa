#!/usr/bin/env python3
"""Which tree's row-gather tile kernels does a patched tree emit? (CPU; no GPU needed.)

    python lab/ptx_identity.py dump ROOT OUT.json      # every row-gather tile kernel's PTX
    python lab/ptx_identity.py check NEW.json LANDED.json TABLE.json

``dump`` builds the forward row-gather tile kernel (cp.async, whole rows) of ROOT's ptxgen
for granules 1-16, 2-32 chunks, unroll 1-8, blocks 64-512 and three width patterns, and
writes each one's PTX. ``check`` says whether each of NEW's kernels is, text for text,
LANDED's where it stages without the table (granule under 16, at most NEW's
``TABLE_FREE_CHUNKS`` chunks at its granule, all 32 where it has none) and TABLE's elsewhere: a patch
that only moves that line runs kernels that the GPU suite and the records of the two
trees already ran.
"""

from __future__ import annotations

import ast
import itertools
import json
import random
import sys
from pathlib import Path


def dump(root: Path, out: Path) -> None:
    sys.path.insert(0, str(root.resolve()))
    from ptxgen.kernels import fastcat_tile
    from ptxgen.kernels.fastcat_tile import FastcatTile

    rng = random.Random(1)
    sources = {}
    for g, n, unroll, block in itertools.product(
        (1, 2, 4, 8, 16), (2, 3, 5, 6, 7, 12, 32), (1, 2, 4, 8), (64, 128, 256, 512)
    ):
        widths = [g * rng.randint(1, 300) for _ in range(n)]
        for wide in (tuple(w >= 16 for w in widths), True, False):
            key = str((g, n, unroll, block, wide))
            try:
                kernel = FastcatTile(direction="forward", chunks=n, granule=g, whole_rows=True, unroll=unroll,
                                     block=block, loader="cp.async", wide_chunks=wide, row_gather=True,
                                     target="sm_90")  # fmt: skip
            except (ValueError, TypeError) as exc:  # a combination the kernel refuses
                sources[key] = f"refused: {type(exc).__name__}"
                continue
            sources[key] = kernel.source
    # an int in trees up to f31005ef, by granule since
    limit = getattr(fastcat_tile, "TABLE_FREE_CHUNKS", fastcat_tile.MAX_CHUNKS)
    limits = {g: limit if isinstance(limit, int) else limit.get(g, 0) for g in (1, 2, 4, 8)}
    out.write_text(json.dumps({"table_free_chunks": limits, "sources": sources}))


def check(new: dict, landed: dict, table: dict) -> int:
    built = mismatched = 0
    limits = new["table_free_chunks"]  # JSON's keys: the granules as strings (an int: older dumps)
    landed, table = landed["sources"], table["sources"]
    for key, source in new["sources"].items():
        g, n, *_ = ast.literal_eval(key)
        if source.startswith("refused"):
            continue
        built += 1
        limit = limits if isinstance(limits, int) else limits.get(str(g), 0)
        want = landed if g < 16 and n <= limit else table
        if source != want[key]:
            mismatched += 1
            print("differs:", key)
    print(f"{built} kernels built, {mismatched} differ from the tree they should match")
    return 1 if mismatched else 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["dump"] and len(argv) == 3:
        dump(Path(argv[1]), Path(argv[2]))
        return 0
    if argv[:1] == ["check"] and len(argv) == 4:
        return check(*(json.loads(Path(p).read_text()) for p in argv[1:]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
