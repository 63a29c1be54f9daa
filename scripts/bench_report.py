"""The benchmark's report: the tables, the summary against the targets, the plot and the
generated part of docs/perf/README.md, all made from results.json (``bench.py
--report-only`` redraws them without a GPU, and the CPU suite checks the committed
README against the committed record).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from bench_cases import DTYPE_SIZES

from runtime.plan import VARIANTS

BEGIN, END = "<!-- results:begin (written by scripts/bench.py) -->", "<!-- results:end -->"


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
    (32-byte sectors, the floor) and counted in whole 64-byte units (an upper estimate of
    what DRAM moved: a dense gather can pass 100% on that count)."""
    head = (
        "| gather | dtype | ours GB/s | % of ceiling | 64-byte-unit bytes / honest bytes "
        "| % of ceiling, in 64-byte units |"
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


def _share(row: dict[str, Any]) -> float:
    """A result as a fraction of its case's ceiling."""
    return row["GBps"] / row["case_ceiling_GBps"]


Cell = tuple[str, str, str]  # (op, pretty shape, dtype)


def _best(rows: list[dict[str, Any]], group: str, prefix: str = "") -> dict[Cell, dict[str, Any]]:
    """Per cell: the fastest correct result of a method group (and name prefix)."""
    best: dict[Cell, dict[str, Any]] = {}
    for r in rows:
        if (
            r["method_group"] != group
            or not r["method"].startswith(prefix)
            or not r["GBps"]
            or not r["correct"]
        ):
            continue
        if not r.get("case_ceiling_GBps"):
            continue
        key = (r["op"], r["pretty_shape"], r["dtype"])
        if key not in best or r["GBps"] > best[key]["GBps"]:
            best[key] = r
    return best


def _cell_name(key: Cell) -> str:
    op, shape, dtype = key
    return f"{op} {shape} {dtype}"


def _spread(shares: dict[Cell, float]) -> str:
    """The median and the lowest share of the ceiling over cells, naming the lowest."""
    low = min(shares, key=shares.__getitem__)
    return (
        f"median {100 * statistics.median(shares.values()):.1f}% of the ceiling, "
        f"lowest {100 * shares[low]:.1f}% ({_cell_name(low)})"
    )


def targets_summary(results: list[dict[str, Any]]) -> str:
    """The run against the targets, as bullets computed from the results (the figures
    the prose around it may cite)."""
    ours = _best(results, "ours")
    torch_best = _best(results, "peer", "torch")
    peers = _best(results, "peer")
    lines = []
    for group in dict.fromkeys(r["group"] for r in results):
        for op in ("split", "concat"):
            shares = {k: _share(r) for k, r in ours.items() if k[0] == op and r["group"] == group}
            if shares:
                lines.append(f"- {op}, {group} shapes ({len(shares)} cells): {_spread(shares)}")
    gathers = {k: _share(r) for k, r in ours.items() if k[0] == "gather"}
    if gathers:
        lines.append(f"- gathers ({len(gathers)} cells): {_spread(gathers)}")
    fused = [k for k in ours if k[0] != "gather" and k in torch_best]
    if fused:
        torch_shares = [_share(torch_best[k]) for k in fused]
        ratios = {k: ours[k]["GBps"] / torch_best[k]["GBps"] for k in fused}
        low = min(ratios, key=ratios.__getitem__)
        lines.append(
            f"- the best PyTorch method on the splits and concats: {100 * min(torch_shares):.1f}–"
            f"{100 * max(torch_shares):.1f}% of the ceiling; ours {ratios[low]:.2f}× it at the least "
            f"({_cell_name(low)}), {max(ratios.values()):.2f}× at the most"
        )
    behind = {k: ours[k]["GBps"] / peers[k]["GBps"] for k in ours if k in peers}
    slower = sorted((k for k, v in behind.items() if v < 1.0), key=behind.__getitem__)
    if behind:
        worst = (
            "; ".join(f"{_cell_name(k)} {behind[k]:.3f}× ({peers[k]['method']})" for k in slower[:8])
            if slower
            else "none"
        )
        lines.append(f"- behind the best peer on {len(slower)} of {len(behind)} cells: {worst}")
    return "\n".join(lines)


def _of_flat_copy(rows: list[dict[str, Any]]) -> dict[Cell, dict[str, float]]:
    """Per sweep cell: ours, the best PyTorch method and tuned Triton, each over the same
    run's flat copy of the same bytes (``flat_copy``)."""
    flat = {
        (r["op"], r["pretty_shape"], r["dtype"]): r["GBps"]
        for r in rows
        if r["method"] == "flat_copy" and r["GBps"] and r["correct"]
    }
    out: dict[Cell, dict[str, float]] = {}
    for key, r in _best(rows, "ours").items():
        if key in flat:
            out[key] = {"ours": r["GBps"] / flat[key]}
    for label, prefix in (("torch", "torch"), ("triton", "triton: 2-D tiles")):
        for key, r in _best(rows, "peer", prefix).items():
            if key in out:
                out[key][label] = r["GBps"] / flat[key]
    return out


def sweep_summary(results: list[dict[str, Any]]) -> str:
    """The random sweep against its targets: ours over the flat copy, per op and per
    dtype size, and the cells more than 3% behind PyTorch's best or tuned Triton."""
    rows = [r for r in results if r.get("sweep")]
    if not rows:
        return ""
    shares = _of_flat_copy(rows)
    seeds = sorted({r["seed"] for r in rows})
    lines = [
        f"Random sweep (seed {', '.join(map(str, seeds))}), ours over the flat copy of the same bytes:",
        "",
    ]
    for op in ("split", "concat"):
        mine = {k: v["ours"] for k, v in shares.items() if k[0] == op}
        if mine:
            lines.append(
                f"- {op} ({len(mine)} shapes): {_spread(mine).replace('of the ceiling', 'of the flat copy')}"
            )
            for dtype in dict.fromkeys(k[2] for k in sorted(mine, key=lambda k: DTYPE_SIZES[k[2]])):
                some = [v for k, v in mine.items() if k[2] == dtype]
                lines.append(
                    f"  - {dtype}: median {100 * statistics.median(some):.1f}%, lowest {100 * min(some):.1f}%"
                )
    behind = sorted(
        (k for k, v in shares.items() if v["ours"] < 0.97 * max(v.get("torch", 0.0), v.get("triton", 0.0))),
        key=lambda k: shares[k]["ours"] / max(shares[k].get("torch", 0.0), shares[k].get("triton", 0.0)),
    )
    lines.append(
        f"- more than 3% behind PyTorch's best or tuned Triton: {len(behind)} of {len(shares)} cells"
        + (": " + "; ".join(_cell_name(k) for k in behind[:8]) if behind else "")
    )
    return "\n".join(lines)


def sweep_table(results: list[dict[str, Any]]) -> str:
    """Markdown: each sweep cell, ours, PyTorch's best and tuned Triton over the flat copy."""
    shares = _of_flat_copy([r for r in results if r.get("sweep")])
    lines = ["| op | shape | dtype | ours | best torch | tuned triton |", "|---|---|---|---|---|---|"]
    for (op, shape, dtype), v in shares.items():
        cells = [f"{100 * v[k]:.1f}%" if k in v else "–" for k in ("ours", "torch", "triton")]
        lines.append(f"| {op} | {shape} | {dtype} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def generated_section(doc: dict[str, Any]) -> str:
    env = doc
    fixed = [r for r in doc["results"] if not r.get("sweep")]
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
        f"{table(fixed)}\n\n"
        + (f"Failures:\n\n{fail_lines}\n" if failures else "")
        + "Gathers against the ceiling, on honest traffic (32-byte sectors, the floor of what "
        "DRAM moves) and counted in whole 64-byte units (`bench_cases.DRAM_GRANULE`: what DRAM "
        "moves if the L2 fetches 64 bytes for every sector, an upper estimate; above 100% "
        "it fetched less):\n\n"
        f"{gather_table(fixed)}\n\n"
        "Against the targets, per group of shapes (ours: the best of our methods on each cell):\n\n"
        f"{targets_summary(fixed)}\n\n"
        + (
            f"{sweep_summary(doc['results'])}\n\n{sweep_table(doc['results'])}\n\n"
            if any(r.get("sweep") for r in doc["results"])
            else ""
        )
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
  whatever ran before it, starts alike. Methods interleave run by run, their order
  rotated by one each round so none keeps a place; the median of the runs after warm-up
  is reported. The small shapes (about 4 µs a run, with a spread of a few tenths) get
  more runs (`small_reps` in `results.json`).
- Honest traffic: bytes written plus every 32-byte sector of the source holding
  needed bytes (`bench_cases.sector_bytes`): a slice narrower than a sector still
  costs the sector. Gathers are also counted in whole 64-byte units
  (`dram_traffic_bytes`), which sparse reads pay and dense ones need not: an upper
  estimate of what DRAM moved.
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
    results = [r for r in doc["results"] if not r.get("sweep")]  # the sweep has its table
    if not results:
        return "no plot: every shape of this run is a sweep shape (the README's sweep table has them)"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        return f"no plot: matplotlib is not importable ({err})"
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
