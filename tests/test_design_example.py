"""The example kernel of docs/design.md ("Writing a new kernel"), run exactly as printed there."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

import ptxgen
from ptxgen import toolchain

DESIGN = ROOT / "docs" / "design.md"


def example_class():
    text = DESIGN.read_text()
    match = re.search(r"<!-- example: reverse_words -->\n```python\n(.*?)```", text, re.S)
    assert match, "docs/design.md lost its example block"
    namespace: dict = {}
    exec(compile(match.group(1), str(DESIGN), "exec"), namespace)
    return namespace["ReverseWords"]


def test_the_example_is_short_and_a_kernel():
    code = re.search(r"<!-- example: reverse_words -->\n```python\n(.*?)```", DESIGN.read_text(), re.S).group(
        1
    )
    assert len(code.splitlines()) <= 50
    k = example_class()(words=64, block_size=32)
    assert isinstance(k, ptxgen.Kernel) and k.id == "reverse_words__64__32"
    assert "ld.global.nc.v4.b32" in k.source and ".shared .align 16 .b8 tile[1024];" in k.source
    # the design doc shows the PTX of its default instance, as emitted
    default = example_class()().entry_point_source
    excerpt = default[default.index("    // --- stage the row") :]
    assert excerpt in DESIGN.read_text()


@pytest.mark.parametrize("target", ["sm_75", "sm_90"])
def test_the_example_assembles_to_128_bit_accesses(target):
    k = example_class()(target=target)
    result = toolchain.assemble(k.source, target)
    (resources,) = result.functions.values()
    assert resources.spill_store_bytes == 0 and resources.stack_bytes == 0
    sass = toolchain.disassemble(result.cubin)
    assert "LDG.E.128.CONSTANT" in sass and "STG.E.128" in sass
    assert "STS.128" in sass and re.search(r"LDS(\.U)?\.128", sass) and "BAR.SYNC" in sass


@pytest.mark.gpu
def test_the_example_runs_on_the_gpu(dev):
    np = pytest.importorskip("numpy")
    guard = 96  # canary words on each side: a multiple of 4, so out stays 16-byte aligned

    rng = np.random.default_rng()
    for words, block_size, rows in ((256, 128, 1000), (37, 64, 3), (1, 32, 17)):
        k = example_class()(words=words, block_size=block_size)
        x_host = rng.integers(0, 2**32, (rows, words, 4), dtype=np.uint32)
        x = dev.to_device(x_host)
        out = dev.empty(guard + x_host.size + guard, "u32").fill_bytes(0xA5)
        dev.load(k).function.launch((rows, 1, 1), k.block, (x, out.ptr + guard * 4))
        got = out.to_numpy()
        assert (got[:guard] == 0xA5A5A5A5).all() and (got[-guard:] == 0xA5A5A5A5).all(), "wrote outside out"
        assert np.array_equal(got[guard:-guard].reshape(rows, words, 4), x_host[:, ::-1, :]), (words, rows)
        x.close()
        out.close()
