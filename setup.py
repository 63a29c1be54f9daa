"""The one compiled part: runtime._fastlaunch, the checked launch in C.

Optional: where no C compiler or Python headers are found the build skips it (with a
warning) and the runtime launches through its Python path, which checks the same things
(see runtime/launch.py). Everything else is declared in pyproject.toml.
"""

import sys

from setuptools import Extension, setup

# GCC and Clang spellings; MSVC builds it with its defaults.
FLAGS = [] if sys.platform == "win32" else ["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"]

setup(
    ext_modules=[
        Extension(
            "runtime._fastlaunch",
            ["runtime/_fastlaunch.c"],
            optional=True,
            extra_compile_args=FLAGS,
        )
    ]
)
