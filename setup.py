"""The one compiled part: runtime._fastlaunch, the checked launch in C.

Optional: where no C compiler or Python headers are found the build skips it (with a
warning) and the runtime launches through its Python path, which checks the same things
(see runtime/launch.py). Everything else is declared in pyproject.toml.
"""

import hashlib
import sys
from pathlib import Path

from setuptools import Extension, setup

SOURCE = "runtime/_fastlaunch.c"
# The build carries the sha256 of the source it was compiled from (runtime._fastlaunch.
# SOURCE_SHA256): the runtime refuses a stale build beside a changed source, and the GPU
# record names the source its extension was built from.
SOURCE_SHA256 = hashlib.sha256(Path(__file__).resolve().parent.joinpath(SOURCE).read_bytes()).hexdigest()

# GCC and Clang spellings; MSVC builds it with its defaults.
FLAGS = [] if sys.platform == "win32" else ["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"]

setup(
    ext_modules=[
        Extension(
            "runtime._fastlaunch",
            [SOURCE],
            optional=True,
            define_macros=[("PTXGEN_FASTLAUNCH_SOURCE_SHA256", f'"{SOURCE_SHA256}"')],
            extra_compile_args=FLAGS,
        )
    ]
)
