"""``python -m ptxgen doctor``: what is installed and found, on one screen, and what to
install for each piece that is missing.

:func:`findings` looks; :func:`render` writes what it found as text. Each probe is
guarded: one that fails becomes a finding saying so, and the report goes on, so the
command exits 0 whatever this machine holds. ``runtime`` (and with it cuda-bindings) is
imported here, lazily, inside the probes: ptxgen itself needs only the standard library.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType

from . import TARGETS, __version__, toolchain
from .targets import DEFAULT_TARGET, isa_key, min_cuda_for_isa, newest_isa_for_cuda, target_capability

__all__ = ["FAILED", "MISSING", "OK", "Finding", "findings", "render"]

OK = "ok"
MISSING = "missing"  # not installed, not found, not built, or no driver or GPU
FAILED = "failed"  # there, but it does not work

# The package a tool comes in, for the fix line.
_TOOL_WHEELS = {"ptxas": "nvidia-cuda-nvcc", "nvdisasm": "nvidia-cuda-nvdisasm"}


@dataclass(frozen=True)
class Finding:
    """One line of the report: ``section`` and ``item`` say what was looked at,
    ``status`` is :data:`OK`, :data:`MISSING` or :data:`FAILED`, ``detail`` what was
    found (or why not), ``fix`` what to do about it ("" where nothing is to be done)."""

    section: str
    item: str
    status: str
    detail: str
    fix: str = ""


# --- how to install ------------------------------------------------------------------


def _checkout() -> Path | None:
    """The source checkout ptxgen is imported from, or None for an installed copy."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() and (root / "runtime").is_dir() else None


def _pip_install(extra: str = "") -> str:
    """The command that installs ptxgen with ``extra`` (or reinstalls it, which rebuilds
    the compiled launch): editable in a checkout, else from PyPI."""
    root = _checkout()
    if root is None:
        return f"pip install 'ptxgen[{extra}]'" if extra else "pip install --force-reinstall ptxgen"
    command = f"pip install -e '.[{extra}]'" if extra else "pip install -e ."
    return command if Path.cwd() == root else f"cd {root} && {command}"


# --- the probes ----------------------------------------------------------------------


def _ptxgen() -> list[Finding]:
    where = Path(__file__).resolve().parent
    version = sys.version.split()[0]
    return [
        Finding("ptxgen", "ptxgen", OK, f"{__version__}, imported from {where}"),
        Finding("ptxgen", "python", OK, f"{version}, {sys.executable}"),
    ]


def _targets_beyond(cuda: tuple[int, int]) -> str:
    """``; too old for sm_100, sm_103 (they need CUDA 12.9 or newer)`` where a CUDA
    ``cuda`` release cannot take every ptxgen target's PTX ISA, else nothing."""
    newest = newest_isa_for_cuda(cuda)
    beyond = [t for t, isa in TARGETS.items() if newest is None or isa_key(isa) > isa_key(newest)]
    if not beyond:
        return ""
    needed = max((min_cuda_for_isa(TARGETS[t]) or (0, 0)) for t in beyond)
    return f"; too old for {', '.join(beyond)} (they need CUDA {needed[0]}.{needed[1]} or newer)"


def _release(version: str) -> tuple[int, int] | None:
    """``(13, 5)`` from ``13.5.37``, or None where the version is not NVIDIA's numbering."""
    parts = version.split(".")
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return int(parts[0]), int(parts[1])


def _tool(name: str) -> Finding:
    variable = f"PTXGEN_{name.upper()}"
    try:
        found = toolchain.locate_tool(name)
    except toolchain.ToolNotFound as err:
        if os.environ.get(variable):  # an explicit setting that names no tool is a mistake
            return Finding(
                "tools", name, FAILED, str(err), f"unset {variable} or point it at a {name} binary"
            )
        fix = (
            f"{_pip_install('tools')} (it brings NVIDIA's {_TOOL_WHEELS[name]} wheel), or install "
            f"a CUDA toolkit, or set {variable} to a {name} binary"
        )
        looked = ", ".join(toolchain.search_places(name))
        return Finding("tools", name, MISSING, f"not found (looked at {looked})", fix)
    try:
        version = toolchain.tool_version(found)
    except toolchain.ToolFailed as err:
        return Finding("tools", name, FAILED, str(err), f"repair or replace it, or set {variable} to another")
    release = _release(version)
    # ptxas of CUDA X.Y reads the PTX ISA that CUDA X.Y introduced, and no newer.
    note = _targets_beyond(release) if name == "ptxas" and release else ""
    return Finding("tools", name, OK, f"{version}, {found}{note}")


def _tools() -> list[Finding]:
    return [_tool("ptxas"), _tool("nvdisasm")]


def _installed_version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _package(distribution: str, module: str) -> Finding:
    """Whether ``module`` imports, and the version of ``distribution`` that provides it."""
    installed = _installed_version(distribution)
    try:
        imported = importlib.import_module(module)
    except Exception as err:  # ImportError, and whatever a broken package raises
        if installed is None:
            return Finding("packages", distribution, MISSING, "not installed", _pip_install("runtime"))
        detail = f"{installed} is installed but does not import: {type(err).__name__}: {err}"
        return Finding(
            "packages", distribution, FAILED, detail, f"pip install --force-reinstall {distribution}"
        )
    version = installed or getattr(imported, "__version__", "version unknown")
    where = getattr(imported, "__file__", None)
    return Finding("packages", distribution, OK, f"{version}, {Path(where).parent}" if where else version)


def _packages() -> list[Finding]:
    return [_package("cuda-bindings", "cuda.bindings"), _package("numpy", "numpy")]


def _import_runtime() -> tuple[ModuleType | None, str]:
    """``runtime``, or None and why it does not import."""
    try:
        import runtime
    except Exception as err:
        return None, f"{type(err).__name__}: {err}"
    return runtime, ""


def _runtime() -> list[Finding]:
    runtime, error = _import_runtime()
    if runtime is None:
        return [Finding("runtime", "runtime", FAILED, f"does not import: {error}")]
    found = [Finding("runtime", "runtime", OK, f"imported from {Path(runtime.__file__).parent}")]
    return [*found, _compiled_launch()]


def _compiled_launch() -> Finding:
    from runtime import launch
    from runtime._env import env_flag

    reason = launch.compiled_launch_available()
    spec = importlib.util.find_spec("runtime._fastlaunch")
    if not reason:
        detail = f"built, {spec.origin if spec else 'runtime._fastlaunch'}"
        if not env_flag("PTXGEN_COMPILED_LAUNCH", True):
            detail += "; switched off by PTXGEN_COMPILED_LAUNCH, so launches take the Python path"
        return Finding("runtime", "compiled launch", OK, detail)
    if spec is None:
        fix = f"install a C compiler and Python's headers (e.g. gcc, python3-dev), then {_pip_install()}"
        detail = "not built; launches take the Python path (the same checks, more host time per launch)"
        return Finding("runtime", "compiled launch", MISSING, detail, fix)
    return Finding("runtime", "compiled launch", FAILED, reason, f"rebuild it: {_pip_install()}")


def _driver_detail(cuda: tuple[int, int]) -> str:
    newest = newest_isa_for_cuda(cuda)
    loads = f"; loads PTX ISA up to {newest}" if newest else ""
    return f"CUDA {cuda[0]}.{cuda[1]}{loads}{_targets_beyond(cuda)}"


def _gpu(runtime: ModuleType, ordinal: int) -> Finding:
    item = f"GPU {ordinal}"
    try:
        device = runtime.Device(ordinal)
    except Exception as err:
        return Finding("GPUs", item, FAILED, f"cannot be opened: {str(err).splitlines()[0]}")
    detail = f"{device.name}, {device.arch}, {device.total_memory / 2**30:.1f} GiB"
    if device.compute_capability < target_capability(DEFAULT_TARGET):
        older = f"{detail}; older than {DEFAULT_TARGET}, the oldest target ptxgen emits for"
        return Finding("GPUs", item, FAILED, older)
    return Finding("GPUs", item, OK, detail)


def _gpus() -> list[Finding]:
    runtime, error = _import_runtime()
    if runtime is None:
        return [Finding("GPUs", "driver", FAILED, f"cannot look: runtime does not import ({error})")]
    reason = runtime.unavailable_reason()
    if reason is not None:
        # A machine without a GPU is a fine place to emit, check and bundle PTX: no fix.
        detail = f"{reason} (emitting, checking and bundling PTX need none)"
        return [Finding("GPUs", "driver", MISSING, detail)]
    driver = runtime.driver()
    version = int(runtime.check("cuDriverGetVersion", driver.cuDriverGetVersion()))
    found = [Finding("GPUs", "driver", OK, _driver_detail((version // 1000, version % 1000 // 10)))]
    count = int(runtime.check("cuDeviceGetCount", driver.cuDeviceGetCount()))
    return found + [_gpu(runtime, ordinal) for ordinal in range(count)]


# Each probe, with the section and item a finding names if the probe itself fails.
_PROBES: tuple[tuple[str, str, Callable[[], list[Finding]]], ...] = (
    ("ptxgen", "ptxgen", _ptxgen),
    ("tools", "ptxas, nvdisasm", _tools),
    ("packages", "cuda-bindings, numpy", _packages),
    ("runtime", "runtime", _runtime),
    ("GPUs", "driver", _gpus),
)


def findings() -> list[Finding]:
    """Everything :mod:`ptxgen.doctor` looks at, in the report's order. Never raises."""
    found: list[Finding] = []
    for section, item, probe in _PROBES:
        try:
            found.extend(probe())
        except Exception as err:  # one broken probe must not hide the rest of the report
            found.append(Finding(section, item, FAILED, f"could not look: {type(err).__name__}: {err}"))
    return found


def _summary(found: list[Finding]) -> str:
    named = {status: [f.item for f in found if f.status == status] for status in (MISSING, FAILED)}
    parts = [f"{status}: {', '.join(items)}" for status, items in named.items() if items]
    return "; ".join(parts) if parts else "everything was found and works"


def render(found: list[Finding]) -> str:
    """The report: a heading per section, one aligned line per finding, each fix under
    its finding, and a last line naming what is missing or failed."""
    width = max((len(f.item) for f in found), default=0) + 2
    indent = " " * (2 + width + len(MISSING) + 2)
    lines = ["ptxgen doctor: what is installed and found"]
    section = None
    for f in found:
        if f.section != section:
            section = f.section
            lines.append(f"{section}")
        first, *rest = f.detail.splitlines() or [""]
        lines.append(f"  {f.item:<{width}}{f.status:<{len(MISSING) + 2}}{first}")
        lines.extend(f"{indent}{line}" for line in rest)
        if f.fix:
            lines.append(f"{indent}fix: {f.fix}")
    lines.append(_summary(found))
    return "\n".join(lines)
