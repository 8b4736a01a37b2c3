"""Which machine a measurement ran on, and how busy it was (a tool: the tools that time things quote it).

Timings are only comparable on the same machine in the same state, so every timed table says where it was
made: the processor, the cores, Python, NumPy and its BLAS, BLAS's threads, and the load average at the
start and the end of the run, and which kind of machine it is (`machine_kind`: the pages keep figures for each).
"""

import contextlib
import os
import platform

import numpy as np

from speed.routes import cpuinfo_fields, processor
from speed.second_core import openblas_core


def machine_description():
    """'AMD EPYC (Zen 5; family 26 model 2), 2 cores, Linux, Python 3.11.7, NumPy 2.4.6': what the timings
    depend on. A virtual machine's processor name can be as bare as "AMD EPYC", so its family and model follow
    it (`processor_family`), and OPENBLAS_CORETYPE where the environment forces OpenBLAS's kernels."""
    details = [part for part in (processor_family(), forced_kernels()) if part]
    name = processor()[0] + (f" ({'; '.join(details)})" if details else "")
    return (f"{name}, {os.cpu_count()} cores, {platform.system()}, Python {platform.python_version()}, "
            f"NumPy {np.__version__}")


ZEN4_MODELS = (range(0x10, 0x20), range(0x60, 0x80), range(0xa0, 0xb0))  # family 25's Zen 4 models


def zen_generation(family, model):
    """AMD's core generation from the family and model numbers (AMD's own tables), or '' for one not listed:
    family 23 is Zen 1 (models below 0x30) or Zen 2; family 25 is Zen 4 for models 0x10-0x1f, 0x60-0x7f and
    0xa0-0xaf, else Zen 3; family 26 is Zen 5. Zen 4 and Zen 5 have AVX-512, the ones before do not."""
    if family == 23:
        return "Zen 1" if model < 0x30 else "Zen 2"
    if family == 25:
        return "Zen 4" if any(model in models for models in ZEN4_MODELS) else "Zen 3"
    return "Zen 5" if family == 26 else ""


def processor_family():
    """'Zen 5; family 26 model 2' (AMD), 'family 6 model 143' (Intel): which processor a bare name hides, or ''."""
    fields = cpuinfo_fields()
    family, model = fields.get("cpu family", ""), fields.get("model", "")
    if not (family.isdigit() and model.isdigit()):
        return ""
    zen = zen_generation(int(family), int(model)) if fields.get("vendor_id") == "AuthenticAMD" else ""
    return f"{zen + '; ' if zen else ''}family {family} model {model}"


def forced_kernels():
    """'OPENBLAS_CORETYPE Haswell' where the environment tells OpenBLAS which kernels to run (it then does not
    choose by the processor: a Zen 5 told Haswell runs the AVX2 kernels), else ''."""
    core = os.environ.get("OPENBLAS_CORETYPE", "").strip()
    return f"OPENBLAS_CORETYPE {core}" if core else ""


# After a timed call, the workers that made it spin a while, waiting for more work (OpenBLAS's threads for 2^28
# cycles, about a tenth of a second, unless OPENBLAS_THREAD_TIMEOUT shortens it; this project's helper process for
# second_core.SPIN_SECONDS; llama.cpp's OpenMP threads for less) before they sleep: they would take a core from the
# next timed call. So the tools that time calls in turns start each after this pause, long enough for all of them.
SETTLE_SECONDS = 0.2


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
    chose when it loaded decide AVX-512 or not (an Intel Xeon and an AMD EPYC Zen 4 or Zen 5 run SkylakeX's,
    with OpenBLAS's small-matrix kernel; an AMD EPYC before Zen 4, or most laptops, Haswell's, without it;
    OPENBLAS_CORETYPE=Haswell gives either the laptop's); where NumPy's BLAS is no OpenBLAS, the processor's
    avx512f flag. Among AVX-512 machines the maker splits the kind: the same kernels run at other speeds on an
    AMD processor (its name says "AMD"). Anything else, an Arm processor among them, counts as "avx2". The pages
    keep one block of each per-kind part for each kind (NAME-avx512, NAME-avx512-amd, NAME-avx2): a figures run
    writes its own kind's, and leaves the others' dated (or NOT_MEASURED)."""
    core = openblas_core()
    avx512 = core in AVX512_KERNELS if core else "avx512f" in processor()[1]
    if not avx512:
        return "avx2"
    return "avx512-amd" if "AMD" in processor()[0].upper().split() else "avx512"
