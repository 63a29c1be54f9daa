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
