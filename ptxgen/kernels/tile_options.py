"""The tile kernel's options (:class:`~ptxgen.kernels.fastcat_tile.FastcatTile`): the
values each accepts, one flag a chunk for ``wide_chunks``, and the kernel's static
shared memory, worked out in one place for the limit check and for the arrays the kernel
declares.
"""

from __future__ import annotations

from ..targets import target_capability
from .tile_chunks import _TABLE_ENTRY
from .tile_row_gather import ROW_GATHER_PAD

__all__ = ["wide_chunks_option"]

_GRANULES = (16, 8, 4, 2, 1)
_BLOCKS = (64, 128, 256, 512, 1024)
_UNROLLS = (1, 2, 4, 8)
_SHARED_LIMIT = 48 * 1024  # static shared memory a kernel may declare
# Word windows (a byte-granule gather, see TileGatherScatter._word_gather) read the five
# aligned words from the one holding a window's first byte: up to 3 bytes past the last
# byte of a vector the tile holds, never before its first. The tile's array has 16 more.
_WINDOW_PAD = 16


def _pick(value: object, what: str, allowed: tuple[int, ...]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
        raise ValueError(f"{what} = {value!r} is not accepted; accepted: {', '.join(map(str, allowed))}")
    return value


def _word_windows(direction: str, granule: int, wide: tuple[bool, ...], loader: str) -> bool:
    """Whether the gather reads some chunk's vectors as two windows of aligned words
    (backward, byte granule, a chunk at least 16 bytes wide, one stage loaded through
    registers)."""
    return direction == "backward" and granule == 1 and any(wide) and loader == "regs"


def _wide_flags(wide_chunks: object, chunks: int) -> tuple[bool, ...]:
    """``wide_chunks`` as one flag a chunk: True or False for every chunk, or a tuple of
    ``chunks`` bools."""
    if isinstance(wide_chunks, bool):
        return (wide_chunks,) * chunks
    if (
        isinstance(wide_chunks, tuple)
        and len(wide_chunks) == chunks
        and all(isinstance(w, bool) for w in wide_chunks)
    ):
        return wide_chunks
    raise TypeError(
        f"wide_chunks must be True, False or a tuple of {chunks} bools (one a chunk), not {wide_chunks!r}"
    )


def wide_chunks_option(flags: tuple[bool, ...]) -> bool | tuple[bool, ...]:
    """``wide_chunks`` for one flag a chunk: one value for a uniform group (so that a tuple
    of equal flags is the same kernel, and ids and plans show it as one), else the tuple."""
    return flags[0] if len(set(flags)) == 1 else flags


def _shared_layout(
    direction: str, chunks: int, granule: int, tile_bytes: int, loader: str, wide: tuple[bool, ...],
    row_gather: bool = False,
) -> tuple[int, int, int, int]:  # fmt: skip
    """(stages, staging, word-window padding, total): the kernel's static shared memory, in
    bytes, beside the chunk table and the bulk loader's mbarriers. The row gather keeps
    no tile image (stages 0), and pads its staging area on both sides for the windows."""
    stages = 2 if (direction == "backward" and loader != "regs") else 0 if row_gather else 1
    staging = tile_bytes + 32 * chunks if (direction == "forward" and loader == "cp.async") else 0
    staging += 2 * ROW_GATHER_PAD if row_gather else 0
    windows = _WINDOW_PAD if _word_windows(direction, granule, wide, loader) else 0
    total = tile_bytes * stages + windows + staging + _TABLE_ENTRY * chunks + (16 if loader == "bulk" else 0)
    return stages, staging, windows, total


_REGISTERS_PER_SM = 64 * 1024  # every architecture from sm_75 on
_LIGHT_REGISTERS = 48


def _resident_ctas(
    direction: str, loader: str, unroll: int, block: int, target: str, row_gather: bool
) -> int:
    """The resident CTAs an SM the kernel asks ptxas to leave room for
    (``.minnctapersm``, which caps its registers at 64K / (CTAs * block)).

    Several resident CTAs keep loads in flight while others re-index; the ask also
    steadies ptxas, which otherwise spilled a few bytes in small configurations. Forward
    through registers holds ``unroll`` loaded vectors across the scatter: it asks for
    fewer.

    Two kinds fit 48 registers a thread: the row gather (it holds no loaded vector), and
    backward through registers with at most four loaded vectors a thread. In blocks of
    256 threads or more they ask for the CTAs that budget leaves room for, 5 of 256, on
    the targets whose ptxas fits them there without spilling: sm_90 and the data-centre
    parts after it (sm_80-89 and sm_120/121 spill the row gather at 48, every target the
    forward scatter; tests/test_fastcat_tile.py checks). Measured on H200
    (lab/data/tile-variants-12.json, 64 random shapes, every result checked): splits'
    median of the flat copy 0.954 -> 0.978, lowest 0.748 -> 0.803 (they had 62
    registers, 4 CTAs); concats' 0.877 -> 0.898 (the row gather's 32 KB tiles had 79
    registers, 3 CTAs). 40 registers (6 CTAs) spilled the backward walk and lost 7 points.
    Backward kernels of six or more chunks read as word windows spilled at 48 while the
    chunk table was filled a warp a chunk, and asked for 4; filled a lane a chunk
    (``TileChunks._fill_chunk_table``) they fit at any chunk count.
    """
    fwd = 2 if direction == "forward" and loader == "regs" else 1
    resident = max(1, min(1024 // block, 16 // unroll) // fwd)
    backward = direction == "backward" and loader == "regs" and unroll <= 4
    major, _ = target_capability(target)
    if (row_gather or backward) and block >= 256 and 9 <= major < 12:
        resident = max(resident, _REGISTERS_PER_SM // (_LIGHT_REGISTERS * block))
    return resident
