"""The kernels ptxgen ships, one module per family."""

from .channel_cat import BLOCK_SIZES, ChannelCatBackward, ChannelCatForward, check_block_size
from .fastcat_tile import FastcatTile

__all__ = ["BLOCK_SIZES", "ChannelCatBackward", "ChannelCatForward", "FastcatTile", "check_block_size"]
