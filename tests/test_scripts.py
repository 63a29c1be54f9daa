"""The scripts a user runs first: the launch script's fallback and the record's hash."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT

import ptxgen
import runtime

# The scripts import each other by bare name (as they do when run): one entry, once.
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))


def launch(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "scripts/launch_channel_cat_backward.py", *args],
        cwd=ROOT, capture_output=True, text=True, env=env,
    )  # fmt: skip


@pytest.fixture
def no_gpu():
    if runtime.is_available():
        pytest.skip("this machine has a GPU; the GPU suite runs the script for real")


def test_launch_script_without_a_gpu_shows_the_plan_and_assembles(no_gpu):
    out = launch("--dtype", "u8", "--block-size", "96", "--chunks", "3,17,12", "--n-spatial", "1001")
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    lines = out.stdout.splitlines()
    assert lines[0].startswith("no GPU: ")
    assert lines[1].startswith("launch plan: channel_cat_backward__u8__96 (sm_75, PTX ISA ")
    # One launch per chunk, its grid, and its parameter bytes: chunk_c, c_total, chunk_offset.
    for i, (chunk_c, offset) in enumerate([(3, 0), (17, 3), (12, 20)]):
        assert (
            f"  launch {i + 1}: dx = dy[:, {offset}:{offset + chunk_c}], grid (1001, 1, 1) x block (96, 1, 1)"
            in out.stdout
        )
    assert "       16  chunk_c       i32       11 00 00 00              = 17" in lines
    assert "       20  c_total       i32       20 00 00 00              = 32" in lines
    assert "       24  chunk_offset  i32       14 00 00 00              = 20" in lines
    assert out.stdout.count("parameter buffer, 28 bytes") == 3  # the parameters exactly: no tail padding
    assert "channel_cat_backward_entry_point:" in out.stdout and "registers" in out.stdout
    assert "accepted channel_cat_backward__u8__96 for sm_75" in out.stdout


def test_launch_script_without_a_gpu_or_ptxas_fails_in_one_line(no_gpu, tmp_path):
    env = {**os.environ, "PTXGEN_PTXAS": str(tmp_path / "no-ptxas")}
    out = launch(env=env)
    assert out.returncode == 1
    assert out.stderr.startswith("launch_channel_cat_backward: no GPU and cannot assemble the PTX either: ")
    assert len(out.stderr.splitlines()) == 1 and "Traceback" not in out.stderr
    assert "launch plan:" in out.stdout  # what it could do, it did


@pytest.mark.parametrize(
    "args, message",
    [
        (["--dtype", "f7"], "unknown dtype 'f7'"),
        (["--block-size", "100"], "block_size 100 is not accepted"),
        (["--n-spatial", "-5", "--repeat", "0"], "argument --n-spatial: takes a positive int, not -5"),
        (["--n-spatial", "0"], "argument --n-spatial: takes a positive int, not 0"),
        (["--repeat", "0"], "argument --repeat: takes a positive int, not 0"),
        (["--repeat", "many"], "argument --repeat: takes a positive int, not 'many'"),
        (["--chunks", "16,0"], "argument --chunks: takes positive ints separated by commas, not '16,0'"),
        (["--chunks", ""], "argument --chunks: takes positive ints separated by commas, not ''"),
        (["--chunks", "3,x"], "not '3,x'"),
        (["--chunks", "2000000000,2000000000"], "--chunks add up to 4000000000 channels; c_total is an i32"),
        (
            ["--n-spatial", "3000000000", "--block-size", "32", "--chunks", "64"],
            "needs 6000000000 CTAs; at most 2147483647",
        ),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_launch_script_refuses_bad_options_in_one_line(args, message):
    out = launch(*args)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("launch_channel_cat_backward: error: ")
    assert message in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr


def test_the_launch_plan_bytes_are_the_param_layout():
    import launch_channel_cat_backward as script

    kernel = ptxgen.ChannelCatBackward("f64", 256)
    plan = script.launch_plan(kernel, 7, [300, 1])
    assert "  launch 1: dx = dy[:, 0:300], grid (14, 1, 1) x block (256, 1, 1) = 14 CTAs" in plan
    assert "  launch 2: dx = dy[:, 300:301], grid (7, 1, 1) x block (256, 1, 1) = 7 CTAs" in plan
    assert "chunk_c       i32       2c 01 00 00              = 300" in plan  # 300 = 0x12c
    assert "c_total       i32       2d 01 00 00              = 301" in plan
    assert "device address of dx, 7 x 300 (16800 bytes)" in plan


def test_tree_hash_is_printed_and_stable():
    run = [sys.executable, "scripts/gpu_check.py", "--tree-hash"]
    first = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    second = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{64}", first) and first == second


def test_tree_hash_covers_the_code(tmp_path):
    import gpu_check

    folders = ("examples", "ptxgen", "runtime", "scripts", "tests")
    files = ("conftest.py", "pyproject.toml", "setup.py", "docs/design.md")
    for folder in folders:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "a.py").write_text("x = 1\n")
    (tmp_path / "docs").mkdir()
    for name in files:
        (tmp_path / name).write_text("x = 1\n")
    before = gpu_check.tree_hash(tmp_path)
    (tmp_path / "runtime" / "__pycache__").mkdir()
    (tmp_path / "runtime" / "__pycache__" / "a.pyc").write_bytes(b"cache")
    (tmp_path / "examples" / "build").mkdir()
    (tmp_path / "examples" / "build" / "program").write_bytes(b"built")
    (tmp_path / "runtime" / "_fastlaunch.cpython-312-x86_64-linux-gnu.so").write_bytes(b"built")
    assert gpu_check.tree_hash(tmp_path) == before  # caches and build outputs do not count
    (tmp_path / "docs" / "gpu-check.json").write_text("{}")
    assert gpu_check.tree_hash(tmp_path) == before  # nor does the record itself
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "study.py").write_text("x = 1\n")
    assert gpu_check.tree_hash(tmp_path) == before  # nor the studies in lab/
    for part in (*(f"{folder}/a.py" for folder in folders), *files):  # everything that decides a run does
        (tmp_path / part).write_text(f"x = {part!r}\n")
        after = gpu_check.tree_hash(tmp_path)
        assert after != before, part
        before = after


def test_the_committed_record_is_a_complete_passing_run_of_this_tree():
    """docs/gpu-check.json must record a complete, passing GPU run of exactly this code,
    through a compiled launch built from this tree's C source: run
    ``python scripts/gpu_check.py`` on a GPU machine after the last change."""
    import gpu_check

    record = json.loads((ROOT / "docs" / "gpu-check.json").read_text())
    for key in (
        "tree",
        "command",
        "gpu",
        "driver",
        "date",
        "pytest_command",
        "pytest_exit_status",
        "partial",
        "passed",
        "failed",
        "skipped",
        "per_file",
        "compiled_launch",
        "cuda_bindings",
        "status",
    ):
        assert key in record, key
    assert record["status"] == gpu_check.status_of(record) == "passed", (
        f"docs/gpu-check.json records a {gpu_check.status_of(record)} run: only a complete run that "
        "exited 0 with no failure attests the suite"
    )
    assert record["passed"] > 0 and record["failed"] == 0 and record["gpu"]
    assert record["pytest_command"] == " ".join(
        ["python", "-m", "pytest", *gpu_check.SUITE, "-o", "junit_family=xunit1"]
    )
    assert sum(c["passed"] for c in record["per_file"].values()) == record["passed"]
    assert record["tree"] == gpu_check.tree_hash(), (
        "docs/gpu-check.json was recorded on other code; rerun python scripts/gpu_check.py on a GPU"
    )
    compiled = record["compiled_launch"]
    assert compiled["missing"] == "" and compiled["binary_sha256"], (
        "the suite ran without the compiled launch"
    )
    assert (
        compiled["source_sha256"]
        == compiled["tree_source_sha256"]
        == runtime.launch.fastlaunch_source_sha256()
    )


def _record(**changes):
    base = {"pytest_exit_status": 0, "failed": 0, "partial": False, "passed": 10}
    return {**base, **changes}


def test_a_record_attests_only_a_complete_clean_run():
    import gpu_check

    assert gpu_check.status_of(_record()) == "passed"
    assert gpu_check.status_of(_record(pytest_exit_status=1)) == "failed"  # e.g. an error at collection
    assert gpu_check.status_of(_record(failed=2)) == "failed"
    assert gpu_check.status_of(_record(partial=True)) == "partial"  # -k or a path: a subset
    assert gpu_check.status_of(_record(passed=0)) == "partial"


def test_junit_counts_per_file(tmp_path):
    import gpu_check

    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite tests="4">'
        '<testcase classname="tests.test_a" name="t1" file="tests/test_a.py"/>'
        '<testcase classname="tests.test_a" name="t2" file="tests/test_a.py"><failure message="x"/></testcase>'
        '<testcase classname="tests.test_b" name="t3" file="tests/test_b.py"><skipped message="y"/></testcase>'
        '<testcase classname="tests.test_b" name="t4" file="tests/test_b.py"><properties>'
        '<property name="threads" value="16"/></properties></testcase>'
        "</testsuite></testsuites>"
    )
    totals, per_file, figures = gpu_check.junit_counts(report)
    assert totals == {"passed": 2, "failed": 1, "skipped": 1}
    assert per_file == {"tests/test_a.py": {"passed": 1, "failed": 1, "skipped": 0},
                        "tests/test_b.py": {"passed": 1, "failed": 0, "skipped": 1}}  # fmt: skip
    assert figures == {"tests/test_b.py::t4": {"threads": "16"}}


def test_gpu_check_refuses_to_write_a_record_without_a_gpu(tmp_path, monkeypatch, capsys):
    import gpu_check

    record = tmp_path / "docs" / "gpu-check.json"
    record.parent.mkdir()
    record.write_text("{}\n")
    monkeypatch.setattr(gpu_check, "ROOT", tmp_path)
    monkeypatch.setattr(gpu_check, "RECORD", record)
    monkeypatch.setattr(gpu_check, "no_gpu_reason", lambda: "no NVIDIA driver found (test)")

    def no_tests(*args, **kwargs):
        raise AssertionError("the GPU suite must not run without a GPU")

    monkeypatch.setattr(gpu_check.subprocess, "run", no_tests)
    assert gpu_check.main([]) == 1
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1
    assert "no GPU here (no NVIDIA driver found (test)); not writing docs/gpu-check.json" in out.err
    assert record.read_text() == "{}\n"


def test_gpu_check_script_without_a_gpu_exits_non_zero_and_leaves_the_record(tmp_path):
    if runtime.is_available():
        pytest.skip("this machine has a GPU: the script would run the GPU suite")
    record = ROOT / "docs" / "gpu-check.json"
    before = record.read_bytes()
    out = subprocess.run([sys.executable, "scripts/gpu_check.py"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.startswith("gpu_check: no GPU here (") and len(out.stderr.splitlines()) == 1
    assert record.read_bytes() == before


def test_launch_benchmark_tables_its_record():
    import bench_launch

    record = {
        "us_per_launch": {"bare_cuda_bindings": 6.0, "checked_int": 6.6, "checked_torch": 8.4,
                          "torch_copy": 15.0, "graph_replay_per_launch": 1.3,
                          "graph_replay_fastcat_pdl_per_launch": 0.7},
        "not_measured": {"triton": "not measured: no triton"},
        "gpu": "G (sm_90)", "driver": "580 (CUDA 13.0)", "date": "2026-11-30", "python": "3.12",
        "versions": {"cuda-bindings": "13.3.1"}, "default_binding": "cffi", "method": "m", "failures": [],
    }  # fmt: skip
    record["labels"] = {k: bench_launch.LABELS[k] for k in record["us_per_launch"]}
    table = bench_launch.markdown(record)
    assert "| Function.launch, int pointers | 6.60 | 1.10 |" in table
    assert "| Function.launch, int pointers ≤ 1.15× bare | 1.100× | yes |" in table
    assert "| Function.launch, torch tensors ≤ 1.3× bare | 1.400× | no |" in table
    assert "< torch dx.copy_(dy.narrow(1, off, c)) | 6.60 vs 15.00 µs | yes |" in table
    assert "| graph replay ≤ 1.2 µs per launch (wall), seed kernel | 1.30 µs | no |" in table
    assert (
        "| graph replay ≤ 1.2 µs per launch (wall), fast kernel, dependent launch | 0.70 µs | yes |" in table
    )
    assert "the op" not in table  # not measured: no row
    assert "| Triton kernel, the same copy | not measured: no triton | |" in table
    assert bench_launch.FRESH_NOTE not in table
    record["us_per_launch"]["graph_replay_fresh_context_per_launch"] = 1.05
    record["labels"]["graph_replay_fresh_context_per_launch"] = "fresh"
    table = bench_launch.markdown(record)
    assert "| fresh | 1.05 | - |" in table and bench_launch.FRESH_NOTE in table
    assert (
        "| graph replay ≤ 1.2 µs per launch (wall), seed kernel | 1.30 µs | no |" in table
    )  # still the target


def test_the_runtimes_switches_make_a_run_partial(monkeypatch):
    import gpu_check

    for name in [k for k in os.environ if k.startswith("PTXGEN_") or k == "PYTEST_ADDOPTS"]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PTXGEN_PTXAS", "/opt/ptxas")  # where a tool is found changes nothing
    assert gpu_check._switches() == {}
    monkeypatch.setenv("PTXGEN_COMPILED_LAUNCH", "0")
    monkeypatch.setenv("PYTEST_ADDOPTS", "-k ops")
    assert gpu_check._switches() == {"PTXGEN_COMPILED_LAUNCH": "0", "PYTEST_ADDOPTS": "-k ops"}


def test_the_benchmark_rotates_its_methods_round_by_round():
    """Each method is timed at each place in the round equally often: a fixed order let
    the place, not the kernel, decide comparisons of 4 us kernels (lab/README.md)."""
    import bench

    class Event:
        def record(self) -> None:
            pass

        def elapsed_ms(self, end: Event) -> float:
            return 1.0

    ctx = object.__new__(bench.Context)  # no device: events, prelude and sync stood in
    ctx._event_pair = lambda index: (Event(), Event())
    ctx._prelude = lambda rep: None
    ctx.dev = type("Dev", (), {"synchronize": lambda self: None})()
    calls: list[str] = []
    runs = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    times, failed = ctx.time_runs(runs, 6)
    assert calls == list("abcbcacababcbcacab") and not failed
    assert {name: len(t) for name, t in times.items()} == {"a": 6, "b": 6, "c": 6}


def test_the_small_shapes_get_more_timed_runs():
    """A 4 us case's median of 20 runs is within its own spread of the figures compared
    (bench.SMALL_REPS_FACTOR's comment); the large shapes keep the runs asked for."""
    import bench
    from bench_cases import all_cases

    cases = all_cases(("u8",))
    small = [c for c in cases if c.group == "small"]
    others = [c for c in cases if c.group != "small"]
    assert small and others
    assert all(c.traffic() <= 2 * 2**20 for c in small), "small: at most 1 MB a side"
    assert {bench.case_reps(c, 20) for c in small} == {20 * bench.SMALL_REPS_FACTOR}
    assert {bench.case_reps(c, 20) for c in others} == {20}
    assert bench.SMALL_REPS_FACTOR > 1
