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

A value in the environment already wins (setdefault). In a notebook, set it before the first `import numpy`:
`%env OPENBLAS_THREAD_TIMEOUT=20`; too late, it changes nothing.
"""

import os

OPENBLAS_THREAD_TIMEOUT = "20"  # log2 of the cycles an idle OpenBLAS thread spins before it sleeps
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", OPENBLAS_THREAD_TIMEOUT)
