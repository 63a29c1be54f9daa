#!/usr/bin/env python3
"""Run the GPU test suite and record the result in docs/gpu-check.json.

    python scripts/gpu_check.py              # run `pytest -m gpu`, write the record
    python scripts/gpu_check.py --tree-hash  # print the hash of the code the GPU suite runs

The record ties a passing GPU run to the exact code it ran: ``tree`` is a sha256
over every file under examples/, ptxgen/, runtime/, scripts/ and tests/ (paths and
contents, sorted by path; caches and build outputs excluded), everything the GPU
suite runs. CI has no GPU, so this record is how a reviewer knows the GPU suite
passed on the code being submitted, and a CPU test checks that it matches the tree.
Without a GPU it refuses to run and writes nothing. Uses only the standard library
until it runs the tests.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HASHED = ("examples", "ptxgen", "runtime", "scripts", "tests")
# Made by running things, not written by hand: never part of the tree.
_EXCLUDED_DIRS = {"__pycache__", "build", ".pytest_cache"}
RECORD = ROOT / "docs" / "gpu-check.json"


def tree_hash(root: Path = ROOT) -> str:
    digest = hashlib.sha256()
    files = sorted(
        p
        for folder in HASHED
        if (root / folder).is_dir()
        for p in (root / folder).rglob("*")
        if p.is_file()
        and not _EXCLUDED_DIRS.intersection(p.relative_to(root).parts)
        and p.suffix not in (".pyc", ".o", ".so", ".pyd")  # compiled here from the hashed C source
    )
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def _runtime():
    sys.path.insert(0, str(ROOT))
    import runtime

    return runtime


def no_gpu_reason() -> str | None:
    """Why the GPU suite cannot run here, or None."""
    return _runtime().unavailable_reason()


def environment() -> dict[str, object]:
    runtime = _runtime()
    info: dict[str, object] = {"gpu": None, "driver": None}
    reason = runtime.unavailable_reason()
    if reason is None:
        dev = runtime.Device(0)
        info["gpu"] = f"{dev.name} ({dev.arch})"
        cuda = f"CUDA {dev.driver_version[0]}.{dev.driver_version[1]}"
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        )
        version = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 and smi.stdout else ""
        info["driver"] = f"{version} ({cuda})" if version else cuda
    else:
        info["unavailable"] = reason
    from runtime import launch

    # "" where the suite's launches went through runtime._fastlaunch, else why not
    info["compiled_launch_missing"] = launch.compiled_launch_available()
    try:
        from importlib.metadata import version as dist_version

        info["cuda_bindings"] = dist_version("cuda-bindings")
    except Exception:
        info["cuda_bindings"] = None
    return info


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree-hash", action="store_true", help="print the tree hash and exit")
    args, pytest_args = p.parse_known_args(argv)  # anything else goes to pytest
    if args.tree_hash:
        print(tree_hash())
        return 0

    reason = no_gpu_reason()
    if reason is not None:
        # A record says the GPU suite passed; without a GPU it cannot, so nothing is written.
        print(f"gpu_check: no GPU here ({reason}); not writing {RECORD.relative_to(ROOT)}", file=sys.stderr)
        return 1

    tree = tree_hash()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp, "junit.xml")
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-m",
                "gpu",
                "-q",
                f"--junitxml={report}",
                "-o",
                "junit_family=xunit1",  # keeps the figures tests record with record_property
                *pytest_args,
            ],
            cwd=ROOT,
            check=False,
        )
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        figures: dict[str, dict[str, str]] = {}
        if report.exists():
            root = ET.parse(report).getroot()
            for suite in root.iter("testsuite"):
                for key in counts:
                    counts[key] += int(suite.get(key, 0))
            for case in root.iter("testcase"):
                found = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
                if found:
                    figures[case.get("name", "")] = found
    failed = counts["failures"] + counts["errors"]
    record = {
        "tree": tree,
        "passed": counts["tests"] - failed - counts["skipped"],
        "failed": failed,
        "skipped": counts["skipped"],
        **environment(),
        "python": sys.version.split()[0],
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "pytest_exit_status": run.returncode,
        "figures": figures,  # what tests measured (record_property): leaks, threads, fuzz cases
    }
    if tree_hash() != tree:
        print("gpu_check: the tree changed while the tests ran; not writing a record", file=sys.stderr)
        return 1
    if record["passed"] == 0 or record["gpu"] is None:
        print(f"gpu_check: no GPU test passed; not writing {RECORD.relative_to(ROOT)}", file=sys.stderr)
        return 1
    RECORD.parent.mkdir(exist_ok=True)
    RECORD.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
