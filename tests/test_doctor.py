"""python -m ptxgen doctor: what is installed and found, and what to install for what is
missing. Tests check the findings, not the text; each piece is taken away or broken in
turn (a bad PTXGEN_PTXAS, cuda-bindings that does not import, no runtime, no driver),
and the report says so, with a fix, and still exits 0."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

import runtime
from ptxgen import doctor, toolchain

SECTIONS = ["ptxgen", "tools", "packages", "runtime", "GPUs"]
ITEMS = ["ptxgen", "python", "ptxas", "nvdisasm", "cuda-bindings", "numpy", "runtime", "compiled launch"]


def run_doctor(*python: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m ptxgen doctor``, or the given ``python -c`` program that runs it."""
    args = list(python) or ["-m", "ptxgen", "doctor"]
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        check=False,
    )


def by_item(found: list[doctor.Finding]) -> dict[str, doctor.Finding]:
    return {f.item: f for f in found}


def script(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ptxas"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(stat.S_IRWXU)
    return path


@pytest.fixture
def no_gpu(monkeypatch):
    """No driver, on any machine: the GPU probe answers at once and the same everywhere."""
    monkeypatch.setattr(runtime, "unavailable_reason", lambda: "no NVIDIA driver found (libcuda.so.1: test)")


def test_runs_as_a_command_names_each_section_and_exits_0():
    out = run_doctor()
    assert out.returncode == 0, out.stderr
    assert out.stderr == "" and "Traceback" not in out.stdout
    lines = out.stdout.splitlines()
    assert [line for line in lines if line in SECTIONS] == SECTIONS
    for item in [*ITEMS, "driver"]:
        assert any(line.startswith(f"  {item} ") for line in lines), item


def test_the_findings_cover_every_piece_in_order(no_gpu):
    found = doctor.findings()
    assert [f.item for f in found] == [*ITEMS, "driver"]
    sections = [f.section for f in found]
    assert sorted(set(sections), key=sections.index) == SECTIONS
    assert all(f.status in (doctor.OK, doctor.MISSING, doctor.FAILED) for f in found)
    items = by_item(found)
    assert items["ptxgen"].status == doctor.OK and str(ROOT / "ptxgen") in items["ptxgen"].detail
    assert items["python"].detail.endswith(sys.executable)


def test_the_installed_tools_and_packages_are_found_with_their_versions(no_gpu):
    """The test extra installs NVIDIA's wheels, cuda-bindings and numpy."""
    items = by_item(doctor.findings())
    for name in ("ptxas", "nvdisasm"):
        found = toolchain.locate_tool(name)
        assert items[name].status == doctor.OK
        assert items[name].detail.startswith(f"{toolchain.tool_version(found)}, {found}")
    import numpy

    assert items["numpy"].status == doctor.OK and items["numpy"].detail.startswith(numpy.__version__)
    assert items["cuda-bindings"].status == doctor.OK


def test_no_driver_is_one_line_without_a_fix(no_gpu):
    found = [f for f in doctor.findings() if f.section == "GPUs"]
    assert found == [
        doctor.Finding(
            "GPUs",
            "driver",
            doctor.MISSING,
            "no NVIDIA driver found (libcuda.so.1: test) (emitting, checking and bundling PTX need none)",
        )
    ]


@pytest.mark.parametrize(
    "setting, detail",
    [
        (
            "/nonexistent/ptxas",
            "PTXGEN_PTXAS=/nonexistent/ptxas is not a file; unset it or name a ptxas binary",
        ),
        ("exit 1", "exited with status 1 when asked for --version and printed nothing"),
        (
            "echo 'libnvptx.so: cannot open' >&2; exit 1",
            "when asked for --version; it printed:\n  libnvptx.so",
        ),
    ],
)
def test_a_ptxas_that_is_not_there_or_fails_is_reported_failing_with_the_reason(
    tmp_path, monkeypatch, no_gpu, setting, detail
):
    value = setting if setting.startswith("/") else str(script(tmp_path, setting))
    monkeypatch.setenv("PTXGEN_PTXAS", value)
    items = by_item(doctor.findings())
    assert items["ptxas"].status == doctor.FAILED and detail in items["ptxas"].detail
    assert "PTXGEN_PTXAS" in items["ptxas"].fix
    assert items["nvdisasm"].status == doctor.OK  # each tool has its own setting


def test_a_failing_ptxas_in_the_command_output(tmp_path):
    tool = script(tmp_path, "exit 1")
    out = run_doctor(env={"PTXGEN_PTXAS": str(tool)})
    assert out.returncode == 0, out.stderr
    line = next(line for line in out.stdout.splitlines() if line.startswith("  ptxas "))
    assert line.split()[1] == "failed" and f"{tool} (PTXGEN_PTXAS) exited with status 1" in line
    assert "failed: ptxas" in out.stdout.splitlines()[-1]


def test_no_ptxas_anywhere_says_what_to_install(monkeypatch, tmp_path, no_gpu):
    for var in ("PTXGEN_PTXAS", "PTXGEN_NVDISASM", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(toolchain, "_from_wheel", lambda name: None)
    monkeypatch.setattr(toolchain, "DEFAULT_TOOLKIT", tmp_path / "no-toolkit")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    items = by_item(doctor.findings())
    for name, wheel in (("ptxas", "nvidia-cuda-nvcc"), ("nvdisasm", "nvidia-cuda-nvdisasm")):
        finding = items[name]
        assert finding.status == doctor.MISSING
        assert finding.detail == f"not found (looked at {', '.join(toolchain.search_places(name))})"
        assert "pip install -e '.[tools]'" in finding.fix and wheel in finding.fix
        assert "CUDA toolkit" in finding.fix and f"PTXGEN_{name.upper()}" in finding.fix


BLOCK_CUDA = (
    "import sys; sys.modules['cuda'] = None; "  # `import cuda.bindings` now fails, as if absent
    "from ptxgen.cli import main; sys.exit(main(['doctor']))"
)


def test_cuda_bindings_that_do_not_import_are_reported_with_what_to_do():
    out = run_doctor("-c", BLOCK_CUDA)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  cuda-bindings "))
    assert lines[at].split()[1] == "failed" and "does not import" in lines[at]
    assert lines[at + 1].strip().startswith("fix: pip install")
    assert "Traceback" not in out.stdout + out.stderr


def test_cuda_bindings_not_installed_says_what_to_install(monkeypatch, no_gpu):
    for name in ("cuda", "cuda.bindings"):
        monkeypatch.setitem(sys.modules, name, None)
    real = doctor._installed_version
    monkeypatch.setattr(doctor, "_installed_version", lambda d: None if d == "cuda-bindings" else real(d))
    finding = by_item(doctor.findings())["cuda-bindings"]
    assert (finding.status, finding.detail) == (doctor.MISSING, "not installed")
    assert finding.fix == "pip install -e '.[runtime]'"  # the tests run in the checkout


def test_runtime_that_does_not_import_is_a_finding_not_a_traceback(monkeypatch):
    monkeypatch.setitem(sys.modules, "runtime", None)
    items = by_item(doctor.findings())
    assert items["runtime"].status == doctor.FAILED and "does not import" in items["runtime"].detail
    assert items["driver"].status == doctor.FAILED
    assert items["driver"].detail.startswith("cannot look: runtime does not import")
    assert "compiled launch" not in items


def test_a_compiled_launch_not_built_says_what_it_needs(monkeypatch, no_gpu):
    import importlib.util

    from runtime import launch

    real = importlib.util.find_spec
    monkeypatch.setattr(launch, "compiled_launch_available", lambda: "runtime._fastlaunch is not available")
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "runtime._fastlaunch" else real(name, *a),
    )
    finding = by_item(doctor.findings())["compiled launch"]
    assert finding.status == doctor.MISSING and "Python path" in finding.detail
    assert "C compiler" in finding.fix and "headers" in finding.fix and "pip install -e ." in finding.fix


def test_a_compiled_launch_switched_off_says_so(monkeypatch, no_gpu):
    from runtime import launch

    if launch.compiled_launch_available():
        pytest.skip(launch.compiled_launch_available())
    monkeypatch.setenv("PTXGEN_COMPILED_LAUNCH", "0")
    finding = by_item(doctor.findings())["compiled launch"]
    assert finding.status == doctor.OK and "switched off by PTXGEN_COMPILED_LAUNCH" in finding.detail


def test_a_probe_that_raises_becomes_a_finding(monkeypatch, no_gpu):
    def broken(name):
        raise RuntimeError("boom")

    monkeypatch.setattr(toolchain, "locate_tool", broken)
    found = doctor.findings()
    failed = [f for f in found if f.section == "tools"]
    assert failed == [
        doctor.Finding("tools", "ptxas, nvdisasm", doctor.FAILED, "could not look: RuntimeError: boom")
    ]
    assert "cuda-bindings" in by_item(found)  # the report goes on


def test_too_old_a_toolkit_names_the_targets_it_cannot_take():
    assert doctor._targets_beyond((13, 5)) == ""
    assert (
        doctor._targets_beyond((12, 8))
        == "; too old for sm_88, sm_103, sm_110, sm_121 (they need CUDA 13.0 or newer)"
    )


def test_the_rendering_aligns_and_puts_fixes_and_reasons_under_their_finding():
    found = [
        doctor.Finding("tools", "ptxas", doctor.OK, "13.5.37, /x/ptxas (PATH)"),
        doctor.Finding(
            "tools", "nvdisasm", doctor.FAILED, "could not be run; it printed:\n  oops", "repair it"
        ),
        doctor.Finding("packages", "numpy", doctor.MISSING, "not installed", "pip install numpy"),
    ]
    assert doctor.render(found).splitlines() == [
        "ptxgen doctor: what is installed and found",
        "tools",
        "  ptxas     ok       13.5.37, /x/ptxas (PATH)",
        "  nvdisasm  failed   could not be run; it printed:",
        "                       oops",
        "                     fix: repair it",
        "packages",
        "  numpy     missing  not installed",
        "                     fix: pip install numpy",
        "missing: numpy; failed: nvdisasm",
    ]
    assert doctor.render(found[:1]).splitlines()[-1] == "everything was found and works"


def test_importing_ptxgen_and_its_doctor_imports_nothing_outside_the_standard_library():
    program = (
        "import sys, ptxgen.cli, ptxgen.doctor; "
        "print(sorted(m for m in ('runtime', 'cuda', 'numpy') if m in sys.modules))"
    )
    out = run_doctor("-c", program)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


class StandInDriver:
    """The two driver calls the doctor makes itself, answered as cuda-bindings does."""

    def cuDriverGetVersion(self):
        return 0, 12080

    def cuDeviceGetCount(self):
        return 0, 3


# name, compute capability and memory of each stand-in GPU; a third one fails to open
STAND_IN_GPUS = {0: ("NVIDIA H200", (9, 0), 150_754_820_096), 1: ("Tesla V100", (7, 0), 16 * 2**30)}


class StandInDevice:
    def __init__(self, ordinal):
        if ordinal not in STAND_IN_GPUS:
            raise runtime.CudaError(
                "cuDevicePrimaryCtxRetain", 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"
            )
        self.name, self.compute_capability, self.total_memory = STAND_IN_GPUS[ordinal]
        self.arch = "sm_{}{}".format(*self.compute_capability)


def test_the_gpu_lines_from_a_stand_in_driver(monkeypatch):
    """The GPU section's every branch, on any machine: a GPU, one older than any target, one
    that cannot be opened; and a driver too old for the newest targets."""
    monkeypatch.setattr(runtime, "unavailable_reason", lambda: None)
    monkeypatch.setattr(runtime, "driver", StandInDriver)
    monkeypatch.setattr(runtime, "Device", StandInDevice)
    found = [f for f in doctor.findings() if f.section == "GPUs"]
    assert found == [
        doctor.Finding(
            "GPUs",
            "driver",
            doctor.OK,
            "CUDA 12.8; loads PTX ISA up to 8.7; too old for sm_88, sm_103, sm_110, sm_121 "
            "(they need CUDA 13.0 or newer)",
        ),
        doctor.Finding("GPUs", "GPU 0", doctor.OK, "NVIDIA H200, sm_90, 140.4 GiB"),
        doctor.Finding(
            "GPUs",
            "GPU 1",
            doctor.FAILED,
            "Tesla V100, sm_70, 16.0 GiB; older than sm_75, the oldest target ptxgen emits for",
        ),
        doctor.Finding(
            "GPUs",
            "GPU 2",
            doctor.FAILED,
            "cannot be opened: cuDevicePrimaryCtxRetain failed: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory",
        ),
    ]


@pytest.mark.gpu
def test_the_gpu_lines_name_each_gpu_and_its_arch(dev):
    items = by_item(doctor.findings())
    assert items["driver"].status == doctor.OK
    assert items["driver"].detail.startswith(f"CUDA {dev.driver_version[0]}.{dev.driver_version[1]}")
    gpu = items["GPU 0"]
    assert gpu.status == doctor.OK
    assert gpu.detail == f"{dev.name}, {dev.arch}, {dev.total_memory / 2**30:.1f} GiB"
    out = run_doctor()
    assert out.returncode == 0 and f"{dev.name}, {dev.arch}, " in out.stdout
