"""OpenBLAS set up from the environment before NumPy loads it: its idle threads go to sleep within a millisecond.

Read speed/second_core.py first (why a helper process shares the products, and why BLAS's own threads must not
spin on the cores it needs). The scripts that decode (main.py, tools/benchmark.py, the timing tools) import this
module FIRST, before anything imports NumPy; it needs only the standard library.

Why: a prompt runs on OpenBLAS's own threads (second_core.all_cores), and every step after it runs with the
helper process. Idle, an OpenBLAS thread spins for 2^28 processor cycles before it sleeps, and the helper and
this process give their cores away to it at every hand-over. second_core ends those threads where OpenBLAS
exports blas_thread_shutdown_ (the OpenBLAS of NumPy up to 2.4); NumPy 2.5's does not, and there the first
steps after a prompt were several times slower. OpenBLAS reads OPENBLAS_THREAD_TIMEOUT once, when NumPy loads
it: the log2 of the cycles an idle thread spins. 2^20 cycles are far shorter than a decoding step; a thread
that fell asleep between two of a prompt's products is woken by the next one, so a prompt still runs on every
core, in the same time. Measured once, 2026-11-26 on an Intel Xeon with 2 cores and NumPy 2.5.5 (124M shapes,
a 500-token prompt, then 10 steps, median of 8): the 10 steps took 304 ms unset and 236 ms at 20.

It also finds OpenBLAS's own functions in the library NumPy loaded (`openblas_function`: its thread count,
its kernels' name, `end_blas_threads`), which speed/second_core.py and speed/routes.py call once NumPy is loaded.

A value in the environment already wins (setdefault). In a notebook, set it before the first `import numpy`:
`%env OPENBLAS_THREAD_TIMEOUT=20`; too late, it changes nothing.
"""

import ctypes
import functools
import os
import threading

OPENBLAS_THREAD_TIMEOUT = "20"  # log2 of the cycles an idle OpenBLAS thread spins before it sleeps
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", OPENBLAS_THREAD_TIMEOUT)

BLAS_PREFIXES = ("scipy_openblas_", "openblas_", "")  # NumPy 2's wheels, older builds, a name given whole
BLAS_SUFFIXES = ("64_", "")  # the 64-bit-integer build, then the 32-bit one


@functools.lru_cache(maxsize=None)  # looked up once per name: a mode switch calls it again
def openblas_function(name):
    """OpenBLAS's function `name` ("set_num_threads", "get_num_threads", "get_corename" or "blas_thread_shutdown_"),
    from the OpenBLAS library this process has loaded, or None.

    NumPy's wheels bring their own OpenBLAS under a name of their own; /proc/self/maps lists every library the
    process has mapped (Linux), so it is found wherever NumPy put it (threadpoolctl does the same).
    """
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        paths = sorted({line.split(maxsplit=5)[5].strip() for line in maps
                        if len(line.split(maxsplit=5)) == 6 and "openblas" in line.lower() and ".so" in line})
    for path in paths:
        library = ctypes.CDLL(path)  # the library already loaded: the same copy NumPy calls
        for symbol in (prefix + name + suffix for prefix in BLAS_PREFIXES for suffix in BLAS_SUFFIXES):
            if hasattr(library, symbol):
                function = getattr(library, symbol)
                setting = name.startswith("set")
                function.argtypes, function.restype = ([ctypes.c_int], None) if setting else ([], ctypes.c_int)
                if name == "get_corename":
                    function.restype = ctypes.c_char_p  # its name, as text
                return function
    return None


def openblas_core():
    """The name OpenBLAS gives the kernels it chose for this processor when it loaded ("Haswell", "SkylakeX"),
    or '' where NumPy's BLAS is no OpenBLAS (speed/routes.py's fingerprint)."""
    try:
        function = openblas_function("get_corename")
    except OSError:  # no /proc/self/maps: not Linux
        return ""
    return function().decode(errors="replace").strip() if function is not None else ""


def end_blas_threads():
    """End OpenBLAS's own threads, back from a prompt. Idle, they spin for 2^28 cycles before they sleep, and
    the waits of this process and the helper give their core away to them (sched_yield) at every hand-over: the
    first decoding steps after a prompt took several times their usual time. OpenBLAS starts them again at the
    next product that wants them, as it does after every fork.
    Only where OpenBLAS exports blas_thread_shutdown_ (0.3.27 and 0.3.31 do; NumPy 2.5's 0.3.34 does not: there
    the scripts have them sleep within a millisecond instead: OPENBLAS_THREAD_TIMEOUT above), and only while every other
    Python thread is a daemon: a thread the program does not wait for, such as the monitor of a tqdm progress
    bar, is taken to do no arithmetic, but any other might be inside a BLAS call on those threads, which would
    then wait for ever."""
    shutdown = openblas_function("blas_thread_shutdown_")
    others = [thread for thread in threading.enumerate() if thread is not threading.current_thread()]
    if shutdown is not None and all(thread.daemon for thread in others):
        shutdown()
