"""pair_by_pieces.py on the committed A/B of the row gather's table (CPU): it must give
the figures lab/README.md quotes from those files, by granule and piece count."""

from __future__ import annotations

import json
from pathlib import Path

import pair_by_pieces as pbp
import pytest

DATA = Path(__file__).resolve().parent / "data" / "ab-no-table-h100-20261207"
# (with the table, without it): ab_patch.sh's main and patched, then the landed tree
# against the table put back
PAIRS = [("ab-main-20261301", "ab-patched-20261301"), ("ab-table-20261305", "ab-landed-20261305"),
         ("ab-table-20261306", "ab-landed-20261306")]  # fmt: skip


def _load(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def rows():
    cells = [c for base, new in PAIRS for c in pbp.paired_runs(_load(base), _load(new))]
    assert len(cells) == 193  # every concat where a tile ran, in both runs, correct
    return {(r["granule"], r["pieces"]): r for r in pbp.table(cells)}


def test_six_narrow_pieces_are_where_the_table_wins(rows):
    """lab/README.md: at six pieces 0.988x for 1-byte concats (17 cells, lowest 0.972),
    0.994x for 2-byte (4 cells); 4- and 8-byte 1.008x and 1.006x."""
    six = {g: rows[g, 6] for g in (1, 2, 4, 8)}
    assert (six[1]["cells"], round(six[1]["median"], 3), round(six[1]["lowest"], 3)) == (17, 0.988, 0.972)
    assert six[1]["ahead"] == 0
    assert (six[2]["cells"], round(six[2]["median"], 3)) == (4, 0.994)
    assert round(six[4]["median"], 3) == 1.008 and round(six[8]["median"], 3) == 1.006


def test_two_to_five_pieces_gain_at_every_narrow_granule(rows):
    for (g, n), r in rows.items():
        if g < 16 and n <= 5:
            assert 1.003 <= r["median"] <= 1.02, (g, n, r)


def test_variants_of_one_run_pair_by_case():
    run = {"cases": [
        {"op": "concat", "dtype": "u8", "rows": 7, "sizes": [3, 5], "a": {"us": 2.0}, "b": {"us": 1.0}},
        {"op": "concat", "dtype": "f32", "rows": 7, "sizes": [2, 6], "a": {"us": 3.0}, "b": {"us": 4.0}},
        {"op": "concat", "dtype": "f32", "rows": 9, "sizes": [2, 6], "a": {"us": 3.0},
         "b": {"us": 1.0, "correct": False}},  # a wrong result is no cell
        {"op": "concat", "dtype": "f64", "rows": 7, "sizes": [1, 1], "a": {"us": 3.0}},  # b did not run
    ]}  # fmt: skip
    cells = pbp.paired_variants(run, "a", "b")
    assert [(c.granule, c.speed) for c in cells] == [(1, 2.0), (8, 0.75)]


@pytest.mark.parametrize(
    ("dtype", "sizes", "granule"),
    [("u8", (3, 5), 1), ("u8", (16, 32), 16), ("bf16", (3, 4), 2), ("bf16", (4, 8), 8), ("f32", (297, 58), 4),
     ("f32", (2, 6), 8), ("f64", (1, 1), 8), ("f64", (2, 4), 16)],
)  # fmt: skip
def test_granule_is_the_narrowest_piece_access(dtype, sizes, granule):
    assert pbp.granule_of(dtype, sizes) == granule
