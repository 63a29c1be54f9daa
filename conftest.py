"""Repository-wide pytest hook: every test marked ``gpu`` skips, with the reason, where no
CUDA GPU is usable, including tests that drive the GPU from a subprocess and so do not
ask for the ``dev`` fixture (tests/conftest.py), which skips only the tests that use it."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    marked = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not marked:
        return
    import runtime

    reason = runtime.unavailable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"no GPU: {reason}")
    for item in marked:
        item.add_marker(skip)
