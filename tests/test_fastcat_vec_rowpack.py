"""FastcatVec and FastcatRowpack on the CPU:

* for every code path (width, chunk count, direction, unroll; rowpack direct and staged)
  on sm_75, sm_80 and sm_90, ptxas assembles them with no spills or stack and with loads
  and stores as wide as intended (that the ports give the prototype's SASS, which the
  first measurements were taken with, is lab/test_port.py's);
* in the PTX interpreter (tests/ptxsim.py), on odd shapes, the right bytes move, and every
  byte touched lies in [pointer, pointer + footprint) with both ends touched (tight);
* bad arguments raise before anything is emitted, naming the value and what is accepted.
"""

from __future__ import annotations

import random
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from ptxsim import RecordingMemory, check_footprints, run_kernel

from ptxgen import toolchain
from ptxgen.footprint import FootprintError
from ptxgen.kernels import FastcatRowpack, FastcatVec, rowpack_rows
from ptxgen.kernels.fastcat_common import WIDTHS

TARGETS = ("sm_75", "sm_80", "sm_90")
_SIZE = {"128": 16, "64": 8, "U16": 2, "S16": 2, "U8": 1, "S8": 1}


def _variants() -> list[tuple[str, str, dict, dict[str, set[int]]]]:
    """(label, family, keyword arguments, expected {SASS opcode: access sizes}): every code
    path of each family on every target, each option at least once (not their product)."""
    out = []
    for t in TARGETS:
        for w in WIDTHS:
            for d in ("backward", "forward"):
                for k in (1, 3):
                    kw = {"direction": d, "width": w, "chunks": k, "target": t}
                    out.append((f"vec/{d}/w{w}/k{k}/{t}", "vec", kw, {"LDG": {w}, "STG": {w}}))
        for w, extra in (
            (4, {"unroll": 1}),
            (2, {"unroll": 16, "block": 64}),
            (16, {"unroll": 8, "chunks": 32}),
        ):
            kw = {"direction": "forward", "width": w, "target": t, **extra}
            tag = "/".join(f"{a}={b}" for a, b in extra.items())
            out.append((f"vec/forward/w{w}/{tag}/{t}", "vec", kw, {"LDG": {w}, "STG": {w}}))
        if t == "sm_90":  # what the planner launches: a byte-wide gather, dependent launch
            kw = {"direction": "backward", "width": 1, "dependent_launch": True, "target": t}
            out.append((f"vec/backward/w1/pdl/{t}", "vec", kw, {"LDG": {1}, "STG": {1}}))
        for widths in ((1, 3), (3, 5), (1, 1, 2)):
            for d in ("backward", "forward"):
                for staged in (False, True):
                    kw = {"direction": d, "widths": widths, "staged": staged, "target": t}
                    # 16-byte vectors; single bytes only for the last rows % n rows
                    tag = "staged" if staged else "direct"
                    out.append(
                        (f"rowpack/{d}/{widths}/{tag}/{t}", "rowpack", kw, {"LDG": {16, 1}, "STG": {16, 1}})
                    )
    return out


VARIANTS = _variants()
_FAMILIES = {"vec": FastcatVec, "rowpack": FastcatRowpack}


def _normalised(sass: str) -> list[str]:
    """SASS lines without comments and without lines that name symbols (which may differ)."""
    lines = []
    for line in sass.splitlines():
        line = re.sub(r"/\*[^*]*\*/", "", line.split("//")[0]).strip()
        if line and "entry_point" not in line and not line.startswith((".", '@"')):
            lines.append(line)
    return lines


@pytest.fixture(scope="module")
def built():
    try:
        toolchain.find_tool("ptxas")
        toolchain.find_tool("nvdisasm")
    except toolchain.ToolNotFound as err:
        pytest.fail(f"{err} (it is part of the test extra: pip install -e '.[test]')")
    kernels = [_FAMILIES[fam](**kw) for _, fam, kw, _ in VARIANTS]

    def sass(r):
        return r if isinstance(r, Exception) else (r, toolchain.disassemble(r.cubin))

    with ThreadPoolExecutor() as pool:
        done = list(pool.map(sass, toolchain.assemble_many([(k.source, k.target) for k in kernels])))
    return {label: (kernels[i], done[i]) for i, (label, *_) in enumerate(VARIANTS)}


def _access_sizes(code: str, op: str) -> set[int]:
    sizes = set()
    for m in re.finditer(rf"\b{op}(\.[\w.]+)?\s", code):
        parts = (m.group(1) or "").split(".")
        size = [_SIZE[p] for p in parts if p in _SIZE]
        sizes.add(size[0] if size else 4)
    return sizes


@pytest.mark.parametrize("label, family, kwargs, expect", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_no_spills_and_the_intended_access_widths(built, label, family, kwargs, expect):
    new, new_built = built[label]
    if isinstance(new_built, Exception):
        pytest.fail(str(new_built))
    new_res, new_sass = new_built
    assert len(_normalised(new_sass)) > 20
    res = new_res.functions[new.entry_point_name]
    assert res.stack_bytes == 0 and res.spill_store_bytes == 0 and res.spill_load_bytes == 0, res
    if family == "rowpack" and kwargs["staged"]:
        assert _access_sizes(new_sass, "LDS") == {16} and _access_sizes(new_sass, "STS") == {16}
    for op, sizes in expect.items():
        assert _access_sizes(new_sass, op) == sizes, (op, sorted(_access_sizes(new_sass, op)))


def test_constructed_once_per_arguments():
    a = FastcatVec(direction="forward", width=8, chunks=2)
    assert a is FastcatVec(width=8, direction="forward", chunks=2, target="sm_90")
    assert a is not FastcatVec(direction="forward", width=8, chunks=2, unroll=2)
    assert FastcatRowpack(direction="backward", widths=[1, 3]) is FastcatRowpack(
        direction="backward", widths=(1, 3)
    )
    assert a.name == "fastcat_vec_forward" and a.entry_point_name == "fastcat_vec_forward_entry_point"


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: FastcatVec(direction="up", width=4), "direction 'up'; accepted: 'backward', 'forward'"),
        (
            lambda: FastcatVec(direction="forward", width=4, block=96),
            "block = 96 is not accepted; accepted: 64, 128",
        ),
        (lambda: FastcatVec(direction="forward", width=4, block=True), "block = True is not accepted"),
        (lambda: FastcatVec(direction="forward", width=4, target="sm_70"), "unknown target 'sm_70'"),
        (
            lambda: FastcatVec(direction="forward", width=3),
            "width = 3 is not accepted; accepted: 16, 8, 4, 2, 1",
        ),
        (
            lambda: FastcatVec(direction="forward", width=4, chunks=33),
            "chunks = 33 is not accepted; accepted: an int in 1..32",
        ),
        (lambda: FastcatVec(direction="forward", width=4, chunks=0), "chunks = 0 is not accepted"),
        (
            lambda: FastcatVec(direction="forward", width=4, unroll=32),
            "unroll = 32 is not accepted; accepted: 1, 2, 4, 8, 16",
        ),
        (
            lambda: FastcatVec(direction="forward", width=4, dependent_launch=True, target="sm_80"),
            "dependent_launch=True needs sm_90 or newer",
        ),
        (
            lambda: FastcatRowpack(direction="backward", widths=()),
            "widths must be 1 to 8 ints >= 1 (bytes), got ()",
        ),
        (lambda: FastcatRowpack(direction="backward", widths=(1, 0)), "got (1, 0)"),
        (lambda: FastcatRowpack(direction="backward", widths=(1,) * 9), "widths must be 1 to 8 ints"),
        (
            lambda: FastcatRowpack(direction="backward", widths=5),
            "widths must be 1 to 8 ints >= 1 (bytes), got 5",
        ),
        (
            lambda: FastcatRowpack(direction="backward", widths=(1, 8)),
            "16 rows of 9 bytes = 144 bytes a thread; at most 128",
        ),
        (lambda: FastcatRowpack(direction="sideways", widths=(1, 3)), "direction 'sideways'"),
        (
            lambda: FastcatRowpack(direction="backward", widths=(1, 3), outputs=(2,)),
            "outputs = (2,) is not accepted; accepted: None or distinct ascending chunk indices in 0..1",
        ),
        (lambda: FastcatRowpack(direction="backward", widths=(1, 3), outputs=(1, 0)), "outputs = (1, 0)"),
        (lambda: FastcatRowpack(direction="backward", widths=(1, 3), outputs=()), "outputs = ()"),
        (lambda: FastcatRowpack(direction="backward", widths=(1, 3), outputs=1), "outputs = 1"),
        (lambda: FastcatRowpack(direction="backward", widths=(1, 3), outputs=(True,)), "outputs = (True,)"),
        (
            lambda: FastcatRowpack(direction="forward", widths=(1, 3), outputs=(1,)),
            "a forward rowpack writes whole rows of y, so it takes every chunk",
        ),
    ],
)
def test_refuses_what_it_cannot_build(make, message):
    with pytest.raises((ValueError, TypeError)) as err:
        make()
    assert message in str(err.value)


# --------------------------------------------------------------------------- footprints, in the interpreter


def _fill(rng: random.Random, n: int) -> bytes:
    return bytes(rng.randrange(256) for _ in range(n))


# (width, rows, window start, chunk widths, extra chunk pitch, row-side misalignment), all in bytes
VEC_CASES = [
    (16, 5, 16, (32, 48), (0, 16), 0),
    (8, 7, 8, (8, 24, 40), (0, 0, 8), 8),
    (4, 13, 4, (12,), (4,), 4),
    (2, 9, 6, (2, 10, 6), (0, 2, 0), 2),
    (1, 11, 3, (5, 1, 7), (0, 0, 3), 3),
    (1, 1, 0, (3,), (0,), 5),
    (4, 3, 0, (4, 4, 4, 4, 4), (0,) * 5, 12),
]


@pytest.mark.parametrize("direction", ["backward", "forward"])
@pytest.mark.parametrize("grid", [1, 3])
@pytest.mark.parametrize("case", VEC_CASES, ids=lambda c: f"w{c[0]}-rows{c[1]}-k{len(c[3])}")
def test_vec_moves_the_right_bytes_inside_its_footprints(case, grid, direction):
    w, rows, start, widths, pads, misalign = case
    rng = random.Random(rows * 31 + w)
    window = sum(widths)
    pitch = start + window + 2 * w  # columns before and after the window
    c_pitches = [cw + pad for cw, pad in zip(widths, pads)]
    k = FastcatVec(direction=direction, width=w, chunks=len(widths), unroll=2, block=64)
    mem = RecordingMemory()
    row = mem.alloc(rows * pitch, misalign)
    chunks = [
        mem.alloc((rows - 1) * cp + cw, (3 * w * (i + 1)) % 16)
        for i, (cw, cp) in enumerate(zip(widths, c_pitches))
    ]
    backward = direction == "backward"
    mem.view(row)[:] = _fill(rng, rows * pitch) if backward else b"\xa5" * (rows * pitch)
    for c in chunks:
        n = len(mem.view(c))
        mem.view(c)[:] = b"\xa5" * n if backward else _fill(rng, n)
    before = {c: bytes(mem.view(c)) for c in [row, *chunks]}
    scalars = {"row_pitch": pitch, "rows": rows, "window_vectors": window // w}
    args = {"row_base": row + start, **scalars}
    col = 0
    for i, (c, cw, cp) in enumerate(zip(chunks, widths, c_pitches)):
        args |= {f"chunk{i}_ptr": c, f"chunk{i}_pitch": cp}
        scalars[f"chunk{i}_pitch"] = cp
        if len(widths) > 1:
            args[f"chunk{i}_start"] = scalars[f"chunk{i}_start"] = col // w
        col += cw
    mem.clear()
    run_kernel(k, grid, args, mem)
    r = bytes(mem.view(row))
    col = start
    for c, cw, cp in zip(chunks, widths, c_pitches):
        got = bytes(mem.view(c))
        for i in range(rows):
            assert got[i * cp : i * cp + cw] == r[i * pitch + col : i * pitch + col + cw]
            if backward and i < rows - 1:  # the pitch's padding is left alone
                assert got[i * cp + cw : (i + 1) * cp] == before[c][i * cp + cw : (i + 1) * cp]
        col += cw
    if not backward:  # columns outside the window are left alone
        for i in range(rows):
            lo, hi = i * pitch + start, i * pitch + start + window
            assert (
                r[:lo][i * pitch :] == before[row][i * pitch : lo]
                and r[hi : (i + 1) * pitch] == before[row][hi : (i + 1) * pitch]
            )
    pointers = {"row_base": row + start, **{f"chunk{i}_ptr": c for i, c in enumerate(chunks)}}
    check_footprints(mem, k.footprints((grid, 1, 1), k.block, scalars), pointers)


def test_vec_footprints_refuse_launches_it_cannot_do():
    k = FastcatVec(direction="backward", width=4, chunks=2)
    good = {
        "row_pitch": 16,
        "rows": 3,
        "window_vectors": 4,
        "chunk0_pitch": 8,
        "chunk1_pitch": 8,
        "chunk1_start": 2,
    }
    fps = k.footprints((1, 1, 1), k.block, good)
    assert [(f.arg, f.nbytes, f.align, f.writes) for f in fps] == [
        ("row_base", 32 + 16, 4, False),
        ("chunk0_ptr", 16 + 8, 4, True),
        ("chunk1_ptr", 16 + 8, 4, True),
    ]
    assert [f.nbytes for f in k.footprints((0, 1, 1), k.block, good)] == [0, 0, 0]
    assert [f.nbytes for f in k.footprints((1, 1, 1), k.block, good | {"rows": 0, "window_vectors": 0})] == [
        0,
        0,
        0,
    ]
    for bad, message in [
        ({"row_pitch": 18}, "pitch 18 is not a multiple of the access width 4"),
        ({"chunk1_pitch": 6}, "pitch 6 is not a multiple"),
        ({"window_vectors": 0}, "window_vectors = 0 is not accepted; accepted: 1..2**31"),
        ({"window_vectors": 2**31 + 1}, "window_vectors = 2147483649"),
        ({"window_vectors": 5}, "wider than row_pitch 16"),
        (
            {"chunk1_start": 1},
            "chunk 0 gets 1 vectors"[:0] + "chunk 1 gets 3 vectors of 4 bytes a row, wider than its pitch 8",
        ),
    ]:
        with pytest.raises(FootprintError, match=re.escape(message)):
            k.footprints((1, 1, 1), k.block, good | bad)
    k5 = FastcatVec(direction="backward", width=4, chunks=3)
    with pytest.raises(FootprintError, match="must ascend"):
        k5.footprints((1, 1, 1), k5.block, good | {"chunk2_pitch": 8, "chunk1_start": 3, "chunk2_start": 1})
    with pytest.raises(FootprintError, match="built for block"):
        k.footprints((1, 1, 1), (128, 1, 1), good)


@pytest.mark.parametrize("widths", [(1, 3), (3, 5), (2, 6), (1, 1, 2), (4, 12)])
# 2,500 rows: more groups than two CTAs of 64 threads hold, so the grid strides and the
# last CTA's share is partial.
@pytest.mark.parametrize("rows", [1, 5, 17, 40, 2500])
@pytest.mark.parametrize("direction", ["backward", "forward"])
@pytest.mark.parametrize("staged", [False, True], ids=["direct", "staged"])
def test_rowpack_moves_the_right_bytes_inside_its_footprints(widths, rows, direction, staged):
    rng = random.Random(rows + sum(widths))
    k = FastcatRowpack(direction=direction, widths=widths, block=64, staged=staged)
    pitch, offs = sum(widths), [sum(widths[:i]) for i in range(len(widths))]
    mem = RecordingMemory()
    row = mem.alloc(rows * pitch)
    chunks = [mem.alloc(rows * w) for w in widths]
    backward = direction == "backward"
    mem.view(row)[:] = _fill(rng, rows * pitch) if backward else b"\xa5" * (rows * pitch)
    for c, w in zip(chunks, widths):
        mem.view(c)[:] = b"\xa5" * (rows * w) if backward else _fill(rng, rows * w)
    mem.clear()
    grid = 2
    run_kernel(
        k, grid, {"row_ptr": row, "rows": rows, **{f"chunk{i}_ptr": c for i, c in enumerate(chunks)}}, mem
    )
    r = bytes(mem.view(row))
    for c, w, o in zip(chunks, widths, offs):
        assert bytes(mem.view(c)) == b"".join(r[i * pitch + o : i * pitch + o + w] for i in range(rows))
    fps = k.footprints((grid, 1, 1), k.block, {"rows": rows})
    assert {f.align for f in fps} == {16 if rows >= rowpack_rows(widths) else 1}
    check_footprints(mem, fps, {"row_ptr": row, **{f"chunk{i}_ptr": c for i, c in enumerate(chunks)}})


@pytest.mark.parametrize(
    "widths, outputs",
    [((1, 3), (1,)), ((1, 3), (0,)), ((3, 5), (1,)), ((2, 6), (0,)), ((1, 1, 2), (2,)), ((1, 1, 2), (0, 2))],
)
@pytest.mark.parametrize("rows", [1, 17, 40, 2500])
@pytest.mark.parametrize("staged", [False, True], ids=["direct", "staged"])
def test_rowpack_gather_writes_its_chunks_only(widths, outputs, rows, staged):
    """``outputs``: whole rows read, only the chosen chunks written. The other chunks get
    no pointer at all, so a byte written anywhere else would fall outside every allocation."""
    rng = random.Random(rows + 7 * sum(widths))
    k = FastcatRowpack(direction="backward", widths=widths, block=64, staged=staged, outputs=outputs)
    assert k.arg_names == ("row_ptr", "rows", *(f"chunk{i}_ptr" for i in outputs))
    assert "__out" + "_".join(map(str, outputs)) in k.id
    pitch, offs = sum(widths), [sum(widths[:i]) for i in range(len(widths))]
    mem = RecordingMemory()
    row = mem.alloc(rows * pitch)
    chunks = {i: mem.alloc(rows * widths[i]) for i in outputs}
    mem.view(row)[:] = _fill(rng, rows * pitch)
    for i, c in chunks.items():
        mem.view(c)[:] = b"\xa5" * (rows * widths[i])
    mem.clear()
    pointers = {f"chunk{i}_ptr": c for i, c in chunks.items()}
    run_kernel(k, 2, {"row_ptr": row, "rows": rows, **pointers}, mem)
    r = bytes(mem.view(row))
    for i, c in chunks.items():
        want = b"".join(r[j * pitch + offs[i] : j * pitch + offs[i] + widths[i]] for j in range(rows))
        assert bytes(mem.view(c)) == want, i
    fps = k.footprints((2, 1, 1), k.block, {"rows": rows})
    assert [(f.arg, f.writes) for f in fps] == [("row_ptr", False), *((p, True) for p in pointers)]
    assert {f.align for f in fps} == {16 if rows >= rowpack_rows(widths, outputs) else 1}
    check_footprints(mem, fps, {"row_ptr": row, **pointers})


def test_rowpack_outputs_of_every_chunk_is_the_split():
    every = FastcatRowpack(direction="backward", widths=(1, 3), outputs=(0, 1))
    assert every is FastcatRowpack(direction="backward", widths=(1, 3))
    assert every.outputs == (0, 1) and "__out" not in every.id
    # a group only has to make whole vectors of the chunks it writes
    assert rowpack_rows((4, 12)) == 4 and rowpack_rows((4, 12), (1,)) == 4
    assert rowpack_rows((8, 4, 4)) == 4 and rowpack_rows((8, 4, 4), (0,)) == 2


# (widths, the accesses each chunk's group moves in): one row a group where the row is
# whole vectors (3+5+24: 1-, 1- and 8-byte accesses), 16 rows of 7 bytes, 2-byte accesses.
NARROW = [
    ((3, 5, 24), (1, 1, 8)),
    ((6, 10, 48), (2, 2, 16)),
    ((12, 20, 96), (4, 4, 16)),
    ((6, 10), (2, 2)),
    ((3, 4), (16, 16)),
    ((1, 2, 5), (2, 4, 2)),
    ((2, 6, 4, 12), (4, 4, 8, 8)),
]


@pytest.mark.parametrize("widths, units", NARROW, ids=lambda v: "+".join(map(str, v)))
@pytest.mark.parametrize("rows", [1, 17, 300])
@pytest.mark.parametrize("direction", ["backward", "forward"])
@pytest.mark.parametrize("aligned", [True, False], ids=["aligned", "least-aligned"])
def test_rowpack_narrow_chunks_move_the_right_bytes_inside_their_footprints(
    widths, units, rows, direction, aligned
):
    """``narrow_chunks``: groups make whole vectors of the row side only; each chunk moves
    in the widest access its group's bytes allow, and its footprint asks that alignment.
    ``least-aligned``: each chunk at the weakest alignment its access takes (an address
    ``unit`` past 16; the interpreter refuses a misaligned access)."""
    rng = random.Random(rows + 3 * sum(widths))
    k = FastcatRowpack(direction=direction, widths=widths, block=64, narrow_chunks=True)
    assert tuple(k.units[i] for i in range(len(widths))) == units and "__narrow" in k.id
    assert k.rows_per_thread == rowpack_rows(widths, ())
    pitch, offs = sum(widths), [sum(widths[:i]) for i in range(len(widths))]
    mem = RecordingMemory()
    row = mem.alloc(rows * pitch)
    chunks = [mem.alloc(rows * w, misalign=0 if aligned else u % 16) for w, u in zip(widths, units)]
    backward = direction == "backward"
    mem.view(row)[:] = _fill(rng, rows * pitch) if backward else b"\xa5" * (rows * pitch)
    for c, w in zip(chunks, widths):
        mem.view(c)[:] = b"\xa5" * (rows * w) if backward else _fill(rng, rows * w)
    mem.clear()
    pointers = {f"chunk{i}_ptr": c for i, c in enumerate(chunks)}
    run_kernel(k, 2, {"row_ptr": row, "rows": rows, **pointers}, mem)
    r = bytes(mem.view(row))
    for c, w, o in zip(chunks, widths, offs):
        assert bytes(mem.view(c)) == b"".join(r[i * pitch + o : i * pitch + o + w] for i in range(rows))
    fps = k.footprints((2, 1, 1), k.block, {"rows": rows})
    whole = rows >= k.rows_per_thread
    assert [f.align for f in fps] == [16 if whole else 1, *(u if whole else 1 for u in units)]
    check_footprints(mem, fps, {"row_ptr": row, **pointers})


def test_rowpack_narrow_chunks_gather_and_refusals():
    k = FastcatRowpack(direction="backward", widths=(3, 5, 24), outputs=(2,), narrow_chunks=True)
    assert k.rows_per_thread == 1 and k.units == {2: 8}
    assert "st.global.v2.u32" in k.source and "st.global.b8" not in k.source  # one row a group: no tail
    with pytest.raises(ValueError, match="narrow_chunks = True is not accepted with staged = True"):
        FastcatRowpack(direction="backward", widths=(3, 5, 24), staged=True, narrow_chunks=True)
    with pytest.raises(ValueError, match="narrow_chunks = 1 is not accepted"):
        FastcatRowpack(direction="backward", widths=(3, 5, 24), narrow_chunks=1)
    with pytest.raises(ValueError, match="at most 128"):
        FastcatRowpack(direction="backward", widths=(3, 5, 25), narrow_chunks=True)  # 16 rows of 33 bytes
