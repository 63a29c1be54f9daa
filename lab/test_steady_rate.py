"""steady_rate.py: the fit recovers a known fixed cost and rate, and the share it predicts
follows from them."""

from __future__ import annotations

import pytest
import steady_rate


def test_fit_recovers_fixed_cost_and_rate():
    points = [(b, 4.5 + b / 4.3e6) for b in (130e6, 200e6, 333e6, 400e6)]
    fixed, rate = steady_rate.fit(points)
    assert fixed == pytest.approx(4.5) and rate == pytest.approx(4.3e6)


def test_fit_needs_two_sizes():
    with pytest.raises(ValueError, match="two distinct sizes"):
        steady_rate.fit([(1e6, 2.0), (1e6, 3.0)])


def test_share_tends_to_the_ratio_of_rates():
    record = {"cases": []}
    for rows in (100_000, 150_000, 220_000, 300_000):
        traffic = 2 * rows * 300
        record["cases"].append({
            "op": "concat", "dtype": "u8", "rows": rows, "sizes": [100, 200],
            "flat_us": 5.0 + traffic / 4.4e6,
            "planned": {"us": 8.0 + traffic / 4.1e6},
        })  # fmt: skip
    lines = steady_rate.table(steady_rate.variants_points(record), [1e15])
    planned = next(line for line in lines if " planned " in line and " u8 " in line)
    share, asymptote = map(float, planned.split()[-2:])
    assert share == pytest.approx(4.1 / 4.4, abs=1e-3) and asymptote == pytest.approx(4.1 / 4.4, abs=1e-3)
