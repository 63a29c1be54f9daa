"""rect_prologue.py's one-column rect (``patches/rect-one-column.patch`` applied in memory
to the shipped emitter), run in the PTX interpreter by tests/test_fastcat_rect.py's own
check: every byte moved, nothing else touched, footprints exact. Fails when the patch no
longer applies to the shipped file."""

from __future__ import annotations

import pytest
import rect_prologue
import test_fastcat_rect

ONE_COLUMN = rect_prologue.one_column_class()


@pytest.mark.parametrize("direction", ["backward", "forward"])
@pytest.mark.parametrize("grid_kind", ["planned", "1x1"])
@pytest.mark.parametrize("unroll", [2, 8])
@pytest.mark.parametrize("case", test_fastcat_rect.CASES, ids=lambda c: f"w{c[0]}-rows{c[1]}-k{len(c[2])}")
def test_one_column_rect_moves_the_right_bytes(case, unroll, grid_kind, direction, monkeypatch):
    monkeypatch.setattr(test_fastcat_rect, "FastcatRect", ONE_COLUMN)
    block = 64
    cols = min(test_fastcat_rect.rect_cols(sum(case[2]), block, unroll), 8)  # one column a thread
    test_fastcat_rect._check_rect(case, grid_kind, direction, block, unroll, cols)


def test_the_patch_changes_only_what_it_says():
    kernel = ONE_COLUMN(direction="backward", width=1, cols=32, chunks=3, unroll=8, block=128)
    assert kernel.id.endswith("__one_column")
    assert kernel.source.count("selp.b64") == 4  # one chunk choice a thread, not one a slot
    assert "col_live_1" not in kernel.source
