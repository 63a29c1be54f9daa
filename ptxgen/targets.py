"""GPU targets and PTX ISA versions, in one place.

``TARGETS`` maps each ``sm_XX`` to the lowest PTX ISA version that may name it in
``.target``. Each row was checked against the PTX ISA release notes and with
ptxas 13.5 (one version lower is refused: "PTX .version X does not support .target").

``PTX_ISA_CUDA`` maps each PTX ISA version to the first CUDA release, and so the
oldest driver, that loads it: a driver reporting CUDA 12.4 JIT-compiles PTX up to 8.4.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_TARGET",
    "PTX_ISA_CUDA",
    "TARGETS",
    "isa_key",
    "isa_max",
    "min_cuda_for_isa",
    "newest_isa_for_cuda",
    "resolve_target",
    "target_capability",
    "target_sm",
]

# The oldest architecture CUDA 13 still compiles for; the driver JIT-compiles the
# PTX for anything newer, so one module runs everywhere.
DEFAULT_TARGET = "sm_75"

TARGETS: dict[str, str] = {
    "sm_75": "6.3",  # Turing
    "sm_80": "7.0",  # A100
    "sm_86": "7.1",  # GA10x
    "sm_87": "7.4",  # Orin
    "sm_88": "9.0",
    "sm_89": "7.8",  # Ada
    "sm_90": "7.8",  # Hopper (H100, H200)
    "sm_100": "8.6",  # Blackwell (B200)
    "sm_103": "8.8",  # Blackwell Ultra
    "sm_110": "9.0",  # Thor (was sm_101)
    "sm_120": "8.7",  # Blackwell (RTX 50)
    "sm_121": "8.8",  # DGX Spark
}

PTX_ISA_CUDA: dict[str, tuple[int, int]] = {
    "6.3": (10, 0),
    "6.4": (10, 1),
    "6.5": (10, 2),
    "7.0": (11, 0),
    "7.1": (11, 1),
    "7.2": (11, 2),
    "7.3": (11, 3),
    "7.4": (11, 4),
    "7.5": (11, 5),
    "7.6": (11, 6),
    "7.7": (11, 7),
    "7.8": (11, 8),
    "8.0": (12, 0),
    "8.1": (12, 1),
    "8.2": (12, 2),
    "8.3": (12, 3),
    "8.4": (12, 4),
    "8.5": (12, 5),
    "8.6": (12, 7),
    "8.7": (12, 8),
    "8.8": (12, 9),
    "9.0": (13, 0),
    "9.1": (13, 1),
    "9.2": (13, 2),
    "9.3": (13, 3),
    "9.4": (13, 4),
    "9.5": (13, 5),
}


def isa_key(version: str) -> tuple[int, int]:
    """``"8.6"`` -> ``(8, 6)``, for comparing PTX ISA versions."""
    major, _, minor = version.partition(".")
    return int(major), int(minor)


def resolve_target(target: object) -> str:
    """Validate a target name; ``None`` means :data:`DEFAULT_TARGET`."""
    if target is None:
        return DEFAULT_TARGET
    if not isinstance(target, str):
        raise TypeError(f"target must be a string such as 'sm_90', not {type(target).__name__} {target!r}")
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; accepted: {', '.join(TARGETS)}")
    return target


def target_capability(target: str) -> tuple[int, int]:
    """``'sm_90'`` -> ``(9, 0)``; ``'sm_120'`` -> ``(12, 0)``; suffixes a/f are ignored."""
    digits = target.removeprefix("sm_").removeprefix("compute_").rstrip("af")
    if not digits.isdigit() or len(digits) < 2:
        raise ValueError(f"cannot read a compute capability from target {target!r}")
    return int(digits[:-1]), int(digits[-1])


def target_sm(target: str) -> int:
    """``'sm_90'`` -> ``90``, ``'sm_121'`` -> ``121``: the number the instruction table compares."""
    major, minor = target_capability(target)
    return major * 10 + minor


def isa_max(*versions: str) -> str:
    """The newest of several PTX ISA versions."""
    return max(versions, key=isa_key)


def min_cuda_for_isa(version: str) -> tuple[int, int] | None:
    """The first CUDA release whose driver loads PTX ISA ``version``; None if unknown."""
    return PTX_ISA_CUDA.get(version)


def newest_isa_for_cuda(cuda: tuple[int, int]) -> str | None:
    """The newest PTX ISA a CUDA ``(major, minor)`` driver loads, as far as we know."""
    fitting = [isa for isa, first in PTX_ISA_CUDA.items() if first <= cuda]
    return max(fitting, key=isa_key) if fitting else None
