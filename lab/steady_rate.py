"""Each method's time on a record's sweep as a fixed cost plus a steady rate.

A share of the flat copy (the sweep's figure) mixes two things: how fast a kernel streams
once it runs, and what it costs to start and finish. Fitting ``us = fixed + bytes / rate``
by least squares over a sweep's shapes (64-200 MB a side, one run) separates them, and
gives the share a method would reach on arrays of any size: ``share(bytes) = copy's time /
ours``, tending to ``rate / copy's rate`` on large arrays. Reads ``docs/perf/results.json``
(its ``sweep`` entries, ``traffic_bytes`` and ``us``) or a ``tile_variants.py`` record
(``cases``, each variant's ``us`` beside ``flat_us``).

    python lab/steady_rate.py docs/perf/results.json
    python lab/steady_rate.py lab/data/tile-identity-h200.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ITEM = {"u8": 1, "bf16": 2, "f32": 4, "f64": 8}


def fit(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(fixed µs, rate in bytes a µs) of ``us = fixed + bytes / rate``, least squares over
    ``(bytes, us)`` points (at least two distinct sizes)."""
    if len({b for b, _ in points}) < 2:
        raise ValueError(f"a fit needs two distinct sizes, got {len(points)} points")
    mb = statistics.fmean(b for b, _ in points)
    mu = statistics.fmean(u for _, u in points)
    slope = sum((b - mb) * (u - mu) for b, u in points) / sum((b - mb) ** 2 for b, _ in points)
    return mu - slope * mb, 1 / slope


def results_points(record: dict[str, Any]) -> dict[tuple[str, str, str], list[tuple[float, float]]]:
    """(op, method, dtype) -> [(traffic bytes, µs)] of a results.json's sweep entries that ran."""
    out: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for r in record["results"]:
        if r.get("sweep") and r.get("status") == "ok" and r.get("us"):
            out.setdefault((r["op"], r["method"], r["dtype"]), []).append((r["traffic_bytes"], r["us"]))
    return out


def variants_points(record: dict[str, Any]) -> dict[tuple[str, str, str], list[tuple[float, float]]]:
    """The same from a tile_variants.py record: each variant that ran, and ``flat_copy``
    (traffic: both sides of the concat, ``2 * rows * row bytes``)."""
    out: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for c in record["cases"]:
        traffic = 2 * c["rows"] * sum(c["sizes"]) * ITEM[c["dtype"]]
        times = {"flat_copy": c["flat_us"]}
        times |= {k: v["us"] for k, v in c.items() if isinstance(v, dict) and "us" in v}
        for method, us in times.items():
            out.setdefault((c["op"], method, c["dtype"]), []).append((traffic, us))
    return out


def pooled(points: dict[tuple[str, str, str], list], dtype: str | None) -> dict[tuple[str, str], list]:
    """(op, method) -> points, of one dtype or (None) of all."""
    out: dict[tuple[str, str], list] = {}
    for (op, method, dt), pts in points.items():
        if dtype in (None, dt):
            out.setdefault((op, method), []).extend(pts)
    return out


def table(points: dict[tuple[str, str, str], list], sizes: Iterable[float]) -> list[str]:
    sizes = list(sizes)
    lines = [f"{'op':6} {'method':30} {'dtype':5} {'n':>3} {'fixed us':>8} {'TB/s':>6}  share at "
             + " ".join(f"{s / 1e6:>5.0f} MB" for s in sizes) + "  asymptote"]  # fmt: skip
    for dtype in (None, *ITEM):
        by_method = pooled(points, dtype)
        for (op, method), pts in sorted(by_method.items()):
            copy = by_method.get((op, "flat_copy"))
            if len(pts) < 3 or not copy:
                continue
            (fixed, rate), (c_fixed, c_rate) = fit(pts), fit(copy)
            shares = [(c_fixed + s / c_rate) / (fixed + s / rate) for s in sizes]
            lines.append(
                f"{op:6} {method[:30]:30} {dtype or 'all':5} {len(pts):3} {fixed:8.2f} {rate / 1e6:6.3f}  "
                + " ".join(f"{x:8.3f}" for x in shares) + f"  {rate / c_rate:9.3f}"
            )  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("record", type=Path, help="a results.json or a tile_variants.py record")
    p.add_argument("--sizes", default="128e6,400e6,1600e6", help="traffic bytes to give the share at")
    args = p.parse_args(argv)
    record = json.loads(args.record.read_text())
    points = results_points(record) if "results" in record else variants_points(record)
    print("\n".join(table(points, (float(s) for s in args.sizes.split(",")))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
