"""Programmatic dependent launch without a GPU: every fast kernel family builds a
``dependent_launch`` variant whose threads wait (``griddepcontrol.wait``, SASS
``ACQBULK``) before their first global access, the planner picks them on sm_90 only,
refusals name the value, and the bundle manifest says so."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from launch_util import RecordingBinding
from ptxsim import Memory, run_kernel
from test_runtime_cpu import function_for

import ptxgen
from ptxgen import toolchain
from ptxgen.function import PtxModule
from ptxgen.kernel import PtxKernel
from ptxgen.kernels import FastcatRect, FastcatRowpack, FastcatTile, FastcatVec
from ptxgen.kernels.fastcat_common import DEPENDENT_TRIGGER_CTAS, emit_dependent_launch
from runtime.layout import ArgumentLayout
from runtime.plan import DeviceTraits, Problem, make_plan

FAMILIES = [
    (FastcatVec, {"direction": "backward", "width": 16}),
    (FastcatVec, {"direction": "forward", "width": 1, "chunks": 3}),
    (FastcatRect, {"direction": "backward", "width": 8, "cols": 64, "chunks": 2}),
    (FastcatRect, {"direction": "forward", "width": 16, "cols": 32}),
    (FastcatTile, {"direction": "backward", "chunks": 2, "granule": 1, "loader": "regs"}),
    (FastcatTile, {"direction": "backward", "chunks": 1, "granule": 2, "loader": "bulk"}),
    (FastcatTile, {"direction": "forward", "chunks": 3, "granule": 4, "loader": "cp.async"}),
    (FastcatRowpack, {"direction": "backward", "widths": (1, 3), "staged": True, "outputs": (1,)}),
    (FastcatRowpack, {"direction": "forward", "widths": (3, 5)}),
]
IDS = [f"{cls.__name__}-{'-'.join(map(str, spec.values()))}" for cls, spec in FAMILIES]
GLOBAL_PTX = re.compile(r"^\s*(@\S+\s+)?(ld\.global|st\.global|cp\.async)", re.M)
GLOBAL_SASS = re.compile(r"\b(LDG|STG|LDGSTS|UBLKCP|LDGDEPBAR)\b")


def _have(tool: str) -> bool:
    try:
        toolchain.find_tool(tool)
    except toolchain.ToolNotFound:
        return False
    return True


@pytest.mark.parametrize("cls, spec", FAMILIES, ids=IDS)
def test_every_family_waits_before_its_first_global_access(cls, spec):
    plain, dependent = cls(**spec), cls(**spec, dependent_launch=True)
    assert dependent.id == plain.id.replace("__sm_90", "__pdl__sm_90")
    assert dependent.dependent_launch and not plain.dependent_launch
    assert (dependent.arg_names, dependent.arg_types, dependent.block) == (
        plain.arg_names,
        plain.arg_types,
        plain.block,
    )
    ptx = dependent.source
    assert "griddepcontrol" not in plain.source
    wait = ptx.index("griddepcontrol.wait;")
    assert ptx.index("griddepcontrol.launch_dependents;") < wait
    assert wait < GLOBAL_PTX.search(ptx).start(), "a global access comes before the wait"
    assert float(dependent.ptx_version) >= 7.8  # griddepcontrol's minimum, from the ISA table


@pytest.mark.skipif(not (_have("ptxas") and _have("nvdisasm")), reason="ptxas/nvdisasm not installed")
@pytest.mark.parametrize("cls, spec", FAMILIES, ids=IDS)
def test_the_wait_comes_first_in_sass_and_costs_no_registers(cls, spec):
    plain, dependent = cls(**spec), cls(**spec, dependent_launch=True)
    built = toolchain.assemble(dependent.source, dependent.target)
    sass = toolchain.disassemble(built.cubin)
    wait = sass.index("ACQBULK")
    assert re.search(r"@P\d PREEXIT", sass[:wait]), "only the tail CTAs trigger, before the wait"
    assert wait < GLOBAL_SASS.search(sass).start(), "ptxas moved a global access above the wait"
    (resources,) = built.functions.values()
    (before,) = toolchain.assemble(plain.source, plain.target).functions.values()
    assert resources.registers <= before.registers  # ptxas found room for the prologue
    assert resources.spill_store_bytes == before.spill_store_bytes


def test_refusals_name_the_value():
    with pytest.raises(ValueError, match=r"dependent_launch=True needs sm_90 or newer.*not sm_80"):
        FastcatVec(direction="backward", width=16, target="sm_80", dependent_launch=True)
    with pytest.raises(ValueError, match=r"dependent_launch = 1 is not accepted; accepted: True, False"):
        FastcatRect(direction="backward", width=16, cols=32, dependent_launch=1)
    assert not FastcatVec(direction="backward", width=16, target="sm_80").dependent_launch


def test_the_interpreter_catches_a_memory_access_before_the_wait():
    """The check test_fastcat_plans relies on: moved below the copy, the wait is late."""
    kernel = FastcatVec(direction="backward", width=4, dependent_launch=True)
    late = kernel.source.replace("    griddepcontrol.wait;", "", 1).replace(
        "    ret;", "    griddepcontrol.wait;\n    ret;"
    )
    assert late != kernel.source
    moved = PtxKernel(kernel.name, late, kernel.arg_names, kernel.arg_types, kernel.block)
    moved.block_size = kernel.block_size  # what the interpreter runs
    rows, pitch = 3, 16
    for source in (kernel, moved):
        mem = Memory()
        dy, dx = mem.alloc(rows * pitch), mem.alloc(rows * 8)
        args = {"row_base": dy + 4, "row_pitch": pitch, "rows": rows, "window_vectors": 2,
                "chunk0_ptr": dx, "chunk0_pitch": 8}  # fmt: skip
        if source is kernel:
            run_kernel(source, 1, args, mem)
        else:
            with pytest.raises(RuntimeError, match=r"before griddepcontrol\.wait"):
                run_kernel(source, 1, args, mem)


def test_the_planner_builds_dependent_kernels_on_sm_90_only(monkeypatch):
    f32 = ptxgen.resolve_dtype("f32")
    problem = Problem("backward", f32, 997, (64, 64))
    on = make_plan(problem, DeviceTraits(arch="sm_90")).steps
    assert on and all(s.kernel.dependent_launch for s in on)
    off = make_plan(problem, DeviceTraits(arch="sm_90", dependent_launch=False)).steps
    assert [s.kernel.id for s in off] == [s.kernel.id.replace("__pdl", "") for s in on]
    older = make_plan(problem, DeviceTraits(arch="sm_80")).steps
    assert older and not any(s.kernel.dependent_launch for s in older)

    device = SimpleNamespace(
        ordinal=0, arch="sm_90", max_grid=(2**31 - 1, 65535, 65535), max_shared_memory_per_block=227 * 1024
    )
    assert DeviceTraits.of(device).dependent_launch
    for off in ("0", "off", "False"):
        monkeypatch.setenv("PTXGEN_DEPENDENT_LAUNCH", off)
        assert not DeviceTraits.of(device).dependent_launch


def _prologue_kernel() -> PtxKernel:
    """The prologue alone, in a kernel of one thread a CTA (the interpreter runs it fast)."""
    module = PtxModule("sm_90")
    fn = module.entry("prologue_entry_point")
    emit_dependent_launch(fn)
    fn.inst("ret")
    kernel = PtxKernel("prologue", module.render(), (), (), 1)
    kernel.block_size = 1
    return kernel


@pytest.mark.parametrize("grid", [(1,), (100,), (1000,), (300, 2), (7, 50), (1, 600)])
def test_the_last_ctas_in_launch_order_trigger(grid):
    """Every CTA issuing the trigger doubled a 32,768-CTA grid's time on an H200; the last
    DEPENDENT_TRIGGER_CTAS in launch order (x fastest, then y) issue it, on 2-D grids too."""
    triggers: list = []
    run_kernel(_prologue_kernel(), grid, {}, Memory(), triggers)
    nx = grid[0]
    total = nx * (grid[1] if len(grid) > 1 else 1)
    order = sorted(c[1] * nx + c[0] for c in triggers)
    assert order == list(range(max(0, total - DEPENDENT_TRIGGER_CTAS), total))


def test_the_launcher_sends_every_launch_of_a_dependent_kernel_with_the_attribute():
    """First launch, repeats, a new grid, prepared and raw launches: all through
    cuLaunchKernelEx with a config made with the attribute; a binding without the Ex
    call launches plainly and says so."""
    kernel = FastcatVec(direction="backward", width=4, dependent_launch=True)
    binding = RecordingBinding(ArgumentLayout(kernel.arg_names, kernel.arg_types), ex=True)
    fn = function_for(kernel, binding)
    assert fn.launcher.dependent_launch
    args = (0x1000, 64, 9, 4, 0x9000, 16)
    grid, block = (4, 1, 1), kernel.block
    for _ in range(3):
        fn.launch(grid, block, args, stream=77)
    fn.launch((8, 1, 1), block, args, stream=77)
    prepared = fn.prepare(grid, block, stream=77)
    prepared(*args)
    prepared.raw(*args)
    assert [c.via for c in binding.calls] == ["cuLaunchKernelEx"] * 6
    assert binding.dependent_configs == 3  # the first geometry, the new grid, the prepared launch
    plain = RecordingBinding(ArgumentLayout(kernel.arg_names, kernel.arg_types), ex=False)
    fn = function_for(kernel, plain)
    assert not fn.launcher.dependent_launch
    fn.launch(grid, block, args, stream=77)
    assert [c.via for c in plain.calls] == ["cuLaunchKernel"]
    seed_kernel = ptxgen.ChannelCatBackward("f32", 128)
    seed = function_for(
        seed_kernel, RecordingBinding(ArgumentLayout(seed_kernel.arg_names, seed_kernel.arg_types), ex=True)
    )
    assert not seed.launcher.dependent_launch


def test_the_bundle_manifest_says_which_kernels_are_dependent():
    from ptxgen.bundle import manifest

    kernels = [
        FastcatVec(direction="backward", width=16),
        FastcatVec(direction="backward", width=16, dependent_launch=True),
    ]
    entries = manifest(kernels)["kernels"]
    assert "dependent_launch" not in entries[0]
    assert entries[1]["dependent_launch"] is True
    schema = json.loads(
        (Path(__file__).resolve().parent.parent / "docs" / "bundle-manifest.schema.json").read_text()
    )
    assert schema["$defs"]["kernel"]["properties"]["dependent_launch"]["const"] is True
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is part of the test extra")
    jsonschema.Draft202012Validator(schema).validate(manifest(kernels))
