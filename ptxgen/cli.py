"""``python -m ptxgen``: print, write or check the PTX of a kernel, list what there is,
or write a bundle of kernels for runtimes without Python."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import BLOCK_SIZES, DTYPES, KERNELS, TARGETS, __version__
from .targets import DEFAULT_TARGET

_PROG = "python -m ptxgen"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # One line and exit status 2, as argparse does, but without the usage block.
        self.exit(2, f"ptxgen: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=_PROG,
        description="Emit GPU kernels as PTX text.",
        epilog=(
            f"Examples: {_PROG} channel_cat_backward --dtype f32 --block-size 128; {_PROG} list; "
            f"{_PROG} bundle all --dtype f32,bf16 -o bundle/ (see {_PROG} bundle --help)"
        ),
    )
    parser.add_argument("--version", action="version", version=f"ptxgen {__version__}")
    parser.add_argument("kernel", help=f"'list', 'bundle', or one of: {', '.join(KERNELS)}")
    # The defaults are applied after parsing, so 'list' can tell an option given from one left out.
    parser.add_argument("--dtype", help=f"element type (default f32): {', '.join(DTYPES)}")
    parser.add_argument("--block-size", type=int, help="threads per CTA (default 128)")
    parser.add_argument("--target", help=f"sm_XX (default {DEFAULT_TARGET})")
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


def _bundle_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=f"{_PROG} bundle",
        description=(
            "Write kernels (kernels x dtypes x block sizes x targets) to a folder: one .ptx per "
            "kernel and a manifest.json describing each (docs/bundle-manifest.schema.json)."
        ),
        epilog=(
            f"Example: {_PROG} bundle channel_cat_backward --dtype f32,bf16 --block-size 128,256 -o bundle/"
        ),
    )
    parser.add_argument("kernels", nargs="+", help=f"'all', or one or more of: {', '.join(KERNELS)}")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the bundle's folder")
    parser.add_argument(
        "--dtype", default="f32", help=f"comma-separated, or 'all' (default f32): {', '.join(DTYPES)}"
    )
    parser.add_argument(
        "--block-size",
        default="128",
        help=(
            "comma-separated multiples of 32 up to 1024, or 'all' "
            f"({' '.join(map(str, BLOCK_SIZES))}); default 128"
        ),
    )
    parser.add_argument(
        "--target", default=DEFAULT_TARGET, help=f"comma-separated, or 'all' (default {DEFAULT_TARGET})"
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


def _fail(message: str, status: int = 2) -> int:
    print(f"ptxgen: error: {message}", file=sys.stderr)
    return status


def _items(value: str, option: str) -> list[str]:
    items = [v.strip() for v in value.split(",")]
    if not all(items):
        raise ValueError(f"{option} takes a comma-separated list without empty items, not {value!r}")
    return items


def _block_sizes(value: str) -> list[int]:
    if value.strip() == "all":
        return list(BLOCK_SIZES)
    sizes = []
    for item in _items(value, "--block-size"):
        try:
            sizes.append(int(item))
        except ValueError:
            raise ValueError(f"--block-size takes ints or 'all', not {item!r}") from None
    return sizes


def bundle_main(argv: list[str]) -> int:
    """``python -m ptxgen bundle``: every combination, in a fixed order, to one folder."""
    from .bundle import BundleError, write_bundle
    from .dtypes import resolve_dtype
    from .targets import resolve_target

    args = _bundle_parser().parse_args(argv)
    try:
        names = list(KERNELS) if "all" in args.kernels else args.kernels
        unknown = [n for n in names if n not in KERNELS]
        if unknown:
            raise ValueError(f"unknown kernel {unknown[0]!r}; accepted: all, {', '.join(KERNELS)}")
        dtypes = list(DTYPES) if args.dtype.strip() == "all" else _items(args.dtype, "--dtype")
        targets = list(TARGETS) if args.target.strip() == "all" else _items(args.target, "--target")
        # Canonical names, duplicates dropped, in the tables' order: the same selection
        # gives the same bundle whatever order or spelling it was typed in.
        dtype_set = {resolve_dtype(d).name for d in dtypes}
        target_set = {resolve_target(t) for t in targets}
        block_sizes = sorted(set(_block_sizes(args.block_size)))
        kernels = [
            KERNELS[name](dtype, block_size, target=target)
            for name in KERNELS
            if name in names
            for dtype in DTYPES
            if dtype in dtype_set
            for block_size in block_sizes
            for target in TARGETS
            if target in target_set
        ]
        path = write_bundle(kernels, args.output)
    except (TypeError, ValueError, BundleError) as err:
        return _fail(str(err))
    except OSError as err:
        return _fail(f"cannot write the bundle to {args.output}: {err.strerror or err}", 1)
    print(f"wrote {len(kernels)} kernel{'s' * (len(kernels) != 1)} and {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bundle"]:
        return bundle_main(argv[1:])
    args = _parser().parse_args(argv)
    if args.kernel == "list":
        given = [
            option
            for option, value in (
                ("--dtype", args.dtype),
                ("--block-size", args.block_size),
                ("--target", args.target),
                ("--call", args.call or None),
                ("--output", args.output),
                ("--check", args.check or None),
            )
            if value is not None
        ]
        if given:
            return _fail(f"list takes no options; got {', '.join(given)}")
        print(_list())
        return 0
    if args.kernel == "bundle":
        return _fail(f"'bundle' comes first and takes its own options: {_PROG} bundle --help")
    cls = KERNELS.get(args.kernel)
    if cls is None:
        return _fail(f"unknown kernel {args.kernel!r}; accepted: list, bundle, {', '.join(KERNELS)}")
    dtype = "f32" if args.dtype is None else args.dtype
    block_size = 128 if args.block_size is None else args.block_size
    try:
        kernel = cls(dtype, block_size, target=args.target, inline=not args.call)
    except (TypeError, ValueError) as err:
        return _fail(str(err))

    if args.output:
        try:
            args.output.write_text(kernel.source)
        except OSError as err:
            return _fail(f"cannot write {args.output}: {err.strerror}", 1)
    else:
        sys.stdout.write(kernel.source)

    if args.check:
        from .toolchain import PtxasError, ToolNotFound, assemble

        report = sys.stdout if args.output else sys.stderr
        try:
            result = assemble(kernel.source, kernel.target)
        except ToolNotFound as err:
            return _fail(str(err), 1)
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
