"""OpenBLAS set up from the environment before NumPy loads it: its idle threads go to sleep within a millisecond.

Read speed/second_core.py first (why a helper process shares the products, and why BLAS's own threads must not
spin on the cores it needs). The scripts that decode (main.py, tools/benchmark.py, the timing tools) import this
module FIRST, before anything imports NumPy; it needs only the standard library.

Why: a prompt runs on OpenBLAS's own threads (second_core.all_cores), and every step after it runs with the
helper process. Idle, an OpenBLAS thread spins for 2^28 processor cycles, about 0.1 s, before it sleeps, and
the helper and this process give their cores away to it at every hand-over. helper_process ends those threads
where OpenBLAS exports blas_thread_shutdown_ (the OpenBLAS of NumPy up to 2.4); NumPy 2.5's (0.3.34) does not,
and there the first steps after a 500-token prompt took 43 to 120 ms instead of 24. OpenBLAS reads
OPENBLAS_THREAD_TIMEOUT once, when NumPy loads it: the log2 of the cycles an idle thread spins. 2^20 cycles
are 0.3 to 0.5 ms, far shorter than a decoding step; a thread that fell asleep between two of a prompt's
products is woken by the next one, so a prompt still runs on every core, in the same time (even at 4, asleep
at once). Measured on an Intel Xeon with 2 cores, 124M shapes, a 500-token prompt then 10 steps, median of 8
(the steps: from the prompt's end):

    OPENBLAS_THREAD_TIMEOUT             unset (28)     4     16     20     24     26
    NumPy 2.5.5: the 10 steps, ms            304        234    242    236    244    254
                 the prompt, ms              754        750    768    768    812    790
    NumPy 2.4.6: the 10 steps, ms          235, 240                 238, 238
                 the prompt, ms            786, 804                 809, 797

(the prompt's time moves by some 30 ms from run to run). Prompt lookup on the rewrite, end to end with its prompt
(`python tools/benchmark_text.py --texts rewrite,code --Ks auto --capped False`, median of 3), NumPy 2.5.5:
3.39x faster than autoregressive decoding without the setting, 3.67x with it (NumPy 2.4.6: 3.57x).

A value in the environment already wins (setdefault). In a notebook, set it before the first `import numpy`:
`%env OPENBLAS_THREAD_TIMEOUT=20`; too late, it changes nothing.
"""

import os

OPENBLAS_THREAD_TIMEOUT = "20"  # log2 of the cycles an idle OpenBLAS thread spins before it sleeps
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", OPENBLAS_THREAD_TIMEOUT)
