"""What happens when things go wrong on a real GPU: a kernel fault leaves every later call
saying the context is unusable; a forked child gets a clear error, never a hang or crash."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import ROOT

import ptxgen
import runtime

pytestmark = pytest.mark.gpu

FAULT = f"""
import json, sys
sys.path.insert(0, {str(ROOT)!r})
import ptxgen, runtime
ptx = '''.version 6.3
.target sm_75
.address_size 64
.visible .entry fault_entry_point(.param .u64 where)
{{
    .reg .u64 %where;
    .reg .u32 %value;
    ld.param.u64 %where, [where];
    mov.u32 %value, 7;
    st.global.u32 [%where], %value;
    ret;
}}
'''
k = ptxgen.PtxKernel("fault", ptx, ("where",), (ptxgen.Pointer("u32"),), 32)
dev = runtime.Device(0)
fn = dev.load(k).function
out = {{}}
fn.launch((1, 1, 1), k.block, (16,))  # an address no allocation holds
for step, action in (("synchronize", dev.synchronize), ("empty", lambda: dev.empty(4, "f32")),
                     ("load", lambda: dev.load(ptxgen.ChannelCatBackward("f32", 64)))):
    try:
        action()
        out[step] = "no error"
    except runtime.CudaError as err:
        out[step] = [err.name, err.sticky, "context of this process is now unusable" in str(err)]
print(json.dumps(out))
"""


def test_a_kernel_fault_makes_every_later_call_say_the_context_is_unusable():
    run = subprocess.run([sys.executable, "-c", FAULT], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["synchronize"] == ["CUDA_ERROR_ILLEGAL_ADDRESS", True, True]
    for step in ("empty", "load"):
        assert result[step][1:] == [True, True], (step, result[step])


def _run_in_fork(child) -> dict:
    """Fork; run ``child()`` there and send back its dict; never wait forever on it."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's atexit handlers
        os.close(read)
        try:
            payload = json.dumps(child())
        except BaseException as err:  # report anything, never hang the parent
            payload = json.dumps({"unexpected": f"{type(err).__name__}: {err}"})
        os.write(write, payload.encode())
        os._exit(0)
    os.close(write)
    ready, _, _ = select.select([read], [], [], 60)
    if not ready:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung")
    data = os.read(read, 1 << 16)
    os.close(read)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0, f"the child died: status {status}"
            return json.loads(data)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    pytest.fail("the forked child did not exit")


def test_a_forked_child_gets_a_clear_error(dev):
    k = ptxgen.ChannelCatBackward("f32", 128)
    fn = dev.load(k).function
    dy = dev.to_device(np.arange(64, dtype=np.float32).reshape(4, 16))
    dx = dev.empty((4, 8), "f32")
    fn.launch(k.grid(4, 8), k.block, (dy, dx, 8, 16, 0))
    dev.synchronize()

    def child() -> dict:
        out = {"available": runtime.is_available(), "reason": runtime.unavailable_reason()}
        for name, action in (
            ("device", lambda: runtime.Device(0)),
            ("launch", lambda: fn.launch(k.grid(4, 8), k.block, (dy, dx, 8, 16, 0))),
            ("copy", dx.to_numpy),
            ("load", lambda: dev.load(ptxgen.ChannelCatForward("f32", 128))),
        ):
            try:
                action()
                out[name] = "no error"
            except runtime.CudaUnavailable as err:
                out[name] = type(err).__name__
        del dy_child[:]  # drop the parent's arrays here: their finalizers must not touch CUDA
        import gc

        gc.collect()
        return out

    dy_child = [dy, dx]
    result = _run_in_fork(child)
    assert result == {
        "available": False,
        "reason": result["reason"],
        "device": "ForkedProcessError",
        "launch": "ForkedProcessError",
        "copy": "ForkedProcessError",
        "load": "ForkedProcessError",
    }, result
    assert "forked" in result["reason"] or "fork of one" in result["reason"]
    # the parent is untouched
    np.testing.assert_array_equal(dx.to_numpy(), dy.to_numpy()[:, :8])
