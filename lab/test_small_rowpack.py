"""``patches/small-rowpack.patch`` (the small ops as direct rowpack with narrow chunks),
checked on a copy of the committed tree: it applies, and with it the CPU tests it brings
pass (the narrow kernels in the PTX interpreter, their plans, golden PTX, every option
chosen). Fails when the patch no longer applies to the shipped files."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PATCH = ROOT / "lab" / "patches" / "small-rowpack.patch"


@pytest.fixture(scope="module")
def patched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and this checkout's history (git archive HEAD)")
    tree = tmp_path_factory.mktemp("patched")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    subprocess.run(["git", "apply", str(PATCH)], cwd=tree, check=True)
    return tree


def test_the_patch_applies_and_its_cpu_tests_pass(patched: Path) -> None:
    tests = [
        "tests/test_fastcat_vec_rowpack.py",
        "tests/test_fastcat_plans.py",
        "tests/test_golden.py",
        "tests/test_planner.py",
        "tests/test_gpu_tile_kernels.py",  # skips without a GPU: collected, so it imports
    ]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
        cwd=patched,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert " passed" in run.stdout.splitlines()[-1]
