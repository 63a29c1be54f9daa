"""Study: the Python share of an op's DeviceArray results, on the CPU (issue 23).

    python lab/alloc_python.py [--profile CASE]   # from the repo root

``DeviceArray``, ``memory.empty_group`` and ``runtime.outputs.outputs_of`` (what the ops
and the C lane make DeviceArray results with), each made and dropped through
tests/test_pool_cpu.py's stand-in driver, whose calls cost next to nothing: what is
left is the runtime's own Python. Per call, the median of 15 batches of 2,000 after a
batch of warm-up. ``--profile CASE`` prints cProfile's top functions for one case. A
study: it writes no record.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path.cwd()
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import test_pool_cpu as stand_in  # noqa: E402

from ptxgen.dtypes import resolve_dtype  # noqa: E402
from runtime import _driver, memory, outputs, pool, stream  # noqa: E402

BF16 = resolve_dtype("bf16")


def per_call_us(call: Callable[[], Any], fake: Any, loop: int = 2000, reps: int = 15) -> float:
    for _ in range(loop):
        call()
    batches = []
    for _ in range(reps):
        fake.calls.clear()  # the stand-in records every call
        start = time.perf_counter()
        for _ in range(loop):
            call()
        batches.append((time.perf_counter() - start) / loop * 1e6)
    return statistics.median(batches)


def cases() -> tuple[Any, dict[str, Callable[[], Any]]]:
    fake = stand_in.FakeDriver()
    for module in (pool, memory, stream, _driver):
        module.driver = lambda: fake
    dev = stand_in.FakeDevice()
    dev.empty_group = lambda shapes, dtype, stream=None: memory.empty_group(dev, shapes, dtype, stream=stream)
    like = memory.DeviceArray(dev, (6400, 192), "bf16")
    one, three = [((6400, 192), (192, 1))], [((6400, 64), (64, 1))] * 3
    return fake, {
        "DeviceArray + drop": lambda: memory.DeviceArray(dev, (6400, 192), "bf16"),
        "empty_group, 1 shape + drop": lambda: memory.empty_group(dev, [(6400, 192)], BF16),
        "outputs_of, 1 result + drop": lambda: outputs.outputs_of(like, dev, 0, one, BF16, None),
        "3 DeviceArrays + drop": lambda: [memory.DeviceArray(dev, (6400, 64), "bf16") for _ in range(3)],
        "empty_group, 3 shapes + drop": lambda: memory.empty_group(dev, [(6400, 64)] * 3, BF16),
        "outputs_of, 3 results + drop": lambda: outputs.outputs_of(like, dev, 0, three, BF16, None),
    }


def main() -> None:
    fake, calls = cases()
    if "--profile" in sys.argv:
        import cProfile
        import pstats

        call = calls[sys.argv[-1]]
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(20000):
            call()
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(18)
        return
    for name, call in calls.items():
        print(f"{name:32s} {per_call_us(call, fake):6.2f} us")


if __name__ == "__main__":
    main()
