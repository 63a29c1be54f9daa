#!/usr/bin/env python3
"""Write the figures the docs quote from the records that hold them.

    python scripts/record_docs.py           # rewrite the generated parts of the docs
    python scripts/record_docs.py --check   # exit 1, naming them, where a part is stale

Each generated part sits between a begin and an end marker in its doc; everything
outside the markers is prose people wrote, which quotes no figure. The parts:

- docs/reliability.md, "Figures": the GPU suite's counts and what its tests measured
  (docs/gpu-check.json) and each compute-sanitizer tool's run (docs/sanitizer.json);
- docs/performance.md, the launch figures (docs/perf/launch.json): each path as a ratio
  to the bare cuda-bindings call of the same run, and graph replay.

The records' own scripts write docs/perf/README.md (bench.py), launch.md
(bench_launch.py) and ops.md (bench_ops.py). The CPU suite runs ``--check``
(tests/test_records.py). Standard library only; no GPU needed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def marker(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin (written by scripts/record_docs.py) -->", f"<!-- {name}:end -->"


def load(path: str) -> dict[str, Any]:
    return json.loads((ROOT / path).read_text())


def reliability_figures(gpu: dict[str, Any], sanitizer: dict[str, Any]) -> str:
    """The GPU suite and the sanitizers, as their records have them."""
    compiled = gpu.get("compiled_launch", {})
    built = (
        "built from this tree's source" if not compiled.get("missing") else f"not used: {compiled['missing']}"
    )
    lines = [
        f"- **GPU suite** (`docs/gpu-check.json`, tree `{gpu['tree'][:12]}`, {gpu['date']}): "
        f"{gpu['gpu']}, driver {gpu['driver']}, cuda-bindings {gpu.get('cuda_bindings')}, Python "
        f"{gpu.get('python')}; `{gpu['pytest_command']}` exited {gpu['pytest_exit_status']}: "
        f"{gpu['passed']:,} passed, {gpu['failed']} failed, {gpu['skipped']} skipped "
        f"(status {gpu['status']}); the compiled launch {built}.",
    ]
    for test, found in gpu.get("figures", {}).items():
        measured = "; ".join(f"{key} {value}" for key, value in found.items())
        lines.append(f"  - `{test}`: {measured}")
    for tool, entry in sanitizer.get("tools", {}).items():
        warnings = f" and {entry['warnings']} warnings" if "warnings" in entry else ""
        lines.append(
            f"- **{tool}** (`docs/sanitizer.json`, tree `{entry['tree'][:12]}`, {entry['date']}, "
            f"{entry['gpu']}): {tool}: {entry['errors']} errors{warnings} over "
            f"{entry['tests_passed']:,} tests in {entry['seconds']} s, exit status {entry['exit_status']}; "
            f"it ran {entry['covers']}."
        )
    return "\n".join(lines)


def _ratio(us: dict[str, float], key: str) -> str:
    return f"{us[key] / us['bare_cuda_bindings']:.2f}× ({us[key]:.3f} µs)"


def launch_figures(launch: dict[str, Any]) -> str:
    """The launch paths against the bare call, and graph replay, from launch.json."""
    us = launch["us_per_launch"]
    parts = [
        f"From [perf/launch.json](perf/launch.json) (tree `{launch['tree'][:12]}`, {launch['date']}, "
        f"{launch['gpu']}), launch path "
        + ("compiled" if launch.get("compiled_launch") else "the Python launch functions")
        + f"; ratios to the bare cuda-bindings call of the same run ({us['bare_cuda_bindings']:.3f} µs):",
        "",
    ]
    rows = [
        ("the trusted raw launch", "raw_int"),
        ("a prepared launch, int pointers", "prepared_int"),
        ("a prepared launch, DeviceArrays", "prepared_device_array"),
        ("`Function.launch`, int pointers", "checked_int"),
        ("`Function.launch`, DeviceArrays", "checked_device_array"),
        ("`Function.launch`, torch tensors", "checked_torch"),
        ("cuda.core's launch, ints", "cuda_core_launch"),
        ("cuda.core's launch, the tensors' `data_ptr()`", "cuda_core_launch_torch"),
        ("the op with two outputs, DeviceArrays", "channel_cat_backward_2_outputs_device_array"),
        ("the op with two outputs, torch tensors", "channel_cat_backward_2_outputs"),
        ("`Function.launch` on the Python launch path alone, int pointers", "checked_int_python"),
        ("the same, torch tensors", "checked_torch_python"),
    ]
    parts += [f"- {label}: {_ratio(us, key)}" for label, key in rows if key in us]
    replay = [
        ("the seed kernel", "graph_replay_per_launch"),
        ("the seed kernel captured from bare `cuLaunchKernel` calls", "graph_replay_bare_per_launch"),
        ("the seed kernel, one-block launches", "graph_replay_1_block_per_launch"),
        ("the fast kernel of the same gather", "graph_replay_fastcat_per_launch"),
        ("that kernel with programmatic dependent launch", "graph_replay_fastcat_pdl_per_launch"),
        ("the op (a graph of 100)", "graph_replay_op_per_launch"),
        ("an empty kernel with the seed's signature, on its grid", "graph_replay_empty_per_launch"),
        ("the same in one block", "graph_replay_empty_1_block_per_launch"),
        ("the seed kernel, timed first in a fresh context", "graph_replay_fresh_context_per_launch"),
        ("the empty kernel, timed first in a fresh context", "graph_replay_empty_fresh_context_per_launch"),
    ]
    parts += ["", "Graph replay, wall time a launch:", ""]
    parts += [f"- {label}: {us[key]:.3f} µs" for label, key in replay if key in us]
    return "\n".join(parts)


# doc -> (marker name, the part's text from the records)
PARTS: dict[str, tuple[str, Callable[[], str]]] = {
    "docs/reliability.md": (
        "figures",
        lambda: reliability_figures(load("docs/gpu-check.json"), load("docs/sanitizer.json")),
    ),
    "docs/performance.md": ("launch", lambda: launch_figures(load("docs/perf/launch.json"))),
}


def rewritten(text: str, name: str, part: str) -> str:
    begin, end = marker(name)
    if begin not in text or end not in text:
        raise ValueError(f"no {begin} ... {end} in the doc")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{part}\n{end}{tail}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 where a part is stale")
    args = p.parse_args(argv)
    stale = []
    for doc, (name, make) in PARTS.items():
        path = ROOT / doc
        text = path.read_text()
        new = rewritten(text, name, make())
        if new != text:
            stale.append(doc)
            if not args.check:
                path.write_text(new)
    if args.check and stale:
        print(f"record_docs: stale figures in {', '.join(stale)}: run python scripts/record_docs.py")
        return 1
    print("record_docs: " + (f"rewrote {', '.join(stale)}" if stale else "every part is current"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
