"""Every row of the instruction table, proved with ptxas.

For each qualifier choice of each family (tests/isa_probes.py builds one probe kernel
apiece), at the lowest target and PTX ISA the table gives it:
  - the builder emits it and ptxas assembles it;
  - one PTX ISA step below (where that is above the target's own floor) and on the next
    lower target (where the SM need is above the table's lowest), the builder refuses it,
    and so does ptxas, so the table's minimum is exact rather than merely safe.
"""

from __future__ import annotations

import re

import pytest
from isa_probes import probe_source, probes

from ptxgen import isa, toolchain
from ptxgen.ptxtypes import PtxTargetError

PROBES = probes()


@pytest.fixture(scope="module")
def assembled():
    try:
        toolchain.find_tool("ptxas")
    except toolchain.ToolNotFound as err:
        pytest.fail(f"{err} (it is part of the test extra: pip install -e '.[test]')")
    jobs, keys = [], []
    for p in PROBES:
        source = probe_source(p.opcode, p.target, p.version)
        jobs.append((source, p.target))
        keys.append((p.opcode, "at minimum"))
        if p.isa_below:
            jobs.append((re.sub(r"^\.version .*$", f".version {p.isa_below}", source, flags=re.M), p.target))
            keys.append((p.opcode, "isa below"))
        if p.target_below:
            jobs.append(
                (re.sub(r"^\.target .*$", f".target {p.target_below}", source, flags=re.M), p.target_below)
            )
            keys.append((p.opcode, "target below"))
    return dict(zip(keys, toolchain.assemble_many(jobs)))


def test_every_family_and_qualifier_is_probed():
    probed = {isa.parse(p.opcode).family.opcode for p in PROBES}
    assert probed == set(isa.FAMILIES)
    for family in isa.FAMILIES.values():
        used = {
            q.name
            for p in PROBES
            if isa.parse(p.opcode).family is family
            for q in isa.parse(p.opcode).chosen.values()
        }
        every = {q.name for g in family.groups for q in g.choices}
        assert used == every, (family.opcode, every - used)


def test_the_families_the_fast_kernels_need_are_in_the_table():
    for opcode in ("ld", "st", "cvta", "mov", "add", "mul", "mad", "shf", "prmt", "bfe", "setp", "selp", "bra",
                   "bar", "mbarrier.init", "mbarrier.arrive.expect_tx", "mbarrier.try_wait.parity", "cp.async",
                   "cp.async.bulk", "cp.async.bulk.commit_group", "fence.proxy.async", "elect.sync",
                   "vote.sync", "griddepcontrol"):  # fmt: skip
        assert opcode in isa.FAMILIES


@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.opcode)
def test_row_assembles_at_its_minimum(assembled, probe):
    result = assembled[(probe.opcode, "at minimum")]
    assert not isinstance(result, Exception), (
        f"{probe.opcode} at {probe.target} / PTX ISA {probe.version}: {result}"
    )


@pytest.mark.parametrize("probe", [p for p in PROBES if p.isa_below], ids=lambda p: p.opcode)
def test_row_is_refused_one_isa_step_below(assembled, probe):
    with pytest.raises(PtxTargetError, match=re.escape(f"needs PTX ISA {probe.version}")):
        probe_source(probe.opcode, probe.target, probe.isa_below)
    ptxas = assembled[(probe.opcode, "isa below")]
    assert isinstance(ptxas, toolchain.PtxasError), f"ptxas takes {probe.opcode} at ISA {probe.isa_below} too"


@pytest.mark.parametrize("probe", [p for p in PROBES if p.target_below], ids=lambda p: p.opcode)
def test_row_is_refused_one_target_below(assembled, probe):
    with pytest.raises(PtxTargetError, match=f"this module targets {probe.target_below}"):
        probe_source(probe.opcode, probe.target_below)
    ptxas = assembled[(probe.opcode, "target below")]
    assert isinstance(ptxas, toolchain.PtxasError), f"ptxas takes {probe.opcode} on {probe.target_below} too"
