"""The second core: a helper PROCESS, a copy of this one made by fork, multiplies half of a matrix's columns
while this process multiplies the other half (and attends with half of attention's heads, the same way).

Read speed/products.py's docstring first; products.matmul and products.share_heads are the only callers. This
file needs only NumPy, the standard library and speed/openblas_env.py (OpenBLAS's functions).

Why a process, and why it spins. A decoding pass multiplies by 49 matrices one after the other, each in a
fraction of a millisecond, so sharing each between two cores means 49 hand-overs a pass, and a hand-over must
cost about a microsecond. A helper THREAD cannot: waiting, it must sleep (spinning would hold the GIL the other
thread needs), and waking a sleeping thread costs tens of microseconds. A second process has its own GIL, so
it CAN spin: it polls a number in memory both processes map, and sees a new job within a microsecond
(docs/BENCHMARKS.md's design-timing table times the shared products against one core's).

What is shared, and why it is safe:
- The weights, without a copy: fork gives the child this process's memory as it is. A matrix is handed over
  only if the child has it: alive at the fork and read-only (`_frozen`), so its numbers are still the
  parent's. The loaders and loaders.random_weights.random_params make their weights read-only; anything else is multiplied here.
- The rows, the child's columns of the result and the job's few integers (`control`): anonymous shared memory.
  The parent writes the job, then its number into control[POSTED]; the child does the job, writes the result,
  then the number into control[DONE]. The other core sees stores in the order they were made only on x86-64
  ("total store order"), so the helper runs only there.
- The KV cache (`for_heads`): made after the fork and written by every pass, so `shared_empty` makes its buffer
  a memfd that the child maps through /proc/PARENT/fd/FD; freed in the parent, the child drops its mapping. A
  program's own fork (multiprocessing's workers) gets a private copy of each cache (`_after_fork_in_child`).
- BLAS runs on one thread in each process (`openblas_function`): OpenBLAS's own threads would compete with the
  helper for the two cores. A prompt's products get them back (`all_cores`); the next shared job (a product,
  or the prompt's own heads) ends them (`end_blas_threads`), or, where OpenBLAS cannot, they sleep within a
  millisecond (speed/openblas_env.py).
- Memory: pages either side writes after the fork are copied, so a model freed in the parent stays in the
  helper's copy until a new helper replaces it (`for_matrix` makes one for each new set of matrices).

It spins for SPIN_SECONDS after its last job, then sleeps on a pipe the parent writes a byte to. It ignores
Ctrl-C (the parent handles that) and ends when the parent's end of the pipe closes, when the parent ends.

When it runs: Linux on x86-64, two cores or more, OPENBLAS_NUM_THREADS not 1, and NumPy's BLAS OpenBLAS.
`unavailable()` says why not; then every product is made here, with BLAS's own threads. A helper that cannot
be made (fork or memfd_create refused, no memory) or is lost (killed, stopped, a failed job: `HelperLost`) is
given up (`give_up`): one line on stderr, and the run goes on in this process alone, with the same tokens.
"""

import ctypes
import gc
import itertools
import mmap
import os
import platform
import signal
import sys
import threading
import time
import warnings
import weakref
from typing import NamedTuple

import numpy as np

from speed.openblas_env import end_blas_threads, openblas_core, openblas_function  # noqa: F401 (also for callers)

SHMEM_HUGE_PAGES = "/sys/kernel/mm/transparent_hugepage/shmem_enabled"  # Linux's rule for shared memory's pages
SPIN_SECONDS = 0.05  # the helper polls for this long after a job, then sleeps until woken
STOPPED_SECONDS = 1.0  # of this process's time, waiting for a stopped helper before going on without it
MIN_BYTES = 1 << 20  # a smaller matrix (a tiny test model's) is multiplied here: a hand-over would cost more
# room in the shared rows for a prompt's heads (`for_heads` checks q and the mask of ALL heads against it: 1558M's
# 25 heads of 1024 queries and a 1024 x 1024 mask are 2.7 M numbers); pages in use only as a job writes them
HEADS_FLOATS_IN, HEADS_FLOATS_OUT = 3 << 20, 2 << 20
MEMFD_NAME = "kv-cache"  # the name of a `shared_empty` buffer's memory file, as /proc/PID/fd and maps show it

# the integers of `control`, shared by the two processes; a job is COLUMNS of a product or HEADS of attention
(POSTED, DONE, FAILED, SLEEPING, STOP, NAP, KEY, TRANSPOSED, ROWS, BEGIN, END,
 KIND, BUFFER, FD, NBYTES, K_OFFSET, V_OFFSET, KEYS, HEAD_STRIDE, HEAD_DIM, HOW) = range(21)
COLUMNS, HEADS = 0, 1


def _cores():
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def unavailable():
    """None if a helper process can share the products here, else why not (one line)."""
    if sys.platform != "linux" or not hasattr(os, "fork"):
        return f"the helper process needs Linux (fork and /proc); this is {sys.platform}"
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"the helper process needs x86-64's memory order; this is {platform.machine()}"
    if os.environ.get("OPENBLAS_NUM_THREADS", "").strip() == "1":
        return "OPENBLAS_NUM_THREADS=1 asks for one core"
    if _cores() < 2:
        return "this process may use one core only"
    if openblas_function("set_num_threads") is None:
        return "NumPy's BLAS is not an OpenBLAS whose threads can be set"
    return None


def _frozen(array):
    """True if nothing can change array's numbers through NumPy: it, and every array it is a view of, is
    read-only (so the helper's copy made by fork stays equal to it)."""
    while isinstance(array, np.ndarray):
        if array.flags.writeable:
            return False
        array = array.base
    return True


def _owner(w):
    """(the array that owns w's numbers, whether w is its transpose): the LM head multiplies by wte.T, a new
    view of wte each pass, so the helper is told "wte, transposed" rather than about the view."""
    base = w.base
    if (isinstance(base, np.ndarray) and base.ndim == 2 and w.shape == base.shape[::-1]
            and w.strides == base.strides[::-1] and w.ctypes.data == base.ctypes.data):
        return base, True
    return w, False


class Helper:
    """A forked copy of this process that runs `work(x, w, begin, end, out, how)` (out = x @ w[:, begin:end]) for
    the jobs posted to it, on the matrices it was given when it was made; and attention's heads over a
    `shared_empty` cache (`post_heads`), with an attention function it was given then too."""

    def __init__(self, matrices: dict, work, rows_max: int):
        if not hasattr(os, "fork"):  # Windows: `unavailable()` says so, and `for_matrix` makes no helper there
            raise RuntimeError(unavailable())
        arrays = [w for w in matrices.values() if isinstance(w, np.ndarray)]  # the rest: attention's functions
        n_in = max(w.shape[0] for w in arrays)  # the widest x, and the most columns, of any matrix
        n_out = max(max(w.shape) for w in arrays)  # (a transposed one has its shape the other way)
        self.control = np.frombuffer(mmap.mmap(-1, 8 * 32), dtype=np.int64)
        # the rows of a product of <= rows_max rows, or attention's heads for a prompt's queries (`post_heads`)
        self.rows_in = np.frombuffer(mmap.mmap(-1, 4 * max(rows_max * n_in, HEADS_FLOATS_IN)), dtype=np.float32)
        self.rows_out = np.frombuffer(mmap.mmap(-1, 4 * max(rows_max * n_out, HEADS_FLOATS_OUT)), dtype=np.float32)
        self.message = mmap.mmap(-1, 4096)  # why a job failed, as text
        self.known = weakref.WeakValueDictionary(matrices)  # the parent does not keep a model alive for it
        self.posted, self.out_shape, self.parent = 0, None, os.getpid()
        self.work, self.rows_max = work, rows_max
        self.reaped, self.stopped_since = False, None  # the child ended and waited for; when it was seen stopped
        wake_read, self.wake = os.pipe()
        global _making_helper
        with warnings.catch_warnings():  # Python 3.12+ warns that forking a process with threads may deadlock
            warnings.simplefilter("ignore", DeprecationWarning)  # in the child: this child only multiplies
            _making_helper = True  # the fork hooks below leave the caches alone: the helper maps what it needs
            try:
                self.pid = os.fork()
            except OSError:  # EAGAIN (too many processes), ENOMEM: no child, so no pipe either
                os.close(wake_read)
                os.close(self.wake)
                raise
            finally:
                _making_helper = False
        if self.pid == 0:  # the child: serve, and never return into the parent's code
            code = 1
            try:
                os.close(self.wake)
                gc.disable()  # the child frees none of the parent's objects (one would unmap a cache: `shared_empty`)
                _close_cache_descriptors()  # the child's copies: it maps a cache through its parent's descriptor
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
                self._serve(wake_read, dict(matrices), work)
                code = 0
            finally:
                os._exit(code)
        os.close(wake_read)

    def knows(self, key, owner):
        """True if the child has this matrix (the same object as at the fork, not a later one at its address)."""
        return self.known.get(key) is owner

    def _serve(self, wake_read, matrices, work):
        """The child's loop: do each new job; spin SPIN_SECONDS for the next; then sleep until woken."""
        control, seen, last, caches = self.control, 0, time.monotonic(), {}  # job numbers start at 1
        while not control[STOP]:
            if control[POSTED] != seen:
                seen = int(control[POSTED])
                try:
                    rows, begin, end = int(control[ROWS]), int(control[BEGIN]), int(control[END])
                    if control[KIND] == HEADS:
                        self._heads(matrices[int(control[KEY])], self._cache(caches), rows, end - begin)
                    else:
                        w = matrices[int(control[KEY])]
                        w = w.T if control[TRANSPOSED] else w  # [n_in, n_out]
                        x = self.rows_in[: rows * w.shape[0]].reshape(rows, w.shape[0])  # [rows, n_in]
                        out = self.rows_out[: rows * (end - begin)].reshape(rows, end - begin)
                        work(x, w, begin, end, out, int(control[HOW]))
                except BaseException as error:  # reported to the parent, which raises it
                    self.message[:] = f"{type(error).__name__}: {error}".encode()[:4096].ljust(4096)
                    control[FAILED] = seen
                control[DONE] = seen
                last = time.monotonic()
            elif time.monotonic() - last < SPIN_SECONDS and not control[NAP]:
                os.sched_yield()  # lets anything else that needs this core run
            else:  # sleep: say so first, then look once more, so a job posted meanwhile is not missed
                control[SLEEPING] = 1
                if control[POSTED] == seen and not control[STOP] and not os.read(wake_read, 4096):
                    return  # every write end of the pipe is closed: the parent has ended
                control[SLEEPING] = 0
                last = time.monotonic()

    def _cache(self, caches):
        """The parent's cache buffer named in control, mapped here: through the parent's descriptor of its memfd,
        /proc/PARENT/fd/FD, the first time. Before a new one is mapped, the mappings of buffers the parent has
        freed are dropped (their descriptor is closed, or is now another file), so their memory is returned."""
        number, fd = int(self.control[BUFFER]), int(self.control[FD])
        if number not in caches:
            for old, (old_fd, inode, _) in list(caches.items()):
                try:
                    alive = os.stat(f"/proc/{self.parent}/fd/{old_fd}").st_ino == inode
                except OSError:
                    alive = False
                if not alive:
                    del caches[old]
            descriptor = os.open(f"/proc/{self.parent}/fd/{fd}", os.O_RDWR)
            try:
                caches[number] = (fd, os.fstat(descriptor).st_ino, mmap.mmap(descriptor, int(self.control[NBYTES])))
            finally:
                os.close(descriptor)
            _ask_for_huge_pages(caches[number][2])
        return caches[number][2]

    def _heads(self, attend, memory, rows, n_heads):
        """out = attend(q, k, v, mask) for the heads posted: q and the mask from rows_in, k and v as views of
        the cache buffer `memory` (the parent's positions 0 .. KEYS - 1), out into rows_out."""
        control = self.control
        keys, head_dim, head_stride = int(control[KEYS]), int(control[HEAD_DIM]), int(control[HEAD_STRIDE])
        q_size = n_heads * rows * head_dim
        q = self.rows_in[:q_size].reshape(n_heads, rows, head_dim)  # [n_heads, rows, head_dim]
        mask = self.rows_in[q_size : q_size + rows * keys].reshape(rows, keys)  # [rows, keys]
        k, v = (np.ndarray((n_heads, keys, head_dim), np.float32, memory, int(control[offset]),
                           (head_stride, 4 * head_dim, 4)) for offset in (K_OFFSET, V_OFFSET))  # views, no copy
        self.rows_out[:q_size].reshape(n_heads, rows, head_dim)[...] = attend(q, k, v, mask)

    def post(self, x, key, transposed, begin, end, how=0):
        """Hand the child out = x @ w[:, begin:end] (x at most rows_max rows), made by work(x, w, begin, end,
        out, how); `collect` waits for it."""
        rows = x.shape[0]
        self.rows_in[: x.size].reshape(x.shape)[...] = x
        control = self.control
        control[KEY], control[TRANSPOSED], control[ROWS] = key, transposed, rows
        control[BEGIN], control[END], control[NAP], control[KIND], control[HOW] = begin, end, 0, COLUMNS, how
        self._send((rows, end - begin))

    def post_heads(self, attend_key, q, k, v, mask, cache):
        """Hand the child out = attend(q, k, v, mask) for q [n_heads, m, head_dim], the mask [m, n_keys], and k
        and v [n_heads, n_keys, head_dim] views of the shared buffer `cache` (a SharedBuffer): `collect` waits
        for it. The caller has checked that q and the mask fit in rows_in."""
        n_heads, rows, head_dim = q.shape
        self.rows_in[: q.size].reshape(q.shape)[...] = q
        self.rows_in[q.size : q.size + mask.size].reshape(mask.shape)[...] = mask
        control = self.control
        control[KEY], control[ROWS], control[BEGIN], control[END] = attend_key, rows, 0, n_heads
        control[BUFFER], control[FD], control[NBYTES], control[KEYS] = cache.number, cache.fd, cache.nbytes, k.shape[1]
        control[K_OFFSET], control[V_OFFSET] = k.ctypes.data - cache.address, v.ctypes.data - cache.address
        control[HEAD_STRIDE], control[HEAD_DIM], control[NAP], control[KIND] = k.strides[0], head_dim, 0, HEADS
        self._send(q.shape)

    def _send(self, out_shape):
        """Post the job now written in control and rows_in: its number last, so it is complete when seen."""
        control = self.control
        self.posted += 1
        self.out_shape = out_shape
        control[POSTED] = self.posted  # last: the job is complete in memory before its number is seen
        if control[SLEEPING]:
            self._wake()

    def _wake(self):
        """A byte down the pipe the child sleeps on; none if it has ended (the wait then finds out why)."""
        try:
            os.write(self.wake, b"!")
        except BrokenPipeError:
            pass

    def collect(self, out):
        """Wait for the posted job (spinning), then copy its columns into out; HelperLost if the job failed, or
        the child has ended or is stopped (`_lost`)."""
        control, woken, spins = self.control, False, 0
        while control[DONE] != self.posted:
            if control[SLEEPING] and not woken:  # it went to sleep just as the job was posted: wake it
                self._wake()
                woken = True
            spins += 1
            lost = self._lost() if spins % 10_000 == 0 else None
            if lost:
                raise HelperLost(lost)
            os.sched_yield()
        if control[FAILED] == self.posted:
            raise HelperLost("the helper process failed: " + bytes(self.message).decode(errors="replace").strip())
        out[...] = self.rows_out[: out.size].reshape(self.out_shape)

    def _lost(self):
        """Why the child will do no job any more, or None: it has ended (killed, by the OOM killer say), or it has
        been stopped (SIGSTOP, a debugger) for STOPPED_SECONDS of this process's own time. A look every 10,000
        spins of a wait. Ctrl-Z stops both processes and `fg` wakes both: this one's time stands still meanwhile."""
        if not self.reaped:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)  # (a stopped child is not reported without WUNTRACED)
            except ChildProcessError:  # the program waited for every child of its own (os.wait): this one too
                pid, status = self.pid, None
            self.reaped, self.status = pid != 0, status
        if self.reaped:
            how = ("how, unknown" if self.status is None else f"killed by signal {os.WTERMSIG(self.status)}"
                   if os.WIFSIGNALED(self.status) else f"exit code {os.waitstatus_to_exitcode(self.status)}")
            return f"the helper process (pid {self.pid}) has ended ({how})"
        if _state(self.pid) not in ("T", "t"):
            self.stopped_since = None
            return None
        now = time.process_time()
        self.stopped_since = now if self.stopped_since is None else self.stopped_since
        if now - self.stopped_since < STOPPED_SECONDS:
            return None
        return f"the helper process (pid {self.pid}) is stopped (SIGSTOP, or a debugger)"

    def nap(self):
        """Send the child to sleep now, not after SPIN_SECONDS, and wait until it sleeps (its core is free)."""
        self.control[NAP] = 1
        spins = 0
        while not self.control[SLEEPING]:
            spins += 1
            if spins % 10_000 == 0 and self._lost():
                return  # the next job's `collect` says so
            os.sched_yield()

    def stop(self):
        """End the child and wait for it: killed, since it keeps nothing (and a stopped child ends so too)."""
        if not self.reaped:
            try:
                if os.waitpid(self.pid, os.WNOHANG)[0] == 0:  # our child, not waited for: its pid is its own
                    os.kill(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
            except ChildProcessError:  # the program waited for it itself (os.wait): no kill, the pid may be reused
                pass
            self.reaped = True
        os.close(self.wake)


class HelperLost(RuntimeError):
    """The helper process did not do its job: it has ended, it is stopped, or the job failed in it
    (products.py then does the helper's part itself, after `give_up`)."""


def _state(pid):
    """The state letter of a process (/proc/PID/stat: R running, S sleeping, T stopped, Z ended...), or ''."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


_helper = None  # the helper process, made on first need
_blas_threads = None  # OpenBLAS's thread count before the first helper set it to 1
_all_cores = False  # True while BLAS has every core and the helper naps (`all_cores`)
_seen = weakref.WeakValueDictionary()  # id -> matrix multiplied here once, not known to the helper
_in_use = threading.Lock()  # one product at a time uses the helper; another thread meanwhile works alone
_shared = {}  # id(mmap) -> the SharedBuffer of each live `shared_empty` buffer
_snapshots = []  # (array, its copy) for each live shared buffer, from just before a fork to just after
_making_helper = False  # True while this process forks a helper (which needs no copy of the caches)
_numbers = itertools.count(1)  # a buffer's number: an fd is reused once closed, a number never
_REASON = unavailable()  # checked once: None where a helper may run


class SharedBuffer(NamedTuple):
    """A live `shared_empty` buffer: what the helper needs to map it, and what its parent needs to free it."""

    number: int  # never reused (an fd is, once closed)
    fd: int  # this process's descriptor of the memfd
    nbytes: int
    address: int  # where its memory starts here
    flat: weakref.ref  # to its [nbytes / 4] array (the fork hooks copy it)
    finalizer: weakref.finalize  # closes fd when the buffer is freed


def for_matrix(w, work, rows_max):
    """(the helper, the key and transposed flag to post) for a product by w of at most rows_max rows, or None
    to multiply here.

    A matrix multiplied for the first time is multiplied here and remembered; the second time (the next pass),
    a new helper is forked that has every matrix seen so far, so a model costs one fork, not 49. The caller
    must `release()` after collecting.
    """
    if _REASON is not None or w.dtype != np.float32 or w.nbytes < MIN_BYTES:
        return None
    owner, transposed = _owner(w)
    if not _frozen(owner):
        return None
    helper = _helper_for(owner, work, rows_max)
    return None if helper is None else (helper, id(owner), transposed)


def for_heads(attend, q, k, v, mask):
    """(the helper, the key of `attend`, the cache buffer of k and v) for attend(q, k, v, mask) over heads of
    a KV cache held in `shared_empty` memory, or None to compute here (a buffer of np.empty, q and the mask
    too big for the shared rows, a function the helper was not forked with: it is remembered, as a matrix is
    in `for_matrix`, and the next helper has it). The caller must `release()` after collecting."""
    root = _root(k)
    cache = None if _REASON is not None else _shared.get(id(root))
    if (cache is None or _root(v) is not root or k.dtype != np.float32 or q.dtype != np.float32
            or mask.dtype != np.float32 or k.strides[1:] != (4 * k.shape[2], 4) or v.strides != k.strides):
        return None
    helper = _helper_for(attend, None, None)
    if helper is not None and (q.size + mask.size > helper.rows_in.size or q.size > helper.rows_out.size):
        release()
        return None
    return None if helper is None else (helper, id(attend), cache)


def _helper_for(owner, work, rows_max):
    """The helper, holding `owner` (a matrix, or attention's function), and ready for one job; or None.

    An object met for the first time is remembered and None returned; the second time, a new helper is forked
    that has every object seen so far (work and rows_max: those of products.matmul's products, None to keep the
    current helper's). None as well while another thread's product uses the helper."""
    global _helper, _blas_threads, _all_cores
    key = id(owner)
    if _helper is not None and _helper.parent != os.getpid():  # a forked child of ours: the helper is not its own
        _helper = None
    if _helper is None or not _helper.knows(key, owner):
        if _seen.get(key) is not owner:
            _seen[key] = owner
            return None
        if _helper is None and work is None:
            return None  # attention's function alone: the first matrix product makes the helper
        matrices = {**(dict(_helper.known) if _helper else {}), **dict(_seen)}
        work, rows_max = (work, rows_max) if work is not None else (_helper.work, _helper.rows_max)
        if _helper is not None:
            _helper.stop()
            _helper = None  # (`give_up` must not stop it twice)
        _blas_threads = _blas_threads or openblas_function("get_num_threads")()
        openblas_function("set_num_threads")(1)  # from now on BLAS runs on the calling thread, here and in the helper
        _helper, _all_cores = _new_helper(matrices, work, rows_max), False
        _seen.clear()
        if _helper is None:
            return None
    if not _in_use.acquire(blocking=False):
        return None
    one_core()
    return _helper


def one_core():
    """Back from a prompt (`all_cores`): BLAS on one thread again, as the next shared product wants it (the
    helper wakes with that product's job). Nothing where no helper runs."""
    global _all_cores
    if _all_cores:
        openblas_function("set_num_threads")(1)
        end_blas_threads()
        _all_cores = False


def renew():
    """A new helper in place of the one running, with every object it had: a copy of this process as it is now.
    speed/routes.py renews it after choosing routes, so that the helper's attention takes the same routes as
    this process's. Nothing where no helper runs."""
    global _helper
    if _helper is None or _helper.parent != os.getpid() or not _in_use.acquire(blocking=False):
        return
    try:
        matrices, work, rows_max = dict(_helper.known), _helper.work, _helper.rows_max
        _helper.stop()
        _helper = None
        one_core()  # the new helper is forked with BLAS on one thread, as every helper is
        alive = any(isinstance(w, np.ndarray) for w in matrices.values())  # else its matrices were all freed
        _helper = _new_helper(matrices, work, rows_max) if alive else None
    finally:
        _in_use.release()


def _new_helper(matrices, work, rows_max):
    """A new Helper, or None where one cannot be made (fork refused: EAGAIN; no memory for the shared rows:
    ENOMEM), after `give_up` has said so."""
    try:
        return Helper(matrices, work, rows_max)
    except (OSError, MemoryError) as error:
        give_up(f"the helper process for the second core could not be made ({_error_text(error)})")
        return None


def give_up(reason):
    """Go on without the second core: the helper is lost (`HelperLost`) or cannot be made. Every product and
    every head is made here from now on, BLAS on all its threads, as where `unavailable()`: the same numbers to
    float32 rounding (tests/test_products.py), so greedy decoding writes the same tokens, more slowly. Said
    once, in one line on stderr."""
    global _REASON, _helper, _all_cores
    if _REASON is None:
        print(f"{reason}: going on with one core (the same tokens, more slowly)", file=sys.stderr, flush=True)
        _REASON = reason
    helper, _helper = _helper, None
    if helper is not None and helper.parent == os.getpid():  # not a helper of the process this one forked from
        helper.stop()
    if _blas_threads:
        openblas_function("set_num_threads")(_blas_threads)
    _all_cores = False


def _error_text(error):
    """'fork: Resource temporarily unavailable' for an OSError; the type and message of anything else."""
    if isinstance(error, OSError) and error.strerror:
        return f"{error.strerror} (errno {error.errno})"
    return f"{type(error).__name__}: {error}"


def shared_empty(shape):
    """np.empty(shape, dtype=np.float32), in memory that the helper process can map as well: a memfd (a file in
    memory) where a helper may run, so that `for_heads` can hand it attention heads over this KV cache buffer.

    The helper was forked before the cache was made, so it maps the buffer through this process's descriptor,
    /proc/PID/fd/FD; the descriptor closes when the buffer is freed. A helper forked later does not inherit
    the mapping (MADV_DONTFORK: it would keep a freed cache's memory alive) nor keep the descriptor.
    """
    nbytes = 4 * int(np.prod(shape))
    if _REASON is not None or nbytes < MIN_BYTES:
        return np.empty(shape, dtype=np.float32)
    try:
        memory, fd = _memory_file(nbytes)
    except OSError as error:  # memfd_create missing (ENOSYS: an old kernel, a sandbox), no memory (ENOMEM)
        give_up(f"the KV cache cannot be shared with the second core's helper process ({_error_text(error)})")
        memory, fd = None, None
    if memory is None:  # (out of the except: a MemoryError here is no error "during" that one)
        return np.empty(shape, dtype=np.float32)
    flat = np.frombuffer(memory, dtype=np.float32)  # [nbytes / 4], owns nothing: the mmap does
    _shared[id(memory)] = SharedBuffer(next(_numbers), fd, nbytes, flat.ctypes.data, weakref.ref(flat),
                                       weakref.finalize(memory, _forget, id(memory), fd))
    return flat.reshape(shape)


def _memory_file(nbytes):
    """(a shared mapping of a new memfd of nbytes, its descriptor): memory a helper can map too."""
    fd = os.memfd_create(MEMFD_NAME)
    try:
        os.ftruncate(fd, nbytes)
        memory = mmap.mmap(fd, nbytes)  # MAP_SHARED: the helper's mapping sees the same pages
        memory.madvise(mmap.MADV_DONTFORK)
        _ask_for_huge_pages(memory)
    except BaseException:
        os.close(fd)
        raise
    return memory, fd


def _ask_for_huge_pages(memory):
    """Ask Linux for 2 MB pages for a mapping of a cache buffer (in this process, and in the helper). Shared
    memory gets them only where SHMEM_HUGE_PAGES says "advise" (or "always"); with the usual "never" the hint
    changes nothing and the pages stay 4 KB, which cost the shared heads about a tenth (see speed/products.py)."""
    if os.path.exists(SHMEM_HUGE_PAGES):  # a kernel built without huge pages would refuse the hint
        memory.madvise(mmap.MADV_HUGEPAGE)


def _close_cache_descriptors():
    """Close this process's descriptors of `shared_empty` memfds (in a helper just forked: its copies of the
    parent's, which would keep a freed cache's memory alive; Python's mmap holds a copy of its own of each)."""
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # the descriptor of the listing itself, closed by now
            continue
        if target.startswith(f"/memfd:{MEMFD_NAME} "):
            os.close(int(name))


def _forget(key, fd):
    """A shared buffer was freed: close its descriptor (the memory goes when the helper's mapping does too)."""
    _shared.pop(key, None)
    os.close(fd)


def _before_fork():
    """Before a fork that is not a helper's (a program's own, such as multiprocessing's workers): a copy of
    every live shared buffer, which `_after_fork_in_child` puts back in the child's private memory."""
    global _snapshots
    flats = [] if _making_helper else [buffer.flat() for buffer in _shared.values()]
    _snapshots = [(flat, flat.copy()) for flat in flats if flat is not None]


def _after_fork_in_parent():
    """The copies are the child's: the parent lets them go."""
    global _snapshots
    _snapshots = []


def _after_fork_in_child():
    """In a child of a fork that is not a helper's: each cache buffer becomes the child's own, as np.empty memory
    would be after a fork. The mapping was not inherited (MADV_DONTFORK), so fresh private memory is mapped at
    the same address (every view of it stays valid) and the copy made before the fork is written into it. The
    child's copies of the descriptors are closed, and no buffer counts as shared here any more: a helper of
    the child's own would read the parent's memfd, not this memory."""
    global _snapshots
    if _making_helper:
        return
    for flat, snapshot in _snapshots:
        address = _libc_mmap(flat.ctypes.data, flat.nbytes, mmap.PROT_READ | mmap.PROT_WRITE,
                             mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_FIXED, -1, 0)
        if address != flat.ctypes.data:
            raise OSError(ctypes.get_errno(), "could not map a KV cache buffer's memory in a forked child")
        flat[...] = snapshot
    for buffer in _shared.values():
        buffer.finalizer.detach()  # it would close a descriptor number the child may reuse
        os.close(buffer.fd)
    _shared.clear()
    _snapshots = []


def _root(array):
    """The object at the bottom of array's chain of views (for a `shared_empty` buffer, its mmap)."""
    while isinstance(array, np.ndarray):
        array = array.base
    return array.obj if isinstance(array, memoryview) else array  # np.frombuffer's base: a view of the mmap


def release():
    """The product that `for_matrix` handed the helper is collected."""
    _in_use.release()


def all_cores():
    """Before a product of many rows (a prompt): the helper sleeps, and BLAS runs on all its threads here, until
    the next product `for_matrix` shares. Its big kernel is the faster there (the arithmetic has caught up with
    the reading of the weights), and it would not fit the shared buffers anyway. The next shared product ends
    BLAS's threads again (`end_blas_threads`)."""
    global _all_cores
    if _helper is None or _all_cores or _helper.parent != os.getpid() or not _in_use.acquire(blocking=False):
        return
    try:
        _helper.nap()
        openblas_function("set_num_threads")(_blas_threads)
        _all_cores = True
    finally:
        _in_use.release()


MAP_FIXED = 0x10  # Linux's flag (Python's mmap module does not name it): map at exactly the address given
_libc_mmap = ctypes.CDLL(None, use_errno=True).mmap if _REASON is None else None  # the C library's mmap
if _libc_mmap is not None:
    _libc_mmap.restype = ctypes.c_void_p
    _libc_mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)
