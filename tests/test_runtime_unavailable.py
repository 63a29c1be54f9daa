"""While there is no usable driver, every call raises a fresh CudaUnavailable: the
traceback does not grow from call to call, memory stays flat, and a printed traceback
carries no frames of earlier, unrelated calls."""

from __future__ import annotations

import gc
import traceback
import tracemalloc

import pytest

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
