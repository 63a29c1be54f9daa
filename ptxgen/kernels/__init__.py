"""The kernels ptxgen ships, one module per family; ``fastcat`` is the rule that plans the
fast ones (``choose``, for a device's ``GpuTraits``), ``plan_strided`` the strided copies
of arrays the fast ones cannot take."""

from .channel_cat import BLOCK_SIZES, ChannelCatBackward, ChannelCatForward, check_block_size
from .fastcat_rect import FastcatRect
from .fastcat_rowpack import FastcatRowpack, rowpack_rows
from .fastcat_tile import FastcatTile
from .fastcat_vec import FastcatVec
from .strided import StridedCopy

__all__ = [
    "BLOCK_SIZES",
    "ChannelCatBackward",
    "ChannelCatForward",
    "FastcatRect",
    "FastcatRowpack",
    "FastcatTile",
    "FastcatVec",
    "StridedCopy",
    "check_block_size",
    "rowpack_rows",
]
