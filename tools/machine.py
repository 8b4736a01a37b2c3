"""Which machine a measurement ran on, and how busy it was (a tool: the tools that time things quote it).

Timings are only comparable on the same machine in the same state, so every timed table says where it was
made: the processor, the cores, Python, NumPy and its BLAS, BLAS's threads, and the load average at the
start and the end of the run. Needs only NumPy and the standard library.
"""

import contextlib
import os
import platform
from pathlib import Path

import numpy as np


def machine_description():
    """'Intel(R) Xeon(R) ... , 2 cores, Linux, Python 3.11.2, NumPy 2.1.0': what the timings depend on."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return (f"{cpu}, {os.cpu_count()} cores, {platform.system()}, Python {platform.python_version()}, "
            f"NumPy {np.__version__}")


def load_average():
    """The 1-minute run-queue average, or nan where the system keeps none (Windows)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def blas_description():
    """The BLAS NumPy was built with, as NumPy reports it ('scipy-openblas 0.3.31.188.0'), or 'an unknown BLAS'."""
    with contextlib.suppress(Exception):  # np.show_config(mode=...) is NumPy >= 1.26; its keys vary by build
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{blas['name']} {blas['version']}"
    return "an unknown BLAS"


def blas_threads():
    """The threads OpenBLAS starts in this process: OPENBLAS_NUM_THREADS if set (it is read when NumPy loads),
    else one per core. blas_threads() == 1 under `OPENBLAS_NUM_THREADS=1 python ...`."""
    value = os.environ.get("OPENBLAS_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else os.cpu_count()
