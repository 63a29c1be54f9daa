"""Host ns of each torch tensor read the ops' Python path makes, and of its readers.

    python lab/torch_reads.py

On one bf16 CUDA tensor: each attribute or method the Python path reads (``dtype``,
``is_cuda``, ``is_contiguous()``, ``shape``, ``data_ptr()``, ``requires_grad``,
``get_device()``, ``nbytes``, ``stride()``, ``device``), an ``OpArray`` of 12 fields,
``_torch_array`` and ``recognise`` whole, and ``stream_handle`` of a torch stream and
of None. Each: ``profile_python_path.per_call`` (the median of 7 runs, here of 20,000
calls, after 200 warm-up), through a lambda (the "empty lambda" row is that overhead).
A study: it writes no record.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from profile_python_path import per_call

from runtime import op_arrays
from runtime.op_arrays import OpArray, _torch_array, recognise
from runtime.stream import stream_handle


def main() -> int:
    t = torch.empty(6400, 256, device="cuda", dtype=torch.bfloat16)
    table = op_arrays._torch_dtypes
    stream = torch.cuda.current_stream()
    recognise("op", "dy", t, 0)  # the dtype table learns bf16
    dt = table.get(t.dtype)
    rows: dict[str, Callable[[], object]] = {
        "empty lambda": lambda: None,
        "t.dtype": lambda: t.dtype,
        "table.get(t.dtype)": lambda: table.get(t.dtype),
        "t.is_cuda": lambda: t.is_cuda,
        "t.is_contiguous()": lambda: t.is_contiguous(),
        "t.shape": lambda: t.shape,
        "t.data_ptr()": lambda: t.data_ptr(),
        "t.requires_grad": lambda: t.requires_grad,
        "t.get_device()": lambda: t.get_device(),
        "t.nbytes": lambda: t.nbytes,
        "t.stride()": lambda: t.stride(),
        "t.device": lambda: t.device,
        "OpArray(12 fields)": lambda: OpArray(t, (1, 2), dt, 5, False, None, 0, 10, None, None, None, "dy"),
        "_torch_array (an output)": lambda: _torch_array(t, "dy", True),
        "recognise (an output)": lambda: recognise("op", "dy", t, 0),
        "stream_handle(torch stream)": lambda: stream_handle(stream),
        "stream_handle(None)": lambda: stream_handle(None),
    }
    for name, call in rows.items():
        print(f"{name:30s} {round(per_call(call, n=20000) * 1000):6d} ns", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
