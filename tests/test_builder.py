"""The typed PTX builder: refuses what ptxas would refuse, renders readable text, and
offers the structure (vectors, shared arrays, loops, predicated blocks) fast kernels need."""

from __future__ import annotations

import re

import pytest

from ptxgen import toolchain
from ptxgen.function import PtxModule
from ptxgen.ptxtypes import SPECIAL_REGS, Addr, Pair, PtxTargetError, PtxTypeError, Sink, Vec


def fn(target: str = "sm_90", version: str | None = None):
    return PtxModule(target, ptx_version=version).func("f")


def test_well_typed_instructions_render_in_columns():
    f = fn()
    a, b = f.reg("a", "u32"), f.reg("b", "u32")
    wide, addr = f.reg("wide", "u64"), f.reg("addr", "u64")
    f.banner("load and add")
    f.inst("mov.u32", a, SPECIAL_REGS["ctaid.x"], comment="which CTA")
    f.inst("add.u32", b, a, 7, comment="plus seven")
    f.inst("mad.wide.u32", wide, a, b, addr, comment="a * b + addr")
    f.inst("ret")
    text = f.render()
    assert "    // --- load and add ---" in text
    assert ".reg .u32 %a, %b;" in text
    assert ".reg .u64 %wide, %addr;" in text
    comment_columns = {line.index("//") for line in text.splitlines() if "//" in line and "---" not in line}
    assert len(comment_columns) == 1, text
    instructions = [line for line in text.splitlines() if re.match(r"    [a-z]", line) and "%" in line]
    assert len({line.index("%") for line in instructions}) == 1, text


def regs(f):
    return {
        "a32": f.reg("a32", "u32"),
        "b32": f.reg("b32", "u32"),
        "d64": f.reg("d64", "u64"),
        "f": f.reg("f", "f32"),
        "p": f.reg("p", "pred"),
        "w": f.reg("w", "b32"),
    }


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda f, r: f.inst("add.u32", r["d64"], r["a32"], r["b32"]), "needs .u32"),
        (lambda f, r: f.inst("mad.wide.u32", r["a32"], r["a32"], r["b32"], r["d64"]), "needs .u64"),
        (lambda f, r: f.inst("mad.wide.u32", r["d64"], r["a32"], r["b32"], r["a32"]), "needs .u64"),
        (lambda f, r: f.inst("mul.wide.u64", r["d64"], r["d64"], r["d64"]), ".wide needs a 16- or 32-bit"),
        (lambda f, r: f.inst("ld.global.f32", r["f"], Addr(r["a32"])), "not 64-bit"),
        (lambda f, r: f.inst("st.global.f32", Addr(r["d64"]), r["a32"]), "needs .f32"),
        (lambda f, r: f.inst("add.u32", r["a32"], r["b32"], 1 << 32), "does not fit"),
        (lambda f, r: f.inst("add.u32", 5, r["b32"], 1), "expected a register"),
        (lambda f, r: f.inst("add.u32", r["a32"], r["b32"]), "takes 3 operands"),
        (lambda f, r: f.inst("frobnicate.u32", r["a32"]), "does not know the opcode"),
        (lambda f, r: f.inst("add.u32", r["a32"], SPECIAL_REGS["tid.x"], 1), "with mov first"),
        (lambda f, r: f.inst("setp.ge.u32", r["a32"], r["a32"], r["b32"]), "needs .pred"),
        (lambda f, r: f.inst("setp.lt.b32", r["p"], r["w"], r["w"]), "compare with .eq or .ne only"),
        (lambda f, r: f.inst("st.global.nc.f32", Addr(r["d64"]), r["f"]), "st takes no qualifier .nc"),
        (lambda f, r: f.inst("ld.shared.nc.f32", r["f"], Addr(r["d64"])), ".nc is only for ld.global"),
        (lambda f, r: f.inst("ld.f32", r["f"], Addr(r["d64"])), "needs a space qualifier"),
        (lambda f, r: f.inst("bra", r["a32"]), "expected a label"),
        (lambda f, r: f.inst("add.u32", r["a32"], r["a32"], 1, guard=r["a32"]), "not .pred"),
        (lambda f, r: f.inst("add.f32", r["f"], r["f"], 1.5), "add takes no qualifier .f32"),
        # the two mistakes a contributor made with the old string builder
        (lambda f, r: f.inst("ld.global.v4.b32", r["w"], Addr(r["d64"])), ".v4 needs a vector of 4 registers"),
        (lambda f, r: f.inst("ld.global.v4.nc.b32", r["w"], Addr(r["d64"])), ".nc is out of order"),
        (lambda f, r: f.inst("ld.global.nc.v4.v2.b32", r["w"], Addr(r["d64"])), ".v2 repeats the vec qualifier"),
        (lambda f, r: f.inst("ld.global.v4.b64", r["d64"], Addr(r["d64"])), "at most 128 bits"),
        (lambda f, r: f.inst("ld.global.cs.L1::no_allocate.b32", r["w"], Addr(r["d64"])), "exclude each other"),
        (lambda f, r: f.inst("ld.shared.L2::128B.b32", r["w"], Addr(r["d64"])), "global state space only"),
        (lambda f, r: f.inst("st.global.b32", Addr(r["d64"]), r["d64"]), "needs .b32"),
        (lambda f, r: f.inst("cp.async.bulk.global.global.bulk_group", Addr(r["d64"]), Addr(r["d64"]), r["a32"]), "reads .shared::cta"),
        (lambda f, r: f.inst("mbarrier.arrive.shared.b64", r["a32"], Addr(r["d64"])), "needs .b64"),
        (lambda f, r: f.inst("add.u32", Sink(), r["a32"], r["b32"]), "_ is not accepted here"),
        (lambda f, r: f.inst("elect.sync", r["p"], 0xFFFFFFFF), "expected Pair"),
    ],
)  # fmt: skip
def test_ill_typed_instructions_are_refused(build, message):
    f = fn()
    with pytest.raises(PtxTypeError, match=re.escape(message)):
        build(f, regs(f))


@pytest.mark.parametrize(
    "target, version, opcode, message",
    [
        ("sm_75", None, "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes",
         "cp.async.bulk needs sm_90 or newer (PTX ISA 8.0); this module targets sm_75"),
        ("sm_89", None, "elect.sync", "elect.sync needs sm_90 or newer"),
        ("sm_75", None, "ld.global.L2::256B.b32", ".L2::256B needs sm_80 or newer"),
        ("sm_90", "7.8", "fence.proxy.async", "fence.proxy.async needs PTX ISA 8.0; this module is fixed at 7.8"),
        ("sm_90", "8.2", "ld.global.b128", ".b128 needs PTX ISA 8.3; this module is fixed at 8.2"),
    ],
)  # fmt: skip
def test_what_the_target_cannot_run_is_refused_at_build_time(target, version, opcode, message):
    f = fn(target, version)
    with pytest.raises(PtxTargetError, match=re.escape(message)):
        f.inst(opcode)  # refused for the target before the operands are even looked at


def test_the_module_version_rises_to_what_is_used():
    module = PtxModule("sm_90")
    f = module.entry("k")
    assert module.version == "7.8"
    addr, value = f.reg("addr", "u64"), f.reg("value", "b128")
    assert module.version == "8.3"  # a 128-bit register needs PTX ISA 8.3
    f.inst("ld.global.nc.b128", value, Addr(addr))
    f.inst("ret")
    assert ".version 8.3\n.target sm_90" in module.render()
    assert toolchain.assemble(module.render(), "sm_90")


def test_vectors_and_8_bit_registers():
    f = fn()
    addr = f.reg("addr", "u64")
    lanes = f.vec("word", "b32", 4)
    assert str(lanes) == "{%word0, %word1, %word2, %word3}"
    f.inst("ld.global.nc.L1::no_allocate.v4.b32", lanes, Addr(addr, 16))
    f.inst("st.global.cs.v4.b32", Addr(addr), lanes)
    byte = f.reg("byte", "b8")  # PTX has 8-bit registers
    f.inst("ld.global.b8", byte, Addr(addr))
    half = f.reg("half", "b16")  # and 8-bit loads may land in wider ones
    f.inst("ld.global.nc.u8", half, Addr(addr))
    with pytest.raises(PtxTypeError, match="share one type"):
        Vec((lanes.regs[0], half))
    with pytest.raises(PtxTypeError, match=re.escape("a vector operand needs .v2 in the opcode")):
        f.inst("ld.global.b32", f.vec("pair", "b32", 2), Addr(addr))
    assert "ld.global.nc.L1::no_allocate.v4.b32  {%word0, %word1, %word2, %word3}, [%addr+16];" in f.render()


def test_register_names_deduplicate():
    f = fn()
    assert str(f.reg("value", "u32")) == "%value"
    assert str(f.reg("value", "u32")) == "%value_1"
    assert str(f.reg("value", "f32")) == "%value_2"
    assert str(f.label("done")) == "done" and str(f.label("done")) == "done_1"
    with pytest.raises(ValueError, match="shadow the special register"):
        f.reg("tid", "u32")
    with pytest.raises(ValueError, match="not a PTX identifier"):
        f.reg("1x", "u32")
    with pytest.raises(PtxTypeError, match=re.escape("unknown type .u7")):
        f.reg("x", "u7")


def test_registers_of_another_function_are_refused():
    module = PtxModule("sm_75")
    f, g = module.func("f"), module.func("g")
    a = f.reg("a", "u32")
    with pytest.raises(PtxTypeError, match="not declared in g"):
        g.inst("add.u32", a, a, 1)


def test_labels_must_be_placed_once():
    f = fn()
    done = f.label("done")
    f.inst("bra", done)
    with pytest.raises(ValueError, match="never placed"):
        f.render()
    f.place(done)
    with pytest.raises(ValueError, match="placed twice"):
        f.place(done)


def test_shared_arrays_param_arrays_and_the_async_proxy():
    module = PtxModule("sm_90")
    k = module.entry("copy_entry_point")
    table = k.param_array("table", 32, align=8, comment="two pointers and two sizes")
    tile = k.shared("tile", 4096, align=128)
    barrier = k.shared("barrier", 8, align=8)
    src, size = k.reg("src", "u64"), k.reg("size", "u32")
    k.inst("ld.param.u64", src, Addr(table, 8))
    k.inst("ld.param.u32", size, Addr(table, 16))
    with pytest.raises(PtxTypeError, match="out of range or not aligned"):
        k.inst("ld.param.u64", src, Addr(table, 28))
    tile_addr = k.reg("tile_addr", "u32")
    k.inst("mov.u32", tile_addr, tile, comment="the tile's shared-window address")
    leader = k.reg("leader", "pred")
    k.inst("elect.sync", Pair(Sink(), leader), 0xFFFFFFFF)
    with k.when(leader):
        k.inst("mbarrier.init.shared::cta.b64", Addr(barrier), 1)
        k.inst("fence.proxy.async.shared::cta")
        k.inst("mbarrier.arrive.expect_tx.shared::cta.b64", Sink(), Addr(barrier), size)
        k.inst("cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes",
               Addr(tile_addr), Addr(src), size, Addr(barrier))  # fmt: skip
    k.inst("ret")
    text = module.render()
    assert ".param .align 8 .b8 table[32]  // two pointers and two sizes" in text
    assert ".shared .align 128 .b8 tile[4096];" in text
    assert module.version == "8.6"  # .shared::cta as a bulk-copy destination
    assert toolchain.assemble(text, "sm_90")


def test_predicated_blocks_render_as_labelled_branches():
    f = fn()
    p, x = f.reg("past_end", "pred"), f.reg("x", "u32")
    with f.unless(p, label="done"):
        f.inst("add.u32", x, x, 1)
    with f.when(p):
        f.inst("sub.u32", x, x, 1)
    f.inst("ret")
    body = [" ".join(line.split()) for line in f.render().splitlines()]
    assert body[body.index("@%past_end bra done;") + 1 :][:2] == ["add.u32 %x, %x, 1;", "done:"]
    assert "@!%past_end bra skip;" in body and "skip:" in body


def test_counted_and_unrolled_loops_assemble_and_count_right():
    module = PtxModule("sm_80")
    k = module.entry("count_entry_point")
    out = k.param("out", "u64")
    n = k.param("n", "u32")
    addr, count, i, limit = k.reg("out", "u64"), k.reg("count", "u32"), k.reg("i", "u32"), k.reg("n", "u32")
    k.inst("ld.param.u64", addr, Addr(out))
    k.inst("ld.param.u32", limit, Addr(n))
    k.inst("mov.u32", count, 0)
    k.inst("mov.u32", i, 0)
    bodies = []

    def body(index):
        bodies.append(str(index))
        k.inst("add.u32", count, count, 1)

    k.unrolled_loop(i, limit, 3, body, unroll=4, name="row")
    k.inst("st.global.u32", Addr(addr), count)
    k.inst("ret")
    text = module.render()
    # four bodies in the unrolled pass (at i, i+3, i+6, i+9), one in the remainder loop
    assert bodies == ["%i", "%row_at", "%row_at_1", "%row_at_2", "%i"]
    assert "row_x4:" in text and "row_rest:" in text and "@%row_more bra" in text
    assert toolchain.assemble(text, "sm_80")


def test_directives_and_parameter_kinds():
    module = PtxModule("sm_75")
    e = module.entry("k")
    e.directive(".reqntid", 128, 1, 1)
    with pytest.raises(ValueError, match="unknown directive"):
        e.directive(".reqntidd", 1)
    with pytest.raises(PtxTypeError, match="no parameter type"):
        e.param("p", "pred")
    with pytest.raises(ValueError, match=re.escape("belong to an .entry")):
        module.func("g").param("x", "u32")
    with pytest.raises(ValueError, match="already in this module"):
        module.entry("k")


def test_entry_parameters_and_call():
    module = PtxModule("sm_75")
    body = module.func("f")
    x = body.reg_param("x", "u64")
    body.inst("ret")
    entry = module.entry("e")
    p = entry.param("x", "u64", comment="the pointer")
    r = entry.reg("x", "u64")
    entry.inst("ld.param.u64", r, Addr(p))
    entry.call(body, [r])
    with pytest.raises(PtxTypeError, match="takes 1 arguments"):
        entry.call(body, [r, r])
    with pytest.raises(PtxTypeError, match=re.escape("parameter x is .u64, not 4 bytes")):
        entry.inst("ld.param.u32", entry.reg("y", "u32"), Addr(p))
    text = entry.render()
    assert ".param .u64 x  // the pointer" in text
    assert re.search(r"^    call\.uni +f, \(%x\);$", text, re.M)
    assert str(x) == "%x"


def test_module_header():
    module = PtxModule("sm_90", comment=["hello"])
    assert module.header().splitlines() == [
        "//",
        "// hello",
        "//",
        ".version 7.8",
        ".target sm_90",
        ".address_size 64",
    ]
    with pytest.raises(PtxTargetError, match=re.escape("PTX ISA 7.0 cannot name .target sm_90 (needs 7.8)")):
        PtxModule("sm_90", ptx_version="7.0")
