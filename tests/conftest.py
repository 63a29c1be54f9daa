"""Shared fixtures. GPU tests are marked ``gpu`` and skip with the reason where
``runtime.is_available()`` is false; everything else runs anywhere."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import ptxgen  # noqa: E402
import runtime  # noqa: E402


@pytest.fixture(scope="session")
def dev():
    reason = runtime.unavailable_reason()
    if reason is not None:
        pytest.skip(f"no GPU: {reason}")
    return runtime.Device(0)


# A kernel written by hand, to show the protocol is not tied to ptxgen's classes.
FILL_PTX = """\
.version 6.3
.target sm_75
.address_size 64

// out[i] = value for i < n
.visible .entry fill_entry_point(.param .u64 out, .param .u32 n, .param .u32 value)
{
    .reg .u32 %i, %n, %value, %block_id, %block_dim, %thread;
    .reg .u64 %out, %addr;
    .reg .pred %past;
    ld.param.u64 %out, [out];
    ld.param.u32 %n, [n];
    ld.param.u32 %value, [value];
    mov.u32 %block_id, %ctaid.x;
    mov.u32 %block_dim, %ntid.x;
    mov.u32 %thread, %tid.x;
    mad.lo.u32 %i, %block_id, %block_dim, %thread;
    setp.ge.u32 %past, %i, %n;
    @%past bra DONE;
    mad.wide.u32 %addr, %i, 4, %out;
    st.global.u32 [%addr], %value;
DONE:
    ret;
}
"""


@dataclass
class HandWrittenKernel:
    """Satisfies ptxgen.Kernel with PTX typed in by a person."""

    kernel_source: str = "// hand-written: fill a u32 array\n"
    entry_point_source: str = FILL_PTX
    name: str = "fill"
    block_size: int = 64
    target: str = "sm_75"
    ptx_version: str = "6.3"
    arg_names: tuple = ("out", "n", "value")
    arg_types: tuple = field(
        default_factory=lambda: (ptxgen.Pointer("u32"), ptxgen.Scalar("u32"), ptxgen.Scalar("u32"))
    )

    @property
    def id(self) -> str:
        return f"{self.name}__u32__{self.block_size}"

    @property
    def source(self) -> str:
        return self.kernel_source + "\n\n" + self.entry_point_source

    @property
    def entry_point_name(self) -> str:
        return f"{self.name}_entry_point"

    @property
    def content_hash(self) -> str:
        import hashlib

        return hashlib.sha256(self.source.encode()).hexdigest()

    @property
    def block(self) -> tuple:
        return (self.block_size, 1, 1)

    def grid(self, n_spatial: int, chunk_c: int = 1) -> tuple:
        return (-(-n_spatial * chunk_c // self.block_size), 1, 1)
