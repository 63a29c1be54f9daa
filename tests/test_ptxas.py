"""Every kernel, dtype, block size and target assembles with the wheel's ptxas,
with no spills and no stack; the SASS shows the instructions we meant."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

import ptxgen
from ptxgen import toolchain

TARGETS = list(ptxgen.TARGETS)  # every row of the target table
KINDS = {cls.name: cls for cls in (ptxgen.ChannelCatBackward, ptxgen.ChannelCatForward)}
MATRIX = list(itertools.product(KINDS, ptxgen.DTYPES, ptxgen.BLOCK_SIZES, TARGETS))


BATCH = 64  # kernels per ptxas run: one run costs ~35 ms to start, ~6 ms a kernel


def _batched(kernels: list) -> list[tuple[str, str, list[str]]]:
    """Kernels of one target and PTX version, several to a module, each kernel's symbols
    prefixed ``k<i>_`` so they do not clash: ptxas compiles every function on its own, so
    this proves the same code as one run per kernel, six times faster."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, k in enumerate(kernels):
        groups.setdefault((k.target, k.ptx_version), []).append(i)
    jobs = []
    for (target, version), members in groups.items():
        for start in range(0, len(members), BATCH):
            chunk = members[start : start + BATCH]
            parts = [f".version {version}\n.target {target}\n.address_size 64\n"]
            for i in chunk:
                k = kernels[i]
                body = k.source.split(".address_size 64\n", 1)[1]
                parts.append(body.replace(k.name, f"k{i}_{k.name}"))
            jobs.append(("\n".join(parts), target, chunk))
    return jobs


@pytest.fixture(scope="session")
def assembled():
    """All combinations, assembled once in parallel ptxas processes."""
    try:
        toolchain.find_tool("ptxas")
    except toolchain.ToolNotFound as err:
        pytest.fail(f"{err} (it is part of the test extra: pip install -e '.[test]')")
    kernels = [KINDS[k](dt, bs, target=t) for k, dt, bs, t in MATRIX]
    jobs = _batched(kernels)
    found: dict = {}
    for (_, _, chunk), result in zip(jobs, toolchain.assemble_many([(src, t) for src, t, _ in jobs])):
        if isinstance(result, Exception):  # find which kernel: assemble each alone
            singles = toolchain.assemble_many([(kernels[i].source, kernels[i].target) for i in chunk])
            found.update(
                {MATRIX[i]: r if isinstance(r, Exception) else r.functions for i, r in zip(chunk, singles)}
            )
            continue
        for i in chunk:
            prefix = f"k{i}_"
            found[MATRIX[i]] = {
                name[len(prefix) :]: res for name, res in result.functions.items() if name.startswith(prefix)
            }
    return found


def test_ptxas_comes_from_the_installed_wheel():
    path = toolchain.find_tool("ptxas")
    assert "nvidia" in path.parts and path.parent.name == "bin"
    assert toolchain.find_tool("nvdisasm").name == "nvdisasm"


@pytest.mark.parametrize("kernel, dtype, block_size, target", MATRIX)
def test_assembles_without_spills_or_stack(assembled, kernel, dtype, block_size, target):
    functions = assembled[(kernel, dtype, block_size, target)]
    if isinstance(functions, Exception):
        pytest.fail(str(functions))
    entry = f"{kernel}_entry_point"
    # The body is inlined by default, so ptxas drops the unreferenced .func.
    assert set(functions) == {entry}
    for resources in functions.values():
        assert resources.stack_bytes == 0, resources
        assert resources.spill_store_bytes == 0 and resources.spill_load_bytes == 0, resources
    assert 0 < functions[entry].registers <= 32


def sass(kernel: ptxgen.ChannelCatBackward, target: str = "sm_90") -> str:
    return toolchain.disassemble(toolchain.assemble(kernel.source, target).cubin)


def test_sass_of_the_call_based_kernel():
    code = sass(ptxgen.ChannelCatBackward("f32", 128, inline=False))
    assert "CALL.REL.NOINC" in code  # ptxas does not inline the .func
    assert "LDG.E.CONSTANT" in code  # ld.global.nc: the read-only path
    assert "STG.E " in code
    assert "IMAD.WIDE.U32" in code  # 64-bit index arithmetic


def test_sass_of_the_inlined_kernel():
    code = sass(ptxgen.ChannelCatBackward("f32", 128))  # the default
    assert "CALL" not in code
    assert "LDG.E.CONSTANT" in code


@pytest.mark.parametrize(
    "dtype, load", [("u8", "LDG.E.U8.CONSTANT"), ("f16", "LDG.E.U16.CONSTANT"), ("f64", "LDG.E.64.CONSTANT")]
)
def test_sass_load_width_follows_the_dtype(dtype, load):
    assert load in sass(ptxgen.ChannelCatForward(dtype, 64))


def test_ptxas_error_quotes_the_offending_line(tmp_path: Path):
    broken = ptxgen.ChannelCatBackward("f32", 128).source.replace("mad.lo.u64", "mad.lo.u63", 1)
    with pytest.raises(toolchain.PtxasError) as info:
        toolchain.assemble(broken, "sm_90")
    err = info.value
    assert any(line.startswith(">") and "mad.lo.u63" in line for line in err.lines.splitlines()), err.lines
    assert "error" in err.log


def test_parse_resources():
    log = (
        "ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
        "ptxas info    : Function properties for k\n"
        "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 10 registers, used 0 barriers\n"
        "ptxas info    : Function properties for body\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    )
    found = toolchain.parse_resources(log)
    assert found["k"] == toolchain.FunctionResources("k", 8, 4, 4, registers=10)
    assert found["body"].registers is None


def test_missing_tool_is_explained(monkeypatch):
    monkeypatch.setenv("PTXGEN_PTXAS", "/nonexistent/ptxas")
    with pytest.raises(toolchain.ToolNotFound, match="PTXGEN_PTXAS=/nonexistent/ptxas is not a file"):
        toolchain.find_tool("ptxas")
