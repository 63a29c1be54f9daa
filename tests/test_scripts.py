"""The scripts a user runs first: the launch script's fallback and the record's hash."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from conftest import ROOT

import runtime


def test_launch_script_without_a_gpu_explains_and_assembles():
    if runtime.is_available():
        pytest.skip("this machine has a GPU; the GPU suite runs the script for real")
    out = subprocess.run(
        [sys.executable, "scripts/launch_channel_cat_backward.py"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    assert first.startswith("no GPU: ")
    assert "channel_cat_backward_entry_point:" in out.stdout and "registers" in out.stdout
    assert "Traceback" not in out.stderr


def test_launch_script_rejects_bad_options():
    out = subprocess.run(
        [sys.executable, "scripts/launch_channel_cat_backward.py", "--dtype", "f7"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 2 and "unknown dtype 'f7'" in out.stdout


def test_tree_hash_is_printed_and_stable():
    run = [sys.executable, "scripts/gpu_check.py", "--tree-hash"]
    first = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    second = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{64}", first) and first == second


def test_tree_hash_covers_the_code(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    import gpu_check

    for folder in ("ptxgen", "runtime", "tests"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "a.py").write_text("x = 1\n")
    before = gpu_check.tree_hash(tmp_path)
    (tmp_path / "runtime" / "__pycache__").mkdir()
    (tmp_path / "runtime" / "__pycache__" / "a.pyc").write_bytes(b"cache")
    assert gpu_check.tree_hash(tmp_path) == before  # caches do not count
    (tmp_path / "tests" / "a.py").write_text("x = 2\n")
    assert gpu_check.tree_hash(tmp_path) != before


def test_the_committed_record_has_the_documented_fields():
    path = ROOT / "docs" / "gpu-check.json"
    if not path.exists():
        pytest.skip("no GPU record yet")
    record = json.loads(path.read_text())
    for key in ("tree", "passed", "failed", "skipped", "gpu", "driver", "cuda_bindings", "date"):
        assert key in record


def test_launch_benchmark_tables_its_record():
    sys.path.insert(0, str(ROOT / "scripts"))
    import bench_launch

    record = {
        "us_per_launch": {"bare_cuda_bindings": 6.0, "checked_int": 6.6, "checked_torch": 8.4,
                          "torch_copy": 15.0, "graph_replay_per_launch": 1.3},
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
    assert "| graph replay ≤ 1.2 µs per launch (wall) | 1.30 µs | no |" in table
    assert "| Triton kernel, the same copy | not measured: no triton | |" in table
