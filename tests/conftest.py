"""Shared fixtures. GPU tests are marked ``gpu`` and skip with the reason where
``runtime.is_available()`` is false; everything else runs anywhere."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import ptxgen  # noqa: E402
import runtime  # noqa: E402
from runtime.stream import trust_stream_handle  # noqa: E402

# The stream handles the CPU tests hand to launchers whose driver call is recorded, not made.
for _fake_stream in (5, 7, 9, 77, 78):
    trust_stream_handle(_fake_stream)


@pytest.fixture(scope="session")
def dev():
    reason = runtime.unavailable_reason()
    if reason is not None:
        pytest.skip(f"no GPU: {reason}")
    return runtime.Device(0)


@pytest.fixture(scope="session")
def torch(dev):
    """torch, where it is installed and sees the GPU (else the test is skipped)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch cannot see the GPU")
    return torch


@pytest.fixture(scope="session")
def cupy(dev):
    """CuPy, where it is installed (else the test is skipped)."""
    return pytest.importorskip("cupy")


@pytest.fixture(params=["python", "compiled"])
def launch_path(request):
    """Runs a test once through each launch path: the Python launch functions, and
    runtime._fastlaunch where it is built (skipped with the reason where it is not).
    Launchers built in the test with a recording binding take that path; the GPU
    tests' functions take it through :func:`runtime.launch.use_compiled_launch`."""
    from launch_util import RecordingBinding

    from runtime import launch

    compiled = request.param == "compiled"
    if compiled and launch.compiled_launch_available():
        pytest.skip(launch.compiled_launch_available())
    old = launch.use_compiled_launch(compiled)
    RecordingBinding.compiled = compiled
    yield request.param
    RecordingBinding.compiled = False
    launch.use_compiled_launch(old)


@pytest.fixture
def fresh_plans():
    """The ops plan anew in this test, and what they planned (under patched planner
    settings, say) is forgotten after it."""
    from runtime import ops

    ops.clear_plans()
    yield
    ops.clear_plans()


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


FILL_TYPES = (ptxgen.Pointer("u32"), ptxgen.Scalar("u32"), ptxgen.Scalar("u32"))


def hand_written_kernel(
    block_size: int = 64,
    *,
    arg_names: tuple = ("out", "n", "value"),
    arg_types: tuple = FILL_TYPES,
    ptx: str = FILL_PTX,
) -> ptxgen.PtxKernel:
    """A kernel typed in by a person: the protocol is not tied to ptxgen's emitter.
    Launch it on ``(cdiv(n, block_size), 1, 1)`` CTAs."""
    return ptxgen.PtxKernel(
        "fill",
        ptx,
        arg_names,
        arg_types,
        block_size,
        header="// hand-written: fill a u32 array\n",
        kernel_id=f"fill__u32__{block_size}",
    )


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite tests/golden/*.ptx from the current emitter instead of comparing",
    )
