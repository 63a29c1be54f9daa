"""The records in docs/ are of this code, written by their scripts, and the docs quote them.

CI has no GPU, so these records are the evidence of what the kernels and the runtime do
on one. Each must say which code it ran (the tree hash of scripts/records.py), how it
was run and on what; a record of other code fails here until its script is run again
on a GPU. The docs' figures are generated from the records or quoted from them through
the table below, which fails when a quoted figure is not the record's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import records

# record -> the script that writes it (its command must name that script)
RECORDS = {
    "docs/gpu-check.json": "scripts/gpu_check.py",
    "docs/perf/results.json": "scripts/bench.py",
    "docs/perf/launch.json": "scripts/bench_launch.py",
    "docs/perf/ops.json": "scripts/bench_ops.py",
    "docs/perf/embed.json": "scripts/bench_embed.py",
}


def load(path: str) -> dict[str, Any]:
    return json.loads((ROOT / path).read_text())


@pytest.mark.parametrize("path", sorted(RECORDS))
def test_each_record_is_of_this_tree_and_names_its_script(path):
    record = load(path)
    assert records.check_header(record, path) == []
    assert record["command"].startswith(f"python {RECORDS[path]}"), record["command"]


def test_each_sanitizer_tool_ran_complete_on_this_tree():
    record = load("docs/sanitizer.json")
    assert records.check_header(record, "sanitizer.json") == [], "its own header: the code and command it ran"
    assert record["command"].startswith("python scripts/sanitize.py"), record["command"]
    assert sorted(record["tools"]) == ["memcheck", "racecheck", "synccheck"]
    for tool, entry in record["tools"].items():
        assert records.check_header(entry, f"sanitizer.json {tool}") == []
        assert entry["tree"] == record["tree"], f"{tool} ran on other code than the record says"
        assert entry["command"].startswith("python scripts/sanitize.py"), entry["command"]
        assert entry["errors"] == 0 and entry["exit_status"] == 0 and not entry["partial"], tool
        assert entry["tests_passed"] > 0


def test_the_header_rules(tmp_path):
    good = {
        "tree": records.tree_hash(),
        "command": "python scripts/x.py",
        "gpu": "G",
        "driver": "D",
        "date": "T",
    }
    assert records.check_header(good, "r") == []
    assert records.check_header({**good, "tree": "0" * 64}, "r") == [
        f"r was written on tree 000000000000, the code is {records.tree_hash()[:12]}"
    ]
    assert records.check_header({k: v for k, v in good.items() if k != "command"}, "r") == [
        "r has no 'command'"
    ]
    assert records.check_header({**good, "gpu": None}, "r") == ["r names no GPU"]


def test_command_lines_are_shell_words(monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(ROOT / "scripts" / "bench.py"), "--only", "split .* bf16"])
    assert records.command_line() == "python scripts/bench.py --only 'split .* bf16'"


# --- the docs quote the records ---------------------------------------------------------


def test_the_benchmark_readme_is_generated_from_its_record():
    import bench_report

    doc = load("docs/perf/results.json")
    text = (ROOT / "docs" / "perf" / "README.md").read_text()
    start, end = text.index(bench_report.BEGIN), text.index(bench_report.END) + len(bench_report.END)
    assert text[start:end] == bench_report.generated_section(doc), (
        "docs/perf/README.md's generated part is not that of results.json: "
        "python scripts/bench.py --report-only --out-dir docs/perf"
    )


def test_the_launch_and_ops_tables_are_generated_from_their_records():
    import bench_launch
    import bench_ops

    perf = ROOT / "docs" / "perf"
    assert (perf / "launch.md").read_text() == bench_launch.markdown(load("docs/perf/launch.json"))
    assert (perf / "ops.md").read_text() == bench_ops.markdown(load("docs/perf/ops.json"))


def test_the_docs_quote_their_records():
    """The figures of reliability.md and performance.md are written from the records
    (scripts/record_docs.py); prose outside those parts quotes none."""
    import record_docs

    assert record_docs.main(["--check"]) == 0, "python scripts/record_docs.py rewrites the docs' figures"


def test_docs_name_only_records_that_exist():
    """A doc that points at a record (docs/...json) points at one that is there."""
    missing = []
    for doc in [*ROOT.glob("docs/**/*.md"), ROOT / "README.md"]:
        text = doc.read_text()
        for name in (
            "gpu-check.json",
            "sanitizer.json",
            "results.json",
            "launch.json",
            "ops.json",
            "embed.json",
        ):
            if name in text and not list(ROOT.glob(f"docs/**/{name}")):
                missing.append(f"{doc.relative_to(ROOT)} names {name}")
    assert missing == []


def test_records_live_in_docs_and_studies_in_lab():
    assert all((ROOT / path).is_file() for path in RECORDS)
    assert not list(Path(ROOT, "docs").glob("**/grid-study*.json")), "study data belongs in lab/"


def test_the_figures_are_written_from_the_records_fields():
    import record_docs

    gpu = {"tree": "ab" * 32, "date": "D", "gpu": "G (sm_90)", "driver": "580 (CUDA 13.0)", "cuda_bindings": "13",
           "python": "3.12", "pytest_command": "python -m pytest -m gpu", "pytest_exit_status": 0, "passed": 1300,
           "failed": 0, "skipped": 0, "status": "passed", "compiled_launch": {"missing": ""},
           "figures": {"test_threads": {"threads": "16", "calls_per_thread": "2000"}}}  # fmt: skip
    sanitizer = {"tools": {"racecheck": {"tree": "cd" * 32, "date": "E", "gpu": "G", "errors": 0, "warnings": 0,
                                         "tests_passed": 159, "seconds": 69.8, "exit_status": 0, "covers": "the tiles"}}}  # fmt: skip
    text = record_docs.reliability_figures(gpu, sanitizer)
    assert (
        "1,300 passed, 0 failed, 0 skipped (status passed); the compiled launch built from this tree's source"
        in text
    )
    assert "  - `test_threads`: threads 16; calls_per_thread 2000" in text
    assert (
        "racecheck: 0 errors and 0 warnings over 159 tests in 69.8 s, exit status 0; it ran the tiles."
        in text
    )
    launch = {"tree": "ef" * 32, "date": "F", "gpu": "G", "compiled_launch": True,
              "us_per_launch": {"bare_cuda_bindings": 5.0, "checked_int": 4.5, "graph_replay_per_launch": 1.2}}  # fmt: skip
    text = record_docs.launch_figures(launch)
    assert "- `Function.launch`, int pointers: 0.90× (4.500 µs)" in text
    assert "- the seed kernel: 1.200 µs" in text
    doc = "intro\n<!-- launch:begin (written by scripts/record_docs.py) -->\nold\n<!-- launch:end -->\nkept\n"
    assert record_docs.rewritten(doc, "launch", "new") == (
        "intro\n<!-- launch:begin (written by scripts/record_docs.py) -->\nnew\n<!-- launch:end -->\nkept\n"
    )
