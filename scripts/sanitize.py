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
The shards of every tool run at once (SHARDS), then the tests that read the device's
free memory alone. The record keeps one entry per tool, each with the header of its own run (tree,
command, GPU, driver, date: scripts/records.py) and what it covers, and the error count
from the sanitizer's summary line ("ERROR SUMMARY", or racecheck's "RACECHECK SUMMARY
... (n errors, m warnings)"), the exit status and the time; any error makes this script exit non-zero.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import records  # scripts/ is not a package: found through the path above

ROOT = records.ROOT
RECORD = ROOT / "docs" / "sanitizer.json"

# What each tool runs: pytest selections (-k expressions) over the GPU tests.
SELECTIONS = {
    "memcheck": (
        "not past_2_to_the_31 and not huge_row_counts and not leak_nothing and not kernel_fault"
        " and not forked_child and not memory_pressure and not does_not_wait"
    ),
    # Kernels with shared memory and barriers: the fused tiles (through the ops) and the example.
    # The 2 x 401,408-channel layouts are left out: 32 MB per op through shared memory is
    # minutes under the checkers, and their kernels (16-byte granules, two chunks) run in
    # the other layouts too.
    "racecheck": "tile_kernel or rowpack_kernel or example or (bench_shapes and not 401408)",
    "synccheck": "tile_kernel or rowpack_kernel or example or (bench_shapes and not 401408)",
}
# What each selection runs, in words, for the record.
COVERS = {
    "memcheck": (
        "the whole GPU suite but the tests memcheck cannot run: copies past 2**31 elements and huge row "
        "counts (hours under the tool), the leak test's 1.2 million launches, the deliberate kernel fault, "
        "the forked child, filling the device's memory and the test that the host does not wait for a "
        "busy device; the property test draws 400 cases instead of 2,000"
    ),
    "racecheck": (
        "the kernels with shared memory and barriers: every tile kernel configuration, the rowpack kernels "
        "direct and staged (tests/test_gpu_tile_kernels.py), the ops on the benchmark's layouts scaled down "
        "(all but the two 2 x 401,408-channel layouts) and the example"
    ),
}
COVERS["synccheck"] = COVERS["racecheck"]
# Environment per tool: fewer random cases under memcheck, which slows every launch.
ENVIRONMENT = {"memcheck": {"PTXGEN_PROPERTY_CASES": "400"}}
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error|RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?")
_WARNINGS = re.compile(r"RACECHECK SUMMARY: \d+ hazards? displayed \(\d+ errors?, (\d+) warnings?")


# How many processes each tool's run is spread over (pytest's --shard I/N, conftest.py):
# the tools slow the host side of every launch far more than the GPU, so the shards of
# all three tools run at once on the machine's cores. Tests that read the device's free
# memory (marked whole_device) run afterwards, alone.
SHARDS = {"memcheck": 8, "racecheck": 4, "synccheck": 4}
# pytest's exit status when a selection holds no test (the whole-device pass of a tool
# whose selection has none of them).
NO_TESTS_COLLECTED = 5


def tool_command(tool: str, sanitizer: str, marks: str, selection: list[str], shard: str | None) -> list[str]:
    return [
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
        marks,
        "-p",
        "no:cacheprovider",
        *(["--shard", shard] if shard else []),
        *selection,
    ]


class Run:
    """One process of a tool's run: its command, started at once, its output in a file."""

    def __init__(self, tool: str, command: list[str], log: Path) -> None:
        self.tool, self.command, self.log = tool, command, log
        self.start = time.perf_counter()
        with log.open("w") as out:
            env = {**os.environ, **ENVIRONMENT.get(tool, {})}
            self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.status: int | str | None = None
        self.seconds = 0.0

    def wait(self, deadline: float | None) -> None:
        try:
            left = None if deadline is None else max(deadline - time.perf_counter(), 0.0)
            self.status = self.process.wait(timeout=left)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            self.status = "timeout"
        self.seconds = time.perf_counter() - self.start

    def output(self) -> str:
        text = self.log.read_text(errors="replace")
        if self.status == "timeout":
            text += "\nstopped at the time limit: the tests listed above ran to completion under the tool"
        return text


def tests_passed(output: str) -> int:
    passed = re.search(r"(\d+) passed", output)
    if passed is not None:
        return int(passed.group(1))
    # stopped early: count the dots of pytest's progress lines
    return sum(
        line.split("[")[0].count(".")
        for line in output.splitlines()
        if re.fullmatch(r"[.sFEx]+\s*(\[\s*\d+%\])?", line.strip())
    )


def summarise(tool: str, runs: list[Run]) -> dict[str, object]:
    """One record entry for a tool from the runs of its shards and its whole-device pass."""
    counts, warnings, passed, status, tails = [], [], 0, 0, []
    for run in runs:
        output = run.output()
        counts += [int(a or b) for a, b in _SUMMARY.findall(output)]
        warnings += [int(n) for n in _WARNINGS.findall(output)]
        passed += tests_passed(output)
        whole_device_pass = "--shard" not in run.command
        run_status = 0 if whole_device_pass and run.status == NO_TESTS_COLLECTED else run.status
        if run_status and not status:
            status = run_status
        if run_status or any(int(a or b) for a, b in _SUMMARY.findall(output)):
            tails.append(output[-4000:])
    prefix = [f"{k}={v}" for k, v in ENVIRONMENT.get(tool, {}).items()]
    shown = [*prefix, "compute-sanitizer", *runs[0].command[1:5], "python", *runs[0].command[6:]]
    shown = [("I/N" if part.count("/") == 1 and part.split("/")[0].isdigit() else part) for part in shown]
    record: dict[str, object] = {
        "tool_command": shlex.join(shown),
        "shards": len(runs) - 1,
        "errors": sum(counts) if counts else None,
        **({"warnings": sum(warnings)} if warnings else {}),
        "tests_passed": passed,
        "exit_status": status,
        "seconds": round(max(r.seconds for r in runs[:-1]) + runs[-1].seconds, 1),
    }
    if tails:
        record["output_tail"] = "\n...\n".join(tails)[-8000:]
    return record


def run_tools(
    tools: list[str], sanitizer: str, pytest_args: list[str], shards: dict[str, int], timeout: float | None
) -> dict[str, dict[str, object]]:
    """Every tool's shards at once, then each tool's whole-device tests alone."""
    selection = {
        t: pytest_args if "-k" in pytest_args else ["-k", SELECTIONS[t], *pytest_args] for t in tools
    }
    with tempfile.TemporaryDirectory() as tmp:
        deadline = None if timeout is None else time.perf_counter() + timeout
        runs = {
            tool: [
                Run(tool, tool_command(tool, sanitizer, "gpu and not whole_device", selection[tool],
                                       f"{i}/{shards[tool]}"), Path(tmp, f"{tool}-{i}.log"))
                for i in range(shards[tool])
            ]
            for tool in tools
        }  # fmt: skip
        for tool_runs in runs.values():
            for run in tool_runs:
                run.wait(deadline)
        for tool in tools:
            run = Run(tool, tool_command(tool, sanitizer, "gpu and whole_device", selection[tool], None),
                      Path(tmp, f"{tool}-whole-device.log"))  # fmt: skip
            run.wait(None if timeout is None else time.perf_counter() + timeout)
            runs[tool].append(run)
        return {tool: summarise(tool, runs[tool]) for tool in tools}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tools", default="memcheck,racecheck,synccheck")
    p.add_argument("--out", type=Path, default=RECORD)
    p.add_argument("--timeout", type=float, default=None, help="seconds per phase (partial runs recorded)")
    p.add_argument("--shards", type=int, default=None, help="processes per tool (default: SHARDS)")
    args, pytest_args = p.parse_known_args(argv)
    tools = args.tools.split(",")
    unknown = [t for t in tools if t not in SELECTIONS]
    if unknown:
        p.error(f"--tools: unknown tool {unknown[0]!r}; choose from {', '.join(SELECTIONS)}")
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
    # One entry per tool, each with the header of its own run: a tool run on other code
    # (a --tools subset, run earlier) says so by its own tree.
    record: dict[str, Any] = {"tools": {}}
    if args.out.exists():
        record = json.loads(args.out.read_text())
    if args.shards is not None and args.shards < 1:
        p.error(f"--shards {args.shards}: expected a whole number >= 1")
    shards = {t: args.shards or SHARDS[t] for t in tools}
    tree = records.tree_hash()
    results = run_tools(tools, sanitizer, pytest_args, shards, args.timeout)
    if records.tree_hash() != tree:
        print("sanitize: the tree changed while the tools ran; not recording", file=sys.stderr)
        return 1
    # The record's header and each tool's are this run's: which code it ran and how. A tool
    # not in this run (a --tools subset) keeps the header of the run that made its entry.
    header = records.header(records.command_line(argv), tree)
    bad = False
    for tool, result in results.items():
        entry = {**header, **result}
        entry["partial"] = bool(pytest_args) or result["exit_status"] == "timeout"
        entry["covers"] = COVERS[tool]
        record["tools"][tool] = entry
        bad |= bool(result["errors"]) or result["exit_status"] != 0
        print(f"{tool:<10} errors={result['errors']} tests={result['tests_passed']} "
              f"exit={result['exit_status']} {result['seconds']} s", flush=True)  # fmt: skip
    record = {**header, "tools": {t: record["tools"][t] for t in SELECTIONS if t in record["tools"]}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
