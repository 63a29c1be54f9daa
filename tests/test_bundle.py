"""python -m ptxgen bundle: the manifest validates against docs/bundle-manifest.schema.json,
says what a runtime without Python needs, and the same input gives the same bytes."""

from __future__ import annotations

import copy
import errno
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FILL_PTX, FILL_TYPES, ROOT, hand_written_kernel

import ptxgen
from ptxgen import bundle, cli
from ptxgen.args import param_buffer_size, param_layout

SCHEMA = json.loads((ROOT / "docs" / "bundle-manifest.schema.json").read_text())


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ptxgen", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def make_bundle(folder: Path, *args: str) -> dict:
    out = run("bundle", *args, "-o", str(folder))
    assert out.returncode == 0, out.stderr
    assert out.stderr == "" and out.stdout.startswith("wrote ")
    return json.loads((folder / "manifest.json").read_text())


@pytest.fixture(scope="module")
def validator():
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is part of the test extra")
    jsonschema.Draft202012Validator.check_schema(SCHEMA)  # the schema itself is valid 2020-12
    return jsonschema.Draft202012Validator(SCHEMA)


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("bundle")
    manifest = make_bundle(
        folder, "all", "--dtype", "f32,bf16,u8,f64", "--block-size", "96,128", "--target", "sm_75,sm_90"
    )
    return folder, manifest


def test_a_real_bundle_validates_against_the_schema(sample, validator):
    _, manifest = sample
    validator.validate(manifest)
    assert len(manifest["kernels"]) == 2 * 4 * 2 * 2


def test_every_entry_describes_its_file_and_kernel(sample):
    folder, manifest = sample
    files = {p.name for p in folder.iterdir()}
    assert files == {"manifest.json", *(e["file"] for e in manifest["kernels"])}
    for e in manifest["kernels"]:
        data = (folder / e["file"]).read_bytes()
        assert e["file_size"] == len(data) and e["content_hash"] == hashlib.sha256(data).hexdigest()
        kernel_id = e["id"]
        name, dtype, block_size = kernel_id.split("__")
        kernel = ptxgen.KERNELS[name](dtype, int(block_size), target=e["target"])
        assert data == kernel.source.encode()
        assert e["file"] == f"{kernel.id}__{kernel.target}.ptx"
        assert (e["name"], e["entry_point"], e["ptx_version"]) == (
            kernel.name,
            kernel.entry_point_name,
            kernel.ptx_version,
        )
        assert e["block"] == list(kernel.block)
        layout = param_layout(kernel.arg_names, kernel.arg_types)
        assert (
            e["param_buffer_size"] == param_buffer_size(layout) == 28
        )  # exactly the parameters: no tail padding
        assert [(p["name"], p["offset"], p["size"], p["align"]) for p in e["params"]] == [
            (s.name, s.offset, s.size, s.align) for s in layout
        ]
        src, dst = e["params"][0], e["params"][1]
        assert (src["writes"], dst["writes"]) == (False, True)
        assert src["dtype"] == dst["dtype"] == dtype
        assert src["element_size"] == ptxgen.DTYPES[dtype].itemsize
        assert {p["name"]: p["footprint"] for p in e["params"][:2]} == kernel.footprint_expressions
        assert all("footprint" not in p for p in e["params"][2:])
        assert e["requires"] == [{"value": "chunk_offset + chunk_c", "at_most": "c_total"}]
        assert [p["ptx_type"] for p in e["params"]] == ["u64", "u64", "u32", "u32", "u32"]
        assert [(p["min"], p["max"]) for p in e["params"][2:]] == [(0, 2**31 - 1)] * 3


def evaluate(expression: str, values: dict[str, int]) -> int:
    """The grid expression as a C runtime computes it: unsigned integers, / truncating."""
    assert re.fullmatch(r"[A-Za-z0-9_ +*/()-]+", expression)
    return eval(expression.replace("/", "//"), {"__builtins__": {}}, dict(values))


@pytest.mark.parametrize("n_spatial, chunk_c", [(1, 1), (64, 16), (3, 97), (17, 128), (5, 129), (2**20, 3)])
def test_the_grid_expression_gives_the_kernels_grid(sample, n_spatial, chunk_c):
    _, manifest = sample
    for e in manifest["kernels"]:
        name, dtype, block_size = e["id"].split("__")
        kernel = ptxgen.KERNELS[name](dtype, int(block_size))
        assert e["grid"]["inputs"] == ["n_spatial"]
        values = {"n_spatial": n_spatial, "chunk_c": chunk_c, "c_total": 0, "chunk_offset": 0}
        got = tuple(evaluate(e["grid"][axis], values) for axis in "xyz")
        assert got == kernel.grid(n_spatial, chunk_c)


def test_same_input_same_bytes_whatever_the_order_or_spelling(tmp_path):
    first = make_bundle(
        tmp_path / "a", "channel_cat_backward", "--dtype", "f32,bf16", "--block-size", "256,128"
    )
    make_bundle(
        tmp_path / "b",
        "channel_cat_backward",
        "--dtype",
        "bfloat16,float32,f32",
        "--block-size",
        "128,256,128",
    )
    a, b = sorted((tmp_path / "a").iterdir()), sorted((tmp_path / "b").iterdir())
    assert [p.name for p in a] == [p.name for p in b]
    for x, y in zip(a, b):
        assert x.read_bytes() == y.read_bytes(), x.name
    assert [e["id"] for e in first["kernels"]] == [
        "channel_cat_backward__bf16__128",
        "channel_cat_backward__bf16__256",
        "channel_cat_backward__f32__128",
        "channel_cat_backward__f32__256",
    ]  # the tables' order: dtypes as ptxgen.DTYPES lists them, block sizes ascending
    text = (tmp_path / "a" / "manifest.json").read_text()
    assert text.endswith("}\n") and text == json.dumps(first, indent=2, sort_keys=True) + "\n"
    assert str(tmp_path) not in text  # no paths, so the bytes do not depend on where it was written


def test_all_expands_every_axis(tmp_path):
    manifest = make_bundle(tmp_path / "b", "all", "--dtype", "all", "--block-size", "32")
    assert len(manifest["kernels"]) == 2 * len(ptxgen.DTYPES)
    manifest = make_bundle(tmp_path / "c", "channel_cat_forward", "--block-size", "all", "--target", "all")
    assert len(manifest["kernels"]) == len(ptxgen.BLOCK_SIZES) * len(ptxgen.TARGETS)


def test_an_earlier_bundle_is_replaced_without_stale_files(tmp_path):
    folder = tmp_path / "b"
    make_bundle(folder, "all", "--dtype", "f16,f32")
    manifest = make_bundle(folder, "channel_cat_backward")
    assert {p.name for p in folder.iterdir()} == {"manifest.json", manifest["kernels"][0]["file"]}


@pytest.mark.parametrize(
    "args, message",
    [
        (["nope"], "unknown kernel 'nope'; accepted: all, channel_cat_backward, channel_cat_forward"),
        (
            ["channel_cat_forwrd"],
            "accepted: all, channel_cat_backward, channel_cat_forward; did you mean 'channel_cat_forward'?",
        ),
        (
            ["all", "--dtype", "f32,all"],
            "--dtype takes 'all' alone or a comma-separated list without it, not 'f32,all'",
        ),
        (
            ["all", "--block-size", "all,128"],
            "--block-size takes 'all' alone or a comma-separated list without it",
        ),
        (
            ["all", "--block-size", "2048"],
            "block_size 2048 is not accepted; accepted: multiples of 32 from 32 to 1024",
        ),
        (
            ["all", "--target", "sm_90,"],
            "--target takes a comma-separated list without empty items, not 'sm_90,'",
        ),
        (["all", "--dtype", "f12"], "unknown dtype 'f12'"),
        (["all", "--dtype", "f32,,f16"], "--dtype takes a comma-separated list without empty items"),
        (["all", "--block-size", "33"], "block_size 33 is not accepted"),
        (["all", "--block-size", "big"], "--block-size takes ints or 'all', not 'big'"),
        (["all", "--target", "sm_91"], "unknown target 'sm_91'"),
    ],
)
def test_bad_selections_are_one_line_and_write_nothing(tmp_path, args, message):
    out = run("bundle", *args, "-o", str(tmp_path / "b"))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("ptxgen: error: ")
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (tmp_path / "b").exists()


ACCEPTED_FOLDERS = "give an empty or new folder, or one holding only an earlier bundle"


def test_a_folder_with_other_files_is_refused_before_writing(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    out = run("bundle", "all", "-o", str(tmp_path))
    assert out.returncode == 2 and "holds 'notes.txt', which is not part of a ptxgen bundle" in out.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    out = run("bundle", "all", "-o", str(tmp_path / "notes.txt"))
    assert out.returncode == 2 and f"exists and is not a folder; {ACCEPTED_FOLDERS}" in out.stderr


@pytest.mark.parametrize(
    "output, message",
    [
        ("notes.txt/sub", "notes.txt/sub cannot be a folder (Not a directory); " + ACCEPTED_FOLDERS),
        ("dangling", "dangling cannot be a folder (File exists); " + ACCEPTED_FOLDERS),
        ("x" * 300, "cannot be a folder (File name too long); " + ACCEPTED_FOLDERS),
        ("", "argument -o/--output: takes a folder, not ''"),
        ("  ", "argument -o/--output: takes a folder, not '  '"),
    ],
)
def test_an_output_path_that_cannot_be_a_folder_is_a_usage_error(tmp_path, output, message):
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    before = sorted(p.name for p in tmp_path.iterdir())
    out = subprocess.run(
        [sys.executable, "-m", "ptxgen", "bundle", "all", "-o", output],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("ptxgen: error: ") and message in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_failure_to_write_is_exit_status_1(tmp_path, monkeypatch, capsys):
    """Not the user's input: the disk, say. Exit status 1, and still one line."""

    def full_disk(kernels, directory):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(bundle, "write_bundle", full_disk)
    assert cli.main(["bundle", "all", "-o", str(tmp_path / "b")]) == 1
    err = capsys.readouterr().err
    assert err == f"ptxgen: error: cannot write the bundle to {tmp_path / 'b'}: No space left on device\n"


def test_the_library_refuses_a_path_that_cannot_be_a_folder(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(
        bundle.BundleError, match=re.escape("notes.txt/b cannot be a folder (Not a directory)")
    ):
        bundle.write_bundle([hand_written_kernel()], tmp_path / "notes.txt" / "b")


def test_output_is_required():
    out = run("bundle", "all")
    assert out.returncode == 2 and "required: -o/--output" in out.stderr


# --- the library: hand-written kernels, and what cannot be described -----------------


def test_a_hand_written_kernel_bundles_with_no_grid(tmp_path, validator):
    kernel = hand_written_kernel()
    path = bundle.write_bundle([kernel, ptxgen.ChannelCatBackward("f32", 128)], tmp_path)
    manifest = json.loads(path.read_text())
    validator.validate(manifest)
    e = manifest["kernels"][0]
    assert e["grid"] is None and e["file"] == "fill__u32__64__sm_75.ptx"
    assert [(p["name"], p["kind"], p["offset"]) for p in e["params"]] == [
        ("out", "pointer", 0),
        ("n", "scalar", 8),
        ("value", "scalar", 12),
    ]
    assert e["params"][0]["writes"] is True and e["param_buffer_size"] == 16
    assert (tmp_path / e["file"]).read_text() == kernel.source


class Lying(ptxgen.PtxKernel):
    @property
    def content_hash(self) -> str:
        return "0" * 64


class BadGrid(ptxgen.PtxKernel):
    grid_expression = ("n * 2", "1; system(1)", "1")


class PointerGrid(ptxgen.PtxKernel):
    grid_expression = ("out / 64", "1", "1")


class BadFootprint(ptxgen.PtxKernel):
    @property
    def footprint_expressions(self) -> dict:
        return {"n": {"elements": "n", "align": 4}}


def fill(cls=ptxgen.PtxKernel, kernel_id="fill__u32__64"):
    return cls("fill", FILL_PTX, ("out", "n", "value"), FILL_TYPES, 64, kernel_id=kernel_id)


@pytest.mark.parametrize(
    "kernels, message",
    [
        ([fill(Lying)], "content_hash 000"),
        ([fill(BadGrid)], "grid expression '1; system(1)' is not accepted"),
        ([fill(PointerGrid)], "uses pointer parameter 'out'"),
        ([fill(BadFootprint)], "footprints for ['n'], which are no pointer parameters"),
        ([fill(kernel_id="../escape")], "kernel id '../escape' cannot be part of a file name"),
        ([fill(), fill()], "two kernels would both be fill__u32__64__sm_75.ptx"),
        ([object()], "object"),
    ],
)
def test_what_cannot_be_bundled_is_refused_before_writing(tmp_path, kernels, message):
    with pytest.raises(bundle.BundleError, match=re.escape(message)):
        bundle.write_bundle(kernels, tmp_path / "b")
    assert not (tmp_path / "b").exists()


# --- the schema is not vacuous: it refuses manifests that are wrong ------------------


def broken(manifest: dict, change) -> dict:
    m = copy.deepcopy(manifest)
    change(m)
    return m


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m.pop("format_version"),
        lambda m: m.update(format_version=2),
        lambda m: m["kernels"][0].pop("entry_point"),
        lambda m: m["kernels"][0].update(content_hash="ABC"),
        lambda m: m["kernels"][0].update(block=[128, 1]),
        lambda m: m["kernels"][0].update(block=[2048, 1, 1]),
        lambda m: m["kernels"][0]["grid"].update(x="n_spatial; exit(1)"),
        lambda m: m["kernels"][0]["params"][0].pop("writes"),
        lambda m: m["kernels"][0]["params"][0].update(offset=-8),
        lambda m: m["kernels"][0]["params"][0].update(dtype="f12"),
        lambda m: m["kernels"][0]["params"][2].update(writes=True),  # a scalar has no writes
        lambda m: m["kernels"][0]["params"][2].pop("max"),
        lambda m: m["kernels"][0].update(surprise=1),
        lambda m: m["kernels"][0]["params"][2].update(
            footprint={"elements": "1", "align": 4}
        ),  # scalars have none
    ],
)
def test_the_schema_refuses_a_broken_manifest(sample, validator, change):
    jsonschema = pytest.importorskip("jsonschema")
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken(sample[1], change))


def test_the_schema_describes_footprints(sample, validator):
    jsonschema = pytest.importorskip("jsonschema")
    no_footprint = broken(sample[1], lambda m: [p.pop("footprint", None) for p in m["kernels"][0]["params"]])
    validator.validate(no_footprint)  # optional: hand-written kernels may have none
    for change in (
        lambda m: m["kernels"][0]["params"][1].update(
            footprint={"elements": "n_spatial * chunk_c"}
        ),  # no align
        lambda m: m["kernels"][0]["params"][1]["footprint"].update(elements="n_spatial ? 1 : 0"),
        lambda m: m["kernels"][0].update(requires=[{"value": "chunk_c"}]),
    ):
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(broken(sample[1], change))
