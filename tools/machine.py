"""Which machine a measurement ran on, and how busy it was (a tool: the tools that time things quote it).

Timings are only comparable on the same machine in the same state, so every timed table says where it was
made: the processor, the cores, Python, NumPy and its BLAS, BLAS's threads, and the load average at the
start and the end of the run, and which kind of machine it is (`machine_kind`: the pages keep figures for each).
"""

import contextlib
import os
import platform

import numpy as np

from speed.routes import processor
from speed.second_core import openblas_core


def machine_description():
    """'Intel(R) Xeon(R) ... , 2 cores, Linux, Python 3.11.2, NumPy 2.1.0': what the timings depend on."""
    return (f"{processor()[0]}, {os.cpu_count()} cores, {platform.system()}, Python {platform.python_version()}, "
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


AVX512_KERNELS = ("SkylakeX", "Cooperlake", "SapphireRapids")  # OpenBLAS's names for its AVX-512 kernels
KINDS = {"avx512": "AVX-512, Intel", "avx512-amd": "AVX-512, AMD", "avx2": "AVX2"}  # the kinds the pages keep figures
# for, and their names in the tables
NOT_MEASURED = "Not measured yet on this kind"  # how a kind's part begins before a figures run on such a machine


def machine_kind():
    """'avx512', 'avx512-amd' or 'avx2': which kind of machine this one measures as. The kernels NumPy's OpenBLAS
    chose when it loaded decide AVX-512 or not (an Intel Xeon and an AMD EPYC Zen 4 run SkylakeX's, with
    OpenBLAS's small-matrix kernel; an AMD EPYC before Zen 4, or most laptops, Haswell's, without it;
    OPENBLAS_CORETYPE=Haswell gives a Xeon the laptop's); where NumPy's BLAS is no OpenBLAS, the processor's
    avx512f flag. Among AVX-512 machines the maker splits the kind: the same kernels run at other speeds on an
    AMD processor (its name says "AMD"). Anything else, an Arm processor among them, counts as "avx2". The pages
    keep one block of each per-kind part for each kind (NAME-avx512, NAME-avx512-amd, NAME-avx2): a figures run
    writes its own kind's, and leaves the others' dated (or NOT_MEASURED)."""
    core = openblas_core()
    avx512 = core in AVX512_KERNELS if core else "avx512f" in processor()[1]
    if not avx512:
        return "avx2"
    return "avx512-amd" if "AMD" in processor()[0].upper().split() else "avx512"
