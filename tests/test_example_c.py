"""examples/c: a C program that loads a kernel from a bundle and launches it through
the driver API. Without a GPU: it compiles warning-free, its launch plan (grid and
parameter bytes, from its own JSON reader and grid evaluator) equals ptxgen's, and
malformed manifests are refused without a crash (under ASan and UBSan), and `make run`
says in one line that it cannot launch, names --plan and exits 0, while any other
failure still fails it. On a GPU: it launches and checks every element. The op mode
(version-2 op bundles) is tested in test_op_bundle.py and test_gpu_op_bundle.py."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
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


def make_run(build_dir: Path, *overrides: str, env: dict | None = None) -> subprocess.CompletedProcess:
    cc, make = toolchain_or_skip()
    return subprocess.run(
        [make, "-s", "-C", str(EXAMPLE), f"BUILD={build_dir}", f"CC={cc}", f"PYTHON={sys.executable}", *overrides, "run"],
        capture_output=True, text=True, env={**os.environ, **(env or {})}, check=False,
    )  # fmt: skip


def test_make_run_without_a_gpu_says_so_in_one_line_and_exits_0(tmp_path):
    # CUDA_VISIBLE_DEVICES= hides every GPU (cuInit: CUDA_ERROR_NO_DEVICE) where there is a
    # driver; where there is none the driver does not load. Either way nothing can launch.
    out = make_run(tmp_path, env={"CUDA_VISIBLE_DEVICES": ""})
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("make run: cannot launch on this machine ("), lines[0]
    assert "CUDA_ERROR_NO_DEVICE" in lines[0] or "cannot load the CUDA driver" in lines[0], lines[0]
    plan = f"{tmp_path}/channel_cat_example --plan {tmp_path}/bundle"
    op_plan = f"{tmp_path}/channel_cat_example --plan --op all {tmp_path}/ops"
    assert lines[0].endswith(f"); {plan} and {op_plan} print the launches it would make, without a GPU"), (
        lines[0]
    )
    shown = subprocess.run(plan.split(), capture_output=True, text=True, check=False)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("plan channel_cat_backward__f32__128 ")
    shown = subprocess.run(op_plan.split(), capture_output=True, text=True, check=False)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("op concat__bf16__64_64_64_64 rows=0 case=0 steps=0\n")


@pytest.mark.parametrize(
    "status, message, fails",
    [
        (0, "", False),
        (1, "cuLaunchKernel(...) failed: CUDA_ERROR_ILLEGAL_ADDRESS (700): an illegal memory access", True),
        (1, "cuInit(0) failed: CUDA_ERROR_INVALID_DEVICE (101): invalid device ordinal", True),
        (1, "n_spatial 64, chunk_c 16 at offset 0: dx[0][3] differs from dy[0][3]", True),
        (2, "manifest entry channel_cat_backward__f32__128: bad block", True),
        (1, "cannot load the CUDA driver: libcuda.so.1: cannot open shared object file", False),
        (1, "cuInit(0) failed: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected", False),
    ],
)
def test_make_run_fails_on_every_failure_but_no_gpu(tmp_path, status, message, fails):
    fake = tmp_path / "fake_example"  # stands in for the program: says `message`, exits `status`
    fake.write_text(
        f'#!/bin/sh\necho "$*" >> {tmp_path}/calls\n'
        + (f"echo 'channel_cat_example: {message}' >&2\n" if message else "")
        + f"exit {status}\n"
    )
    fake.chmod(0o755)
    out = make_run(tmp_path / "build", f"PROGRAM={fake}")
    calls = (tmp_path / "calls").read_text().splitlines()
    if fails:
        assert out.returncode != 0 and message in out.stderr, out.stderr
        assert "make run: cannot launch" not in out.stderr and len(calls) == 1
    else:
        assert out.returncode == 0, out.stderr
        assert len(calls) == (1 if message else 5)  # no GPU: said once, not once per dtype and op run
        assert ("make run: cannot launch on this machine" in out.stderr) is bool(message)


@pytest.mark.gpu
def test_make_run_launches_every_dtype_on_the_gpu(dev, tmp_path):
    out = make_run(tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    # the seed kernel in four dtypes, then every op of examples/c/ops.json at its row counts
    seed = [
        line
        for line in out.stdout.splitlines()
        if line.startswith("channel_cat_example: ok: ") and " op " not in line
    ]
    assert len(seed) == 4, out.stdout
    assert " op " in out.stdout, out.stdout
    assert "make run: cannot launch" not in out.stderr


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
