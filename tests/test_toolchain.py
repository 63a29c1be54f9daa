"""Where ptxas and nvdisasm are found: an explicit setting, NVIDIA's wheel, a CUDA
toolkit, then PATH. Each step is tested with fake executables in temporary folders,
so the machine's own tools (this one may have a toolkit in /usr/local/cuda) never
decide the outcome."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from ptxgen import toolchain


def fake_tool(folder: Path, name: str = "ptxas", executable: bool = True, script: str = "echo fake") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    mode = stat.S_IRUSR | stat.S_IWUSR | (stat.S_IXUSR if executable else 0)
    path.chmod(mode)
    return path


@pytest.fixture
def clean(monkeypatch, tmp_path):
    """No explicit setting, no wheel, no toolkit, an empty PATH: each test adds one."""
    for var in ("PTXGEN_PTXAS", "PTXGEN_NVDISASM", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(toolchain, "_from_wheel", lambda name: None)
    monkeypatch.setattr(toolchain, "DEFAULT_TOOLKIT", tmp_path / "no-default-toolkit")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    return tmp_path


def test_nothing_found_is_one_line_naming_every_place(clean):
    with pytest.raises(toolchain.ToolNotFound) as info:
        toolchain.find_tool("ptxas")
    text = str(info.value)
    assert "\n" not in text
    for part in ("PTXGEN_PTXAS", "nvidia-cuda-nvcc", "no-default-toolkit/bin", "PATH", "ptxgen[tools]"):
        assert part in text


def test_path_is_the_last_resort(clean, monkeypatch):
    tool = fake_tool(clean / "on-path")
    monkeypatch.setenv("PATH", str(tool.parent))
    assert toolchain.find_tool("ptxas") == tool


def test_default_toolkit_beats_path(clean, monkeypatch):
    monkeypatch.setenv("PATH", str(fake_tool(clean / "on-path").parent))
    default = fake_tool(clean / "no-default-toolkit" / "bin")
    assert toolchain.find_tool("ptxas") == default


def test_cuda_home_beats_cuda_path_beats_default(clean, monkeypatch):
    fake_tool(clean / "no-default-toolkit" / "bin")
    cuda_path = fake_tool(clean / "cuda-path" / "bin")
    monkeypatch.setenv("CUDA_PATH", str(clean / "cuda-path"))
    assert toolchain.find_tool("ptxas") == cuda_path
    cuda_home = fake_tool(clean / "cuda-home" / "bin")
    monkeypatch.setenv("CUDA_HOME", str(clean / "cuda-home"))
    assert toolchain.find_tool("ptxas") == cuda_home


def test_a_toolkit_without_the_tool_or_with_a_non_executable_one_is_passed_over(clean, monkeypatch):
    (clean / "cuda-home" / "bin").mkdir(parents=True)
    monkeypatch.setenv("CUDA_HOME", str(clean / "cuda-home"))
    fake_tool(clean / "cuda-path" / "bin", executable=False)
    monkeypatch.setenv("CUDA_PATH", str(clean / "cuda-path"))
    on_path = fake_tool(clean / "on-path")
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert toolchain.find_tool("ptxas") == on_path


def test_the_wheel_beats_a_toolkit_and_path(clean, monkeypatch):
    wheel = fake_tool(clean / "site-packages" / "nvidia" / "bin")
    monkeypatch.setattr(toolchain, "_from_wheel", lambda name: wheel if name == "ptxas" else None)
    monkeypatch.setenv("CUDA_HOME", str(fake_tool(clean / "cuda-home" / "bin").parent.parent))
    monkeypatch.setenv("PATH", str(fake_tool(clean / "on-path").parent))
    assert toolchain.find_tool("ptxas") == wheel


def test_the_explicit_setting_beats_everything(clean, monkeypatch):
    wheel = fake_tool(clean / "wheel" / "bin")
    monkeypatch.setattr(toolchain, "_from_wheel", lambda name: wheel)
    explicit = fake_tool(clean / "mine", "my-ptxas")
    monkeypatch.setenv("PTXGEN_PTXAS", str(explicit))
    assert toolchain.find_tool("ptxas") == explicit
    assert toolchain.find_tool("nvdisasm") == wheel  # each tool has its own setting


def test_an_explicit_setting_that_is_not_usable_is_an_error_not_a_fallback(clean, monkeypatch):
    monkeypatch.setenv("PATH", str(fake_tool(clean / "on-path").parent))
    monkeypatch.setenv("PTXGEN_PTXAS", str(clean / "missing"))
    with pytest.raises(toolchain.ToolNotFound, match=r"PTXGEN_PTXAS=.*missing is not a file"):
        toolchain.find_tool("ptxas")
    monkeypatch.setenv("PTXGEN_PTXAS", str(clean))
    with pytest.raises(toolchain.ToolNotFound, match="is not a file"):
        toolchain.find_tool("ptxas")
    monkeypatch.setenv("PTXGEN_PTXAS", str(fake_tool(clean / "mine", executable=False)))
    with pytest.raises(toolchain.ToolNotFound, match=r"PTXGEN_PTXAS=.*ptxas is not executable; chmod \+x"):
        toolchain.find_tool("ptxas")


def test_the_installed_wheel_is_found():
    """The test extra installs NVIDIA's wheels; the real lookup finds ptxas in one."""
    path = toolchain._from_wheel("ptxas")
    assert path is not None and "nvidia" in path.parts and path.parent.name == "bin"


def test_a_tool_that_cannot_start_is_one_error(clean, monkeypatch):
    broken = clean / "mine" / "ptxas"
    broken.parent.mkdir()
    broken.write_bytes(b"\x7fELF not really")  # executable bit, but no valid program
    broken.chmod(0o755)
    monkeypatch.setenv("PTXGEN_PTXAS", str(broken))
    with pytest.raises(
        toolchain.ToolFailed, match=r"ptxas could not be run: .*ptxas \(PTXGEN_PTXAS\): Exec format error"
    ):
        toolchain.assemble(".version 6.3\n", "sm_75")


@pytest.mark.parametrize("executable", [False, True])
def test_cli_check_with_an_unusable_ptxas_is_one_line(tmp_path, executable):
    tool = tmp_path / "ptxas"
    tool.write_bytes(b"\x7fELF not really")
    tool.chmod(0o755 if executable else 0o644)
    env = {**os.environ, "PTXGEN_PTXAS": str(tool)}
    out = subprocess.run(
        [sys.executable, "-m", "ptxgen", "channel_cat_backward", "--check", "-o", str(tmp_path / "k.ptx")],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 1
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert str(tool) in out.stderr


def test_each_step_says_where_it_found_the_tool(clean, monkeypatch):
    on_path = fake_tool(clean / "on-path")
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert toolchain.locate_tool("ptxas") == toolchain.ToolLocation("ptxas", on_path, "PATH")
    default = fake_tool(clean / "no-default-toolkit" / "bin")
    assert toolchain.locate_tool("ptxas").source == str(default.parent)
    monkeypatch.setenv("CUDA_PATH", str(fake_tool(clean / "cuda-path" / "bin").parent.parent))
    assert toolchain.locate_tool("ptxas").source == "$CUDA_PATH/bin"
    monkeypatch.setenv("CUDA_HOME", str(fake_tool(clean / "cuda-home" / "bin").parent.parent))
    assert toolchain.locate_tool("ptxas").source == "$CUDA_HOME/bin"
    wheel = fake_tool(clean / "wheel" / "bin")
    monkeypatch.setattr(toolchain, "_from_wheel", lambda name: wheel)
    assert toolchain.locate_tool("ptxas").source == "NVIDIA's nvidia-cuda-nvcc wheel"
    assert toolchain.locate_tool("nvdisasm").source == "NVIDIA's nvidia-cuda-nvdisasm wheel"
    monkeypatch.setenv("PTXGEN_PTXAS", str(fake_tool(clean / "mine")))
    found = toolchain.locate_tool("ptxas")
    assert found.source == "PTXGEN_PTXAS" and str(found) == f"{clean / 'mine' / 'ptxas'} (PTXGEN_PTXAS)"
    assert toolchain.find_tool("ptxas") == found.path


def test_the_search_places_are_the_ones_the_error_names(clean):
    places = toolchain.search_places("nvdisasm")
    assert places[0] == "PTXGEN_NVDISASM" and places[-1] == "PATH"
    with pytest.raises(toolchain.ToolNotFound) as info:
        toolchain.find_tool("nvdisasm")
    assert ", ".join(places) in str(info.value)
    with pytest.raises(ValueError, match="unknown tool 'nvcc'; known: ptxas, nvdisasm"):
        toolchain.search_places("nvcc")


# --- a ptxas that does not work is not a ptxas that refused the PTX ------------------

PTX = ".version 6.3\n.target sm_75\n.address_size 64\n"


@pytest.mark.parametrize(
    "script, how",
    [
        ("exit 1", r"exited with status 1 without a ptxas error message and printed nothing"),
        (
            "echo 'libfoo.so: cannot open shared object file' >&2; exit 127",
            r"exited with status 127 without a ptxas error message; it printed:\n  libfoo.so: cannot open",
        ),
        ("echo dying; kill -SEGV $$", r"was killed by signal 11 \(SIGSEGV\); it printed:\n  dying"),
        ("echo fake", r"exited with status 0 but wrote no cubin; it printed:\n  fake"),
    ],
)
def test_a_ptxas_that_does_not_work_is_a_tool_failure_naming_it(clean, monkeypatch, script, how):
    tool = fake_tool(clean / "mine", script=script)
    monkeypatch.setenv("PTXGEN_PTXAS", str(tool))
    with pytest.raises(toolchain.ToolFailed) as info:
        toolchain.assemble(PTX, "sm_75")
    assert not isinstance(info.value, toolchain.PtxasError)
    assert isinstance(info.value, toolchain.ToolNotFound)  # what callers that skip already catch
    assert str(info.value).startswith(f"ptxas could not be run: {tool} (PTXGEN_PTXAS) ")
    assert re.search(how, str(info.value)), str(info.value)


def test_a_failure_ptxas_explains_is_still_a_refusal(clean, monkeypatch):
    said = "ptxas kernel.ptx, line 3; error   : Unknown symbol 'x'"
    monkeypatch.setenv("PTXGEN_PTXAS", str(fake_tool(clean / "mine", script=f'echo "{said}"; exit 255')))
    with pytest.raises(toolchain.PtxasError, match="ptxas rejected the PTX for sm_75") as info:
        toolchain.assemble(PTX, "sm_75")
    assert said in info.value.log


def test_the_real_ptxas_refusing_bad_ptx_is_a_refusal():
    with pytest.raises(toolchain.PtxasError) as info:
        toolchain.assemble(PTX + ".visible .entry f() { bogus; ret; }\n", "sm_75")
    assert "Not a name of any known instruction: 'bogus'" in info.value.log


def test_a_tool_that_prints_a_lot_is_cut_to_its_last_lines(clean, monkeypatch):
    monkeypatch.setenv(
        "PTXGEN_PTXAS",
        str(
            fake_tool(
                clean / "mine", script="i=0; while [ $i -lt 100 ]; do i=$((i + 1)); echo $i; done; exit 3"
            )
        ),
    )
    with pytest.raises(toolchain.ToolFailed) as info:
        toolchain.assemble(PTX, "sm_75")
    lines = str(info.value).splitlines()
    assert "(its last 20 lines)" in lines[0] and lines[1:] == [f"  {n}" for n in range(81, 101)]


# --- tool_version --------------------------------------------------------------------


def test_the_version_of_the_installed_tools():
    for name in ("ptxas", "nvdisasm"):
        assert re.fullmatch(r"\d+\.\d+\.\d+", toolchain.tool_version(toolchain.locate_tool(name)))


def test_a_version_in_another_format_is_its_first_line(clean):
    tool = toolchain.ToolLocation("ptxas", fake_tool(clean / "mine", script="echo; echo my ptxas 1"), "test")
    assert toolchain.tool_version(tool) == "my ptxas 1"


@pytest.mark.parametrize(
    "script, how",
    [
        ("echo broken >&2; exit 1", "exited with status 1 when asked for --version; it printed:\n  broken"),
        (f"exec {shutil.which('sleep')} 5", "did not finish within 0.5 s"),  # the tests' PATH is empty
    ],
)
def test_a_tool_that_does_not_answer_version_is_a_tool_failure(clean, script, how):
    tool = toolchain.ToolLocation("nvdisasm", fake_tool(clean / "mine", "nvdisasm", script=script), "test")
    with pytest.raises(toolchain.ToolFailed) as info:
        toolchain.tool_version(tool, timeout=0.5)
    assert str(info.value) == f"nvdisasm could not be run: {tool.path} (test) {how}"


@pytest.mark.parametrize(
    "script",
    ["exit 1", "echo 'not what ptxas says'; exit 2", "kill -SEGV $$", "echo fake"],
)
def test_cli_check_tells_a_broken_ptxas_from_a_refusal(tmp_path, script):
    tool = fake_tool(tmp_path / "mine", script=script)
    env = {**os.environ, "PTXGEN_PTXAS": str(tool)}
    out = subprocess.run(
        [sys.executable, "-m", "ptxgen", "channel_cat_backward", "--check", "-o", str(tmp_path / "k.ptx")],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith(f"ptxgen: error: ptxas could not be run: {tool} (PTXGEN_PTXAS) ")
    assert "rejected" not in out.stderr
