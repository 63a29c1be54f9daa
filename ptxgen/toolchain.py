"""ptxas and nvdisasm from NVIDIA's PyPI wheels: assemble PTX, read the resource
report, disassemble to SASS. Needs no GPU.

The tools are found through the installed distributions (``nvidia-cuda-nvcc`` ships
ptxas, ``nvidia-cuda-nvdisasm`` ships nvdisasm), never through ``PATH``, so the
version that checks the PTX is the one pinned by the project. ``PTXGEN_PTXAS`` and
``PTXGEN_NVDISASM`` name another binary explicitly.
"""

from __future__ import annotations

import os
import re
import subprocess
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


def find_tool(name: str) -> Path:
    """The path of ``ptxas`` or ``nvdisasm`` inside NVIDIA's installed wheel."""
    if name not in _DISTRIBUTIONS:
        raise ValueError(f"unknown tool {name!r}; known: {', '.join(_DISTRIBUTIONS)}")
    override = os.environ.get(f"PTXGEN_{name.upper()}")
    if override:
        path = Path(override)
        if not path.is_file():
            raise ToolNotFound(f"PTXGEN_{name.upper()}={override} is not a file")
        return path
    for dist_name in _DISTRIBUTIONS[name]:
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            continue
        for f in dist.files or ():
            if f.name == name and f.parent.name == "bin":
                path = Path(str(dist.locate_file(f)))
                if path.is_file():
                    return path
    wheels = " or ".join(_DISTRIBUTIONS[name][:1])
    raise ToolNotFound(
        f"{name} not found: install NVIDIA's wheel (pip install {wheels}), "
        f"or set PTXGEN_{name.upper()} to a {name} binary"
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


def assemble(source: str, target: str) -> AssembleResult:
    """Assemble ``source`` for ``target`` with ``ptxas -v``; raises :class:`PtxasError`."""
    ptxas = find_tool("ptxas")
    with tempfile.TemporaryDirectory(prefix="ptxgen-") as tmp:
        ptx, cubin = Path(tmp, "kernel.ptx"), Path(tmp, "kernel.cubin")
        ptx.write_text(source)
        run = subprocess.run(
            [str(ptxas), "-v", f"-arch={target}", str(ptx), "-o", str(cubin)],
            capture_output=True,
            text=True,
            check=False,
        )
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
        run = subprocess.run([str(nvdisasm), "-c", str(path)], capture_output=True, text=True, check=False)
        if run.returncode != 0:
            raise RuntimeError(f"nvdisasm failed: {(run.stdout + run.stderr).strip()}")
        return run.stdout
