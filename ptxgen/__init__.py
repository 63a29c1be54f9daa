"""ptxgen: GPU kernels written directly as PTX text, in pure Python.

>>> import ptxgen
>>> k = ptxgen.ChannelCatBackward("f32", 128)
>>> k.id
'channel_cat_backward__f32__128'
>>> k.entry_point_name
'channel_cat_backward_entry_point'
>>> [str(t) for t in k.arg_types]
['*mut f32', '*mut f32', 'i32', 'i32', 'i32']

Imports nothing outside the standard library.
"""

from .args import ArgType, ParamSlot, Pointer, Scalar, param_layout
from .dtypes import DTYPES, DType, resolve_dtype
from .footprint import Footprint, FootprintError
from .function import PtxFunction, PtxModule
from .kernel import Kernel, KernelBase, PtxKernel
from .kernels import BLOCK_SIZES, ChannelCatBackward, ChannelCatForward
from .ptxtypes import SPECIAL_REGS, Addr, Pair, PtxTargetError, PtxTypeError, Reg, Sink, Vec
from .targets import DEFAULT_TARGET, PTX_ISA_CUDA, TARGETS

__version__ = "0.1.0"

KERNELS = {cls.name: cls for cls in (ChannelCatBackward, ChannelCatForward)}

__all__ = [
    "BLOCK_SIZES",
    "DEFAULT_TARGET",
    "DTYPES",
    "KERNELS",
    "PTX_ISA_CUDA",
    "SPECIAL_REGS",
    "TARGETS",
    "Addr",
    "ArgType",
    "ChannelCatBackward",
    "ChannelCatForward",
    "DType",
    "Footprint",
    "FootprintError",
    "Kernel",
    "KernelBase",
    "Pair",
    "ParamSlot",
    "Pointer",
    "PtxFunction",
    "PtxKernel",
    "PtxModule",
    "PtxTargetError",
    "PtxTypeError",
    "Reg",
    "Scalar",
    "Sink",
    "Vec",
    "param_layout",
    "resolve_dtype",
]
