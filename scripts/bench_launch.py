#!/usr/bin/env python3
"""Host time per kernel launch, side by side, in one run on one GPU.

Every path launches the same work: channel_cat_backward (f32, block 128) copying 16
of 32 channels of 64 rows, on one stream. For each path, the median over repetitions
of the host microseconds per launch in a batch of back-to-back launches (the stream is
drained before each batch, so the launch queue never fills); paths are interleaved
batch by batch, so drift hits all alike. After timing, each path launches once more
into a poisoned output and the result is compared element by element.

    bare driver call:   cuLaunchKernel with a prebuilt void**, through cuda.bindings,
                        cffi (ABI mode) and ctypes
    this project:       prepared.raw (trusted ints), prepared launches, Function.launch
                        (checked) with int pointers, DeviceArray and torch tensors, through
                        the compiled path (runtime._fastlaunch, where built) and through the
                        Python launch functions alone; the Python path through each binding
    graph replay:       100 captured launches, replayed; wall time per launch: of the seed
                        kernel (and, as controls, captured from bare cuLaunchKernel calls,
                        and an empty kernel on its grid), of the fast kernel the planner
                        picks for the same gather (plain, and with programmatic dependent
                        launch) and of the op
    peers:              cuda.core launch (same PTX), CuPy RawModule (same PTX), torch
                        dx.copy_(dy.narrow(...)), a Triton kernel doing the same copy,
                        and runtime.channel_cat_backward(dy, sizes, out=[a, b])

Writes launch.json ({"us_per_launch": {path: us}, "gpu", "driver", "date", ...}) and
launch.md (the table, the targets, the ratios to the bare cuda.bindings call) into
--out (default docs/perf), and prints the table last.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import numpy as np  # noqa: E402
import records  # noqa: E402

import ptxgen  # noqa: E402
import runtime  # noqa: E402
from runtime import launch as launch_module  # noqa: E402
from runtime._driver import check, driver  # noqa: E402

N, C_TOTAL, CHUNK, OFFSET = 64, 32, 16, 8
BLOCK = 128

LABELS = {
    "bare_cuda_bindings": "bare cuLaunchKernel, cuda.bindings, prebuilt void**",
    "bare_cffi": "bare cuLaunchKernel, cffi ABI mode, prebuilt void**",
    "bare_ctypes": "bare cuLaunchKernel, ctypes, prebuilt void**",
    "bare_cuda_bindings_ex": "bare cuLaunchKernelEx, cuda.bindings, prebuilt void** and config",
    "raw_int": "prepared.raw(...), int pointers (trusted, unchecked)",
    "prepared_int": "prepared(...), int pointers",
    "prepared_device_array": "prepared(...), DeviceArray",
    "prepared_torch": "prepared(...), torch tensors",
    "checked_int": "Function.launch, int pointers",
    "checked_int_driver": "Function.launch, int pointers checked by the driver (check_int_pointers)",
    "checked_device_array": "Function.launch, DeviceArray",
    "checked_torch": "Function.launch, torch tensors",
    "checked_device_array_new_grid": "Function.launch, DeviceArray, kernel.grid()/block computed per launch",
    "checked_device_array_via_cffi": "Function.launch, DeviceArray, Python launch path through cffi",
    "checked_device_array_via_ctypes": "Function.launch, DeviceArray, Python launch path through ctypes",
    "checked_device_array_via_cuda_bindings": (
        "Function.launch, DeviceArray, Python launch path through cuda.bindings"
    ),
    "raw_int_python": "prepared.raw(...), int pointers, Python launch path",
    "prepared_device_array_python": "prepared(...), DeviceArray, Python launch path",
    "checked_int_python": "Function.launch, int pointers, Python launch path",
    "checked_device_array_python": "Function.launch, DeviceArray, Python launch path",
    "checked_torch_python": "Function.launch, torch tensors, Python launch path",
    "graph_replay_per_launch": "graph replay, 100 captured launches, per launch (wall)",
    "graph_replay_1_block_per_launch": "graph replay, 100 captured 1-block launches, per launch (wall)",
    "graph_replay_bare_per_launch": (
        "graph replay, 100 seed launches captured from bare cuLaunchKernel calls, per launch (wall)"
    ),
    "graph_replay_empty_per_launch": (
        "graph replay, 100 captured launches of an empty kernel on the seed's grid, per launch (wall)"
    ),
    "graph_replay_empty_1_block_per_launch": (
        "graph replay, 100 captured 1-block launches of an empty kernel, per launch (wall)"
    ),
    "graph_replay_fresh_context_per_launch": (
        "graph replay, 100 captured launches, per launch (wall), in a fresh context "
        "(timed first: one launch before its capture)"
    ),
    "graph_replay_empty_fresh_context_per_launch": (
        "graph replay, 100 captured launches of the empty kernel on the seed's grid, per launch (wall), "
        "in a fresh context (timed second)"
    ),
    "graph_replay_fastcat_per_launch": (
        "graph replay, 100 captured launches of the fast kernel for the same gather, per launch (wall)"
    ),
    "graph_replay_fastcat_pdl_per_launch": (
        "graph replay, 100 captured launches of that fast kernel with programmatic dependent launch, "
        "per launch (wall)"
    ),
    "graph_replay_op_per_launch": (
        "graph replay, 100 captured runtime.channel_cat_backward(dy, sizes, out=[a, b]), per op (wall)"
    ),
    "cuda_core_launch": "cuda.core launch, same PTX",
    "cuda_core_launch_torch": "cuda.core launch, same PTX, torch tensors' data_ptr() read per launch",
    "cupy_rawmodule": "CuPy RawModule kernel, same PTX",
    "torch_copy": "torch dx.copy_(dy.narrow(1, off, c))",
    "triton": "Triton kernel, the same copy",
    "channel_cat_backward_2_outputs": "runtime.channel_cat_backward(dy, sizes, out=[a, b]), torch tensors",
    "channel_cat_backward_2_outputs_device_array": (
        "runtime.channel_cat_backward(dy, sizes, out=[a, b]), DeviceArrays"
    ),
}


def median_us(samples: list[float]) -> float:
    return statistics.median(samples)


def measure(paths: dict[str, Callable[[], None]], drain: Callable[[], None], reps: int, batch: int) -> dict:
    """Median host us per call of each path: ``reps`` batches of ``batch`` calls, interleaved."""
    samples: dict[str, list[float]] = {k: [] for k in paths}
    for rep in range(reps + 1):
        for name, call in paths.items():
            drain()
            t0 = time.perf_counter()
            for _ in range(batch):
                call()
            elapsed = time.perf_counter() - t0
            if rep:  # the first round is warm-up
                samples[name].append(elapsed / batch * 1e6)
    drain()
    return {k: median_us(v) for k, v in samples.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=21, help="batches per path (median taken)")
    p.add_argument("--batch", type=int, default=250, help="launches per batch")
    p.add_argument("--graph-replays", type=int, default=20, help="graph replays per timed batch")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "perf")
    args = p.parse_args(argv)

    reason = runtime.unavailable_reason()
    if reason:
        print(f"no GPU: {reason}; nothing to measure")
        return 0
    tree = records.tree_hash()  # of the code that runs, taken before it runs
    try:
        import torch
    except ImportError:
        torch = None

    dev = runtime.Device(0)
    drv = driver()
    stream = runtime.Stream(dev)
    kernel = ptxgen.ChannelCatBackward("f32", BLOCK)
    fn = dev.load(kernel).function
    grid, block = kernel.grid(N, CHUNK), kernel.block
    rng = np.random.default_rng()
    host = rng.standard_normal((N, C_TOTAL)).astype(np.float32)
    want = host[:, OFFSET : OFFSET + CHUNK]
    dy = dev.to_device(host)
    dx = dev.empty((N, CHUNK), "f32")
    scalars = (CHUNK, C_TOTAL, OFFSET)
    ints = (dy.ptr, dx.ptr, *scalars)
    failures: list[str] = []
    empty = ptxgen.PtxKernel("empty", EMPTY_PTX, kernel.arg_names, kernel.arg_types, kernel.block)
    # Graph replay first, while the context has made (almost) no ordinary launch (see FRESH_NOTE).
    fresh = fresh_context_graph_replay(dev, fn, kernel, empty, dy, dx, host, args, failures)
    arrays = (dy, dx, *scalars)
    drain = stream.synchronize

    notes: dict[str, str] = {}

    def verify(name: str, launch_once: Callable[[], None], sync: Callable[[], None] = drain) -> None:
        """Poison dx, launch once through this path, compare every element."""
        dx.fill_bytes(0xA5)
        dev.synchronize()  # the memset is queued on the legacy stream, which a peer's may not follow
        launch_once()
        sync()
        got = dx.to_numpy()
        if not np.array_equal(got, want):
            failures.append(f"{name}: WRONG RESULT ({int((got != want).sum())} elements differ)")

    paths: dict[str, Callable[[], None]] = {}
    checks: dict[str, Callable[[], None]] = {}

    # --- bare driver calls: a void** packed once ---------------------------------------
    buffer = fn.layout.new_buffer()
    fn.layout.struct.pack_into(buffer.memory, 0, *ints)
    params, handle, s = buffer.params, fn.handle, stream.handle
    cu_launch, cu_function, cu_stream = drv.cuLaunchKernel, drv.CUfunction(handle), drv.CUstream(s)
    g, b = grid, block

    def bare_bindings() -> tuple:
        return cu_launch(cu_function, g[0], g[1], g[2], b[0], b[1], b[2], 0, cu_stream, params, 0)

    paths["bare_cuda_bindings"] = bare_bindings
    checks["bare_cuda_bindings"] = lambda: check("cuLaunchKernel", bare_bindings())
    cu_launch_ex = drv.cuLaunchKernelEx
    config = launch_module.binding("cuda.bindings").config(*g, *b, 0, cu_stream)

    def bare_bindings_ex() -> tuple:
        return cu_launch_ex(config, cu_function, params, 0)

    paths["bare_cuda_bindings_ex"] = bare_bindings_ex
    checks["bare_cuda_bindings_ex"] = lambda: check("cuLaunchKernelEx", bare_bindings_ex())
    for name in ("cffi", "ctypes"):
        try:
            via = launch_module.binding(name)
        except (ImportError, OSError) as err:
            notes[f"bare_{name}"] = f"not measured: {err}"
            continue

        native_f, native_s = via.function(handle), via.streams[s]

        def bare(call=via.launch_kernel, f=native_f, st=native_s) -> None:
            call(f, g[0], g[1], g[2], b[0], b[1], b[2], 0, st, params, 0)

        paths[f"bare_{name}"] = bare
        checks[f"bare_{name}"] = bare

    # --- this project -------------------------------------------------------------------
    prepared = fn.prepare(grid, block, stream=stream)
    raw = prepared.raw
    paths["raw_int"] = lambda: raw(*ints)
    paths["prepared_int"] = lambda: prepared(*ints)
    paths["prepared_device_array"] = lambda: prepared(*arrays)
    launch = fn.launch
    paths["checked_int"] = lambda: launch(grid, block, ints, stream=stream)
    paths["checked_device_array"] = lambda: launch(grid, block, arrays, stream=stream)
    driver_checked = fn.make_launcher()  # a launcher of its own: the others keep trusting ints
    driver_checked.set_int_checks(True)
    paths["checked_int_driver"] = lambda: driver_checked.launch(grid, block, ints, stream=stream)
    paths["checked_device_array_new_grid"] = lambda: launch(
        kernel.grid(N, CHUNK), kernel.block, arrays, stream=stream
    )
    # the Python launch functions alone, as where runtime._fastlaunch is not built
    python = fn.make_launcher(compiled=False)
    python_prepared = python.prepare(grid, block, 0, stream)
    python_raw = python_prepared.raw
    paths["raw_int_python"] = lambda: python_raw(*ints)
    paths["prepared_device_array_python"] = lambda: python_prepared(*arrays)
    paths["checked_int_python"] = lambda: python.launch(grid, block, ints, stream=stream)
    paths["checked_device_array_python"] = lambda: python.launch(grid, block, arrays, stream=stream)
    for name in launch_module.BINDINGS:
        try:
            via = fn.make_launcher(name, compiled=False).launch
        except (ImportError, OSError) as err:
            notes[f"checked_device_array_via_{name.replace('.', '_')}"] = f"not measured: {err}"
            continue
        paths[f"checked_device_array_via_{name.replace('.', '_')}"] = lambda via=via: via(
            grid, block, arrays, stream=stream
        )
    tdy = tdx = None
    if torch is not None:
        tdy, tdx = torch.from_dlpack(dy), torch.from_dlpack(dx)  # the same memory
        targs = (tdy, tdx, *scalars)
        paths["prepared_torch"] = lambda: prepared(*targs)
        paths["checked_torch"] = lambda: launch(grid, block, targs, stream=stream)
        paths["checked_torch_python"] = lambda: python.launch(grid, block, targs, stream=stream)
    else:
        for key in ("prepared_torch", "checked_torch", "checked_torch_python"):
            notes[key] = "not measured: torch is not installed"
    for name in paths:
        checks.setdefault(name, paths[name])

    # --- peers --------------------------------------------------------------------------
    peer_sync: dict[str, Callable[[], None]] = {}
    try:
        peer, peer_stream = cuda_core_peer(kernel, grid, block, ints)
        paths["cuda_core_launch"] = checks["cuda_core_launch"] = peer
        peer_sync["cuda_core_launch"] = peer_stream
    except Exception as err:
        notes["cuda_core_launch"] = f"not measured: {type(err).__name__}: {err}"
    if torch is not None:
        try:
            peer, peer_stream = cuda_core_peer(kernel, grid, block, ints, (tdy, tdx))
            paths["cuda_core_launch_torch"] = checks["cuda_core_launch_torch"] = peer
            peer_sync["cuda_core_launch_torch"] = peer_stream
        except Exception as err:
            notes["cuda_core_launch_torch"] = f"not measured: {type(err).__name__}: {err}"
    try:
        peer, peer_stream = cupy_peer(kernel, grid, block, dy, dx)
        paths["cupy_rawmodule"] = checks["cupy_rawmodule"] = peer
        peer_sync["cupy_rawmodule"] = peer_stream
    except Exception as err:
        notes["cupy_rawmodule"] = f"not measured: {type(err).__name__}: {err}"
    if torch is not None:
        narrow = tdy.narrow

        def torch_copy() -> None:
            tdx.copy_(narrow(1, OFFSET, CHUNK))

        paths["torch_copy"] = checks["torch_copy"] = torch_copy
        peer_sync["torch_copy"] = torch.cuda.synchronize
        try:
            peer = triton_peer(torch, tdy, tdx)
            paths["triton"] = checks["triton"] = peer
            peer_sync["triton"] = torch.cuda.synchronize
        except Exception as err:
            notes["triton"] = f"not measured: {type(err).__name__}: {err}"
    cat_backward = getattr(runtime, "channel_cat_backward", None)
    if cat_backward is not None:
        try:
            paths["channel_cat_backward_2_outputs_device_array"] = op_device_arrays(
                dev, stream, cat_backward, failures
            )
        except Exception as err:
            notes["channel_cat_backward_2_outputs_device_array"] = (
                f"not measured: {type(err).__name__}: {err}"
            )
    if cat_backward is not None and torch is not None:
        try:
            paths["channel_cat_backward_2_outputs"] = op_peer(torch, cat_backward, failures)
            peer_sync["channel_cat_backward_2_outputs"] = torch.cuda.synchronize
        except Exception as err:
            notes["channel_cat_backward_2_outputs"] = f"not measured: {type(err).__name__}: {err}"
    else:
        notes["channel_cat_backward_2_outputs"] = "not measured: runtime has no channel_cat_backward"

    def drain_all() -> None:
        drain()
        for sync in set(peer_sync.values()):
            sync()

    # --- correctness first, then timing -------------------------------------------------
    for name, once in checks.items():
        try:
            verify(name, once, drain_all)
        except Exception as err:
            failures.append(f"{name}: {type(err).__name__}: {err}")
            paths.pop(name, None)
    us = measure(paths, drain_all, args.reps, args.batch)
    for name, once in checks.items():  # and once more after timing
        if name in paths:
            verify(name, once, drain_all)

    # --- graph replay: 100 captured launches --------------------------------------------
    us.update(fresh)
    for key, rows in (("graph_replay_per_launch", N), ("graph_replay_1_block_per_launch", 1)):
        try:
            ok = lambda rows=rows: np.array_equal(dx.to_numpy()[:rows], host[:rows, OFFSET : OFFSET + CHUNK])  # noqa: E731
            us[key] = graph_replay_on_seed_grid(dev, fn, kernel, rows, dy, dx, ok, key, args, failures)
        except Exception as err:
            failures.append(f"{key}: {type(err).__name__}: {err}")
    key = "graph_replay_bare_per_launch"  # the control: what the runtime's capture adds
    try:

        def bare_launch(st: Any) -> None:
            check("cuLaunchKernel", cu_launch(cu_function, *g, *b, 0, drv.CUstream(st.handle), params, 0))

        us[key] = graph_replay_of(
            dev, bare_launch, lambda: np.array_equal(dx.to_numpy(), want), dx, args, key, failures
        )
    except Exception as err:
        failures.append(f"{key}: {type(err).__name__}: {err}")
    for key, rows in (("graph_replay_empty_per_launch", N), ("graph_replay_empty_1_block_per_launch", 1)):
        try:  # the poisoned output must come back untouched
            untouched = lambda: bool((dx.to_numpy().view(np.uint8) == 0xA5).all())  # noqa: E731
            empty_fn = dev.load(empty).function
            us[key] = graph_replay_on_seed_grid(
                dev, empty_fn, kernel, rows, dy, dx, untouched, key, args, failures
            )
        except Exception as err:
            failures.append(f"{key}: {type(err).__name__}: {err}")
    for key, dependent in (
        ("graph_replay_fastcat_per_launch", False),
        ("graph_replay_fastcat_pdl_per_launch", True),
    ):
        try:
            launch = fastcat_gather(dev, dy, dx, dependent)
            us[key] = graph_replay_of(
                dev, launch, lambda: np.array_equal(dx.to_numpy(), want), dx, args, key, failures
            )
        except Exception as err:
            failures.append(f"{key}: {type(err).__name__}: {err}")
    if cat_backward is not None:
        key = "graph_replay_op_per_launch"
        try:
            op, op_ok, op_out = op_graph_parts(dev, cat_backward)
            us[key] = graph_replay_of(dev, op, op_ok, op_out, args, key, failures)
        except Exception as err:
            failures.append(f"{key}: {type(err).__name__}: {err}")

    if records.tree_hash() != tree:
        print("bench_launch: the tree changed while it ran; not writing launch.json")
        return 1
    record = {
        "us_per_launch": {k: round(v, 3) for k, v in us.items()},
        "labels": {k: LABELS[k] for k in us},
        "not_measured": notes,
        **records.header(records.command_line(argv), tree),
        "default_binding": launch_module.binding().name,
        "compiled_launch": fn.launcher.compiled,
        "compiled_launch_missing": launch_module.compiled_launch_available(),
        "python": sys.version.split()[0],
        "versions": versions(),
        "method": f"median of {args.reps} batches of {args.batch} launches (host time per launch), "
        f"paths interleaved batch by batch; graph: {args.graph_replays} replays of 100 launches per batch",
        "failures": failures,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "launch.json").write_text(json.dumps(record, indent=2) + "\n")
    table = markdown(record)
    (args.out / "launch.md").write_text(table)
    print(table)
    for f in failures:
        print("FAILED:", f)
    return 1 if failures else 0


# --- peers and the graph ------------------------------------------------------------------


def cuda_core_peer(
    kernel: Any, grid: tuple, block: tuple, ints: tuple, tensors: tuple | None = None
) -> tuple[Callable, Callable]:
    """cuda.core's launch of the same PTX; with ``tensors`` (dy, dx), their addresses read
    per launch with ``data_ptr()``, as a cuda.core user holding torch tensors would."""
    try:
        from cuda.core import Device, LaunchConfig, ObjectCode, launch
    except ImportError:
        from cuda.core.experimental import Device, LaunchConfig, ObjectCode, launch
    device = Device(0)
    device.set_current()
    code = ObjectCode.from_ptx(kernel.source.encode())
    k = code.get_kernel(kernel.entry_point_name)
    stream = device.create_stream()
    config = LaunchConfig(grid=grid, block=block)
    scalars = tuple(np.uint32(v) for v in ints[2:])  # ints go as 64-bit pointers
    if tensors is not None:
        dy, dx = tensors
        return (lambda: launch(stream, config, k, dy.data_ptr(), dx.data_ptr(), *scalars)), stream.sync
    args = (ints[0], ints[1], *scalars)
    return (lambda: launch(stream, config, k, *args)), stream.sync


def cupy_peer(kernel: Any, grid: tuple, block: tuple, dy: Any, dx: Any) -> tuple[Callable, Callable]:
    import cupy

    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(kernel.source)
    module = cupy.RawModule(path=f.name)
    k = module.get_function(kernel.entry_point_name)
    cdy, cdx = cupy.asarray(dy), cupy.asarray(dx)
    args = (cdy, cdx, np.uint32(CHUNK), np.uint32(C_TOTAL), np.uint32(OFFSET))
    return (lambda: k(grid, block, args)), cupy.cuda.Device().synchronize


def triton_peer(torch: Any, tdy: Any, tdx: Any) -> Callable:
    import triton
    import triton.language as tl

    @triton.jit
    def cat_backward(dy, dx, total, chunk_c, c_total, offset, block: tl.constexpr):
        i = tl.program_id(0) * block + tl.arange(0, block)
        inside = i < total
        row, col = i // chunk_c, i % chunk_c
        tl.store(dx + i, tl.load(dy + row * c_total + offset + col, mask=inside), mask=inside)

    total = N * CHUNK
    grid = (triton.cdiv(total, BLOCK),)
    return lambda: cat_backward[grid](tdy, tdx, total, CHUNK, C_TOTAL, OFFSET, block=BLOCK)


def op_peer(torch: Any, cat_backward: Callable, failures: list[str]) -> Callable:
    """The high-level op with two outputs: dy's first 12 channels to a, the other 20 to b."""
    dy = torch.randn(N, C_TOTAL, device="cuda")
    a = torch.empty(N, 12, device="cuda")
    b = torch.empty(N, C_TOTAL - 12, device="cuda")
    outs, sizes, stream = [a, b], [12, C_TOTAL - 12], torch.cuda.current_stream()
    cat_backward(dy, sizes, 1, out=outs, stream=stream)
    torch.cuda.synchronize()
    if not (torch.equal(a, dy[:, :12]) and torch.equal(b, dy[:, 12:])):
        failures.append("channel_cat_backward_2_outputs: WRONG RESULT")
    return lambda: cat_backward(dy, sizes, 1, out=outs, stream=stream)


def op_device_arrays(dev: Any, stream: Any, cat_backward: Callable, failures: list[str]) -> Callable:
    """The high-level op with two outputs, on DeviceArrays and a runtime.Stream."""
    host = np.random.default_rng().standard_normal((N, C_TOTAL)).astype(np.float32)
    dy = dev.to_device(host)
    a, b = dev.empty((N, 12), "f32"), dev.empty((N, C_TOTAL - 12), "f32")
    outs, sizes = [a, b], [12, C_TOTAL - 12]
    cat_backward(dy, sizes, 1, out=outs, stream=stream)
    stream.synchronize()
    if not (np.array_equal(a.to_numpy(), host[:, :12]) and np.array_equal(b.to_numpy(), host[:, 12:])):
        failures.append("channel_cat_backward_2_outputs_device_array: WRONG RESULT")
    return lambda: cat_backward(dy, sizes, 1, out=outs, stream=stream)


# Measured on an H200 (driver 580.159.04): in a context that has made no ordinary launch,
# a graph of 100 seed launches replays at 1.05-1.07 us a launch and the empty kernel at
# 0.56-0.57; some time after the context's first few tens of thousands of stream launches
# (25,000 were enough; graph replays, streams and idle time do not count) both cost 0.18 us
# more, 1.23-1.24 and 0.74-0.75, for the rest of the process. The fresh rows are timed
# first for that reason; every other graph row, and the target, is the later state, which
# is what a process that launches anything else sees.
FRESH_NOTE = (
    "The fresh-context rows are timed first, when the run has made no ordinary launch but the one "
    "before each capture. On an H200 a "
    "context's graph replays cost about 0.18 µs a launch more some time after its first few tens of "
    "thousands of stream launches, and stay so; every other graph row, and the target, is measured in "
    "that later state, which is what a process that also launches kernels sees."
)


def fresh_context_graph_replay(dev, fn, kernel, empty, dy, dx, host, args, failures) -> dict[str, float]:
    """The seed kernel's and the empty kernel's graph replay on the seed's grid, timed while
    the context has made no ordinary launch (only the one before each capture)."""
    want = host[:, OFFSET : OFFSET + CHUNK]
    out = {}
    for key, function, ok in (
        ("graph_replay_fresh_context_per_launch", fn, lambda: np.array_equal(dx.to_numpy(), want)),
        (
            "graph_replay_empty_fresh_context_per_launch",
            dev.load(empty).function,
            lambda: bool((dx.to_numpy().view(np.uint8) == 0xA5).all()),  # untouched
        ),
    ):
        try:
            out[key] = graph_replay_on_seed_grid(dev, function, kernel, N, dy, dx, ok, key, args, failures)
        except Exception as err:
            failures.append(f"{key}: {type(err).__name__}: {err}")
    return out


def graph_replay_on_seed_grid(dev, fn, kernel, rows, dy, dx, ok, name, args, failures) -> float:
    """Wall microseconds per launch of a graph of 100 captured launches of ``fn`` (the
    seed kernel's signature) on the seed's grid for ``rows`` rows; ``ok()`` checks dx."""
    grid = kernel.grid(rows, CHUNK)

    def launch(stream: Any) -> None:
        fn.prepare(grid, kernel.block, stream=stream)(dy, dx, CHUNK, C_TOTAL, OFFSET)

    return graph_replay_of(dev, launch, ok, dx, args, name, failures)


# The seed kernel's signature and block with nothing inside: what a graph node costs the
# GPU on the seed's grid whatever the kernel does (launch, CTA dispatch, drain).
EMPTY_PTX = """\
.version 6.3
.target sm_75
.address_size 64

.visible .entry empty_entry_point(
    .param .u64 dy, .param .u64 dx, .param .u32 chunk_c, .param .u32 c_total, .param .u32 chunk_offset
)
.reqntid 128, 1, 1
{
    ret;
}
"""


def fastcat_gather(dev: Any, dy: Any, dx: Any, dependent: bool) -> Callable[[Any], None]:
    """``launch(stream)``: the fast kernel the planner's rule picks for this gather (dy's
    columns OFFSET..OFFSET+CHUNK into dx), built with or without ``dependent_launch``."""
    from ptxgen.kernels.fastcat import choose
    from runtime.plan import DeviceTraits

    sizes = [OFFSET, CHUNK, C_TOTAL - OFFSET - CHUNK]
    (step,) = choose("gather", N, sizes, 4, traits=DeviceTraits.of(dev), chunk=1)
    kernel = step.kernel(dev.arch, dependent)
    offs, widths = [0, 4 * OFFSET, 4 * (OFFSET + CHUNK)], [4 * s for s in sizes]
    values = step.args(dy.ptr, [0, dx.ptr, 0], N, 4 * C_TOTAL, offs, widths)
    fn = dev.load(kernel).function
    grid = (step.grid, step.grid_y, 1)
    return lambda stream: fn.prepare(grid, kernel.block, stream=stream).raw(*values)


def op_graph_parts(dev: Any, cat_backward: Callable) -> tuple[Callable, Callable, Any]:
    """The op of ``op_device_arrays`` as ``launch(stream)``, its check, and an output to poison."""
    host = np.random.default_rng().standard_normal((N, C_TOTAL)).astype(np.float32)
    dy = dev.to_device(host)
    a, b = dev.empty((N, 12), "f32"), dev.empty((N, C_TOTAL - 12), "f32")

    def ok() -> bool:
        return np.array_equal(a.to_numpy(), host[:, :12]) and np.array_equal(b.to_numpy(), host[:, 12:])

    return lambda stream: cat_backward(dy, [12, C_TOTAL - 12], 1, out=[a, b], stream=stream), ok, a


def graph_replay_of(
    dev: Any,
    launch: Callable[[Any], None],
    ok: Callable[[], bool],
    out: Any,
    args: Any,
    name: str,
    failures: list,
) -> float:
    """Wall microseconds per captured call of a graph of 100 calls of ``launch(stream)``;
    ``out`` is poisoned before the checked replay, ``ok()`` checks it."""
    with runtime.Stream(dev) as stream:
        launch(stream)  # plans and loads what it needs: nothing of that may happen in a capture
        stream.synchronize()
        with runtime.Graph(stream) as graph:
            for _ in range(100):
                launch(stream)
        nodes = len(graph.kernel_nodes)
        if not nodes or nodes % 100:
            failures.append(f"{name}: {nodes} kernel nodes captured from 100 calls")
        out.fill_bytes(0xA5)
        dev.synchronize()
        graph.launch()
        stream.synchronize()
        if not ok():
            failures.append(f"{name}: WRONG RESULT")
        samples = []
        for rep in range(args.reps + 1):
            stream.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.graph_replays):
                graph.launch()
            stream.synchronize()
            if rep:
                samples.append((time.perf_counter() - t0) / (args.graph_replays * 100) * 1e6)
        graph.close()
    return median_us(samples)


def versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for name in ("cuda-bindings", "cuda-core", "cffi", "torch", "cupy-cuda13x", "cupy-cuda12x", "triton"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[name] = metadata.version(name)
    return out


# (path, the most it may cost as a multiple of the bare cuda.bindings call)
TARGETS = [
    ("checked_int", 1.15),
    ("checked_device_array", 1.15),
    ("checked_torch", 1.30),
    ("channel_cat_backward_2_outputs", 1.5),
    ("channel_cat_backward_2_outputs_device_array", 1.5),
]
GRAPH_TARGET_US = 1.2


def yes(met: bool) -> str:
    return "yes" if met else "no"


def markdown(record: dict) -> str:
    us = record["us_per_launch"]
    base = us.get("bare_cuda_bindings")
    lines = [
        "# Launch overhead",
        "",
        f"{record['gpu']}, driver {record['driver']}, {record['date']}; Python {record['python']}; "
        + ", ".join(f"{k} {v}" for k, v in record["versions"].items())
        + f"; default launch binding: {record['default_binding']}; launch path: "
        + (
            "compiled (runtime._fastlaunch), the Python launch functions (runtime/launch_python.py) behind it"
            if record.get("compiled_launch")
            else f"the Python launch functions ({record.get('compiled_launch_missing') or 'compiled off'})"
        )
        + ".",
        "",
        f"Host microseconds per launch: {record['method']}. Produced by `python scripts/bench_launch.py`;",
        "numbers in `launch.json`. The ratio is to the bare cuda.bindings call of the same run.",
        "",
        "| path | µs per launch | × bare cuda.bindings |",
        "| --- | ---: | ---: |",
    ]
    for key, value in us.items():
        ratio = f"{value / base:.2f}" if base and not key.startswith("graph_replay") else "-"
        lines.append(f"| {record['labels'][key]} | {value:.2f} | {ratio} |")
    for key, why in record["not_measured"].items():
        lines.append(f"| {LABELS[key]} | {why} | |")
    lines += ["", "## Targets", "", "| target | measured | met |", "| --- | --- | --- |"]
    for key, limit in TARGETS:
        if key in us and base:
            ratio = us[key] / base
            lines.append(f"| {LABELS[key]} ≤ {limit}× bare | {ratio:.3f}× | {yes(ratio <= limit)} |")
    for key, peers in (
        ("checked_int", ("cuda_core_launch", "torch_copy")),
        ("checked_device_array", ("cuda_core_launch", "torch_copy")),
        ("checked_torch", ("cuda_core_launch", "cuda_core_launch_torch", "torch_copy")),
    ):
        for peer in peers:
            if key in us and peer in us:
                measured = f"{us[key]:.2f} vs {us[peer]:.2f} µs"
                lines.append(f"| {LABELS[key]} < {LABELS[peer]} | {measured} | {yes(us[key] < us[peer])} |")
    floor = us.get("graph_replay_empty_per_launch")
    seed = "seed kernel" + (f" (an empty kernel on its grid: {floor:.2f} µs)" if floor else "")
    for key, what in (
        ("graph_replay_per_launch", seed),
        ("graph_replay_fastcat_pdl_per_launch", "fast kernel, dependent launch"),
        ("graph_replay_op_per_launch", "the op"),
    ):
        if key in us:
            v = us[key]
            target = f"graph replay ≤ {GRAPH_TARGET_US} µs per launch (wall), {what}"
            lines.append(f"| {target} | {v:.2f} µs | {yes(v <= GRAPH_TARGET_US)} |")
    if "graph_replay_fresh_context_per_launch" in us:
        lines += ["", FRESH_NOTE]
    if record["failures"]:
        lines += ["", "## Failures", "", *[f"- {f}" for f in record["failures"]]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
