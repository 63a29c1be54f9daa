"""The flat copy of the copy-ceiling studies (lab/fastcat_flat_copy.py): its golden PTX, in
the PTX interpreter (tests/ptxsim.py) every vector moves and nothing else is touched, and
it refuses what it cannot build. Moved from tests/ with the kernel; run with
``python -m pytest lab`` (``--update-golden`` rewrites lab/golden/)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from fastcat_flat_copy import FastcatFlatCopy
from ptxsim import RecordingMemory, check_footprints, run_kernel

GOLDEN = Path(__file__).resolve().parent / "golden"
CASES = [
    {"target": "sm_90"},
    {"unroll": 2, "layout": "block", "load_hint": "L1::no_allocate", "target": "sm_75"},
]


@pytest.mark.parametrize("kwargs", CASES, ids=lambda kw: FastcatFlatCopy(**kw).id)
def test_ptx_matches_golden(kwargs, request):
    kernel = FastcatFlatCopy(**kwargs)
    path = GOLDEN / f"{kernel.id}.ptx"
    if request.config.getoption("--update-golden", default=False):
        path.write_text(kernel.source)
        return
    assert kernel.source == path.read_text(), f"{path.name} differs from the emitted PTX"


@pytest.mark.parametrize("layout", ["block", "grid"])
@pytest.mark.parametrize("n_vectors, grid", [(1, 1), (37, 2), (130, 3), (0, 2)])
def test_flat_copy_moves_every_vector_and_only_those(layout, n_vectors, grid):
    rng = random.Random(n_vectors)
    k = FastcatFlatCopy(unroll=2, block=64, layout=layout)
    mem = RecordingMemory()
    src, dst = mem.alloc(16 * n_vectors), mem.alloc(16 * n_vectors)
    data = bytes(rng.randrange(256) for _ in range(16 * n_vectors))
    mem.view(src)[:] = data
    mem.view(dst)[:] = b"\xa5" * len(data)
    mem.clear()
    run_kernel(k, grid, {"src": src, "dst": dst, "n_vectors": n_vectors}, mem)
    assert bytes(mem.view(dst)) == data
    check_footprints(
        mem, k.footprints((grid, 1, 1), k.block, {"n_vectors": n_vectors}), {"src": src, "dst": dst}
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"unroll": 3}, "unroll = 3 is not accepted; accepted: 1, 2, 4, 8"),
        ({"block": 96}, "block = 96 is not accepted; accepted: 64, 128, 256, 512, 1024"),
        ({"block": True}, "block = True is not accepted"),
        ({"layout": "rows"}, "layout 'rows'; accepted: block, grid"),
        ({"load_hint": "L2::128B"}, "load_hint 'L2::128B'; accepted: None, 'L2::256B'"),
        ({"load_hint": "L2::256B", "target": "sm_75"}, "needs sm_80 or newer, not sm_75"),
        ({"target": "sm_70"}, "unknown target 'sm_70'"),
    ],
)
def test_refuses_what_it_cannot_build(kwargs, message):
    with pytest.raises(ValueError) as err:
        FastcatFlatCopy(**kwargs)
    assert message in str(err.value)
