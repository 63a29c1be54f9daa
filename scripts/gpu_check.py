#!/usr/bin/env python3
"""Run the GPU test suite and record the result in docs/gpu-check.json.

    python scripts/gpu_check.py              # run `pytest -m gpu`, write the record
    python scripts/gpu_check.py --tree-hash  # print the hash of ptxgen/, runtime/, tests/

The record ties a passing GPU run to the exact code it ran: ``tree`` is a sha256
over every file under ptxgen/, runtime/ and tests/ (paths and contents, sorted by
path, caches excluded). CI has no GPU, so this record is how a reviewer knows the
GPU suite passed on the code being submitted. Uses only the standard library
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
HASHED = ("ptxgen", "runtime", "tests")
RECORD = ROOT / "docs" / "gpu-check.json"


def tree_hash(root: Path = ROOT) -> str:
    digest = hashlib.sha256()
    files = sorted(
        p
        for folder in HASHED
        for p in (root / folder).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    )
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def environment() -> dict[str, object]:
    sys.path.insert(0, str(ROOT))
    import runtime

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
                *pytest_args,
            ],
            cwd=ROOT,
            check=False,
        )
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        if report.exists():
            for suite in ET.parse(report).getroot().iter("testsuite"):
                for key in counts:
                    counts[key] += int(suite.get(key, 0))
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
    }
    if tree_hash() != tree:
        print("the tree changed while the tests ran; not writing a record", file=sys.stderr)
        return 1
    RECORD.parent.mkdir(exist_ok=True)
    RECORD.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
