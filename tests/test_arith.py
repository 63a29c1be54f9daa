"""Division by a constant: the emitted shift or multiply-high equals x // d for
every x a launch can produce."""

from __future__ import annotations

import random

import pytest

from ptxgen.arith import magic_divisor

X_MAX = (2**31 - 1) + 1023  # chunk_c <= 2**31 - 1, plus BLOCK_SIZE - 1


def divide(x: int, d: int) -> int:
    m, s = magic_divisor(d, X_MAX)
    return x >> s if m == 0 else ((x * m) >> 32) >> s


@pytest.mark.parametrize("d", range(32, 1025, 32))
def test_every_block_size_divides_exactly(d):
    rng = random.Random(d)
    edges = {0, 1, d - 1, d, d + 1, X_MAX, X_MAX - 1, 2**31 - 1, 2**31, 2**31 + 1}
    edges |= {k * d + r for k in (1, 2, 2**31 // d - 1, 2**31 // d, X_MAX // d) for r in (-1, 0, 1)}
    samples = edges | {rng.randrange(X_MAX + 1) for _ in range(20_000)}
    for x in sorted(v for v in samples if 0 <= v <= X_MAX):
        assert divide(x, d) == x // d, (x, d)


def test_magic_numbers_fit_32_bits_and_bounds_are_checked():
    for d in range(2, 4097):
        m, s = magic_divisor(d, X_MAX)
        assert 0 <= m < 2**32 and 0 <= s < 32
    assert magic_divisor(128, X_MAX) == (0, 7)
    with pytest.raises(ValueError, match="no 32-bit magic number"):
        magic_divisor(7, 2**32 - 1)  # excess 5: exact only below 2**34 / 5
    with pytest.raises(ValueError):
        magic_divisor(0, 10)
