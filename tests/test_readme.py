"""The README's set-up commands: exactly two, each making and using a virtual
environment, and CI runs the test command exactly as written."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT


def setup_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)\n```", section, flags=re.S)


def test_two_commands_each_in_a_virtual_environment():
    commands = setup_commands()
    assert len(commands) == 2
    for command in commands:
        assert "\n" not in command
        # A Debian/Ubuntu system Python refuses pip outside a venv (PEP 668).
        assert command.startswith("python3 -m venv .venv && .venv/bin/pip install -e '.[")
        assert " pip " not in f" {command} ".replace(".venv/bin/pip", "")


def test_the_emitter_needs_no_dependencies_and_the_runtime_is_an_extra():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["dependencies"] == []
    extras = project["optional-dependencies"]
    assert {"cuda-bindings", "numpy"} <= {re.split(r"[<>=\[ ]", d)[0] for d in extras["runtime"]}
    assert "ptxgen[runtime,tools]" in extras["test"]
    assert ".[runtime,tools]" in setup_commands()[0]


def test_ci_runs_the_readme_test_command_as_written():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert setup_commands()[1] in ci
