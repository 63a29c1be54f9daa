"""lab/'s tests (``python -m pytest lab``; the product suite, ``pytest`` from the root,
collects tests/ only): the prototype, the flat copy and the interpreter by bare name."""

from __future__ import annotations

import sys
from pathlib import Path

LAB = Path(__file__).resolve().parent
for path in (LAB.parent, LAB.parent / "tests", LAB):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
