"""Op bundles (manifest format version 2): ``python -m ptxgen bundle split|concat`` and
``--ops``. Without a GPU: every argument error is one line naming the value (exit 2);
the manifest validates against docs/bundle-manifest-v2.schema.json and is the same bytes
for the same input; kernel-only bundles stay version 1; the plans it holds are ptxgen's
(the planner the Python op runs) for every row count, checked through the C example's
``--plan`` on 120 seeded random op shapes at the row counts where their cases change and
random ones, at aligned and element-aligned addresses; and the C example refuses what does
not fit and malformed version-2 manifests, in one line and without a crash under ASan and
UBSan. On a GPU, tests/test_gpu_op_bundle.py runs the ops."""

from __future__ import annotations

import itertools
import json
import os
import random
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from test_example_c import build, toolchain_or_skip

import ptxgen
from ptxgen.args import param_buffer_size, param_layout
from ptxgen.bundle import OP_NAMES, OpShape, op_manifest, op_manifest_bytes
from ptxgen.cli import main
from ptxgen.kernels.fastcat import GpuTraits
from ptxgen.kernels.plan import H200, Problem, Ptr, make_plan

SCHEMA = json.loads((ROOT / "docs" / "bundle-manifest-v2.schema.json").read_text())
N_SHAPES = 120


def random_shapes(n: int, seed: int = 25) -> list[dict]:
    """Seeded random ops: 1 to 8 pieces of widths that hit every family and alignment."""
    rng = random.Random(seed)
    dtypes = ["u8", "bf16", "f16", "f32", "f64", "i8", "i64"]
    out: list[dict] = []
    while len(out) < n:
        k = rng.choice([1, 2, 2, 3, 4, 5, 8])
        sizes = [
            rng.choice([0, 1, 3, 8, 16, 24, 64, 96, 128, 255, 256, 1000, rng.randint(1, 700)])
            for _ in range(k)
        ]
        if sum(sizes):
            out.append({"op": rng.choice(["split", "concat"]), "dtype": rng.choice(dtypes), "sizes": sizes})
    return out


def bundle(folder: Path, *args: str) -> tuple[int, Path]:
    return main(["bundle", *args, "-o", str(folder)]), folder / "manifest.json"


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("build"))


@pytest.fixture(scope="module")
def random_bundle(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ops")
    (folder.parent / "ops.json").write_text(json.dumps(random_shapes(N_SHAPES)))
    status, _ = bundle(folder, "--ops", str(folder.parent / "ops.json"))
    assert status == 0
    return folder


@pytest.fixture(scope="module")
def validator():
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is part of the test extra")
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    return jsonschema.Draft202012Validator(SCHEMA)


# --- the command line -----------------------------------------------------------------


def test_split_writes_a_version_2_bundle_with_its_kernels(tmp_path, capsys):
    status, path = bundle(tmp_path, "split", "--dtype", "bf16", "--sizes", "64,64,64,64")
    assert status == 0
    assert capsys.readouterr().out == f"wrote 1 op for sm_90 and {path}\n"
    data = json.loads(path.read_text())
    assert data["format_version"] == 2 and [o["id"] for o in data["ops"]] == ["split__bf16__64_64_64_64"]
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == sorted(["manifest.json", *(k["file"] for k in data["kernels"])])
    for k in data["kernels"]:
        assert (tmp_path / k["file"]).stat().st_size == k["file_size"]


def test_a_bundle_of_kernels_alone_stays_version_1(tmp_path):
    status, path = bundle(tmp_path, "channel_cat_backward", "--dtype", "f32")
    assert status == 0 and json.loads(path.read_text())["format_version"] == 1
    assert "ops" not in json.loads(path.read_text())


def test_the_same_ops_give_the_same_bytes_in_any_order(tmp_path):
    shapes = random_shapes(12, seed=3)
    (tmp_path / "a.json").write_text(json.dumps(shapes))
    (tmp_path / "b.json").write_text(json.dumps([*reversed(shapes), shapes[0]]))
    assert bundle(tmp_path / "a", "--ops", str(tmp_path / "a.json"))[0] == 0
    assert bundle(tmp_path / "b", "--ops", str(tmp_path / "b.json"))[0] == 0
    for name in os.listdir(tmp_path / "a"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert sorted(os.listdir(tmp_path / "a")) == sorted(os.listdir(tmp_path / "b"))


def test_the_traits_options_reach_the_plan(tmp_path):
    status, path = bundle(tmp_path, "concat", "--dtype", "u8", "--sizes", "3,5,24", "--sm-count", "20",
                          "--target", "sm_80", "--no-dependent-launch", "--memory-bandwidth", "900")  # fmt: skip
    assert status == 0
    op = json.loads(path.read_text())["ops"][0]
    assert op["traits"]["sm_count"] == 20 and op["target"] == "sm_80" and not op["traits"]["dependent_launch"]
    assert op["traits"]["memory_bandwidth"] == 900 * 10**9  # GB/s on the command line, bytes a second kept
    traits = GpuTraits(**op["traits"])
    assert op == op_manifest([OpShape("concat", "u8", (3, 5, 24))], traits)["ops"][0]


@pytest.mark.parametrize(
    "args, message",
    [
        (["split"], "split needs --sizes"),
        (["split", "--sizes", "64,x"], "not 'x'"),
        (["split", "--sizes", "64,-1"], "not '-1'"),
        (["split", "--sizes", "64,,3"], "not '64,,3'"),
        (["split", "--sizes", "0,0"], "every piece is empty"),
        (["split", "--sizes", "4", "--dtype", "f31"], "f31"),
        (["split", "concat", "--sizes", "4"], "not 'split concat'"),
        (["split", "--sizes", "4", "--block-size", "128"], "--block-size is for kernel bundles"),
        (
            ["split", "--sizes", "4", "--sm-count", "0", "--memory-bandwidth", "900"],
            "--sm-count takes an int >= 1",
        ),
        (["split", "--sizes", "4", "--sm-count", "108"], "give its --memory-bandwidth too"),
        (["split", "--sizes", "4", "--memory-bandwidth", str(2**63)], "more than any memory moves"),
        (["split", "--sizes", "4", "--max-threads-per-sm", "many"], "not 'many'"),
        (
            ["split", "--sizes", "4", "--memory-bandwidth", "0"],
            "--memory-bandwidth takes an int >= 1, not '0'",
        ),
        (["channel_cat_backward", "--memory-bandwidth", "900"], "--memory-bandwidth is for op bundles"),
        (["split", "--sizes", "4", "--target", "sm_75,sm_90"], "not 'sm_75,sm_90'"),
        (["split", "--sizes", "4", "--target", "gfx90a"], "gfx90a"),
        (["channel_cat_backward", "--sm-count", "4"], "--sm-count is for op bundles"),
        (["--ops", "{missing}"], "cannot read it"),
        (["--ops", "{file}", "split"], "takes no op words"),
        (["--ops", "{file}", "--dtype", "f32"], "takes no --dtype"),
    ],
)
def test_every_argument_error_names_the_value_and_exits_2(tmp_path, capsys, args, message):
    (tmp_path / "ops.json").write_text(json.dumps([{"op": "split", "dtype": "f32", "sizes": [4]}]))
    args = [a.format(missing=tmp_path / "none.json", file=tmp_path / "ops.json") for a in args]
    assert main(["bundle", *args, "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "content, message",
    [
        ("{", "is not JSON"),
        ("{}", "non-empty JSON list"),
        ("[]", "non-empty JSON list"),
        ('[["split"]]', "item 0 is ['split']"),
        ('[{"op": "split", "dtype": "f32"}]', "lacks 'sizes'"),
        ('[{"op": "gather", "dtype": "f32", "sizes": [1]}]', "op 'gather'"),
        ('[{"op": "split", "dtype": 4, "sizes": [1]}]', "dtype 4"),
        ('[{"op": "split", "dtype": "f32", "sizes": [1, true]}]', "sizes [1, True]"),
        ('[{"op": "split", "dtype": "f32", "sizes": [1], "rows": -3}]', "rows -3"),
        ('[{"op": "split", "dtype": "f32", "sizes": [1], "dim": 1}]', "key 'dim'"),
    ],
)
def test_every_ops_file_error_names_the_item_and_exits_2(tmp_path, capsys, content, message):
    (tmp_path / "ops.json").write_text(content)
    assert main(["bundle", "--ops", str(tmp_path / "ops.json"), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1, err


# --- the manifest ---------------------------------------------------------------------


def test_the_manifest_validates_against_the_v2_schema(random_bundle, validator):
    validator.validate(json.loads((random_bundle / "manifest.json").read_text()))


def test_the_schema_refuses_a_broken_manifest(random_bundle, validator):
    jsonschema = pytest.importorskip("jsonschema")
    good = json.loads((random_bundle / "manifest.json").read_text())
    for change in (
        lambda m: m.update(format_version=1),
        lambda m: m["ops"][0].pop("cases"),
        lambda m: m["ops"][0]["cases"][0].update(rows_min=-1),
        lambda m: m["ops"][0]["arrays"][0].update(name="dy"),
        lambda m: m["ops"][0]["cases"][-1]["steps"][0]["grid"].append("1"),
        lambda m: m["ops"][0]["cases"][-1]["steps"][0]["args"][0].update(value="rows"),
        lambda m: m["ops"][0]["cases"][-1]["steps"][0].update(shared_mem="rows; system()"),
    ):
        broken = json.loads(json.dumps(good))
        change(broken)
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(broken)


def test_cases_cover_every_row_count_once_per_alignment_class():
    for shape in random_shapes(40, seed=7):
        (op,) = op_manifest([OpShape(shape["op"], shape["dtype"], tuple(shape["sizes"]))], H200)["ops"]
        classes: dict[tuple, list] = {}
        for case in op["cases"]:
            classes.setdefault(tuple(sorted(case["address_multiple_of"].items())), []).append(case)
        assert 1 <= len(classes) <= 2
        for cases in classes.values():
            assert cases[0]["rows_min"] == 0 and cases[-1]["rows_max"] == op["rows_max"]
            assert all(a["rows_max"] + 1 == b["rows_min"] for a, b in itertools.pairwise(cases))
        # the last class takes any element-aligned address
        assert set(op["cases"][-1]["address_multiple_of"].values()) == {op["element_size"]}


# --- the plans: the C example's --plan against ptxgen's planner ------------------------


def expected_steps(shape: dict, rows: int, addresses: list[int]) -> list[str]:
    """ptxgen's plan for these rows and addresses as the C program prints its steps: the
    planner at the addresses' class (16-byte aligned: exactly; otherwise as one element
    past 16 bytes, the plan the bundle holds for any element-aligned address)."""
    dtype = ptxgen.resolve_dtype(shape["dtype"])
    mod = 0 if all(a % 16 == 0 for a in addresses) else dtype.itemsize % 16
    n = len(shape["sizes"])
    problem = Problem(OP_NAMES[shape["op"]], dtype, rows, tuple(shape["sizes"]), mod, (mod,) * n)
    lines = []
    for i, step in enumerate(make_plan(problem, H200).steps):
        k = step.kernel
        layout = param_layout(k.arg_names, k.arg_types)
        buffer = bytearray(param_buffer_size(layout))
        for slot, value in zip(layout, step.args):
            if isinstance(value, Ptr):
                value = addresses[0 if value.array == -1 else value.array + 1] + value.byte_offset
            struct.pack_into(f"<{slot.type.struct_format}", buffer, slot.offset, value)
        grid, block = ",".join(map(str, step.grid)), ",".join(map(str, step.block))
        lines.append(f"step {i} {k.id} {k.target} grid={grid} block={block} shared={step.shared_mem} "
                     f"params={buffer.hex()}")  # fmt: skip
    return lines


def rows_to_check(op: dict, rng: random.Random) -> list[int]:
    """Every case's first and last row count and their neighbours, and random ones."""
    rows = {0, 1, 2, op["rows_max"]}
    for case in op["cases"]:
        for r in (case["rows_min"], case["rows_max"]):
            rows.update(x for x in (r - 1, r, r + 1) if 0 <= x <= op["rows_max"])
    rows.update(rng.randint(0, 10**6) for _ in range(4))
    rows.update(rng.randint(0, op["rows_max"]) for _ in range(2))
    return sorted(rows)[:64]


def test_the_c_plans_are_ptxgens_for_random_shapes_rows_and_addresses(program, random_bundle):
    manifest = json.loads((random_bundle / "manifest.json").read_text())
    shapes = {OpShape(s["op"], s["dtype"], tuple(s["sizes"])).id: s for s in random_shapes(N_SHAPES)}
    assert len(manifest["ops"]) == len(shapes) >= 100
    rng = random.Random(11)
    compared = 0
    for op in manifest["ops"]:
        shape, n = shapes[op["id"]], len(op["sizes"]) + 1
        isz = op["element_size"]
        aligned = [rng.randrange(1, 2**20) * 256 for _ in range(n)]
        anywhere = [rng.randrange(1, 2**36) * isz for _ in range(n)]
        for addresses in (aligned, anywhere):
            rows = rows_to_check(op, rng)
            out = subprocess.run(
                [program, "--plan", "--op", op["id"], "--rows", ",".join(map(str, rows)),
                 "--addresses", ",".join(map(hex, addresses)), random_bundle],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            assert out.returncode == 0, out.stderr
            printed = out.stdout.splitlines()
            heads = [i for i, line in enumerate(printed) if line.startswith("op ")]
            assert len(heads) == len(rows)
            for r, start, end in zip(rows, heads, [*heads[1:], len(printed)]):
                assert printed[start].startswith(f"op {op['id']} rows={r} case=")
                assert printed[start + 1 : end] == expected_steps(shape, r, addresses), (
                    op["id"],
                    r,
                    addresses,
                )
                compared += 1
    assert compared >= 2 * 100 * 10


# --- refusals and malformed manifests ----------------------------------------------------


@pytest.fixture(scope="module")
def small_bundle(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("small")
    ops = [
        {"op": "split", "dtype": "bf16", "sizes": [64, 64]},
        {"op": "concat", "dtype": "u8", "sizes": [3, 5, 24]},
    ]
    (folder.parent / "small.json").write_text(json.dumps(ops))
    assert bundle(folder, "--ops", str(folder.parent / "small.json"))[0] == 0
    return folder


@pytest.mark.parametrize(
    "args, message",
    [
        (["--op", "split__bf16__64_64", "--rows", "281474976710657"], "rows is above the bundle's rows_max"),
        (["--op", "split__bf16__64_64", "--rows", "5", "--addresses", "0x1001,0x2000,0x3000"],
         "wide at 0x1001 is not a multiple of the element size 2"),
        (["--op", "split__bf16__64_64", "--rows", "5", "--addresses", "0x1000,0x2000"],
         "has 3 arrays (wide, then each piece); --addresses gives 2"),
        (["--op", "split__f32__1", "--rows", "5"], "has no op split__f32__1"),
        (["--op", "split__bf16__64_64", "--rows", "5,x"], "--rows takes up to 64 row counts"),
        (["--op", "split__bf16__64_64", "--rows", "-5"], "--rows takes up to 64 row counts"),
    ],
)  # fmt: skip
def test_what_does_not_fit_is_refused_in_one_line_naming_it(program, small_bundle, args, message):
    out = subprocess.run(
        [program, "--plan", *args, small_bundle], capture_output=True, text=True, check=False
    )
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr


def test_a_version_1_bundle_is_refused_for_ops_and_still_read_for_kernels(program, tmp_path):
    assert bundle(tmp_path, "channel_cat_backward")[0] == 0
    out = subprocess.run(
        [program, "--plan", "--op", "all", tmp_path], capture_output=True, text=True, check=False
    )
    assert out.returncode == 2 and "--op needs an op bundle (version 2)" in out.stderr
    out = subprocess.run([program, "--plan", tmp_path], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.startswith("plan channel_cat_backward__f32__128 ")


class _Each:
    """The same call on each of a list of JSON values (lists or objects)."""

    def __init__(self, values: list) -> None:
        self.values = values

    def __getitem__(self, key: Any) -> Any:
        return _Each([v[key] for v in self.values])

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: [getattr(v, name)(*args, **kwargs) for v in self.values]


def malformed_op_manifests(good: bytes) -> list[bytes]:
    cases = [good[:n] for n in range(0, len(good), max(1, len(good) // 120))]  # truncated everywhere

    class every_step:  # each step of the first op, changed as one
        def __init__(self, m: dict) -> None:
            self.steps = [s for c in m["ops"][0]["cases"] for s in c["steps"]]

        def __getitem__(self, key: str) -> Any:
            return _Each([s[key] for s in self.steps])

        def update(self, **changes: Any) -> None:
            for s in self.steps:
                s.update(changes)

    last_step = every_step

    for change in (
        lambda m: m.pop("ops"),
        lambda m: m.update(ops={}),
        lambda m: m["ops"][0].pop("cases"),
        lambda m: m["ops"][0].update(cases=[]),
        lambda m: m["ops"][0].update(op="gather"),
        lambda m: m["ops"][0].update(element_size=3),
        lambda m: m["ops"][0].update(rows_max=-1),
        lambda m: m["ops"][0].update(target="sm_80"),
        lambda m: m["ops"][0].update(arrays=m["ops"][0]["arrays"][:1]),
        lambda m: m["ops"][0]["arrays"].reverse(),
        lambda m: m["ops"][0]["arrays"][1].update(row_bytes=7),
        lambda m: m["ops"][0]["arrays"][0].update(row_bytes=1),
        lambda m: m["ops"][0]["arrays"][0].update(
            access="read" if m["ops"][0]["op"] == "concat" else "written"
        ),
        lambda m: m["ops"][0]["arrays"][0].update(bytes="rows * (64"),
        lambda m: m["ops"][0]["arrays"][0].update(bytes=5),
        lambda m: m["ops"][0]["sizes"].append(1),
        lambda m: m["ops"][0]["cases"][0].update(rows_min=5, rows_max=1),
        lambda m: m["ops"][0]["cases"][0]["address_multiple_of"].pop("wide"),
        lambda m: m["ops"][0]["cases"][0]["address_multiple_of"].update(wide=3),
        lambda m: m["ops"][0]["cases"][0]["address_multiple_of"].update(wide=0),
        lambda m: m["ops"][0]["cases"][0].update(steps=None),
        lambda m: m["ops"][0]["cases"][0].update(steps=[{}] * 65),
        lambda m: last_step(m).update(kernel="no_such_kernel"),
        lambda m: last_step(m).update(grid=["1", "1"]),
        lambda m: last_step(m)["grid"].__setitem__(0, "rows +"),
        lambda m: last_step(m)["grid"].__setitem__(0, "n_spatial"),
        lambda m: last_step(m)["grid"].__setitem__(0, "rows * 0"),
        lambda m: last_step(m)["grid"].__setitem__(0, "18446744073709551615 * rows"),
        lambda m: last_step(m)["grid"].__setitem__(1, "4294967296"),
        lambda m: last_step(m).update(block=[64, 1, 1]),
        lambda m: last_step(m).update(block=[0, 1, 1]),
        lambda m: last_step(m).update(shared_mem="100000"),
        lambda m: last_step(m).update(shared_mem=None),
        lambda m: last_step(m)["args"].pop(),
        lambda m: last_step(m)["args"].append({"param": "x", "value": "1"}),
        lambda m: last_step(m)["args"].reverse(),
        lambda m: last_step(m)["args"][0].update(array="piece9"),
        lambda m: last_step(m)["args"][0].update(array="wide", byte_offset="rows * 1000000"),
        lambda m: last_step(m)["args"][0].pop("array"),
        lambda m: last_step(m)["args"][1].update(array="wide"),
        lambda m: last_step(m)["args"][1].update(value="rows * 18446744073709551615"),
        lambda m: last_step(m)["args"][1].update(value="1 - 2"),
        lambda m: last_step(m)["args"][1].update(value="1 / 0"),
        lambda m: m["kernels"][0].update(params=[]),
        lambda m: m["kernels"][0].update(file="../x.ptx"),
        lambda m: m["kernels"][0]["params"][0].update(writes=not m["kernels"][0]["params"][0]["writes"]),
        lambda m: m["kernels"].clear(),
        lambda m: m.update(format_version=3),
    ):
        m = json.loads(good)
        change(m)
        cases.append(json.dumps(m).encode())
    cases += [b"{", b"[1, 2", b"\x00\xff" * 8, b"[" * 100 + b"]" * 100, good + b" x"]
    return cases


def test_malformed_v2_manifests_are_refused_without_a_crash_under_asan_and_ubsan(tmp_path, small_bundle):
    cc, _ = toolchain_or_skip()
    probe = subprocess.run(
        [cc, "-fsanitize=address,undefined", "-x", "c", "-", "-o", str(tmp_path / "probe")],
        input="int main(void) { return 0; }\n", capture_output=True, text=True, check=False,
    )  # fmt: skip
    if probe.returncode != 0:
        pytest.skip(f"{cc} cannot build with -fsanitize=address,undefined")
    program = build(tmp_path / "asan", "-Werror -O1 -fsanitize=address,undefined -fno-sanitize-recover=all")
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=1:exitcode=99", "UBSAN_OPTIONS": "exitcode=98"}
    rows = "0,1,7,1000,65537,1000000"
    ok = subprocess.run([program, "--plan", "--op", "all", "--rows", rows, small_bundle],
                        capture_output=True, text=True, env=env, check=False)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    folder = tmp_path / "bad"
    folder.mkdir()
    good = (small_bundle / "manifest.json").read_bytes()
    for case in malformed_op_manifests(good):
        (folder / "manifest.json").write_bytes(case)
        out = subprocess.run([program, "--plan", "--op", "all", "--rows", rows, folder],
                             capture_output=True, text=True, env=env, check=False)  # fmt: skip
        assert out.returncode == 2, (case[:300], out.returncode, out.stderr[-2000:])
        assert len(out.stderr.splitlines()) == 1 and out.stderr.startswith("channel_cat_example: "), (
            out.stderr
        )


def test_the_bundled_bytes_are_the_manifest_functions(small_bundle):
    shapes = [OpShape("split", "bf16", (64, 64)), OpShape("concat", "u8", (3, 5, 24))]
    assert (small_bundle / "manifest.json").read_bytes() == op_manifest_bytes(shapes, H200)


# --- scripts/bench_embed.py's logic, without a GPU ----------------------------------------


def test_bench_embed_cases_bundle_and_its_targets_are_checked(tmp_path):
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    import bench_embed

    cases = bench_embed.embed_cases()
    assert sum(c["group"] == "sweep" for c in cases) == 20
    assert {c["op"] for c in cases} == {"split", "concat"} and all(c["dtype"] == "bf16" for c in cases[:4])
    (tmp_path / "ops.json").write_text(json.dumps(bench_embed.ops_file(cases)))
    status, path = bundle(tmp_path / "ops", "--ops", str(tmp_path / "ops.json"))
    assert status == 0
    ids = {o["id"] for o in json.loads(path.read_text())["ops"]}
    assert {bench_embed.op_id(c) for c in cases} <= ids
    line = '{"op": "split__bf16__64", "rows": 5, "case": 1, "launches": 1, "c_us": 4.5, "c_host_us": 2.0}'
    assert bench_embed.parse_c_timing(f"noise\n{line}\n")["c_us"] == 4.5
    with pytest.raises(ValueError, match="one timing line"):
        bench_embed.parse_c_timing("")
    good = {"op": "split", "dtype": "bf16", "rows": 5, "sizes": [64], "c_us": 5.1, "python_us": 5.0,
            "c_host_us": 2.0, "python_host_us": 3.0, "correct": True}  # fmt: skip
    assert bench_embed.check_targets({"cases": [good]}) == []
    slow = {**good, "c_us": 5.2, "c_host_us": 3.5, "correct": False}
    assert len(bench_embed.check_targets({"cases": [slow]})) == 3


def test_bench_embed_alternates_which_side_runs_first():
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    import bench_embed

    calls = []
    for sides in bench_embed.round_orders(bench_embed.ROUNDS, "c", "python"):
        calls.extend(sides)
    assert bench_embed.ROUNDS % 2 == 0, "an even count of rounds: each side first as often"
    assert calls[::2].count("c") == calls[::2].count("python") == bench_embed.ROUNDS // 2
    assert calls[:4] == ["c", "python", "python", "c"]
