"""docs/tutorial.md says what the tools do: its SASS listing is nvdisasm's complete
output today, and its note on 8-bit registers is what ptxas accepts. Every file it
names exists."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import ROOT

from ptxgen import toolchain


def test_the_sass_listing_is_the_tools_current_output():
    out = subprocess.run(
        [sys.executable, "scripts/tutorial_sass.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    if out.returncode == 2:
        pytest.skip(out.stderr.strip())  # another ptxas version makes other SASS
    assert out.returncode == 0, out.stderr


def test_every_path_the_tutorial_names_exists():
    text = (ROOT / "docs" / "tutorial.md").read_text()
    named = set(re.findall(r"(?<![\w./-])(?:ptxgen|runtime|docs|scripts|tests|examples)/[\w./-]*\w", text))
    linked = {
        f"docs/{target}"
        for target in re.findall(r"\]\(([^)#]+)", text)
        if not re.match(r"[a-z]+:", target)  # links are relative to docs/
    }
    assert "ptxgen/kernels/channel_cat.py" in named  # the pattern finds what it should
    missing = sorted(path for path in named | linked if not (ROOT / path).exists())
    assert not missing, f"docs/tutorial.md names files that do not exist: {missing}"


BYTE_COPY = """\
.version 6.3
.target sm_75
.address_size 64
.visible .entry k(.param .u64 a, .param .u64 b)
{{
    .reg .b8 %v, %w;
    .reg .u16 %h;
    .reg .u64 %pa, %pb;
    ld.param.u64 %pa, [a];
    ld.param.u64 %pb, [b];
    ld.global.nc.b8 %v, [%pa];
    {line}
    st.global.b8 [%pb], %v;
    ret;
}}
"""


@pytest.mark.parametrize(
    "line, accepted",
    [
        ("", True),  # 8-bit registers exist: ld and st take them
        ("cvt.u16.u8 %h, %v;", True),
        ("mov.b8 %w, %v;", False),
        ("mov.u8 %w, %v;", False),
        ("add.u8 %w, %v, %v;", False),
    ],
)
def test_what_ptxas_accepts_of_8_bit_registers(line, accepted):
    source = BYTE_COPY.format(line=line)
    if accepted:
        toolchain.assemble(source, "sm_75")
    else:
        with pytest.raises(toolchain.PtxasError, match="Unexpected instruction types"):
            toolchain.assemble(source, "sm_75")
