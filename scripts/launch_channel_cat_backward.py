#!/usr/bin/env python3
"""Launch channel_cat_backward through the CUDA driver API, step by step.

The canonical launch script: emit the PTX, load it, allocate, launch one
backward kernel per input of the concatenation, check every element against
numpy and print what happened. Copy it and change what you need.

    python scripts/launch_channel_cat_backward.py                 # the seed's test
    python scripts/launch_channel_cat_backward.py --dtype bf16 --chunks 3,17,12

The default shape is the seed's own test: N_SPATIAL=64 rows, C_TOTAL=32 channels
split into two chunks of CHUNK_C=16, BLOCK_SIZE=128, f32.

On a machine without a GPU it says so in one line, then emits the PTX, assembles
it with ptxas and prints the register report, and exits 0.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ptxgen
import runtime


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="f32", help=f"one of {', '.join(ptxgen.DTYPES)} (default f32)")
    p.add_argument("--block-size", type=int, default=128, help="threads per CTA (default 128)")
    p.add_argument("--n-spatial", type=int, default=64, help="rows (default 64)")
    p.add_argument(
        "--chunks", default="16,16", help="channels of each input, comma-separated (default 16,16)"
    )
    p.add_argument("--repeat", type=int, default=20, help="timed launches per chunk (default 20)")
    return p.parse_args(argv)


def offline(kernel: ptxgen.ChannelCatBackward, reason: str) -> int:
    """No GPU: show that the PTX is sound by assembling it."""
    from ptxgen.toolchain import PtxasError, ToolNotFound, assemble

    print(f"no GPU: {reason}")
    print(
        f"emitting {kernel.id} for {kernel.target} (PTX ISA {kernel.ptx_version}), assembling it with ptxas"
    )
    try:
        result = assemble(kernel.source, kernel.target)
    except ToolNotFound as err:
        print(f"cannot assemble: {err}")
        return 0
    except PtxasError as err:
        print(err)
        return 1
    for resources in result.functions.values():
        print(f"  {resources}")
    print(
        f"{len(kernel.source.splitlines())} lines of PTX; print them with: "
        f"python -m ptxgen channel_cat_backward --dtype {kernel.dtype} --block-size {kernel.block_size}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        chunks = [int(c) for c in args.chunks.split(",")]
        if not chunks or min(chunks) < 1:
            raise ValueError
    except ValueError:
        print(f"error: --chunks takes positive ints separated by commas, not {args.chunks!r}")
        return 2
    try:
        # 1. Emit: the kernel object carries its PTX, entry point name and argument types.
        kernel = ptxgen.ChannelCatBackward(args.dtype, args.block_size)
    except (TypeError, ValueError) as err:
        print(f"error: {err}")
        return 2

    reason = runtime.unavailable_reason()
    if reason is not None:
        return offline(kernel, reason)

    import numpy as np

    n_spatial, c_total = args.n_spatial, sum(chunks)
    with runtime.Device(0) as dev:
        print(f"device: {dev.name} ({dev.arch}), driver CUDA {dev.driver_version[0]}.{dev.driver_version[1]}")

        # 2. Load: cuModuleLoadDataEx JIT-compiles the PTX for this GPU.
        module = dev.load(kernel)
        fn = module.function  # cuModuleGetFunction("channel_cat_backward_entry_point")
        print(f"loaded {kernel.id}: entry {kernel.entry_point_name}, {fn.num_regs} registers")

        # 3. Allocate: fresh random bits for the upstream gradient dy[n_spatial, c_total].
        itemsize = ptxgen.resolve_dtype(args.dtype).itemsize
        rng = np.random.default_rng()
        bits = np.dtype(f"uint{itemsize * 8}")
        dy_host = rng.integers(0, np.iinfo(bits).max, (n_spatial, c_total), dtype=bits, endpoint=True)
        dy = dev.to_device(dy_host, dtype=args.dtype)

        stream = runtime.Stream(dev)
        start, end = runtime.Event(dev), runtime.Event(dev)
        offset, ok = 0, True
        for chunk_c in chunks:
            dx = dev.empty((n_spatial, chunk_c), args.dtype).fill_bytes(0xA5)  # poison
            grid = kernel.grid(n_spatial, chunk_c)
            launch_args = (dy, dx, chunk_c, c_total, offset)

            # 4. Launch: checked against arg_types and the device limits, then queued.
            fn.launch(grid, kernel.block, launch_args, stream=stream)
            stream.synchronize()

            # 5. Verify every element against numpy's slice of dy.
            got = dx.to_numpy(bits=True)
            want = dy_host[:, offset : offset + chunk_c]
            bad = int(np.count_nonzero(got != want))
            ok &= bad == 0

            # 6. Time it: CUDA events around repeated launches.
            start.record(stream)
            for _ in range(args.repeat):
                fn.launch(grid, kernel.block, launch_args, stream=stream)
            end.record(stream)
            end.synchronize()
            us = start.elapsed_ms(end) * 1000 / args.repeat
            moved = 2 * n_spatial * chunk_c * itemsize
            print(
                f"chunk at offset {offset:>4} ({chunk_c} channels): grid {grid[0]} x {kernel.block[0]} "
                f"threads, {'verified' if bad == 0 else f'{bad} WRONG elements'}, "
                f"{us:.2f} us per launch ({moved / us / 1e3:.2f} GB/s)"
            )
            offset += chunk_c
        print("all chunks match numpy" if ok else "MISMATCH")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
