"""What every GPU record says about the run that wrote it, written once for all of them.

Each record in docs/ (gpu-check.json, perf/results.json, perf/launch.json,
sanitizer.json, ...) is written only by its script, and each carries the same header:
``tree`` (the hash of the code it ran, :func:`tree_hash`), ``command`` (how it was
run), ``gpu``, ``driver`` and ``date``. The CPU suite checks that every record's tree is
the tree being submitted, so a figure in docs/ is a figure of this code.

The tree covers everything that decides a run: ptxgen/, runtime/ (the C source of the
compiled launch; the build itself is named by ``compiled_launch`` below, and carries the
sha256 of the source it was built from), tests/, examples/, scripts/, the root files
conftest.py, pyproject.toml and setup.py, and docs/design.md (a GPU test runs its
example). lab/ (studies, not the product), the rest of docs/ (the records and their
prose) and caches and build outputs are left out.

Standard library only until :func:`header` asks the runtime about the GPU.
"""

from __future__ import annotations

import datetime
import hashlib
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HASHED_FOLDERS = ("examples", "ptxgen", "runtime", "scripts", "tests")
# docs/design.md too: a GPU test runs the example it shows
HASHED_FILES = ("conftest.py", "pyproject.toml", "setup.py", "docs/design.md")
# Made by running things, not written by hand: never part of the tree.
EXCLUDED_DIRS = {"__pycache__", "build", ".pytest_cache"}
BUILD_SUFFIXES = (".pyc", ".o", ".so", ".pyd")  # the extension is named by compiled_launch()


def hashed_files(root: Path = ROOT) -> list[Path]:
    """The files the tree hash covers, sorted by path."""
    found = [root / name for name in HASHED_FILES if (root / name).is_file()]
    for folder in HASHED_FOLDERS:
        if (root / folder).is_dir():
            found.extend(
                p
                for p in (root / folder).rglob("*")
                if p.is_file()
                and not EXCLUDED_DIRS.intersection(p.relative_to(root).parts)
                and p.suffix not in BUILD_SUFFIXES
            )
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def tree_hash(root: Path = ROOT) -> str:
    """sha256 over the covered files' paths and contents."""
    digest = hashlib.sha256()
    for path in hashed_files(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def command_line(argv: list[str] | None = None) -> str:
    """How this script was run, as a shell would take it: ``python scripts/x.py ARGS``."""
    script = Path(sys.argv[0]).resolve()
    try:
        shown = script.relative_to(ROOT).as_posix()
    except ValueError:
        shown = str(script)
    args = sys.argv[1:] if argv is None else argv
    return shlex.join(["python", shown, *args])


def compiled_launch() -> dict[str, Any]:
    """Which runtime._fastlaunch ran: the sha256 of the built file, the source it was
    built from (which the runtime refuses unless it is the source in the tree), and why
    it was not used where it was not."""
    sys.path.insert(0, str(ROOT))
    from runtime import launch

    module = launch._fastlaunch
    built = Path(module.__file__) if module is not None and getattr(module, "__file__", None) else None
    return {
        "missing": launch.compiled_launch_available(),  # "" where the launches went through it
        "binary_sha256": hashlib.sha256(built.read_bytes()).hexdigest() if built else None,
        "source_sha256": getattr(module, "SOURCE_SHA256", None),
        "tree_source_sha256": launch.fastlaunch_source_sha256(),
    }


def gpu_and_driver() -> dict[str, Any]:
    """``gpu`` ("NVIDIA H200 (sm_90)") and ``driver`` ("580.159.04 (CUDA 13.0)") of
    device 0, or None for both and the reason where there is no GPU."""
    sys.path.insert(0, str(ROOT))
    import runtime

    reason = runtime.unavailable_reason()
    if reason is not None:
        return {"gpu": None, "driver": None, "unavailable": reason}
    dev = runtime.Device(0)
    cuda = f"CUDA {dev.driver_version[0]}.{dev.driver_version[1]}"
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    )
    version = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 and smi.stdout.strip() else ""
    return {"gpu": f"{dev.name} ({dev.arch})", "driver": f"{version} ({cuda})" if version else cuda}


def header(command: str, tree: str | None = None) -> dict[str, Any]:
    """The fields every record starts with. ``tree`` is taken before the run where the
    caller has it (a run must not be recorded against code that changed under it)."""
    return {"tree": tree or tree_hash(), "command": command, **gpu_and_driver(), "date": now()}


def check_header(record: dict[str, Any], name: str) -> list[str]:
    """What is missing or wrong in a record's header, for the CPU suite's checks."""
    keys = ("tree", "command", "gpu", "driver", "date")
    problems = [f"{name} has no {key!r}" for key in keys if key not in record]
    if not problems and record["tree"] != tree_hash():
        problems.append(f"{name} was written on tree {record['tree'][:12]}, the code is {tree_hash()[:12]}")
    if not problems and not record["gpu"]:
        problems.append(f"{name} names no GPU")
    return problems
