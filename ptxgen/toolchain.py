"""ptxas and nvdisasm: assemble PTX, read the resource report, disassemble to SASS.
Needs no GPU.

:func:`find_tool` looks for each tool in this order, and takes the first it finds:

1. ``PTXGEN_PTXAS`` / ``PTXGEN_NVDISASM``: an explicit path. If it is set, it must
   name an executable file; anything else is an error rather than a silent fallback.
2. NVIDIA's PyPI wheels (``nvidia-cuda-nvcc`` ships ptxas, ``nvidia-cuda-nvdisasm``
   ships nvdisasm; the ``tools`` extra installs them): the version the project pins.
3. A CUDA toolkit: ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin``, then ``/usr/local/cuda/bin``.
4. ``PATH``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from .diagnostics import log_line_numbers, quote_lines

__all__ = [
    "AssembleResult",
    "FunctionResources",
    "PtxasError",
    "ToolNotFound",
    "assemble",
    "assemble_many",
    "disassemble",
    "find_tool",
]

# Which distribution carries which tool, newest naming first.
_DISTRIBUTIONS = {
    "ptxas": ("nvidia-cuda-nvcc", "nvidia-cuda-nvcc-cu12"),
    "nvdisasm": ("nvidia-cuda-nvdisasm", "nvidia-cuda-nvdisasm-cu12"),
}


class ToolNotFound(RuntimeError):
    """ptxas or nvdisasm is not installed where ptxgen looks."""


class PtxasError(RuntimeError):
    """ptxas refused the PTX; carries its log and the lines it points at."""

    def __init__(self, target: str, log: str, source: str) -> None:
        self.log = log
        self.target = target
        self.lines = quote_lines(source, log_line_numbers(log))
        detail = f"\n{self.lines}" if self.lines else ""
        super().__init__(f"ptxas rejected the PTX for {target}:\n{log.strip()}{detail}")


# The toolkit's default location on Linux; a module constant so tests can move it.
DEFAULT_TOOLKIT = Path("/usr/local/cuda")


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _exe_name(name: str) -> str:
    return name + ".exe" if sys.platform == "win32" else name


def _from_wheel(name: str) -> Path | None:
    """The tool inside NVIDIA's installed wheel, or None."""
    for dist_name in _DISTRIBUTIONS[name]:
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            continue
        for f in dist.files or ():
            if f.name == _exe_name(name) and f.parent.name == "bin":
                path = Path(str(dist.locate_file(f)))
                if _executable(path):
                    return path
    return None


def _toolkit_dirs() -> list[Path]:
    roots = [os.environ.get(var) for var in ("CUDA_HOME", "CUDA_PATH")]
    return [Path(root) / "bin" for root in roots if root] + [DEFAULT_TOOLKIT / "bin"]


def find_tool(name: str) -> Path:
    """The path of ``ptxas`` or ``nvdisasm``, found in the order the module docstring gives.

    Raises :class:`ToolNotFound` (one line: where it looked, how to install) if there is none.
    """
    if name not in _DISTRIBUTIONS:
        raise ValueError(f"unknown tool {name!r}; known: {', '.join(_DISTRIBUTIONS)}")
    variable = f"PTXGEN_{name.upper()}"
    override = os.environ.get(variable)
    if override:
        path = Path(override)
        if not path.is_file():
            raise ToolNotFound(f"{variable}={override} is not a file; unset it or name a {name} binary")
        if not os.access(path, os.X_OK):
            raise ToolNotFound(
                f"{variable}={override} is not executable; chmod +x it, unset it or name a {name} binary"
            )
        return path
    found = _from_wheel(name)
    if found is not None:
        return found
    for folder in _toolkit_dirs():
        if _executable(folder / _exe_name(name)):
            return folder / _exe_name(name)
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path)
    searched = ", ".join(str(d) for d in _toolkit_dirs())
    raise ToolNotFound(
        f"{name} not found (looked at {variable}, the {_DISTRIBUTIONS[name][0]} wheel, {searched}, PATH): "
        f"install it with pip install 'ptxgen[tools]' or a CUDA toolkit, or set {variable} to a {name} binary"
    )


@dataclass(frozen=True)
class FunctionResources:
    """What ptxas reports for one function."""

    name: str
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    registers: int | None = None  # ptxas reports registers for entry functions only

    def __str__(self) -> str:
        regs = f"{self.registers} registers, " if self.registers is not None else ""
        return (
            f"{self.name}: {regs}{self.stack_bytes} bytes stack, "
            f"{self.spill_store_bytes} bytes spill stores, {self.spill_load_bytes} bytes spill loads"
        )


@dataclass
class AssembleResult:
    target: str
    cubin: bytes
    log: str
    functions: dict[str, FunctionResources] = field(default_factory=dict)


_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_COMPILING = re.compile(r"Compiling entry function '([^']+)'")
_USED = re.compile(r"Used (\d+) registers")


def parse_resources(log: str) -> dict[str, FunctionResources]:
    """Read ptxas ``-v`` output into one record per function."""
    frames: dict[str, tuple[int, int, int]] = {}
    registers: dict[str, int] = {}
    current_props = current_entry = None
    for line in log.splitlines():
        if m := _COMPILING.search(line):
            current_entry = m.group(1)
        elif m := _PROPERTIES.search(line):
            current_props = m.group(1)
        elif (m := _FRAME.search(line)) and current_props:
            frames[current_props] = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        elif (m := _USED.search(line)) and current_entry:
            registers[current_entry] = int(m.group(1))
    return {
        name: FunctionResources(name, *frame, registers=registers.get(name)) for name, frame in frames.items()
    }


def _run(command: list[str | Path]) -> subprocess.CompletedProcess:
    """Run a tool; one that exists but cannot start (wrong architecture, a broken
    script) is a :class:`ToolNotFound` naming it, not an ``OSError`` traceback."""
    try:
        return subprocess.run([str(c) for c in command], capture_output=True, text=True, check=False)
    except OSError as err:
        raise ToolNotFound(f"{command[0]} could not be run: {err.strerror or err}") from None


def assemble(source: str, target: str) -> AssembleResult:
    """Assemble ``source`` for ``target`` with ``ptxas -v``; raises :class:`PtxasError`."""
    ptxas = find_tool("ptxas")
    with tempfile.TemporaryDirectory(prefix="ptxgen-") as tmp:
        ptx, cubin = Path(tmp, "kernel.ptx"), Path(tmp, "kernel.cubin")
        ptx.write_text(source)
        run = _run([ptxas, "-v", f"-arch={target}", ptx, "-o", cubin])
        log = run.stdout + run.stderr
        if run.returncode != 0:
            raise PtxasError(target, log, source)
        return AssembleResult(target, cubin.read_bytes(), log, parse_resources(log))


def assemble_many(
    jobs: list[tuple[str, str]], workers: int | None = None
) -> list[AssembleResult | PtxasError]:
    """Assemble many ``(source, target)`` pairs in parallel ptxas processes.

    Returns one result per job, in order; a refused job yields its
    :class:`PtxasError` instead of raising, so one bad kernel does not hide the rest.
    """

    def one(job: tuple[str, str]) -> AssembleResult | PtxasError:
        try:
            return assemble(*job)
        except PtxasError as err:
            return err

    find_tool("ptxas")  # fail once, clearly, before starting the pool
    with ThreadPoolExecutor(max_workers=workers or max(2, os.cpu_count() or 2)) as pool:
        return list(pool.map(one, jobs))


def disassemble(cubin: bytes) -> str:
    """SASS of a cubin, from nvdisasm."""
    nvdisasm = find_tool("nvdisasm")
    with tempfile.TemporaryDirectory(prefix="ptxgen-") as tmp:
        path = Path(tmp, "kernel.cubin")
        path.write_bytes(cubin)
        run = _run([nvdisasm, "-c", path])
        if run.returncode != 0:
            raise RuntimeError(f"nvdisasm failed: {(run.stdout + run.stderr).strip()}")
        return run.stdout
