"""runtime._fastlaunch built with AddressSanitizer and UndefinedBehaviorSanitizer, and
the CPU tests of both launch paths and of the ops' C lane run against it in a
subprocess: any out-of-bounds access, use after free or undefined behaviour in the C
code stops the run with a report. Needs gcc with libasan and libubsan (else skipped)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest
from conftest import ROOT

TESTS = ["tests/test_fastlaunch_cpu.py", "tests/test_launch_cpu.py", "tests/test_launch_footprints_cpu.py",
         "tests/test_ops_cpu.py", "tests/test_dependent_launch.py", "tests/test_op_lane_cpu.py",
         "tests/test_ops_fresh_cpu.py", "tests/test_ops_routes_c_cpu.py"]  # fmt: skip


def _library(compiler: str, name: str) -> str | None:
    out = subprocess.run([compiler, f"-print-file-name={name}"], capture_output=True, text=True, check=False)
    path = out.stdout.strip()
    return path if out.returncode == 0 and os.path.isabs(path) and os.path.exists(path) else None


def test_the_c_code_is_clean_under_address_and_undefined_behaviour_sanitizers(tmp_path):
    compiler = shutil.which("gcc")
    if compiler is None or sys.platform != "linux":
        pytest.skip("needs gcc on Linux")
    libraries = [_library(compiler, "libasan.so"), _library(compiler, "libubsan.so")]
    if None in libraries:
        pytest.skip("gcc has no libasan/libubsan here")
    tree = tmp_path / "tree"
    for part in ("ptxgen", "runtime", "tests", "docs"):
        shutil.copytree(ROOT / part, tree / part, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    for part in ("conftest.py", "pyproject.toml"):
        shutil.copy(ROOT / part, tree / part)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    source_sha256 = hashlib.sha256((ROOT / "runtime" / "_fastlaunch.c").read_bytes()).hexdigest()
    build = subprocess.run(
        [compiler, "-shared", "-fPIC", "-O1", "-g", "-fsanitize=address,undefined", "-fno-omit-frame-pointer",
         "-fno-sanitize-recover=undefined", "-std=c11", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
         f"-I{sysconfig.get_paths()['include']}", f"-DPTXGEN_FASTLAUNCH_SOURCE_SHA256=\"{source_sha256}\"",
         str(ROOT / "runtime" / "_fastlaunch.c"),
         "-o", str(tree / "runtime" / f"_fastlaunch{suffix}")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if build.returncode:
        if "Python.h" in build.stderr:
            pytest.skip("no Python headers here")
        pytest.fail(f"the extension does not build cleanly:\n{build.stderr}")
    env = dict(os.environ, LD_PRELOAD=" ".join(libraries), ASAN_OPTIONS="detect_leaks=0:abort_on_error=0")
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    env.pop("PTXGEN_COMPILED_LAUNCH", None)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *TESTS],
        cwd=tree, env=env, capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    report = run.stdout[-4000:] + run.stderr[-4000:]
    assert run.returncode == 0, report
    assert "ERROR: AddressSanitizer" not in report and "runtime error:" not in report, report
    # the sanitized build was the one loaded: the compiled variants ran, none skipped for want of it
    assert "not built" not in report and " passed" in report, report
