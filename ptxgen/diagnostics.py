"""Point at the PTX lines an assembler or JIT log complains about.

ptxas and the driver's JIT both report ``<input>, line 23; error   : ...``; showing
line 23 of the source beside the message saves a trip to an editor.
"""

from __future__ import annotations

import re

__all__ = ["log_line_numbers", "quote_lines"]

_LINE_REF = re.compile(r"line (\d+);")


def log_line_numbers(log: str) -> list[int]:
    """The distinct source line numbers a ptxas/JIT log names, in order."""
    seen: list[int] = []
    for match in _LINE_REF.finditer(log):
        number = int(match.group(1))
        if number not in seen:
            seen.append(number)
    return seen


def quote_lines(source: str, numbers: list[int], context: int = 1) -> str:
    """Lines ``numbers`` of ``source`` (1-based) with ``context`` lines around, marked ``>``."""
    lines = source.splitlines()
    wanted = sorted(
        {n + d for n in numbers for d in range(-context, context + 1) if 1 <= n + d <= len(lines)}
    )
    out, previous = [], None
    for n in wanted:
        if previous is not None and n != previous + 1:
            out.append("     ...")
        marker = ">" if n in numbers else " "
        out.append(f"{marker}{n:5d} | {lines[n - 1]}")
        previous = n
    return "\n".join(out)
