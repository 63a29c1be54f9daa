"""The C example runs ops from op bundles (format version 2) on the GPU: for several
dtypes and shapes (every kernel family: rect, tile, rowpack; splits and concats), at row
counts the bundle never saw (none are bundled: the plans cover every row count) on both
sides of each case's thresholds, at 256-byte aligned addresses and one element past them,
every byte of every output and every guard compared (channel_cat_example --op)."""

from __future__ import annotations

import json
import subprocess

import pytest
from test_example_c import build

from ptxgen.cli import main

OPS = [
    {"op": op, "dtype": dtype, "sizes": sizes}
    for op in ("split", "concat")
    for dtype, sizes in (
        ("bf16", [64, 64, 64, 64]),  # rect, 16-byte accesses
        ("u8", [3, 5, 24]),  # rect at a 1-byte granule, then tiles past 1 MB
        ("f32", [1, 3]),  # rowpack (short rows)
        ("f64", [17, 200, 39]),
        ("f16", [256, 0, 128]),  # an empty piece
        ("e4m3", [1000, 24]),  # tiles
    )
]


@pytest.mark.gpu
def test_every_op_of_a_bundle_runs_correctly_at_rows_it_was_not_bundled_with(dev, tmp_path):
    program = build(tmp_path / "build")
    (tmp_path / "ops.json").write_text(json.dumps(OPS))
    assert main(["bundle", "--ops", str(tmp_path / "ops.json"), "-o", str(tmp_path / "ops")]) == 0
    manifest = json.loads((tmp_path / "ops" / "manifest.json").read_text())
    failures: dict[str, str] = {}  # every op is run; the failures are named together
    for op in manifest["ops"]:
        rows = {0, 1, 3, 1000, 100003}
        for case in op["cases"]:  # each threshold's two sides, where an array stays under 64 MB
            for r in (case["rows_min"], case["rows_min"] + 1, case["rows_max"]):
                if r * op["arrays"][0]["row_bytes"] <= 64 << 20:
                    rows.add(r)
        out = subprocess.run(
            [program, "--op", op["id"], "--rows", ",".join(map(str, sorted(rows)[:64])), tmp_path / "ops"],
            capture_output=True, text=True, check=False, timeout=600,
        )  # fmt: skip
        oks = [
            line
            for line in out.stdout.splitlines()
            if line.startswith(f"channel_cat_example: ok: op {op['id']} ")
        ]
        if out.returncode != 0 or len(oks) != len(sorted(rows)[:64]):
            failures[op["id"]] = (out.stdout + out.stderr).strip().splitlines()[-1]
    print("op bundle failures:", failures)
    assert failures == {}, failures
