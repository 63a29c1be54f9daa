"""The public API of the emitted kernels, exactly as documented."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT, hand_written_kernel

import ptxgen
from ptxgen.targets import PTX_ISA_CUDA, TARGETS

KINDS = [ptxgen.ChannelCatBackward, ptxgen.ChannelCatForward]


def test_backward_attributes():
    k = ptxgen.ChannelCatBackward("f32", 128)
    assert k.name == "channel_cat_backward"
    assert k.dtype == "f32"
    assert k.block_size == 128
    assert k.id == "channel_cat_backward__f32__128"
    assert k.entry_point_name == "channel_cat_backward_entry_point"
    assert k.source == k.kernel_source + "\n\n" + k.entry_point_source
    assert k.content_hash == hashlib.sha256(k.source.encode()).hexdigest()
    assert k.target == "sm_75" and k.ptx_version == "6.3"
    assert k.arg_names == ("dy", "dx", "chunk_c", "c_total", "chunk_offset")
    assert [str(t) for t in k.arg_types] == ["*mut f32", "*mut f32", "i32", "i32", "i32"]
    assert [(t.ptx_type, t.size) for t in k.arg_types] == [("u64", 8)] * 2 + [("u32", 4)] * 3
    assert k.block == (128, 1, 1)
    assert k.grid(64, 16) == (64, 1, 1)
    assert k.grid(3, 129) == (6, 1, 1)
    assert k.grid(0, 5) == (0, 1, 1)


def test_forward_attributes():
    k = ptxgen.ChannelCatForward("bf16", 256, target="sm_90")
    assert k.id == "channel_cat_forward__bf16__256"
    assert k.entry_point_name == "channel_cat_forward_entry_point"
    assert k.arg_names == ("x", "y", "chunk_c", "c_total", "chunk_offset")
    assert [str(t) for t in k.arg_types] == ["*mut bf16", "*mut bf16", "i32", "i32", "i32"]
    assert k.target == "sm_90" and k.ptx_version == "7.8"
    assert not k.arg_types[0].writes and k.arg_types[1].writes


@pytest.mark.parametrize("inline", [True, False])
@pytest.mark.parametrize("cls", KINDS)
def test_source_layout(cls, inline):
    k = cls("f16", 64, inline=inline)
    # kernel_source: the module header and the body as a .func; entry_point_source: the .entry
    assert k.kernel_source.lstrip("/ \n").startswith(k.name)
    assert ".version 6.3\n.target sm_75\n.address_size 64" in k.kernel_source
    assert f".func {k.name}(" in k.kernel_source and ".entry" not in k.kernel_source
    assert k.entry_point_source.startswith(f".visible .entry {k.entry_point_name}(")
    assert ".reqntid 64, 1, 1" in k.entry_point_source
    for name, t in zip(k.arg_names, k.arg_types):
        assert f".param .{t.ptx_type} {name}" in k.entry_point_source
    called = re.search(rf"call\.uni +{k.name}, \(%", k.entry_point_source) is not None
    assert called is not inline
    assert ("ld.global.nc.b16" in k.entry_point_source) is inline


def test_inline_is_the_default_and_the_call_variant_differs_only_in_the_entry():
    inline, call = ptxgen.ChannelCatBackward("f32", 128), ptxgen.ChannelCatBackward("f32", 128, inline=False)
    assert inline.inline and not call.inline
    assert "call.uni" not in inline.entry_point_source
    assert inline.kernel_source.split(".version")[1] == call.kernel_source.split(".version")[1]
    assert inline.id == call.id and inline.content_hash != call.content_hash
    assert repr(call) == "ChannelCatBackward('f32', 128, target='sm_75', inline=False)"


def test_the_ptx_reads_like_a_lesson():
    src = ptxgen.ChannelCatBackward("f32", 128).kernel_source
    for reg in ("%n", "%ci", "%tiles", "%dy_index", "%dx_index", "%dy_addr", "%dx_addr", "%past_end"):
        assert reg in src
    assert "// --- which row (n) and which channel (ci) this thread owns ---" in src
    assert "dx[n * chunk_c + ci] = dy[n * c_total + chunk_offset + ci]" in src
    assert "mad.wide.u32" in src  # 64-bit indices
    assert "ld.global.nc.f32" in src  # read-only input through the non-coherent path


@pytest.mark.parametrize(
    "dtype, mem", [("f16", "b16"), ("bf16", "b16"), ("i8", "b8"), ("e5m2", "b8"), ("f64", "f64")]
)
def test_dtype_table_memory_types(dtype, mem):
    src = ptxgen.ChannelCatForward(dtype, 32).kernel_source
    assert f"ld.global.nc.{mem} " in src and f"st.global.{mem} " in src


@pytest.mark.parametrize(
    "alias, canonical",
    [("float32", "f32"), ("float", None), ("bfloat16", "bf16"), ("int64", "i64"), ("half", "f16"),
     ("double", "f64"), ("uint8", "u8"), ("float8_e4m3fn", "e4m3"), ("float8_e5m2", "e5m2"), ("F32", "f32")],
)  # fmt: skip
def test_dtype_aliases(alias, canonical):
    if canonical is None:
        with pytest.raises(ValueError, match="unknown dtype 'float'"):
            ptxgen.ChannelCatBackward(alias, 32)
    else:
        assert ptxgen.ChannelCatBackward(alias, 32).dtype == canonical


def test_numpy_dtypes():
    np = pytest.importorskip("numpy")
    assert ptxgen.ChannelCatBackward(np.float32, 32).dtype == "f32"
    assert ptxgen.ChannelCatBackward(np.dtype("int16"), 32).dtype == "i16"
    assert ptxgen.ChannelCatBackward(np.dtype(np.uint64), 32).dtype == "u64"
    with pytest.raises(ValueError, match="unknown dtype 'bool'"):
        ptxgen.ChannelCatBackward(np.bool_, 32)


def test_ml_dtypes_and_torch_dtypes():
    ml = pytest.importorskip("ml_dtypes")
    np = pytest.importorskip("numpy")
    assert ptxgen.ChannelCatBackward(np.dtype(ml.bfloat16), 32).dtype == "bf16"
    assert ptxgen.ChannelCatBackward(ml.float8_e4m3fn, 32).dtype == "e4m3"


@pytest.mark.parametrize("cls", KINDS)
@pytest.mark.parametrize(
    "args, kwargs, error, message",
    [
        (("f33", 128), {}, ValueError, "unknown dtype 'f33'; accepted: f16, bf16, f32"),
        ((3.5, 128), {}, TypeError, "dtype must be a name"),
        ((float, 128), {}, TypeError, "dtype must be a name"),
        (("f32", 128.0), {}, TypeError, "block_size must be an int, not float 128.0"),
        (("f32", "128"), {}, TypeError, "block_size must be an int, not str '128'"),
        (("f32", True), {}, TypeError, "block_size must be an int, not bool"),
        (("f32", 16), {}, ValueError, "block_size 16 is not accepted; accepted: multiples of 32 from 32 to 1024"),
        (("f32", 1056), {}, ValueError, "block_size 1056 is not accepted"),
        (("f32", 100), {}, ValueError, "block_size 100 is not accepted"),
        (("f32", 0), {}, ValueError, "block_size 0"),
        (("f32", -32), {}, ValueError, "block_size -32"),
        (("f32", 128), {"target": "sm_91"}, ValueError, "unknown target 'sm_91'; accepted: sm_75"),
        (("f32", 128), {"target": 90}, TypeError, "target must be a string"),
        (("f32", 128), {"inline": 1}, TypeError, "inline must be True or False"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_with_the_value_and_what_is_accepted(cls, args, kwargs, error, message):
    with pytest.raises(error) as info:
        cls(*args, **kwargs)
    assert message in str(info.value)


def test_grid_rejects_bad_sizes():
    k = ptxgen.ChannelCatBackward("f32", 128)
    with pytest.raises(ValueError, match="n_spatial must be >= 0, got -1"):
        k.grid(-1, 4)
    with pytest.raises(TypeError, match="chunk_c must be an int"):
        k.grid(4, 2.0)


def test_protocol_conformance():
    from ptxgen.kernel import KERNEL_MEMBERS, conformance_problems

    # The protocol holds what a loader and launcher need, nothing kernel-specific.
    assert set(KERNEL_MEMBERS) == {
        "name", "id", "kernel_source", "entry_point_source", "source", "entry_point_name",
        "content_hash", "target", "ptx_version", "arg_names", "arg_types", "block",
    }  # fmt: skip
    for cls in KINDS:
        k = cls("u16", 96)
        assert isinstance(k, ptxgen.Kernel) and isinstance(k, ptxgen.KernelBase)
        assert conformance_problems(k) == []
    hand = hand_written_kernel()
    assert isinstance(hand, ptxgen.Kernel) and conformance_problems(hand) == []
    assert hand.id == "fill__u32__64" and hand.target == "sm_75" and hand.ptx_version == "6.3"
    assert not isinstance(object(), ptxgen.Kernel)
    assert conformance_problems(object()) == [f"missing {', '.join(KERNEL_MEMBERS)}"]


def test_a_new_kernel_writes_only_what_is_its_own():
    class Noop(ptxgen.KernelBase):
        name = "noop"

        def __init__(self):
            module = ptxgen.PtxModule("sm_80")
            entry = module.entry(self.entry_point_name)
            entry.inst("ret")
            self.id, self.target, self.ptx_version = "noop", module.target, module.version
            self.kernel_source, self.entry_point_source = module.header(), entry.render()
            self.arg_names, self.arg_types, self.block = (), (), (32, 1, 1)

    k = Noop()
    assert k.source == k.kernel_source + "\n\n" + k.entry_point_source
    assert k.entry_point_name == "noop_entry_point"
    assert k.content_hash == hashlib.sha256(k.source.encode()).hexdigest()
    assert isinstance(k, ptxgen.Kernel)
    assert Noop() is not k  # no cache_key: not memoised


def test_hand_written_kernels_are_checked():
    with pytest.raises(ValueError, match=re.escape("defines no .entry fill2_entry_point")):
        ptxgen.PtxKernel(
            "fill2", hand_written_kernel().entry_point_source, ("out",), (ptxgen.Pointer("u32"),), 64
        )
    with pytest.raises(ValueError, match="1 arg_names for 2 arg_types"):
        ptxgen.PtxKernel("fill", hand_written_kernel().entry_point_source, ("out",),
                         (ptxgen.Pointer("u32"), ptxgen.Scalar("u32")), 64)  # fmt: skip
    with pytest.raises(ValueError, match=re.escape(".version and .target")):
        ptxgen.PtxKernel("fill", ".visible .entry fill_entry_point() { ret; }", (), (), 64)


def test_construction_is_memoised_and_the_hash_computed_once():
    a = ptxgen.ChannelCatBackward("f32", 128)
    assert ptxgen.ChannelCatBackward("float32", 128, target="sm_75", inline=True) is a
    assert ptxgen.ChannelCatBackward("f32", 128, inline=False) is not a
    assert ptxgen.ChannelCatForward("f32", 128) is not a
    assert ptxgen.ChannelCatBackward("f32", 128, target="sm_90") is not a
    first = a.content_hash
    assert vars(a)["content_hash"] == first  # cached on the instance: not rehashed per access
    np = pytest.importorskip("numpy")
    assert ptxgen.ChannelCatBackward(np.float32, np.int64(128)) is a


def test_block_size_accepts_numpy_integers():
    np = pytest.importorskip("numpy")
    assert ptxgen.ChannelCatForward("f32", np.int32(64)).block == (64, 1, 1)
    assert type(ptxgen.ChannelCatForward("f32", np.uint16(96)).block_size) is int


def test_headers_carry_the_final_measurement():
    source = ptxgen.ChannelCatBackward("f32", 128).kernel_source
    assert "up to 5.5% of bandwidth" in source and "7%" not in source


def test_determinism_within_and_across_processes():
    a = ptxgen.ChannelCatBackward("e4m3", 96, target="sm_89")
    b = ptxgen.ChannelCatBackward("e4m3", 96, target="sm_89")
    assert a.source == b.source and a == b and hash(a) == hash(b)
    code = "import ptxgen; print(ptxgen.ChannelCatBackward('e4m3', 96, target='sm_89').content_hash)"
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == a.content_hash


def test_target_table():
    assert TARGETS["sm_75"] == "6.3" and TARGETS["sm_90"] == "7.8" and TARGETS["sm_120"] == "8.7"
    for target, isa in TARGETS.items():
        assert isa in PTX_ISA_CUDA, target
        assert ptxgen.ChannelCatBackward("f32", 32, target=target).ptx_version == isa


def test_ptxgen_imports_only_the_standard_library():
    code = (
        "import sys; before = set(sys.modules); import ptxgen, ptxgen.toolchain, ptxgen.cli;"
        "new = {m.split('.')[0] for m in set(sys.modules) - before};"
        "print(sorted(m for m in new if m != 'ptxgen' and m not in sys.stdlib_module_names))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
