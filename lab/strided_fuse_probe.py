"""Study: does putting a strided split's pieces into one launch cost where their sizes differ?

    python lab/strided_fuse_probe.py --variant fused|unfused [--reps N] [-o FILE]

``fused`` is main's planner: ``plan_strided.fused_boxes`` puts the pieces copied by one box
each into shared launches (up to 8 a launch), every grid row as many CTAs as the largest
piece needs, so the CTAs of a small piece beside a large one idle. ``unfused`` replaces
``fused_boxes`` for this process with one launch a box (the rule before commit
``d853681``). The cases split a transposed bf16 array (``torch.empty(256, n).t()``) along
its channels into pieces of very different sizes (seven of 1 channel and one of 249)
and of equal sizes (eight of 32), and a stepped one (every other channel of a wider row,
``x[:, ::2]``) into seven of 1 and one of 249, into ``out=`` tensors, beside torch copying each piece
with ``copy_``. GPU µs by CUDA events, the median of ``--reps`` after warm-up, with the L2
flushed before each; every result checked against torch's. Run the two variants
alternating, twice each, on one warm GPU. A study: no record.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CASES = [  # (name, layout, rows, channels, sizes)
    ("7x1+249, 4,194,304 rows", "transposed", 4_194_304, 256, [1] * 7 + [249]),
    ("7x1+249, 65,536 rows", "transposed", 65_536, 256, [1] * 7 + [249]),
    ("8x32, 4,194,304 rows", "transposed", 4_194_304, 256, [32] * 8),
    ("8x32, 65,536 rows", "transposed", 65_536, 256, [32] * 8),
    ("4x1, 1,024 rows", "transposed", 1_024, 4, [1] * 4),
    ("7x1+249, 4,194,304 rows", "stepped", 4_194_304, 256, [1] * 7 + [249]),
    ("7x1+249, 65,536 rows", "stepped", 65_536, 256, [1] * 7 + [249]),
]


def one_launch_a_box(boxes: list[list[object]]) -> list[list[object]]:
    return [[box] for piece in boxes for box in piece]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=("fused", "unfused"), required=True)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("-o", "--output", type=Path, help="append one JSON line a case here")
    args = parser.parse_args()

    if args.variant == "unfused":
        import ptxgen.kernels.plan_strided as plan_strided

        plan_strided.fused_boxes = one_launch_a_box  # make_strided_plan looks it up per call
    import torch

    import runtime

    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def gpu_us(call: object) -> float:
        times = []
        for rep in range(args.warmup + args.reps):
            flush.zero_()
            start.record()
            call()  # type: ignore[operator]
            end.record()
            end.synchronize()
            if rep >= args.warmup:
                times.append(start.elapsed_time(end) * 1e3)
        return statistics.median(times)

    def run_case(x: object, sizes: list[int]) -> tuple[float, float, bool]:
        views = x.split(sizes, 1)  # type: ignore[attr-defined]
        ours = [torch.empty(v.shape, dtype=v.dtype, device="cuda") for v in views]
        theirs = [torch.empty_like(o) for o in ours]
        ours_us = gpu_us(lambda: runtime.channel_cat_backward(x, sizes, 1, out=ours))
        torch_us = gpu_us(lambda: [t.copy_(v) for t, v in zip(theirs, views)])
        for o in ours:  # the check: one call more into poisoned outputs
            o.view(torch.int16).fill_(-1)
        runtime.channel_cat_backward(x, sizes, 1, out=ours)
        correct = all(torch.equal(o.view(torch.int16), v.view(torch.int16)) for o, v in zip(ours, views))
        return ours_us, torch_us, correct

    gen = torch.Generator(device="cuda").manual_seed(20261205)
    for name, layout, rows, channels, sizes in CASES:
        if layout == "transposed":  # channels outermost in memory
            x = torch.empty(channels, rows, dtype=torch.int16, device="cuda")
        else:  # every other channel of a row twice as wide (x[:, ::2])
            x = torch.empty(rows, 2 * channels, dtype=torch.int16, device="cuda")
        x.random_(generator=gen)
        x = x.view(torch.bfloat16)
        ours_us, torch_us, correct = run_case(x.t() if layout == "transposed" else x[:, ::2], sizes)
        row = {"variant": args.variant, "case": name, "layout": layout, "ours_us": round(ours_us, 2),
               "torch_us": round(torch_us, 2), "correct": correct}  # fmt: skip
        print(json.dumps(row), flush=True)
        if args.output:
            with args.output.open("a") as f:
                f.write(json.dumps(row) + "\n")
        del x
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
