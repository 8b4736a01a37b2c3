"""How a weight matrix is stored and multiplied, so that a pass over a few rows costs about what one row costs.

Read this before gpt2.py, which multiplies every weight matrix through `matmul` below; it needs only NumPy.

The layout: column-major
------------------------
A weight matrix w [n_in, n_out] is stored column by column (Fortran order, `column_major`): same shape, same
values, only the order in memory changes. Read the other way round, those bytes are w.T, an ordinary row-major
[n_out, n_in] matrix, and any `width` consecutive rows of w.T (`width` columns of w) sit one after the other:
the matrix is a stack of contiguous panels [n_out / width, width, n_in], with no copy (`panel_width`).
The loaders (weights.read_tensor) make this layout as they read each matrix; wte [n_vocab, n_embd] already is
it for the LM head's wte.T.

Why panels: the product of m rows
---------------------------------
With the KV cache a decoding pass over m new positions reads every weight once and does 2·m flops per weight.
For m ≤ 16 that is too little arithmetic to keep a core busy: the pass is memory-bound, and m rows should cost
about what one row costs. One BLAS call does not deliver that. For one row it streams the matrix (a
matrix-vector product); for two rows or more it runs its matrix-matrix kernel, which first PACKS the matrix
into a buffer of its own, block by block: a 9 MB matrix is read, written to the buffer and read again, and
neither the matrix nor the buffer fits in the core's L2 cache. So on a CPU a 2-row product of a big matrix
costs two to three 1-row products, and a speculative round's verification pass costs that much more than a
decoding step (r(m), in the README). Multiplying panel by panel instead (ONE `np.matmul(x, panels)`, a small
product per panel) packs one panel at a time: width × n_in floats (192 KB for 124M's c_attn) are read
from memory once, packed, and used from L2 by all m rows. Memory traffic is then the weights once, whatever
m is, until the arithmetic itself takes longer than reading the weights (about m = 16 on one core).

A product of one panel is too small for BLAS to split between cores, so the panels are shared out between
THREADS Python threads (one of them the caller, which takes CALLER_SHARE of them: a helper starts only once
it has woken up), each writing its part of the output (`out=`); NumPy releases the GIL inside matmul, so
they run at once. One row keeps BLAS's own matrix-vector product (on all cores, the fastest way to stream a
matrix once: a one-token step costs what it did), and so do more than PANEL_ROWS_MAX rows (a prompt, or a
long verification pass: there the arithmetic catches up and BLAS's big kernel is the faster). Measured on
an Intel Xeon with 2 cores (NumPy 2.4, OpenBLAS 0.3.31, a quiet machine), ms for the products of m rows
through 124M's 48 block matrices (best of 9; tools/small_parts.py times the same in every figures run, the
"design-timing" table of BENCHMARKS.md):

    m                                              1      2      4      8     16
    one BLAS call, (w.T @ x.T).T (2 threads)    11.9   26.5   27.2   30.0   31.9
    panels, the caller alone                       -   24.1   29.2   36.6   49.4
    panels, the caller and one helper              -   18.1   18.6   24.5   31.6

What holds the panels back on this machine, measured: each hand-over to the helper costs tens of
microseconds (a sleeping virtual core must be woken), 49 times a pass; and right after a one-row product
OpenBLAS's own threads keep spinning for a while, waiting for more work, on the core the helper needs. In a
whole pass after a one-token step the products of 2 rows then take about twice a one-row product, not 1.5
times (BENCHMARKS.md's pass table shows each part of a pass). Routing one row through the panels as well
keeps OpenBLAS's threads asleep: the block matrices and the LM head then took 21.5, 25.6 and 32.2 ms for 2,
4 and 8 rows, but 27.5 ms for one row, against 16.9 ms for BLAS's matrix-vector product (in the same run).
A one-token step would take about 1.5 times as long: not done.
"""

import os
import threading

import numpy as np

PANEL_ROWS_MAX = 12  # longer passes (a prompt, or 12 guesses and more) go to one BLAS call: faster there
BLAS_ONE_THREAD_MAX = 2**20  # OpenBLAS (0.3.31) keeps a product of m x n_in x width <= this on the calling thread


def panel_width(n_in: int) -> int:
    """Columns of w per panel: the widest power of two up to 64 whose product with PANEL_ROWS_MAX rows OpenBLAS
    runs on the calling thread (larger ones it splits between threads of its own, which would compete with
    ours). 64 for n_in = 768 to 1280 (192 KB a panel for 768), 32 for 1600, 16 for 3072 to 5120, 8 for 6400."""
    width = 64
    while width > 1 and PANEL_ROWS_MAX * n_in * width > BLAS_ONE_THREAD_MAX:
        width //= 2
    return width


def column_major(params: dict) -> dict:
    """The same parameters, with each block's weight matrices stored column by column (Fortran order).

    Shapes and values do not change: w is still [n_in, n_out] and `x @ w` is the same product; only the order
    of the numbers in memory does (see the module docstring for why). The loaders in utils.py and
    `gpt2.random_params` return parameters in this layout; wte needs nothing: the LM head multiplies by wte.T,
    which is wte read column by column.
    """

    def convert(tree):
        if isinstance(tree, dict):
            return {key: convert(value) for key, value in tree.items()}
        return np.asfortranarray(tree) if tree.ndim == 2 else tree  # the [n_in, n_out] matrices

    return {**params, "blocks": [convert(block) for block in params["blocks"]]}


def matmul(x, w):
    """x @ w for x [m, n_in] and w [n_in, n_out] float32: the same product, computed the fastest way for m.

    w column-major (`column_major`) with 2 <= m <= PANEL_ROWS_MAX: panel by panel (the module docstring), the
    panels shared out between THREADS threads. Otherwise one BLAS call with the big matrix on the left,
    (w.T @ x.T).T, which for one row is BLAS's matrix-vector product on all cores. Any other w (a row-major
    matrix, as a test or a tiny model may pass) gets plain x @ w.
    """
    m, n_out = x.shape[0], w.shape[1]
    if not w.flags.f_contiguous or w.ndim != 2 or x.ndim != 2:
        return x @ w  # [m, n_out]
    width = panel_width(w.shape[0])
    n_panels = n_out // width
    if m == 1 or m > PANEL_ROWS_MAX or n_panels < 2:
        return (w.T @ x.T).T  # [n_out, n_in] @ [n_in, m] -> [n_out, m] -> [m, n_out]
    n_full = n_panels * width  # the columns in whole panels; the rest (wte.T's last 17) go on their own
    panels = w.T[:n_full].reshape(n_panels, width, -1).transpose(0, 2, 1)  # [n_panels, n_in, width]: views
    out = np.empty((n_panels, m, width), dtype=np.result_type(x, w))  # [n_panels, m, width]
    _shared_out(x, panels, out)
    y = np.empty((m, n_out), dtype=out.dtype)  # [m, n_out]
    y[:, :n_full] = out.transpose(1, 0, 2).reshape(m, n_full)  # panel p holds columns p * width ...
    if n_full < n_out:
        y[:, n_full:] = (w.T[n_full:] @ x.T).T  # [m, n_out - n_full]
    return y


# ------------------------------------------------------------------------------------------------------------
# The threads: np.matmul(x, panels[a:b], out=out[a:b]) for each thread's share of the panels
# ------------------------------------------------------------------------------------------------------------


def _thread_count():
    """OPENBLAS_NUM_THREADS if set (the project's one knob for threads: it is read when NumPy loads), else one
    per core this process may run on."""
    value = os.environ.get("OPENBLAS_NUM_THREADS", "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


THREADS = _thread_count()
CALLER_SHARE = 0.55  # of the panels, for the calling thread: a helper must wake up before it starts

class _Helper(threading.Thread):
    """A thread that waits for a share of a product, computes it, and says it is done (two locks as signals)."""

    def __init__(self):
        super().__init__(daemon=True)  # it never keeps Python from exiting
        self.go, self.done = threading.Lock(), threading.Lock()
        self.go.acquire()
        self.done.acquire()
        self.job, self.error = None, None
        self.start()

    def run(self):
        while True:
            self.go.acquire()  # wait for a job
            x, panels, out = self.job
            try:
                np.matmul(x, panels, out=out)  # [n, m, width]: NumPy lets go of the GIL inside
            except BaseException as error:  # handed to the caller, who raises it
                self.error = error
            self.job = None
            self.done.release()


_helpers = []  # the helper threads, started on first use
_helpers_pid = None
_in_use = threading.Lock()  # one product at a time uses the helpers; another thread meanwhile computes alone


def _shared_out(x, panels, out):
    """np.matmul(x, panels, out=out), the panels split between the caller and the helper threads."""
    global _helpers, _helpers_pid
    n_threads = min(THREADS, len(panels))
    if n_threads < 2 or not _in_use.acquire(blocking=False):
        np.matmul(x, panels, out=out)
        return
    try:
        if _helpers_pid != os.getpid():  # a forked child has none of its parent's threads
            _helpers, _helpers_pid = [], os.getpid()
        _helpers += [_Helper() for _ in range(n_threads - 1 - len(_helpers))]
        first = round(len(panels) * CALLER_SHARE)  # the caller starts at once; a helper must wake up first
        bounds = [0, first] + [first + (len(panels) - first) * i // (n_threads - 1) for i in range(1, n_threads)]
        helpers = _helpers[: n_threads - 1]
        for helper, begin, end in zip(helpers, bounds[1:], bounds[2:]):
            helper.job = (x, panels[begin:end], out[begin:end])
            helper.go.release()
        try:
            np.matmul(x, panels[: bounds[1]], out=out[: bounds[1]])  # the caller's share
        finally:  # the helpers are waited for even if it failed: they write into out
            for helper in helpers:
                helper.done.acquire()
            errors = [helper.error for helper in helpers if helper.error is not None]
            for helper in helpers:
                helper.error = None
        if errors:
            raise errors[0]
    finally:
        _in_use.release()
