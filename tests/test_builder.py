"""The typed PTX builder refuses ill-typed instructions and renders readable text."""

from __future__ import annotations

import re

import pytest

from ptxgen.builder import SPECIAL_REGS, Addr, Function, Module, PtxTypeError


def fn() -> Function:
    return Function("f", kind="func", visible=False)


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
    # operands start in one column: every opcode is padded to the same width
    instructions = [line for line in text.splitlines() if re.match(r"    [a-z]", line) and "%" in line]
    operand_starts = {line.index("%") for line in instructions}
    assert len(operand_starts) == 1, text


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda f, r: f.inst("add.u32", r["d64"], r["a32"], r["b32"]), "needs .u32"),
        (lambda f, r: f.inst("mad.wide.u32", r["a32"], r["a32"], r["b32"], r["d64"]), "needs .u64"),
        (lambda f, r: f.inst("mad.wide.u32", r["d64"], r["a32"], r["b32"], r["a32"]), "needs .u64"),
        (lambda f, r: f.inst("ld.global.f32", r["f"], Addr(r["a32"])), "not 64-bit"),
        (lambda f, r: f.inst("st.global.f32", Addr(r["d64"]), r["a32"]), "needs .f32"),
        (lambda f, r: f.inst("add.u32", r["a32"], r["b32"], 1 << 32), "does not fit"),
        (lambda f, r: f.inst("add.u32", 5, r["b32"], 1), "cannot write"),
        (lambda f, r: f.inst("add.u32", r["a32"], r["b32"]), "takes 3 operands"),
        (lambda f, r: f.inst("frobnicate.u32", r["a32"]), "does not know the opcode"),
        (lambda f, r: f.inst("add.u32", r["a32"], SPECIAL_REGS["tid.x"], 1), "with mov first"),
        (lambda f, r: f.inst("setp.ge.u32", r["a32"], r["a32"], r["b32"]), "needs .pred"),
        (lambda f, r: f.inst("st.global.nc.f32", Addr(r["d64"]), r["f"]), ".nc is only for ld.global"),
        (lambda f, r: f.inst("ld.f32", r["f"], Addr(r["d64"])), "state space"),
        (lambda f, r: f.inst("bra", r["a32"]), "expected a label"),
        (lambda f, r: f.inst("add.u32", r["a32"], r["a32"], 1, guard=r["a32"]), "not .pred"),
        (lambda f, r: f.inst("add.f32", r["f"], r["f"], 1.5), "no PTX operand"),
    ],
)
def test_ill_typed_instructions_are_refused(build, message):
    f = fn()
    regs = {
        "a32": f.reg("a32", "u32"),
        "b32": f.reg("b32", "u32"),
        "d64": f.reg("d64", "u64"),
        "f": f.reg("f", "f32"),
        "p": f.reg("p", "pred"),
    }
    with pytest.raises(PtxTypeError, match=re.escape(message)):
        build(f, regs)


def test_registers_of_another_function_are_refused():
    f, g = fn(), Function("g", kind="func", visible=False)
    a = f.reg("a", "u32")
    g.reg("b", "u32")
    with pytest.raises(PtxTypeError, match="not declared in g"):
        g.inst("add.u32", a, a, 1)


def test_register_rules():
    f = fn()
    with pytest.raises(PtxTypeError, match="no 8-bit registers"):
        f.reg("byte", "u8")
    with pytest.raises(ValueError, match="shadow the special register"):
        f.reg("tid", "u32")
    f.reg("x", "u32")
    with pytest.raises(ValueError, match="declared twice"):
        f.reg("x", "u64")
    with pytest.raises(ValueError, match="not a PTX identifier"):
        f.reg("1x", "u32")


def test_bit_types_and_widening_loads():
    f = fn()
    addr, h, w = f.reg("addr", "u64"), f.reg("h", "b16"), f.reg("w", "f32")
    f.inst("ld.global.nc.b8", h, Addr(addr))  # 8-bit loads land in 16-bit registers
    f.inst("ld.global.nc.b32", w, Addr(addr))  # .b32 takes any 32-bit register
    f.inst("st.global.b16", Addr(addr), h)
    with pytest.raises(PtxTypeError):
        f.inst("ld.global.f32", h, Addr(addr))


def test_labels_must_be_placed_once():
    f = fn()
    done = f.label("done")
    f.inst("bra", done)
    with pytest.raises(ValueError, match="never placed"):
        f.render()
    f.place(done)
    with pytest.raises(ValueError, match="placed twice"):
        f.place(done)


def test_entry_parameters_and_call():
    body = fn()
    x = body.reg_param("x", "u64")
    body.inst("ret")
    entry = Function("e", kind="entry")
    p = entry.param("x", "u64", comment="the pointer")
    r = entry.reg("x", "u64")
    entry.inst("ld.param.u64", r, Addr(p))
    entry.call(body, [r])
    with pytest.raises(PtxTypeError, match="takes 1 arguments"):
        entry.call(body, [r, r])
    with pytest.raises(PtxTypeError, match="parameter"):
        entry.inst("ld.param.u32", entry.reg("y", "u32"), Addr(p))
    text = entry.render()
    assert ".param .u64 x  // the pointer" in text
    assert re.search(r"^    call\.uni +f, \(%x\);$", text, re.M)
    assert str(x) == "%x"


def test_module_header():
    header = Module("sm_90", "7.8", comment=["hello"]).header()
    assert header.splitlines() == [
        "//",
        "// hello",
        "//",
        ".version 7.8",
        ".target sm_90",
        ".address_size 64",
    ]
