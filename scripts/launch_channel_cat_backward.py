#!/usr/bin/env python3
"""Launch channel_cat_backward through the CUDA driver API, step by step.

The canonical launch script: emit the PTX, load it, allocate, launch one
backward kernel per input of the concatenation, check every element against
numpy and print what happened. Copy it and change what you need.

    python scripts/launch_channel_cat_backward.py                 # the seed's test
    python scripts/launch_channel_cat_backward.py --dtype bf16 --chunks 3,17,12

The seed is teenygrad's channel_cat_backward kernel, which this project re-creates
in PTX; the default shape is its own test: N_SPATIAL=64 rows, C_TOTAL=32 channels
split into two chunks of CHUNK_C=16, BLOCK_SIZE=128, f32.

On a machine without a GPU it says so in one line, prints the launch plan it would
run (the grid of each launch and the bytes of its parameter buffer), assembles the
PTX with ptxas and prints the register report, and exits 0. If it can do neither
(no GPU and no ptxas), it says why in one line on stderr and exits 1. Bad options:
one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ptxgen
import runtime
from ptxgen.args import ParamSlot, param_buffer_size, param_layout

PROG = "launch_channel_cat_backward"
_I32_MAX = 2**31 - 1  # chunk_c, c_total and chunk_offset are i32 arguments
_GRID_X_MAX = 2**31 - 1  # the driver's limit on gridDim.x


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{PROG}: error: {message}\n")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes a positive int, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"takes a positive int, not {value}")
    return value


def _chunks(text: str) -> list[int]:
    try:
        chunks = [int(c) for c in text.split(",")]
    except ValueError:
        chunks = []
    if not chunks or min(chunks) < 1:
        raise argparse.ArgumentTypeError(f"takes positive ints separated by commas, not {text!r}")
    return chunks


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _Parser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="f32", help=f"one of {', '.join(ptxgen.DTYPES)} (default f32)")
    p.add_argument("--block-size", type=int, default=128, help="threads per CTA (default 128)")
    p.add_argument("--n-spatial", type=_positive, default=64, help="rows, >= 1 (default 64)")
    p.add_argument(
        "--chunks",
        type=_chunks,
        default=[16, 16],
        help="channels of each input, comma-separated (default 16,16)",
    )
    p.add_argument("--repeat", type=_positive, default=20, help="timed launches per chunk, >= 1 (default 20)")
    return p.parse_args(argv)


def check_shape(kernel: ptxgen.ChannelCatBackward, n_spatial: int, chunks: list[int]) -> None:
    """Refuse, before anything is allocated or launched, a shape no launch can take."""
    c_total = sum(chunks)
    if c_total > _I32_MAX:
        raise ValueError(f"--chunks add up to {c_total} channels; c_total is an i32, at most {_I32_MAX}")
    for chunk_c in chunks:
        grid_x = kernel.grid(n_spatial, chunk_c)[0]
        if grid_x > _GRID_X_MAX:
            raise ValueError(
                f"--n-spatial {n_spatial} with a chunk of {chunk_c} channels needs {grid_x} CTAs; "
                f"at most {_GRID_X_MAX} (use a larger --block-size or fewer rows)"
            )


def _slot_line(slot: ParamSlot, value: int | str) -> str:
    if isinstance(value, str):  # a device address, known only once memory is allocated
        shown, meaning = " ".join(["xx"] * slot.size), value
    else:
        shown = struct.pack(f"<{slot.type.struct_format}", value).hex(" ")
        meaning = f"= {value}"
    return f"      {slot.offset:>3}  {slot.name:<13} {slot.type!s:<9} {shown:<23}  {meaning}".rstrip()


def launch_plan(kernel: ptxgen.ChannelCatBackward, n_spatial: int, chunks: list[int]) -> str:
    """What would be launched: the grid of each launch and its packed parameter buffer,
    laid out by :func:`ptxgen.args.param_layout` as ``CU_LAUNCH_PARAM_BUFFER_POINTER``
    takes it (``runtime`` passes the same values one pointer per parameter)."""
    layout = param_layout(kernel.arg_names, kernel.arg_types)
    size = param_buffer_size(layout)
    c_total, dtype = sum(chunks), kernel.dtype
    itemsize = ptxgen.resolve_dtype(dtype).itemsize
    lines = [
        f"launch plan: {kernel.id} ({kernel.target}, PTX ISA {kernel.ptx_version}), entry "
        f"{kernel.entry_point_name}; dy is {n_spatial} x {c_total} {dtype}, {len(chunks)} "
        f"launch{'es' * (len(chunks) > 1)}"
    ]
    offset = 0
    for i, chunk_c in enumerate(chunks):
        grid = kernel.grid(n_spatial, chunk_c)
        values: dict[str, int | str] = {
            "dy": f"device address of dy ({n_spatial * c_total * itemsize} bytes)",
            "dx": f"device address of dx, {n_spatial} x {chunk_c} ({n_spatial * chunk_c * itemsize} bytes)",
            "chunk_c": chunk_c,
            "c_total": c_total,
            "chunk_offset": offset,
        }
        lines.append(
            f"  launch {i + 1}: dx = dy[:, {offset}:{offset + chunk_c}], grid {grid} x block {kernel.block} "
            f"= {grid[0]} CTAs"
        )
        lines.append(f"    parameter buffer, {size} bytes (offset, name, type, bytes little-endian):")
        lines.extend(_slot_line(slot, values[slot.name]) for slot in layout)
        end = layout[-1].offset + layout[-1].size
        if size > end:
            lines.append(f"      {end:>3}  {'(padding)':<13} {'':<9} {' '.join(['00'] * (size - end))}")
        offset += chunk_c
    return "\n".join(lines)


def fail(message: str, status: int = 1) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return status


def offline(kernel: ptxgen.ChannelCatBackward, n_spatial: int, chunks: list[int], reason: str) -> int:
    """No GPU: show the launches it would make, and that the PTX is sound by assembling it."""
    from ptxgen.toolchain import PtxasError, ToolNotFound, assemble, find_tool

    print(f"no GPU: {reason}")
    print(launch_plan(kernel, n_spatial, chunks))
    try:
        ptxas = find_tool("ptxas")
        result = assemble(kernel.source, kernel.target)
    except ToolNotFound as err:
        return fail(f"no GPU and cannot assemble the PTX either: {err}")
    except PtxasError as err:
        return fail(str(err).replace("\n", " | "))
    print(f"ptxas ({ptxas}) accepted {kernel.id} for {kernel.target}:")
    for resources in result.functions.values():
        print(f"  {resources}")
    print(
        f"{len(kernel.source.splitlines())} lines of PTX; print them with: "
        f"python -m ptxgen channel_cat_backward --dtype {kernel.dtype} --block-size {kernel.block_size}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    chunks, n_spatial = args.chunks, args.n_spatial
    try:
        # 1. Emit: the kernel object carries its PTX, entry point name and argument types.
        kernel = ptxgen.ChannelCatBackward(args.dtype, args.block_size)
        check_shape(kernel, n_spatial, chunks)
    except (TypeError, ValueError) as err:
        return fail(f"error: {err}", 2)

    reason = runtime.unavailable_reason()
    if reason is not None:
        return offline(kernel, n_spatial, chunks, reason)
    try:
        return on_gpu(kernel, n_spatial, chunks, args.repeat)
    except runtime.CudaError as err:
        return fail(str(err).splitlines()[0])


def on_gpu(kernel: ptxgen.ChannelCatBackward, n_spatial: int, chunks: list[int], repeat: int) -> int:
    import numpy as np

    c_total, dtype = sum(chunks), kernel.dtype
    with runtime.Device(0) as dev:
        print(f"device: {dev.name} ({dev.arch}), driver CUDA {dev.driver_version[0]}.{dev.driver_version[1]}")

        # 2. Load: cuModuleLoadDataEx JIT-compiles the PTX for this GPU.
        module = dev.load(kernel)
        fn = module.function  # cuModuleGetFunction("channel_cat_backward_entry_point")
        print(f"loaded {kernel.id}: entry {kernel.entry_point_name}, {fn.num_regs} registers")

        # 3. Allocate: fresh random bits for the upstream gradient dy[n_spatial, c_total].
        itemsize = ptxgen.resolve_dtype(dtype).itemsize
        rng = np.random.default_rng()
        bits = np.dtype(f"uint{itemsize * 8}")
        dy_host = rng.integers(0, np.iinfo(bits).max, (n_spatial, c_total), dtype=bits, endpoint=True)
        dy = dev.to_device(dy_host, dtype=dtype)

        stream = runtime.Stream(dev)
        start, end = runtime.Event(dev), runtime.Event(dev)
        offset, ok = 0, True
        for chunk_c in chunks:
            dx = dev.empty((n_spatial, chunk_c), dtype).fill_bytes(0xA5)  # poison
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

            # 6. Time it: CUDA events around repeated launches (repeat >= 1, checked above).
            start.record(stream)
            for _ in range(repeat):
                fn.launch(grid, kernel.block, launch_args, stream=stream)
            end.record(stream)
            end.synchronize()
            us = start.elapsed_ms(end) * 1000 / repeat
            moved = 2 * n_spatial * chunk_c * itemsize
            print(
                f"chunk at offset {offset:>4} ({chunk_c} channels): grid {grid[0]} x {kernel.block[0]} "
                f"threads, {'verified' if bad == 0 else f'{bad} WRONG elements'}, "
                f"{us:.2f} us per launch ({moved / us / 1e3:.2f} GB/s)"
            )
            dx.close()
            offset += chunk_c
        print("all chunks match numpy" if ok else "MISMATCH")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
