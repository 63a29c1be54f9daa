"""``python -m ptxgen``: print, write or check the PTX of a kernel, list what there is,
write a bundle of kernels for runtimes without Python, or say what is installed."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from . import BLOCK_SIZES, DTYPES, KERNELS, TARGETS, __version__
from .kernels.plan import H200 as _OP_TRAITS
from .targets import DEFAULT_TARGET

_PROG = "python -m ptxgen"
# The first words that are not kernel names. bundle and doctor parse their own options.
_COMMANDS = ("list", "bundle", "doctor")
# The ops an op bundle plans (ptxgen.bundle.OP_NAMES).
_OP_WORDS = ("split", "concat")


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
            f"{_PROG} bundle all --dtype f32,bf16 -o bundle/ (see {_PROG} bundle --help); "
            f"{_PROG} doctor (what is installed and found)"
        ),
    )
    parser.add_argument("--version", action="version", version=f"ptxgen {__version__}")
    parser.add_argument(
        "kernel", help=f"{', '.join(repr(c) for c in _COMMANDS)}, or one of: {', '.join(KERNELS)}"
    )
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


def _folder(value: str) -> Path:
    # Path("") is ".": an empty -o (an unset shell variable, say) would write into the
    # current folder instead of saying so.
    if not value.strip():
        raise argparse.ArgumentTypeError(f"takes a folder, not {value!r}")
    return Path(value)


def _bundle_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=f"{_PROG} bundle",
        description=(
            "Write kernels (kernels x dtypes x block sizes x targets) to a folder: one .ptx per "
            "kernel and a manifest.json describing each (docs/bundle-manifest.schema.json). "
            "With 'split' or 'concat' and --sizes, or with --ops, write an op bundle instead: the "
            "kernels of each op's plan and the plan itself, for any row count "
            "(format version 2, docs/bundle-manifest-v2.schema.json)."
        ),
        epilog=(
            f"Examples: {_PROG} bundle channel_cat_backward --dtype f32,bf16 --block-size 128,256 -o b/; "
            f"{_PROG} bundle split --dtype bf16 --sizes 64,64,64,64 -o ops/; "
            f"{_PROG} bundle --ops shapes.json --sm-count 108 --memory-bandwidth 1555 --target sm_80 -o ops/"
        ),
    )
    parser.add_argument(
        "kernels", nargs="*",
        help=f"'all', or one or more of: {', '.join(KERNELS)}; or one op: {', '.join(_OP_WORDS)}",
    )  # fmt: skip
    parser.add_argument("-o", "--output", type=_folder, required=True, help="the bundle's folder")
    parser.add_argument(
        "--dtype", default=None, help=f"comma-separated, or 'all' (default f32): {', '.join(DTYPES)}"
    )
    parser.add_argument(
        "--block-size",
        default=None,
        help=(
            "comma-separated multiples of 32 up to 1024, or 'all' "
            f"({' '.join(map(str, BLOCK_SIZES))}); default 128 (kernels only)"
        ),
    )
    parser.add_argument(
        "--target",
        default=None,
        help=(
            f"comma-separated, or 'all' (default {DEFAULT_TARGET}); for an op bundle one SM version, "
            f"the GPU's (default {_OP_TRAITS.arch}): its kernels are built for the newest target it runs"
        ),
    )
    ops = parser.add_argument_group("op bundles (the plan depends on these; defaults: the H200's)")
    ops.add_argument("--sizes", help="an op's piece widths in elements, comma-separated: 64,64,64,64")
    ops.add_argument(
        "--ops", type=Path,
        help='a JSON file listing ops: [{"op": "split", "dtype": "bf16", "sizes": [64, 64]}, ...]',
    )  # fmt: skip
    ops.add_argument("--sm-count", help=f"the GPU's SMs (default {_OP_TRAITS.sm_count})")
    ops.add_argument(
        "--max-threads-per-sm", help=f"resident threads per SM (default {_OP_TRAITS.max_threads_per_sm})"
    )
    ops.add_argument(
        "--memory-bandwidth",
        help=(
            f"the GPU's peak DRAM bandwidth in GB/s (default {(_OP_TRAITS.memory_bandwidth or 0) // 10**9}; "
            "the concat's tile size follows it; required with --sm-count)"
        ),
    )
    ops.add_argument("--max-grid-x", help=f"the GPU's grid limit in x (default {_OP_TRAITS.max_grid_x})")
    ops.add_argument("--max-grid-y", help=f"the GPU's grid limit in y (default {_OP_TRAITS.max_grid_y})")
    ops.add_argument(
        "--no-dependent-launch", action="store_true",
        help="build the fast kernels without programmatic dependent launch (sm_90+ has it)",
    )  # fmt: skip
    return parser


def _doctor_parser() -> argparse.ArgumentParser:
    return _Parser(
        prog=f"{_PROG} doctor",
        description=(
            "Say what is installed and found: ptxgen, ptxas and nvdisasm, cuda-bindings and numpy, "
            "the compiled launch, the driver and each GPU; and what to install for what is missing. "
            "Exit status 0 whatever it finds."
        ),
    )


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


def _did_you_mean(word: str, choices: list[str]) -> str:
    """``; did you mean 'bundle'?`` for a near miss, else nothing."""
    close = difflib.get_close_matches(word, choices, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _items(value: str, option: str) -> list[str]:
    """The items of a comma-separated option, where 'all' alone was already taken."""
    items = [v.strip() for v in value.split(",")]
    if not all(items):
        raise ValueError(f"{option} takes a comma-separated list without empty items, not {value!r}")
    if "all" in items:
        raise ValueError(f"{option} takes 'all' alone or a comma-separated list without it, not {value!r}")
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
    if args.ops is not None or args.sizes is not None or any(k in _OP_WORDS for k in args.kernels):
        return _op_bundle_main(args)
    op_options = [
        option
        for option, value in (
            ("--sm-count", args.sm_count), ("--max-threads-per-sm", args.max_threads_per_sm),
            ("--memory-bandwidth", args.memory_bandwidth),
            ("--max-grid-x", args.max_grid_x), ("--max-grid-y", args.max_grid_y),
            ("--no-dependent-launch", args.no_dependent_launch or None),
        )
        if value is not None
    ]  # fmt: skip
    if op_options:
        return _fail(f"{op_options[0]} is for op bundles ({' or '.join(_OP_WORDS)} --sizes, or --ops)")
    if not args.kernels:
        kernels = ", ".join(KERNELS)
        return _fail(f"name kernels ('all' or {kernels}), an op ({', '.join(_OP_WORDS)}), or --ops FILE")
    args.dtype = "f32" if args.dtype is None else args.dtype
    args.block_size = "128" if args.block_size is None else args.block_size
    args.target = DEFAULT_TARGET if args.target is None else args.target
    try:
        names = list(KERNELS) if "all" in args.kernels else args.kernels
        unknown = [n for n in names if n not in KERNELS]
        if unknown:
            hint = _did_you_mean(unknown[0], ["all", *KERNELS])
            raise ValueError(f"unknown kernel {unknown[0]!r}; accepted: all, {', '.join(KERNELS)}{hint}")
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
    except (TypeError, ValueError, BundleError) as err:  # the arguments: exit status 2
        return _fail(str(err))
    except OSError as err:  # the disk or its permissions, not the arguments
        return _fail(f"cannot write the bundle to {args.output}: {err.strerror or err}", 1)
    print(f"wrote {len(kernels)} kernel{'s' * (len(kernels) != 1)} and {path}")
    return 0


def _gbps(value: str | None, default: int | None) -> int | None:
    """``--memory-bandwidth`` in GB/s, as bytes a second (the trait's unit)."""
    if value is None:
        return default
    gbps = _positive_int(value, "--memory-bandwidth", 1)
    if gbps * 10**9 >= 2**63:
        raise ValueError(f"--memory-bandwidth is in GB/s; {value!r} is more than any memory moves")
    return gbps * 10**9


def _positive_int(value: str | None, option: str, default: int) -> int:
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{option} takes an int >= 1, not {value!r}") from None
    if number < 1:
        raise ValueError(f"{option} takes an int >= 1, not {value!r}")
    return number


def _sizes(value: str, option: str) -> tuple[int, ...]:
    sizes = []
    for item in _items(value, option):
        try:
            size = int(item)
        except ValueError:
            raise ValueError(f"{option} takes ints >= 0 (elements per piece), not {item!r}") from None
        if size < 0:
            raise ValueError(f"{option} takes ints >= 0 (elements per piece), not {item!r}")
        sizes.append(size)
    return tuple(sizes)


_OPS_FILE_KEYS = ("op", "dtype", "sizes", "rows")


def _ops_file(path: Path) -> list[tuple[str, str, tuple[int, ...]]]:
    """The ops of an --ops file: a JSON list of {"op", "dtype", "sizes"} (and "rows",
    which is accepted and not needed: the plans cover every row count)."""
    import json

    try:
        data = json.loads(path.read_text())
    except OSError as err:
        raise ValueError(f"--ops {path}: cannot read it ({err.strerror or err})") from None
    except ValueError as err:
        raise ValueError(f"--ops {path} is not JSON: {err}") from None
    if not isinstance(data, list) or not data:
        raise ValueError(f"--ops {path} must hold a non-empty JSON list of ops, not {type(data).__name__}")
    ops = []
    for i, item in enumerate(data):
        where = f"--ops {path}: item {i}"
        if not isinstance(item, dict):
            raise ValueError(f"{where} is {item!r}, not an object with op, dtype and sizes")
        unknown = sorted(set(item) - set(_OPS_FILE_KEYS))
        if unknown:
            raise ValueError(f"{where} has key {unknown[0]!r}; accepted: {', '.join(_OPS_FILE_KEYS)}")
        missing = [k for k in ("op", "dtype", "sizes") if k not in item]
        if missing:
            raise ValueError(f"{where} lacks {missing[0]!r}")
        op, dtype, sizes = item["op"], item["dtype"], item["sizes"]
        if op not in _OP_WORDS:
            raise ValueError(f"{where}: op {op!r}; accepted: {', '.join(_OP_WORDS)}")
        if not isinstance(dtype, str):
            raise ValueError(f"{where}: dtype {dtype!r} is not a name such as 'bf16'")
        if (
            not isinstance(sizes, list) or not sizes
            or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in sizes)
        ):  # fmt: skip
            raise ValueError(f"{where}: sizes {sizes!r}; accepted: a non-empty list of ints >= 0")
        rows = item.get("rows", 0)
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            raise ValueError(f"{where}: rows {rows!r}; accepted: an int >= 0")
        ops.append((op, dtype, tuple(sizes)))
    return ops


def _op_bundle_main(args: argparse.Namespace) -> int:
    """``python -m ptxgen bundle split|concat --sizes ...`` or ``--ops FILE``: an op bundle."""
    from .bundle import BundleError, OpShape, write_op_bundle
    from .dtypes import resolve_dtype
    from .kernels.fastcat import GpuTraits
    from .targets import target_capability

    try:
        if args.block_size is not None:
            raise ValueError("--block-size is for kernel bundles: an op's plan picks its kernels' blocks")
        ops: list[tuple[str, str, tuple[int, ...]]] = []
        if args.ops is not None:
            if args.kernels or args.sizes is not None:
                raise ValueError("--ops FILE takes no op words or --sizes: the file lists the ops")
            if args.dtype is not None:
                raise ValueError("--ops FILE takes no --dtype: each op in the file names its own")
            ops = _ops_file(args.ops)
        else:
            if len(args.kernels) != 1 or args.kernels[0] not in _OP_WORDS:
                words = " ".join(args.kernels)
                raise ValueError(f"an op bundle takes one op, {' or '.join(_OP_WORDS)}, not {words!r}")
            if args.sizes is None:
                raise ValueError(f"{args.kernels[0]} needs --sizes, the pieces' widths: --sizes 64,64")
            sizes = _sizes(args.sizes, "--sizes")
            dtype_option = "f32" if args.dtype is None else args.dtype
            dtypes = list(DTYPES) if dtype_option.strip() == "all" else _items(dtype_option, "--dtype")
            ops = [(args.kernels[0], d, sizes) for d in dtypes]
        target = _OP_TRAITS.arch if args.target is None else args.target.strip()
        if "," in target or target == "all":
            raise ValueError(f"an op bundle is for one GPU: --target takes one SM version, not {target!r}")
        target_capability(target)  # an SM version, or a ValueError naming it
        if args.sm_count is not None and args.memory_bandwidth is None:
            # the default bandwidth is the H200's whole part: over another SM count it would
            # describe no GPU, and it decides the concat's tile size
            raise ValueError(
                "--sm-count describes another GPU than the H200 the defaults are: give its "
                "--memory-bandwidth too (peak GB/s; an H100 SXM's is 3352, an A100 40GB's 1555)"
            )
        traits = GpuTraits(
            arch=target,
            sm_count=_positive_int(args.sm_count, "--sm-count", _OP_TRAITS.sm_count),
            max_threads_per_sm=_positive_int(
                args.max_threads_per_sm, "--max-threads-per-sm", _OP_TRAITS.max_threads_per_sm
            ),
            l2_bytes=_OP_TRAITS.l2_bytes,
            max_shared_memory_per_sm=_OP_TRAITS.max_shared_memory_per_sm,
            max_shared_memory_per_block=_OP_TRAITS.max_shared_memory_per_block,
            max_grid_x=_positive_int(args.max_grid_x, "--max-grid-x", _OP_TRAITS.max_grid_x),
            max_grid_y=_positive_int(args.max_grid_y, "--max-grid-y", _OP_TRAITS.max_grid_y),
            dependent_launch=not args.no_dependent_launch,
            memory_bandwidth=_gbps(args.memory_bandwidth, _OP_TRAITS.memory_bandwidth),
        )
        shapes = [OpShape(op, resolve_dtype(dtype).name, sizes) for op, dtype, sizes in ops]
        path = write_op_bundle(shapes, traits, args.output)
    except (TypeError, ValueError, BundleError) as err:  # the arguments: exit status 2
        return _fail(str(err))
    except OSError as err:  # the disk or its permissions, not the arguments
        return _fail(f"cannot write the bundle to {args.output}: {err.strerror or err}", 1)
    count = len(set(shapes))
    print(f"wrote {count} op{'s' * (count != 1)} for {traits.target} and {path}")
    return 0


def doctor_main(argv: list[str]) -> int:
    """``python -m ptxgen doctor``: one screen of what is installed and found; exit status 0."""
    from .doctor import findings, render

    _doctor_parser().parse_args(argv)  # --help, and one line for anything else
    print(render(findings()))
    return 0


def _unknown_word(word: str) -> int:
    hint = _did_you_mean(word, [*KERNELS, *_COMMANDS])
    return _fail(
        f"unknown kernel or command {word!r}{hint} "
        f"(kernels: {', '.join(KERNELS)}; commands: {', '.join(_COMMANDS)})"
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bundle"]:
        return bundle_main(argv[1:])
    if argv[:1] == ["doctor"]:
        return doctor_main(argv[1:])
    parser = _parser()
    # Known arguments first, so a mistyped first word ('bundel channel_cat_backward') is
    # named as such rather than reported as the words after it being unrecognized.
    args, unrecognized = parser.parse_known_args(argv)
    if args.kernel not in KERNELS and args.kernel not in _COMMANDS:
        return _unknown_word(args.kernel)
    if unrecognized:
        parser.error(f"unrecognized arguments: {' '.join(unrecognized)}")
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
    if args.kernel in ("bundle", "doctor"):
        return _fail(f"{args.kernel!r} comes first and takes its own options: {_PROG} {args.kernel} --help")
    cls = KERNELS[args.kernel]
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
        except ToolNotFound as err:  # ToolFailed included: ptxas could not be run
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
