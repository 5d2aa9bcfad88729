"""C builds of the package: the native recorder, the record framing walk, the detector's kernels,
the NVTX capture library.

Metadata lives in pyproject.toml; this file only declares the C targets. The NVTX v3
headers come from the ``nvidia-nvtx`` wheel (a build requirement in pyproject.toml), found at
build time.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import Extension, setup


def nvtx_include_dirs() -> list[str]:
    """Directories holding ``nvtx3/`` from the nvidia-nvtx wheel."""
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or []) if spec else []
    found = sorted({str(p.parent) for root in roots for p in Path(root).glob("*/include/nvtx3")})
    if not found:
        raise SystemExit("setup.py: NVTX headers not found; pip install nvidia-nvtx first")
    return found[-1:]


CFLAGS = ["-O2", "-std=gnu11", "-Wall", "-Wno-unused-function"]

setup(
    ext_modules=[
        Extension(
            "fdprof.probe.sdk._recorder",
            ["fdprof/probe/sdk/_recorder.c"],
            extra_compile_args=CFLAGS,
        ),
        Extension(
            "fdprof.formats._records", ["fdprof/formats/_records.c"], extra_compile_args=CFLAGS
        ),
        Extension(
            "fdprof.analysis._kernels", ["fdprof/analysis/_kernels.c"], extra_compile_args=CFLAGS
        ),
        Extension(
            "fdprof.trace._chromescan", ["fdprof/trace/_chromescan.c"], extra_compile_args=CFLAGS
        ),
        # not a Python module: a shared library NVTX loads through NVTX_INJECTION64_PATH
        Extension(
            "fdprof.capture._nvtx_inject",
            ["fdprof/capture/nvtx_inject.c"],
            include_dirs=nvtx_include_dirs(),
            extra_compile_args=CFLAGS + ["-fvisibility=hidden"],
            extra_link_args=["-lpthread"],
        ),
    ]
)
