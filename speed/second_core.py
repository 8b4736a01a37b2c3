"""The other cores: helper PROCESSES, copies of this one made by fork, each multiplying an equal share of a
matrix's columns while this process multiplies the first share (and attending with shares of the heads too).

Read speed/products.py's docstring first: its products and heads are the work shared here (routes.py and layouts.py
ask for counts and new helpers). It needs only NumPy, the standard library, shared_cache.py and openblas_env.py.

Why processes, and why they spin. A decoding pass multiplies by 49 matrices one after the other, each in a
fraction of a millisecond, so sharing each among cores means 49 hand-overs a pass, and a hand-over must cost
about a microsecond. A helper THREAD cannot: waiting, it must sleep (spinning would hold the GIL the others
need), and waking a sleeping thread costs tens of microseconds. So do BLAS's own threads, which is why the split
is processes, not BLAS threads inside each: a panel product is too small for BLAS to split, and its idle threads
would take the cores the helpers spin on. A process has its own GIL, so it CAN spin: each helper polls a number
in memory it shares with this process and sees a new job as soon as it is posted, with nothing to wake.

How many: `workers()`, this process and workers() - 1 helpers, each with an equal share of the panels or heads
(`shares`, `run_shared`), BLAS on one thread in each. Measured, not assumed: speed/routes.py times the step's
products with each count up to the cores this process may use (os.sched_getaffinity) and keeps the fastest
with the routes (`use_workers`); 1 is this process alone, BLAS on all its threads. GPT2_WORKERS=N forces N
(WORKERS_VARIABLE), even above the cores: tests/test_second_core_workers.py proves 3 and 4 give the same numbers.

What is shared, and why it is safe:
- The weights, without a copy: fork gives each helper this process's memory as it is. A matrix is handed over
  only if it was alive at the fork and is read-only (`_frozen`: the loaders and random_params make it so).
- The rows, a helper's columns of the result and the job's few integers (`control`): anonymous shared memory,
  one set per helper. The parent writes the job, then its number into control[POSTED]; the helper does it,
  writes the result, then the number into control[DONE]. Another core sees stores in the order they were made
  only on x86-64 ("total store order"), so helpers run only there.
- The KV cache (`for_heads`): made after the fork and written by every pass, so it is a memfd each helper maps
  (speed/shared_cache.py, which also gives a program's own fork, multiprocessing's, a private copy).
- BLAS's threads: a prompt's products get them back (`all_cores`); the next shared job ends them
  (`end_blas_threads`), or, where OpenBLAS cannot, they sleep within a millisecond (speed/openblas_env.py).
- Memory: pages either side writes after the fork are copied, so a model freed in the parent stays in the
  helpers' copies until new helpers replace them (`for_matrix` makes them for each new set of matrices).

A helper spins for SPIN_SECONDS after its last job, then sleeps on a pipe the parent writes a byte to. It ignores
Ctrl-C (the parent handles that) and ends when the parent's end of its pipe closes, when the parent ends.

When they run: Linux on x86-64, two cores or more, OPENBLAS_NUM_THREADS not 1, NumPy's BLAS OpenBLAS; else
`unavailable()` says why not. Helpers that cannot be made (fork or memfd_create refused, no memory) or one lost
(killed, stopped, a failed job: `HelperLost`) are given up (`give_up`): one line, and the run goes on here alone.
"""

import gc
import mmap
import os
import platform
import signal
import sys
import threading
import time
import warnings
import weakref

import numpy as np

from speed import shared_cache
from speed.openblas_env import end_blas_threads, openblas_core, openblas_function  # noqa: F401 (also for callers)

SPIN_SECONDS = 0.05  # the helper polls for this long after a job, then sleeps until woken
STOPPED_SECONDS = 1.0  # of this process's time, waiting for a stopped helper before going on without it
MIN_BYTES = 1 << 20  # a smaller matrix (a tiny test model's) is multiplied here: a hand-over would cost more
# room in the shared rows for a prompt's heads (`for_heads` checks q, the mask, and k and v where they are copied,
# of ALL heads against it: 1558M's 25 heads of 1024 queries, a 1024 x 1024 mask and 1024 keys and values are 6 M
# numbers); pages in use only as a job writes them
HEADS_FLOATS_IN, HEADS_FLOATS_OUT = 6 << 20, 2 << 20
DEFAULT_WORKERS = 2  # processes sharing each product where no count was measured: this one and one helper
WORKERS_MAX = 64  # the most a count may say (WORKERS_VARIABLE, a routes file)
WORKERS_VARIABLE = "GPT2_WORKERS"  # forces the count, over the measured one (`forced_workers`)

# the integers of `control`, shared by this process and a helper; a job is COLUMNS of a product or HEADS of attention
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
    KV cache (`post_heads`), with an attention function it was given then too."""

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
        with warnings.catch_warnings():  # Python 3.12+ warns that forking a process with threads may deadlock
            warnings.simplefilter("ignore", DeprecationWarning)  # in the child: this child only multiplies
            shared_cache.making_helper = True  # its fork hooks leave the caches alone: the helper maps what it needs
            try:
                self.pid = os.fork()
            except OSError:  # EAGAIN (too many processes), ENOMEM: no child, so no pipe either
                os.close(wake_read)
                os.close(self.wake)
                raise
            finally:
                shared_cache.making_helper = False
        if self.pid == 0:  # the child: serve, and never return into the parent's code
            code = 1
            try:
                for end in (self.wake, *_wake_ends):  # its own, and those of the helpers forked before it
                    os.close(end)  # (else a helper would outlive its parent for as long as a later one lives)
                gc.disable()  # the child frees none of the parent's objects (one would unmap a shared cache)
                shared_cache.close_cache_descriptors()  # it maps a cache through its parent's descriptor
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
                self._serve(wake_read, dict(matrices), work)
                code = 0
            finally:
                os._exit(code)
        os.close(wake_read)
        _wake_ends.add(self.wake)

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
                    if control[KIND] == HEADS:  # (BUFFER -1: k and v came in the rows)
                        memory = None if control[BUFFER] < 0 else self._cache(caches)
                        self._heads(matrices[int(control[KEY])], memory, rows, end - begin)
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
            shared_cache.ask_for_huge_pages(caches[number][2])
        return caches[number][2]

    def _heads(self, attend, memory, rows, n_heads):
        """out = attend(q, k, v, mask) for the heads posted: q and the mask from rows_in, k and v as views of
        the cache buffer `memory` (the parent's positions 0 .. KEYS - 1), or, memory None, from rows_in after
        the mask; out into rows_out."""
        control = self.control
        keys, head_dim, head_stride = int(control[KEYS]), int(control[HEAD_DIM]), int(control[HEAD_STRIDE])
        q_size, kv_size = n_heads * rows * head_dim, n_heads * keys * head_dim
        q = self.rows_in[:q_size].reshape(n_heads, rows, head_dim)  # [n_heads, rows, head_dim]
        mask = self.rows_in[q_size : q_size + rows * keys].reshape(rows, keys)  # [rows, keys]
        if memory is None:  # copies, one after the other: [n_heads, keys, head_dim] each
            start = q_size + rows * keys
            k, v = (self.rows_in[at : at + kv_size].reshape(n_heads, keys, head_dim) for at in (start, start + kv_size))
        else:
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
        and v [n_heads, n_keys, head_dim] views of the shared buffer `cache` (a SharedBuffer), or, cache None,
        copied into rows_in after the mask: `collect` waits for it. The caller has checked that they fit."""
        n_heads, rows, head_dim = q.shape
        at = q.size + mask.size
        self.rows_in[: q.size].reshape(q.shape)[...] = q
        self.rows_in[q.size : at].reshape(mask.shape)[...] = mask
        control = self.control
        control[KEY], control[ROWS], control[BEGIN], control[END] = attend_key, rows, 0, n_heads
        control[KEYS], control[HEAD_DIM], control[NAP], control[KIND] = k.shape[1], head_dim, 0, HEADS
        if cache is None:
            control[BUFFER] = -1
            self.rows_in[at : at + k.size].reshape(k.shape)[...] = k
            self.rows_in[at + k.size : at + 2 * k.size].reshape(v.shape)[...] = v
        else:
            control[BUFFER], control[FD], control[NBYTES] = cache.number, cache.fd, cache.nbytes
            control[K_OFFSET], control[V_OFFSET] = k.ctypes.data - cache.address, v.ctypes.data - cache.address
            control[HEAD_STRIDE] = k.strides[0]
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
        _wake_ends.discard(self.wake)
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


_team = []  # the helper processes, workers() - 1 of them, made on first need
_chosen = None  # the worker count speed/routes.py measured fastest here (`use_workers`); None: DEFAULT_WORKERS
_wake_ends = set()  # this process's ends of its helpers' pipes (a helper forked after another closes its copy)
_blas_threads = None  # OpenBLAS's thread count before the first helper set it to 1
_all_cores = False  # True while BLAS has every core and the helpers nap (`all_cores`)
_seen = weakref.WeakValueDictionary()  # id -> matrix multiplied here once, not known to the helpers
_in_use = threading.Lock()  # one product at a time uses the helpers; another thread meanwhile works alone
_REASON = unavailable()  # checked once: None where a helper may run


def forced_workers():
    """The worker count WORKERS_VARIABLE forces (GPT2_WORKERS=3: this process and 2 helpers, whatever was
    measured), or None where it is unset; a ValueError in one line for a value that is no count."""
    text = os.environ.get(WORKERS_VARIABLE, "").strip()
    if not text:
        return None
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= WORKERS_MAX):
        raise ValueError(f"{WORKERS_VARIABLE}={text[:20]!r} must be a number of processes from 1 to {WORKERS_MAX}; "
                         f"unset it to let the measurement choose")
    return int(text)


def workers():
    """How many processes share each product: 1 where no helper can run (`unavailable`, or after `give_up`),
    else the count WORKERS_VARIABLE forces, else the one speed/routes.py measured fastest (`use_workers`), else
    DEFAULT_WORKERS."""
    if _REASON is not None:
        return 1
    return forced_workers() or _chosen or DEFAULT_WORKERS


def use_workers(count):
    """Share the products among `count` processes from now on (None: the default), as speed/routes.py measured
    or a routes file keeps them: a running team of another size is replaced (`renew`). Returns True if it was."""
    global _chosen
    _chosen = count
    if _team and len(_team) + 1 != workers():
        renew()
        return True
    return False


def chosen_workers():
    """The count `use_workers` was given last (None: none, the default)."""
    return _chosen


def shares(n, parts):
    """The bounds of `parts` equal shares of n things (panels, heads): [0, ..., n], share i from bounds[i] to
    bounds[i + 1]. shares(36, 2) == [0, 18, 36]; shares(12, 5) == [0, 2, 5, 7, 10, 12]."""
    return [round(n * i / parts) for i in range(parts + 1)]


def run_shared(team, bounds, post, here, out_of):
    """A job in parts, part i from bounds[i] to bounds[i + 1]: part 0 made here, `here(begin, end)`; part i + 1
    by team[i], posted first, `post(helper, begin, end)`, and collected last into out_of(begin, end). A helper
    lost (`HelperLost`): `give_up`, and every helper's part made here, here(bounds[1], bounds[-1]). Releases
    the team (`release`)."""
    jobs = [(helper, begin, end) for helper, begin, end in zip(team, bounds[1:], bounds[2:]) if end > begin]
    try:
        for helper, begin, end in jobs:
            post(helper, begin, end)
        if bounds[1] > bounds[0]:
            here(bounds[0], bounds[1])
        for helper, begin, end in jobs:
            helper.collect(out_of(begin, end))
    except HelperLost as lost:  # killed, stopped, or its job failed: the helpers' parts made here
        give_up(str(lost))
        here(bounds[1], bounds[-1])
    finally:
        release()


def for_matrix(w, work, rows_max):
    """(the helpers, the key and transposed flag to post) for a product by w of at most rows_max rows, or None
    to multiply here.

    A matrix multiplied for the first time is multiplied here and remembered; the second time (the next pass),
    new helpers are forked that have every matrix seen so far, so a model costs one fork a helper, not 49. The
    caller must `release()` after collecting (`run_shared` does).
    """
    if _REASON is not None or w.dtype != np.float32 or w.nbytes < MIN_BYTES:
        return None
    owner, transposed = _owner(w)
    if not _frozen(owner):
        return None
    team = _team_for(owner, work, rows_max)
    return None if team is None else (team, id(owner), transposed)


def for_heads(attend, q, k, v, mask):
    """(the helpers, the key of `attend`, the cache buffer of k and v, or None) for attend(q, k, v, mask) over
    heads of a KV cache: in shared memory (products.kv_buffer) the helpers read k and v where they are; anywhere
    else (this process's own memory) they get copies of them in the shared rows, worth it for a prompt's heads,
    whose work far outweighs the copy. None to compute here: float32 arrays only, q and the mask (and the
    copies) must fit the shared rows, and a function the helpers were not forked with is remembered, as a matrix
    is in `for_matrix`, for the next helpers to have. The caller must `release()` after collecting."""
    if _REASON is not None or any(array.dtype != np.float32 for array in (q, k, v, mask)):
        return None
    root = shared_cache.root(k)
    cache = shared_cache.shared.get(id(root))
    if cache is not None and (shared_cache.root(v) is not root or k.strides[1:] != (4 * k.shape[2], 4)
                              or v.strides != k.strides):
        return None
    team = _team_for(attend, None, None)
    copies = 0 if cache is not None else k.size + v.size
    if team is not None and (q.size + mask.size + copies > team[0].rows_in.size or q.size > team[0].rows_out.size):
        release()
        return None
    return None if team is None else (team, id(attend), cache)


def _team_for(owner, work, rows_max):
    """The helpers, each holding `owner` (a matrix, or attention's function), ready for one job; or None.

    An object met for the first time is remembered and None returned; the second time, new helpers are forked
    that have every object seen so far (work and rows_max: those of products.matmul's products, None to keep the
    current helpers'). None as well with one worker (`workers`), or while another thread's product uses them."""
    global _team, _blas_threads, _all_cores
    key = id(owner)
    if _team and _team[0].parent != os.getpid():  # a forked child of ours: the helpers are not its own
        _team = []
    if not _team or not _team[0].knows(key, owner):
        if _seen.get(key) is not owner:
            _seen[key] = owner
            return None
        if (not _team and work is None) or workers() == 1:
            return None  # attention's function alone: the first matrix product makes the helpers
        matrices = {**(dict(_team[0].known) if _team else {}), **dict(_seen)}
        if not any(isinstance(w, np.ndarray) for w in matrices.values()):
            return None  # attention's function alone, its matrices freed (a model measured, then dropped)
        work, rows_max = (work, rows_max) if work is not None else (_team[0].work, _team[0].rows_max)
        _stop_team()
        _blas_threads = _blas_threads or openblas_function("get_num_threads")()
        openblas_function("set_num_threads")(1)  # from now on BLAS runs on the calling thread, in every process
        _team, _all_cores = _new_team(matrices, work, rows_max), False
        _seen.clear()
        if not _team:
            return None
    if not _in_use.acquire(blocking=False):
        return None
    one_core()
    return _team


def one_core():
    """Back from a prompt (`all_cores`): BLAS on one thread again, as the next shared product wants it (the
    helpers wake with that product's job). Nothing where no helper runs."""
    global _all_cores
    if _all_cores:
        openblas_function("set_num_threads")(1)
        end_blas_threads()
        _all_cores = False


def renew():
    """New helpers in place of those running, with every object they had, as many as `workers()` says now:
    copies of this process as it is now. speed/routes.py renews them after choosing routes (so that their
    attention takes this process's routes) or another count (`use_workers`). Nothing where no helper runs."""
    global _team
    if not _team or _team[0].parent != os.getpid() or not _in_use.acquire(blocking=False):
        return
    try:
        matrices, work, rows_max = dict(_team[0].known), _team[0].work, _team[0].rows_max
        _stop_team()
        one_core()  # new helpers are forked with BLAS on one thread, as every helper is
        alive = any(isinstance(w, np.ndarray) for w in matrices.values())  # else its matrices were all freed
        if alive and workers() > 1:
            _team = _new_team(matrices, work, rows_max)
        else:  # one worker: this process alone, BLAS on all its threads; a later count has the objects at once
            _seen.update(matrices)
            openblas_function("set_num_threads")(_blas_threads)
    finally:
        _in_use.release()


def _new_team(matrices, work, rows_max):
    """workers() - 1 new Helpers, or [] where one cannot be made (fork refused: EAGAIN; no memory for the shared
    rows: ENOMEM), after those made are stopped and `give_up` has said so."""
    team = []
    try:
        for _ in range(workers() - 1):
            team.append(Helper(matrices, work, rows_max))
    except (OSError, MemoryError) as error:
        for helper in team:
            helper.stop()
        give_up(f"a helper process for another core could not be made ({error_text(error)})")
        return []
    return team


def _stop_team():
    """Stop every helper of the team (not those of the process this one forked from) and forget them."""
    global _team
    team, _team = _team, []
    for helper in team:
        if helper.parent == os.getpid():
            helper.stop()


def give_up(reason):
    """Go on without the helpers: one is lost (`HelperLost`) or cannot be made. Every product and every head is
    made here from now on, BLAS on all its threads, as where `unavailable()`: the same numbers to float32
    rounding (tests/test_products.py), so greedy decoding writes the same tokens, more slowly. Said once, in
    one line on stderr."""
    global _REASON, _all_cores
    if _REASON is None:
        print(f"{reason}: going on with one core (the same tokens, more slowly)", file=sys.stderr, flush=True)
        _REASON = reason
    _stop_team()
    if _blas_threads:
        openblas_function("set_num_threads")(_blas_threads)
    _all_cores = False


def error_text(error):
    """'Resource temporarily unavailable (errno 11)' for an OSError; the type and message of anything else."""
    if isinstance(error, OSError) and error.strerror:
        return f"{error.strerror} (errno {error.errno})"
    return f"{type(error).__name__}: {error}"


def release():
    """The product that `for_matrix` handed the helpers is collected."""
    _in_use.release()


def all_cores():
    """Before a product of many rows (a prompt): the helpers sleep, and BLAS runs on all its threads here, until
    the next product `for_matrix` shares. Its big kernel is the faster there (the arithmetic has caught up with
    the reading of the weights), and it would not fit the shared buffers anyway. The next shared product ends
    BLAS's threads again (`end_blas_threads`)."""
    global _all_cores
    if not _team or _all_cores or _team[0].parent != os.getpid() or not _in_use.acquire(blocking=False):
        return
    try:
        for helper in _team:
            helper.nap()
        openblas_function("set_num_threads")(_blas_threads)
        _all_cores = True
    finally:
        _in_use.release()
