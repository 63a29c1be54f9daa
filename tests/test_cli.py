"""python -m ptxgen: print, write and check PTX; bad arguments give one line."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

import ptxgen


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ptxgen", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_prints_the_ptx():
    out = run("channel_cat_backward", "--dtype", "f32", "--block-size", "128")
    assert out.returncode == 0, out.stderr
    assert out.stdout == ptxgen.ChannelCatBackward("f32", 128).source


def test_writes_a_file_with_target(tmp_path):
    path = tmp_path / "k.ptx"
    out = run(
        "channel_cat_forward",
        "--dtype",
        "bfloat16",
        "--block-size",
        "64",
        "--target",
        "sm_90",
        "-o",
        str(path),
    )
    assert out.returncode == 0 and out.stdout == ""
    assert path.read_text() == ptxgen.ChannelCatForward("bf16", 64, target="sm_90").source


def test_call_variant():
    out = run("channel_cat_backward", "--call")
    assert out.returncode == 0 and out.stdout == ptxgen.ChannelCatBackward("f32", 128, inline=False).source


def test_list():
    out = run("list")
    assert out.returncode == 0
    for word in ("channel_cat_backward", "channel_cat_forward", "e4m3", "sm_120", "PTX ISA 7.8"):
        assert word in out.stdout


def test_check_reports_registers_spills_and_stack(tmp_path):
    out = run("channel_cat_backward", "--dtype", "u8", "--check", "-o", str(tmp_path / "k.ptx"))
    assert out.returncode == 0, out.stderr
    assert "ptxas accepted it" in out.stdout
    assert "registers" in out.stdout and "spill stores" in out.stdout and "bytes stack" in out.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["channel_cat_sideways"], "unknown kernel or command 'channel_cat_sideways'"),
        (["xyzzy", "--dtype", "f32"], "unknown kernel or command 'xyzzy' (kernels: channel_cat_backward"),
        (["channel_cat_backward", "--dtype", "f12"], "unknown dtype 'f12'"),
        (["channel_cat_backward", "--block-size", "33"], "block_size 33 is not accepted"),
        (["channel_cat_backward", "--block-size", "big"], "invalid int value: 'big'"),
        (["channel_cat_backward", "--target", "sm_10"], "unknown target 'sm_10'"),
        (["channel_cat_backward", "--bogus"], "unrecognized arguments: --bogus"),
        ([], "the following arguments are required: kernel"),
        (["list", "--dtype", "bogus"], "list takes no options; got --dtype"),
        (["list", "--dtype", "f32", "--check"], "list takes no options; got --dtype, --check"),
        (["list", "--block-size", "128"], "list takes no options; got --block-size"),
        (["--dtype", "f32", "bundle"], "'bundle' comes first and takes its own options"),
        (["--dtype", "f32", "doctor"], "'doctor' comes first and takes its own options"),
        (["doctor", "--bogus"], "unrecognized arguments: --bogus (see python -m ptxgen doctor --help)"),
        (["list", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_arguments_give_one_line_and_nonzero_exit(args, message):
    out = run(*args)
    assert out.returncode == 2
    assert out.stdout == ""
    assert message in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_version():
    out = run("--version")
    assert out.returncode == 0 and out.stdout == f"ptxgen {ptxgen.__version__}\n"


def test_defaults_still_apply_when_options_are_left_out():
    out = run("channel_cat_forward", "--target", "sm_90")
    assert out.returncode == 0 and out.stdout == ptxgen.ChannelCatForward("f32", 128, target="sm_90").source


@pytest.mark.parametrize(
    "args, typo, meant",
    [
        (["bundel", "channel_cat_backward"], "bundel", "bundle"),
        (["doctr"], "doctr", "doctor"),
        (["lst"], "lst", "list"),
        (["channel_cat_backwrd", "--dtype", "f32"], "channel_cat_backwrd", "channel_cat_backward"),
        (["--dtype", "f32", "bundel", "x"], "bundel", "bundle"),
    ],
)
def test_a_mistyped_first_word_is_named_with_what_it_may_mean(args, typo, meant):
    """Not "unrecognized arguments: channel_cat_backward": the first word is the mistake."""
    out = run(*args)
    assert out.returncode == 2 and out.stdout == ""
    assert f"ptxgen: error: unknown kernel or command {typo!r}; did you mean {meant!r}?" in out.stderr
    assert "kernels: channel_cat_backward, channel_cat_forward; commands: list, bundle, doctor" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_a_word_like_nothing_gets_no_guess():
    out = run("xyzzy")
    assert out.returncode == 2 and "did you mean" not in out.stderr


def test_doctor_is_a_command_with_its_own_help():
    out = run("doctor", "--help")
    assert out.returncode == 0 and "python -m ptxgen doctor" in out.stdout
    assert "doctor" in run("--help").stdout
