"""Footprints are exact: a simulation of every thread of the launch contract touches
exactly [0, elements) of each pointer, on full, partial and empty grids."""

from __future__ import annotations

import random

import pytest

import ptxgen


def simulate(kernel, grid_x: int, chunk_c: int, c_total: int, offset: int) -> tuple[int, int]:
    """Elements touched from (src, dst): one past the largest index each thread uses."""
    bs = kernel.block_size
    tiles = -(-chunk_c // bs)
    src_end = dst_end = 0
    for pid in range(grid_x):
        for tid in range(bs):
            n, tile = divmod(pid, tiles)
            ci = tile * bs + tid
            if ci >= chunk_c:
                continue
            wide, narrow = n * c_total + offset + ci, n * chunk_c + ci
            s, d = (wide, narrow) if kernel.name == "channel_cat_backward" else (narrow, wide)
            src_end, dst_end = max(src_end, s + 1), max(dst_end, d + 1)
    return src_end, dst_end


@pytest.mark.parametrize("cls", [ptxgen.ChannelCatBackward, ptxgen.ChannelCatForward])
def test_footprints_match_a_simulation_of_every_thread(cls):
    rng = random.Random(7)
    for _ in range(60):
        k = cls(rng.choice(["f32", "u8", "f64"]), rng.choice([32, 64, 96]))
        chunk_c = rng.choice([0, 1, 3, 17, 31, 32, 33, 100])
        offset = rng.randint(0, 5)
        c_total = chunk_c + offset + rng.randint(0, 4)
        rows = rng.randint(0, 5)
        full = k.grid(rows, chunk_c)[0]
        for grid_x in {full, max(full - 1, 0), full + 1 if chunk_c else 0}:  # partial and overlong grids too
            src, dst = k.footprints(
                (grid_x, 1, 1), k.block, {"chunk_c": chunk_c, "c_total": c_total, "chunk_offset": offset}
            )
            assert (src.elements, dst.elements) == simulate(k, grid_x, chunk_c, c_total, offset)
            assert (src.writes, dst.writes) == (False, True)
            assert src.align == src.itemsize == ptxgen.resolve_dtype(k.dtype).itemsize


def c_eval(expression: str, env: dict) -> int:
    """Evaluate the bundle's expression grammar: integers, names, + - * / and parentheses."""
    assert set(expression) <= set("abcdefghijklmnopqrstuvwxyz_0123456789 +-*/()"), expression
    return int(eval(expression.replace("/", "//"), {"__builtins__": {}}, env))


@pytest.mark.parametrize("cls", [ptxgen.ChannelCatBackward, ptxgen.ChannelCatForward])
def test_expressions_agree_with_footprints_on_the_contract_grid(cls):
    k = cls("f16", 64)
    exprs = k.footprint_expressions
    for rows, chunk_c, c_total, offset in [
        (0, 4, 8, 0),
        (5, 0, 8, 3),
        (7, 100, 131, 31),
        (1, 1, 1, 0),
        (3, 64, 64, 0),
    ]:
        env = {"n_spatial": rows, "chunk_c": chunk_c, "c_total": c_total, "chunk_offset": offset}
        grid = tuple(c_eval(e, env) for e in k.grid_expression)
        assert grid == k.grid(rows, chunk_c)
        for fp in k.footprints(grid, k.block, env):
            declared = exprs[fp.arg]
            live = c_eval(declared.get("if_nonzero", "1"), env)
            assert (c_eval(declared["elements"], env) if live else 0) == fp.elements
            assert declared["align"] == fp.align
        assert all(c_eval(value, env) <= c_eval(limit, env) for value, limit in k.requires)


def test_a_chunk_past_the_row_is_refused():
    k = ptxgen.ChannelCatBackward("f32", 128)
    with pytest.raises(
        ptxgen.FootprintError, match=r"chunk_offset \+ chunk_c = 30 \+ 4 = 34 exceeds c_total = 32"
    ):
        k.footprints(k.grid(4, 4), k.block, {"chunk_c": 4, "c_total": 32, "chunk_offset": 30})
    with pytest.raises(ptxgen.FootprintError, match=r"built for block \(128, 1, 1\), not \(64, 1, 1\)"):
        k.footprints(k.grid(4, 4), (64, 1, 1), {"chunk_c": 4, "c_total": 32, "chunk_offset": 0})
