"""Where ptxas and nvdisasm are found: an explicit setting, NVIDIA's wheel, a CUDA
toolkit, then PATH. Each step is tested with fake executables in temporary folders,
so the machine's own tools (this one may have a toolkit in /usr/local/cuda) never
decide the outcome."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from ptxgen import toolchain


def fake_tool(folder: Path, name: str = "ptxas", executable: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\necho fake\n")
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
    with pytest.raises(toolchain.ToolNotFound, match=r"ptxas could not be run: Exec format error"):
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
