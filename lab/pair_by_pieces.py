#!/usr/bin/env python3
"""Two kernels' concat times, cell by cell, by granule and piece count (CPU; reads JSON).

    python lab/pair_by_pieces.py --pair BASE.json NEW.json [--pair ...]   # ab_patch.sh's files
    python lab/pair_by_pieces.py --variants planned,pl_free STUDY.json ...  # one run, two variants

Reads ``tile_variants.py``'s output: each case's op, dtype, sizes and, per variant, its
time. ``--pair`` matches the cases of two runs (``ab_patch.sh``'s ``main`` and
``patched``: the variant ``planned`` in each); ``--variants A,B`` compares two variants of
the same run. For each granule (the narrowest access the row gather's chunks take:
``fastcat.access_width`` of each piece, torch's allocations being 16-byte aligned) and
piece count it prints the cells, NEW's (or B's) speed over BASE's (A's) as a median with
its range, and how many cells NEW is ahead on. Made to read where the row gather's table
pays (``TABLE_FREE_CHUNKS`` in ``ptxgen/kernels/fastcat_tile.py``): BASE with the table,
NEW without it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ptxgen.dtypes import resolve_dtype  # noqa: E402
from ptxgen.kernels.fastcat import access_width  # noqa: E402


@dataclass(frozen=True)
class Cell:
    """One concat (or split) timed two ways: ``speed`` is BASE's time over NEW's."""

    op: str
    dtype: str
    rows: int
    sizes: tuple[int, ...]
    granule: int
    speed: float


def granule_of(dtype: str, sizes: tuple[int, ...]) -> int:
    """The narrowest access among the pieces, as the planner works it out for arrays
    whose every pointer is 16-byte aligned."""
    item = resolve_dtype(dtype).itemsize
    widths = [s * item for s in sizes]
    pitch, offsets = sum(widths), [sum(widths[:k]) for k in range(len(widths))]
    return min(access_width(0, pitch, off, w, 0) for off, w in zip(offsets, widths))


def _key(case: dict[str, Any]) -> tuple[str, str, int, tuple[int, ...]]:
    return case["op"], case["dtype"], case["rows"], tuple(case["sizes"])


def _cell(case: dict[str, Any], base_us: float, new_us: float) -> Cell:
    op, dtype, rows, sizes = _key(case)
    return Cell(op, dtype, rows, sizes, granule_of(dtype, sizes), base_us / new_us)


def _timed(case: dict[str, Any], variant: str) -> float | None:
    """The variant's time, or None where it did not run or its result was wrong."""
    got = case.get(variant)
    if not isinstance(got, dict) or "us" not in got or got.get("correct") is False:
        return None
    return float(got["us"])


def paired_runs(base: dict[str, Any], new: dict[str, Any], variant: str = "planned") -> list[Cell]:
    """Cells of two runs matched by case (ab_patch.sh's main and patched files)."""
    theirs = {_key(c): c for c in new["cases"]}
    cells = []
    for case in base["cases"]:
        other = theirs.get(_key(case))
        a, b = _timed(case, variant), other and _timed(other, variant)
        if a and b:
            cells.append(_cell(case, a, b))
    return cells


def paired_variants(run: dict[str, Any], base: str, new: str) -> list[Cell]:
    """Cells of one run where both variants were timed."""
    cells = []
    for case in run["cases"]:
        a, b = _timed(case, base), _timed(case, new)
        if a and b:
            cells.append(_cell(case, a, b))
    return cells


def table(cells: list[Cell]) -> list[dict[str, Any]]:
    """One row a (granule, piece count): cells, median speed, its range, cells ahead."""
    groups: dict[tuple[int, int], list[float]] = {}
    for c in cells:
        groups.setdefault((c.granule, len(c.sizes)), []).append(c.speed)
    rows = []
    for (g, n), s in sorted(groups.items()):
        rows.append({"granule": g, "pieces": n, "cells": len(s), "median": statistics.median(s),
                     "lowest": min(s), "highest": max(s), "ahead": sum(x > 1 for x in s)})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pair", nargs=2, action="append", type=Path, metavar=("BASE", "NEW"), default=[])
    p.add_argument("--variants", help="BASE,NEW: two variants of each run given as FILES")
    p.add_argument("files", nargs="*", type=Path)
    args = p.parse_args(argv)
    if bool(args.variants) != bool(args.files) or not (args.pair or args.files):
        p.error("give --pair BASE NEW, or --variants BASE,NEW with the runs' files")
    cells: list[Cell] = []
    for base, new in args.pair:
        cells += paired_runs(json.loads(base.read_text()), json.loads(new.read_text()))
    if args.variants:
        a, b = args.variants.split(",")
        for path in args.files:
            cells += paired_variants(json.loads(path.read_text()), a, b)
    print(f"{len(cells)} cells; speed = BASE's time over NEW's (above 1: NEW faster)")
    print("granule pieces cells median  lowest highest ahead")
    line = "{granule:7} {pieces:6} {cells:5} {median:.3f}  {lowest:.3f}  {highest:.3f} {ahead:5}"
    for row in table(cells):
        print(line.format(**row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
