#!/usr/bin/env python3
"""Benchmark channel_cat: this project's kernels and ops against the copy ceiling,
PyTorch, CuPy, the driver's 2-D copy and Triton, on one GPU, in one run.

Cases (scripts/bench_cases.py): a gather of one piece, a whole split and a whole
concat, over the issue's shapes in 1-, 2-, 4- and 8-byte types, small shapes for
latency, and YOLO C2f-like bf16 shapes. Methods (scripts/bench_methods.py): one
registry entry each.

How each case is measured:
  * fresh random bits in the inputs; every method checked bit for bit against
    PyTorch's slicing after a run into poisoned outputs (``correct``);
  * CUDA events around one run of the op, on the default stream; before each, a spin
    kernel holds the GPU for --spin-us while the host queues the op (so host launch
    cost stays out of device time), then a read of an unrelated 256 MB buffer fills
    the L2 (60 MB on an H200) with clean lines: every method starts alike;
  * methods interleaved run by run, the order rotated each round, --reps runs each
    after --warmup (SMALL_REPS_FACTOR times as many on the small shapes), the median taken;
  * GB/s = honest traffic / time: bytes written plus every 32-byte sector of the
    source that holds needed bytes;
  * the ceiling: the better of cuMemcpyDtoD and a flat 16-byte copy kernel (PTX,
    hand-written) moving the same number of bytes, in the same run.

Writes results.json, bandwidth.png and the generated part of README.md to --out-dir
(default docs/perf) and prints a table last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import records  # noqa: E402
from bench_cases import DTYPES, Case, all_cases, quick_cases, rotated, sweep_cases  # noqa: E402
from bench_methods import METHODS, SPIN, Buffers, Method, Runner, Unsupported, seed_with_block  # noqa: E402
from bench_report import plot, print_summary, write_readme  # noqa: E402

import runtime  # noqa: E402
from runtime._driver import check, driver  # noqa: E402
from runtime.plan import seed_block_size  # noqa: E402

FLUSH_BYTES = 256 << 20
# What the sweep times: the ceilings, our two ways in, PyTorch's best methods and tuned Triton.
SWEEP_METHODS = {
    "copy: cuMemcpyDtoD",
    "copy: 16-byte PTX kernel",
    "flat_copy",
    "ours: fused",
    "ours: runtime op",
    "torch: narrow+copy_",
    "torch: split_with_sizes_copy",
    "torch: cat",
    "triton: 2-D tiles, tuned",
}
POISON = 0xA5
# The small shapes (<= 1 MB a side) run about 4 us, where the run-to-run spread is a few
# tenths of a microsecond: a median of 20 runs put the small f32 cells at 0.88-0.90 of the
# flat copy where 100 runs in the same call put them at 0.93-0.94 (the H200 record of tree
# 61d0ed1e and lab/data/small-rowpack-h200.json). Their runs are cheap, so they get more.
SMALL_REPS_FACTOR = 5


def case_reps(case: Case, reps: int) -> int:
    """The timed runs a case gets: ``reps``, or ``SMALL_REPS_FACTOR`` times it for a small shape."""
    return reps * SMALL_REPS_FACTOR if case.group == "small" else reps


class Context:
    """What methods share: the device, the libraries, the timing machinery."""

    def __init__(self, dev: Any, torch: Any, spin_us: float, tune_reps: int, tile_choices: int) -> None:
        self.dev, self.torch, self.drv = dev, torch, driver()
        self.modules: dict[str, Any] = {}
        for name in ("triton", "cupy"):
            try:
                self.modules[name] = __import__(name)
            except Exception as err:  # a broken install says more than ImportError
                self.modules[name] = f"{name} is not importable here ({type(err).__name__}: {err})"
        self._spin = dev.load(SPIN).function
        self._spin_ns = int(spin_us * 1000)
        self._flush = torch.ones(FLUSH_BYTES // 8, dtype=torch.int64, device="cuda")
        self._events: list[tuple[Any, Any]] = []
        self.tune_reps = tune_reps
        self.tile_choices = tile_choices  # tile shapes the tuned Triton peer tries per piece

    def need(self, name: str) -> Any:
        found = self.modules[name]
        if isinstance(found, str):
            raise Unsupported(found)
        return found

    def check(self, call: str, result: Any) -> Any:
        return check(call, result)

    def int_view(self, t: Any) -> Any:
        """The same bits as an integer tensor of the same width (compares NaNs too)."""
        torch = self.torch
        return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])

    def _event_pair(self, index: int) -> tuple[Any, Any]:
        while len(self._events) <= index:
            self._events.append((runtime.Event(self.dev), runtime.Event(self.dev)))
        return self._events[index]

    def _prelude(self, rep: int) -> None:
        self._spin.launch((1, 1, 1), SPIN.block, (self._spin_ns,))
        # Read 256 MB of an unrelated buffer: every method starts with the 60 MB L2
        # holding clean lines it has no use for. A memset here left 60 MB of dirty
        # lines that each method paid to write back; and without a flush, what a
        # method found in L2 depended on the method before it (one that had just
        # written the same output left ~5% less for the next to do).
        self._flush_sum = self._flush.sum()

    def time_runs(
        self, runs: dict[str, Any], reps: int, checks: dict[str, Runner] | None = None
    ) -> tuple[dict[str, list[float]], dict[str, str]]:
        """Milliseconds of each of ``reps`` runs of every callable, interleaved run by run,
        the order rotated by one each round: each callable is timed first, second, ... as
        often as the others, so no place in the round favours one (two forms of one kernel
        timed in a fixed order disagreed by up to 16% on 4 us kernels,
        lab/data/pdl-wait-ab.json). A callable that raises is dropped and its error
        returned. ``checks``: the runners whose last timed run is checked (outputs poisoned
        before it, compared after it, before the next method overwrites them); the outcome
        is in :attr:`last_checked`."""
        times: dict[str, list[float]] = {name: [] for name in runs}
        failed: dict[str, str] = {}
        self.last_checked: dict[str, bool] = {}
        order = list(runs.items())
        for rep in range(reps):
            marks = []
            last = checks is not None and rep == reps - 1
            for name, run in rotated(order, rep):
                if name in failed:
                    continue
                runner = checks.get(name) if last and checks is not None else None
                if runner is not None:
                    self.poison(runner)
                start, end = self._event_pair(len(marks))
                self._prelude(rep)
                start.record()
                try:
                    run()
                except Exception as err:
                    failed[name] = f"{type(err).__name__}: {err}".splitlines()[0]
                    self.torch.cuda.synchronize()  # a launch error must not be sticky
                    continue
                end.record()
                marks.append((name, start, end))
                if runner is not None:
                    self.last_checked[name] = self.matches(runner)  # waits: the timing is the events'
            self.dev.synchronize()
            for name, start, end in marks:
                times[name].append(start.elapsed_ms(end))
        return times, failed

    def tune_time(self, run: Any) -> float:
        """Median milliseconds of a few runs, for tuning (the first run compiles)."""
        run()
        self.torch.cuda.synchronize()
        times, failed = self.time_runs({"tune": run}, self.tune_reps)
        if failed:
            raise RuntimeError(failed["tune"])
        return statistics.median(times["tune"])

    def poison(self, runner: Runner) -> None:
        for out in runner.outputs:
            out.view(self.torch.uint8).fill_(POISON)

    def matches(self, runner: Runner) -> bool:
        """Whether every output holds every expected bit (waits for the device)."""
        self.torch.cuda.synchronize()
        return all(self.torch.equal(self.int_view(a), self.int_view(b)) for a, b in runner.pairs)

    def correct(self, runner: Runner) -> bool:
        """Run once more into poisoned outputs and compare every bit with the expected views."""
        self.poison(runner)
        runner.run()
        return self.matches(runner)


def torch_dtype(torch: Any, name: str) -> Any:
    import ptxgen

    return getattr(torch, ptxgen.resolve_dtype(name).numpy_name)


def make_buffers(ctx: Context, case: Case) -> Buffers:
    """The case's arrays, inputs filled with fresh random bits."""
    torch = ctx.torch
    dt = torch_dtype(torch, case.dtype)
    wide = torch.empty((case.rows, case.channels), dtype=dt, device="cuda")
    pieces = [torch.empty((case.rows, s), dtype=dt, device="cuda") for s in case.sizes]
    for t in [wide] if case.op != "concat" else pieces:
        t.view(torch.uint8).random_(0, 256)
    return Buffers(case, wide, pieces)


def run_case(ctx: Context, case: Case, methods: list[Method], reps: int, warmup: int) -> list[dict[str, Any]]:
    buffers = make_buffers(ctx, case)
    traffic = case.traffic()
    runners: dict[str, Runner] = {}
    entries: dict[str, dict[str, Any]] = {}
    for m in methods:
        entry = {"method": m.name, "method_group": m.group, "status": "ok", "error": None, "info": ""}
        entries[m.name] = entry
        try:
            runners[m.name] = m.make(ctx, buffers)
            entry["info"] = runners[m.name].info
        except Unsupported as why:
            entry.update(status="skipped", error=str(why))
        except Exception as err:
            entry.update(status="failed", error=f"{type(err).__name__}: {err}".splitlines()[0])
            ctx.torch.cuda.synchronize()
    if warmup:
        _, failed = ctx.time_runs({k: r.run for k, r in runners.items()}, warmup)
        for name, error in failed.items():
            entries[name].update(status="failed", error=error)
            del runners[name]
    times, failed = ctx.time_runs({k: r.run for k, r in runners.items()}, reps, checks=runners)
    for name, error in failed.items():
        entries[name].update(status="failed", error=error)
        del runners[name]
    out = []
    for name, entry in entries.items():
        runner = runners.get(name)
        moved = runner.traffic if runner is not None and runner.traffic else traffic
        row = {
            "shape": case.shape,
            "pretty_shape": case.pretty_shape,
            "dtype": case.dtype,
            "op": case.op,
            "group": case.group,
            "traffic_bytes": moved,
            # the same in whole 64-byte units (bench_cases.DRAM_GRANULE); ceilings copy flat
            "dram_traffic_bytes": case.dram_traffic() if moved == traffic else moved,
            "GBps": None,
            "us": None,
            "correct": None,
            **entry,
        }
        if runner is not None:
            ms = statistics.median(times[name])
            row.update(us=round(ms * 1e3, 2), GBps=round(moved / (ms * 1e-3) / 1e9, 1))
            # the last timed run and one more, each into poisoned outputs
            row["correct"] = ctx.last_checked.get(name, False) and ctx.correct(runner)
        out.append(row)
    ceilings = [r["GBps"] for r in out if r["method_group"] == "ceiling" and r["GBps"] and r["correct"]]
    for r in out:
        r["case_ceiling_GBps"] = max(ceilings) if ceilings else None
    del buffers, runners
    ctx.torch.cuda.empty_cache()
    return out


def device_ceiling(ctx: Context, reps: int) -> float:
    """GB/s of the better copy of 1 GiB (read + written), the device's ceiling."""
    big = Case("split", 1 << 20, (512,), "u8")  # 512 MiB each way: traffic 1 GiB, copy 512 MiB
    rows = run_case(ctx, big, [METHODS["copy: cuMemcpyDtoD"], METHODS["copy: 16-byte PTX kernel"]], reps, 2)
    return max(r["GBps"] for r in rows if r["GBps"] and r["correct"])


# --- reports --------------------------------------------------------------------------------


def environment(dev: Any, torch: Any, ctx: Context, command: str, tree: str) -> dict[str, Any]:
    versions = {"torch": torch.__version__}
    for name in ("triton", "cupy"):
        mod = ctx.modules[name]
        versions[name] = getattr(mod, "__version__", None) if not isinstance(mod, str) else None
    try:
        from importlib.metadata import version

        versions["cuda-bindings"] = version("cuda-bindings")
    except Exception:
        versions["cuda-bindings"] = None
    return {**records.header(command, tree), "arch": dev.arch, "versions": versions}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a few cases of every kind")
    p.add_argument(
        "--only", metavar="PATTERN", help="cases whose name (e.g. 'split 524288x(32+48) f32') matches"
    )
    p.add_argument("--methods", metavar="PATTERN", help="methods whose name matches (ceilings always run)")
    p.add_argument("--dtypes", default=",".join(DTYPES), help="for the issue and small shapes")
    p.add_argument("--reps", type=int, default=None, help="timed runs per method (default 20, --quick 10)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--spin-us", type=float, default=300.0, help="GPU hold before each timed run")
    p.add_argument("--blocks", default="", help="also time the seed kernel at these block sizes")
    p.add_argument("--sweep", type=int, default=0, metavar="N", help="also N random shapes, split and concat")
    p.add_argument("--seed", type=int, default=None, help="the sweep's seed (default: today, YYYYMMDD)")
    p.add_argument("--out-dir", type=Path, default=ROOT / "docs" / "perf")
    p.add_argument(
        "--report-only",
        action="store_true",
        help="redraw the plot and README from OUT_DIR/results.json (no GPU)",
    )
    args = p.parse_args(argv)
    if args.report_only:
        doc = json.loads((args.out_dir / "results.json").read_text())
        problem = plot(args.out_dir / "bandwidth.png", doc)
        write_readme(args.out_dir / "README.md", doc, ROOT / "docs" / "perf" / "README.md")
        print(problem or f"wrote {args.out_dir / 'bandwidth.png'} and {args.out_dir / 'README.md'}")
        return 0
    reps = args.reps if args.reps is not None else (10 if args.quick else 20)
    if reps < 1 or args.warmup < 0:
        p.error("--reps must be >= 1 and --warmup >= 0")

    cases = quick_cases() if args.quick else all_cases(tuple(args.dtypes.split(",")))
    if args.sweep < 0:
        p.error(f"--sweep takes a count of shapes >= 0, not {args.sweep}")
    seed = args.seed if args.seed is not None else int(datetime.date.today().strftime("%Y%m%d"))
    if args.sweep:
        cases += sweep_cases(args.sweep, seed)
        print(f"sweep: {args.sweep} random shapes, seed {seed}", flush=True)
    if args.only:
        cases = [c for c in cases if re.search(args.only, c.name)]
    methods = list(METHODS.values())
    for b in filter(None, args.blocks.split(",")):
        name = f"ours: seed, block {int(b)}"
        methods.append(
            Method(name, "ours", frozenset(("gather", "split", "concat")), seed_with_block(int(b)))
        )
    if args.methods:
        methods = [m for m in methods if m.group == "ceiling" or re.search(args.methods, m.name)]
    if not cases:
        p.error("no case matches; see scripts/bench_cases.py for the names")

    reason = runtime.unavailable_reason()
    if reason:
        print(f"no GPU: {reason}; nothing to measure")
        return 0
    try:
        import torch
    except ImportError:
        print("the benchmark checks every result against PyTorch: install torch (with CUDA) to run it")
        return 2
    if not torch.cuda.is_available():
        print("torch cannot see a GPU; the benchmark needs CUDA tensors")
        return 2

    started = time.perf_counter()
    tree = records.tree_hash()  # of the code that runs, taken before it runs
    torch.cuda.init()
    dev = runtime.Device(torch.cuda.current_device())
    ctx = Context(dev, torch, args.spin_us, tune_reps=3, tile_choices=3 if args.quick else 5)
    for name in ("triton", "cupy"):
        if isinstance(ctx.modules[name], str):
            print(f"note: {ctx.modules[name]}; its methods are skipped")
    doc: dict[str, Any] = environment(dev, torch, ctx, records.command_line(argv), tree)
    doc["ceiling_GBps"] = device_ceiling(ctx, reps)
    results: list[dict[str, Any]] = []
    for i, case in enumerate(cases, 1):
        t0 = time.perf_counter()
        mine = [m for m in methods if case.op in m.ops and (case.group != "sweep" or m.name in SWEEP_METHODS)]
        rows = run_case(ctx, case, mine, case_reps(case, reps), args.warmup)
        if case.group == "sweep":
            for row in rows:
                row.update(sweep=True, seed=seed)
        results += rows
        print(f"[{i}/{len(cases)}] {case.name}: {time.perf_counter() - t0:.1f} s", flush=True)
    doc.update(
        runs=f"median of {reps} runs ({reps * SMALL_REPS_FACTOR} on the small shapes) after "
        f"{args.warmup} warm-up" + (" (--quick)" if args.quick else ""),
        quick=args.quick,
        reps=reps,
        small_reps=reps * SMALL_REPS_FACTOR,
        warmup=args.warmup,
        spin_us=args.spin_us,
        sweep={"shapes": args.sweep, "seed": seed} if args.sweep else None,
        seed_block_rule={str(w): seed_block_size(w) for w in (1, 3, 32, 48, 128, 256, 8192)},
        elapsed_s=round(time.perf_counter() - started, 1),
        results=results,
    )
    if records.tree_hash() != tree:
        print("bench: the tree changed while it ran; not writing results.json")
        return 1
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
    problem = plot(args.out_dir / "bandwidth.png", doc)
    if problem:
        print(problem)
    write_readme(args.out_dir / "README.md", doc, ROOT / "docs" / "perf" / "README.md")
    print_summary(doc)
    wrong = [r for r in results if r["correct"] is False]
    for r in wrong:
        print(f"WRONG RESULT: {r['method']} on {r['op']} {r['shape']} {r['dtype']}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
