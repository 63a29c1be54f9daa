"""While there is no usable driver, every call raises a fresh CudaUnavailable: the
traceback does not grow from call to call, memory stays flat, and a printed traceback
carries no frames of earlier, unrelated calls. A light install (no cuda-bindings) says
so first, with the install command, whether or not the machine has a driver."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import subprocess
import sys
import traceback
import tracemalloc

import pytest
from conftest import ROOT

import runtime
from runtime import _driver
from runtime.errors import CudaUnavailable


@pytest.fixture
def no_driver(monkeypatch):
    """The driver fails to load, on any machine (this one may have a GPU)."""
    calls = []

    def failing_load():
        calls.append(1)
        raise CudaUnavailable(
            "no NVIDIA driver found (libcuda.so.1: test)", "cuInit", 100, "CUDA_ERROR_NO_DEVICE"
        )

    monkeypatch.setattr(_driver, "_driver", None)
    monkeypatch.setattr(_driver, "_failure", None)
    monkeypatch.setattr(_driver, "_load", failing_load)
    return calls


def caught() -> CudaUnavailable:
    try:
        _driver.driver()
    except CudaUnavailable as err:
        return err
    raise AssertionError("driver() did not raise")


def test_each_call_raises_a_new_exception_with_the_same_facts(no_driver):
    first, second = caught(), caught()
    assert first is not second
    assert str(first) == str(second) == "no NVIDIA driver found (libcuda.so.1: test)"
    assert (second.call, second.code, second.name) == ("cuInit", 100, "CUDA_ERROR_NO_DEVICE")
    assert second.__cause__ is None and second.__context__ is None
    assert len(no_driver) == 1  # the load is tried once; the outcome is cached


def test_the_traceback_does_not_grow(no_driver):
    lengths = [len(traceback.extract_tb(caught().__traceback__)) for _ in range(1000)]
    assert set(lengths) == {lengths[0]} and lengths[0] <= 2


def test_a_traceback_carries_no_frames_of_earlier_calls(no_driver):
    def earlier_unrelated_caller():
        return runtime.is_available()

    earlier_unrelated_caller()
    text = "".join(traceback.format_exception(caught()))
    assert "earlier_unrelated_caller" not in text and "unavailable_reason" not in text


def test_memory_stays_flat_over_many_calls(no_driver):
    for _ in range(2000):  # warm up: caches, interned strings
        runtime.is_available()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(50_000):
            assert runtime.is_available() is False
            runtime.unavailable_reason()
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    # The old cached exception grew by hundreds of bytes a call (19 -> 148 MB over 200,000
    # calls): 100,000 calls here would add tens of MB. Flat means a few kB of noise.
    assert grown < 64 * 1024, f"{grown} bytes more after 100,000 calls"


# A fresh interpreter where cuda-bindings cannot be imported, as after `pip install .`.
WITHOUT_BINDINGS = """
import sys
sys.modules["cuda"] = sys.modules["cuda.bindings"] = None
import runtime
print(runtime.unavailable_reason())
try:
    runtime.Device(0)
except runtime.CudaUnavailable as err:
    print(err)
"""


def test_a_missing_cuda_bindings_says_so_first_with_the_install_command():
    out = subprocess.run(
        [sys.executable, "-c", WITHOUT_BINDINGS], cwd=ROOT, capture_output=True, text=True, check=True
    )
    reason, raised = out.stdout.splitlines()
    assert reason == raised
    assert reason.startswith("cuda-bindings is not installed; runtime needs it to load and launch: ")
    assert "pip install -e '.[runtime]' from a clone, or pip install cuda-bindings numpy" in reason
    try:
        ctypes.CDLL(_driver._LIBCUDA)
    except OSError:  # no driver either: said after the bindings, in the same line
        assert "; also no NVIDIA driver found (libcuda.so.1: " in reason
    else:
        assert "NVIDIA driver" not in reason


def test_a_missing_cuda_bindings_is_said_where_the_driver_loads(monkeypatch):
    libc = ctypes.util.find_library("c")
    if libc is None:
        pytest.skip("no C library to stand in for libcuda")
    monkeypatch.setattr(_driver, "_LIBCUDA", libc)  # a library that loads, as libcuda does on a GPU machine
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    with pytest.raises(CudaUnavailable) as info:
        _driver._load()
    assert str(info.value) == (
        "cuda-bindings is not installed; runtime needs it to load and launch: "
        "pip install -e '.[runtime]' from a clone, or pip install cuda-bindings numpy"
    )


def test_a_broken_cuda_bindings_is_named_with_its_error():
    message = _driver._bindings_missing(ImportError("cannot import name 'driver' from 'cuda.bindings'"))
    assert message == (
        "cuda-bindings is not importable (cannot import name 'driver' from 'cuda.bindings'); reinstall it: "
        "pip install -e '.[runtime]' from a clone, or pip install cuda-bindings numpy"
    )


def test_a_missing_driver_keeps_its_message_when_cuda_bindings_is_there(monkeypatch):
    pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed here")
    monkeypatch.setattr(_driver, "_LIBCUDA", "libno_such_cuda_driver.so.1")
    with pytest.raises(CudaUnavailable) as info:
        _driver._load()
    message = str(info.value)  # as before cuda-bindings was looked for first
    assert message.startswith("no NVIDIA driver found (libno_such_cuda_driver.so.1: ")
    assert message.endswith("); this machine cannot run CUDA kernels") and "cuda-bindings" not in message
