"""The channel-wise concatenation kernels of the seed: backward (a gather) and forward (a scatter).

Both copy one element per thread. The rows are the ``n_spatial`` positions (every
index before the concatenated dimension times every index after it), and the
channels of one input occupy ``chunk_offset .. chunk_offset + chunk_c`` of the
``c_total`` channels of the concatenation:

    backward:  dx[n * chunk_c + ci] = dy[n * c_total + chunk_offset + ci]
    forward:   y[n * c_total + chunk_offset + ci] = x[n * chunk_c + ci]

Launch contract (the seed's, teenygrad's ``ChannelCatBackward<D>``):
``n_spatial * cdiv(chunk_c, BLOCK_SIZE)`` CTAs of ``BLOCK_SIZE`` threads; CTA ``pid``
handles row ``pid / tiles`` and channels ``(pid % tiles) * BLOCK_SIZE + tid``, where
``tiles = cdiv(chunk_c, BLOCK_SIZE)``.
"""

from __future__ import annotations

import operator
from collections.abc import Hashable, Mapping
from typing import ClassVar

from ..args import Pointer, Scalar
from ..arith import magic_divisor
from ..dtypes import resolve_dtype
from ..footprint import Footprint, FootprintError, check_launch_block
from ..function import PtxFunction, PtxModule
from ..kernel import KernelBase
from ..ptxtypes import SPECIAL_REGS, Addr, Reg
from ..targets import resolve_target

__all__ = ["BLOCK_SIZES", "ChannelCatBackward", "ChannelCatForward", "check_block_size"]

# The block sizes the tests sweep; any multiple of 32 from 32 to 1024 is accepted.
BLOCK_SIZES = (32, 64, 96, 128, 256, 512, 1024)


def check_block_size(block_size: object) -> int:
    """``block_size`` as an int: a multiple of 32 from 32 to 1024 (numpy ints too)."""
    if isinstance(block_size, bool):
        number = None
    else:
        try:
            number = operator.index(block_size)  # type: ignore[arg-type]
        except TypeError:
            number = None
    if number is None:
        raise TypeError(
            f"block_size must be an int, not {type(block_size).__name__} {block_size!r}; "
            "accepted: multiples of 32 from 32 to 1024"
        )
    if not (32 <= number <= 1024) or number % 32:
        raise ValueError(f"block_size {number} is not accepted; accepted: multiples of 32 from 32 to 1024")
    return number


def _check_count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"{what} must be >= 0, got {value}")
    return value


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


_SCALAR = Scalar("i32", ptx_type="u32")  # the seed's i32 arguments, read as .u32
# The largest chunk_c + BLOCK_SIZE - 1 a launch can pass: chunk_c is an i32 >= 0.
_CHUNK_C_UP_MAX = _SCALAR.max + 1023


class _ChannelCat(KernelBase):
    """What both directions share; subclasses say which side is the wide one."""

    _formula: ClassVar[str]
    _args: ClassVar[tuple[tuple[str, str], ...]]  # (name, what it is) for the 5 parameters
    _gather: ClassVar[bool]  # True: the source has c_total channels per row

    @classmethod
    def cache_key(
        cls, dtype: object, block_size: object, *, target: str | None = None, inline: bool = True
    ) -> Hashable:
        if not isinstance(inline, bool):
            raise TypeError(f"inline must be True or False, not {inline!r}")
        return (resolve_dtype(dtype), check_block_size(block_size), resolve_target(target), inline)

    def __init__(
        self,
        dtype: object,
        block_size: int,
        *,
        target: str | None = None,
        inline: bool = True,
    ) -> None:
        self._dtype, self.block_size, self.target, self.inline = self.cache_key(
            dtype, block_size, target=target, inline=inline
        )
        self.id = f"{self.name}__{self._dtype.name}__{self.block_size}"
        self.arg_names = tuple(name for name, _ in self._args)
        self.arg_types = (
            Pointer(self._dtype, writes=False),
            Pointer(self._dtype, writes=True),
            _SCALAR,
            _SCALAR,
            _SCALAR,
        )
        self.block = (self.block_size, 1, 1)
        self._emit()

    @property
    def dtype(self) -> str:
        return self._dtype.name

    @property
    def grid_expression(self) -> tuple[str, str, str]:
        """How :meth:`grid` computes the launch grid, as three C expressions over
        ``n_spatial`` (rows) and the kernel's integer arguments (unsigned, integer
        division): what a runtime without Python evaluates (see ``python -m ptxgen bundle``)."""
        bs = self.block_size
        return (f"n_spatial * ((chunk_c + {bs - 1}) / {bs})", "1", "1")

    def grid(self, n_spatial: int, chunk_c: int) -> tuple[int, int, int]:
        """``(n_spatial * cdiv(chunk_c, block_size), 1, 1)``."""
        n_spatial = _check_count(n_spatial, "n_spatial")
        chunk_c = _check_count(chunk_c, "chunk_c")
        return (n_spatial * _cdiv(chunk_c, self.block_size), 1, 1)

    def footprints(
        self, grid: tuple[int, int, int], block: tuple[int, int, int], scalars: Mapping[str, int]
    ) -> tuple[Footprint, Footprint]:
        """What a launch with this grid and these scalars touches through ``src`` and ``dst``.

        Exact, from the launch contract: CTA ``pid`` covers row ``pid / tiles`` and
        channels ``(pid % tiles) * BLOCK_SIZE + tid`` below ``chunk_c``, so the last CTA
        decides the extent; ``grid.y``/``grid.z`` repeat the same work. Raises
        :class:`FootprintError` when ``chunk_offset + chunk_c > c_total`` (the chunk
        would spill into the next row) or the block is not the kernel's.
        """
        chunk_c, c_total, offset = scalars["chunk_c"], scalars["c_total"], scalars["chunk_offset"]
        if offset + chunk_c > c_total:
            raise FootprintError(
                f"{self.name}: chunk_offset + chunk_c = {offset} + {chunk_c} = {offset + chunk_c} "
                f"exceeds c_total = {c_total}: the chunk must lie within a row"
            )
        check_launch_block(self.name, block, self.block)
        src, dst = self.arg_names[0], self.arg_names[1]
        size = self._dtype.itemsize
        wide = narrow = 0
        if grid[0] > 0 and chunk_c > 0:
            tiles = _cdiv(chunk_c, self.block_size)
            last_row, last_tile = divmod(grid[0] - 1, tiles)
            last_ci = min(chunk_c - 1, last_tile * self.block_size + self.block_size - 1)
            wide = last_row * c_total + offset + last_ci + 1
            narrow = last_row * chunk_c + last_ci + 1
        src_elements, dst_elements = (wide, narrow) if self._gather else (narrow, wide)
        return (
            Footprint(src, src_elements, size, size, writes=False),
            Footprint(dst, dst_elements, size, size, writes=True),
        )

    @property
    def footprint_expressions(self) -> dict[str, dict[str, str | int]]:
        """The footprints of a launch on :attr:`grid_expression`'s grid, as C expressions
        (unsigned 64-bit) over ``n_spatial`` and the kernel's integer arguments, per pointer:
        ``elements`` touched from it (0 where ``if_nonzero`` is given and evaluates to 0) and
        the byte ``align`` it needs. :attr:`requires` says what the scalars must satisfy."""
        size = self._dtype.itemsize
        wide = {
            "elements": "(n_spatial - 1) * c_total + chunk_offset + chunk_c",
            "if_nonzero": "n_spatial * chunk_c",
        }
        narrow = {"elements": "n_spatial * chunk_c"}
        src, dst = self.arg_names[0], self.arg_names[1]
        src_fp, dst_fp = (wide, narrow) if self._gather else (narrow, wide)
        return {src: {**src_fp, "align": size}, dst: {**dst_fp, "align": size}}

    @property
    def requires(self) -> tuple[tuple[str, str], ...]:
        """Conditions a launch's scalars must meet, as C expressions ``(value, limit)``:
        ``value <= limit``. The chunk lies within a row."""
        return (("chunk_offset + chunk_c", "c_total"),)

    def __repr__(self) -> str:
        extra = "" if self.inline else ", inline=False"
        return (
            f"{type(self).__name__}({self._dtype.name!r}, {self.block_size}, target={self.target!r}{extra})"
        )

    # --- emission --------------------------------------------------------------------

    def _emit(self) -> None:
        bs = self.block_size
        src, dst = self.arg_names[0], self.arg_names[1]
        module = PtxModule(
            self.target,
            comment=[
                f"{self.name}: dtype {self._dtype.name}, BLOCK_SIZE {bs}, for {self.target} and newer.",
                "Written by ptxgen; regenerate rather than edit.",
                "",
                *self._formula.splitlines(),
                "for every row n < n_spatial and channel ci < chunk_c.",
                "",
                f"Launch: grid (n_spatial * cdiv(chunk_c, {bs}), 1, 1), block ({bs}, 1, 1).",
                "",
                *(
                    (
                        "The .func below is the kernel body; the entry point holds the same",
                        "instructions inline, since ptxas does not inline a call, which cost",
                        "up to 5.5% of bandwidth on an H200 (docs/design.md).",
                    )
                    if self.inline
                    else ("The entry point reads the parameters and calls the .func body.",)
                ),
            ],
        )
        body = module.func(self.name)
        params = {name: body.reg_param(name, t.ptx_type) for name, t in zip(self.arg_names, self.arg_types)}
        self._emit_copy(body, params, src, dst)

        entry = module.entry(self.entry_point_name)
        for (name, what), t in zip(self._args, self.arg_types):
            entry.param(name, t.ptx_type, comment=f"{t}: {what}")
        entry.directive(".reqntid", bs, 1, 1)
        regs = entry.load_params()
        if self.inline:
            self._emit_copy(entry, regs, src, dst)
        else:
            entry.banner("one element per thread: the kernel body does the work")
            entry.call(body, [regs[name] for name in self.arg_names])
            entry.inst("ret")

        self.ptx_version = module.version
        self.kernel_source = module.header() + "\n" + body.render()
        self.entry_point_source = entry.render()

    def _emit_copy(self, fn: PtxFunction, p: dict[str, Reg], src: str, dst: str) -> None:
        """The body: find this thread's (n, ci), compute both addresses, copy one element."""
        bs, dt = self.block_size, self._dtype
        pid, thread = fn.reg("pid", "u32"), fn.reg("thread", "u32")
        chunk_c_up, tiles = fn.reg("chunk_c_up", "u32"), fn.reg("tiles", "u32")
        n, row_first_pid = fn.reg("n", "u32"), fn.reg("row_first_pid", "u32")
        tile, ci = fn.reg("tile", "u32"), fn.reg("ci", "u32")
        channel = fn.reg("channel", "u32")
        past_end = fn.reg("past_end", "pred")
        ci_wide, channel_wide = fn.reg("ci_wide", "u64"), fn.reg("channel_wide", "u64")
        src_index, dst_index = fn.reg(f"{src}_index", "u64"), fn.reg(f"{dst}_index", "u64")
        src_addr, dst_addr = fn.reg(f"{src}_addr", "u64"), fn.reg(f"{dst}_addr", "u64")
        value = fn.reg("value", dt.reg_type)

        fn.banner("which row (n) and which channel (ci) this thread owns")
        fn.inst("mov.u32", pid, SPECIAL_REGS["ctaid.x"], comment="one CTA per (row, tile of channels)")
        fn.inst("mov.u32", thread, SPECIAL_REGS["tid.x"], comment="this thread's place in the CTA")
        fn.inst("add.u32", chunk_c_up, p["chunk_c"], bs - 1, comment=f"tiles = cdiv(chunk_c, {bs})")
        # BLOCK_SIZE is a constant, so no divide instruction (ptxas would emit a generic one).
        magic, shift = magic_divisor(bs, _CHUNK_C_UP_MAX)
        if magic == 0:
            fn.inst("shr.u32", tiles, chunk_c_up, shift, comment=f"  = (chunk_c + {bs - 1}) / {bs}, a shift")
        else:
            scaled = fn.reg("tiles_scaled", "u32")
            fn.inst("mul.hi.u32", scaled, chunk_c_up, magic,
                    comment=f"  = (chunk_c + {bs - 1}) * ceil(2**{32 + shift} / {bs})")  # fmt: skip
            fn.inst("shr.u32", tiles, scaled, shift, comment=f"    >> {32 + shift}, i.e. / {bs}")
        fn.inst("div.u32", n, pid, tiles, comment="n = pid / tiles")
        fn.inst("mul.lo.u32", row_first_pid, n, tiles)
        fn.inst("sub.u32", tile, pid, row_first_pid, comment="tile = pid % tiles")
        fn.inst("mad.lo.u32", ci, tile, bs, thread, comment=f"ci = tile * {bs} + tid")

        fn.banner("threads past the end of the row have nothing to do")
        fn.inst("setp.ge.u32", past_end, ci, p["chunk_c"], comment="only the last tile of a row")
        with fn.unless(past_end, label="done"):
            fn.banner("element indices in 64 bits: n * c_total can pass 2**31 elements")
            fn.inst("cvt.u64.u32", ci_wide, ci)
            fn.inst("add.u32", channel, p["chunk_offset"], ci, comment="< c_total, so it fits 32 bits")
            fn.inst("cvt.u64.u32", channel_wide, channel)
            wide_index, narrow_index = (src_index, dst_index) if self._gather else (dst_index, src_index)
            fn.inst("mad.wide.u32", wide_index, n, p["c_total"], channel_wide,
                    comment="n * c_total + chunk_offset + ci")  # fmt: skip
            fn.inst("mad.wide.u32", narrow_index, n, p["chunk_c"], ci_wide, comment="n * chunk_c + ci")

            size = dt.itemsize
            fn.banner(f"byte addresses: base + index * {size} ({dt.name} is {size} byte{'s' * (size > 1)})")
            for name, index, addr in ((src, src_index, src_addr), (dst, dst_index, dst_addr)):
                if size == 1:
                    fn.inst("add.u64", addr, p[name], index, comment=f"&{name}[{name}_index]")
                else:
                    fn.inst("mad.lo.u64", addr, index, size, p[name], comment=f"&{name}[{name}_index]")

            fn.banner(f"copy one element; {src} is only read, so it may use the non-coherent path")
            fn.inst(f"ld.global.nc.{dt.mem_type}", value, Addr(src_addr))
            fn.inst(f"st.global.{dt.mem_type}", Addr(dst_addr), value)
        fn.inst("ret")


class ChannelCatBackward(_ChannelCat):
    """Gathers one input's gradient from the upstream gradient of a concatenation.

    ``dx[n * chunk_c + ci] = dy[n * c_total + chunk_offset + ci]``. Arguments:
    ``(dy, dx, chunk_c, c_total, chunk_offset)``, typed ``(*mut D, *mut D, i32, i32, i32)``.
    """

    name = "channel_cat_backward"
    _formula = "dx[n * chunk_c + ci] = dy[n * c_total + chunk_offset + ci]"
    _args = (
        ("dy", "upstream gradient, n_spatial rows of c_total channels"),
        ("dx", "this input's gradient, n_spatial rows of chunk_c channels"),
        ("chunk_c", "channels of this input"),
        ("c_total", "channels of the concatenation"),
        ("chunk_offset", "first channel of this input in the concatenation"),
    )
    _gather = True


class ChannelCatForward(_ChannelCat):
    """Scatters one input into its channels of a concatenation.

    ``y[n * c_total + chunk_offset + ci] = x[n * chunk_c + ci]``. Arguments:
    ``(x, y, chunk_c, c_total, chunk_offset)``, typed ``(*mut D, *mut D, i32, i32, i32)``.
    """

    name = "channel_cat_forward"
    _formula = "y[n * c_total + chunk_offset + ci] = x[n * chunk_c + ci]"
    _args = (
        ("x", "this input, n_spatial rows of chunk_c channels"),
        ("y", "the concatenation, n_spatial rows of c_total channels"),
        ("chunk_c", "channels of this input"),
        ("c_total", "channels of the concatenation"),
        ("chunk_offset", "first channel of this input in the concatenation"),
    )
    _gather = False
