"""The flat copy of the copy-ceiling studies (``flat_copy16``): moved here from
ptxgen/kernels/fastcat_vec.py, where no plan ever launched it.

``FastcatFlatCopy``: ``dst[i] = src[i]`` over 16-byte vectors, ``unroll`` loads in flight a
thread, its slots laid out a block or a grid apart, an optional load hint: the kernel the
first and second studies timed against ``cuMemcpyDtoDAsync`` (lab/README.md). The
benchmark's ceiling is its own hand-written kernel (scripts/bench_methods.py). The load
hints and slot layouts lived in ptxgen/kernels/fastcat_common.py for this kernel and the
``vec`` family's study options; nothing shipped uses them, so they are here too.

Builds on ptxgen (the builder, ``KernelBase``); lab/test_flat_copy.py checks it.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from ptxgen.footprint import Footprint, check_launch_block
from ptxgen.function import PtxFunction, PtxModule
from ptxgen.kernel import KernelBase
from ptxgen.kernels.fastcat_common import BYTES_IN, BYTES_OUT, U64, check_block, check_choice, data_regs
from ptxgen.ptxtypes import SPECIAL_REGS, Addr, Reg
from ptxgen.targets import resolve_target, target_capability

__all__ = ["LAYOUTS", "LOAD_HINTS", "FastcatFlatCopy", "check_hint"]

# load_hint -> the ld qualifier it adds. Both qualifiers need PTX ISA 7.4; the builder's
# instruction table records that, and L2::256B's sm_80, so the module's .version follows.
LOAD_HINTS: dict[str | None, str] = {None: "", "L2::256B": ".L2::256B", "L1::no_allocate": ".L1::no_allocate"}
LAYOUTS = ("block", "grid")


def check_hint(load_hint: object, target: str) -> str | None:
    """``load_hint`` if the target can have it: ``L2::256B`` prefetches need sm_80."""
    if load_hint not in LOAD_HINTS:
        raise ValueError(f"load_hint {load_hint!r}; accepted: {', '.join(map(repr, LOAD_HINTS))}")
    if load_hint == "L2::256B" and target_capability(target) < (8, 0):
        raise ValueError(f"load_hint 'L2::256B' needs sm_80 or newer, not {target}")
    return load_hint  # type: ignore[return-value]


def _read_thread_ids(fn: PtxFunction) -> tuple[Reg, Reg, Reg, Reg]:
    thread, block_id = fn.reg("thread", "u32"), fn.reg("block_id", "u32")
    block_dim, grid_dim = fn.reg("block_dim", "u32"), fn.reg("grid_dim", "u32")
    fn.inst("mov.u32", thread, SPECIAL_REGS["tid.x"])
    fn.inst("mov.u32", block_id, SPECIAL_REGS["ctaid.x"])
    fn.inst("mov.u32", block_dim, SPECIAL_REGS["ntid.x"])
    fn.inst("mov.u32", grid_dim, SPECIAL_REGS["nctaid.x"])
    return thread, block_id, block_dim, grid_dim


class FastcatFlatCopy(KernelBase):
    """``dst[i] = src[i]`` for ``n_vectors`` 16-byte vectors: the ceiling's copy kernel.

    Fastest measured on H200: ``unroll=1`` with a thread per vector (one trip each),
    4.28 TB/s, as fast as cuMemcpyDtoD; one persistent wave of CTAs stops near 3.97 TB/s
    (93%) whatever the unroll and layout. ``layout``: where a thread's ``unroll`` slots lie. ``block``: one
    block's slots are one contiguous run of ``16 * unroll * block`` bytes per round (DRAM
    pages stay open); ``grid``: a thread's slots are a whole grid apart (the textbook
    grid-stride loop). Arguments ``(src, dst, n_vectors)``; any grid.
    """

    name = "flat_copy16"

    @classmethod
    def cache_key(
        cls,
        *,
        unroll: int = 4,
        block: int = 256,
        layout: str = "grid",
        load_hint: str | None = None,
        target: str = "sm_90",
    ) -> Hashable:
        target = resolve_target(target)
        check_block(block)
        check_choice(unroll, "unroll", (1, 2, 4, 8))
        if layout not in LAYOUTS:
            raise ValueError(f"layout {layout!r}; accepted: {', '.join(LAYOUTS)}")
        return (unroll, block, layout, check_hint(load_hint, target), target)

    def __init__(
        self,
        *,
        unroll: int = 4,
        block: int = 256,
        layout: str = "grid",
        load_hint: str | None = None,
        target: str = "sm_90",
    ) -> None:
        self.unroll, self.block_size, self.layout, self.load_hint, self.target = self.cache_key(
            unroll=unroll, block=block, layout=layout, load_hint=load_hint, target=target
        )
        tag = f"__{layout}" + (f"__{load_hint.replace('::', '_')}" if load_hint else "")
        self.id = f"flat_copy16__u{unroll}__b{block}{tag}__{self.target}"
        self.arg_names = ("src", "dst", "n_vectors")
        self.arg_types = (BYTES_IN, BYTES_OUT, U64)
        self.block = (block, 1, 1)
        self.shared_bytes = 0
        self.info: dict[str, Any] = {
            "family": "flat_copy",
            "unroll": unroll,
            "block": block,
            "layout": layout,
            "load_hint": load_hint,
        }
        self._emit()

    def footprints(
        self, grid: tuple[int, int, int], block: tuple[int, int, int], scalars: Mapping[str, int]
    ) -> tuple[Footprint, Footprint]:
        """``16 * n_vectors`` bytes of ``src`` read and of ``dst`` written, both 16-byte
        aligned; nothing for an empty grid. Grid-stride: any grid covers every vector."""
        check_launch_block(self.name, block, self.block)
        nbytes = 16 * scalars["n_vectors"] if all(g > 0 for g in grid) else 0
        return (
            Footprint("src", nbytes, 1, 16, writes=False),
            Footprint("dst", nbytes, 1, 16, writes=True),
        )

    def __repr__(self) -> str:
        return (
            f"FastcatFlatCopy(unroll={self.unroll}, block={self.block_size}, layout={self.layout!r}, "
            f"load_hint={self.load_hint!r}, target={self.target!r})"
        )

    def _emit(self) -> None:
        unroll, block = self.unroll, self.block_size
        module = PtxModule(
            self.target,
            comment=[
                "flat_copy16: dst[i] = src[i] over n_vectors 16-byte vectors, grid-stride,",
                f"{unroll} loads in flight per thread, slots laid out by {self.layout}. "
                "The copy ceiling's kernel.",
            ],
        )
        fn = module.entry(self.entry_point_name)
        p_src = fn.param("src", "u64", comment="*const u8: 16-byte aligned")
        p_dst = fn.param("dst", "u64", comment="*mut u8: 16-byte aligned")
        p_n = fn.param("n_vectors", "u64", comment="16-byte vectors to copy")
        fn.directive(".maxntid", block, 1, 1)
        src, dst, n_vectors = fn.reg("src", "u64"), fn.reg("dst", "u64"), fn.reg("n_vectors", "u64")
        first, slot_gap, step = fn.reg("first", "u64"), fn.reg("slot_gap", "u64"), fn.reg("step", "u64")
        byte_off = fn.reg("byte_off", "u64")

        fn.banner("arguments, and where this thread starts")
        fn.inst("ld.param.u64", src, Addr(p_src))
        fn.inst("cvta.to.global.u64", src, src)
        fn.inst("ld.param.u64", dst, Addr(p_dst))
        fn.inst("cvta.to.global.u64", dst, dst)
        fn.inst("ld.param.u64", n_vectors, Addr(p_n))
        thread, block_id, block_dim, grid_dim = _read_thread_ids(fn)
        fn.inst("cvt.u64.u32", byte_off, thread)
        if self.layout == "block":
            fn.inst("mul.wide.u32", first, block_id, unroll * block,
                    comment="this block's run of unroll*block vectors")  # fmt: skip
            fn.inst("add.u64", first, first, byte_off)
            fn.inst(
                "mov.u64",
                slot_gap,
                block,
                comment="a thread's slots are a block apart: the run is contiguous",
            )
        else:
            fn.inst("mul.wide.u32", first, block_id, block_dim)
            fn.inst("add.u64", first, first, byte_off)
            fn.inst(
                "mul.wide.u32", slot_gap, grid_dim, block_dim, comment="a thread's slots are a grid apart"
            )
        fn.inst("mul.wide.u32", step, grid_dim, unroll * block,
                comment="a round moves every slot by unroll*grid*block")  # fmt: skip

        top, done = fn.label("LOOP"), fn.label("DONE")
        fn.banner(f"a round: {unroll} slots, all loads before the first store")
        fn.place(top)
        live, srcs, dsts, data = [], [], [], []
        for u in range(unroll):
            idx, s, d = fn.reg(f"idx_{u}", "u64"), fn.reg(f"src_{u}", "u64"), fn.reg(f"dst_{u}", "u64")
            ok = fn.reg(f"live_{u}", "pred")
            fn.inst("mad.lo.u64", idx, slot_gap, u, first)
            fn.inst("setp.lt.u64", ok, idx, n_vectors)
            fn.inst("shl.b64", byte_off, idx, 4)
            fn.inst("add.u64", s, src, byte_off)
            fn.inst("add.u64", d, dst, byte_off)
            live.append(ok)
            srcs.append(s)
            dsts.append(d)
            data.append(data_regs(fn, f"v{u}", 16))
        fn.inst("bra", done, guard=live[0], negate=True,
                comment="slot 0 holds the smallest index: past the end, all are")  # fmt: skip
        hint = LOAD_HINTS[self.load_hint]
        for u in range(unroll):
            fn.inst(
                f"ld.global.nc{hint}.v4.u32", data[u], Addr(srcs[u]), guard=live[u], comment="all loads first"
            )
        for u in range(unroll):
            fn.inst("st.global.v4.u32", Addr(dsts[u]), data[u], guard=live[u])
        fn.inst("add.u64", first, first, step)
        fn.inst("bra.uni", top)
        fn.place(done)
        fn.inst("ret")
        self.ptx_version = module.version
        self.kernel_source = module.header()
        self.entry_point_source = fn.render()
