"""The command line the bench studies share: ``--out-dir DIR`` and the study's own options
run it (``run(args)``); ``--summarize DIR [DIR ...] [-o FILE]`` reads runs already made."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path


def study_main(
    doc: str,
    run: Callable[[argparse.Namespace], int],
    summarize: Callable[[list[Path], Path | None], int],
    add_options: Callable[[argparse.ArgumentParser], None],
    argv: list[str] | None = None,
) -> int:
    """Parse ``argv`` (the study's own options from ``add_options``), then summarize or run."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--out-dir", type=Path)
    add_options(p)
    p.add_argument("--summarize", nargs="+", type=Path, help="runs' output folders to read instead")
    p.add_argument("-o", "--output", type=Path, help="with --summarize: write the summary here")
    args = p.parse_args(argv)
    if args.summarize:
        return summarize(args.summarize, args.output)
    return run(args)
