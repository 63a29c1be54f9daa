"""Kernel bundles: PTX files and a manifest that a runtime without Python can load.

A bundle is a folder with one ``<id>__<target>.ptx`` per kernel and ``manifest.json``
describing each: entry point, target, PTX ISA, content hash, block, the grid as C
expressions, and every parameter's type, size, alignment and offset in the
parameter buffer (what ``CU_LAUNCH_PARAM_BUFFER_POINTER`` takes). The manifest's
JSON Schema is ``docs/bundle-manifest.schema.json``; ``docs/embedding.md`` shows how
C, C++ and Rust runtimes use it.

Output is deterministic: the same kernels give the same bytes (sorted keys, a fixed
entry order, no timestamps or paths), so a runtime can vendor a bundle and diff it.

An **op bundle** (format version 2, :func:`write_op_bundle`,
``docs/bundle-manifest-v2.schema.json``) also carries the plans of whole ops, a split or
a concat of one shape: the kernels their plans launch (entries as in version 1) and, per
op, cases (row ranges and address alignments, as data) each holding its steps: kernel,
grid, block, dynamic shared memory and every argument as expressions of ``rows`` and
offsets into the op's arrays. The plans are ``ptxgen.kernels.plan``'s, the ones the
Python op makes, for every row count at once (:func:`ptxgen.kernels.plan.symbolic_plans`).
A bundle of kernels alone stays format version 1, byte for byte.
Only the :class:`ptxgen.Kernel` protocol is read, plus ``grid_expression``,
``footprint_expressions`` and ``requires`` where a kernel has them, so hand-written
kernels bundle too.
"""

from __future__ import annotations

import errno
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import Kernel, __version__
from .args import param_buffer_size, param_layout
from .kernel import wants_dependent_launch

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST",
    "OP_FORMAT_VERSION",
    "BundleError",
    "OpShape",
    "manifest",
    "manifest_bytes",
    "op_manifest",
    "op_manifest_bytes",
    "write_bundle",
    "write_op_bundle",
]

FORMAT = "ptxgen-bundle"
# Raised when a field changes meaning or a required one is added; readers check it.
FORMAT_VERSION = 1
# Op bundles: version 1's kernels plus "ops", the plans (docs/bundle-manifest-v2.schema.json).
OP_FORMAT_VERSION = 2
MANIFEST = "manifest.json"

# Grid expressions use a grammar every C-like runtime can evaluate or paste:
# decimal integers, identifiers, + - * / and parentheses.
_EXPRESSION = re.compile(r"[A-Za-z0-9_ +\-*/()]+")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FILE_PART = re.compile(r"[A-Za-z0-9_.\-]+")


class BundleError(ValueError):
    """A kernel cannot be described in a bundle, or the output folder cannot take one."""


_ACCEPTED_FOLDERS = "give an empty or new folder, or one holding only an earlier bundle"
# What the operating system says when the path itself cannot be a folder, whatever the
# disk or the permissions: a part of it is a file, a name is too long, links loop, or a
# link points nowhere. These are mistakes in the path given, so a BundleError.
_NOT_A_FOLDER_PATH = frozenset({errno.ENOTDIR, errno.ENAMETOOLONG, errno.ELOOP, errno.EEXIST})


def ptx_file_name(kernel: Kernel) -> str:
    """``<id>__<target>.ptx``: an id alone repeats across targets (an id that already
    ends in its target, as the fast kernels' do, is not given it twice)."""
    for what, value in (("id", kernel.id), ("target", kernel.target)):
        if not _FILE_PART.fullmatch(value) or value.startswith("."):
            raise BundleError(
                f"kernel {what} {value!r} cannot be part of a file name; accepted: letters, digits, _ . -"
            )
    if kernel.id.endswith(f"__{kernel.target}"):
        return f"{kernel.id}.ptx"
    return f"{kernel.id}__{kernel.target}.ptx"


def _expression(kernel: Kernel, text: object, what: str, params: set[str], scalars: set[str]) -> set[str]:
    """Check one C expression of the bundle grammar; return the inputs it uses that are
    not parameters (``n_spatial``)."""
    if not isinstance(text, str) or not _EXPRESSION.fullmatch(text):
        raise BundleError(
            f"{kernel.id}: {what} {text!r} is not accepted; "
            "accepted: integers, names, + - * / and parentheses"
        )
    inputs = set()
    for name in _IDENTIFIER.findall(text):
        if name in params and name not in scalars:
            raise BundleError(f"{kernel.id}: {what} {text!r} uses pointer parameter {name!r}")
        if name not in params:
            inputs.add(name)
    return inputs


def _footprint(kernel: Kernel, declared: Any, params: set[str], scalars: set[str]) -> dict[str, Any]:
    if not isinstance(declared, dict) or "elements" not in declared or "align" not in declared:
        raise BundleError(f"{kernel.id}: a footprint needs 'elements' and 'align', not {declared!r}")
    out: dict[str, Any] = {"align": int(declared["align"])}
    for key in ("elements", "if_nonzero"):
        if key in declared:
            _expression(kernel, declared[key], f"footprint {key}", params, scalars)
            out[key] = declared[key]
    return out


def _param(slot: Any, footprint: dict[str, Any] | None = None) -> dict[str, Any]:
    t = slot.type
    entry: dict[str, Any] = {
        "name": slot.name,
        "kind": "pointer" if t.is_pointer else "scalar",
        "type": str(t),
        "ptx_type": t.ptx_type,
        "size": slot.size,
        "align": slot.align,
        "offset": slot.offset,
    }
    if t.is_pointer:
        entry["dtype"] = t.dtype.name
        entry["element_size"] = t.dtype.itemsize
        entry["writes"] = t.writes
    else:
        entry["min"] = t.min
        entry["max"] = t.max
    if footprint is not None:
        entry["footprint"] = footprint
    return entry


def _grid(kernel: Kernel, scalars: set[str], params: set[str]) -> dict[str, Any] | None:
    expression = getattr(kernel, "grid_expression", None)
    if expression is None:
        return None
    if not (isinstance(expression, (tuple, list)) and len(expression) == 3):
        raise BundleError(f"{kernel.id}: grid_expression must be 3 C expressions, not {expression!r}")
    inputs: set[str] = set()
    for axis in expression:
        inputs |= _expression(kernel, axis, "grid expression", params, scalars)
    return {"x": expression[0], "y": expression[1], "z": expression[2], "inputs": sorted(inputs)}


def entry(kernel: Kernel) -> dict[str, Any]:
    """The manifest entry of one kernel."""
    if not isinstance(kernel, Kernel):
        raise BundleError(f"{type(kernel).__name__} {kernel!r} is not a ptxgen.Kernel")
    source = kernel.source.encode()
    digest = hashlib.sha256(source).hexdigest()
    if kernel.content_hash != digest:
        # The hash is the runtime's cache key and the vendor's integrity check: computed, not trusted.
        raise BundleError(f"{kernel.id}: content_hash {kernel.content_hash} is not the sha256 of its source")
    layout = param_layout(kernel.arg_names, kernel.arg_types)
    scalars = {s.name for s in layout if not s.type.is_pointer}
    names = {s.name for s in layout}
    declared = getattr(kernel, "footprint_expressions", None) or {}
    unknown = set(declared) - (names - scalars)
    if unknown:
        raise BundleError(f"{kernel.id}: footprints for {sorted(unknown)}, which are no pointer parameters")
    footprints = {arg: _footprint(kernel, fp, names, scalars) for arg, fp in declared.items()}
    requires = []
    for value, limit in getattr(kernel, "requires", None) or ():
        _expression(kernel, value, "requirement", names, scalars)
        _expression(kernel, limit, "requirement", names, scalars)
        requires.append({"value": value, "at_most": limit})
    block = [int(b) for b in kernel.block]
    return {
        "id": kernel.id,
        "name": kernel.name,
        "file": ptx_file_name(kernel),
        "file_size": len(source),
        "content_hash": digest,
        "entry_point": kernel.entry_point_name,
        "target": kernel.target,
        "ptx_version": kernel.ptx_version,
        "block": block,
        "grid": _grid(kernel, scalars, names),
        "params": [_param(s, footprints.get(s.name)) for s in layout],
        "param_buffer_size": param_buffer_size(layout),
        **({"requires": requires} if requires else {}),
        **({"dependent_launch": True} if wants_dependent_launch(kernel) else {}),
    }


def manifest(kernels: Iterable[Kernel]) -> dict[str, Any]:
    """The manifest of a bundle of ``kernels``, entries in the order given.

    Two kernels with the same file name (same id and target) are refused.
    """
    entries, seen = [], set()
    for kernel in kernels:
        e = entry(kernel)
        if e["file"] in seen:
            raise BundleError(f"two kernels would both be {e['file']}: same id and target")
        seen.add(e["file"])
        entries.append(e)
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "generator": f"ptxgen {__version__}",
        "kernels": entries,
    }


def manifest_bytes(kernels: Iterable[Kernel]) -> bytes:
    """``manifest.json``'s bytes: sorted keys, two-space indent, ASCII, a final newline."""
    text = json.dumps(manifest(kernels), indent=2, sort_keys=True, ensure_ascii=True)
    return (text + "\n").encode("ascii")


def _previous_bundle_files(directory: Path) -> set[str]:
    """The files a previous bundle in ``directory`` owns; refuses anything else there."""
    present = {p.name for p in directory.iterdir()}
    if not present:
        return set()
    owned: set[str] = set()
    if MANIFEST in present:
        try:
            old = json.loads((directory / MANIFEST).read_text())
            if old.get("format") == FORMAT:  # either version: both list their files in "kernels"
                owned = {MANIFEST, *(k["file"] for k in old.get("kernels", []))}
        except (ValueError, KeyError, TypeError, AttributeError):
            owned = set()
    foreign = sorted(present - owned)
    if foreign:
        raise BundleError(
            f"{directory} holds {foreign[0]!r}, which is not part of a ptxgen bundle; {_ACCEPTED_FOLDERS}"
        )
    return owned


def _make_folder(directory: Path) -> None:
    """Create ``directory`` (and its parents) unless it is there; a path that cannot be
    a folder is a :class:`BundleError`, other failures (permissions, the disk) stay ``OSError``."""
    try:
        if directory.exists() and not directory.is_dir():
            raise BundleError(f"{directory} exists and is not a folder; {_ACCEPTED_FOLDERS}")
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        if err.errno not in _NOT_A_FOLDER_PATH:
            raise
        raise BundleError(f"{directory} cannot be a folder ({err.strerror}); {_ACCEPTED_FOLDERS}") from None


def write_bundle(kernels: Iterable[Kernel], directory: str | Path) -> Path:
    """Write ``kernels`` as a bundle into ``directory``; returns the manifest's path.

    ``directory`` is created if missing. If it holds an earlier bundle, that bundle's
    files are replaced (stale ``.ptx`` files are removed); any other file there is an
    error, raised before anything is written.
    """
    directory, kernels = Path(directory), list(kernels)
    data = manifest_bytes(kernels)  # every check runs before the folder is touched
    _make_folder(directory)
    for name in _previous_bundle_files(directory):
        (directory / name).unlink()
    for kernel in kernels:
        (directory / ptx_file_name(kernel)).write_bytes(kernel.source.encode())
    path = directory / MANIFEST
    path.write_bytes(data)  # last: a folder with a manifest is complete
    return path


# --- op bundles (format version 2) ----------------------------------------------------

# The ops an op bundle plans, and the direction of each in the planner's terms.
OP_NAMES = {"split": "backward", "concat": "forward"}


@dataclass(frozen=True)
class OpShape:
    """One op to bundle: a ``split`` of a wide array into pieces ``sizes`` elements wide,
    or a ``concat`` of them, in ``dtype`` (a canonical ptxgen dtype name). Rows are not
    part of it: the plans cover every row count."""

    op: str
    dtype: str
    sizes: tuple[int, ...]

    @property
    def id(self) -> str:
        """``split__bf16__64_64_64_64``: unique within a bundle of one target."""
        return f"{self.op}__{self.dtype}__{'_'.join(map(str, self.sizes))}"


def _op_error(shape: OpShape, what: str) -> BundleError:
    return BundleError(f"op {shape.op} {shape.dtype} sizes {','.join(map(str, shape.sizes))}: {what}")


def _check_shape(shape: OpShape) -> None:
    from .dtypes import DTYPES

    if shape.op not in OP_NAMES:
        raise BundleError(f"op {shape.op!r}; accepted: {', '.join(OP_NAMES)}")
    if shape.dtype not in DTYPES:
        raise BundleError(f"dtype {shape.dtype!r}; accepted: {', '.join(DTYPES)}")
    sizes = shape.sizes
    if not sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in sizes):
        raise BundleError(f"sizes must be one or more ints >= 0, not {sizes!r}")
    if sum(sizes) == 0:
        raise _op_error(shape, "every piece is empty: there is nothing to move")


def _expr(value: Any) -> str:
    """A planned value as an expression of ``rows`` (bundle grammar): a Rows' text, or an int."""
    from .kernels.plan import Rows

    if isinstance(value, Rows):
        return value.text
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BundleError(f"a planned value {value!r} is not a non-negative int or an expression of rows")
    return str(value)


def _step_json(step: Any, kernel_ids: dict[Any, str]) -> dict[str, Any]:
    from .kernels.plan import WIDE, Ptr

    kernel = step.kernel
    args: list[dict[str, Any]] = []
    for name, t, value in zip(kernel.arg_names, kernel.arg_types, step.args):
        if isinstance(value, Ptr) != t.is_pointer:
            raise BundleError(f"{kernel.id}: argument {name} = {value!r} does not fit its parameter {t}")
        if isinstance(value, Ptr):
            array = "wide" if value.array == WIDE else f"piece{value.array}"
            args.append({"param": name, "array": array, "byte_offset": _expr(value.byte_offset)})
        else:
            args.append({"param": name, "value": _expr(value)})
    return {
        "kernel": kernel_ids[kernel],
        "grid": [_expr(g) for g in step.grid],
        "block": [int(b) for b in step.block],
        "shared_mem": _expr(step.shared_mem),
        "args": args,
    }


def _traits_json(traits: Any) -> dict[str, Any]:
    names = (
        "arch", "sm_count", "max_threads_per_sm", "l2_bytes", "max_shared_memory_per_sm",
        "max_shared_memory_per_block", "max_grid_x", "max_grid_y", "dependent_launch", "memory_bandwidth",
    )  # fmt: skip
    return {name: getattr(traits, name) for name in names}


def _alignment_cases(
    shape: OpShape, traits: Any, kernels: dict[Any, str]
) -> tuple[list[dict[str, Any]], int]:
    """The op's cases, and the most rows they cover.

    Two alignment classes: every address a multiple of 16 (what cudaMalloc, torch and the
    ptxgen runtime hand out; planned exactly as the Python op plans it), then any address
    that is a multiple of the element size, planned as for addresses one element past 16
    bytes, which gives every piece the element's own access width: a plan valid at every
    element-aligned address (the kernels read their pointers' alignment only through the
    access width they are built for). Where both give the same steps, one case serves both.
    """
    from .dtypes import resolve_dtype
    from .kernels.plan import Problem, symbolic_plans

    dtype = resolve_dtype(shape.dtype)
    isz = dtype.itemsize
    direction = OP_NAMES[shape.op]
    names = ["wide", *(f"piece{i}" for i in range(len(shape.sizes)))]
    classes = []
    for multiple, mod in ((16, 0), (isz, isz % 16)):
        problem = Problem(direction, dtype, 0, shape.sizes, mod, (mod,) * len(shape.sizes))
        ranges = symbolic_plans(problem, traits)
        cases: list[dict[str, Any]] = []
        for r in ranges:
            steps = [_step_json(step, kernels) for step in r.plan.steps]
            if cases and cases[-1]["steps"] == steps and cases[-1]["rows_max"] + 1 == r.rows_min:
                cases[-1]["rows_max"] = r.rows_max  # the same launches: one case
                continue
            cases.append({
                "rows_min": r.rows_min,
                "rows_max": r.rows_max,
                "address_multiple_of": {name: multiple for name in names},
                "steps": steps,
            })  # fmt: skip
        classes.append(cases)
    aligned, anywhere = classes
    strip = [[{k: v for k, v in c.items() if k != "address_multiple_of"} for c in cs] for cs in classes]
    cases = anywhere if strip[0] == strip[1] else aligned + anywhere
    rows_max = min(cs[-1]["rows_max"] for cs in classes) if all(classes) else 0
    if rows_max < 1:
        raise _op_error(shape, "its plan's launch count grows with rows; a bundle cannot hold that")
    for cs in classes:  # both classes cover the same rows
        if cs[-1]["rows_max"] != rows_max:
            raise _op_error(shape, "its alignment classes cover different rows")  # never, by the planner
    return cases, rows_max


def _op_bundle(shapes: Iterable[OpShape], traits: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The version-2 manifest of ``shapes`` and its kernels by file name."""
    from .kernels.fastcat import GpuTraits

    if not isinstance(traits, GpuTraits):
        raise BundleError(f"traits must be a ptxgen.kernels.fastcat.GpuTraits, not {type(traits).__name__}")
    unique = sorted(set(shapes), key=lambda s: (s.op, s.dtype, s.sizes))
    if not unique:
        raise BundleError("an op bundle needs at least one op")
    for shape in unique:
        _check_shape(shape)
    ops = []
    by_file: dict[str, Any] = {}
    for shape in unique:
        cases, rows_max = _alignment_cases(shape, traits, _KernelIds(by_file))
        isz = _element_size(shape.dtype)
        pitch = sum(shape.sizes) * isz
        wide_access, piece_access = ("read", "written") if shape.op == "split" else ("written", "read")
        arrays = [{"name": "wide", "row_bytes": pitch, "bytes": _bytes_expr(pitch), "access": wide_access}]
        arrays += [
            {"name": f"piece{i}", "row_bytes": s * isz, "bytes": _bytes_expr(s * isz), "access": piece_access}
            for i, s in enumerate(shape.sizes)
        ]
        ops.append({
            "id": shape.id,
            "op": shape.op,
            "dtype": shape.dtype,
            "element_size": isz,
            "sizes": list(shape.sizes),
            "target": traits.target,
            "traits": _traits_json(traits),
            "rows_max": rows_max,
            "arrays": arrays,
            "cases": cases,
        })  # fmt: skip
    data = {
        "format": FORMAT,
        "format_version": OP_FORMAT_VERSION,
        "generator": f"ptxgen {__version__}",
        "kernels": [entry(by_file[name]) for name in sorted(by_file)],
        "ops": ops,
    }
    return data, by_file


def op_manifest(shapes: Iterable[OpShape], traits: Any) -> dict[str, Any]:
    """The version-2 manifest of an op bundle: ``shapes`` (sorted, duplicates dropped)
    planned for the GPU ``traits`` describes (a :class:`ptxgen.kernels.fastcat.GpuTraits`).

    Every kernel a case launches is listed once in ``kernels`` (version 1's entries,
    sorted by file); each op's ``cases`` say, for a row count and the arrays' addresses,
    which launches to make."""
    return _op_bundle(shapes, traits)[0]


class _KernelIds(dict):
    """kernel -> its id, remembering each kernel by file name for the manifest's list."""

    def __init__(self, by_file: dict[str, Any]) -> None:
        super().__init__()
        self.by_file = by_file

    def __missing__(self, kernel: Any) -> str:
        name = ptx_file_name(kernel)
        seen = self.by_file.setdefault(name, kernel)
        if seen.source != kernel.source:
            raise BundleError(f"two different kernels would both be {name}")
        self[kernel] = kernel.id
        return kernel.id


def _element_size(dtype: str) -> int:
    from .dtypes import resolve_dtype

    return resolve_dtype(dtype).itemsize


def _bytes_expr(row_bytes: int) -> str:
    return f"rows * {row_bytes}" if row_bytes else "0"


def _json_bytes(data: dict[str, Any]) -> bytes:
    text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=True)
    return (text + "\n").encode("ascii")


def op_manifest_bytes(shapes: Iterable[OpShape], traits: Any) -> bytes:
    """``manifest.json``'s bytes of an op bundle (the format of :func:`manifest_bytes`)."""
    return _json_bytes(op_manifest(shapes, traits))


def write_op_bundle(shapes: Iterable[OpShape], traits: Any, directory: str | Path) -> Path:
    """Write an op bundle of ``shapes`` planned for ``traits`` into ``directory`` (the
    folder rules of :func:`write_bundle`); returns the manifest's path."""
    directory = Path(directory)
    data, kernels = _op_bundle(shapes, traits)  # every check runs before the folder is touched
    _make_folder(directory)
    for name in _previous_bundle_files(directory):
        (directory / name).unlink()
    for name, kernel in kernels.items():
        (directory / name).write_bytes(kernel.source.encode())
    path = directory / MANIFEST
    path.write_bytes(_json_bytes(data))  # last: a folder with a manifest is complete
    return path
