"""The benchmark's pure parts: the shape syntax and the honest traffic count."""

from __future__ import annotations

import random
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from bench_cases import Case, all_cases, format_shape, parse_shape, quick_cases, sector_bytes


@pytest.mark.parametrize(
    "text, rows, sizes, pick",
    [
        ("1048576x256->128@64", 1048576, (64, 128, 64), 1),
        ("1,048,576 × 256 → 128 @ 64", 1048576, (64, 128, 64), 1),
        ("4194304x4->3@1", 4194304, (1, 3), 1),
        ("10x8->8@0", 10, (8,), 0),
        ("10x8->3@0", 10, (3, 5), 0),
        ("10x8->3@5", 10, (5, 3), 1),
        ("524288x(32+48)", 524288, (32, 48), None),
        ("102_400x(64*3)", 102400, (64, 64, 64), None),
        ("102,400 × (64·3)", 102400, (64, 64, 64), None),
        ("7x(16*2+32+1)", 7, (16, 16, 32, 1), None),
        ("128x(401408*2)", 128, (401408, 401408), None),
    ],
)
def test_parse_shape(text, rows, sizes, pick):
    assert parse_shape(text) == (rows, sizes, pick)


@pytest.mark.parametrize(
    "text, message",
    [
        ("10x8->9@0", "a piece of 9 channels at 0 must lie inside the 8 channels"),
        ("10x8->0@3", "at least 1 wide"),
        ("10x8->4@5", "must lie inside"),
        ("10x(3+0)", "every piece needs at least 1 channel"),
        ("10x(3*2*2)", "term '3*2*2' is not N or N*COUNT"),
        ("10x(3+)", "term '' is not N or N*COUNT"),
        ("10 by 8", "is not understood; write ROWSxCHANNELS->WIDTH@OFFSET"),
        ("x(3+4)", "is not understood"),
    ],
)
def test_parse_shape_refuses_with_the_reason(text, message):
    with pytest.raises(ValueError) as info:
        parse_shape(text)
    assert message in str(info.value)


def test_format_shape_round_trips():
    for text in ("1048576x256->128@64", "4194304x4->3@1", "10x8->3@0", "524288x(32+48)", "102400x(64*3)",
                 "7x(16*2+32+1)", "9x(1+1+2+1*3)"):  # fmt: skip
        rows, sizes, pick = parse_shape(text)
        assert parse_shape(format_shape(rows, sizes, pick)) == (rows, sizes, pick)
        assert parse_shape(format_shape(rows, sizes, pick, pretty=True)) == (rows, sizes, pick)
    assert format_shape(102400, (64, 64, 64), None, pretty=True) == "102,400 × (64·3)"
    assert format_shape(1048576, (64, 128, 64), 1, pretty=True) == "1,048,576 × 256 → 128 @ 64"
    assert format_shape(9, (1, 1, 2, 1, 1, 1), None) == "9x(1*2+2+1*3)"


def brute_force_sectors(rows, pitch, start, width, base, sector=32):
    sectors = {(base + r * pitch + start + b) // sector for r in range(rows) for b in range(width)}
    return sector * len(sectors)


@pytest.mark.parametrize("sector", [32, 64])
def test_sector_bytes_against_brute_force(sector):
    rng = random.Random()
    for _ in range(3000):
        pitch = rng.randint(1, 300)
        width = rng.randint(0, pitch)
        start = rng.randint(0, pitch - width)
        rows, base = rng.randint(0, 120), rng.randint(0, 128)
        want = brute_force_sectors(rows, pitch, start, width, base, sector)
        got = sector_bytes(rows, pitch, start, width, base, sector=sector)
        assert got == want, (rows, pitch, start, width, base, sector)


@pytest.mark.parametrize(
    "rows, pitch, start, width, expected",
    [
        (4_194_304, 16, 4, 12, 4_194_304 * 16),  # f32 3 of 4 at 1: every sector of dy is needed
        (1 << 20, 1024, 256, 512, (1 << 20) * 512),  # f32 128 of 256 at 64: whole sectors
        (524_288, 80, 32, 48, 524_288 * 64),  # u8 48 of 80 at 32: 48 bytes cost 64 (2 sectors)
        (3, 100, 0, 1, 96),  # one byte costs its sector
        (1, 1000, 0, 1000, 1024),  # a contiguous range, rounded out to sectors
    ],
)
def test_sector_bytes_known_values(rows, pitch, start, width, expected):
    assert sector_bytes(rows, pitch, start, width) == expected


def test_sector_bytes_is_quick_for_huge_row_counts():
    assert sector_bytes(10**12, 80, 32, 48) == 10**12 * 64
    with pytest.raises(ValueError, match="cannot repeat every"):
        sector_bytes(2, 8, 0, 9)


def test_case_traffic_counts_what_is_written_and_the_sectors_read():
    gather = Case("gather", 524288, (32, 48), "u8", pick=1)
    assert gather.traffic() == 524288 * 48 + 524288 * 64
    assert gather.name == "gather 524288x80->48@32 u8"
    # 64-byte DRAM units: rows of 80 bytes at offset 32 leave no 64-byte unit unread
    assert gather.dram_traffic() == 524288 * 48 + 524288 * 80
    bf16 = Case("gather", 524288, (32, 48), "bf16", pick=1)  # bytes 64..159 of 160: 4 units of 5
    assert (bf16.traffic(), bf16.dram_traffic()) == (524288 * (96 + 96), 524288 * (96 + 128))
    split = Case("split", 4194304, (1, 3), "f32")
    assert split.traffic() == split.dram_traffic() == 2 * 4194304 * 16
    concat = Case("concat", 3, (1, 2), "u8")  # pieces of 3 and 6 bytes: a sector each
    assert concat.traffic() == 9 + 64
    with pytest.raises(ValueError, match="a gather names its piece"):
        Case("gather", 1, (1, 2), "f32")
    with pytest.raises(ValueError, match="dtype 'f7'"):
        Case("split", 1, (1, 2), "f7")


def test_the_case_lists():
    cases = all_cases()
    names = [c.name for c in cases]
    assert len(names) == len(set(names))
    assert "gather 4194304x4->3@1 u8" in names and "concat 128x(401408*2) f64" in names
    assert all(c.dtype == "bf16" for c in cases if c.group == "yolo")
    assert all(c.wide_bytes <= 1 << 20 for c in cases if c.group == "small")
    assert all(25e6 <= c.wide_bytes <= 80e6 for c in cases if c.group == "yolo")
    quick = quick_cases()
    assert {c.op for c in quick} == {"gather", "split", "concat"} and 5 <= len(quick) <= 10


# --- the report, from made-up results ------------------------------------------------------


def fake_doc():
    rows = []
    for dtype, scale in (("f32", 1.0), ("u8", 0.5)):
        for method, group, gbps, status, correct in (
            ("copy: cuMemcpyDtoD", "ceiling", 3900 * scale, "ok", True),
            ("copy: 16-byte PTX kernel", "ceiling", 4000 * scale, "ok", True),
            ("ours: seed", "ours", 1600 * scale, "ok", True),
            ("torch: narrow+copy_", "peer", 2600 * scale, "ok", True),
            ("torch: split_with_sizes_copy", "peer", None, "failed", None),
            ("cupy: slice copy", "peer", 2000 * scale, "ok", False),
        ):
            rows.append({
                "shape": "4194304x(1+3)", "pretty_shape": "4,194,304 × (1+3)", "dtype": dtype, "op": "split",
                "group": "issue", "method": method, "method_group": group, "status": status,
                "error": "RuntimeError: CUDA error: invalid argument" if status == "failed" else None,
                "GBps": gbps, "us": 10.0 if gbps else None, "traffic_bytes": 1 << 27, "correct": correct,
                "info": "", "case_ceiling_GBps": 4000 * scale,
            })  # fmt: skip
    return {"gpu": "NVIDIA H200", "driver": "580 (CUDA 13.0)", "date": "2026-12-01", "runs": "median of 20",
            "ceiling_GBps": 4100.0, "elapsed_s": 200.0, "results": rows}  # fmt: skip


def test_the_report_table_marks_failures_and_wrong_results():
    import bench_report

    text = bench_report.table(fake_doc()["results"])
    lines = text.splitlines()
    assert lines[0].startswith("| op | shape | dtype | ceiling | ours: seed | torch: narrow+copy_ |")
    f32 = next(line for line in lines if "| f32 |" in line)
    assert "| 4,000 | 1,600 | 2,600 | fails | 2,000 WRONG | 0.62× |" in f32  # a wrong peer is no bar


def test_the_gather_table_counts_dram_units():
    import bench_report

    rows = [
        {"op": "gather", "pretty_shape": "8 × 160 → 96 @ 64", "dtype": "bf16", "method": m, "method_group": g,
         "GBps": gbps, "correct": True, "traffic_bytes": 192, "dram_traffic_bytes": 224,
         "case_ceiling_GBps": 4000.0}
        for m, g, gbps in (("copy", "ceiling", 4000.0), ("ours: vector", "ours", 3000.0), ("ours: seed", "ours", 300.0))
    ]  # fmt: skip
    lines = bench_report.gather_table(rows).splitlines()
    assert lines[2] == "| 8 × 160 → 96 @ 64 | bf16 | 3,000 | 75.0 | 1.167 | 87.5 |"


def test_the_readme_keeps_what_people_wrote(tmp_path):
    import bench_report

    source = tmp_path / "src.md"
    source.write_text(
        f"# Perf\n\nhand-written intro\n\n{bench_report.BEGIN}\nold table\n{bench_report.END}\n\n## Notes\nkept\n"
    )
    out = tmp_path / "README.md"
    bench_report.write_readme(out, fake_doc(), source)
    text = out.read_text()
    assert "hand-written intro" in text and "## Notes\nkept" in text and "old table" not in text
    assert "4,100 GB/s" in text and "torch: split_with_sizes_copy on split 4,194,304 × (1+3) f32" in text
    assert "| `seed` | chunk |" in text
    bench_report.write_readme(out, fake_doc(), tmp_path / "missing.md")  # no file yet: the skeleton
    assert "## Reproduce" in out.read_text() and out.read_text().count(bench_report.BEGIN) == 1


def test_the_plot_is_drawn(tmp_path):
    pytest.importorskip("matplotlib")
    import bench_report

    assert bench_report.plot(tmp_path / "b.png", fake_doc()) is None
    assert (tmp_path / "b.png").stat().st_size > 1000


def test_a_run_of_sweep_shapes_alone_has_no_plot_and_says_why(tmp_path):
    import bench_report

    doc = fake_doc()
    doc["results"] = [{**r, "sweep": True, "seed": 1} for r in doc["results"]]
    problem = bench_report.plot(tmp_path / "b.png", doc)
    assert problem is not None and "sweep" in problem
    assert not (tmp_path / "b.png").exists()


def test_the_benchmark_without_a_gpu_says_so():
    import subprocess

    import runtime

    if runtime.is_available():
        pytest.skip("this machine has a GPU")
    out = subprocess.run(
        [sys.executable, "scripts/bench.py", "--quick"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.startswith("no GPU: ")
    out = subprocess.run(
        [sys.executable, "scripts/bench.py", "--only", "nothing"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 2 and "no case matches" in out.stderr


def test_the_hand_written_ptx_assembles():
    toolchain = pytest.importorskip("ptxgen.toolchain")
    import bench_methods

    try:
        for kernel in (bench_methods.COPY16, bench_methods.SPIN):
            result = toolchain.assemble(kernel.source, "sm_90")
            assert result.functions[kernel.entry_point_name].spill_store_bytes == 0
    except toolchain.ToolNotFound as err:
        pytest.skip(str(err))


def test_tile_candidates_fit_the_grid_and_the_row():
    from bench_methods import copy16_grid, tile_candidates

    assert tile_candidates(1, 10) == [(1024, 4)]
    assert tile_candidates(48, 10) == [(64, 64), (128, 32), (256, 16), (512, 8), (1024, 4)]
    assert all(-(-401408 // bc) <= 65535 for _, bc in tile_candidates(401408, 128))
    assert copy16_grid(10) == 1 and copy16_grid(10**9) == -(-(10**9) // 256)
    assert copy16_grid(10**9, max_grid_x=1000) == 1000


def test_report_only_redraws_from_the_json(tmp_path):
    import json
    import subprocess

    (tmp_path / "results.json").write_text(json.dumps(fake_doc()))
    run = [sys.executable, "scripts/bench.py", "--report-only", "--out-dir", str(tmp_path)]
    out = subprocess.run(run, cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "README.md").read_text()
    assert "| split | 4,194,304 × (1+3) | u8 | 2,000 | 800 |" in text


def test_the_sweep_is_drawn_from_its_seed_alone():
    from bench_cases import DTYPE_SIZES, sweep_cases

    first, again, other = sweep_cases(64, 20261201), sweep_cases(64, 20261201), sweep_cases(64, 7)
    assert first == again and first != other
    assert len(first) == 128 and {c.op for c in first} == {"split", "concat"}
    assert {DTYPE_SIZES[c.dtype] for c in first} == {1, 2, 4, 8}
    for case in first:
        assert case.group == "sweep" and 2 <= len(case.sizes) <= 6
        assert all(1 <= s <= 300 for s in case.sizes)
        assert case.wide_bytes >= 64 << 20
    widths = {s for c in first for s in c.sizes}
    assert any(s % 16 for s in widths)  # odd widths, not only whole 16-byte units


def _sweep_rows(ours: float, torch: float, triton: float, dtype: str = "u8", op: str = "split"):
    rows = []
    for method, group, gbps in (
        ("flat_copy", "ceiling", 4000.0),
        ("ours: fused", "ours", ours),
        ("torch: narrow+copy_", "peer", torch),
        ("triton: 2-D tiles, tuned", "peer", triton),
    ):
        rows.append({"op": op, "pretty_shape": f"1 × ({dtype})", "dtype": dtype, "method": method,
                     "method_group": group, "GBps": gbps, "correct": True, "case_ceiling_GBps": 4000.0,
                     "sweep": True, "seed": 5, "status": "ok"})  # fmt: skip
    return rows


def test_the_sweep_summary_counts_against_the_flat_copy_and_the_peers():
    import bench_report

    rows = _sweep_rows(3800.0, 2000.0, 3000.0) + _sweep_rows(2000.0, 1000.0, 3000.0, "f32")
    rows += _sweep_rows(3900.0, 1000.0, 1000.0, "bf16", "concat")
    text = bench_report.sweep_summary(rows)
    assert "Random sweep (seed 5)" in text
    assert "- split (2 shapes): median 72.5% of the flat copy, lowest 50.0% (split 1 × (f32) f32)" in text
    assert "  - u8: median 95.0%, lowest 95.0%" in text
    assert "- concat (1 shapes): median 97.5% of the flat copy" in text
    assert "more than 3% behind PyTorch's best or tuned Triton: 1 of 3 cells: split 1 × (f32) f32" in text
    table = bench_report.sweep_table(rows)
    assert "| split | 1 × (u8) | u8 | 95.0% | 50.0% | 75.0% |" in table


def test_the_ops_benchmark_tables_its_record():
    import bench_ops

    def row(method, out, us, host, layout="contiguous", **extra):
        return {"case": "split yolo b1 80x80 64+64+64 bf16", "layout": layout, "array": "torch", "out": out,
                "method": method, "us": us, "host_us": host, "correct": True, **extra}  # fmt: skip

    record = {
        "gpu": "G (sm_90)", "driver": "580 (CUDA 13.0)", "date": "T", "tree": "ab" * 32, "command": "python x",
        "reps": 30, "warmup": 5, "not_measured": {"pitched": "refused"},
        "cases": [
            row("ours", False, 10.5, 20.0, framework_alloc_host_us=9.0, binding_alloc_host_us=7.5),
            row("ours", True, 10.0, 11.0),
            row("torch", False, 30.0, 40.0), row("torch", True, 25.0, 30.0), row("flat_copy", True, 9.0, None),
            row("ours", False, 10.0, 21.0, "channels_last", framework_alloc_host_us=9.0),
            row("ours", True, 9.5, 12.0, "channels_last"), row("flat_copy", True, 9.0, None, "channels_last"),
        ],
    }  # fmt: skip
    text = bench_ops.markdown(record)
    # 10.5 / 10.0 = 1.05x the out= call; 20.0 <= 11.0 + 9.0 + 1.0; ahead of torch in both
    assert (
        "| split yolo b1 80x80 64+64+64 bf16 | contiguous | torch | 1.05× | 20.0 (21.0) | 2.86× | 2.00× | yes |"
        in text
    )
    # channels_last: 21.0 <= 12.0 + 9.0 + 1.0; no torch row to compare with
    assert (
        "| split yolo b1 80x80 64+64+64 bf16 | channels_last | torch | 1.05× | 21.0 (22.0) | – | – | yes |"
        in text
    )
    assert "| split yolo b1 80x80 64+64+64 bf16 | no | 90.0% |" in text
    # allocating adds 9.0 to ours and 10.0 to torch's; torch's out= is 19.0 behind ours
    assert "| split | contiguous | 1 | 9.0 | 7.5 | 10.0 | 19.0 | 1 of 1 |" in text
    assert "- pitched: refused" in text
