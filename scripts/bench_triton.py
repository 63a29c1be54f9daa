"""The Triton peers of the benchmark (imported only where Triton is installed).

``seed_gather`` and ``seed_scatter`` are the seed's kernel and its forward sibling
with the seed's launch contract: a grid of ``n_spatial * cdiv(chunk_c, BLOCK)``
programs of ``BLOCK`` elements, one element per thread (``num_warps = BLOCK / 32``).
``tiled`` copies a ``BR × BC`` tile of rows × channels per program, any pitches and
offsets; the benchmark tunes its tile shape per piece.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def seed_gather(dy, dx, chunk_c, c_total, chunk_offset, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    tiles = tl.cdiv(chunk_c, BLOCK)
    n = (pid // tiles).to(tl.int64)
    ci = (pid % tiles) * BLOCK + tl.arange(0, BLOCK)
    mask = ci < chunk_c
    v = tl.load(dy + n * c_total + chunk_offset + ci, mask=mask)
    tl.store(dx + n * chunk_c + ci, v, mask=mask)


@triton.jit
def seed_scatter(x, y, chunk_c, c_total, chunk_offset, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    tiles = tl.cdiv(chunk_c, BLOCK)
    n = (pid // tiles).to(tl.int64)
    ci = (pid % tiles) * BLOCK + tl.arange(0, BLOCK)
    mask = ci < chunk_c
    v = tl.load(x + n * chunk_c + ci, mask=mask)
    tl.store(y + n * c_total + chunk_offset + ci, v, mask=mask)


@triton.jit(do_not_specialize=["rows"])
def tiled(src, dst, rows, width, src_pitch, src_off, dst_pitch, dst_off, BR: tl.constexpr, BC: tl.constexpr):
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    c = tl.program_id(1) * BC + tl.arange(0, BC)
    mask = (r < rows)[:, None] & (c < width)[None, :]
    r64 = r.to(tl.int64)[:, None]
    v = tl.load(src + r64 * src_pitch + src_off + c[None, :], mask=mask)
    tl.store(dst + r64 * dst_pitch + dst_off + c[None, :], v, mask=mask)
