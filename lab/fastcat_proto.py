"""FROZEN REFERENCE: the fast-kernel prototype the builder ports were made from (and the first
runs of lab/fastcat_experiments.py were measured with), kept only so lab/test_port.py can
prove the ports emit the same machine code (ptxgen/kernels/fastcat_*.py are the kernels).
Do not edit. (Moved from tests/reference/; its grids and its rule are the first study's,
for a 132-SM part, and are nobody's plan.)

Fast channel-concat kernels, written as PTX text: a prototype to be ported to the builder.

Every kernel here moves *bytes*: the element size only decides which access widths
the alignment allows, so one kernel serves every dtype of a given size. The two
layouts a concatenation joins are

* the **row side**: ``rows`` rows of ``pitch`` bytes (``dy`` backward, ``y`` forward);
* the **chunk side**: chunk ``k`` is ``rows`` rows of ``width_k`` bytes, packed
  (``dx_k`` backward, ``x_k`` forward), sitting at byte ``off_k`` of each row-side row.

Backward gathers row side -> chunk side, forward scatters chunk side -> row side.

Kernel families (one generator each; names say what each register holds):

``flat_copy``   the copy ceiling: 16-byte vectors, ``unroll`` loads in flight per thread.
``vec``         direct copy with the widest access ``width`` (16/8/4/2/1 bytes) that the
                pointers, pitches and offsets allow; ``unroll`` independent loads in
                flight per thread; grid-stride over (row, vector) with 64-bit rows and
                addresses; one chunk (per-chunk gather/scatter) or several adjacent
                chunks (fused split/concat when every chunk allows the width).
``tile``        any alignment: the row side is cut into tiles of ``T`` bytes at absolute
                16-byte boundaries, so its side always moves as 16-byte vectors; the bytes
                of chunk ``k`` that come from one tile are one contiguous range of
                ``dx_k``/``x_k``, so that side moves as 16-byte vectors too; the
                re-indexing happens in shared memory, in granules of ``granule`` bytes
                (the largest power of two <= 16 that the alignments allow). Backward
                loads may go through registers (sm_75+), ``cp.async`` (sm_80+, two
                stages) or ``cp.async.bulk`` + mbarrier (sm_90, two stages).

Where a kernel needs more chunks than :data:`MAX_CHUNKS`, :func:`choose` splits them
into groups of adjacent chunks, one launch each (a group reads only the 16-byte
vectors of ``dy`` its columns touch).

Standard library only.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from ptxgen.args import Pointer, Scalar
from ptxgen.targets import TARGETS, isa_max, resolve_target, target_capability

__all__ = [
    "MAX_CHUNKS",
    "ProtoKernel",
    "flat_copy_kernel",
    "tile_kernel",
    "vec_kernel",
]

# Chunks per launch: each costs 16 bytes of parameters and one unrolled copy of the
# per-chunk code; 32 keeps the kernel under ~4K SASS instructions and the
# parameters far under the 4 KB classic limit.
MAX_CHUNKS = 32

WIDTHS = (16, 8, 4, 2, 1)
_U64 = Scalar("u64")
_U32 = Scalar("u32")
_BYTES_IN = Pointer("u8", writes=False)
_BYTES_OUT = Pointer("u8")


# --------------------------------------------------------------------------- kernel object


@dataclass
class ProtoKernel:
    """A generated kernel satisfying the ``ptxgen.Kernel`` protocol (plus launch facts)."""

    name: str
    id: str
    kernel_source: str
    entry_point_source: str
    target: str
    ptx_version: str
    arg_names: tuple[str, ...]
    arg_types: tuple[Pointer | Scalar, ...]
    block_size: int
    shared_bytes: int = 0  # static shared memory the PTX declares
    info: dict = field(default_factory=dict)  # the generator's parameters, for reports

    @property
    def source(self) -> str:
        return self.kernel_source + "\n\n" + self.entry_point_source

    @property
    def entry_point_name(self) -> str:
        return f"{self.name}_entry_point"

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    @property
    def block(self) -> tuple[int, int, int]:
        return (self.block_size, 1, 1)

    def grid(self, n_spatial: int, chunk_c: int = 1) -> tuple[int, int, int]:
        """Grid-stride kernels take any grid; this is one full wave for a 132-SM part."""
        del n_spatial, chunk_c
        return (132 * max(1, 2048 // self.block_size), 1, 1)


# --------------------------------------------------------------------------- PTX emitter


class _Ptx:
    """Collects instructions and the registers they name; declarations go on top."""

    def __init__(self) -> None:
        self.regs: dict[str, str] = {}
        self.lines: list[str] = []
        self._labels = 0

    def reg(self, ptx_type: str, *names: str) -> None:
        for name in names:
            known = self.regs.setdefault(name, ptx_type)
            if known != ptx_type:
                raise ValueError(f"register %{name} declared as .{known} and .{ptx_type}")

    def op(self, text: str, why: str = "") -> None:
        self.lines.append(f"    {text};" + (f"  // {why}" if why else ""))

    def note(self, text: str) -> None:
        self.lines.append(f"    // {text}")

    def blank(self) -> None:
        self.lines.append("")

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")

    def fresh(self, stem: str) -> str:
        self._labels += 1
        return f"{stem}_{self._labels}"

    def declarations(self) -> list[str]:
        by_type: dict[str, list[str]] = {}
        for name, ptx_type in self.regs.items():
            by_type.setdefault(ptx_type, []).append(f"%{name}")
        out = []
        for ptx_type, names in by_type.items():
            for i in range(0, len(names), 8):
                out.append(f"    .reg .{ptx_type} {', '.join(names[i : i + 8])};")
        return out


def _isa_for(target: str, *features: str) -> str:
    return isa_max(TARGETS[target], *features)


def _module(
    *,
    name: str,
    kid: str,
    target: str,
    isa: str,
    header: list[str],
    params: list[tuple[str, Pointer | Scalar]],
    shared: list[str],
    ptx: _Ptx,
    block: int,
    shared_bytes: int,
    info: dict,
    min_blocks: int = 0,
) -> ProtoKernel:
    kernel_source = "\n".join(
        [
            f".version {isa}",
            f".target {target}",
            ".address_size 64",
            "",
            *[f"// {line}" if line else "//" for line in header],
        ]
    )
    decl = ",\n".join(f"    .param .{t.ptx_type} {n}" for n, t in params)
    entry = "\n".join(
        [
            f".visible .entry {name}_entry_point(\n{decl}\n)",
            f".maxntid {block}, 1, 1",
            *([f".minnctapersm {min_blocks}"] if min_blocks else []),
            "{",
            *[f"    {s}" for s in shared],
            *ptx.declarations(),
            "",
            *ptx.lines,
            "}",
            "",
        ]
    )
    return ProtoKernel(
        name=name,
        id=kid,
        kernel_source=kernel_source,
        entry_point_source=entry,
        target=target,
        ptx_version=isa,
        arg_names=tuple(n for n, _ in params),
        arg_types=tuple(t for _, t in params),
        block_size=block,
        shared_bytes=shared_bytes,
        info=info,
    )


def _check_pow2(value: int, what: str, allowed: tuple[int, ...]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
        raise ValueError(f"{what} = {value!r} is not accepted; accepted: {', '.join(map(str, allowed))}")
    return value


def _check_block(block: int) -> int:
    return _check_pow2(block, "block", (64, 128, 256, 512, 1024))


# Vector register groups for one access of `width` bytes: (ptx type, register count).
_ACCESS = {16: ("v4.u32", 4), 8: ("v2.u32", 2), 4: ("u32", 1), 2: ("u16", 1), 1: ("u8", 1)}


def _data_regs(p: _Ptx, stem: str, width: int) -> list[str]:
    _, count = _ACCESS[width]
    rtype = "b16" if width <= 2 else "b32"
    names = [f"{stem}_{i}" for i in range(count)]
    p.reg(rtype, *names)
    return names


def _operand(names: list[str]) -> str:
    regs = [f"%{n}" for n in names]
    return regs[0] if len(regs) == 1 else "{" + ", ".join(regs) + "}"


def _ld_type(width: int) -> str:
    kind, _ = _ACCESS[width]
    return kind.replace("u8", "b8").replace("u16", "b16")


# --------------------------------------------------------------------------- flat copy


_LOAD_HINTS = {
    None: ("", None),
    "L2::256B": (".L2::256B", "7.4"),
    "L1::no_allocate": (".L1::no_allocate", "7.4"),
}
_LAYOUTS = ("block", "grid")


def _check_hint(load_hint: str | None, target: str) -> tuple[str, str | None]:
    if load_hint not in _LOAD_HINTS:
        raise ValueError(f"load_hint {load_hint!r}; accepted: {', '.join(map(repr, _LOAD_HINTS))}")
    if load_hint == "L2::256B" and target_capability(target) < (8, 0):
        raise ValueError(f"load_hint 'L2::256B' needs sm_80 or newer, not {target}")
    return _LOAD_HINTS[load_hint]


def flat_copy_kernel(
    *,
    unroll: int = 4,
    block: int = 256,
    layout: str = "grid",
    load_hint: str | None = None,
    target: str = "sm_90",
) -> ProtoKernel:
    """``dst[i] = src[i]`` for ``n_vectors`` 16-byte vectors: the ceiling's copy kernel.
    Fastest measured on H200 (3.97 TB/s, 93% of cuMemcpyDtoD): the defaults on a grid of
    2 blocks per SM.

    ``layout``: where a thread's ``unroll`` slots lie. ``block``: one block's slots are one
    contiguous run of ``16 * unroll * block`` bytes per round (DRAM pages stay open);
    ``grid``: a thread's slots are a whole grid apart (the textbook grid-stride loop).
    """
    target = resolve_target(target)
    _check_block(block)
    _check_pow2(unroll, "unroll", (1, 2, 4, 8))
    if layout not in _LAYOUTS:
        raise ValueError(f"layout {layout!r}; accepted: {', '.join(_LAYOUTS)}")
    hint, hint_isa = _check_hint(load_hint, target)
    p = _Ptx()
    p.reg("u64", "src", "dst", "n_vectors", "first", "slot_gap", "step", "byte_off")
    p.reg("u32", "thread", "block_id", "block_dim", "grid_dim")
    p.op("ld.param.u64 %src, [src]")
    p.op("cvta.to.global.u64 %src, %src")
    p.op("ld.param.u64 %dst, [dst]")
    p.op("cvta.to.global.u64 %dst, %dst")
    p.op("ld.param.u64 %n_vectors, [n_vectors]")
    p.op("mov.u32 %thread, %tid.x")
    p.op("mov.u32 %block_id, %ctaid.x")
    p.op("mov.u32 %block_dim, %ntid.x")
    p.op("mov.u32 %grid_dim, %nctaid.x")
    p.op("cvt.u64.u32 %byte_off, %thread")
    if layout == "block":
        p.op(f"mul.wide.u32 %first, %block_id, {unroll * block}", "this block's run of unroll*block vectors")
        p.op("add.u64 %first, %first, %byte_off")
        p.op(f"mov.u64 %slot_gap, {block}", "a thread's slots are a block apart: the run is contiguous")
    else:
        p.op("mul.wide.u32 %first, %block_id, %block_dim")
        p.op("add.u64 %first, %first, %byte_off")
        p.op("mul.wide.u32 %slot_gap, %grid_dim, %block_dim", "a thread's slots are a grid apart")
    p.op(f"mul.wide.u32 %step, %grid_dim, {unroll * block}", "a round moves every slot by unroll*grid*block")
    p.label("LOOP")
    regs = []
    for u in range(unroll):
        p.reg("u64", f"idx_{u}", f"src_{u}", f"dst_{u}")
        p.reg("pred", f"live_{u}")
        p.op(f"mad.lo.u64 %idx_{u}, %slot_gap, {u}, %first")
        p.op(f"setp.lt.u64 %live_{u}, %idx_{u}, %n_vectors")
        p.op(f"shl.b64 %byte_off, %idx_{u}, 4")
        p.op(f"add.u64 %src_{u}, %src, %byte_off")
        p.op(f"add.u64 %dst_{u}, %dst, %byte_off")
        regs.append(_data_regs(p, f"v{u}", 16))
    p.op("@!%live_0 bra DONE", "slot 0 holds the smallest index: past the end, all are")
    for u in range(unroll):
        p.op(f"@%live_{u} ld.global.nc{hint}.v4.u32 {_operand(regs[u])}, [%src_{u}]", "all loads first")
    for u in range(unroll):
        p.op(f"@%live_{u} st.global.v4.u32 [%dst_{u}], {_operand(regs[u])}")
    p.op("add.u64 %first, %first, %step")
    p.op("bra.uni LOOP")
    p.label("DONE")
    p.op("ret")
    params = [("src", _BYTES_IN), ("dst", _BYTES_OUT), ("n_vectors", _U64)]
    tag = f"__{layout}" + (f"__{load_hint.replace('::', '_')}" if load_hint else "")
    return _module(
        name="flat_copy16",
        kid=f"flat_copy16__u{unroll}__b{block}{tag}__{target}",
        target=target,
        isa=_isa_for(target, *([hint_isa] if hint_isa else [])),
        header=[
            "flat_copy16: dst[i] = src[i] over n_vectors 16-byte vectors, grid-stride,",
            f"{unroll} loads in flight per thread, slots laid out by {layout}. The copy ceiling's kernel.",
        ],
        params=params,
        shared=[],
        ptx=p,
        block=block,
        shared_bytes=0,
        info={
            "family": "flat_copy",
            "unroll": unroll,
            "block": block,
            "layout": layout,
            "load_hint": load_hint,
        },
    )


# --------------------------------------------------------------------------- vec family


def vec_kernel(
    *,
    direction: str,
    width: int,
    chunks: int = 1,
    unroll: int = 4,
    block: int = 256,
    target: str = "sm_90",
    streaming_stores: bool = False,
    layout: str = "block",
    load_hint: str | None = None,
) -> ProtoKernel:
    """Direct copy between the row side and ``chunks`` adjacent chunks, ``width`` bytes an access.

    The work is the ``rows x window_vectors`` grid of (row, vector) items of the window
    ``[off_0, off_{K-1} + width_{K-1})`` of each row. Item ``i`` is at row ``i // n``,
    vector ``i % n``; each thread owns ``unroll`` slots and keeps (row, vector) per slot,
    stepping it by a (rows, vectors) increment divided once, so the loop divides
    nothing. All loads of a round are issued before the first store. ``layout`` places
    the slots as in :func:`flat_copy_kernel` (``block``: each block moves one contiguous
    run of items per round).

    ``width`` must divide the row-side base + window start, the pitch, every chunk's
    pointer, offset and width (the caller, :func:`choose`, checks).
    """
    if direction not in ("backward", "forward"):
        raise ValueError(f"direction {direction!r}; accepted: 'backward', 'forward'")
    target = resolve_target(target)
    _check_pow2(width, "width", WIDTHS)
    _check_block(block)
    _check_pow2(unroll, "unroll", (1, 2, 4, 8, 16))
    if not 1 <= chunks <= MAX_CHUNKS:
        raise ValueError(f"chunks = {chunks} is outside 1..{MAX_CHUNKS}")
    if layout not in _LAYOUTS:
        raise ValueError(f"layout {layout!r}; accepted: {', '.join(_LAYOUTS)}")
    hint, hint_isa = _check_hint(load_hint, target)
    p = _Ptx()
    p.reg("u64", "row_base", "pitch", "rows", "n_vec64", "gtid", "stride", "step", "step_rows", "tmp64")
    p.reg("u32", "n_vec", "step_vecs", "thread", "block_id", "block_dim", "grid_dim")
    p.op("ld.param.u64 %row_base, [row_base]", "row side + window start")
    p.op("cvta.to.global.u64 %row_base, %row_base")
    p.op("ld.param.u64 %pitch, [row_pitch]", "row-side bytes per row")
    p.op("ld.param.u64 %rows, [rows]")
    p.op("ld.param.u32 %n_vec, [window_vectors]", "accesses per row in the window")
    p.op("cvt.u64.u32 %n_vec64, %n_vec")
    p.op("mov.u32 %thread, %tid.x")
    p.op("mov.u32 %block_id, %ctaid.x")
    p.op("mov.u32 %block_dim, %ntid.x")
    p.op("mov.u32 %grid_dim, %nctaid.x")
    p.op("cvt.u64.u32 %tmp64, %thread")
    if layout == "block":
        p.op(f"mul.wide.u32 %gtid, %block_id, {unroll * block}", "this block's run of unroll*block items")
        p.op("add.u64 %gtid, %gtid, %tmp64", "this thread's first item")
        p.op(f"mov.u64 %stride, {block}", "slots of one thread are a block apart")
    else:
        p.op("mul.wide.u32 %gtid, %block_id, %block_dim")
        p.op("add.u64 %gtid, %gtid, %tmp64", "this thread's first item")
        p.op("mul.wide.u32 %stride, %grid_dim, %block_dim", "slots of one thread are a grid apart")
    p.op(f"mul.wide.u32 %step, %grid_dim, {unroll * block}", "a round moves every slot by unroll*grid*block")
    p.op("div.u64 %step_rows, %step, %n_vec64", "the step as (rows, vectors): divided once here,")
    p.op("rem.u64 %tmp64, %step, %n_vec64", "never in the loop")
    p.op("cvt.u32.u64 %step_vecs, %tmp64")
    p.blank()
    for u in range(unroll):
        p.reg("u64", f"row_{u}")
        p.reg("u32", f"col_{u}")
        p.op(f"mad.lo.u64 %tmp64, %stride, {u}, %gtid")
        p.op(f"div.u64 %row_{u}, %tmp64, %n_vec64", f"slot {u}: its row ...")
        p.op("rem.u64 %tmp64, %tmp64, %n_vec64")
        p.op(f"cvt.u32.u64 %col_{u}, %tmp64", "... and its vector in the row")
    # Chunk parameters are read where used: they live in the constant bank, so ptxas
    # folds them into the instructions instead of holding 5 registers per chunk.
    p.reg("u64", "c_ptr", "c_pitch", "row_addr", "chunk_addr")
    p.reg("u32", "c_start", "c_col")
    p.reg("pred", "in_chunk")
    p.label("LOOP")
    p.op("setp.ge.u64 %in_chunk, %row_0, %rows", "slot 0 is the furthest behind: past the end, all are")
    p.op("@%in_chunk bra DONE")
    data = []
    kind = _ld_type(width)
    for u in range(unroll):
        p.reg("pred", f"live_{u}")
        p.reg("u64", f"src_{u}", f"dst_{u}")
        p.op(f"setp.lt.u64 %live_{u}, %row_{u}, %rows")
        p.op(f"mad.lo.u64 %row_addr, %row_{u}, %pitch, %row_base")
        p.op(f"mul.wide.u32 %tmp64, %col_{u}, {width}")
        p.op("add.u64 %row_addr, %row_addr, %tmp64")
        if chunks == 1:
            p.op("ld.param.u64 %c_ptr, [chunk0_ptr]")
            p.op("ld.param.u64 %c_pitch, [chunk0_pitch]")
            p.op("mov.u32 %c_col, %" + f"col_{u}")
        else:
            p.note(f"slot {u}: which chunk holds this vector (chunks are adjacent, starts ascending)")
            p.op("ld.param.u64 %c_ptr, [chunk0_ptr]")
            p.op("ld.param.u64 %c_pitch, [chunk0_pitch]")
            p.op("mov.u32 %c_start, 0")
            for k in range(1, chunks):
                p.reg("u32", "k_start")
                p.reg("u64", "k_val")
                p.op(f"ld.param.u32 %k_start, [chunk{k}_start]")
                p.op(f"setp.ge.u32 %in_chunk, %col_{u}, %k_start")
                p.op(f"ld.param.u64 %k_val, [chunk{k}_ptr]")
                p.op("selp.b64 %c_ptr, %k_val, %c_ptr, %in_chunk")
                p.op(f"ld.param.u64 %k_val, [chunk{k}_pitch]")
                p.op("selp.b64 %c_pitch, %k_val, %c_pitch, %in_chunk")
                p.op("selp.b32 %c_start, %k_start, %c_start, %in_chunk")
            p.op(f"sub.u32 %c_col, %col_{u}, %c_start")
        p.op("cvta.to.global.u64 %c_ptr, %c_ptr")
        p.op(f"mad.lo.u64 %chunk_addr, %row_{u}, %c_pitch, %c_ptr")
        p.op(f"mul.wide.u32 %tmp64, %c_col, {width}")
        p.op("add.u64 %chunk_addr, %chunk_addr, %tmp64")
        src, dst = ("row_addr", "chunk_addr") if direction == "backward" else ("chunk_addr", "row_addr")
        p.op(f"mov.u64 %src_{u}, %{src}")
        p.op(f"mov.u64 %dst_{u}, %{dst}")
        data.append(_data_regs(p, f"v{u}", width))
    st = "st.global.cs" if streaming_stores else "st.global"
    for u in range(unroll):
        p.op(
            f"@%live_{u} ld.global.nc{hint}.{kind} {_operand(data[u])}, [%src_{u}]",
            "all loads in flight first",
        )
    for u in range(unroll):
        p.op(f"@%live_{u} {st}.{kind} [%dst_{u}], {_operand(data[u])}")
    for u in range(unroll):
        p.reg("pred", "wrap")
        p.op(f"add.u64 %row_{u}, %row_{u}, %step_rows")
        p.op(f"add.u32 %col_{u}, %col_{u}, %step_vecs")
        p.op(f"setp.ge.u32 %wrap, %col_{u}, %n_vec", "carry the vector index into the row")
        p.op(f"@%wrap sub.u32 %col_{u}, %col_{u}, %n_vec")
        p.op(f"@%wrap add.u64 %row_{u}, %row_{u}, 1")
    p.op("bra.uni LOOP")
    p.label("DONE")
    p.op("ret")
    params: list[tuple[str, Pointer | Scalar]] = [
        ("row_base", _BYTES_IN if direction == "backward" else _BYTES_OUT),
        ("row_pitch", _U64),
        ("rows", _U64),
        ("window_vectors", _U32),
    ]
    for k in range(chunks):
        params.append((f"chunk{k}_ptr", _BYTES_OUT if direction == "backward" else _BYTES_IN))
        params.append((f"chunk{k}_pitch", _U64))
        if chunks > 1:
            params.append((f"chunk{k}_start", _U32))
    name = f"fastcat_vec_{direction}"
    tag = ("__cs" if streaming_stores else "") + f"__{layout}"
    tag += f"__{load_hint.replace('::', '_')}" if load_hint else ""
    return _module(
        name=name,
        kid=f"{name}__w{width}__k{chunks}__u{unroll}__b{block}{tag}__{target}",
        target=target,
        isa=_isa_for(target, *([hint_isa] if hint_isa else [])),
        header=[
            f"{name}: {width}-byte accesses between the row side and {chunks} adjacent chunk(s).",
            "Item (row, vector) of the window; each thread keeps `unroll` slots a grid apart,",
            "issues all their loads, then all their stores. 64-bit rows and addresses.",
        ],
        params=params,
        shared=[],
        ptx=p,
        block=block,
        shared_bytes=0,
        info={
            "family": "vec",
            "direction": direction,
            "width": width,
            "chunks": chunks,
            "unroll": unroll,
            "block": block,
            "streaming_stores": streaming_stores,
            "layout": layout,
            "load_hint": load_hint,
        },
    )


# --------------------------------------------------------------------------- tile family
#
# Geometry (all byte offsets of the row side are "q", of chunk k are "d"):
#   h       = row_ptr & 15, A0 = row_ptr - h: tiles start at absolute 16-byte boundaries.
#   tile i  = row-side offsets [V_i, V_i + T), V_i = i*T - h (negative only for tile 0).
#   (R, C)  = floor-divmod(V_i, pitch): the row and column where the tile starts; kept
#             incrementally (the grid step and T are divided by the pitch once).
#   chunk k receives, from tile i, the contiguous range [d_lo, d_hi) of its bytes,
#             d_lo = R*W_k + clamp(C - O_k, 0, W_k), d_hi likewise at V_i + T,
#             both clamped to [0, rows*W_k].
#   chunk byte d sits in the tile at s = qq*P + O_k + rem - C, (qq, rem) = divmod(d - R*W_k, W_k).
# A granule of g bytes never straddles a row because g divides W_k, P and is aligned on
# both sides (choose() checks), so one (qq, rem) per vector and a carry per granule
# suffice.


def _divmod_u32(p: _Ptx, quot: str, rem: str, num: str, den: str, den_rcp: str) -> None:
    """quot, rem = divmod(num, den) for num < 2**31: a float estimate, then one correction
    each way. The estimate is within 1 because quotients here are at most ~T/den + 2."""
    p.reg("f32", "div_f")
    p.reg("pred", "div_fix")
    p.op(f"cvt.rn.f32.u32 %div_f, %{num}")
    p.op(f"mul.f32 %div_f, %div_f, %{den_rcp}")
    p.op(f"cvt.rzi.u32.f32 %{quot}, %div_f")
    p.op(f"mul.lo.u32 %{rem}, %{quot}, %{den}")
    p.op(f"sub.u32 %{rem}, %{num}, %{rem}")
    p.op(f"setp.lt.s32 %div_fix, %{rem}, 0", "estimate one too high")
    p.op(f"@%div_fix sub.u32 %{quot}, %{quot}, 1")
    p.op(f"@%div_fix add.u32 %{rem}, %{rem}, %{den}")
    p.op(f"setp.ge.u32 %div_fix, %{rem}, %{den}", "estimate one too low")
    p.op(f"@%div_fix add.u32 %{quot}, %{quot}, 1")
    p.op(f"@%div_fix sub.u32 %{rem}, %{rem}, %{den}")


def _divmod_u64(p: _Ptx, quot: str, rem: str, num: str, den64: str, den_rcp: str) -> None:
    """quot, rem = divmod(num, den) for u64 num (s64 results): a float estimate, then
    exact correction loops. div.u64 would become a CALL whose ABI spills live registers;
    this stays inline. The loops run at most a few times while the quotient is < 2**24."""
    p.reg("f32", "div_f")
    p.reg("pred", "div_fix")
    down, up, done = p.fresh("DIV_DOWN"), p.fresh("DIV_UP"), p.fresh("DIV_DONE")
    p.op(f"cvt.rn.f32.u64 %div_f, %{num}")
    p.op(f"mul.f32 %div_f, %div_f, %{den_rcp}")
    p.op(f"cvt.rzi.u64.f32 %{quot}, %div_f")
    p.op(f"mul.lo.u64 %{rem}, %{quot}, %{den64}")
    p.op(f"sub.s64 %{rem}, %{num}, %{rem}")
    p.label(down)
    p.op(f"setp.ge.s64 %div_fix, %{rem}, 0")
    p.op(f"@%div_fix bra.uni {up}")
    p.op(f"sub.s64 %{quot}, %{quot}, 1")
    p.op(f"add.s64 %{rem}, %{rem}, %{den64}")
    p.op(f"bra.uni {down}")
    p.label(up)
    p.op(f"setp.lt.s64 %div_fix, %{rem}, %{den64}")
    p.op(f"@%div_fix bra.uni {done}")
    p.op(f"add.s64 %{quot}, %{quot}, 1")
    p.op(f"sub.s64 %{rem}, %{rem}, %{den64}")
    p.op(f"bra.uni {up}")
    p.label(done)


def _pack_bytes(p: _Ptx, word: str, parts: list[str]) -> None:
    """word = parts[0] | parts[1] << 8 | parts[2] << 16 | parts[3] << 24 (each part one byte)."""
    p.reg("b32", "pk_lo", "pk_hi")
    p.op(f"prmt.b32 %pk_lo, %{parts[0]}, %{parts[1]}, 0x0040", "bytes 0,1")
    p.op(f"prmt.b32 %pk_hi, %{parts[2]}, %{parts[3]}, 0x0040", "bytes 2,3")
    p.op(f"prmt.b32 %{word}, %pk_lo, %pk_hi, 0x5410")


class _Tile:
    """Writes the tile kernel; one method per phase. See :func:`tile_kernel`."""

    def __init__(
        self,
        direction: str,
        chunks: int,
        granule: int,
        whole_rows: bool,
        unroll: int,
        block: int,
        loader: str,
        target: str,
    ) -> None:
        self.direction = direction
        self.chunks = chunks
        self.g = granule
        self.whole_rows = whole_rows
        self.unroll = unroll
        self.block = block
        self.loader = loader
        self.target = target
        self.tile_bytes = 16 * unroll * block
        self.stages = 2 if (direction == "backward" and loader != "regs") else 1
        self.p = _Ptx()

    # ---- prologue ---------------------------------------------------------------
    def prologue(self) -> None:
        p, T = self.p, self.tile_bytes
        p.reg(
            "u64", "row_ptr", "row_bytes", "rows", "head", "tiles_abs", "tmp64", "pitch64", "q0", "tile_abs"
        )
        p.reg("s64", "R", "R1", "dR", "tR", "row_bytes_s")
        p.reg("u32", "pitch", "C", "C1", "dC", "tC", "thread", "tile", "grid", "n_tiles", "smem", "tmp32")
        p.reg("pred", "pr", "carry")
        p.op("ld.param.u64 %row_ptr, [row_ptr]")
        p.op("cvta.to.global.u64 %row_ptr, %row_ptr")
        p.op("ld.param.u64 %row_bytes, [row_bytes]", "rows * pitch")
        p.op("mov.b64 %row_bytes_s, %row_bytes")
        p.op("ld.param.u32 %pitch, [row_pitch]")
        p.op("cvt.u64.u32 %pitch64, %pitch")
        p.op("ld.param.u64 %rows, [rows]")
        p.op("mov.u32 %thread, %tid.x")
        p.op("mov.u32 %tile, %ctaid.x", "tiles are handed out grid-stride")
        p.op("mov.u32 %grid, %nctaid.x")
        p.op("mov.u32 %smem, tile_smem", "shared address of stage 0")
        p.op("and.b64 %head, %row_ptr, 15", "bytes from the 16-byte boundary to the array")
        p.op("sub.u64 %tiles_abs, %row_ptr, %head", "tile 0 starts here (absolute, 16-aligned)")
        p.op("add.u64 %tmp64, %row_bytes, %head")
        p.op(f"add.u64 %tmp64, %tmp64, {T - 1}")
        p.op(f"shr.u64 %tmp64, %tmp64, {T.bit_length() - 1}")
        p.op("cvt.u32.u64 %n_tiles, %tmp64", f"tiles of {T} bytes")
        p.reg("f32", "pitch_rcp")
        p.reg("s64", "rem64")
        p.op("cvt.rn.f32.u32 %pitch_rcp, %pitch")
        p.op("rcp.approx.ftz.f32 %pitch_rcp, %pitch_rcp")
        p.note("(R, C) = floor-divmod(tile*T - head, pitch), divided once, then kept by adding")
        p.op(f"mul.wide.u32 %tmp64, %tile, {T}")
        _divmod_u64(p, "R", "rem64", "tmp64", "pitch64", "pitch_rcp")
        p.op("cvt.u32.u64 %C, %rem64")
        p.op("cvt.u32.u64 %tmp32, %head")
        p.op("sub.s32 %C, %C, %tmp32")
        p.label("BORROW")  # runs at most ceil(15 / pitch) times, in tile 0 only
        p.op("setp.ge.s32 %pr, %C, 0")
        p.op("@%pr bra.uni BORROW_DONE")
        p.op("add.s32 %C, %C, %pitch")
        p.op("sub.s64 %R, %R, 1")
        p.op("bra.uni BORROW")
        p.label("BORROW_DONE")
        p.op(f"mul.wide.u32 %tmp64, %grid, {T}", "the grid step, as (rows, columns)")
        _divmod_u64(p, "dR", "rem64", "tmp64", "pitch64", "pitch_rcp")
        p.op("cvt.u32.u64 %dC, %rem64")
        p.op(f"mov.u32 %tmp32, {T}")
        p.op("div.u32 %tC, %tmp32, %pitch", "one tile, as (rows, columns)")
        p.op("rem.u32 %tC, %tmp32, %pitch")
        p.op("div.u32 %tmp32, %tmp32, %pitch")
        p.op("cvt.u64.u32 %tR, %tmp32")
        if not self.whole_rows:
            p.reg("u32", "win_lo", "win_hi", "win_lo_next", "c_last_off", "c_last_w")
            p.op("ld.param.u32 %win_lo, [chunk0_off]", "the group's columns: [win_lo, win_hi)")
            p.op(f"ld.param.u32 %c_last_off, [chunk{self.chunks - 1}_off]")
            p.op(f"ld.param.u32 %c_last_w, [chunk{self.chunks - 1}_width]")
            p.op("add.u32 %win_hi, %c_last_off, %c_last_w")
            p.op("add.u32 %win_lo_next, %win_lo, %pitch", "the window again, one row on")

    # ---- the vector j of the tile: q, full ------------------------------------------
    def _row_vector(self, u: int) -> None:
        """%q_u = V_i + 16*j, %off_u = 16*j and %full_u: the 16 bytes lie in the array
        (and, for a group narrower than the row, wholly inside its columns when
        writing, or touch them when reading)."""
        p = self.p
        p.reg("u32", f"off_{u}")
        p.reg("s64", f"q_{u}")
        p.reg("pred", f"full_{u}", f"any_{u}")
        p.op(f"mad.lo.u32 %off_{u}, %thread, 16, {16 * u * self.block}", f"vector {u}*block + thread")
        p.op(f"cvt.u64.u32 %tmp64, %off_{u}")
        p.op(f"add.s64 %q_{u}, %q0, %tmp64")
        p.op(f"setp.ge.s64 %full_{u}, %q_{u}, 0")
        p.op(f"add.s64 %tmp64, %q_{u}, 16")
        p.op("setp.le.s64 %pr, %tmp64, %row_bytes_s")
        p.op(f"and.pred %full_{u}, %full_{u}, %pr", "all 16 bytes inside the array")
        p.op(f"mov.pred %any_{u}, %full_{u}")
        if self.whole_rows:
            return
        p.reg("u32", "col", "col_q", "col_end")
        p.reg("pred", "touch", "inside")
        p.op(f"add.u32 %tmp32, %C, %off_{u}")
        _divmod_u32(p, "col_q", "col", "tmp32", "pitch", "pitch_rcp")
        p.op("add.u32 %col_end, %col, 16")
        p.op("setp.lt.u32 %touch, %col, %win_hi")
        p.op("setp.gt.u32 %pr, %col_end, %win_lo")
        p.op("and.pred %touch, %touch, %pr")
        p.op("setp.gt.u32 %pr, %col_end, %win_lo_next", "reaches into the next row's window")
        p.op(f"or.pred %any_{u}, %touch, %pr", "holds bytes of the group")
        p.op("setp.ge.u32 %inside, %col, %win_lo")
        p.op("setp.le.u32 %pr, %col_end, %win_hi")
        p.op("and.pred %inside, %inside, %pr", "holds only bytes of the group")
        if self.direction == "backward":
            p.op(f"and.pred %full_{u}, %full_{u}, %any_{u}", "read only vectors the group needs")
        else:
            p.op(f"and.pred %full_{u}, %full_{u}, %inside", "write whole only vectors it owns")

    # ---- backward row phase: dy tile -> shared ----------------------------------------
    def load_rows(self, stage: str) -> None:
        """Read the tile into shared stage ``%{stage}`` (its shared address)."""
        p, U = self.p, self.unroll
        data = []
        for u in range(U):
            self._row_vector(u)
        if self.loader == "regs":
            for u in range(U):
                p.reg("u64", f"gaddr_{u}")
                p.op(f"cvt.u64.u32 %tmp64, %off_{u}")
                p.op(f"add.u64 %gaddr_{u}, %tile_abs, %tmp64")
                data.append(_data_regs(p, f"v{u}", 16))
                p.op(f"@%full_{u} ld.global.nc.v4.u32 {_operand(data[u])}, [%gaddr_{u}]", "all loads first")
            for u in range(U):
                p.reg("u32", f"saddr_{u}")
                p.op(f"add.u32 %saddr_{u}, %{stage}, %off_{u}")
                p.op(f"@%full_{u} st.shared.v4.u32 [%saddr_{u}], {_operand(data[u])}")
        elif self.loader == "cp.async":
            for u in range(U):
                p.reg("u64", f"gaddr_{u}")
                p.reg("u32", f"saddr_{u}")
                p.op(f"cvt.u64.u32 %tmp64, %off_{u}")
                p.op(f"add.u64 %gaddr_{u}, %tile_abs, %tmp64")
                p.op(f"add.u32 %saddr_{u}, %{stage}, %off_{u}")
                p.op(
                    f"@%full_{u} cp.async.cg.shared.global [%saddr_{u}], [%gaddr_{u}], 16",
                    "no registers held",
                )
            p.op("cp.async.commit_group")
        else:  # bulk: thread 0 copies the run of full vectors in one instruction
            self._bulk_issue(stage)
        self._partial_loads(stage)

    def _bulk_issue(self, stage: str) -> None:
        p, T = self.p, self.tile_bytes
        p.reg("s64", "bk_lo", "bk_hi")
        p.reg("u32", "bk_bytes", "bk_mbar", "bk_dst")
        p.reg("u64", "bk_src")
        p.reg("pred", "leader")
        skip = p.fresh("BULK_SKIP")
        p.op("setp.eq.u32 %leader, %thread, 0")
        p.op(f"@!%leader bra.uni {skip}")
        p.note("full vectors of this tile: offsets [bk_lo, bk_hi), bk_lo = 16*ceil(-q0/16) if q0 < 0")
        p.op("neg.s64 %bk_lo, %q0")
        p.op("add.s64 %bk_lo, %bk_lo, 15")
        p.op("and.b64 %bk_lo, %bk_lo, -16")
        p.op("max.s64 %bk_lo, %bk_lo, 0")
        p.op("sub.s64 %bk_hi, %row_bytes_s, %q0", "bytes of the array from the tile start")
        p.op("and.b64 %bk_hi, %bk_hi, -16")
        p.op(f"min.s64 %bk_hi, %bk_hi, {T}")
        p.op("max.s64 %bk_hi, %bk_hi, %bk_lo")
        p.op("sub.s64 %tmp64, %bk_hi, %bk_lo")
        p.op("cvt.u32.u64 %bk_bytes, %tmp64")
        p.op(f"sub.u32 %bk_mbar, %{stage}, %smem")
        p.op(f"shr.u32 %bk_mbar, %bk_mbar, {T.bit_length() - 1 - 3}", "stage s -> mbarrier 8*s")
        p.op("add.u32 %bk_mbar, %bk_mbar, %mbar")
        p.op("fence.proxy.async.shared::cta", "earlier generic reads of this stage before the async write")
        p.op("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%bk_mbar], %bk_bytes", "the bytes to wait for")
        p.op("setp.eq.u32 %pr, %bk_bytes, 0")
        p.op(f"@%pr bra.uni {skip}")
        p.op("cvt.u32.u64 %tmp32, %bk_lo")
        p.op(f"add.u32 %bk_dst, %{stage}, %tmp32")
        p.op("add.u64 %bk_src, %tile_abs, %bk_lo")
        p.op(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
            "[%bk_dst], [%bk_src], %bk_bytes, [%bk_mbar]"
        )
        p.label(skip)

    def _partial_loads(self, stage: str) -> None:
        """Vectors that straddle the array's ends (tiles 0 and last only): byte loads."""
        p, U = self.p, self.unroll
        skip = p.fresh("EDGE_LOADS_DONE")
        p.reg("u32", "last_tile")
        p.reg("pred", "edge")
        p.op("sub.u32 %last_tile, %n_tiles, 1")
        p.op("setp.eq.u32 %edge, %tile, 0")
        p.op("setp.eq.or.u32 %edge, %tile, %last_tile, %edge")
        p.op(f"@!%edge bra.uni {skip}", "interior tiles: no vector straddles the array's ends")
        p.reg("u32", "b", "sb")
        p.reg("s64", "qb")
        p.reg("u64", "gb")
        p.reg("b16", "byte")
        for u in range(U):
            done = p.fresh("EDGE_VEC_DONE")
            loop = p.fresh("EDGE_BYTE")
            p.op(f"@%full_{u} bra.uni {done}")
            p.op("mov.u32 %b, 0")
            p.label(loop)
            p.op("cvt.u64.u32 %tmp64, %b")
            p.op(f"add.s64 %qb, %q_{u}, %tmp64")
            p.op("setp.ge.s64 %pr, %qb, 0")
            p.op("setp.lt.and.s64 %pr, %qb, %row_bytes_s, %pr", "this byte is in the array")
            p.op(f"add.u32 %tmp32, %off_{u}, %b")
            p.op("cvt.u64.u32 %gb, %tmp32")
            p.op("add.u64 %gb, %gb, %tile_abs")
            p.op(f"add.u32 %sb, %{stage}, %tmp32")
            p.op("@%pr ld.global.nc.b8 %byte, [%gb]")
            p.op("@%pr st.shared.b8 [%sb], %byte")
            p.op("add.u32 %b, %b, 1")
            p.op("setp.lt.u32 %pr, %b, 16")
            p.op(f"@%pr bra.uni {loop}")
            p.label(done)
        p.label(skip)

    # ---- forward row phase: shared -> y tile -----------------------------------------
    def store_rows(self, stage: str) -> None:
        p, U = self.p, self.unroll
        data = []
        for u in range(U):
            self._row_vector(u)
            p.reg("u64", f"gaddr_{u}")
            p.reg("u32", f"saddr_{u}")
            p.op(f"cvt.u64.u32 %tmp64, %off_{u}")
            p.op(f"add.u64 %gaddr_{u}, %tile_abs, %tmp64")
            p.op(f"add.u32 %saddr_{u}, %{stage}, %off_{u}")
            data.append(_data_regs(p, f"v{u}", 16))
            p.op(f"@%full_{u} ld.shared.v4.u32 {_operand(data[u])}, [%saddr_{u}]")
            p.op(f"@%full_{u} st.global.v4.u32 [%gaddr_{u}], {_operand(data[u])}")
        # Vectors not written whole: at the array's ends, and (for a group narrower than
        # the row) those that straddle the group's columns. Granule by granule, each
        # written only if it belongs to the array and the group.
        g = self.g if not self.whole_rows else 1
        p.reg("u32", "m", "sg")
        p.reg("s64", "qg")
        p.reg("u64", "gg")
        part = _data_regs(p, "part", g)
        kind = _ld_type(g)
        skip_all = p.fresh("EDGE_STORES_DONE")
        if self.whole_rows:
            p.reg("u32", "last_tile")
            p.reg("pred", "edge")
            p.op("sub.u32 %last_tile, %n_tiles, 1")
            p.op("setp.eq.u32 %edge, %tile, 0")
            p.op("setp.eq.or.u32 %edge, %tile, %last_tile, %edge")
            p.op(f"@!%edge bra.uni {skip_all}")
        else:
            p.reg("u32", "colg")
        for u in range(U):
            done = p.fresh("EDGE_VEC_DONE")
            loop = p.fresh("EDGE_GRANULE")
            p.op(f"@%full_{u} bra.uni {done}")
            if not self.whole_rows:
                p.op(f"@!%any_{u} bra.uni {done}", "no byte of the group here")
                p.op(f"add.u32 %tmp32, %C, %off_{u}")
                _divmod_u32(p, "col_q", "colg", "tmp32", "pitch", "pitch_rcp")
            p.op("mov.u32 %m, 0")
            p.label(loop)
            p.op("cvt.u64.u32 %tmp64, %m")
            p.op(f"add.s64 %qg, %q_{u}, %tmp64")
            p.op("setp.ge.s64 %pr, %qg, 0")
            p.op("setp.lt.and.s64 %pr, %qg, %row_bytes_s, %pr", "in the array")
            if not self.whole_rows:
                p.op("setp.ge.and.u32 %pr, %colg, %win_lo, %pr")
                p.op("setp.lt.and.u32 %pr, %colg, %win_hi, %pr", "in the group's columns")
            p.op(f"add.u32 %tmp32, %off_{u}, %m")
            p.op("cvt.u64.u32 %gg, %tmp32")
            p.op("add.u64 %gg, %gg, %tile_abs")
            p.op(f"add.u32 %sg, %{stage}, %tmp32")
            p.op(f"@%pr ld.shared.{kind} {_operand(part)}, [%sg]")
            p.op(f"@%pr st.global.{kind} [%gg], {_operand(part)}")
            if not self.whole_rows:
                p.op(f"add.u32 %colg, %colg, {g}", "granules never straddle a row: one carry")
                p.op("setp.ge.u32 %carry, %colg, %pitch")
                p.op("@%carry sub.u32 %colg, %colg, %pitch")
            p.op(f"add.u32 %m, %m, {g}")
            p.op("setp.lt.u32 %pr, %m, 16")
            p.op(f"@%pr bra.uni {loop}")
            p.label(done)
        p.label(skip_all)

    # ---- chunk phase ----------------------------------------------------------------
    def _chunk_range(self, k: int) -> tuple[str, str]:
        """Registers for chunk k: its pointer, width, offset, d_lo, d_hi, R*W, vector span."""
        p = self.p
        p.reg("u64", "c_ptr", "c_w64", "c_lim", "c_vstart", "c_vend")
        p.reg("s64", "c_RW", "c_R1W", "c_dlo", "c_dhi")
        p.reg("s32", "c_clo", "c_chi")
        p.reg("u32", "c_w", "c_off", "c_nvec", "c_jump")
        p.reg("f32", "c_rcp")
        done = p.fresh(f"CHUNK{k}_DONE")
        p.op(f"ld.param.u64 %c_ptr, [chunk{k}_ptr]")
        p.op("cvta.to.global.u64 %c_ptr, %c_ptr")
        p.op(f"ld.param.u32 %c_off, [chunk{k}_off]")
        p.op(f"ld.param.u32 %c_w, [chunk{k}_width]")
        p.op("cvt.u64.u32 %c_w64, %c_w")
        p.op("mul.lo.s64 %c_RW, %R, %c_w64", "chunk bytes before the tile's first row")
        p.op("sub.s32 %c_clo, %C, %c_off")
        p.op("max.s32 %c_clo, %c_clo, 0")
        p.op("min.s32 %c_clo, %c_clo, %c_w")
        p.op("cvt.s64.s32 %tmp64, %c_clo")
        p.op("add.s64 %c_dlo, %c_RW, %tmp64", "first chunk byte from this tile")
        p.op("mul.lo.s64 %c_R1W, %R1, %c_w64")
        p.op("sub.s32 %c_chi, %C1, %c_off")
        p.op("max.s32 %c_chi, %c_chi, 0")
        p.op("min.s32 %c_chi, %c_chi, %c_w")
        p.op("cvt.s64.s32 %tmp64, %c_chi")
        p.op("add.s64 %c_dhi, %c_R1W, %tmp64", "first chunk byte from the next tile")
        p.op("mul.lo.u64 %c_lim, %rows, %c_w64")
        p.op("max.s64 %c_dlo, %c_dlo, 0")
        p.op("min.s64 %c_dlo, %c_dlo, %c_lim")
        p.op("min.s64 %c_dhi, %c_dhi, %c_lim")
        p.op("mov.u32 %c_nvec, 0", "(read after `done` by the staging offsets)")
        p.op("setp.le.s64 %pr, %c_dhi, %c_dlo")
        p.op(f"@%pr bra.uni {done}", "nothing of this chunk here")
        p.op("add.u64 %c_vstart, %c_ptr, %c_dlo")
        p.op("and.b64 %c_vstart, %c_vstart, -16", "first 16-byte vector of the range (absolute)")
        p.op("add.u64 %c_vend, %c_ptr, %c_dhi")
        p.op("add.u64 %c_vend, %c_vend, 15")
        p.op("and.b64 %c_vend, %c_vend, -16")
        p.op("sub.u64 %tmp64, %c_vend, %c_vstart")
        p.op("shr.u64 %tmp64, %tmp64, 4")
        p.op("cvt.u32.u64 %c_nvec, %tmp64")
        p.op("sub.u32 %c_jump, %pitch, %c_w", "from the end of the chunk in one row to its start in the next")
        p.op("cvt.rn.f32.u32 %c_rcp, %c_w")
        p.op("rcp.approx.ftz.f32 %c_rcp, %c_rcp")
        return done, ""

    def _source_of(self, dreg: str, sreg: str, rem: str, stage: str) -> None:
        """%sreg = shared address of chunk byte %dreg (s64); %rem = its column in the chunk."""
        p = self.p
        p.reg("u32", "e", "qq")
        p.op(f"sub.s64 %tmp64, %{dreg}, %c_RW")
        p.op("cvt.u32.u64 %e, %tmp64", "chunk bytes from the tile's first row")
        _divmod_u32(p, "qq", rem, "e", "c_w", "c_rcp")
        p.op(f"mad.lo.u32 %{sreg}, %qq, %pitch, %c_off")
        p.op(f"add.u32 %{sreg}, %{sreg}, %{rem}")
        p.op(f"sub.u32 %{sreg}, %{sreg}, %C")
        p.op(f"add.u32 %{sreg}, %{sreg}, %{stage}")

    def _granule_walk(self, sreg: str, rem: str, access: callable) -> None:
        """Visit the 16/g granules of one chunk vector: access(m, shared address operand).
        %sreg carries only the row jumps; the g-steps are immediate offsets."""
        p, g = self.p, self.g
        p.reg("pred", "wrap")
        for m in range(16 // g):
            if m:
                p.op(f"add.u32 %{rem}, %{rem}, {g}")
                p.op(f"setp.eq.u32 %wrap, %{rem}, %c_w", "end of this row's piece")
                p.op(f"@%wrap add.u32 %{sreg}, %{sreg}, %c_jump")
                p.op(f"@%wrap mov.u32 %{rem}, 0")
            access(m, f"[%{sreg}+{m * g}]")

    def gather_chunks(self, stage: str) -> None:
        """Backward: write every chunk's bytes of this tile, 16-byte stores."""
        p, g = self.p, self.g
        for k in range(self.chunks):
            done, _ = self._chunk_range(k)
            p.reg("u32", "j", "s", "rem")
            p.reg("u64", "a")
            p.reg("s64", "d", "dm")
            p.reg("pred", "vfull")
            loop, partial, nxt = p.fresh(f"C{k}_LOOP"), p.fresh(f"C{k}_PARTIAL"), p.fresh(f"C{k}_NEXT")
            out = _data_regs(p, "o", 16)
            p.op("mov.u32 %j, %thread")
            p.label(loop)
            p.op("setp.ge.u32 %pr, %j, %c_nvec")
            p.op(f"@%pr bra.uni {done}")
            p.op("mul.wide.u32 %tmp64, %j, 16")
            p.op("add.u64 %a, %c_vstart, %tmp64", "the absolute 16-byte vector this thread writes")
            p.op("sub.s64 %d, %a, %c_ptr")
            p.op("setp.ge.s64 %vfull, %d, %c_dlo")
            p.op("add.s64 %tmp64, %d, 16")
            p.op("setp.le.and.s64 %vfull, %tmp64, %c_dhi, %vfull", "all 16 bytes come from this tile")
            p.op(f"@!%vfull bra.uni {partial}")
            self._source_of("d", "s", "rem", stage)
            self._gather_vector(out)
            p.op(f"st.global.v4.u32 [%a], {_operand(out)}")
            p.op(f"bra.uni {nxt}")
            p.label(partial)
            self._partial_chunk_vector(store=True, stage=stage)
            p.label(nxt)
            p.op(f"add.u32 %j, %j, {self.block}")
            p.op(f"bra.uni {loop}")
            p.label(done)
        del g

    def _gather_vector(self, out: list[str]) -> None:
        p, g = self.p, self.g
        if g == 16:
            self._granule_walk("s", "rem", lambda m, addr: p.op(f"ld.shared.v4.u32 {_operand(out)}, {addr}"))
        elif g == 8:
            self._granule_walk(
                "s",
                "rem",
                lambda m, addr: p.op(f"ld.shared.v2.u32 {_operand(out[2 * m : 2 * m + 2])}, {addr}"),
            )
        elif g == 4:
            self._granule_walk("s", "rem", lambda m, addr: p.op(f"ld.shared.u32 %{out[m]}, {addr}"))
        elif g == 2:
            halves = [f"h{m}" for m in range(8)]
            p.reg("b16", *halves)
            self._granule_walk("s", "rem", lambda m, addr: p.op(f"ld.shared.b16 %{halves[m]}, {addr}"))
            for w in range(4):
                p.op(f"mov.b32 %{out[w]}, {{%{halves[2 * w]}, %{halves[2 * w + 1]}}}")
        else:
            bytes_ = [f"by{m}" for m in range(16)]
            p.reg("b32", *bytes_)
            self._granule_walk("s", "rem", lambda m, addr: p.op(f"ld.shared.u8 %{bytes_[m]}, {addr}"))
            for w in range(4):
                _pack_bytes(p, out[w], bytes_[4 * w : 4 * w + 4])

    def _partial_chunk_vector(self, *, store: bool, stage: str) -> None:
        """A chunk vector that straddles the tile's range: granule by granule, each only if
        its bytes come from (backward) / go to (forward) this tile."""
        p, g = self.p, self.g
        kind = _ld_type(g)
        regs = _data_regs(p, "pg", g)
        loop = p.fresh("PG_LOOP")
        p.reg("u32", "m")
        p.reg("u64", "am")
        p.op("mov.u32 %m, 0")
        p.label(loop)
        p.op("cvt.u64.u32 %tmp64, %m")
        p.op("add.s64 %dm, %d, %tmp64")
        p.op("add.u64 %am, %a, %tmp64")
        p.op("setp.ge.s64 %pr, %dm, %c_dlo")
        p.op("setp.lt.and.s64 %pr, %dm, %c_dhi, %pr")
        skip = p.fresh("PG_SKIP")
        p.op(f"@!%pr bra.uni {skip}")
        self._source_of("dm", "s", "rem", stage)
        if store:
            p.op(f"ld.shared.{kind} {_operand(regs)}, [%s]")
            p.op(f"st.global.{kind} [%am], {_operand(regs)}")
        else:
            p.op(f"ld.global.nc.{kind} {_operand(regs)}, [%am]")
            p.op(f"st.shared.{kind} [%s], {_operand(regs)}")
        p.label(skip)
        p.op(f"add.u32 %m, %m, {g}")
        p.op("setp.lt.u32 %pr, %m, 16")
        p.op(f"@%pr bra.uni {loop}")

    def scatter_chunks(self, stage: str) -> None:
        """Forward: read every chunk's bytes for this tile (16-byte loads, `unroll` in
        flight) and place them in the shared tile."""
        p, U, B = self.p, self.unroll, self.block
        for k in range(self.chunks):
            done, _ = self._chunk_range(k)
            p.reg("u32", "j0", "j", "s", "rem")
            p.reg("u64", "a")
            p.reg("s64", "d", "dm")
            loop = p.fresh(f"C{k}_LOOP")
            p.op("mov.u32 %j0, %thread")
            p.label(loop)
            p.op("setp.ge.u32 %pr, %j0, %c_nvec")
            p.op(f"@%pr bra.uni {done}")
            vals = []
            for u in range(U):
                p.reg("u64", f"ca_{u}")
                p.reg("s64", f"cd_{u}")
                p.reg("pred", f"cvalid_{u}", f"cfull_{u}")
                p.op(f"add.u32 %j, %j0, {u * B}")
                p.op(f"setp.lt.u32 %cvalid_{u}, %j, %c_nvec")
                p.op("mul.wide.u32 %tmp64, %j, 16")
                p.op(f"add.u64 %ca_{u}, %c_vstart, %tmp64")
                p.op(f"sub.s64 %cd_{u}, %ca_{u}, %c_ptr")
                p.op(f"setp.ge.and.s64 %cfull_{u}, %cd_{u}, %c_dlo, %cvalid_{u}")
                p.op(f"add.s64 %tmp64, %cd_{u}, 16")
                p.op(f"setp.le.and.s64 %cfull_{u}, %tmp64, %c_dhi, %cfull_{u}")
                vals.append(_data_regs(p, f"x{u}", 16))
                p.op(f"@%cfull_{u} ld.global.nc.v4.u32 {_operand(vals[u])}, [%ca_{u}]", "all loads first")
            for u in range(U):
                part, nxt = p.fresh(f"C{k}_PART"), p.fresh(f"C{k}_NEXT")
                p.op(f"@!%cfull_{u} bra.uni {part}")
                p.op(f"mov.s64 %d, %cd_{u}")
                self._source_of("d", "s", "rem", stage)
                self._scatter_vector(vals[u])
                p.op(f"bra.uni {nxt}")
                p.label(part)
                p.op(f"@!%cvalid_{u} bra.uni {nxt}")
                p.op(f"mov.s64 %d, %cd_{u}")
                p.op(f"mov.u64 %a, %ca_{u}")
                self._partial_chunk_vector(store=False, stage=stage)
                p.label(nxt)
            p.op(f"add.u32 %j0, %j0, {U * B}")
            p.op(f"bra.uni {loop}")
            p.label(done)

    def scatter_chunks_async(self, stage: str) -> None:
        """Forward on sm_80+: first every chunk's vectors of this tile go to a staging area
        with cp.async (all in flight at once, no registers held), then they are scattered
        from there into the tile."""
        p, B = self.p, self.block
        p.reg("u32", "j", "s", "rem", "st_off", "st_addr")
        p.reg("u64", "a")
        p.reg("s64", "d", "dm")
        p.reg("pred", "vfull")
        for phase in ("issue", "scatter"):
            p.op("mov.u32 %st_off, %staging", "chunk k's vectors follow chunk k-1's")
            for k in range(self.chunks):
                done, _ = self._chunk_range(k)
                loop, nxt = p.fresh(f"A{k}_LOOP"), p.fresh(f"A{k}_NEXT")
                p.op("mov.u32 %j, %thread")
                p.label(loop)
                p.op("setp.ge.u32 %pr, %j, %c_nvec")
                p.op(f"@%pr bra.uni {done}")
                p.op("mul.wide.u32 %tmp64, %j, 16")
                p.op("add.u64 %a, %c_vstart, %tmp64")
                p.op("sub.s64 %d, %a, %c_ptr")
                p.op("setp.ge.s64 %vfull, %d, %c_dlo")
                p.op("add.s64 %tmp64, %d, 16")
                p.op("setp.le.and.s64 %vfull, %tmp64, %c_dhi, %vfull")
                p.op("mad.lo.u32 %st_addr, %j, 16, %st_off")
                if phase == "issue":
                    part = p.fresh(f"A{k}_PART")
                    p.op(f"@!%vfull bra.uni {part}")
                    p.op("cp.async.cg.shared.global [%st_addr], [%a], 16", "in flight; no register held")
                    p.op(f"bra.uni {nxt}")
                    p.label(part)
                    self._partial_chunk_vector(store=False, stage=stage)
                else:
                    p.op(f"@!%vfull bra.uni {nxt}", "edge vectors went straight to the tile")
                    vals = _data_regs(p, "x0", 16)
                    p.op(f"ld.shared.v4.u32 {_operand(vals)}, [%st_addr]")
                    self._source_of("d", "s", "rem", stage)
                    self._scatter_vector(vals)
                p.label(nxt)
                p.op(f"add.u32 %j, %j, {B}")
                p.op(f"bra.uni {loop}")
                p.label(done)
                p.op("mad.lo.u32 %st_off, %c_nvec, 16, %st_off")
            if phase == "issue":
                p.op("cp.async.commit_group")
                p.op("cp.async.wait_group 0", "this thread's copies have landed")
                p.op("bar.sync 0", "... and everyone's")

    def _scatter_vector(self, val: list[str]) -> None:
        p, g = self.p, self.g
        if g == 16:
            self._granule_walk("s", "rem", lambda m, addr: p.op(f"st.shared.v4.u32 {addr}, {_operand(val)}"))
        elif g == 8:
            self._granule_walk(
                "s",
                "rem",
                lambda m, addr: p.op(f"st.shared.v2.u32 {addr}, {_operand(val[2 * m : 2 * m + 2])}"),
            )
        elif g == 4:
            self._granule_walk("s", "rem", lambda m, addr: p.op(f"st.shared.u32 {addr}, %{val[m]}"))
        elif g == 2:
            halves = [f"h{m}" for m in range(8)]
            p.reg("b16", *halves)
            for w in range(4):
                p.op(f"mov.b32 {{%{halves[2 * w]}, %{halves[2 * w + 1]}}}, %{val[w]}")
            self._granule_walk("s", "rem", lambda m, addr: p.op(f"st.shared.b16 {addr}, %{halves[m]}"))
        else:
            p.reg("b32", "byte_w")

            def one(m: int, addr: str) -> None:
                if m % 4:
                    p.op(f"shr.b32 %byte_w, %{val[m // 4]}, {8 * (m % 4)}")
                    p.op(f"st.shared.u8 {addr}, %byte_w")
                else:
                    p.op(f"st.shared.u8 {addr}, %{val[m // 4]}")

            self._granule_walk("s", "rem", one)

    # ---- main loop ------------------------------------------------------------------
    def body(self) -> None:
        p, T = self.p, self.tile_bytes
        self.prologue()
        p.reg("u32", "stage", "other")
        p.op("mov.u32 %stage, %smem")
        if self.direction == "forward" and self.loader == "cp.async":
            p.reg("u32", "staging")
            p.op("mov.u32 %staging, tile_staging")
        if self.loader == "bulk":
            p.reg("u32", "mbar", "phase", "mb_now")
            p.reg("pred", "leader0", "ready")
            p.op("mov.u32 %mbar, tile_mbar")
            p.op("mov.u32 %phase, 0", "bit s: the parity stage s's barrier completes next")
            p.op("setp.eq.u32 %leader0, %thread, 0")
            p.op("@%leader0 mbarrier.init.shared::cta.b64 [%mbar], 1", "one arrival (the leader's expect_tx)")
            p.op("add.u32 %tmp32, %mbar, 8")
            p.op("@%leader0 mbarrier.init.shared::cta.b64 [%tmp32], 1")
            p.op("fence.proxy.async.shared::cta", "make the initialised barriers visible to the copy engine")
            p.op("bar.sync 0")
        if self.stages == 1:
            p.label("TILE_LOOP")
            p.op("setp.ge.u32 %pr, %tile, %n_tiles")
            p.op("@%pr bra.uni EXIT")
            self._tile_setup()
            if self.direction == "backward":
                self.load_rows("stage")
                p.op("bar.sync 0", "the whole tile is in shared memory")
                self._next_row_state()
                self.gather_chunks("stage")
            else:
                self._next_row_state()
                if self.loader == "cp.async":
                    self.scatter_chunks_async("stage")
                else:
                    self.scatter_chunks("stage")
                p.op("bar.sync 0", "every chunk's bytes are in the tile")
                self.store_rows("stage")
            p.op("bar.sync 0", "everyone is done with the tile before it is refilled")
            self._advance()
            p.op("bra.uni TILE_LOOP")
        else:
            self._pipelined(T)
        p.label("EXIT")
        p.op("ret")

    def _tile_setup(self) -> None:
        p, T = self.p, self.tile_bytes
        p.op(f"mul.wide.u32 %tmp64, %tile, {T}")
        p.op("add.u64 %tile_abs, %tiles_abs, %tmp64", "absolute address of the tile's first byte")
        p.op("sub.s64 %q0, %tmp64, %head", "its offset in the array (negative in tile 0)")

    def _next_row_state(self) -> None:
        """(R1, C1): where the next tile starts (the end of this one)."""
        p = self.p
        p.op("add.u32 %C1, %C, %tC")
        p.op("add.s64 %R1, %R, %tR")
        p.op("setp.ge.u32 %carry, %C1, %pitch")
        p.op("@%carry sub.u32 %C1, %C1, %pitch")
        p.op("@%carry add.s64 %R1, %R1, 1")

    def _advance(self) -> None:
        p = self.p
        p.op("add.u32 %tile, %tile, %grid")
        p.op("add.u32 %C, %C, %dC")
        p.op("add.s64 %R, %R, %dR")
        p.op("setp.ge.u32 %carry, %C, %pitch")
        p.op("@%carry sub.u32 %C, %C, %pitch")
        p.op("@%carry add.s64 %R, %R, 1")

    def _pipelined(self, T: int) -> None:
        """Two stages (backward only): the next tile's loads fly while this one is written."""
        p = self.p
        p.reg("u32", "cur_tile", "cur_C")
        p.reg("s64", "cur_R")
        p.reg("u64", "cur_abs", "cur_q0")
        p.op("setp.ge.u32 %pr, %tile, %n_tiles")
        p.op("@%pr bra.uni EXIT")
        p.note("prologue: the first tile's loads into stage 0")
        self._tile_setup()
        self.load_rows("stage")
        p.label("TILE_LOOP")
        p.note("keep this tile's state; move to the next one and start its loads in the other stage")
        p.op("mov.u32 %cur_tile, %tile")
        p.op("mov.u32 %cur_C, %C")
        p.op("mov.s64 %cur_R, %R")
        self._advance()
        p.op("add.u32 %other, %smem, %smem", "the other stage: smem + T - (stage - smem)")
        p.op(f"add.u32 %other, %other, {T}")
        p.op("sub.u32 %other, %other, %stage")
        p.reg("pred", "has_next")
        p.op("setp.lt.u32 %has_next, %tile, %n_tiles")
        nxt = p.fresh("NO_NEXT")
        p.op(f"@!%has_next bra.uni {nxt}")
        self._tile_setup()
        self.load_rows("other")
        p.label(nxt)
        if self.loader == "cp.async":
            p.op("@!%has_next cp.async.commit_group", "an empty group keeps the count uniform")
            p.op("cp.async.wait_group 1", "this thread's copies of the current tile have landed")
            p.op("bar.sync 0", "... and everyone else's")
        else:
            wait = p.fresh("WAIT")
            p.op("sub.u32 %mb_now, %stage, %smem")
            p.op(f"shr.u32 %mb_now, %mb_now, {T.bit_length() - 1}")
            p.op("shr.b32 %tmp32, %phase, %mb_now")
            p.op("and.b32 %tmp32, %tmp32, 1")
            p.op("shl.b32 %mb_now, %mb_now, 3")
            p.op("add.u32 %mb_now, %mb_now, %mbar")
            p.label(wait)
            p.op("mbarrier.try_wait.parity.shared::cta.b64 %ready, [%mb_now], %tmp32")
            p.op(f"@!%ready bra.uni {wait}")
            p.op("sub.u32 %tmp32, %stage, %smem")
            p.op(f"shr.u32 %tmp32, %tmp32, {T.bit_length() - 1}")
            p.op("shl.b32 %tmp32, 1, %tmp32")
            p.op("xor.b32 %phase, %phase, %tmp32", "this stage's next completion has the other parity")
            p.op("bar.sync 0", "the edge bytes other threads stored into this stage")
        p.note("write the current tile from its stage; the state registers name it again")
        p.reg("u32", "nxt_tile", "nxt_C")
        p.reg("s64", "nxt_R")
        p.op("mov.u32 %nxt_tile, %tile")
        p.op("mov.u32 %nxt_C, %C")
        p.op("mov.s64 %nxt_R, %R")
        p.op("mov.u32 %tile, %cur_tile")
        p.op("mov.u32 %C, %cur_C")
        p.op("mov.s64 %R, %cur_R")
        self._next_row_state()
        self.gather_chunks("stage")
        p.op("mov.u32 %tile, %nxt_tile")
        p.op("mov.u32 %C, %nxt_C")
        p.op("mov.s64 %R, %nxt_R")
        p.op("bar.sync 0", "the stage is free again")
        p.op("mov.u32 %stage, %other")
        p.op("setp.lt.u32 %pr, %tile, %n_tiles")
        p.op("@%pr bra.uni TILE_LOOP")


def tile_kernel(
    *,
    direction: str,
    chunks: int,
    granule: int,
    whole_rows: bool = True,
    unroll: int = 4,
    block: int = 256,
    loader: str = "regs",
    target: str = "sm_90",
) -> ProtoKernel:
    """Shared-memory tile kernel for any alignment; see the module docstring.

    ``chunks`` adjacent chunks (a group) are written (backward) or read (forward) from
    one pass over the row side. ``whole_rows``: the group covers every column (fused
    split/concat), so every row-side vector is moved whole; otherwise only vectors
    touching the group's columns are read (backward), and vectors the group owns only
    in part are written granule by granule (forward). ``granule`` (16/8/4/2/1) must
    divide every chunk's width and offset, the pitch, every chunk pointer, and
    ``row_ptr + offset`` (:func:`choose` checks). ``loader`` (backward only): ``regs``
    (sm_75+), ``cp.async`` (sm_80+) or ``bulk`` (``cp.async.bulk`` + mbarrier, sm_90+).
    """
    if direction not in ("backward", "forward"):
        raise ValueError(f"direction {direction!r}; accepted: 'backward', 'forward'")
    target = resolve_target(target)
    _check_pow2(granule, "granule", WIDTHS)
    _check_block(block)
    _check_pow2(unroll, "unroll", (1, 2, 4, 8))
    if not 1 <= chunks <= MAX_CHUNKS:
        raise ValueError(f"chunks = {chunks} is outside 1..{MAX_CHUNKS}")
    if loader not in ("regs", "cp.async", "bulk"):
        raise ValueError(f"loader {loader!r}; accepted: 'regs', 'cp.async', 'bulk'")
    cap = target_capability(target)
    if loader == "bulk" and direction != "backward":
        raise ValueError("loader 'bulk' is for direction 'backward' only")
    if loader == "cp.async" and cap < (8, 0):
        raise ValueError(f"loader 'cp.async' needs sm_80 or newer, not {target}")
    if loader == "bulk" and cap < (9, 0):
        raise ValueError(f"loader 'bulk' needs sm_90 or newer, not {target}")
    if loader == "bulk" and not whole_rows:
        raise ValueError("loader 'bulk' copies whole tiles: it needs whole_rows=True")
    t = _Tile(direction, chunks, granule, whole_rows, unroll, block, loader, target)
    stages_bytes = t.tile_bytes * t.stages
    staging = t.tile_bytes + 32 * chunks if (direction == "forward" and loader == "cp.async") else 0
    if stages_bytes + staging > 48 * 1024:
        raise ValueError(
            f"{stages_bytes + staging} bytes of static shared memory; at most 49152 "
            "(16*unroll*block per stage, plus staging for forward cp.async)"
        )
    t.body()
    shared = [f".shared .align 16 .b8 tile_smem[{stages_bytes}];"]
    if staging:
        shared.append(f".shared .align 16 .b8 tile_staging[{staging}];")
    if loader == "bulk":
        shared.append(".shared .align 8 .b64 tile_mbar[2];")
    params: list[tuple[str, Pointer | Scalar]] = [
        ("row_ptr", _BYTES_IN if direction == "backward" else _BYTES_OUT),
        ("row_bytes", _U64),
        ("row_pitch", _U32),
        ("rows", _U64),
    ]
    for k in range(chunks):
        params.append((f"chunk{k}_ptr", _BYTES_OUT if direction == "backward" else _BYTES_IN))
        params.append((f"chunk{k}_off", _U32))
        params.append((f"chunk{k}_width", _U32))
    isa = {"regs": _isa_for(target), "cp.async": _isa_for(target, "7.0"), "bulk": _isa_for(target, "8.0")}[
        loader
    ]
    name = f"fastcat_tile_{direction}"
    rows_tag = "rows" if whole_rows else "cols"
    return _module(
        name=name,
        kid=f"{name}__g{granule}__k{chunks}__{rows_tag}__u{unroll}__b{block}__{loader}__{target}",
        target=target,
        isa=isa,
        header=[
            f"{name}: {chunks} chunk(s) through shared-memory tiles of {t.tile_bytes} bytes",
            f"({t.stages} stage(s), loads via {loader}); re-indexing in {granule}-byte granules.",
            "Row side and chunk side both move as 16-byte vectors whatever the alignment;",
            "only the vectors that straddle a range end move granule by granule.",
        ],
        params=params,
        shared=shared,
        ptx=t.p,
        block=block,
        shared_bytes=stages_bytes + staging + (16 if loader == "bulk" else 0),
        # Several resident blocks keep loads in flight while others re-index; it also
        # steadies ptxas, which otherwise spilled a few bytes in small configurations.
        # Forward holds `unroll` loaded vectors across the scatter: ask for fewer.
        min_blocks=max(1, min(1024 // block, 16 // unroll) // (1 if direction == "backward" else 2)),
        info={
            "family": "tile",
            "direction": direction,
            "chunks": chunks,
            "granule": granule,
            "whole_rows": whole_rows,
            "unroll": unroll,
            "block": block,
            "loader": loader,
            "tile_bytes": t.tile_bytes,
        },
    )


# --------------------------------------------------------------------------- the rule

OPS = ("gather", "scatter", "split", "concat")
_DIRECTION = {"gather": "backward", "split": "backward", "scatter": "forward", "concat": "forward"}


def access_width(row_mod16: int, pitch: int, off: int, width: int, chunk_mod16: int) -> int:
    """The widest access (16/8/4/2/1 bytes) that moves chunk bytes between both sides:
    it must divide the row-side address of the chunk's first column, the pitch, the
    chunk's width and the chunk pointer (all in bytes; addresses given modulo 16)."""
    for w in WIDTHS:
        if (row_mod16 + off) % w == 0 and pitch % w == 0 and width % w == 0 and chunk_mod16 % w == 0:
            return w
    return 1


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a plan: which generator with which parameters, which chunks
    of the op it handles, its grid, and the dynamic arguments it takes."""

    family: str  # "vec" or "tile"
    spec: tuple[tuple[str, object], ...]  # generator keyword arguments
    chunk_ids: tuple[int, ...]
    grid: int
    why: str

    def kernel(self, target: str) -> ProtoKernel:
        kw = dict(self.spec)
        make = {"vec": vec_kernel, "tile": tile_kernel, "rowpack": rowpack_kernel}[self.family]
        return make(target=target, **kw)

    def args(
        self, row_ptr: int, chunk_ptrs: list[int], rows: int, pitch: int, offs: list[int], widths: list[int]
    ):
        """The argument values in declaration order (sizes in bytes, all chunks of the op
        indexed by ``chunk_ids``)."""
        ids = self.chunk_ids
        if self.family == "rowpack":
            return (row_ptr, rows, *(chunk_ptrs[k] for k in ids))
        if self.family == "vec":
            w = dict(self.spec)["width"]
            first = offs[ids[0]]
            window = offs[ids[-1]] + widths[ids[-1]] - first
            vals: list[int] = [row_ptr + first, pitch, rows, window // w]
            for k in ids:
                vals += [chunk_ptrs[k], widths[k]]
                if len(ids) > 1:
                    vals.append((offs[k] - first) // w)
            return tuple(vals)
        vals = [row_ptr, rows * pitch, pitch, rows]
        for k in ids:
            vals += [chunk_ptrs[k], offs[k], widths[k]]
        return tuple(vals)


def choose(
    op: str,
    rows: int,
    sizes: list[int] | tuple[int, ...],
    dtype_size: int,
    *,
    row_mod16: int = 0,
    chunk_mod16: list[int] | tuple[int, ...] | None = None,
    sm_count: int = 132,
    target: str = "sm_90",
    chunk: int | None = None,
) -> list[Launch]:
    """The launches that perform ``op`` (see :data:`OPS`) on ``rows`` rows split into
    ``sizes`` channels of ``dtype_size`` bytes; ``chunk`` names the chunk of a per-chunk
    op (gather/scatter). Addresses are given modulo 16 (``row_mod16``: the row side,
    ``chunk_mod16``: each chunk's array). The rule, from measurements on H200
    (docs/perf/kernels.md):

    * gather, 8- or 16-byte accesses allowed -> ``vec``, 8 loads in flight; a chunk
      narrower than a third of the row -> ``vec`` at its granule, 4 in flight
      (prefetching 256-byte blocks only if every sector holds needed bytes); else
      ``tile`` over its columns.
    * scatter -> ``vec`` at its granule, source prefetched by 256-byte blocks.
    * split/concat with a granule of 1 or 2 bytes, every pointer 16-byte aligned and n
      rows of both sides within 128 bytes -> ``rowpack`` (constant byte shuffles).
    * split/concat otherwise -> ``tile`` over whole rows with the smallest granule, in
      groups of at most MAX_CHUNKS adjacent chunks (one launch each); backward through
      registers (8 loads in flight where the granule is >= 8, else 4), forward through
      cp.async staging (registers on sm_75).
    """
    if op not in OPS:
        raise ValueError(f"op {op!r}; accepted: {', '.join(OPS)}")
    if dtype_size not in (1, 2, 4, 8, 16):
        raise ValueError(f"dtype_size {dtype_size}; accepted: 1, 2, 4, 8, 16")
    if not sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in sizes):
        raise ValueError(f"sizes must be a non-empty list of ints >= 0, got {sizes!r}")
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    chunk_mod16 = list(chunk_mod16) if chunk_mod16 is not None else [0] * len(sizes)
    if len(chunk_mod16) != len(sizes):
        raise ValueError(f"{len(chunk_mod16)} chunk addresses for {len(sizes)} sizes")
    for what, m in (("row_mod16", row_mod16), *(("chunk_mod16", m) for m in chunk_mod16)):
        if isinstance(m, bool) or not isinstance(m, int) or not 0 <= m < 16:
            raise ValueError(f"{what} must hold addresses modulo 16 (0..15), got {m!r}")
    pitch = sum(sizes) * dtype_size
    if pitch >= 1 << 30:
        raise ValueError(f"a row of {pitch} bytes is too wide; at most 2**30 - 1")
    offs, widths = [], []
    for s in sizes:
        offs.append(sum(widths))
        widths.append(s * dtype_size)
    cap = target_capability(resolve_target(target))
    direction = _DIRECTION[op]
    per_chunk = op in ("gather", "scatter")
    if per_chunk:
        if chunk is None or not 0 <= chunk < len(sizes):
            raise ValueError(f"op {op!r} needs chunk in 0..{len(sizes) - 1}, got {chunk!r}")
        ids = [chunk]
    else:
        ids = list(range(len(sizes)))
    ids = [k for k in ids if widths[k] > 0]  # empty chunks: nothing to copy
    if rows == 0 or not ids:
        return []
    w = {k: access_width(row_mod16, pitch, offs[k], widths[k], chunk_mod16[k]) for k in ids}
    block = 256
    grid = sm_count * (2048 // block)  # grid-stride kernels: one full wave of 256-thread blocks
    hint = "L2::256B" if cap >= (8, 0) else None

    def vec(width: int, unroll: int, load_hint: str | None, why: str) -> Launch:
        spec = [
            ("direction", direction),
            ("width", width),
            ("chunks", 1),
            ("unroll", unroll),
            ("block", block),
        ]
        if load_hint:
            spec.append(("load_hint", load_hint))
        return Launch("vec", tuple(spec), tuple(ids), grid, why)

    if op == "gather":
        k = ids[0]
        if w[k] >= 8:
            return [
                vec(w[k], 8, None, f"{w[k]}-byte accesses on both sides: copy directly, 8 loads in flight")
            ]
        if 3 * widths[k] < pitch:
            # A narrow chunk of a wide row: a tile would carry mostly other columns through
            # shared memory. Prefetch whole 256-byte blocks only where every sector holds
            # needed bytes (else the prefetch reads what is not needed).
            dense = pitch - widths[k] < 32
            return [vec(w[k], 4, hint if dense else None, f"narrow chunk: {w[k]}-byte accesses")]
    if op == "scatter":
        # The source (x_k) is read whole: prefetching 256-byte blocks never wastes.
        return [vec(w[ids[0]], 4, hint, f"{w[ids[0]]}-byte accesses, source prefetched by 256-byte blocks")]
    if not per_chunk and all(chunk_mod16[k] == 0 for k in ids) and row_mod16 == 0 and len(ids) <= 8:
        narrow = tuple(widths[k] for k in ids)
        # Measured: ahead of tiles for 1- and 2-byte granules (71% vs 40%, 73% vs 66% of
        # the ceiling on 4,194,304 x (1+3)), behind them for 4 and 8 (72% vs 89%): its
        # warps are not coalesced (each thread owns 64 contiguous bytes).
        if min(w.values()) <= 2 and rowpack_rows(narrow) * pitch <= 128:
            spec = (("direction", direction), ("widths", narrow), ("block", block))
            return [
                Launch("rowpack", spec, tuple(ids), grid, "short rows: constant byte shuffles in registers")
            ]
    launches = []
    for start in range(0, len(ids), MAX_CHUNKS):
        group = ids[start : start + MAX_CHUNKS]
        granule = min(w[k] for k in group)
        whole = offs[group[0]] == 0 and offs[group[-1]] + widths[group[-1]] == pitch
        if direction == "forward":
            # Forward: the chunk side goes through cp.async staging (all chunks' loads in
            # flight at once); sm_75 has no cp.async: registers.
            loader, unroll = ("cp.async", 4) if cap >= (8, 0) else ("regs", 4)
        else:
            # Backward: register-staged loads matched cp.async / cp.async.bulk on H200; 8 in
            # flight per thread paid off where the re-indexing is cheap (granule >= 8).
            loader, unroll = "regs", (8 if granule >= 8 and whole else 4)
        tile_bytes = 16 * unroll * block
        n_tiles = -(-(rows * pitch + 15) // tile_bytes)
        launches.append(
            Launch(
                "tile",
                (
                    ("direction", direction),
                    ("chunks", len(group)),
                    ("granule", granule),
                    ("whole_rows", whole),
                    ("unroll", unroll),
                    ("block", block),
                    ("loader", loader),
                ),
                tuple(group),
                max(1, min(n_tiles, sm_count * 4)),
                f"{granule}-byte granules: re-index through shared memory",
            )
        )
    return launches


# --------------------------------------------------------------------------- rowpack family
#
# For rows of a few bytes (4,194,304 x (1+3) in u8 has 4-byte rows) every 16-byte vector
# holds several rows, and re-indexing granule by granule costs more than the copy. When the
# pitch and widths are known while the PTX is written, a thread can take n rows at once,
# n chosen so that n*pitch and every n*width_k are multiples of 16: it loads those bytes
# as 16-byte vectors, builds every output word with at most three `prmt` whose selectors
# are constants, and stores 16-byte vectors. No shared memory, no division.


def rowpack_rows(widths: tuple[int, ...]) -> int:
    """n: the fewest rows whose bytes on both sides are whole 16-byte vectors."""
    n = 1
    for x in (sum(widths), *widths):
        need = 16 // math.gcd(16, x)
        n = n * need // math.gcd(n, need)
    return n


def _emit_word(p: _Ptx, dst: str, picks: list[tuple[str, int]]) -> None:
    """dst = the 4 bytes picks[i] = (source word register, byte index) as bytes 0..3."""
    words = list(dict.fromkeys(w for w, _ in picks))
    if len(words) <= 2:
        a, b = words[0], words[-1]
        sel = sum(((0 if w == a else 4) + byte) << (4 * i) for i, (w, byte) in enumerate(picks))
        p.op(f"prmt.b32 %{dst}, %{a}, %{b}, {sel:#06x}")
        return
    # three or four source words: two pairs, then merge
    first, second = words[:2], words[2:] + words[2:][:1]
    p.reg("b32", "pk_lo", "pk_hi")
    sel_lo = sel_hi = merge = 0
    for i, (w, byte) in enumerate(picks):
        if w in first:
            sel_lo |= ((0 if w == first[0] else 4) + byte) << (4 * i)
            merge |= i << (4 * i)
        else:
            sel_hi |= ((0 if w == second[0] else 4) + byte) << (4 * i)
            merge |= (4 + i) << (4 * i)
    p.op(f"prmt.b32 %pk_lo, %{first[0]}, %{first[1]}, {sel_lo:#06x}")
    p.op(f"prmt.b32 %pk_hi, %{second[0]}, %{second[1]}, {sel_hi:#06x}")
    p.op(f"prmt.b32 %{dst}, %pk_lo, %pk_hi, {merge:#06x}")


def rowpack_kernel(
    *,
    direction: str,
    widths: tuple[int, ...],
    block: int = 256,
    target: str = "sm_90",
) -> ProtoKernel:
    """Fused split/concat for short rows: ``widths`` (bytes, every chunk, in order) are
    compiled in. Needs every pointer 16-byte aligned and n*pitch <= 128 bytes (n from
    :func:`rowpack_rows`); the last ``rows % n`` rows are copied byte by byte."""
    if direction not in ("backward", "forward"):
        raise ValueError(f"direction {direction!r}; accepted: 'backward', 'forward'")
    target = resolve_target(target)
    _check_block(block)
    widths = tuple(widths)
    if (
        not widths
        or len(widths) > 8
        or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in widths)
    ):
        raise ValueError(f"widths must be 1 to 8 ints >= 1 (bytes), got {widths!r}")
    pitch = sum(widths)
    n = rowpack_rows(widths)
    group = n * pitch
    if group > 128:
        raise ValueError(f"{n} rows of {pitch} bytes = {group} bytes a thread; at most 128")
    offs = [sum(widths[:k]) for k in range(len(widths))]
    p = _Ptx()
    p.reg("u64", "row_ptr", "rows", "n_groups", "gi", "stride", "tmp64", "raddr", "caddr")
    p.reg("u32", "thread", "block_id", "block_dim", "grid_dim")
    p.reg("pred", "pr")
    p.op("ld.param.u64 %row_ptr, [row_ptr]")
    p.op("cvta.to.global.u64 %row_ptr, %row_ptr")
    p.op("ld.param.u64 %rows, [rows]")
    for k in range(len(widths)):
        p.reg("u64", f"cptr{k}")
        p.op(f"ld.param.u64 %cptr{k}, [chunk{k}_ptr]")
        p.op(f"cvta.to.global.u64 %cptr{k}, %cptr{k}")
    p.op("mov.u32 %thread, %tid.x")
    p.op("mov.u32 %block_id, %ctaid.x")
    p.op("mov.u32 %block_dim, %ntid.x")
    p.op("mov.u32 %grid_dim, %nctaid.x")
    p.op("mul.wide.u32 %gi, %block_id, %block_dim")
    p.op("cvt.u64.u32 %tmp64, %thread")
    p.op("add.u64 %gi, %gi, %tmp64", f"group = {n} rows")
    p.op("mul.wide.u32 %stride, %grid_dim, %block_dim")
    p.op(f"shr.u64 %n_groups, %rows, {n.bit_length() - 1}", f"whole groups ({n} is a power of two)")
    in_words = [f"i{w}" for w in range(group // 4)]
    p.label("LOOP")
    p.op("setp.ge.u64 %pr, %gi, %n_groups")
    p.op("@%pr bra.uni TAIL")
    if direction == "backward":
        p.reg("b32", *in_words)
        p.op(f"mad.lo.u64 %raddr, %gi, {group}, %row_ptr")
        for v in range(group // 16):
            regs = in_words[4 * v : 4 * v + 4]
            p.op(
                f"ld.global.nc.v4.u32 {_operand(regs)}, [%raddr+{16 * v}]",
                f"rows' bytes {16 * v}..{16 * v + 15}",
            )
        p.reg("b32", "o0", "o1", "o2", "o3")
        for k, (w, o) in enumerate(zip(widths, offs)):
            p.op(f"mad.lo.u64 %caddr, %gi, {n * w}, %cptr{k}")
            for v in range(n * w // 16):
                for q in range(4):
                    picks = []
                    for b in range(4):
                        j = 16 * v + 4 * q + b  # byte j of this chunk's n rows
                        src = (j // w) * pitch + o + j % w
                        picks.append((in_words[src // 4], src % 4))
                    _emit_word(p, f"o{q}", picks)
                p.op(f"st.global.v4.u32 [%caddr+{16 * v}], {{%o0, %o1, %o2, %o3}}")
    else:
        chunk_words = []
        for k, w in enumerate(widths):
            names = [f"x{k}_{i}" for i in range(n * w // 4)]
            p.reg("b32", *names)
            chunk_words.append(names)
            p.op(f"mad.lo.u64 %caddr, %gi, {n * w}, %cptr{k}")
            for v in range(n * w // 16):
                p.op(f"ld.global.nc.v4.u32 {_operand(names[4 * v : 4 * v + 4])}, [%caddr+{16 * v}]")
        p.reg("b32", "o0", "o1", "o2", "o3")
        p.op(f"mad.lo.u64 %raddr, %gi, {group}, %row_ptr")
        for v in range(group // 16):
            for q in range(4):
                picks = []
                for b in range(4):
                    i = 16 * v + 4 * q + b
                    r, c = divmod(i, pitch)
                    k = max(kk for kk in range(len(widths)) if offs[kk] <= c)
                    src = r * widths[k] + c - offs[k]
                    picks.append((chunk_words[k][src // 4], src % 4))
                _emit_word(p, f"o{q}", picks)
            p.op(f"st.global.v4.u32 [%raddr+{16 * v}], {{%o0, %o1, %o2, %o3}}")
    p.op("add.u64 %gi, %gi, %stride")
    p.op("bra.uni LOOP")
    # The last rows % n rows: one thread per byte (at most 127 of them).
    p.label("TAIL")
    p.reg("u64", "tail_row", "tail_byte", "gt")
    p.reg("u32", "col")
    p.reg("b16", "byte")
    p.op("mul.wide.u32 %gt, %block_id, %block_dim")
    p.op("cvt.u64.u32 %tmp64, %thread")
    p.op("add.u64 %gt, %gt, %tmp64")
    p.op(f"mul.lo.u64 %tail_byte, %n_groups, {group}")
    p.op("add.u64 %tail_byte, %tail_byte, %gt", "this thread's first byte of the row side")
    p.reg("u64", "all_bytes", "tail_start")
    p.reg("u32", "in_tail", "tail_r")
    p.op(f"mul.lo.u64 %all_bytes, %rows, {pitch}")
    p.op(f"mul.lo.u64 %tail_start, %n_groups, {n}", "first tail row")
    p.label("TAIL_LOOP")
    p.op("setp.ge.u64 %pr, %tail_byte, %all_bytes")
    p.op("@%pr bra.uni DONE")
    p.op(f"mul.lo.u64 %tmp64, %n_groups, {group}")
    p.op("sub.u64 %tmp64, %tail_byte, %tmp64")
    p.op("cvt.u32.u64 %in_tail, %tmp64", f"< {group}: 32-bit division by a constant is inline")
    p.op(f"div.u32 %tail_r, %in_tail, {pitch}")
    p.op(f"mul.lo.u32 %col, %tail_r, {pitch}")
    p.op("sub.u32 %col, %in_tail, %col")
    p.op("cvt.u64.u32 %tail_row, %tail_r")
    p.op("add.u64 %tail_row, %tail_row, %tail_start")
    p.op("add.u64 %raddr, %row_ptr, %tail_byte")
    for k, (w, o) in enumerate(zip(widths, offs)):
        nxt = p.fresh("TAIL_NEXT")
        p.op(f"setp.lt.u32 %pr, %col, {o}")
        p.op(f"@%pr bra.uni {nxt}")
        p.op(f"setp.ge.u32 %pr, %col, {o + w}")
        p.op(f"@%pr bra.uni {nxt}")
        p.op(f"mad.lo.u64 %caddr, %tail_row, {w}, %cptr{k}")
        p.op("cvt.u64.u32 %tmp64, %col")
        p.op("add.u64 %caddr, %caddr, %tmp64")
        p.op(f"sub.u64 %caddr, %caddr, {o}")
        if direction == "backward":
            p.op("ld.global.nc.b8 %byte, [%raddr]")
            p.op("st.global.b8 [%caddr], %byte")
        else:
            p.op("ld.global.nc.b8 %byte, [%caddr]")
            p.op("st.global.b8 [%raddr], %byte")
        p.op("bra.uni TAIL_NEXT_BYTE")
        p.label(nxt)
    p.label("TAIL_NEXT_BYTE")
    p.op("add.u64 %tail_byte, %tail_byte, %stride", "a grid may have fewer threads than tail bytes")
    p.op("bra.uni TAIL_LOOP")
    p.label("DONE")
    p.op("ret")
    params: list[tuple[str, Pointer | Scalar]] = [
        ("row_ptr", _BYTES_IN if direction == "backward" else _BYTES_OUT),
        ("rows", _U64),
    ]
    for k in range(len(widths)):
        params.append((f"chunk{k}_ptr", _BYTES_OUT if direction == "backward" else _BYTES_IN))
    name = f"fastcat_rowpack_{direction}"
    return _module(
        name=name,
        kid=f"{name}__{'_'.join(map(str, widths))}__b{block}__{target}",
        target=target,
        isa=_isa_for(target),
        header=[
            f"{name}: rows of {pitch} bytes split as {'+'.join(map(str, widths))} bytes, compiled in.",
            f"Each thread moves {n} rows ({group} bytes) as 16-byte vectors and rearranges",
            "the bytes in registers with constant prmt selectors.",
        ],
        params=params,
        shared=[],
        ptx=p,
        block=block,
        shared_bytes=0,
        info={
            "family": "rowpack",
            "direction": direction,
            "widths": widths,
            "rows_per_thread": n,
            "block": block,
        },
    )
