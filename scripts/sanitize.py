#!/usr/bin/env python3
"""Run the GPU suite and the benchmark shapes under compute-sanitizer; record the summary.

    python scripts/sanitize.py                 # memcheck, racecheck, synccheck; writes docs/sanitizer.json
    python scripts/sanitize.py --tools memcheck --out /tmp/s.json

memcheck runs the whole GPU suite but for what cannot run under it or would take it
hours: the copies past 2^31 elements and the huge row counts, the 1.2 million launches of
the leak test, the deliberate kernel fault and the forked child; the property test
draws 400 random cases instead of 2,000. racecheck and
synccheck look at shared memory and barriers, so they run the kernels that use them:
every tile kernel in every loader and the rowpack kernels, direct and staged through
shared memory (tests/test_gpu_tile_kernels.py), the ops on the
benchmark's layouts scaled down (tests/test_gpu_bench_shapes.py, where the planner picks
tile kernels) and the example.
The record keeps, per tool, the command, the error count from the sanitizer's summary
line ("ERROR SUMMARY", or racecheck's "RACECHECK SUMMARY ... (n errors, m warnings)"),
the exit status and the time; any error makes this script exit non-zero.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "docs" / "sanitizer.json"

# What each tool runs: pytest selections (-k expressions) over the GPU tests.
SELECTIONS = {
    "memcheck": (
        "not past_2_to_the_31 and not huge_row_counts and not leak_nothing and not kernel_fault"
        " and not forked_child"
    ),
    # Kernels with shared memory and barriers: the fused tiles (through the ops) and the example.
    # The 2 x 401,408-channel layouts are left out: 32 MB per op through shared memory is
    # minutes under the checkers, and their kernels (16-byte granules, two chunks) run in
    # the other layouts too.
    "racecheck": "tile_kernel or rowpack_kernel or example or (bench_shapes and not 401408)",
    "synccheck": "tile_kernel or rowpack_kernel or example or (bench_shapes and not 401408)",
}
# Environment per tool: fewer random cases under memcheck, which slows every launch.
ENVIRONMENT = {"memcheck": {"PTXGEN_PROPERTY_CASES": "400"}}
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error|RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?")
_WARNINGS = re.compile(r"RACECHECK SUMMARY: \d+ hazards? displayed \(\d+ errors?, (\d+) warnings?")


def run_tool(
    tool: str, sanitizer: str, pytest_args: list[str], timeout: float | None = None
) -> dict[str, object]:
    command = [
        sanitizer,
        f"--tool={tool}",
        "--target-processes=all",
        "--print-limit=50",
        # The suite loads broken PTX and passes bad handles on purpose; the runtime turns
        # those API errors into exceptions the tests expect. Memory errors still count.
        "--report-api-errors=no",
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-m",
        "gpu",
        "-p",
        "no:cacheprovider",
        *(pytest_args if "-k" in pytest_args else ["-k", SELECTIONS[tool], *pytest_args]),
    ]
    start = time.perf_counter()
    try:
        env = {**os.environ, **ENVIRONMENT.get(tool, {})}
        run = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=timeout
        )
        output, status = run.stdout + run.stderr, run.returncode
    except subprocess.TimeoutExpired as expired:
        out, err = expired.stdout or b"", expired.stderr or b""
        output = (out.decode() if isinstance(out, bytes) else out) + (
            err.decode() if isinstance(err, bytes) else err
        )
        output += f"\nstopped after {timeout} s: the tests listed above ran to completion under the tool"
        status = "timeout"
    seconds = time.perf_counter() - start
    counts = [int(a or b) for a, b in _SUMMARY.findall(output)]
    warnings = [int(n) for n in _WARNINGS.findall(output)]
    passed = re.search(r"(\d+) passed", output)
    if passed is None:  # stopped early: count the dots of pytest's progress lines
        dots = sum(
            line.split("[")[0].count(".")
            for line in output.splitlines()
            if re.fullmatch(r"[.sFEx]+\s*(\[\s*\d+%\])?", line.strip())
        )
        passed = re.match(r"(\d+)", str(dots))
    prefix = [f"{k}={v}" for k, v in ENVIRONMENT.get(tool, {}).items()]
    record = {
        "command": " ".join([*prefix, "compute-sanitizer", *command[1:5], "python", *command[6:]]),
        "errors": sum(counts) if counts else None,
        **({"warnings": sum(warnings)} if warnings else {}),
        "tests_passed": int(passed.group(1)) if passed else 0,
        "exit_status": status,
        "seconds": round(seconds, 1),
    }
    if (counts and sum(counts)) or status:
        record["output_tail"] = output[-4000:]
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tools", default="memcheck,racecheck,synccheck")
    p.add_argument("--out", type=Path, default=RECORD)
    p.add_argument("--timeout", type=float, default=None, help="seconds per tool (partial runs are recorded)")
    args, pytest_args = p.parse_known_args(argv)
    sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not Path(sanitizer).exists():
        print("sanitize: compute-sanitizer not found (it ships with the CUDA toolkit)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    import runtime

    reason = runtime.unavailable_reason()
    if reason is not None:
        print(f"sanitize: no GPU here ({reason}); nothing recorded", file=sys.stderr)
        return 2
    dev = runtime.Device(0)
    record: dict[str, object] = {
        "gpu": f"{dev.name} ({dev.arch})",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "tools": {},
    }
    bad = False
    for tool in args.tools.split(","):
        result = run_tool(tool, sanitizer, pytest_args, args.timeout)
        record["tools"][tool] = result  # type: ignore[index]
        bad |= bool(result["errors"]) or result["exit_status"] != 0
        print(f"{tool:<10} errors={result['errors']} tests={result['tests_passed']} "
              f"exit={result['exit_status']} {result['seconds']} s", flush=True)  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
