"""Planning the channel_cat ops: which kernels, grids and arguments one shape needs.

A plan is made once per shape (:func:`make_plan`) and replayed on every call with the
same shape, dtype, device and pointer alignments: the op only recognises the arrays,
checks them and launches the plan's steps.

The planner itself is ptxgen's, :mod:`ptxgen.kernels.plan` (standard library only), so
that the op bundles a runtime without Python loads (``python -m ptxgen bundle split``)
hold the plans this module makes; this module reads the device's traits
(:class:`DeviceTraits`) and keeps every name it always had, with the same meaning: the
variant table :data:`VARIANTS` (a test or the benchmark may replace it here, and
:func:`make_plan` reads it from here), :class:`Problem`, :class:`Step`, :class:`Ptr`...

Which kernel runs is decided by that table, read in order of preference. A variant of
scope ``"op"`` plans the whole op in one go (a fused split or concat); one of scope
``"chunk"`` plans one piece, and each piece takes the first chunk variant that accepts
it. What the fast kernels are, built for which target, on which grids, is decided by one
rule, ``ptxgen.kernels.fastcat.choose``, from the shape and the device's traits
(:class:`DeviceTraits`: ptxgen's :class:`~ptxgen.kernels.fastcat.GpuTraits`, read from a
device by :meth:`DeviceTraits.of`). Planning touches no driver (only
:meth:`DeviceTraits.of` reads the device), so plans can be checked without a GPU, for
any device's traits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ptxgen.kernels import plan as _plan
from ptxgen.kernels.fastcat import GpuTraits
from ptxgen.kernels.plan import (  # noqa: F401  (the names runtime and scripts import from here)
    FASTCAT_CHUNK,
    FASTCAT_FUSED,
    H200,
    MAX_STEPS,
    OPS,
    SEED,
    WIDE,
    Chunk,
    Plan,
    Problem,
    Ptr,
    Step,
    Variant,
    _cdiv,
    _check_step_count,
    _chunk_as_problem,
    _fastcat_fits,
    _fastcat_steps,
    _seed_kernel,
    _seed_steps,
    seed_block_size,
)

from ._env import env_flag

__all__ = [
    "MAX_STEPS",
    "VARIANTS",
    "Chunk",
    "DeviceTraits",
    "Plan",
    "Problem",
    "Ptr",
    "Step",
    "Variant",
    "make_plan",
    "seed_block_size",
]

_DEPENDENT_ENV = "PTXGEN_DEPENDENT_LAUNCH"


@dataclass(frozen=True)
class DeviceTraits(GpuTraits):
    """What planning needs to know of a GPU: every trait ptxgen's rule reads
    (:class:`~ptxgen.kernels.fastcat.GpuTraits`) and the device's ordinal. A plain
    record, so plans can be made and tested without a GPU, for any part.

    The defaults describe the H200 the project's GPU records were made on (132 SMs of
    2,048 threads and 228 KB of shared memory, a 60 MB L2: docs/perf/README.md's
    figure), for plans made without a device (``runtime.ops.plan_for(..., device=None)``);
    :meth:`of` reads a device's own.
    """

    arch: str = H200.arch
    sm_count: int = H200.sm_count
    max_threads_per_sm: int = H200.max_threads_per_sm
    l2_bytes: int = H200.l2_bytes
    max_shared_memory_per_sm: int = H200.max_shared_memory_per_sm
    max_shared_memory_per_block: int = H200.max_shared_memory_per_block
    max_grid_x: int = H200.max_grid_x
    max_grid_y: int = H200.max_grid_y
    # Build the fast kernels for programmatic dependent launch where the GPU has it
    # (sm_90+): each waits for the previous grid in the kernel, so the launches of a
    # plan, of consecutive ops and of a captured graph overlap their launch latency.
    # PTXGEN_DEPENDENT_LAUNCH=0 turns it off in the traits DeviceTraits.of reads from a device.
    dependent_launch: bool = True
    memory_bandwidth: int | None = H200.memory_bandwidth
    ordinal: int = 0

    @classmethod
    def of(cls, device: Any) -> DeviceTraits:
        """The traits of a :class:`runtime.Device`, read from its attributes and, for those
        it does not keep (L2 size, threads and shared memory per SM, the memory's clock and
        bus width), from the driver. A stand-in record without them (a test's) keeps the
        defaults for those; a part that reports its memory clock or bus width as 0 has no
        known bandwidth (None)."""
        found = {name: _device_attribute(device, name, attr) for name, attr in _DRIVER_TRAITS.items()}
        found = {name: value for name, value in found.items() if value is not None}
        clock_khz, bus_bits = (_device_attribute(device, name, attr) for name, attr in _MEMORY_TRAITS.items())
        if clock_khz is not None and bus_bits is not None:
            found["memory_bandwidth"] = 2 * clock_khz * 1000 * bus_bits // 8 or None
        return cls(
            ordinal=device.ordinal,
            arch=device.arch,
            max_grid_x=device.max_grid[0],
            max_grid_y=device.max_grid[1],
            max_shared_memory_per_block=device.max_shared_memory_per_block,
            dependent_launch=env_flag(_DEPENDENT_ENV, True),
            **found,
        )


# DeviceTraits field -> (the runtime.Device attribute that holds it, the driver's
# CU_DEVICE_ATTRIBUTE_* name for a Device that does not keep it).
_DRIVER_TRAITS = {
    "sm_count": ("multiprocessor_count", "MULTIPROCESSOR_COUNT"),
    "max_threads_per_sm": ("max_threads_per_multiprocessor", "MAX_THREADS_PER_MULTIPROCESSOR"),
    "l2_bytes": ("l2_cache_size", "L2_CACHE_SIZE"),
    "max_shared_memory_per_sm": (
        "max_shared_memory_per_multiprocessor",
        "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    ),
}


# The peak DRAM bandwidth's two parts (memory_bandwidth: twice the clock, in kHz, times
# the bus width, in bits, over 8), read as the traits above are.
_MEMORY_TRAITS = {
    "memory_clock": ("memory_clock_rate", "MEMORY_CLOCK_RATE"),
    "memory_bus": ("global_memory_bus_width", "GLOBAL_MEMORY_BUS_WIDTH"),
}


def _device_attribute(device: Any, name: str, attribute: tuple[str, str]) -> int | None:
    """A device's trait: its own attribute where it has one, else the driver's for a
    :class:`runtime.Device` (the driver knows its ordinal), else None (a stand-in record)."""
    kept, driver_name = attribute
    value = getattr(device, kept, None)
    if value is not None:
        return int(value)
    from .device import Device

    if not isinstance(device, Device):
        return None
    from ._driver import check, driver

    drv = driver()
    handle = check("cuDeviceGet", drv.cuDeviceGet(device.ordinal))
    which = getattr(drv.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{driver_name}")
    return int(check("cuDeviceGetAttribute", drv.cuDeviceGetAttribute(which, handle)))


# In order of preference; ptxgen's table (ptxgen.kernels.plan.VARIANTS, whose comment
# says why each row is there), the same list. Replaced here by the per-piece GPU tests
# and the benchmark; make_plan reads it from here at every call.
VARIANTS: list[Variant] = _plan.VARIANTS


def make_plan(problem: Problem, traits: GpuTraits, variants: Sequence[Variant] | None = None) -> Plan:
    """The launches for ``problem``: the first op-scope variant of ``variants`` (default:
    this module's :data:`VARIANTS`) that accepts it, else for each non-empty piece the first
    chunk-scope variant that accepts that piece (:func:`ptxgen.kernels.plan.make_plan`)."""
    return _plan.make_plan(problem, traits, VARIANTS if variants is None else variants)
