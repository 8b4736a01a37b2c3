"""The helper process shares products and attention's heads and gives exactly x @ w and the attention; it is
handed only what it can see; it fails loudly; a freed cache goes.

Read speed/second_core.py first (why a second PROCESS multiplies half of each matrix's columns, and how the two
meet in shared memory). Where no helper can run (not Linux on x86-64, one core, OPENBLAS_NUM_THREADS=1) these
tests skip with the reason; the project's CI machines run them.
"""

import faulthandler
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import REPO_ROOT

from speed import second_core, shared_cache
from speed import products
from gpt2 import attention, causal_mask, tree_ancestors, tree_mask
from test_products import assert_same_product, default_routes  # noqa: F401  the default routes here too

pytestmark = pytest.mark.skipif(second_core.unavailable() is not None,
                                reason=f"no helper process here: {second_core.unavailable()}")


def read_only(array):
    """array, read-only: as the loaders and loaders.random_weights.random_params give weights."""
    array.flags.writeable = False
    return array


def shared(w, x):
    """Multiply by w twice (the first product is made here and remembers w; the second forks a helper that has
    it), and return the helper that now holds w."""
    products.matmul(x, w)
    products.matmul(x, w)
    owner, _ = second_core._owner(w)
    helper = second_core._team[0]
    assert helper is not None and helper.knows(id(owner), owner), "the second product did not reach a helper"
    return helper


@pytest.fixture(scope="module")
def matrices():
    """A c_attn-shaped block matrix (column-major) and an LM head (wte, multiplied as wte.T), read-only."""
    rng = np.random.default_rng(0)
    w = np.empty((768, 2304), dtype=np.float32, order="F")
    w[...] = rng.standard_normal((768, 2304), dtype=np.float32) * 0.02
    wte = rng.standard_normal((50257, 768), dtype=np.float32) * 0.02
    return read_only(w), read_only(wte)


def test_a_shared_product_is_x_times_w_for_every_row_count(matrices):
    """With the helper holding the matrices, every m it shares, 1 .. PANEL_ROWS_MAX rows, and PANEL_ROWS_MAX + 1,
    64 and 200 (a prompt's, multiplied here on all cores while the helper naps), give x @ w to float32 rounding:
    the block matrix, and the LM head (wte.T)."""
    w, wte = matrices
    rng = np.random.default_rng(1)
    x = rng.standard_normal((200, 768), dtype=np.float32)
    for matrix in (w, wte.T):
        shared(matrix, x[:2])
        reference = x @ np.ascontiguousarray(matrix)  # [200, n_out], row-major: plain BLAS
        for m in [*range(1, products.PANEL_ROWS_MAX + 2), 64, 200]:
            assert_same_product(products.matmul(x[:m], matrix), reference[:m], f"{m} rows, shared")


def test_the_helper_gives_the_same_bits_as_one_process_alone(matrices):
    """Each column is computed by the same routine in either process, so sharing changes no bit of the
    result (a seed reproduces a run whether a helper runs or not)."""
    w, wte = matrices
    rng = np.random.default_rng(2)
    for matrix in (w, wte.T):
        for m in (1, 3, 8, products.PANEL_ROWS_MAX):
            x = rng.standard_normal((m, 768), dtype=np.float32)
            shared(matrix, x)
            alone = np.empty((m, matrix.shape[1]), dtype=np.float32)
            products.columns(x, matrix, 0, matrix.shape[1], alone)
            assert np.array_equal(products.matmul(x, matrix), alone), f"{m} rows: the helper changed bits"


def test_a_prompt_gets_every_core_and_the_next_pass_shares_again(matrices):
    """A product of more rows than PANEL_ROWS_MAX sends the helper to sleep at once and gives BLAS back its
    threads; the next few-row product wakes the helper and puts BLAS on one thread again."""
    w, _ = matrices
    rng = np.random.default_rng(5)
    shared(w, rng.standard_normal((2, 768), dtype=np.float32))
    get_threads = second_core.openblas_function("get_num_threads")
    assert get_threads() == 1
    x = rng.standard_normal((100, 768), dtype=np.float32)
    assert_same_product(products.matmul(x, w), x @ np.ascontiguousarray(w), "a 100-row prompt")
    assert second_core._team[0].control[second_core.SLEEPING] == 1, "the helper did not nap"
    assert get_threads() == second_core._blas_threads > 1
    assert_same_product(products.matmul(x[:3], w), x[:3] @ np.ascontiguousarray(w), "3 rows after the prompt")
    assert get_threads() == 1


def test_after_a_prompt_the_next_shared_product_ends_blas_threads_where_openblas_can():
    """Idle, OpenBLAS's threads spin for about 0.1 s and take the helper's core at every hand-over, so the
    first shared product after a prompt ends them. In a fresh process, with a tqdm progress bar open (its
    monitor is a daemon thread), the OS threads that are not Python's: none before the prompt (the fork of the
    helper ended BLAS's), some during it, and none again after the next shared product where OpenBLAS exports
    blas_thread_shutdown_ (where it does not, they are still there). With another thread that is not a
    daemon, which might be inside a BLAS call, they are left alone."""
    program = (
        "import os, threading, numpy as np\nfrom speed import second_core, products\n"
        "from tqdm import tqdm\n"
        "w = np.asfortranarray(np.ones((768, 2304), dtype=np.float32)); w.flags.writeable = False\n"
        "x = np.ones((100, 768), dtype=np.float32)\n"
        "threads = lambda: len(os.listdir('/proc/self/task')) - threading.active_count()  # not Python's\n"
        "products.matmul(x[:2], w); products.matmul(x[:2], w)\n"
        "def counts():\n"
        "    before = threads(); products.matmul(x, w); during = threads(); products.matmul(x[:2], w)\n"
        "    return before, during, threads()\n"
        "with tqdm(total=1, file=open(os.devnull, 'w')):\n"
        "    assert threading.active_count() == 2, 'the bar has a monitor thread'\n"
        "    with_daemon = counts()\n"
        "done = threading.Event(); other = threading.Thread(target=done.wait); other.start()\n"
        "with_other = counts(); done.set(); other.join()\n"
        "can = second_core.openblas_function('blas_thread_shutdown_') is not None\n"
        "print(*with_daemon, *with_other, can)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    *counts, can = done.stdout.split()
    before, during, after, _, during_other, after_other = map(int, counts)
    assert before == 0 and during > 0 and after == (0 if can == "True" else during), done.stdout
    assert during_other > 0 and after_other == during_other, f"ended beside a thread that is not a daemon: {done.stdout}"


def test_a_writable_matrix_is_never_handed_to_the_helper():
    """Fork gives the helper a copy of memory as it was: a matrix that can still change would be multiplied
    with old numbers. So a writable one stays here, however often it is used, and its product follows its
    changes."""
    rng = np.random.default_rng(3)
    w = np.asfortranarray(rng.standard_normal((768, 2304), dtype=np.float32))
    x = rng.standard_normal((4, 768), dtype=np.float32)
    for _ in range(3):
        assert second_core.for_matrix(w, products.columns, products.PANEL_ROWS_MAX) is None
    w[:, 1500] = 7.0  # a column that the helper would multiply
    assert_same_product(products.matmul(x, w), x @ np.ascontiguousarray(w), "after a change")


def test_the_check_has_teeth_a_matrix_changed_after_the_fork_gives_a_stale_product(monkeypatch):
    """Why only read-only matrices go to the helper: let a writable one through, change it after the fork,
    and the helper's half of the product is computed from the old numbers."""
    monkeypatch.setattr(second_core, "_frozen", lambda array: True)
    rng = np.random.default_rng(4)
    w = np.asfortranarray(rng.standard_normal((768, 2304), dtype=np.float32))
    x = rng.standard_normal((4, 768), dtype=np.float32)
    shared(w, x)
    w[:, 2000] += 1.0  # the helper's half (columns from about 1152 on); the parent sees it, the helper does not
    with pytest.raises(AssertionError, match="off by"):
        assert_same_product(products.matmul(x, w), x @ np.ascontiguousarray(w), "after a change")


def test_an_error_in_the_helper_is_raised_in_the_parent_and_the_helper_goes_on():
    """A job that raises in the helper: the parent raises RuntimeError with the helper's message, and the next
    job is done as usual (nothing hangs, nothing is swallowed)."""
    def work(x, w, begin, end, out, how=0):
        if x[0, 0] < 0:
            raise ValueError("a negative first entry")
        out[...] = x @ w[:, begin:end]

    w = read_only(np.asfortranarray(np.ones((512, 512), dtype=np.float32)))
    helper = second_core.Helper({id(w): w}, work, rows_max=4)
    try:
        helper.post(-np.ones((2, 512), dtype=np.float32), id(w), False, 256, 512)
        with pytest.raises(RuntimeError, match="the helper process failed: ValueError: a negative first entry"):
            helper.collect(np.empty((2, 256), dtype=np.float32))
        out = np.empty((2, 256), dtype=np.float32)
        helper.post(np.ones((2, 512), dtype=np.float32), id(w), False, 256, 512)
        helper.collect(out)
        assert np.all(out == 512)
    finally:
        helper.stop()


def test_the_helper_sleeps_after_spinning_and_wakes_for_the_next_job():
    """After SPIN_SECONDS without a job the helper sleeps (it says so in control[SLEEPING]); a job posted
    then wakes it, and is done."""
    w = read_only(np.asfortranarray(np.ones((512, 512), dtype=np.float32)))
    helper = second_core.Helper({id(w): w}, lambda x, w, begin, end, out, how=0: np.matmul(x, w[:, begin:end], out=out),
                                    rows_max=4)
    try:
        deadline = time.monotonic() + 10 * second_core.SPIN_SECONDS + 5
        while not helper.control[second_core.SLEEPING] and time.monotonic() < deadline:
            time.sleep(second_core.SPIN_SECONDS)
        assert helper.control[second_core.SLEEPING] == 1, "the helper never went to sleep"
        out = np.empty((3, 256), dtype=np.float32)
        helper.post(np.full((3, 512), 2, dtype=np.float32), id(w), False, 256, 512)
        helper.collect(out)
        assert np.all(out == 1024)
    finally:
        helper.stop()


def test_a_helper_that_has_died_is_reported_not_waited_for():
    """The helper killed in the middle of its work: the parent's wait ends with a RuntimeError that says so,
    within seconds, instead of spinning for ever."""
    def slow(x, w, begin, end, out, how=0):
        time.sleep(60)

    w = read_only(np.asfortranarray(np.ones((512, 512), dtype=np.float32)))
    helper = second_core.Helper({id(w): w}, slow, rows_max=4)
    try:
        helper.post(np.ones((1, 512), dtype=np.float32), id(w), False, 256, 512)
        os.kill(helper.pid, 9)
        started = time.monotonic()
        with pytest.raises(RuntimeError, match=f"the helper process \\(pid {helper.pid}\\) has ended"):
            helper.collect(np.empty((1, 256), dtype=np.float32))
        assert time.monotonic() - started < 10
    finally:
        helper.stop()


def test_the_helper_ends_when_its_parent_ends():
    """A program that makes a helper and exits without stopping it: the helper sees its pipe close and ends
    too, so no process is left spinning behind a finished run."""
    program = (
        "import numpy as np\nfrom speed import second_core\n"
        "w = np.asfortranarray(np.ones((512, 512), dtype=np.float32)); w.flags.writeable = False\n"
        "helper = second_core.Helper({id(w): w}, lambda *job: None, rows_max=4)\n"
        "print(helper.pid, flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    pid = int(done.stdout.split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    assert not _alive(pid), f"the helper {pid} outlived its parent"


def _alive(pid):
    """True while a process with this pid exists (and is not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def heads_shared(q, k, v, mask):
    """products.share_heads(gpt2.attention, ...) twice: the first time the helper does not know the function and
    it is computed here (and remembered); the second forks a helper that has it. Returns that helper."""
    products.share_heads(attention, q, k, v, mask)
    products.share_heads(attention, q, k, v, mask)
    helper = second_core._team[0]
    assert helper is not None and helper.knows(id(attention), attention), "the heads did not reach a helper"
    return helper


def a_cache(rng, n_layer=2, n_head=12, capacity=256, head_dim=64):
    """A KV cache buffer as gpt2 makes one (products.kv_buffer: shared memory), filled with random keys and
    values; 3 MB, above the size a helper takes."""
    buffer = products.kv_buffer((n_layer, 2, n_head, capacity, head_dim))
    buffer[...] = rng.standard_normal(buffer.shape, dtype=np.float32)
    return buffer


def primed(matrices, seed, m, n_keys):
    """A helper that holds a matrix and gpt2.attention; a cache buffer; queries q [12, m, 64]; the keys and
    values k, v of the buffer's first layer at positions 0 .. n_keys - 1, and the causal mask of the last m.
    Returns (the random generator, the buffer, q, k, v, the mask)."""
    w, _ = matrices
    rng = np.random.default_rng(seed)
    shared(w, rng.standard_normal((2, 768), dtype=np.float32))
    buffer = a_cache(rng)
    q = rng.standard_normal((12, m, 64), dtype=np.float32)
    k, v = buffer[0, :, :, :n_keys]
    mask = causal_mask(m, n_keys - m)
    heads_shared(q, k, v, mask)
    return rng, buffer, q, k, v, mask


def inode_of(buffer):
    """The inode of a kv_buffer's memory file (its memfd), as /proc's maps and smaps name the file."""
    return os.fstat(shared_cache.shared[id(shared_cache.root(buffer))].fd).st_ino


def mappings(pid, inode):
    """How many times process pid maps the memory file with this inode (a cache buffer's memfd)."""
    with open(f"/proc/{pid}/maps", encoding="utf-8") as maps:
        return sum(len(line.split()) > 4 and int(line.split()[4]) == inode for line in maps)


def vm_flags(pid, inode):
    """The VmFlags of each mapping process pid has of the memory file with this inode, from /proc/PID/smaps."""
    with open(f"/proc/{pid}/smaps", encoding="utf-8") as smaps:
        text = smaps.read()
    flags, mapped = [], False
    for line in text.splitlines():
        fields = line.split()
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):  # a mapping's first line: address, perms, offset, dev, inode
            mapped = len(fields) > 4 and int(fields[4]) == inode
        elif mapped and fields[0] == "VmFlags:":
            flags.append(fields[1:])
    return flags


def cache_descriptors(pid):
    """The inodes of the cache buffers (memfds named shared_cache.MEMFD_NAME) that process pid holds open."""
    inodes = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(f"/memfd:{shared_cache.MEMFD_NAME} "):
            inodes.append(os.stat(f"/proc/{pid}/fd/{fd}").st_ino)
    return inodes


def test_shared_heads_give_the_same_bits_as_attention_alone_for_every_query_count(matrices):
    """With the helper holding attention's function, the heads of q over a cache buffer are split between the
    two processes: each head is computed by the same function on the same numbers, so the result equals
    gpt2.attention of all heads bit for bit, for 1 .. PANEL_ROWS_MAX queries and a tree's mask, and the
    helper did a job for each call (its job count grew)."""
    w, _ = matrices
    rng = np.random.default_rng(6)
    shared(w, rng.standard_normal((2, 768), dtype=np.float32))
    buffer = a_cache(rng)
    n_past = 100
    for m in range(1, products.PANEL_ROWS_MAX + 1):
        q = rng.standard_normal((12, m, 64), dtype=np.float32)
        k, v = buffer[1, :, :, : n_past + m]  # [12, n_past + m, 64] each: views, as gpt2.mha reads them
        masks = [causal_mask(m, n_past)]
        if m >= 3:
            masks.append(tree_mask(tree_ancestors((-1, -1, *range(m - 2))), n_past))  # two roots, then a chain
        for mask in masks:
            helper = heads_shared(q, k, v, mask)
            posted = helper.posted
            assert np.array_equal(products.share_heads(attention, q, k, v, mask), attention(q, k, v, mask)), m
            assert helper.posted == posted + 1, f"{m} queries: the helper was not handed the heads"


def test_a_prompts_heads_are_shared_too_and_its_next_product_gets_every_core_back(matrices):
    """A prompt's attention (here 200 queries over 200 keys, causal) is split between the processes as a
    step's is, bit for bit the same, with BLAS on one thread in each; the prompt's next product (more than
    PANEL_ROWS_MAX rows) gives BLAS its threads back, as any prompt product does."""
    w, _ = matrices
    rng, _, q, k, v, mask = primed(matrices, seed=13, m=200, n_keys=200)
    helper = second_core._team[0]
    get_threads = second_core.openblas_function("get_num_threads")
    x = rng.standard_normal((200, 768), dtype=np.float32)
    products.matmul(x, w)  # a prompt's product: every core
    assert get_threads() == second_core._blas_threads > 1
    posted = helper.posted
    assert np.array_equal(products.share_heads(attention, q, k, v, mask), attention(q, k, v, mask))
    assert helper.posted == posted + 1, "the prompt's heads were not handed to the helper"
    assert get_threads() == 1, "BLAS kept its threads beside the helper's heads"
    products.matmul(x, w)
    assert get_threads() == second_core._blas_threads


def test_heads_too_many_for_the_shared_rows_are_attended_here(matrices, monkeypatch):
    """q and the mask travel through the helper's shared rows: a job that does not fit them (here: rows made
    smaller than a 200-query prompt's q and mask need) is computed in this process, with the same result."""
    _, _, q, k, v, mask = primed(matrices, seed=14, m=200, n_keys=200)
    helper = second_core._team[0]
    monkeypatch.setattr(helper, "rows_in", helper.rows_in[: q.size + mask.size - 1])  # one number short
    posted = helper.posted
    assert np.array_equal(products.share_heads(attention, q, k, v, mask), attention(q, k, v, mask))
    assert helper.posted == posted, "a job too big for the shared rows was posted"


def test_the_helper_reads_keys_written_after_it_was_forked(matrices):
    """A cache is written after the helper exists (every pass writes its new keys): the helper maps the
    buffer itself, so it reads what the parent wrote, not a copy made at the fork."""
    rng, buffer, q, _, _, _ = primed(matrices, seed=7, m=1, n_keys=50)
    for n_keys in (60, 80, 200):
        buffer[0, :, :, n_keys - 10 : n_keys] = rng.standard_normal((2, 12, 10, 64), dtype=np.float32)  # new keys
        k, v = buffer[0, :, :, :n_keys]
        mask = causal_mask(1, n_keys - 1)
        assert np.array_equal(products.share_heads(attention, q, k, v, mask), attention(q, k, v, mask)), n_keys


@pytest.mark.skipif(not os.path.exists(shared_cache.SHMEM_HUGE_PAGES),
                    reason="this kernel has no transparent huge pages: there is no hint to give")
def test_both_processes_ask_for_huge_pages_for_a_cache_buffer(matrices, monkeypatch):
    """Each mapping of a cache buffer, this process's and the helper's, carries the huge-page hint (VmFlags
    "hg", what madvise(MADV_HUGEPAGE) sets), so that where Linux allows huge pages for shared memory the
    attention reads 2 MB pages, as it does in np.empty memory. A buffer made without the hint has no "hg"."""
    _, buffer, *_ = primed(matrices, seed=12, m=1, n_keys=50)
    inode = inode_of(buffer)
    for pid in ("self", second_core._team[0].pid):
        flags = vm_flags(pid, inode)
        assert flags and all("hg" in mapping for mapping in flags), (pid, flags)
    monkeypatch.setattr(shared_cache, "ask_for_huge_pages", lambda memory: None)
    plain = products.kv_buffer(buffer.shape)
    flags = vm_flags("self", inode_of(plain))
    assert flags and not any("hg" in mapping for mapping in flags), flags


@pytest.mark.parametrize("own_memory", [False, True])
def test_the_check_has_teeth_the_helper_given_the_wrong_keys_gives_other_heads(matrices, monkeypatch, own_memory):
    """Hand the helper the values where the keys should be (a wrong offset into the shared buffer; with a cache
    in this process's own memory, the values copied where the keys go): its half of the heads comes out
    different, and the comparisons above and below fail."""
    _, _, q, k, v, mask = primed(matrices, seed=8, m=4, n_keys=100)
    if own_memory:
        k, v = np.array([k, v])  # [2, n_head, n_keys, head_dim]: a copy in np.empty memory
    post = second_core.Helper.post_heads
    monkeypatch.setattr(second_core.Helper, "post_heads",
                        lambda self, key, q, k, v, mask, cache: post(self, key, q, v, v, mask, cache))
    out = products.share_heads(attention, q, k, v, mask)
    right = attention(q, k, v, mask)
    assert np.array_equal(out[:6], right[:6]) and not np.allclose(out[6:], right[6:])


def test_a_cache_of_this_processs_own_memory_is_shared_by_copies_with_the_same_numbers(matrices):
    """A cache in np.empty memory (products.kv_buffer's where a step's heads are not shared) cannot be mapped by the
    helper: its share of the heads gets copies of their keys and values in the shared rows (for a prompt's heads,
    whose work far outweighs the copy). The same function on the same numbers: the same bits."""
    rng, _, q, k, v, mask = primed(matrices, seed=9, m=30, n_keys=100)
    own = np.empty((2, 12, 256, 64), dtype=np.float32)  # [2, n_head, capacity, head_dim]: this process's memory
    own[:, :, :100] = k, v
    own_k, own_v = own[:, :, :100]
    assert id(shared_cache.root(own)) not in shared_cache.shared
    helper = second_core._team[0]
    jobs = helper.posted
    assert np.array_equal(products.share_heads(attention, q, own_k, own_v, mask), attention(q, k, v, mask))
    assert helper.posted == jobs + 1  # its share was done there


def test_with_one_worker_or_unshared_heads_a_cache_buffer_is_this_processs_own_memory_else_a_shared_one(monkeypatch):
    """Where the routes measured one process alone fastest, or the heads of a step faster unshared, no helper reads
    a step's cache: products.kv_buffer gives this process's own memory (which Linux backs with 2 MB pages, where
    shared memory mostly gets 4 KB ones); with two workers sharing the heads, the memory file the helper maps."""
    monkeypatch.setattr(second_core, "_REASON", None)
    shape = (2, 2, 12, 256, 64)  # 3 MB, above the size a helper takes
    monkeypatch.setenv(second_core.WORKERS_VARIABLE, "1")
    one_worker = products.kv_buffer(shape)
    monkeypatch.setenv(second_core.WORKERS_VARIABLE, "2")
    products.use_head_workers(1)
    unshared_heads = products.kv_buffer(shape)
    products.use_head_workers(2)
    shared_buffer = products.kv_buffer(shape)
    for buffer in (one_worker, unshared_heads, shared_buffer):
        assert buffer.shape == shape and buffer.dtype == np.float32
    assert [id(shared_cache.root(buffer)) in shared_cache.shared
            for buffer in (one_worker, unshared_heads, shared_buffer)] == [False, False, True]


def test_a_freed_cache_goes_from_the_helper_and_a_new_helper_never_holds_one(matrices):
    """A cache's memory must be returned when the program lets it go: its descriptor closes with it, and the
    helper drops its mapping of it when it maps the next cache. A helper forked while a cache is alive
    inherits neither its mapping nor its descriptors: it holds the one descriptor of its own mapping (Python's
    mmap keeps one), made through the parent's."""
    w, _ = matrices
    rng = np.random.default_rng(10)
    shared(w, rng.standard_normal((2, 768), dtype=np.float32))
    q = rng.standard_normal((12, 1, 64), dtype=np.float32)
    mask = causal_mask(1, 99)
    first = a_cache(rng)
    inode = inode_of(first)
    second_core._stop_team()  # the next products fork new helpers, while `first` is alive
    shared(w, rng.standard_normal((2, 768), dtype=np.float32))
    helper = heads_shared(q, *first[0, :, :, :100], mask)
    assert mappings(helper.pid, inode) == 1, "the helper should map the cache it was handed, once: not inherited"
    assert cache_descriptors(helper.pid) == [inode], "one descriptor of the cache, its mapping's, not inherited ones"
    del first
    assert mappings(os.getpid(), inode) == 0, "the freed cache is still mapped here"
    second = a_cache(rng)
    products.share_heads(attention, q, *second[0, :, :, :100], mask)
    assert mappings(helper.pid, inode) == 0, "the freed cache is still mapped by the helper"
    assert inode not in cache_descriptors(helper.pid) and len(cache_descriptors(helper.pid)) == 1


def forked(child):
    """Fork this process; the child runs child() and exits with its return value (1 if it raised). Returns the
    child's wait status."""
    if not hasattr(os, "fork"):  # never here: the module skips where no helper can run, Windows included
        pytest.skip("this platform has no fork")
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = child()
        finally:
            os._exit(code)
    return os.waitpid(pid, 0)[1]


def test_a_program_that_forks_gives_the_child_its_own_copy_of_each_cache():
    """A program's own fork (multiprocessing's workers, say) with a cache alive: in the child the buffer holds
    what it held at the fork and is the child's own, as np.empty memory would be: what the child writes, the
    parent does not see, and the other way round. It no longer counts as shared in the child."""
    buffer = a_cache(np.random.default_rng(11))
    before = buffer.copy()

    def child():
        same = np.array_equal(buffer, before) and not shared_cache.shared
        buffer[...] = 2.0
        return 0 if same and np.all(buffer == 2.0) else 3

    status = forked(child)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"the child saw another buffer (status {status})"
    assert np.array_equal(buffer, before), "the child's writes reached the parent's cache"
    assert id(shared_cache.root(buffer)) in shared_cache.shared, "the parent's cache is still shared"


def test_the_check_has_teeth_a_fork_that_skips_the_copy_leaves_the_child_no_cache(monkeypatch):
    """Why the fork hooks copy: skip them (as for the helper's own fork) and the buffer is not mapped in the
    child at all (MADV_DONTFORK), so its first read kills the child with a segmentation fault."""
    buffer = a_cache(np.random.default_rng(12))
    monkeypatch.setattr(shared_cache, "making_helper", True)

    def child():
        faulthandler.disable()  # pytest's, which would print the crash as if it were the suite's
        return int(buffer[0, 0, 0, 0, 0] > 100)

    status = forked(child)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGSEGV, f"status {status}"
