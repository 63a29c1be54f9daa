"""Does torch.split_with_sizes_copy(out=) write channels_last outputs right? (bench_ops.py's
torch peer for a split into out= arrays.) Prints, per layout of the outputs, whether every
element matches ``wide.split(...)`` and the GPU µs of one call (the first: not a
benchmark), beside ``copy_`` per piece.

    python lab/torch_split_copy.py
"""

from __future__ import annotations

import torch


def main() -> None:
    print(torch.__version__, torch.cuda.get_device_name())
    for batch, c, hw in ((1, 192, 80), (16, 192, 80), (2, 7, 5)):
        sizes = [c // 3, c // 3, c - 2 * (c // 3)]
        wide = torch.randn(batch, c, hw, hw, device="cuda").contiguous(memory_format=torch.channels_last)
        want = wide.split(sizes, 1)
        for fmt in (torch.channels_last, torch.contiguous_format):
            outs = [torch.full_like(w, 7.0).contiguous(memory_format=fmt) for w in want]
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.split_with_sizes_copy(wide, sizes, dim=1, out=outs)
            end.record()
            end.synchronize()
            swsc_us = start.elapsed_time(end) * 1e3
            right = all(torch.equal(o, w) for o, w in zip(outs, want))
            wrong = sum(int((o != w).sum()) for o, w in zip(outs, want))
            outs2 = [torch.full_like(w, 7.0).contiguous(memory_format=fmt) for w in want]
            start.record()
            for o, w in zip(outs2, want):
                o.copy_(w)
            end.record()
            end.synchronize()
            copy_us = start.elapsed_time(end) * 1e3
            copy_ok = all(torch.equal(o, w) for o, w in zip(outs2, want))
            print(
                f"{batch}x{c}x{hw}x{hw} outs {fmt!s:26} split_with_sizes_copy right={right} "
                f"({wrong} of {wide.numel()} elements wrong, {swsc_us:.1f} us); "
                f"copy_ per piece right={copy_ok} ({copy_us:.1f} us)"
            )


if __name__ == "__main__":
    main()
