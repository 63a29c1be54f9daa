"""``python -m ptxgen``: print, write or check the PTX of a kernel."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import BLOCK_SIZES, DTYPES, KERNELS, TARGETS
from .targets import DEFAULT_TARGET


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # One line and exit status 2, as argparse does, but without the usage block.
        self.exit(2, f"ptxgen: error: {message} (see python -m ptxgen --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m ptxgen",
        description="Emit GPU kernels as PTX text.",
        epilog="Example: python -m ptxgen channel_cat_backward --dtype f32 --block-size 128",
    )
    parser.add_argument("kernel", help=f"'list', or one of: {', '.join(KERNELS)}")
    parser.add_argument("--dtype", default="f32", help=f"element type (default f32): {', '.join(DTYPES)}")
    parser.add_argument("--block-size", type=int, default=128, help="threads per CTA (default 128)")
    parser.add_argument("--target", default=None, help=f"sm_XX (default {DEFAULT_TARGET})")
    parser.add_argument(
        "--call",
        action="store_true",
        help="make the entry point call the .func body instead of holding it inline",
    )
    parser.add_argument("-o", "--output", type=Path, help="write the PTX to this file")
    parser.add_argument(
        "--check",
        action="store_true",
        help="assemble with ptxas; print registers, spills and stack",
    )
    return parser


def _list() -> str:
    lines = ["kernels:"]
    for name, cls in KERNELS.items():
        summary = (cls.__doc__ or "").strip().splitlines()[0]
        lines.append(f"  {name:<22} {summary}")
    lines.append(f"dtypes:      {' '.join(DTYPES)}")
    lines.append(f"block sizes: multiples of 32 from 32 to 1024 (tested: {' '.join(map(str, BLOCK_SIZES))})")
    lines.append("targets:")
    for target, isa in TARGETS.items():
        default = "  (default)" if target == DEFAULT_TARGET else ""
        lines.append(f"  {target:<7} PTX ISA {isa}{default}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.kernel == "list":
        print(_list())
        return 0
    cls = KERNELS.get(args.kernel)
    if cls is None:
        print(
            f"ptxgen: error: unknown kernel {args.kernel!r}; accepted: list, {', '.join(KERNELS)}",
            file=sys.stderr,
        )
        return 2
    try:
        kernel = cls(args.dtype, args.block_size, target=args.target, inline=not args.call)
    except (TypeError, ValueError) as err:
        print(f"ptxgen: error: {err}", file=sys.stderr)
        return 2

    if args.output:
        try:
            args.output.write_text(kernel.source)
        except OSError as err:
            print(f"ptxgen: error: cannot write {args.output}: {err.strerror}", file=sys.stderr)
            return 1
    else:
        sys.stdout.write(kernel.source)

    if args.check:
        from .toolchain import PtxasError, ToolNotFound, assemble

        report = sys.stdout if args.output else sys.stderr
        try:
            result = assemble(kernel.source, kernel.target)
        except ToolNotFound as err:
            print(f"ptxgen: error: {err}", file=sys.stderr)
            return 1
        except PtxasError as err:
            print(f"ptxgen: {err}", file=sys.stderr)
            return 1
        print(
            f"{kernel.id} ({kernel.target}, PTX ISA {kernel.ptx_version}): ptxas accepted it",
            file=report,
        )
        for resources in result.functions.values():
            print(f"  {resources}", file=report)
    return 0
