"""Unsigned division by a constant without a divide instruction.

PTX ``div.u32`` by an immediate still becomes a generic reciprocal-and-correct
sequence in SASS (about 16 instructions on sm_90, seen with ptxas 13.5), even for
128. When the divisor is known while the PTX is written, the emitter can do what
compilers do for C: a shift for a power of two, else a multiply-high by a rounded-up
reciprocal and a shift.

For ``d`` not a power of two, with ``c = ceil(log2 d)`` and ``k = 31 + c``, take
``m = ceil(2**k / d)``, which fits 32 bits. Then ``floor(x * m / 2**k) == x // d``
for every ``x < 2**k / (m*d - 2**k)``: the error ``x * (m*d - 2**k) / (d * 2**k)``
stays below the ``1/d`` gap to the next integer. :func:`magic_divisor` checks that
bound against the largest ``x`` the caller will divide.

A divisor known only when the kernel is launched (an array's extent) comes as a pair of
arguments from :func:`runtime_divisor`, one form for every ``d`` (powers of two and 1
included, so the kernel has no branch): with ``c = ceil(log2 d)``, the 33-bit multiplier
``2**32 + m`` where ``m = floor(2**32 * (2**c - d) / d) + 1``, and
``x // d == (mulhi(x, m) + x) >> c`` for every ``x < 2**32`` (Granlund and Montgomery,
"Division by invariant integers using multiplication", 1994, section 4). The sum needs
33 bits in general; a kernel that keeps ``x < 2**31`` adds in 32.
"""

from __future__ import annotations

__all__ = ["magic_divisor", "runtime_divisor"]


def magic_divisor(d: int, x_max: int) -> tuple[int, int]:
    """``(m, s)`` with ``x // d == ((x * m) >> 32) >> s`` for all ``0 <= x <= x_max``.

    For a power of two ``m`` is 0: use ``x >> s`` instead.
    """
    if d < 1 or x_max >= 1 << 32:
        raise ValueError(f"magic_divisor needs d >= 1 and x_max < 2**32, got d={d}, x_max={x_max}")
    if d & (d - 1) == 0:
        return 0, d.bit_length() - 1
    c = (d - 1).bit_length()  # ceil(log2 d)
    k = 31 + c
    m = -(-(1 << k) // d)
    excess = m * d - (1 << k)  # 0 < excess < d
    if m >= 1 << 32 or x_max * excess >= 1 << k:
        raise ValueError(f"no 32-bit magic number divides every x <= {x_max} by {d}")
    return m, k - 32


def runtime_divisor(d: int) -> tuple[int, int]:
    """``(m, c)`` with ``x // d == ((x * m >> 32) + x) >> c`` for all ``0 <= x < 2**32``
    (see above): what a kernel dividing by ``d`` at run time is given."""
    if isinstance(d, bool) or not isinstance(d, int) or not 1 <= d < 1 << 32:
        raise ValueError(f"runtime_divisor needs an int d with 1 <= d < 2**32, got {d!r}")
    c = (d - 1).bit_length()  # ceil(log2 d): 0 for d = 1
    m = ((1 << 32) * ((1 << c) - d)) // d + 1
    return m, c
