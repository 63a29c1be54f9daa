"""Helpers for the launch tests: a binding that records instead of launching, kernels
with odd parameter layouts that echo their parameters, the parameter table ptxas
writes into a cubin, and the skip where the ops' C lane is not at work."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import hashlib
import struct
import sys
import threading
from dataclasses import dataclass, field

import pytest

import ptxgen
from runtime.layout import ArgumentLayout


def function_layout(kernel) -> ArgumentLayout:
    return ArgumentLayout(tuple(kernel.arg_names), tuple(kernel.arg_types))


class _SameInt(dict):
    """Stream handles as the ints they are (what cffi and ctypes take)."""

    def __missing__(self, handle: int) -> int:
        return handle


@dataclass
class Call:
    args: tuple  # (f, gx, gy, gz, bx, by, bz, shared, stream, params, extra), all ints
    params: list[int]  # the void** read back: one address per parameter
    slots: list[bytes]  # the bytes each address pointed at, copied during the call
    via: str  # "cuLaunchKernel" or "cuLaunchKernelEx"
    attributes: tuple = ()  # a C config's launch attributes: (id, first int of the value)
    compiled: bool = False  # made by runtime._fastlaunch through the C entry points


# cuLaunchKernel and cuLaunchKernelEx as C functions, for the compiled launch path
C_LAUNCH = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_uint64, *[ctypes.c_uint] * 7, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64
)
C_LAUNCH_EX = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64
)


class LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute
    _fields_ = [("id", ctypes.c_uint32), ("pad", ctypes.c_uint32), ("value", ctypes.c_int * 16)]


class LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [
        ("dims", ctypes.c_uint * 6),
        ("shared", ctypes.c_uint),
        ("stream", ctypes.c_uint64),
        ("attrs", ctypes.POINTER(LaunchAttribute)),
        ("num_attrs", ctypes.c_uint),
    ]


class RecordingBinding:
    """Stands in for the driver: records each launch and the bytes its parameters held
    at the moment of the call (the driver copies them then, too). With ``ex``, it offers
    cuLaunchKernelEx as cuda-bindings does (a config is the tuple of what it holds)."""

    name = "recording"
    returns_tuple = False

    compiled = False  # give C entry points (the compiled launch path uses them); set per test

    def __init__(
        self, layout: ArgumentLayout, result: int = 0, ex: bool = False, compiled: bool | None = None
    ) -> None:
        self.layout = layout
        self.result = result  # the CUresult every call returns
        self.c_result = None  # what the C entry points return, where not ``result``
        self.calls: list[Call] = []
        self.streams = _SameInt()
        self.launch_kernel_ex = self._launch_kernel_ex if ex else None
        self.dependent_configs = 0
        wants_c = self.compiled if compiled is None else compiled
        self.entry_points = self._entry_points if wants_c else None
        self._c = (C_LAUNCH(self._c_launch), C_LAUNCH_EX(self._c_launch_ex)) if wants_c else None

    def _entry_points(self) -> tuple[int, int]:
        return tuple(ctypes.cast(f, ctypes.c_void_p).value for f in self._c)

    def _c_result(self) -> int:
        return self.result if self.c_result is None else self.c_result

    def _c_launch(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra) -> int:
        self._record(
            "cuLaunchKernel", (f, gx, gy, gz, bx, by, bz, shared, stream, params, extra), compiled=True
        )
        return self._c_result()

    def _c_launch_ex(self, config, f, params, extra) -> int:
        c = LaunchConfig.from_address(config)
        attributes = tuple((c.attrs[i].id, c.attrs[i].value[0]) for i in range(c.num_attrs))
        args = (f, *c.dims, c.shared, c.stream, params, extra)
        self._record("cuLaunchKernelEx", args, attributes=attributes, compiled=True)
        return self._c_result()

    def function(self, handle: int) -> int:
        return handle

    def config(self, gx, gy, gz, bx, by, bz, shared, stream, dependent=False) -> tuple:
        self.dependent_configs += dependent  # configs made with the programmatic attribute
        return (gx, gy, gz, bx, by, bz, shared, stream)

    def launch_kernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra) -> int:
        return self._record("cuLaunchKernel", (f, gx, gy, gz, bx, by, bz, shared, stream, params, extra))

    def _launch_kernel_ex(self, config, f, params, extra) -> int:
        return self._record("cuLaunchKernelEx", (f, *config, params, extra))

    def _record(self, via: str, args: tuple, attributes: tuple = (), compiled: bool = False) -> int:
        assert all(type(a) is int for a in args), args  # what cffi and ctypes take
        params = args[9]
        n = len(self.layout.slots)
        addresses = [ctypes.c_void_p.from_address(params + 8 * i).value or 0 for i in range(n)]
        slots = [ctypes.string_at(a, s.size) for a, s in zip(addresses, self.layout.slots)]
        self.calls.append(Call(args, addresses, slots, via, attributes, compiled))
        return self.result


def reference_counts_after(watched, calls, refused, rounds: int, errors=(ValueError, TypeError)):
    """``sys.getrefcount`` of each watched object before and after ``rounds`` rounds of
    every call in ``calls`` and of every call in ``refused`` (each must raise one of
    ``errors``). Every call runs once first, so caches are warm; the collector is off
    during the rounds, so that what other tests left behind is not collected in the
    middle and counted as this code's."""
    for call in [*calls, *refused]:
        with contextlib.suppress(*errors):
            call()
    gc.collect()
    gc.disable()
    try:
        before = [sys.getrefcount(o) for o in watched]
        for _ in range(rounds):
            for call in calls:
                call()
            for call in refused:
                try:
                    call()
                except errors:
                    continue
                raise AssertionError(f"{call} did not raise")
        after = [sys.getrefcount(o) for o in watched]
    finally:
        gc.enable()
    return before, after


def skip_without_c_lane() -> None:
    """Skips the calling test where the ops' C lane (``runtime.ops._lane``) is not at work:
    the extension is not built, or the compiled launch is switched off."""
    from runtime import launch, ops

    why = launch.compiled_launch_available()
    if why or ops._lane is None or not ops._lane.enabled:
        pytest.skip(
            why
            or "no C lane: the extension is not built, or the compiled launch is switched off (PTXGEN_COMPILED_LAUNCH=0)"
        )


def errors_in_threads(work, count: int) -> list[Exception]:
    """``work(i)`` for each ``i < count``, each in a thread of its own, all started before
    any is joined; what they raised."""
    errors: list[Exception] = []

    def run(i: int) -> None:
        try:
            work(i)
        except Exception as err:  # returned to the test, which reports it
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def extremes(t) -> list[int]:
    """The smallest, largest and an odd value each type accepts."""
    if t.is_pointer:
        return [0, (1 << 64) - 1, 0x7F00_DEAD_BEE0]
    return [
        t.min,
        t.max,
        0x1234_5678 if t.size == 4 else -0x1122_3344_5566_7788 if t.min < 0 else 0x8899_AABB,
    ]


# --- kernels whose parameters are echoed into memory ----------------------------------


def ctype_of(t) -> type:
    if t.is_pointer:
        return ctypes.c_uint64
    return {"i32": ctypes.c_int32, "u32": ctypes.c_uint32, "i64": ctypes.c_int64, "u64": ctypes.c_uint64}[
        t.name
    ]


def c_struct(types) -> type[ctypes.Structure]:
    """The C struct of these parameters: the layout a C compiler gives them."""
    return type(
        "Params", (ctypes.Structure,), {"_fields_": [(f"p{i}", ctype_of(t)) for i, t in enumerate(types)]}
    )


@dataclass
class EchoKernel:
    """A hand-written kernel whose parameters are ``types`` with ``out`` (``*mut u64``)
    inserted at ``out_index``; thread 0 stores each other parameter, widened to 64 bits
    as the kernel reads it (``.s32`` sign-extended), into ``out[i]`` in order.
    Satisfies ``ptxgen.Kernel``."""

    types: tuple
    out_index: int = -1  # -1: last
    block_size: int = 32
    target: str = "sm_75"
    ptx_version: str = "6.3"
    kernel_source: str = "// hand-written: echo each parameter into out[i]\n"
    name: str = field(init=False, default="echo")

    @property
    def _out(self) -> int:
        return len(self.types) if self.out_index < 0 else self.out_index

    @property
    def arg_types(self) -> tuple:
        t = list(self.types)
        t.insert(self._out, ptxgen.Pointer("u64"))
        return tuple(t)

    @property
    def arg_names(self) -> tuple:
        names = [f"p{i}" for i in range(len(self.types))]
        names.insert(self._out, "out")
        return tuple(names)

    @property
    def entry_point_name(self) -> str:
        return "echo_entry_point"

    @property
    def entry_point_source(self) -> str:
        params, body = [], []
        for i, t in enumerate(self.types):
            if t.is_pointer:
                params.append(f".param .u64 p{i}")
                body.append(f"    ld.param.u64 %v, [p{i}];")
            else:
                ptx = t.ptx_type
                params.append(f".param .{ptx} p{i}")
                if ptx.endswith("64"):
                    body.append(f"    ld.param.{ptx} %v, [p{i}];")
                else:  # widened as the kernel reads it: sign-extended if it reads .s32
                    body.append(f"    ld.param.{ptx} %w, [p{i}];")
                    body.append(f"    cvt.{'s64.s32' if ptx[0] == 's' else 'u64.u32'} %v, %w;")
            body.append(f"    st.global.u64 [%out+{8 * i}], %v;")
        params.insert(self._out, ".param .u64 out")
        return "\n".join(
            [
                ".version 6.3",
                f".target {self.target}",
                ".address_size 64",
                "",
                f".visible .entry echo_entry_point({', '.join(params)})",
                "{",
                "    .reg .u32 %w, %thread;",
                "    .reg .u64 %v, %out;",
                "    .reg .pred %p;",
                "    mov.u32 %thread, %tid.x;",
                "    setp.ne.u32 %p, %thread, 0;",
                "    @%p bra DONE;",
                "    ld.param.u64 %out, [out];",
                "    cvta.to.global.u64 %out, %out;",
                *body,
                "DONE:",
                "    ret;",
                "}",
                "",
            ]
        )

    @property
    def source(self) -> str:
        return self.kernel_source + "\n\n" + self.entry_point_source

    @property
    def id(self) -> str:
        return "echo__" + "_".join(str(t).replace("*mut ", "p") for t in self.types)

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    @property
    def block(self) -> tuple:
        return (self.block_size, 1, 1)

    def grid(self, n_spatial: int = 1, chunk_c: int = 1) -> tuple:
        return (1, 1, 1)


def echoed(t, value: int) -> int:
    """What the echo kernel stores for ``value``: as a u64 bit pattern."""
    if not t.is_pointer and t.ptx_type[0] == "s":
        return value & ((1 << 64) - 1)  # sign-extended to 64 bits
    return value


# Odd layouts: 32-bit values before 64-bit ones leave padding the packer must honour.
# ``out`` goes where "out" stands in each spec.
LAYOUTS = {
    "u32 u64": ("u32", "u64", "out"),
    "u64 u32 (tail padding)": ("out", "u64", "u32"),
    "i32 ptr i64": ("i32", "*f32", "i64", "out"),
    "ptr u32 u32 u64 i32": ("out", "*u8", "u32", "u32", "u64", "i32"),
    "u32 i32 u32": ("u32", "i32", "out", "u32"),
    "i64 u32 i32 u64 ptr": ("i64", "u32", "i32", "u64", "*bf16", "out"),
    "i32-as-u32 ptr": ("i32:u32", "*f64", "out"),
    "ptr only": ("out", "*i16"),
    "three u32": ("out", "u32", "u32", "u32"),
}


def echo_kernel(spec: tuple[str, ...]) -> EchoKernel:
    types = types_of(tuple(s for s in spec if s != "out"))
    return EchoKernel(types, out_index=spec.index("out"))


def types_of(spec: tuple[str, ...]) -> tuple:
    out = []
    for s in spec:
        if s.startswith("*"):
            out.append(ptxgen.Pointer(s[1:]))
        elif ":" in s:
            name, ptx = s.split(":")
            out.append(ptxgen.Scalar(name, ptx))
        else:
            out.append(ptxgen.Scalar(s))
    return tuple(out)


# --- the parameter table ptxas writes ---------------------------------------------------
# A cubin's ``.nv.info.<kernel>`` section is a list of attribute records: one byte of
# format, one of attribute, then for format 0x04 a 16-bit length and that many bytes.
# Attribute 0x17 (KPARAM_INFO) describes one parameter: a 32-bit index, a 16-bit
# ordinal, a 16-bit byte offset, and a 32-bit word whose bits 18 and up hold the size
# in bytes. (Read off ptxas 13.5 output; the tests below cross-check it with the C
# struct layout, and the driver reports the same through cuFuncGetParamInfo.)


def kparam_info(cubin: bytes, kernel: str) -> dict[int, tuple[int, int]]:
    """``{ordinal: (offset, size)}`` of ``kernel``'s parameters, from the cubin ptxas made."""
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = []
    for i in range(shnum):
        name, _type, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize)
        sections.append((name, offset, size))
    names_at = sections[shstrndx][1]

    def name_of(index: int) -> str:
        start = names_at + index
        return cubin[start : cubin.index(b"\0", start)].decode()

    info = next((cubin[o : o + s] for n, o, s in sections if name_of(n) == f".nv.info.{kernel}"), None)
    if info is None:
        raise KeyError(f"no .nv.info.{kernel} section in the cubin")
    params, pos = {}, 0
    while pos < len(info):
        fmt, attr = info[pos], info[pos + 1]
        if fmt == 0x04:  # a length, then a value of that length
            (length,) = struct.unpack_from("<H", info, pos + 2)
            value = info[pos + 4 : pos + 4 + length]
            pos += 4 + length
            if attr == 0x17:
                _index, ordinal, offset, word = struct.unpack_from("<IHHI", value)
                params[ordinal] = (offset, word >> 18)
        elif fmt in (0x02, 0x03):  # an 8- or 16-bit value, in 2 bytes
            pos += 4
        else:  # 0x01: no value
            pos += 2
    return params
