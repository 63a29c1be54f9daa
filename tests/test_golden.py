"""Golden PTX: every shipped kernel at two dtypes and two block sizes, compared exactly.

Any change to emitted PTX shows up as a diff of tests/golden/ in review. After an
intended change, rewrite them with

    python -m pytest tests/test_golden.py --update-golden

and commit the diff with the change that caused it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import ptxgen

GOLDEN = Path(__file__).resolve().parent / "golden"

# (kernel class, dtype, block size, target, options): two dtypes x two block sizes per kernel,
# a power of two (a shift) and not (a multiply-high), two targets, and the calling variant.
CASES = [
    (cls, dtype, block_size, target, options)
    for cls in ptxgen.KERNELS.values()
    for dtype, block_size, target in (("f32", 128, "sm_75"), ("u8", 96, "sm_90"))
    for options in ({}, {"inline": False})
    if not options or dtype == "f32"
] + [(cls, "bf16", 256, "sm_80", {}) for cls in ptxgen.KERNELS.values()]


# The row gather's golden kernels differ only in chunks, granule and wide-chunk flags.
_ROW_GATHER = dict(
    direction="forward", unroll=1, block=64, loader="cp.async", row_gather=True, target="sm_90"
)

# The fast kernels take keyword arguments only: (class, arguments), two or three a family.
FASTCAT_CASES = [
    (ptxgen.kernels.FastcatVec, {"direction": "backward", "width": 16, "target": "sm_90"}),
    (  # what the planner launches for a byte-wide gather on sm_90
        ptxgen.kernels.FastcatVec,
        {"direction": "backward", "width": 1, "dependent_launch": True, "target": "sm_90"},
    ),
    (
        ptxgen.kernels.FastcatRect,
        {"direction": "backward", "width": 16, "cols": 8, "unroll": 2, "block": 128},
    ),
    (
        ptxgen.kernels.FastcatRect,
        {"direction": "forward", "width": 2, "cols": 2048, "unroll": 8, "block": 256, "target": "sm_75"},
    ),
    (
        ptxgen.kernels.FastcatRect,
        {"direction": "forward", "width": 8, "cols": 64, "chunks": 3, "unroll": 4, "block": 128},
    ),
    (ptxgen.kernels.FastcatRowpack, {"direction": "backward", "widths": (1, 3), "target": "sm_90"}),
    (ptxgen.kernels.FastcatRowpack, {"direction": "forward", "widths": (3, 5), "target": "sm_75"}),
    (
        ptxgen.kernels.FastcatRowpack,
        {"direction": "forward", "widths": (1, 3), "staged": True, "target": "sm_90"},
    ),
    (
        ptxgen.kernels.FastcatRowpack,
        {"direction": "backward", "widths": (1, 3), "staged": True, "outputs": (1,), "target": "sm_90"},
    ),
    # staged, with a word of chunk 1 stored as it is (no identity prmt)
    (ptxgen.kernels.FastcatRowpack, {"direction": "forward", "widths": (4, 12), "staged": True}),
    # a small op's narrow chunks: 1-, 2- and 8-byte accesses, and one whole row a group
    (ptxgen.kernels.FastcatRowpack, {"direction": "backward", "widths": (3, 5, 24), "narrow_chunks": True}),
    (ptxgen.kernels.FastcatRowpack, {"direction": "forward", "widths": (6, 10, 48), "narrow_chunks": True}),
    (
        ptxgen.kernels.FastcatTile,
        dict(direction="backward", chunks=2, granule=16, loader="regs", target="sm_90"),
    ),
    (
        ptxgen.kernels.FastcatTile,
        dict(direction="forward", chunks=3, granule=1, whole_rows=False, loader="cp.async", target="sm_80"),
    ),
    (
        ptxgen.kernels.FastcatTile,
        dict(direction="backward", chunks=1, granule=2, unroll=2, loader="bulk", target="sm_90"),
    ),
    (  # the two-piece walk of chunks 16 bytes or wider, at a byte granule
        ptxgen.kernels.FastcatTile,
        dict(direction="backward", chunks=2, granule=1, unroll=1, block=64, wide_chunks=True, target="sm_90"),
    ),
    (  # a narrow chunk between two wide ones: each chunk's code takes its own walk
        ptxgen.kernels.FastcatTile,
        dict(
            direction="backward",
            chunks=3,
            granule=1,
            unroll=1,
            block=64,
            wide_chunks=(True, False, True),
            target="sm_90",
        ),
    ),
    (  # a concat's row vectors read out of the staging area (the row gather)
        ptxgen.kernels.FastcatTile,
        dict(_ROW_GATHER, chunks=2, granule=1, wide_chunks=True),
    ),
    (  # ... at a 4-byte granule: aligned windows, no shifts, each word one piece's or the other's
        ptxgen.kernels.FastcatTile,
        dict(_ROW_GATHER, chunks=2, granule=4, wide_chunks=True),
    ),
    (  # ... and beside a narrow chunk: a window a piece
        ptxgen.kernels.FastcatTile,
        dict(_ROW_GATHER, chunks=3, granule=1, wide_chunks=(True, False, True)),
    ),
    (  # ... of twelve chunks: the table filled by warp 0, and a vector's chunk found by a binary search
        ptxgen.kernels.FastcatTile,
        dict(_ROW_GATHER, chunks=12, granule=8, wide_chunks=True),
    ),
    # the strided copy: 2-byte elements over 3 dims, and 16-byte ones with 64-bit strides
    (ptxgen.kernels.StridedCopy, dict(width=2, rank=3, target="sm_90")),
    # ... and three pieces in one launch, a grid row each
    (ptxgen.kernels.StridedCopy, dict(width=4, rank=2, pieces=3, target="sm_90")),
    (ptxgen.kernels.StridedCopy, dict(width=16, rank=2, wide_strides=True, target="sm_80")),
    (  # programmatic dependent launch: the prologue every dependent fast kernel has
        ptxgen.kernels.FastcatRect,
        dict(direction="backward", width=16, cols=32, chunks=2, unroll=2, block=128, dependent_launch=True),
    ),
]


def golden_name(cls, dtype, block_size, target, options) -> str:
    kernel = cls(dtype, block_size, target=target, **options)
    suffix = "".join(f"__{k}={v}" for k, v in sorted(options.items()))
    return f"{kernel.id}__{target}{suffix}.ptx"


@pytest.mark.parametrize("case", CASES, ids=lambda case: golden_name(*case).removesuffix(".ptx"))
def test_emitted_ptx_matches_golden(case, request):
    cls, dtype, block_size, target, options = case
    source = cls(dtype, block_size, target=target, **options).source
    path = GOLDEN / golden_name(*case)
    if request.config.getoption("--update-golden"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(source)
        return
    assert path.exists(), f"{path.name} is missing: run python -m pytest tests/test_golden.py --update-golden"
    assert source == path.read_text(), (
        f"{path.name} differs from the emitted PTX; if the change is intended, rewrite the golden files "
        "(python -m pytest tests/test_golden.py --update-golden) and commit the diff"
    )


@pytest.mark.parametrize("case", FASTCAT_CASES, ids=lambda case: case[0](**case[1]).id)
def test_fast_kernel_ptx_matches_golden(case, request):
    cls, kwargs = case
    kernel = cls(**kwargs)
    path = GOLDEN / f"{kernel.id}.ptx"
    if request.config.getoption("--update-golden"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(kernel.source)
        return
    assert path.exists(), f"{path.name} is missing: run python -m pytest tests/test_golden.py --update-golden"
    assert kernel.source == path.read_text(), (
        f"{path.name} differs from the emitted PTX; if the change is intended, rewrite the golden files "
        "(python -m pytest tests/test_golden.py --update-golden) and commit the diff"
    )


def test_every_shipped_kernel_has_golden_files():  # after the rewrite, when --update-golden
    named = {case[0] for case in CASES}
    assert named == set(ptxgen.KERNELS.values())
    on_disk = {p.name for p in GOLDEN.glob("*.ptx")}
    fast = {f"{cls(**kwargs).id}.ptx" for cls, kwargs in FASTCAT_CASES}
    assert on_disk == {golden_name(*case) for case in CASES} | fast, "stale or missing golden files"
