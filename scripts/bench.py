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
    cost stays out of device time) and, where the case moves less than 256 MB, a
    256 MB memset flushes the L2 (60 MB on an H200);
  * methods interleaved run by run, --reps runs each after --warmup, the median taken;
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
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_cases import DTYPES, Case, all_cases, quick_cases  # noqa: E402
from bench_methods import METHODS, SPIN, Buffers, Method, Runner, Unsupported, seed_with_block  # noqa: E402

import runtime  # noqa: E402
from runtime._driver import check, driver  # noqa: E402
from runtime.plan import VARIANTS, seed_block_size  # noqa: E402

FLUSH_BYTES = 256 << 20
BEGIN, END = "<!-- results:begin (written by scripts/bench.py) -->", "<!-- results:end -->"
POISON = 0xA5


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

    def time_runs(self, runs: dict[str, Any], reps: int) -> tuple[dict[str, list[float]], dict[str, str]]:
        """Milliseconds of each of ``reps`` runs of every callable, interleaved run by run.
        A callable that raises is dropped and its error returned."""
        times: dict[str, list[float]] = {name: [] for name in runs}
        failed: dict[str, str] = {}
        for rep in range(reps):
            marks = []
            for name, run in runs.items():
                if name in failed:
                    continue
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

    def correct(self, runner: Runner) -> bool:
        """Run once into poisoned outputs and compare every bit with the expected views."""
        for out in runner.outputs:
            out.view(self.torch.uint8).fill_(POISON)
        runner.run()
        self.torch.cuda.synchronize()
        return all(self.torch.equal(self.int_view(a), self.int_view(b)) for a, b in runner.pairs)


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
    times, failed = ctx.time_runs({k: r.run for k, r in runners.items()}, reps)
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
            # the same in DRAM's 64-byte units (bench_cases.DRAM_GRANULE); ceilings copy flat
            "dram_traffic_bytes": case.dram_traffic() if moved == traffic else moved,
            "GBps": None,
            "us": None,
            "correct": None,
            **entry,
        }
        if runner is not None:
            ms = statistics.median(times[name])
            row.update(us=round(ms * 1e3, 2), GBps=round(moved / (ms * 1e-3) / 1e9, 1))
            row["correct"] = ctx.correct(runner)
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


def environment(dev: Any, torch: Any, ctx: Context) -> dict[str, Any]:
    driver_release = None
    try:
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        driver_release = subprocess.run(query, capture_output=True, text=True, timeout=20).stdout.split()[0]
    except Exception:
        pass
    versions = {"torch": torch.__version__}
    for name in ("triton", "cupy"):
        mod = ctx.modules[name]
        versions[name] = getattr(mod, "__version__", None) if not isinstance(mod, str) else None
    try:
        from importlib.metadata import version

        versions["cuda-bindings"] = version("cuda-bindings")
    except Exception:
        versions["cuda-bindings"] = None
    return {
        "gpu": dev.name,
        "arch": dev.arch,
        "driver": f"{driver_release or '?'} (CUDA {dev.driver_version[0]}.{dev.driver_version[1]})",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "versions": versions,
    }


def method_order(results: list[dict[str, Any]], ceilings: bool = False) -> list[str]:
    """Method names as first seen, ours before peers (ceilings first where asked)."""
    rank = {"ceiling": 0, "ours": 1, "peer": 2}
    group = {r["method"]: r["method_group"] for r in results}
    names = [m for m in dict.fromkeys(r["method"] for r in results) if ceilings or group[m] != "ceiling"]
    return sorted(names, key=lambda m: rank.get(group[m], 3))


def _cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "–"
    if row["status"] == "skipped":
        return "skipped"
    if row["status"] == "failed":
        return "fails"
    text = f"{row['GBps']:,.0f}"
    return text if row["correct"] else f"{text} WRONG"


def table(results: list[dict[str, Any]]) -> str:
    """Markdown: one row per case, GB/s of every method, the ceiling, our best against
    the best peer."""
    methods = method_order(results)
    cases = list(dict.fromkeys((r["op"], r["pretty_shape"], r["dtype"]) for r in results))
    head = ["op", "shape", "dtype", "ceiling", *methods, "ours / best peer"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for op, shape, dtype in cases:
        rows = {
            r["method"]: r for r in results if (r["op"], r["pretty_shape"], r["dtype"]) == (op, shape, dtype)
        }
        ceiling = next(iter(rows.values()))["case_ceiling_GBps"]

        def best(group: str, rows: dict[str, Any] = rows) -> float:
            ok = [
                r["GBps"] for r in rows.values() if r["method_group"] == group and r["GBps"] and r["correct"]
            ]
            return max(ok, default=0.0)

        ours, peer = best("ours"), best("peer")
        ratio = f"{ours / peer:.2f}×" if ours and peer else ""
        cells = [
            op,
            shape,
            dtype,
            f"{ceiling:,.0f}" if ceiling else "",
            *(_cell(rows.get(m)) for m in methods),
        ]
        lines.append("| " + " | ".join([*cells, ratio]) + " |")
    return "\n".join(lines)


def gather_table(results: list[dict[str, Any]]) -> str:
    """Markdown: each gather's best kernel of ours against the ceiling, on honest traffic
    (32-byte sectors) and on what DRAM must move (64-byte units)."""
    head = (
        "| gather | dtype | ours GB/s | % of ceiling | DRAM bytes / honest bytes | % of ceiling, DRAM bytes |"
    )
    lines = [head, "|---|---|---|---|---|---|"]
    for shape, dtype in dict.fromkeys(
        (r["pretty_shape"], r["dtype"]) for r in results if r["op"] == "gather"
    ):
        rows = [
            r
            for r in results
            if (r["op"], r["pretty_shape"], r["dtype"]) == ("gather", shape, dtype)
            and r["method_group"] == "ours"
            and r["GBps"]
            and r["correct"]
        ]
        if not rows:
            continue
        best = max(rows, key=lambda r: r["GBps"])
        ceiling = best["case_ceiling_GBps"]
        if not ceiling:
            continue
        dram = best.get("dram_traffic_bytes") or best["traffic_bytes"]
        scale = dram / best["traffic_bytes"]
        lines.append(
            f"| {shape} | {dtype} | {best['GBps']:,.0f} | {100 * best['GBps'] / ceiling:.1f} | "
            f"{scale:.3f} | {100 * best['GBps'] * scale / ceiling:.1f} |"
        )
    return "\n".join(lines)


def variants_table() -> str:
    lines = ["| variant | scope | when it is chosen |", "|---|---|---|"]
    lines += [f"| `{v.name}` | {v.scope} | {v.when} |" for v in VARIANTS]
    return "\n".join(lines)


def generated_section(doc: dict[str, Any]) -> str:
    env = doc
    failures = [r for r in doc["results"] if r["status"] == "failed"]
    fail_lines = "".join(
        f"- {r['method']} on {r['op']} {r['pretty_shape']} {r['dtype']}: `{r['error']}`\n" for r in failures
    )
    return (
        f"{BEGIN}\n"
        f"{env['gpu']}, driver {env['driver']}, {env['date']}; {doc['runs']}; "
        f"device copy ceiling {doc['ceiling_GBps']:,.0f} GB/s; the run took {doc['elapsed_s']:.0f} s.\n\n"
        "GB/s on honest traffic (bytes written + 32-byte sectors read); ceiling: the better flat copy of "
        "the same bytes in the same run; – not applicable; `skipped`: its library is missing; "
        "`fails`: the method raised (below).\n\n"
        f"{table(doc['results'])}\n\n"
        + (f"Failures:\n\n{fail_lines}\n" if failures else "")
        + "Gathers against the ceiling, on honest traffic and on the bytes DRAM must move "
        "(it delivers 64-byte units: `bench_cases.DRAM_GRANULE`):\n\n"
        f"{gather_table(doc['results'])}\n\n"
        + "Kernel variants, in the planner's order of preference (`runtime/plan.py`):\n\n"
        f"{variants_table()}\n\n"
        f"{END}"
    )


README_SKELETON = """# Performance

`scripts/bench.py` measures channel_cat (a gather of one piece, a whole split, a whole
concat) against a flat copy of the same bytes, PyTorch, CuPy, the driver's 2-D copy
and Triton. Raw numbers: `results.json`; per shape: `bandwidth.png`.

## Results

{generated}

## How it measures

- Fresh random bits in the inputs of every case; every method runs once more into
  poisoned outputs and is compared bit for bit with PyTorch's slicing (`correct`).
- CUDA events around one run of the op on the default stream. Before each run a spin
  kernel holds the GPU while the host queues the op, so host launch cost stays out of
  device time (the launch path has its own benchmark), and then a read of an unrelated
  256 MB buffer fills the 60 MB L2 with clean lines of no use to anyone: every method,
  whatever ran before it, starts alike. Methods interleave run by run; the median of
  the runs after warm-up is reported.
- Honest traffic: bytes written plus every 32-byte sector of the source holding
  needed bytes (`bench_cases.sector_bytes`): a slice narrower than a sector still
  costs the sector. DRAM delivers 64-byte units, so gathers are also shown against
  the bytes DRAM must move (`dram_traffic_bytes`).
- The ceiling: the better of `cuMemcpyDtoD` and a flat copy kernel moving 16-byte
  vectors (hand-written PTX in `scripts/bench_methods.py`), over the same number of
  bytes, in the same run.
- Peers: `torch` `narrow().copy_()` per piece, `split_with_sizes_copy`, `cat`; CuPy
  `copyto` per piece; `cuMemcpy2DAsync` per piece; the seed's kernel written in
  Triton with the seed's launch contract; a row × channel tiled Triton kernel, the
  best of up to five tile shapes per piece.

## Which kernel runs

The ops (`runtime.channel_cat_backward` / `_forward`) plan each shape once from the
table of variants in `runtime/plan.py`: the first op-scope (fused) variant that
accepts the shape, else, per piece, the first chunk-scope variant that accepts it.
The seed kernel takes any piece; its block is the smallest multiple of 32 holding
the row, at most 256, and launches are cut by rows (pointers moved to each group's
first row) where the grid would pass 2^31 - 1 CTAs, or by row and column where a
row passes the i32 limit of its scalars.

## Reproduce

```sh
python scripts/bench.py                          # everything (the record above)
python scripts/bench.py --quick                  # a few cases, a first look
python scripts/bench.py --only 'split .* bf16'   # cases whose name matches
python scripts/bench.py --blocks 64,128,256,1024 # add the seed kernel at fixed blocks
```

Case names read `OP SHAPE DTYPE`, e.g. `gather 524288x80->48@32 u8` or
`split 102400x(64*3) bf16`. Needs PyTorch (the reference); Triton and CuPy are used
where they import.
"""


def write_readme(path: Path, doc: dict[str, Any], source: Path) -> None:
    text = source.read_text() if source.exists() else README_SKELETON.format(generated=f"{BEGIN}\n{END}")
    if BEGIN not in text or END not in text:
        text = text.rstrip() + f"\n\n## Results\n\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    path.write_text(head + generated_section(doc) + tail)


def plot(path: Path, doc: dict[str, Any]) -> str | None:
    """One panel per (op, shape): each method's GB/s per dtype, the case's ceiling as a line."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        return f"no plot: matplotlib is not importable ({err})"
    results = doc["results"]
    panels = list(dict.fromkeys((r["op"], r["pretty_shape"]) for r in results))
    methods = method_order(results)
    colors = {m: plt.get_cmap("tab20")(i % 20) for i, m in enumerate(methods)}
    cols = min(4, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.6 * rows + 1.2), squeeze=False)
    for ax, (op, shape) in zip(axes.flat, panels):
        mine = [r for r in results if (r["op"], r["pretty_shape"]) == (op, shape)]
        dtypes = list(dict.fromkeys(r["dtype"] for r in mine))
        width = 0.8 / max(1, len(methods))
        for x, dt in enumerate(dtypes):
            rows_dt = {r["method"]: r for r in mine if r["dtype"] == dt}
            for j, m in enumerate(methods):
                r = rows_dt.get(m)
                if r and r["GBps"] and r["correct"]:
                    ax.bar(x - 0.4 + (j + 0.5) * width, r["GBps"], width, color=colors[m])
            ceiling = next(iter(rows_dt.values()))["case_ceiling_GBps"]
            if ceiling:
                ax.hlines(ceiling, x - 0.45, x + 0.45, colors="black", linewidth=1.5)
        ax.set_xticks(range(len(dtypes)), dtypes)
        ax.set_title(f"{op} {shape}", fontsize=9)
        ax.set_ylabel("GB/s")
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[m]) for m in methods]
    handles.append(plt.Line2D([0], [0], color="black"))
    title = f"{doc['gpu']}, {doc['date']}: GB/s on honest traffic (bytes written + 32-byte sectors read)"
    legend = fig.legend(
        handles, [*methods, "copy ceiling (same bytes)"], loc="upper center", ncol=4, fontsize=8, title=title
    )
    fig.canvas.draw()  # the legend's height, in figure coordinates, decides where the panels start
    top = 1 - legend.get_window_extent().height / fig.bbox.height - 0.005
    fig.tight_layout(rect=(0, 0, 1, top))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


def print_summary(doc: dict[str, Any]) -> None:
    print(f"\n{doc['gpu']}, driver {doc['driver']}; ceiling {doc['ceiling_GBps']:,.0f} GB/s; {doc['runs']}")
    methods = method_order(doc["results"], ceilings=True)
    short = {m: m.split(": ")[-1][:12] for m in methods}
    print(f"{'case':<40}" + "".join(f"{short[m]:>13}" for m in methods))
    cases = list(dict.fromkeys((r["op"], r["shape"], r["dtype"]) for r in doc["results"]))
    for key in cases:
        rows = {r["method"]: r for r in doc["results"] if (r["op"], r["shape"], r["dtype"]) == key}
        print(f"{' '.join(key):<40}" + "".join(f"{_cell(rows.get(m)):>13}" for m in methods))
    print(f"(GB/s on honest traffic; the run took {doc['elapsed_s']:.0f} s)")


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
    torch.cuda.init()
    dev = runtime.Device(torch.cuda.current_device())
    ctx = Context(dev, torch, args.spin_us, tune_reps=3, tile_choices=3 if args.quick else 5)
    for name in ("triton", "cupy"):
        if isinstance(ctx.modules[name], str):
            print(f"note: {ctx.modules[name]}; its methods are skipped")
    doc: dict[str, Any] = environment(dev, torch, ctx)
    doc["ceiling_GBps"] = device_ceiling(ctx, reps)
    results: list[dict[str, Any]] = []
    for i, case in enumerate(cases, 1):
        t0 = time.perf_counter()
        mine = [m for m in methods if case.op in m.ops]
        results += run_case(ctx, case, mine, reps, args.warmup)
        print(f"[{i}/{len(cases)}] {case.name}: {time.perf_counter() - t0:.1f} s", flush=True)
    doc.update(
        runs=f"median of {reps} runs after {args.warmup} warm-up" + (" (--quick)" if args.quick else ""),
        quick=args.quick,
        reps=reps,
        warmup=args.warmup,
        spin_us=args.spin_us,
        seed_block_rule={str(w): seed_block_size(w) for w in (1, 3, 32, 48, 128, 256, 8192)},
        elapsed_s=round(time.perf_counter() - started, 1),
        results=results,
    )
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
