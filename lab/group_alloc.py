"""Host µs of a DeviceArray op's results made one allocation each against one allocation
for all of them (``Device.empty_group``), and of the allocating op itself, in one run.

    python lab/group_alloc.py [-o lab/data/group-alloc.json]

Per case (the split of ``rows`` × sum(sizes) into ``sizes``): ``empty_each`` makes the
results with ``Device.empty`` per result and drops them (what every allocating op on
DeviceArrays paid before ``empty_group``), ``empty_group`` makes them in one allocation
and drops them, ``op_out`` is the split with ``out=`` and ``op_fresh`` the split that
makes its results (the C lane where the extension is built). Each figure: the median
over 15 batches of 200 calls, the device drained before each batch, the four
interleaved batch by batch. A study: it writes no record.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from op_lanes import measure

import runtime


def _no_lane() -> None:
    """measure() sets a lane before each batch; these calls have none to set."""


CASES = (
    ("512x(64+64) f32", 512, [64, 64], "f32"),
    ("6400x(64*3) bf16", 6400, [64] * 3, "bf16"),
    ("400x(256*4) bf16", 400, [256] * 4, "bf16"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path)
    args = parser.parse_args()
    dev = runtime.Device(0)
    cases = {}
    split = runtime.channel_cat_backward
    for label, rows, sizes, dtype in CASES:
        dy = dev.empty((rows, sum(sizes)), dtype).fill_bytes(0x3C)
        shapes = [(rows, s) for s in sizes]
        outs = [dev.empty(s, dtype) for s in shapes]
        calls = {
            "empty_each": lambda shapes=shapes, dtype=dtype: [dev.empty(s, dtype) for s in shapes],
            "empty_group": lambda shapes=shapes, dtype=dtype: dev.empty_group(shapes, dtype),
            "op_out": lambda dy=dy, sizes=sizes, outs=outs: split(dy, sizes, 1, out=outs),
            "op_fresh": lambda dy=dy, sizes=sizes: split(dy, sizes, 1),
        }
        for call in calls.values():  # each kind of call once, so the op's lane has it
            call()
        cases[label] = measure(calls, {k: _no_lane for k in calls}, batch=200)
        print(label, cases[label], flush=True)
    if args.output:
        args.output.write_text(json.dumps({"gpu": dev.name, "cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    main()
