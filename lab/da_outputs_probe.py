"""Study: what ``outputs_of`` adds to ``Device.empty`` for one DeviceArray result (issue 23).

    python lab/da_outputs_probe.py [-o lab/data/da-outputs-probe.json]   # on the GPU machine

In ``lab/data/alloc-state-841ea358.json`` (H100) ``outputs_of`` made a concat's one
DeviceArray result in 13.7-14.7 us where ``Device.empty`` took 11.8-13.2, 1.6-1.9 us
more; on this machine's CPU stand-in (``lab/alloc_python.py``) the same difference is
about 1 us of Python. This times, on the real driver with torch and CuPy imported, each
step between the two: the kind checks ``outputs_of`` makes first (``isinstance`` against
CuPy's and torch's array types), ``Device.empty_group`` of one shape on stream 0, and
``outputs_of`` itself, each result dropped in the call. Per call: the median of 15
batches of 2,000 after one of warm-up. A study: it writes no record.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "lab")]

from pool_probe import per_call_us  # noqa: E402  (lab/: the same batches of calls)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-o", "--output", type=Path)
    args = p.parse_args(argv)
    import cupy
    import torch

    import runtime
    from ptxgen.dtypes import resolve_dtype
    from runtime import outputs

    dev = runtime.Device(0)
    bf16, shape = resolve_dtype("bf16"), (512, 128)
    like, results = dev.empty(shape, "bf16"), [(shape, (128, 1))]
    tensor_type, cupy_type = torch.Tensor, cupy.ndarray
    calls = {
        "isinstance(like, torch.Tensor)": lambda: isinstance(like, tensor_type),
        "isinstance(like, cupy.ndarray)": lambda: isinstance(like, cupy_type),
        "Device.empty + drop": lambda: dev.empty(shape, "bf16"),
        "Device.empty_group, 1 shape, stream 0 + drop": lambda: dev.empty_group([shape], bf16, stream=0),
        "outputs_of, 1 result, stream 0 + drop": lambda: outputs.outputs_of(
            like, dev, 0, results, bf16, None
        ),
    }
    rows = {}
    for _pass in range(2):
        for name, call in calls.items():
            rows.setdefault(name, []).append(per_call_us(call, 2000, 15))
    for name, us in rows.items():
        print(f"{name:48s}", "  ".join(f"{u:7.3f}" for u in us), "us")
    if args.output is not None:
        gpu = torch.cuda.get_device_name(0)
        args.output.write_text(json.dumps({"gpu": gpu, "us_per_call": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
