"""The methods the benchmark times, one registry entry each.

A method is a function ``make(ctx, buffers) -> Runner`` registered with
:func:`method`: it prepares everything once (kernels loaded, arguments packed,
Triton compiled and tuned) and returns a :class:`Runner` whose ``run()`` queues the
op once on the default stream. It raises :class:`Unsupported` where it has no way to
run a case (the case is then recorded as skipped, with the reason).

Groups: ``ceiling`` (a flat copy of the same number of bytes), ``ours`` (this
project's kernels and ops; every row of ``runtime.plan.VARIANTS`` becomes a method of
its own, so a new kernel variant is measured as soon as it is in the table) and
``peer`` (PyTorch, CuPy, the driver's 2-D copy, Triton).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench_cases import Case

import ptxgen
import runtime
from runtime.plan import VARIANTS, DeviceTraits, Problem, Ptr, Step, Variant, seed_block_size

__all__ = [
    "METHODS",
    "Buffers",
    "Method",
    "PtxKernel",
    "Runner",
    "Unsupported",
    "launcher",
    "method",
    "problem_of",
    "variant_method",
]


class Unsupported(Exception):
    """This method cannot run this case; the message says why."""


@dataclass
class Runner:
    """One prepared method on one case. ``pairs`` are (output, expected) views compared
    bit for bit after a run into poisoned outputs; ``outputs`` are what gets poisoned.
    ``traffic`` overrides the case's (the copy ceilings move their own bytes)."""

    run: Callable[[], Any]
    outputs: list[Any]
    pairs: list[tuple[Any, Any]]
    traffic: int | None = None
    info: str = ""


@dataclass
class Buffers:
    """The case's arrays (torch tensors): ``wide`` has rows × all channels, ``pieces``
    one array per size. Which are inputs depends on the op."""

    case: Case
    wide: Any
    pieces: list[Any]
    scratch: tuple[Any, Any, int] | None = None  # the ceilings' source, destination and size

    @property
    def indices(self) -> list[int]:
        """The pieces this op moves: one for a gather, all otherwise."""
        return [self.case.pick] if self.case.op == "gather" else list(range(len(self.pieces)))

    def slice(self, i: int) -> Any:
        off, size = self.case.offsets[i], self.case.sizes[i]
        return self.wide[:, off : off + size]

    def runner(self, run: Callable[[], Any], info: str = "") -> Runner:
        """A runner with the case's own outputs and expected values."""
        if self.case.op == "concat":
            pairs = [(self.slice(i), self.pieces[i]) for i in self.indices]
            return Runner(run, [self.wide], pairs, info=info)
        outs = [self.pieces[i] for i in self.indices]
        return Runner(run, outs, [(self.pieces[i], self.slice(i)) for i in self.indices], info=info)


@dataclass(frozen=True)
class Method:
    name: str
    group: str
    ops: frozenset[str]
    make: Callable[[Any, Buffers], Runner]
    note: str = ""


METHODS: dict[str, Method] = {}


def method(name: str, group: str, ops: tuple[str, ...], note: str = "") -> Callable[..., Any]:
    """Register ``make(ctx, buffers) -> Runner`` as a method."""

    def register(make: Callable[[Any, Buffers], Runner]) -> Callable[[Any, Buffers], Runner]:
        METHODS[name] = Method(name, group, frozenset(ops), make, note)
        return make

    return register


# --- hand-written PTX: the flat copy of the ceiling, and a spin that holds the queue --------


@dataclass(frozen=True)
class PtxKernel:
    """A ptxgen.Kernel carrying PTX written by hand."""

    name: str
    entry_point_source: str
    arg_names: tuple[str, ...]
    arg_types: tuple[Any, ...]
    block_size: int = 256
    target: str = "sm_75"
    ptx_version: str = "6.3"
    kernel_source: str = field(default="// written by hand in scripts/bench_methods.py\n")

    @property
    def id(self) -> str:
        return f"{self.name}__{self.block_size}"

    @property
    def entry_point_name(self) -> str:
        return f"{self.name}_entry_point"

    @property
    def source(self) -> str:
        return self.kernel_source + "\n\n" + self.entry_point_source

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    @property
    def block(self) -> tuple[int, int, int]:
        return (self.block_size, 1, 1)

    def grid(self, n_spatial: int, chunk_c: int = 1) -> tuple[int, int, int]:
        return (max(1, -(-n_spatial * chunk_c // self.block_size)), 1, 1)


_HEADER = ".version 6.3\n.target sm_75\n.address_size 64\n\n"

# One 16-byte vector per thread per trip, striding over the grid; launched with a thread
# per vector (copy16_grid), so each thread makes one trip. Measured on H200 (1 GiB):
# this shape matches cuMemcpyDtoD (4.28 vs 4.26 TB/s), where one persistent wave of
# CTAs with four vectors in flight a thread stops at 3.92 (docs/perf/kernels.md).
COPY16_PTX = (
    _HEADER
    + """\
// dst[i] = src[i] for the 16-byte vectors i < n16
.visible .entry copy16_entry_point(.param .u64 src, .param .u64 dst, .param .u64 n16)
{
    .reg .pred %past;
    .reg .u32 %block_id, %block_dim, %thread, %grid_dim;
    .reg .u64 %src, %dst, %n, %i, %threads, %thread64, %off, %s, %d;
    .reg .b32 %a<4>;

    ld.param.u64 %src, [src];
    ld.param.u64 %dst, [dst];
    ld.param.u64 %n, [n16];
    mov.u32 %block_id, %ctaid.x;
    mov.u32 %block_dim, %ntid.x;
    mov.u32 %thread, %tid.x;
    mov.u32 %grid_dim, %nctaid.x;
    cvt.u64.u32 %thread64, %thread;
    mad.wide.u32 %i, %block_id, %block_dim, %thread64;   // this thread's vector
    mul.wide.u32 %threads, %grid_dim, %block_dim;
LOOP:
    setp.ge.u64 %past, %i, %n;
    @%past bra DONE;
    shl.b64 %off, %i, 4;
    add.u64 %s, %src, %off;
    add.u64 %d, %dst, %off;
    ld.global.nc.v4.b32 {%a0, %a1, %a2, %a3}, [%s];
    st.global.v4.b32 [%d], {%a0, %a1, %a2, %a3};
    add.u64 %i, %i, %threads;
    bra LOOP;
DONE:
    ret;
}
"""
)

# Busy-waits `ns` nanoseconds of the global timer. Queued before each timed region, it
# keeps the GPU busy while the host queues the whole op, so host launch cost (measured
# by the launch-path benchmark, not here) stays out of the device time.
SPIN_PTX = (
    _HEADER
    + """\
.visible .entry spin_entry_point(.param .u64 ns)
{
    .reg .u64 %ns, %start, %now, %waited;
    .reg .pred %wait;
    ld.param.u64 %ns, [ns];
    mov.u64 %start, %globaltimer;
WAIT:
    mov.u64 %now, %globaltimer;
    sub.u64 %waited, %now, %start;
    setp.lt.u64 %wait, %waited, %ns;
    @%wait bra WAIT;
    ret;
}
"""
)

COPY16 = PtxKernel(
    "copy16", COPY16_PTX, ("src", "dst", "n16"),
    (ptxgen.Pointer("u8", writes=False), ptxgen.Pointer("u8"), ptxgen.Scalar("u64")),
)  # fmt: skip
SPIN = PtxKernel("spin", SPIN_PTX, ("ns",), (ptxgen.Scalar("u64"),), block_size=32)


def copy16_grid(n16: int, max_grid_x: int = 2**31 - 1) -> int:
    """A thread per vector (one trip each), within the device's grid limit."""
    return max(1, min(max_grid_x, -(-n16 // COPY16.block_size)))


# --- ceilings: a flat copy of the same bytes ------------------------------------------------


def _scratch(ctx: Any, buffers: Buffers) -> tuple[Any, Any, int]:
    """Two byte buffers of half the case's traffic (rounded down to 16 bytes): copying one
    into the other moves the same bytes the case does. Shared by both ceilings."""
    if buffers.scratch is None:
        n, torch = buffers.case.traffic() // 2 // 16 * 16, ctx.torch
        src = torch.empty(n, dtype=torch.uint8, device="cuda").random_(0, 256)
        buffers.scratch = (src, torch.empty(n, dtype=torch.uint8, device="cuda"), n)
    return buffers.scratch


@method("copy: cuMemcpyDtoD", "ceiling", ("gather", "split", "concat"), "the driver's copy")
def _memcpy(ctx: Any, buffers: Buffers) -> Runner:
    src, dst, n = _scratch(ctx, buffers)
    drv, s, d = ctx.drv, src.data_ptr(), dst.data_ptr()

    def run() -> None:
        ctx.check("cuMemcpyDtoDAsync", drv.cuMemcpyDtoDAsync(d, s, n, 0))

    return Runner(run, [dst], [(dst, src)], traffic=2 * n)


@method("copy: 16-byte PTX kernel", "ceiling", ("gather", "split", "concat"), "hand-written, in this file")
def _copy16(ctx: Any, buffers: Buffers) -> Runner:
    src, dst, n = _scratch(ctx, buffers)
    fn = ctx.dev.load(COPY16).function
    grid, args = (
        (copy16_grid(n // 16, ctx.dev.max_grid[0]), 1, 1),
        (src.data_ptr(), dst.data_ptr(), n // 16),
    )
    return Runner(lambda: fn.launch(grid, COPY16.block, args), [dst], [(dst, src)], traffic=2 * n)


@method("flat_copy", "ceiling", ("gather", "split", "concat"), "torch: flat.copy_(src) of the same bytes")
def _flat_copy(ctx: Any, buffers: Buffers) -> Runner:
    src, dst, n = _scratch(ctx, buffers)
    return Runner(lambda: dst.copy_(src), [dst], [(dst, src)], traffic=2 * n)


# --- this project ------------------------------------------------------------------------------


def problem_of(buffers: Buffers) -> Problem:
    """The planner's problem for a case (the steps of the "ours" methods start here)."""
    case = buffers.case
    op = "forward" if case.op == "concat" else "backward"
    return Problem(op, ptxgen.resolve_dtype(case.dtype), case.rows, tuple(case.sizes))


def launcher(ctx: Any, buffers: Buffers, steps: list[Any]) -> Callable[[], None]:
    """Launch planned steps on the case's arrays (Ptr -1: the wide array, i: piece i)."""
    bases = [p.data_ptr() for p in buffers.pieces] + [buffers.wide.data_ptr()]
    launches = []
    for step in steps:
        fn = ctx.dev.load(step.kernel).function
        args = tuple(bases[a.array] + a.byte_offset if isinstance(a, Ptr) else a for a in step.args)
        launches.append((fn, step.grid, step.block, args, step.shared_mem))

    def run() -> None:
        for fn, grid, block, args, shared in launches:
            fn.launch(grid, block, args, shared_mem=shared)

    return run


def variant_method(variant: Variant) -> Callable[[Any, Buffers], Runner]:
    """A method that runs one variant's steps (lab studies time forms of a kernel by it)."""

    def make(ctx: Any, buffers: Buffers) -> Runner:
        problem, traits = problem_of(buffers), DeviceTraits.of(ctx.dev)
        if variant.scope == "op":
            if buffers.case.op == "gather" or not variant.accepts(problem, traits):
                raise Unsupported(f"variant {variant.name} does not take this shape")
            steps = list(variant.build(problem, traits))
        else:
            steps = []
            for i in buffers.indices:
                chunk = problem.chunk(i)
                if not variant.accepts(chunk, traits):
                    raise Unsupported(f"variant {variant.name} does not take piece {i}")
                steps += variant.build(chunk, traits)
        blocks = sorted({s.block[0] for s in steps})
        return buffers.runner(launcher(ctx, buffers, steps), f"{len(steps)} launches, block {blocks}")

    return make


for _variant in VARIANTS:
    _ops = ("gather", "split", "concat") if _variant.scope == "chunk" else ("split", "concat")
    method(f"ours: {_variant.name}", "ours", _ops, _variant.when)(variant_method(_variant))


def seed_with_block(block_size: int) -> Callable[[Any, Buffers], Runner]:
    """The seed kernel per piece with a fixed block (``--blocks``), to see which block
    size each shape wants."""

    def make(ctx: Any, buffers: Buffers) -> Runner:
        case, steps = buffers.case, []
        backward = case.op != "concat"
        cls = ptxgen.ChannelCatBackward if backward else ptxgen.ChannelCatForward
        kernel = cls(case.dtype, block_size)
        for i in buffers.indices:
            wide, piece = Ptr(-1), Ptr(i)
            args = (wide, piece) if backward else (piece, wide)
            grid = kernel.grid(case.rows, case.sizes[i])
            steps.append(
                Step(kernel, grid, kernel.block, (*args, case.sizes[i], case.channels, case.offsets[i]))
            )
        return buffers.runner(launcher(ctx, buffers, steps))

    return make


@method(
    "ours: runtime op",
    "ours",
    ("split", "concat"),
    "runtime.channel_cat_backward / _forward on torch tensors",
)
def _op(ctx: Any, buffers: Buffers) -> Runner:
    case, wide, pieces = buffers.case, buffers.wide, buffers.pieces
    if case.op == "split":
        run = lambda: runtime.channel_cat_backward(wide, case.sizes, 1, out=pieces)  # noqa: E731
    else:
        run = lambda: runtime.channel_cat_forward(pieces, 1, out=wide)  # noqa: E731
    plan = runtime.ops.plan_for(problem_of(buffers).op, case.dtype, case.rows, case.sizes, ctx.dev)
    return buffers.runner(run, f"plan: {', '.join(plan.variants)}; {len(plan.steps)} launches")


# --- PyTorch ----------------------------------------------------------------------------------


@method("torch: narrow+copy_", "peer", ("gather", "split", "concat"), "one copy_ per piece")
def _torch_copy(ctx: Any, buffers: Buffers) -> Runner:
    case, wide, pieces, idx = buffers.case, buffers.wide, buffers.pieces, buffers.indices
    views = [(pieces[i], wide.narrow(1, case.offsets[i], case.sizes[i])) for i in idx]
    if case.op == "concat":
        views = [(dst, src) for src, dst in views]

    def run() -> None:
        for dst, src in views:
            dst.copy_(src)

    return buffers.runner(run)


@method("torch: split_with_sizes_copy", "peer", ("split",), "one launch for all pieces")
def _torch_split(ctx: Any, buffers: Buffers) -> Runner:
    torch, case = ctx.torch, buffers.case
    if not hasattr(torch, "split_with_sizes_copy"):
        raise Unsupported(f"torch {torch.__version__} has no split_with_sizes_copy")
    wide, pieces, sizes = buffers.wide, buffers.pieces, list(case.sizes)
    return buffers.runner(lambda: torch.split_with_sizes_copy(wide, sizes, dim=1, out=pieces))


@method("torch: cat", "peer", ("concat",))
def _torch_cat(ctx: Any, buffers: Buffers) -> Runner:
    torch, wide, pieces = ctx.torch, buffers.wide, buffers.pieces
    return buffers.runner(lambda: torch.cat(pieces, dim=1, out=wide))


# --- CuPy -------------------------------------------------------------------------------------


@method("cupy: slice copy", "peer", ("gather", "split", "concat"), "cupy.copyto per piece, on int views")
def _cupy(ctx: Any, buffers: Buffers) -> Runner:
    cp = ctx.need("cupy")
    case = buffers.case
    as_int = ctx.int_view  # CuPy has no bf16: copy the same bits as integers
    wide = cp.asarray(as_int(buffers.wide))
    moves = []
    for i in buffers.indices:
        piece = cp.asarray(as_int(buffers.pieces[i]))
        part = wide[:, case.offsets[i] : case.offsets[i] + case.sizes[i]]
        moves.append((part, piece) if case.op == "concat" else (piece, part))

    def run() -> None:
        for dst, src in moves:
            cp.copyto(dst, src)

    return buffers.runner(run)


# --- the driver's 2-D copy ----------------------------------------------------------------------


@method("cuMemcpy2DAsync", "peer", ("gather", "split", "concat"), "one pitched copy per piece")
def _memcpy2d(ctx: Any, buffers: Buffers) -> Runner:
    drv, case, isz = ctx.drv, buffers.case, buffers.case.itemsize
    device_memory = drv.CUmemorytype.CU_MEMORYTYPE_DEVICE
    copies = []
    for i in buffers.indices:
        m = drv.CUDA_MEMCPY2D()
        wide_ptr = buffers.wide.data_ptr() + case.offsets[i] * isz
        piece_ptr = buffers.pieces[i].data_ptr()
        wide_pitch, piece_pitch = case.channels * isz, case.sizes[i] * isz
        src, dst = ((piece_ptr, piece_pitch), (wide_ptr, wide_pitch))
        if case.op != "concat":
            src, dst = dst, src
        m.srcMemoryType, m.srcDevice, m.srcPitch = device_memory, src[0], src[1]
        m.dstMemoryType, m.dstDevice, m.dstPitch = device_memory, dst[0], dst[1]
        m.WidthInBytes, m.Height = case.sizes[i] * isz, case.rows
        copies.append(m)

    def run() -> None:
        for m in copies:
            ctx.check("cuMemcpy2DAsync", drv.cuMemcpy2DAsync(m, 0))

    return buffers.runner(run)


# --- Triton -------------------------------------------------------------------------------------


def triton_kernels(ctx: Any) -> Any:
    """scripts/bench_triton.py, or Unsupported where Triton does not import."""
    ctx.need("triton")
    import bench_triton

    return bench_triton


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


@method("triton: seed contract", "peer", ("gather", "split", "concat"), "the seed's kernel written in Triton")
def _triton_seed(ctx: Any, buffers: Buffers) -> Runner:
    k = triton_kernels(ctx)
    case, launches = buffers.case, []
    for i in buffers.indices:
        w = case.sizes[i]
        # the project's block rule, rounded to the power of two that tl.arange needs
        block = _pow2_at_least(seed_block_size(w))
        grid = (case.rows * -(-w // block),)
        if case.op == "concat":
            launches.append((k.seed_scatter[grid], buffers.pieces[i], buffers.wide, w, block))
        else:
            launches.append((k.seed_gather[grid], buffers.wide, buffers.pieces[i], w, block))
    c_total = case.channels
    offsets = case.offsets

    def run() -> None:
        for (launch, src, dst, w, block), i in zip(launches, buffers.indices):
            launch(src, dst, w, c_total, offsets[i], BLOCK=block, num_warps=block // 32)

    return buffers.runner(run, "blocks " + ", ".join(str(item[4]) for item in launches))


# Row × channel tiles of 4096 elements, 8 warps (16 elements per thread).
TILES = [(4096 // bc, bc) for bc in (4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)]


def tile_candidates(width: int, rows: int, count: int = 5) -> list[tuple[int, int]]:
    """Up to ``count`` tile shapes for a piece: the channel tile from the row's width (as
    a power of two) down by halves, none so narrow that grid.y passes 65,535."""
    top = min(4096, max(4, _pow2_at_least(width)))
    out = [(br, bc) for br, bc in TILES if bc <= top and -(-width // bc) <= 65535]
    return sorted(out, key=lambda t: -t[1])[:count]


# Triton's tuning knobs beside the tile shape, as its users tune them.
NUM_WARPS = (4, 8)
NUM_STAGES = (1, 3)


@method(
    "triton: 2-D tiles, tuned",
    "peer",
    ("gather", "split", "concat"),
    "best per piece of up to 5 tile shapes (3 with --quick) x num_warps 4, 8 x num_stages 1, 3",
)
def _triton_tiled(ctx: Any, buffers: Buffers) -> Runner:
    kernel = triton_kernels(ctx).tiled
    case = buffers.case
    chosen, launches = [], []
    for i in buffers.indices:
        w, off, total = case.sizes[i], case.offsets[i], case.channels
        if case.op == "concat":
            src, dst, pitches = buffers.pieces[i], buffers.wide, (w, 0, total, off)
        else:
            src, dst, pitches = buffers.wide, buffers.pieces[i], (total, off, w, 0)

        def launch(config, src=src, dst=dst, w=w, pitches=pitches):
            (br, bc), warps, stages = config
            grid = (-(-case.rows // br), -(-w // bc))
            return lambda: kernel[grid](
                src, dst, case.rows, w, *pitches, BR=br, BC=bc, num_warps=warps, num_stages=stages
            )

        configs = [
            (tile, warps, stages)
            for tile in tile_candidates(w, case.rows, ctx.tile_choices)
            for warps in NUM_WARPS
            for stages in NUM_STAGES
        ]
        timings = {config: ctx.tune_time(launch(config)) for config in configs}
        best = min(timings, key=timings.get)
        (br, bc), warps, stages = best
        chosen.append(f"{br}x{bc}/w{warps}/s{stages}")
        launches.append(launch(best))

    def run() -> None:
        for go in launches:
            go()

    return buffers.runner(run, "tiles/warps/stages " + ", ".join(chosen))
