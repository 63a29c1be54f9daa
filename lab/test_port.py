"""The ports against the prototype they were made from (lab/fastcat_proto.py, frozen): the
first design runs were measured with the prototype's kernels, so where a port gives the
same machine code, those figures hold for it.

* FastcatVec (ptxgen, every configuration it still builds) and FastcatFlatCopy (lab/) give
  the prototype's SASS for every code path on sm_75, sm_80 and sm_90, and the same names,
  ids, arguments, blocks and shared memory;
* FastcatTile left the prototype's SASS on purpose (tests/test_fastcat_tile.py says why) but
  keeps its names, ids, arguments, shared memory and refusals for every configuration both
  build; it refuses one the prototype builds: backward tiles through cp.async.

Moved from tests/test_fastcat_port.py and tests/test_fastcat_tile.py; run with
``python -m pytest lab``.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import fastcat_proto as proto
import pytest
from fastcat_flat_copy import FastcatFlatCopy

from ptxgen import toolchain
from ptxgen.kernels import FastcatTile, FastcatVec
from ptxgen.kernels.tile_chunks import _TABLE_ENTRY

TARGETS = ("sm_75", "sm_80", "sm_90")
# What the prototype's vec takes that ptxgen's no longer does, at the values ptxgen's has.
_VEC_DEFAULTS = {"streaming_stores": False, "layout": "block", "load_hint": None}


def _variants() -> list[tuple[str, str, dict]]:
    """(label, family, keyword arguments): every code path of each port on every target."""
    out = []
    for t in TARGETS:
        hints = (None, "L1::no_allocate") + (("L2::256B",) if t != "sm_75" else ())
        flat = [{"layout": lay, "load_hint": h} for lay in ("block", "grid") for h in hints]
        flat += [{"unroll": 1, "block": 1024}, {"unroll": 8, "layout": "block"}]
        for extra in flat:
            tag = "/".join(f"{a}={b}" for a, b in extra.items())
            out.append((f"flat/{tag}/{t}", "flat", {**extra, "target": t}))
        for w in proto.WIDTHS:
            for d in ("backward", "forward"):
                for k in (1, 3):
                    kw = {"direction": d, "width": w, "chunks": k, "target": t}
                    out.append((f"vec/{d}/w{w}/k{k}/{t}", "vec", kw))
        extras = ((4, {"unroll": 1}), (2, {"unroll": 16, "block": 64}), (16, {"unroll": 8, "chunks": 32}))
        for w, extra in extras:
            tag = "/".join(f"{a}={b}" for a, b in extra.items())
            kw = {"direction": "forward", "width": w, "target": t, **extra}
            out.append((f"vec/forward/w{w}/{tag}/{t}", "vec", kw))
    return out


VARIANTS = _variants()
_PORT = {"flat": FastcatFlatCopy, "vec": FastcatVec}
_PROTO = {"flat": proto.flat_copy_kernel, "vec": proto.vec_kernel}


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
    kernels = [(_PROTO[fam](**kw), _PORT[fam](**kw)) for _, fam, kw in VARIANTS]
    jobs = [(k.source, k.target) for pair in kernels for k in pair]

    def sass(r):
        return r if isinstance(r, Exception) else (r, toolchain.disassemble(r.cubin))

    with ThreadPoolExecutor() as pool:
        results = iter(pool.map(sass, toolchain.assemble_many(jobs)))
    return {label: (kernels[i], next(results), next(results)) for i, (label, *_) in enumerate(VARIANTS)}


@pytest.mark.parametrize("label, family, kwargs", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_same_sass_as_the_prototype(built, label, family, kwargs):
    (old, new), old_built, new_built = built[label]
    for got in (old_built, new_built):
        if isinstance(got, Exception):
            pytest.fail(str(got))
    assert (new.name, new.id, new.target, new.ptx_version) == (old.name, old.id, old.target, old.ptx_version)
    assert (new.arg_names, new.arg_types, new.block) == (old.arg_names, old.arg_types, old.block)
    assert (new.block_size, new.shared_bytes) == (old.block_size, old.shared_bytes)
    info = dict(old.info)
    if family == "vec":
        assert {k: info.pop(k) for k in _VEC_DEFAULTS} == _VEC_DEFAULTS
    assert new.info == info
    (old_res, old_sass), (new_res, new_sass) = old_built, new_built
    assert _normalised(new_sass) == _normalised(old_sass) and len(_normalised(new_sass)) > 20
    assert new_res.functions[new.entry_point_name] == old_res.functions[old.entry_point_name]


def _tile_configs() -> list[dict]:
    out = []
    for direction in ("backward", "forward"):
        for g in (16, 8, 4, 2, 1):
            for whole in (True, False):
                for loader in ("regs", "cp.async", "bulk"):
                    for target in TARGETS:
                        out.append(dict(direction=direction, chunks=2, granule=g, whole_rows=whole, unroll=2,
                                        block=64, loader=loader, target=target))  # fmt: skip
    for chunks, unroll, block in ((1, 1, 128), (3, 4, 256), (32, 8, 64), (5, 8, 128)):
        for direction, loader in (("backward", "regs"), ("forward", "cp.async"), ("backward", "bulk"),
                                  ("backward", "cp.async"), ("forward", "regs")):  # fmt: skip
            whole = loader == "bulk" or chunks > 3
            out.append(dict(direction=direction, chunks=chunks, granule=4, whole_rows=whole, unroll=unroll,
                            block=block, loader=loader, target="sm_90"))  # fmt: skip
    return out


def test_the_tile_kernel_keeps_the_prototypes_attributes():
    both = 0
    for kw in _tile_configs():
        try:
            old = proto.tile_kernel(**kw)
        except ValueError:
            with pytest.raises(ValueError):
                FastcatTile(**kw)
            continue
        if kw["direction"] == "backward" and kw["loader"] == "cp.async":
            with pytest.raises(ValueError, match=r"loader 'cp\.async' is for direction 'forward' only"):
                FastcatTile(**kw)
            continue
        new = FastcatTile(**kw)
        both += 1
        names = (old.name, old.id, old.arg_names, old.arg_types)
        assert (new.name, new.id, new.arg_names, new.arg_types) == names
        # This tree's kernel adds a shared chunk table (_TABLE_ENTRY bytes a chunk), and
        # says whether it was built for wide chunks; the rest is the prototype's (at a
        # 4-byte granule: no word windows, so no padding after the tile).
        info = {k: v for k, v in new.info.items() if k != "wide_chunks"}
        table = _TABLE_ENTRY * kw["chunks"]
        assert (new.block_size, new.shared_bytes, info, new.ptx_version, new.block) == (
            old.block_size, old.shared_bytes + table, old.info, old.ptx_version, old.block)  # fmt: skip
    assert both > 100


@pytest.mark.parametrize(
    "kw",
    [
        dict(direction="backward", chunks=1, granule=4, loader="bulk", target="sm_80"),
        dict(direction="forward", chunks=1, granule=4, loader="bulk"),
        dict(direction="forward", chunks=1, granule=4, loader="cp.async", target="sm_75"),
        dict(direction="backward", chunks=1, granule=4, loader="bulk", whole_rows=False),
        dict(direction="backward", chunks=33, granule=4),
        dict(direction="backward", chunks=0, granule=4),
        dict(direction="backward", chunks=1, granule=3),
        dict(direction="backward", chunks=1, granule=4, unroll=8, block=1024),
        dict(direction="backward", chunks=1, granule=4, unroll=3),
        dict(direction="backward", chunks=1, granule=4, block=96),
        dict(direction="sideways", chunks=1, granule=4),
        dict(direction="backward", chunks=1, granule=4, loader="tma"),
    ],
)
def test_the_tile_kernel_refuses_what_the_prototype_refuses(kw):
    with pytest.raises(ValueError) as proto_err:
        proto.tile_kernel(**kw)
    with pytest.raises(ValueError) as mine_err:
        FastcatTile(**kw)

    def stem(err: pytest.ExceptionInfo) -> str:  # the byte counts differ by the chunk table
        return re.sub(r"^\d+ bytes", "N bytes", str(err.value).split(";")[0].split(" = ")[0])

    assert stem(mine_err) == stem(proto_err)
