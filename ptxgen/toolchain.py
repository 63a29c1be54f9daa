"""ptxas and nvdisasm: assemble PTX, read the resource report, disassemble to SASS.
Needs no GPU.

:func:`find_tool` looks for each tool in this order, and takes the first it finds:

1. ``PTXGEN_PTXAS`` / ``PTXGEN_NVDISASM``: an explicit path. If it is set, it must
   name an executable file; anything else is an error rather than a silent fallback.
2. NVIDIA's PyPI wheels (``nvidia-cuda-nvcc`` ships ptxas, ``nvidia-cuda-nvdisasm``
   ships nvdisasm; the ``tools`` extra installs them): the version the project pins.
3. A CUDA toolkit: ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin``, then ``/usr/local/cuda/bin``.
4. ``PATH``.

:func:`locate_tool` also says which of these it came from, and :func:`tool_version`
asks the tool for its version. A tool that is found but does not work (it cannot start,
is killed, or fails without a diagnostic of its own) raises :class:`ToolFailed`; only a
failure that ptxas explains is a :class:`PtxasError`.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
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
    "ToolFailed",
    "ToolLocation",
    "ToolNotFound",
    "assemble",
    "assemble_many",
    "disassemble",
    "find_tool",
    "locate_tool",
    "search_places",
    "tool_version",
]

# Which distribution carries which tool, newest naming first.
_DISTRIBUTIONS = {
    "ptxas": ("nvidia-cuda-nvcc", "nvidia-cuda-nvcc-cu12"),
    "nvdisasm": ("nvidia-cuda-nvdisasm", "nvidia-cuda-nvdisasm-cu12"),
}


class ToolNotFound(RuntimeError):
    """ptxas or nvdisasm is not installed where ptxgen looks."""


class ToolFailed(ToolNotFound):
    """ptxas or nvdisasm was found but does not work: it could not start, was killed, ran
    past its time, or failed without printing a diagnostic of its own.

    A :class:`ToolNotFound`, so code that stops or skips where the tool cannot be used
    keeps doing so; never a :class:`PtxasError`, so a broken tool is not taken for a
    kernel that ptxas refused.
    """


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


def _toolkit_dirs() -> list[tuple[str, Path]]:
    """The toolkits' ``bin`` folders, each with the setting it came from."""
    roots = [(f"${var}", os.environ.get(var)) for var in ("CUDA_HOME", "CUDA_PATH")]
    found = [(f"{label}/bin", Path(root) / "bin") for label, root in roots if root]
    return [*found, (str(DEFAULT_TOOLKIT / "bin"), DEFAULT_TOOLKIT / "bin")]


def _variable(name: str) -> str:
    return f"PTXGEN_{name.upper()}"


@dataclass(frozen=True)
class ToolLocation:
    """Where :func:`locate_tool` found a tool: its ``path``, and ``source``, the step of
    the search that gave it (``PTXGEN_PTXAS``, ``NVIDIA's nvidia-cuda-nvcc wheel``,
    ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin``, ``/usr/local/cuda/bin`` or ``PATH``)."""

    name: str
    path: Path
    source: str

    def __str__(self) -> str:
        return f"{self.path} ({self.source})"


def search_places(name: str) -> list[str]:
    """Where :func:`locate_tool` looks for ``name``, in its order, as a person would name them."""
    if name not in _DISTRIBUTIONS:
        raise ValueError(f"unknown tool {name!r}; known: {', '.join(_DISTRIBUTIONS)}")
    wheel = f"the {_DISTRIBUTIONS[name][0]} wheel"
    return [_variable(name), wheel, *(str(folder) for _, folder in _toolkit_dirs()), "PATH"]


def locate_tool(name: str) -> ToolLocation:
    """``ptxas`` or ``nvdisasm``, found in the order the module docstring gives, and
    which step found it.

    Raises :class:`ToolNotFound` (one line: where it looked, how to install) if there is none.
    """
    places = search_places(name)  # checks the name
    variable = _variable(name)
    override = os.environ.get(variable)
    if override:
        path = Path(override)
        if not path.is_file():
            raise ToolNotFound(f"{variable}={override} is not a file; unset it or name a {name} binary")
        if not os.access(path, os.X_OK):
            raise ToolNotFound(
                f"{variable}={override} is not executable; chmod +x it, unset it or name a {name} binary"
            )
        return ToolLocation(name, path, variable)
    found = _from_wheel(name)
    if found is not None:
        return ToolLocation(name, found, f"NVIDIA's {_DISTRIBUTIONS[name][0]} wheel")
    for label, folder in _toolkit_dirs():
        if _executable(folder / _exe_name(name)):
            return ToolLocation(name, folder / _exe_name(name), label)
    on_path = shutil.which(name)
    if on_path:
        return ToolLocation(name, Path(on_path), "PATH")
    raise ToolNotFound(
        f"{name} not found (looked at {', '.join(places)}): install it with pip install "
        f"'ptxgen[tools]' or a CUDA toolkit, or set {variable} to a {name} binary"
    )


def find_tool(name: str) -> Path:
    """The path of ``ptxas`` or ``nvdisasm``: :func:`locate_tool`'s, without where it came from."""
    return locate_tool(name).path


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


# How much of a broken tool's output goes into the error: its last lines say why.
_PRINTED_LINES = 20
# How long `--version` may take: a tool that hangs there is broken, not slow.
VERSION_TIMEOUT = 10.0


def _run(
    tool: ToolLocation, args: list[str | Path], timeout: float | None = None
) -> subprocess.CompletedProcess:
    """Run a tool; one that exists but cannot start (wrong architecture, a broken
    script) or hangs is a :class:`ToolFailed` naming it, not an ``OSError`` traceback."""
    command = [str(tool.path), *(str(a) for a in args)]
    try:
        # errors="replace": a broken tool may print anything, and its bytes must not
        # turn into a UnicodeDecodeError that hides what went wrong.
        return subprocess.run(
            command, capture_output=True, text=True, errors="replace", check=False, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        how = f"did not finish within {timeout:g} s"
        raise ToolFailed(f"{tool.name} could not be run: {tool} {how}") from None
    except OSError as err:
        raise ToolFailed(f"{tool.name} could not be run: {tool}: {err.strerror or err}") from None


def _printed(run: subprocess.CompletedProcess) -> str:
    """What a process printed, its last lines indented under the message, or that it printed nothing."""
    lines = (run.stdout + run.stderr).strip().splitlines()
    if not lines:
        return " and printed nothing"
    cut = f" (its last {_PRINTED_LINES} lines)" if len(lines) > _PRINTED_LINES else ""
    return f"; it printed{cut}:\n" + "\n".join(f"  {line}" for line in lines[-_PRINTED_LINES:])


def _did_not_work(tool: ToolLocation, run: subprocess.CompletedProcess, what: str = "") -> ToolFailed:
    """The :class:`ToolFailed` for a run that ended without doing its work: killed by a
    signal, or an exit status ``what`` explains."""
    if run.returncode < 0:
        number = -run.returncode
        try:
            how = f"was killed by signal {number} ({signal.Signals(number).name})"
        except ValueError:
            how = f"was killed by signal {number}"
    else:
        how = f"exited with status {run.returncode}{what}"
    return ToolFailed(f"{tool.name} could not be run: {tool} {how}{_printed(run)}")


def _diagnostic(name: str) -> re.Pattern[str]:
    """A line the tool prints when it refuses its input: ``ptxas k.ptx, line 4; error   :
    ...`` or ``ptxas fatal   : ...``. A failure without one is the tool's, not the input's."""
    return re.compile(rf"^{name}\b.*\b(?:error|fatal)\s*:", re.MULTILINE)


def assemble(source: str, target: str) -> AssembleResult:
    """Assemble ``source`` for ``target`` with ``ptxas -v``; raises :class:`PtxasError`
    when ptxas refuses it, and :class:`ToolFailed` when ptxas does not work."""
    ptxas = locate_tool("ptxas")
    with tempfile.TemporaryDirectory(prefix="ptxgen-") as tmp:
        ptx, cubin = Path(tmp, "kernel.ptx"), Path(tmp, "kernel.cubin")
        ptx.write_text(source)
        run = _run(ptxas, ["-v", f"-arch={target}", ptx, "-o", cubin])
        log = run.stdout + run.stderr
        if run.returncode > 0 and _diagnostic("ptxas").search(log):
            raise PtxasError(target, log, source)
        if run.returncode != 0:
            raise _did_not_work(ptxas, run, " without a ptxas error message")
        if not cubin.is_file():
            raise _did_not_work(ptxas, run, " but wrote no cubin")
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

    locate_tool("ptxas")  # fail once, clearly, before starting the pool
    with ThreadPoolExecutor(max_workers=workers or max(2, os.cpu_count() or 2)) as pool:
        return list(pool.map(one, jobs))


def disassemble(cubin: bytes) -> str:
    """SASS of a cubin, from nvdisasm."""
    nvdisasm = locate_tool("nvdisasm")
    with tempfile.TemporaryDirectory(prefix="ptxgen-") as tmp:
        path = Path(tmp, "kernel.cubin")
        path.write_bytes(cubin)
        run = _run(nvdisasm, ["-c", path])
        if run.returncode > 0 and _diagnostic("nvdisasm").search(run.stdout + run.stderr):
            raise RuntimeError(f"nvdisasm failed: {(run.stdout + run.stderr).strip()}")
        if run.returncode != 0:
            raise _did_not_work(nvdisasm, run, " without an nvdisasm error message")
        return run.stdout


_VERSION = re.compile(r"release \d+\.\d+, V(\d+(?:\.\d+)*)")


def tool_version(tool: ToolLocation, timeout: float = VERSION_TIMEOUT) -> str:
    """What ``tool --version`` says: ``13.5.37`` from NVIDIA's ``release 13.5, V13.5.37``
    line, else its first line. Raises :class:`ToolFailed` if it does not answer."""
    run = _run(tool, ["--version"], timeout)
    if run.returncode != 0:
        raise _did_not_work(tool, run, " when asked for --version")
    text = run.stdout + run.stderr
    match = _VERSION.search(text)
    if match:
        return match.group(1)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first or "no version printed"
