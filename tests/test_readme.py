"""The README's set-up commands: exactly two, each making and using a virtual
environment, and CI runs the test command exactly as written. What it says of the
installs holds: from a clone, the runtime an extra, the compiled launch's build silent
under pip (doctor says), the first look's needs, and the bundle folder it writes ignored."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT


def section(title: str) -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def setup_commands() -> list[str]:
    return re.findall(r"```sh\n(.*?)\n```", section("Set up"), flags=re.S)


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


def test_the_installs_are_from_a_clone_and_doctor_is_named():
    text = " ".join(section("Set up").split())
    assert "pip install ptxgen" not in (ROOT / "README.md").read_text()  # it is on no package index
    assert "from a clone" in text and "`pip install .` is the emitter" in text
    assert "`pip install -e '.[runtime]'` adds cuda-bindings and numpy" in text
    # pip hides setup.py's output: the README must not promise the install says anything.
    assert "says so and goes on" not in text and "pip hides the build's output" in text
    assert "`python -m ptxgen doctor` says whether the compiled launch was built" in text
    assert "run `python -m ptxgen doctor` first" in text


def test_the_first_look_says_what_it_needs():
    text = section("A first look")
    prose, code = text.split("```python\n", 1)
    assert "import numpy" in code and "import runtime" in code
    assert "the `[runtime]` install (numpy and cuda-bindings)" in " ".join(prose.split())


def test_the_readmes_bundle_folder_is_ignored():
    assert "-o bundle/" in section("Without Python: bundles")
    assert "/bundle/" in (ROOT / ".gitignore").read_text().splitlines()


def test_the_license_is_an_spdx_string_and_the_build_reads_one():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    # The table form ({ text = "MIT" }) makes setuptools warn that builds stop on 2027-02-18.
    assert pyproject["project"]["license"] == "MIT"
    (setuptools,) = [r for r in pyproject["build-system"]["requires"] if r.startswith("setuptools")]
    minimum = re.fullmatch(r"setuptools>=(\d+)(?:\.\d+)*", setuptools)
    assert minimum and int(minimum[1]) >= 77, setuptools  # 77 reads SPDX license expressions
