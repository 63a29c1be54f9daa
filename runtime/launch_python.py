"""The Python launch path of one function: closures made once, when it is resolved.

:func:`python_launch_path` makes, for one function, ``launch(grid, block, args, *,
stream=None, shared_mem=0)``, ``pack(args, stream=0)`` and ``prepare(...)``, which makes
a prepared launch and its ``raw``. What can be decided once is decided there: the
device's limits and the kernel's block, which binding call launches, whether the kernel
declares footprints. The arguments' tests are :class:`runtime.launch_checks.ArgumentChecks`:
at once where every argument passes, else in parameter order, where the first that is
wrong raises.

**Grid, block, shared memory, stream.** The objects of the last launch are known good:
a tuple of ints cannot change, and a stream object names one stream for its life (a
runtime.Stream is asked whether it is still open); so a launch given the very same
objects skips their checks. Other values get the common case tested inline (three ints
in range, the kernel's block) and anything else the full check, which raises saying
what is wrong. Where the binding has ``cuLaunchKernelEx`` (cuda-bindings converts one
``CUlaunchConfig`` faster than seven ints and a stream), the second launch in a row with
the same objects builds the config that later ones reuse; a dependent kernel builds it
at once, since only the config carries its launch attribute.

**Refusals.** Arguments that do not all pass at once are checked in parameter order,
then packed once for the packing's own refusal (an int its C type cannot hold, which
the full checks then name), then, where the kernel declares footprints, checked against
what the launch touches. Every refusal raises before a buffer is taken or the driver
called.

**The call.** Values are packed with one call (``ParamBuffer.pack``, ``struct.pack_into``
bound to the buffer) into a buffer from the function's pool: ``list.pop`` and ``append``
are atomic, so threads never share a buffer, without a lock, and the driver copies the
buffer during the call, so it goes back right after. A failed driver call gets one retry
through ``relaunch``, which makes the device's context current first. The trusted
``raw(*values)`` of a prepared launch does nothing else: it takes a buffer, packs, calls
the driver and gives the buffer back.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

from .launch_checks import ArgumentChecks, FootprintCheck
from .layout import ArgumentLayout, ParamBuffer
from .stream import Stream, stream_handle

if TYPE_CHECKING:
    from .bindings import Binding
    from .device import Device

__all__ = ["PythonLaunchPath", "block_fits", "python_launch_path"]

_NO_LAST = (object(),) * 4 + (0, None, None, None)  # a last launch no launch's objects match


class PythonLaunchPath(NamedTuple):
    """One function's Python launch functions; see :func:`python_launch_path`."""

    launch: Callable[..., None]
    pack: Callable[..., list[int]]
    # (gx, gy, gz, bx, by, bz, shared_mem, stream handle, the binding's stream, the
    # runtime.Stream or None) -> (prepared, raw), the geometry already checked
    prepare: Callable[..., tuple[Callable[..., None], Callable[..., None]]]
    close: Callable[[], None]


def block_fits(block: tuple[int, int, int], max_block: Sequence[int], max_threads: int) -> bool:
    """Whether the device runs a block of this shape: each side within its limit, and no
    more threads than the function allows."""
    return all(0 < b <= m for b, m in zip(block, max_block)) and block[0] * block[1] * block[2] <= max_threads


def python_launch_path(
    *,
    layout: ArgumentLayout,
    checks: ArgumentChecks,
    footprint_check: FootprintCheck | None,
    binding: Binding,
    function: Any,
    make_config: Callable[..., Any],
    dependent: bool,
    device: Device,
    max_threads: int,
    kernel_block: tuple[int, int, int] | None,
    pool: list[ParamBuffer],
    relaunch: Callable[..., None],
    closed: Callable[[], NoReturn],
    ordered: Callable[[Any], Sequence[Any]],
    check_geometry: Callable[[Any, Any, Any], tuple[tuple[int, int, int], tuple[int, int, int], int]],
    out_of_range: Callable[[Sequence[Any]], None],
) -> PythonLaunchPath:
    """The launch functions of one function (see the module's docstring).

    ``footprint_check``: where the kernel declares footprints and has a pointer to check.
    ``function``: the handle as ``binding`` takes it. ``make_config(gx, gy, gz, bx, by,
    bz, shared, stream)``: the binding's cuLaunchKernelEx config, with the programmatic
    dependent launch attribute where the kernel is ``dependent`` (every launch then goes
    with one). ``max_threads``: the function's limit per block; ``kernel_block``: the
    block the kernel is built for (None: any). ``relaunch(gx, gy, gz, bx, by, bz, shared,
    stream, buffer)`` is the retry; ``closed()`` raises for a closed module;
    ``ordered(args)`` gives the arguments in parameter order or raises saying what is
    wrong with them; ``check_geometry`` is the full check of grid, block and shared
    memory; ``out_of_range(args)`` raises the full check's error for the int that
    ``struct`` refused.
    """
    count = len(layout)
    new_buffer, trial_pack = layout.new_buffer, layout.struct.pack
    launch_kernel, launch_kernel_ex = binding.launch_kernel, binding.launch_kernel_ex
    returns_tuple, streams = binding.returns_tuple, binding.streams
    max_gx, max_gy, max_gz = device.max_grid
    max_bx, max_by, max_bz = device.max_block
    max_shared = device.max_shared_memory_per_block
    is_open = True
    last = _NO_LAST  # grid, block, shared_mem, stream, handle, call, footprints, config
    fixed_block = kernel_block is not None
    block_x, block_y, block_z = kernel_block if fixed_block else (None, None, None)
    if fixed_block and not block_fits(kernel_block, device.max_block, max_threads):
        # A block the device cannot run: None equals no int, so no launch passes the
        # fast test, and the full check says why.
        block_x = block_y = block_z = None
    fast_values, in_order = checks.fast_values, checks.in_order
    take, give_back = pool.pop, pool.append  # bound once: a launch calls them, looks nothing up

    def checked_values(args: Sequence[Any], handle: int, footprints: Any) -> list[int]:
        """The values of arguments that did not all pass at once: every check in
        parameter order, the packing's own, then the footprints (where ``footprints`` is
        the launch's cache), so the scalars are in range. Raises, naming the argument,
        before anything is launched."""
        values, given = in_order(args, handle, for_launch=True)
        try:
            trial_pack(*values)
        except struct.error:  # an int out of its C type's range: its full check says so
            out_of_range(args)
            raise
        if footprints is not None:
            footprint_check.check(footprints, values, given)
        return values

    def send(values: list[int], config: Any, call: tuple[Any, ...]) -> None:
        """Pack checked ``values`` into a pooled buffer and launch: with ``config`` where
        there is one, else with ``call``, cuLaunchKernel's arguments from ``gx`` to the
        stream."""
        try:
            buf = take()
        except IndexError:  # every buffer is in use, or none was made yet
            buf = new_buffer()
        buf.pack(*values)
        if config is None:
            gx, gy, gz, bx, by, bz, shared, bound_stream = call
            err = launch_kernel(function, gx, gy, gz, bx, by, bz, shared, bound_stream, buf.params, 0)
        else:
            err = launch_kernel_ex(config, function, buf.params, 0)
        if returns_tuple:
            err = err[0]
        if err:
            relaunch(*call, buf)  # raises if the retry fails too
        give_back(buf)

    def launch(grid: Any, block: Any, args: Any, *, stream: Any = None, shared_mem: Any = 0) -> None:
        """``Function.launch``: check everything, then launch; raises before launching."""
        nonlocal last
        if not is_open:
            closed()
        if args.__class__ is not tuple or len(args) != count:
            args = tuple(ordered(args))  # a list or a dict, or the error saying what is wrong
        last_grid, last_block, last_shared, last_stream, handle, call, footprints, config = last
        if grid is last_grid and block is last_block and shared_mem is last_shared and stream is last_stream:
            if stream.__class__ is Stream:
                _ = stream.handle  # raises once the Stream is closed
            if config is None and launch_kernel_ex is not None:
                config = make_config(*call)
                last = (grid, block, shared_mem, stream, handle, call, footprints, config)
        else:
            try:
                gx, gy, gz = grid
                bx, by, bz = block
            except (TypeError, ValueError):  # not three of each: the full check says so
                gx = gy = gz = bx = by = bz = None
            if not (
                gx.__class__ is int
                and gy.__class__ is int
                and gz.__class__ is int
                and bx.__class__ is int
                and by.__class__ is int
                and bz.__class__ is int
                and shared_mem.__class__ is int
                and 0 < gx <= max_gx
                and 0 < gy <= max_gy
                and 0 < gz <= max_gz
                and 0 <= shared_mem <= max_shared
                and (
                    (bx == block_x and by == block_y and bz == block_z)
                    if fixed_block
                    else (0 < bx <= max_bx and 0 < by <= max_by and 0 < bz <= max_bz)
                    and bx * by * bz <= max_threads
                )
            ):
                (gx, gy, gz), (bx, by, bz), shared_mem = check_geometry(grid, block, shared_mem)
            if stream is None:
                handle = 0
            elif stream.__class__ is Stream:
                handle = stream.handle
            else:
                handle = stream_handle(stream)
            call = (gx, gy, gz, bx, by, bz, shared_mem, streams[handle])
            config = make_config(*call) if dependent else None
            footprints = footprint_check.at((gx, gy, gz, bx, by, bz)) if footprint_check is not None else None
            if grid.__class__ is tuple and block.__class__ is tuple:  # a list may change
                last = (grid, block, shared_mem, stream, handle, call, footprints, config)
        values = fast_values(args, footprints)
        if values is None:
            values = checked_values(args, handle, footprints)
        send(values, config, call)

    def pack(args: Any, stream: int = 0) -> list[int]:
        """``Function.pack_args``: the values a launch with ``args`` would pack."""
        if args.__class__ is not tuple or len(args) != count:
            args = tuple(ordered(args))
        values = fast_values(args, None)
        return values if values is not None else in_order(args, stream, for_launch=False)[0]

    def prepare(
        gx: int,
        gy: int,
        gz: int,
        bx: int,
        by: int,
        bz: int,
        shared_mem: int,
        handle: int,
        bound_stream: Any,
        live: Stream | None,
    ) -> tuple[Callable[..., None], Callable[..., None]]:
        """A prepared launch and its ``raw``, for a checked geometry and stream."""
        call = (gx, gy, gz, bx, by, bz, shared_mem, bound_stream)
        config = make_config(*call) if launch_kernel_ex is not None else None
        footprints = footprint_check.at((gx, gy, gz, bx, by, bz)) if footprint_check is not None else None

        def prepared(*args: Any) -> None:
            if len(args) != count:
                ordered(args)  # raises, saying how many arguments it takes
            if not is_open:
                closed()
            if live is not None:
                _ = live.handle  # raises once the Stream is closed
            values = fast_values(args, footprints)
            if values is None:
                values = checked_values(args, handle, footprints)
            send(values, config, call)

        def raw(*values: int) -> None:
            # send() written out, without the call to it: the trusted path's host time
            # is what it is for
            if not is_open:
                closed()
            try:
                buf = take()
            except IndexError:
                buf = new_buffer()
            try:
                buf.pack(*values)
            except struct.error:  # not an int, one its C type cannot hold, or not as many
                give_back(buf)
                if len(values) != count:
                    wrong_count(values)
                raise
            if config is None:
                err = launch_kernel(function, gx, gy, gz, bx, by, bz, shared_mem, bound_stream, buf.params, 0)
            else:
                err = launch_kernel_ex(config, function, buf.params, 0)
            if returns_tuple:
                err = err[0]
            if err:
                relaunch(*call, buf)
            give_back(buf)

        return prepared, raw

    def wrong_count(values: tuple[int, ...]) -> None:
        """Raise the error that says how many arguments ``raw`` takes."""
        try:
            ordered(values)  # a tuple of another length: it raises
        except TypeError as err:
            raise err from None  # not from the struct.error that found it

    def close() -> None:
        nonlocal is_open
        is_open = False

    return PythonLaunchPath(launch, pack, prepare, close)
