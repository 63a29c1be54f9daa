"""Error types without a GPU: sticky faults say the context is gone; a forked child refuses."""

from __future__ import annotations

import os

import pytest

import runtime
from runtime import _driver
from runtime.errors import STICKY_ERRORS, CudaError, ForkedProcessError


def test_sticky_errors_say_the_context_is_unusable():
    err = CudaError(
        "cuCtxSynchronize", 700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"
    )
    assert err.sticky and "context of this process is now unusable" in str(err) and "Restart" in str(err)
    plain = CudaError("cuMemAlloc", 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory")
    assert not plain.sticky and "unusable" not in str(plain)
    assert {700, 716, 719} <= STICKY_ERRORS and 2 not in STICKY_ERRORS


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_child_forked_after_cuda_started_refuses(monkeypatch):
    # Pretend the parent had initialised the driver, then run the child's fork hook.
    monkeypatch.setattr(_driver, "_driver", object())
    monkeypatch.setattr(_driver, "forked", False)
    _driver._after_fork_in_child()
    assert _driver.forked
    with pytest.raises(ForkedProcessError, match="spawn"):
        _driver.driver()
    assert runtime.is_available() is False
    assert "fork" in runtime.unavailable_reason()
    monkeypatch.setattr(_driver, "forked", False)
    monkeypatch.setattr(_driver, "_failure", None)


def test_a_child_forked_before_cuda_started_may_use_it(monkeypatch):
    monkeypatch.setattr(_driver, "_driver", None)
    monkeypatch.setattr(_driver, "forked", False)
    _driver._after_fork_in_child()
    assert not _driver.forked  # nothing was initialised: the child may start CUDA itself
