"""Repository-wide pytest hooks: every test marked ``gpu`` skips, with the reason, where no
CUDA GPU is usable, including tests that drive the GPU from a subprocess and so do not
ask for the ``dev`` fixture (tests/conftest.py), which skips only the tests that use it;
and ``--shard I/N`` keeps every N-th collected test from the I-th, so that a slow run (the
suite under compute-sanitizer: scripts/sanitize.py) can be spread over N processes."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--shard",
        default=None,
        metavar="I/N",
        help="run only the collected tests whose index is I modulo N (0 <= I < N)",
    )


def shard_of(text: str) -> tuple[int, int]:
    """``"I/N"`` as (I, N), or a UsageError naming the value and what is accepted."""
    index, _, count = text.partition("/")
    if index.isdigit() and count.isdigit() and int(index) < int(count):
        return int(index), int(count)
    raise pytest.UsageError(f"--shard {text!r}: expected I/N with whole numbers 0 <= I < N, e.g. 0/4")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shard = config.getoption("--shard")
    if shard is not None:
        # Round robin, so each shard gets a share of every slow file.
        index, count = shard_of(shard)
        kept = [item for i, item in enumerate(items) if i % count == index]
        config.hook.pytest_deselected(items=[item for i, item in enumerate(items) if i % count != index])
        items[:] = kept
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
