"""Kernel bundles: PTX files and a manifest that a runtime without Python can load.

A bundle is a folder with one ``<id>__<target>.ptx`` per kernel and ``manifest.json``
describing each: entry point, target, PTX ISA, content hash, block, the grid as C
expressions, and every parameter's type, size, alignment and offset in the
parameter buffer (what ``CU_LAUNCH_PARAM_BUFFER_POINTER`` takes). The manifest's
JSON Schema is ``docs/bundle-manifest.schema.json``; ``docs/embedding.md`` shows how
C, C++ and Rust runtimes use it.

Output is deterministic: the same kernels give the same bytes (sorted keys, a fixed
entry order, no timestamps or paths), so a runtime can vendor a bundle and diff it.
Only the :class:`ptxgen.Kernel` protocol is read, plus ``grid_expression``,
``footprint_expressions`` and ``requires`` where a kernel has them, so hand-written
kernels bundle too.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import Kernel, __version__
from .args import param_buffer_size, param_layout
from .kernel import wants_dependent_launch

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST",
    "BundleError",
    "manifest",
    "manifest_bytes",
    "write_bundle",
]

FORMAT = "ptxgen-bundle"
# Raised when a field changes meaning or a required one is added; readers check it.
FORMAT_VERSION = 1
MANIFEST = "manifest.json"

# Grid expressions use a grammar every C-like runtime can evaluate or paste:
# decimal integers, identifiers, + - * / and parentheses.
_EXPRESSION = re.compile(r"[A-Za-z0-9_ +\-*/()]+")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FILE_PART = re.compile(r"[A-Za-z0-9_.\-]+")


class BundleError(ValueError):
    """A kernel cannot be described in a bundle, or the output folder cannot take one."""


def ptx_file_name(kernel: Kernel) -> str:
    """``<id>__<target>.ptx``: an id alone repeats across targets."""
    for what, value in (("id", kernel.id), ("target", kernel.target)):
        if not _FILE_PART.fullmatch(value) or value.startswith("."):
            raise BundleError(
                f"kernel {what} {value!r} cannot be part of a file name; accepted: letters, digits, _ . -"
            )
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
            if old.get("format") == FORMAT:
                owned = {MANIFEST, *(k["file"] for k in old.get("kernels", []))}
        except (ValueError, KeyError, TypeError, AttributeError):
            owned = set()
    foreign = sorted(present - owned)
    if foreign:
        raise BundleError(
            f"{directory} holds {foreign[0]!r}, which is not part of a ptxgen bundle; "
            "give an empty or new folder, or one holding only an earlier bundle"
        )
    return owned


def write_bundle(kernels: Iterable[Kernel], directory: str | Path) -> Path:
    """Write ``kernels`` as a bundle into ``directory``; returns the manifest's path.

    ``directory`` is created if missing. If it holds an earlier bundle, that bundle's
    files are replaced (stale ``.ptx`` files are removed); any other file there is an
    error, raised before anything is written.
    """
    directory, kernels = Path(directory), list(kernels)
    data = manifest_bytes(kernels)  # every check runs before the folder is touched
    if directory.exists() and not directory.is_dir():
        raise BundleError(f"{directory} exists and is not a folder")
    directory.mkdir(parents=True, exist_ok=True)
    for name in _previous_bundle_files(directory):
        (directory / name).unlink()
    for kernel in kernels:
        (directory / ptx_file_name(kernel)).write_bytes(kernel.source.encode())
    path = directory / MANIFEST
    path.write_bytes(data)  # last: a folder with a manifest is complete
    return path
