#!/usr/bin/env python3
"""Run the GPU test suite and record the result in docs/gpu-check.json.

    python scripts/gpu_check.py              # run the GPU suite, write the record
    python scripts/gpu_check.py -k ops       # a subset: recorded, but as partial
    python scripts/gpu_check.py --tree-hash  # print the hash of the code the record covers

The record ties a GPU run to the exact code it ran. Besides the header every record
carries (``tree``, ``command``, ``gpu``, ``driver``, ``date``: scripts/records.py), it
says how pytest was run (``pytest_command``, ``pytest_exit_status``), what it counted,
in all and per test file (from pytest's junit XML), whether the run was the whole suite
(``partial`` is true where extra pytest arguments narrowed or changed it), and which
build of the compiled launch ran (``compiled_launch``: the built file's sha256 and the
sha256 of the source it was built from, which must be the tree's).

``status`` is "passed" only for a complete run that exited 0 with no failure; a
non-zero exit is "failed" and a narrowed run "partial". The CPU suite refuses a
committed record that is not "passed" or not of this tree. Without a GPU it refuses to
run and writes nothing. Standard library only until it runs the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import records  # scripts/ is not a package: found through the path above

ROOT = records.ROOT
RECORD = ROOT / "docs" / "gpu-check.json"
# The suite the record stands for: every test marked gpu, collected from pyproject's testpaths.
SUITE = ["-m", "gpu", "-q", "-p", "no:cacheprovider"]


def tree_hash(root: Path = ROOT) -> str:
    return records.tree_hash(root)


def no_gpu_reason() -> str | None:
    """Why the GPU suite cannot run here, or None."""
    sys.path.insert(0, str(ROOT))
    import runtime

    return runtime.unavailable_reason()


def junit_counts(report: Path) -> tuple[dict[str, int], dict[str, dict[str, int]], dict[str, dict[str, str]]]:
    """Totals, counts per test file and the figures tests recorded (record_property),
    read from pytest's junit XML (xunit1, which keeps the file of each case)."""
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    per_file: dict[str, dict[str, int]] = {}
    figures: dict[str, dict[str, str]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = case.get("file") or (case.get("classname") or "").replace(".", "/") + ".py"
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif case.find("skipped") is not None:
            outcome = "skipped"
        else:
            outcome = "passed"
        totals[outcome] += 1
        counts = per_file.setdefault(name, {"passed": 0, "failed": 0, "skipped": 0})
        counts[outcome] += 1
        found = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
        if found:
            figures[f"{name}::{case.get('name', '')}"] = found  # test names repeat across files
    return totals, dict(sorted(per_file.items())), figures


def status_of(record: dict[str, Any]) -> str:
    """ "passed", "failed" or "partial": the one rule for what a record attests."""
    if record["pytest_exit_status"] != 0 or record["failed"]:
        return "failed"
    if record["partial"] or record["passed"] == 0:
        return "partial"
    return "passed"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree-hash", action="store_true", help="print the tree hash and exit")
    args, pytest_args = p.parse_known_args(argv)  # anything else goes to pytest, and makes the run partial
    if args.tree_hash:
        print(tree_hash())
        return 0

    reason = no_gpu_reason()
    if reason is not None:
        # A record says the GPU suite ran; without a GPU it cannot, so nothing is written.
        print(f"gpu_check: no GPU here ({reason}); not writing {RECORD.relative_to(ROOT)}", file=sys.stderr)
        return 1

    tree = tree_hash()
    compiled = records.compiled_launch()
    if compiled["source_sha256"] is not None and compiled["source_sha256"] != compiled["tree_source_sha256"]:
        print(f"gpu_check: {compiled['missing']}; not running", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp, "junit.xml")
        # xunit1 keeps each case's file and the figures tests record with record_property.
        pytest_command = [*SUITE, "-o", "junit_family=xunit1", *pytest_args]
        run = subprocess.run(
            [sys.executable, "-m", "pytest", *pytest_command, f"--junitxml={report}"], cwd=ROOT, check=False
        )
        totals, per_file, figures = (
            junit_counts(report) if report.exists() else ({"passed": 0, "failed": 0, "skipped": 0}, {}, {})
        )
    record: dict[str, Any] = {
        **records.header(records.command_line(argv), tree),
        "pytest_command": " ".join(["python", "-m", "pytest", *pytest_command]),
        "pytest_exit_status": run.returncode,
        # extra arguments, options pytest takes from the environment, or the runtime's
        # switches (the compiled launch off, fewer property cases, ...) change the run
        "partial": bool(pytest_args) or bool(_switches()),
        "environment": _switches(),
        **totals,
        "per_file": per_file,
        "compiled_launch": compiled,
        "compiled_launch_missing": compiled["missing"],  # "" where the suite ran through it
        "cuda_bindings": _version("cuda-bindings"),
        "python": sys.version.split()[0],
        "figures": figures,  # what tests measured (record_property): leaks, threads, fuzz cases
    }
    record["status"] = status_of(record)
    if tree_hash() != tree:
        print("gpu_check: the tree changed while the tests ran; not writing a record", file=sys.stderr)
        return 1
    if record["gpu"] is None:
        print(f"gpu_check: no GPU named; not writing {RECORD.relative_to(ROOT)}", file=sys.stderr)
        return 1
    RECORD.parent.mkdir(exist_ok=True)
    RECORD.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: v for k, v in record.items() if k not in ("per_file", "figures")}, indent=2))
    return 0 if record["status"] == "passed" else 1


def _switches() -> dict[str, str]:
    """The environment variables that change what the suite runs or how (where the
    tools are found does not)."""
    found = {k: v for k, v in os.environ.items() if k.startswith("PTXGEN_") and v}
    for tool in ("PTXGEN_PTXAS", "PTXGEN_NVDISASM"):
        found.pop(tool, None)
    if os.environ.get("PYTEST_ADDOPTS"):
        found["PYTEST_ADDOPTS"] = os.environ["PYTEST_ADDOPTS"]
    return dict(sorted(found.items()))


def _version(dist: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:
        return None


if __name__ == "__main__":
    sys.exit(main())
