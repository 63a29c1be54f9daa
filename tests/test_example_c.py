"""examples/c: a C program that loads a kernel from a bundle and launches it through
the driver API. Without a GPU: it compiles warning-free, its launch plan (grid and
parameter bytes, from its own JSON reader and grid evaluator) equals ptxgen's, and
malformed manifests are refused without a crash (under ASan and UBSan). On a GPU:
it launches and checks every element."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

import ptxgen
from ptxgen.args import param_buffer_size, param_layout

EXAMPLE = ROOT / "examples" / "c"
# The shapes channel_cat_example.c launches: (n_spatial, chunks).
SHAPES = [(64, [16, 16]), (1001, [3, 17, 12, 97, 1, 130]), (3, [1, 1024, 129])]


def toolchain_or_skip() -> tuple[str, str]:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    make = shutil.which("make")
    if not cc or not shutil.which(cc):
        pytest.skip("no C compiler (cc, gcc or clang) on this machine")
    if not make:
        pytest.skip("no make on this machine")
    return cc, make


def build(tmp: Path, extra_cflags: str = "-Werror") -> Path:
    cc, make = toolchain_or_skip()
    out = subprocess.run(
        [make, "-C", str(EXAMPLE), f"BUILD={tmp}", f"CC={cc}", f"EXTRA_CFLAGS={extra_cflags}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "warning" not in out.stderr
    return tmp / "channel_cat_example"


def make_bundle(folder: Path, *args: str) -> Path:
    from ptxgen.cli import bundle_main

    assert bundle_main([*args, "-o", str(folder)]) == 0
    return folder


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("build"))


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return make_bundle(
        tmp_path_factory.mktemp("bundle"),
        "channel_cat_backward", "--dtype", "f32,bf16,u8,f64", "--block-size", "96,128", "--target", "sm_75,sm_90",
    )  # fmt: skip


def expected_plan(kernel) -> list[str]:
    """What the C program must print: ptxgen's grid and param_layout, pointers null."""
    layout = param_layout(kernel.arg_names, kernel.arg_types)
    lines = []
    for n_spatial, chunks in SHAPES:
        c_total, offset = sum(chunks), 0
        for chunk_c in chunks:
            values = {"dy": 0, "dx": 0, "chunk_c": chunk_c, "c_total": c_total, "chunk_offset": offset}
            buffer = bytearray(param_buffer_size(layout))
            for slot in layout:
                struct.pack_into(f"<{slot.type.struct_format}", buffer, slot.offset, values[slot.name])
            grid = ",".join(map(str, kernel.grid(n_spatial, chunk_c)))
            block = ",".join(map(str, kernel.block))
            lines.append(
                f"plan {kernel.id} {kernel.target} n_spatial={n_spatial} chunk_c={chunk_c} c_total={c_total} "
                f"chunk_offset={offset} grid={grid} block={block} params={buffer.hex()}"
            )
            offset += chunk_c
    return lines


@pytest.mark.parametrize("dtype", ["f32", "bf16", "u8", "f64"])
@pytest.mark.parametrize("block_size", [96, 128])
@pytest.mark.parametrize("target", ["sm_75", "sm_90"])
def test_the_c_launch_plan_is_ptxgens(program, bundle, dtype, block_size, target):
    kernel = ptxgen.ChannelCatBackward(dtype, block_size, target=target)
    out = subprocess.run(
        [program, "--plan", "--target", target, bundle, kernel.id],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == expected_plan(kernel)


def test_without_a_target_the_plan_takes_the_first_entry(program, bundle):
    out = subprocess.run([program, "--plan", bundle], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == expected_plan(ptxgen.ChannelCatBackward("f32", 128))


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "usage: channel_cat_example"),
        (["--bogus", "x"], "usage: channel_cat_example"),
        (["{bundle}", "channel_cat_backward__f16__128"], "has no entry channel_cat_backward__f16__128"),
        (["--target", "sm_80", "{bundle}"], "has no entry channel_cat_backward__f32__128 for sm_80"),
        (["{missing}"], "cannot open"),
    ],
)
def test_usage_and_missing_entries_exit_2_in_one_line(program, bundle, tmp_path, args, message):
    args = [a.format(bundle=bundle, missing=tmp_path / "none") for a in args]
    out = subprocess.run([program, "--plan", *args], capture_output=True, text=True, check=False)
    assert out.returncode == 2 and out.stdout == ""
    assert message in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr


def test_a_forward_kernel_is_refused(program, tmp_path):
    folder = make_bundle(tmp_path / "b", "channel_cat_forward")
    out = subprocess.run(
        [program, "--plan", folder, "channel_cat_forward__f32__128"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2
    assert "this program launches channel_cat_backward only" in out.stderr


def malformed_manifests(good: bytes) -> list[bytes]:
    cases = [good[:n] for n in range(0, len(good), max(1, len(good) // 150))]  # truncated everywhere

    def the_default_entry(manifest: dict) -> dict:  # the one `--plan BUNDLE` reads
        return next(e for e in manifest["kernels"] if e["id"] == "channel_cat_backward__f32__128")

    for change in (
        lambda e: e.update(grid=None),
        lambda e: e["grid"].update(x="n_spatial * (chunk_c + 127) / 0"),
        lambda e: e["grid"].update(x="n_spatial * ((chunk_c + 127) / 128"),
        lambda e: e["grid"].update(x="18446744073709551615 * n_spatial"),
        lambda e: e["grid"].update(inputs=["n_spatial", "rows"]),
        lambda e: e.update(block=[128, 1]),
        lambda e: e.update(param_buffer_size=20),
        lambda e: e["params"][1].update(size=4),
        lambda e: e["params"][2].update(offset=17),
        lambda e: e["params"][2].update(kind="vector"),
        lambda e: e["params"][0].pop("element_size"),
        lambda e: e["params"][2].update(max=3),  # chunk_c 16 is then out of range
        lambda e: e.update(file="../../etc/passwd"),
        lambda e: e.update(params=[]),
    ):
        m = json.loads(good)
        change(the_default_entry(m))
        cases.append(json.dumps(m).encode())
    cases += [
        b"{",
        b"[1, 2",
        b'{"format": "ptxgen-bundle", "format_version": 2, "kernels": []}',
        b"\x00\xff" * 8,
    ]
    cases += [
        good.replace(b'"kernels"', b'"kernels\\u00"'),
        good + b" x",
        b'"\\ud800"',
        b"[" * 100 + b"]" * 100,
    ]
    return cases


def test_malformed_manifests_are_refused_without_a_crash(tmp_path, bundle):
    cc, _ = toolchain_or_skip()
    probe = subprocess.run(
        [cc, "-fsanitize=address,undefined", "-x", "c", "-", "-o", str(tmp_path / "probe")],
        input="int main(void) { return 0; }\n", capture_output=True, text=True, check=False,
    )  # fmt: skip
    if probe.returncode != 0:
        pytest.skip(f"{cc} cannot build with -fsanitize=address,undefined")
    program = build(tmp_path / "asan", "-Werror -O1 -fsanitize=address,undefined -fno-sanitize-recover=all")
    good = (bundle / "manifest.json").read_bytes()
    folder = tmp_path / "bad"
    folder.mkdir()
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=1:exitcode=99", "UBSAN_OPTIONS": "exitcode=98"}
    ok = subprocess.run([program, "--plan", bundle], capture_output=True, text=True, env=env, check=False)
    assert ok.returncode == 0, ok.stderr
    for case in malformed_manifests(good):
        (folder / "manifest.json").write_bytes(case)
        out = subprocess.run(
            [program, "--plan", folder], capture_output=True, text=True, env=env, check=False
        )
        assert out.returncode == 2, (case[:200], out.returncode, out.stderr[-2000:])
        assert len(out.stderr.splitlines()) == 1 and out.stderr.startswith("channel_cat_example: "), (
            out.stderr
        )


@pytest.mark.gpu
def test_the_c_example_launches_and_checks_on_the_gpu(dev, tmp_path):
    program = build(tmp_path / "build")
    folder = make_bundle(
        tmp_path / "bundle",
        "channel_cat_backward", "--dtype", "f32,bf16,u8,f64,e4m3", "--block-size", "96,128,1024",
        "--target", "sm_75,sm_90",
    )  # fmt: skip
    for dtype in ("f32", "bf16", "u8", "f64", "e4m3"):
        for block_size in (96, 128, 1024):
            kernel_id = f"channel_cat_backward__{dtype}__{block_size}"
            out = subprocess.run([program, folder, kernel_id], capture_output=True, text=True, check=False)
            assert out.returncode == 0, out.stdout + out.stderr
            last = out.stdout.splitlines()[-1]
            assert last.startswith(f"channel_cat_example: ok: {kernel_id} ({kernel_id}__sm_"), last
            assert "all equal" in last
