"""The kernels ptxgen ships, one module per family."""

from .channel_cat import BLOCK_SIZES, ChannelCatBackward, ChannelCatForward, check_block_size

__all__ = ["BLOCK_SIZES", "ChannelCatBackward", "ChannelCatForward", "check_block_size"]
