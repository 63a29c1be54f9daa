"""Footprints: what memory a launch touches through each pointer argument.

A kernel that declares ``footprints(grid, block, scalars)`` lets a checked launcher
refuse, before anything runs, an array that does not cover what the launch will
read or write: too short, or not aligned as the kernel's accesses need. A kernel
without it still launches; its pointers are then trusted (the runtime says so).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Footprint", "FootprintError", "check_launch_block"]


class FootprintError(ValueError):
    """The launch's scalars and grid ask for something the kernel cannot do safely
    (a chunk past the end of its rows, say)."""


def check_launch_block(name: str, block: tuple[int, ...], built_for: tuple[int, int, int]) -> None:
    """Refuse a launch whose block is not the one the kernel was written for: its
    footprints, and its indexing (a stride, a shared-memory layout), assume that block."""
    if tuple(block) != built_for:
        raise FootprintError(f"{name} is built for block {built_for}, not {tuple(block)}")


@dataclass(frozen=True)
class Footprint:
    """One pointer argument of one launch.

    ``elements``: the launch touches elements ``[0, elements)`` from the pointer (0:
    none, and the pointer may then be anything, null included). ``align``: the byte
    alignment the pointer needs. ``writes``: whether the launch stores through it.
    """

    arg: str
    elements: int
    itemsize: int
    align: int
    writes: bool

    @property
    def nbytes(self) -> int:
        return self.elements * self.itemsize
