"""When the second core fails, the run goes on in one process, with the same products, and says so in one line.

Read speed/second_core.py first (the helper process, `give_up`). Each way the helper can be lost or refused is
made to happen for real where it can be (SIGKILL, as the OOM killer sends it; SIGSTOP; a memory limit in a
fresh process) and by a stand-in where it cannot (fork and memfd_create refused, as a full process table or an
old kernel would). Each time the product is still x @ w (or the heads still the attention) to float32
rounding, no helper is left behind, and stderr holds exactly one line naming what happened.
"""

import errno
import gc
import os
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest
from conftest import REPO_ROOT

from gpt2 import attention, causal_mask
from speed import products, second_core, shared_cache
from test_products import assert_same_product, default_routes  # noqa: F401  the default routes here too
from test_second_core import _alive, read_only, shared

pytestmark = pytest.mark.skipif(second_core.unavailable() is not None,
                                reason=f"no helper process here: {second_core.unavailable()}")
KILL = signal.SIGKILL if sys.platform.startswith("linux") else None  # the helper runs on Linux only


@pytest.fixture(autouse=True)
def a_second_core(monkeypatch):
    """Each test starts with the second core in use, and what `give_up` changes is put back after it."""
    monkeypatch.setattr(second_core, "_REASON", None)


@pytest.fixture()
def block():
    """A read-only column-major c_attn-shaped matrix (shared with a helper) and a few rows."""
    rng = np.random.default_rng(20)
    w = np.empty((768, 2304), dtype=np.float32, order="F")
    w[...] = rng.standard_normal((768, 2304), dtype=np.float32) * 0.02
    return read_only(w), rng.standard_normal((3, 768), dtype=np.float32)


def one_line(capsys, *words):
    """The one line on stderr, after checking that it is one and holds each of words."""
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {lines}"
    assert all(word in lines[0] for word in words) and "one core" in lines[0], lines[0]
    return lines[0]


def test_a_helper_killed_mid_run_is_one_line_and_the_product_is_made_here(block, capsys):
    """SIGKILL (the OOM killer's signal) between two passes: the next product is still x @ w, the helper is
    given up (waited for, not left a zombie), and later products neither fork again nor say it twice."""
    w, x = block
    helper = shared(w, x)
    capsys.readouterr()
    os.kill(helper.pid, KILL)
    assert_same_product(products.matmul(x, w), x @ np.ascontiguousarray(w), "after the helper was killed")
    one_line(capsys, f"pid {helper.pid}", "killed by signal 9")
    assert not second_core._team and not _alive(helper.pid)
    assert_same_product(products.matmul(x, w), x @ np.ascontiguousarray(w), "on one core")
    products.matmul(x, w)
    assert not second_core._team and capsys.readouterr().err == ""


def test_a_stopped_helper_is_given_up_within_seconds_instead_of_spinning_for_ever(block, capsys):
    """SIGSTOP: waitpid(WNOHANG) never reports a stopped child, so the wait looks at its state and gives up
    after STOPPED_SECONDS of this process's time. (Without that, the product would wait until the timer below
    sends SIGCONT, 60 s later, and then no line would be printed.)"""
    w, x = block
    helper = shared(w, x)
    capsys.readouterr()
    os.kill(helper.pid, signal.SIGSTOP)
    rescue = threading.Timer(60, os.kill, (helper.pid, signal.SIGCONT))
    rescue.start()
    try:
        y = products.matmul(x, w)
    finally:
        rescue.cancel()
    assert_same_product(y, x @ np.ascontiguousarray(w), "after the helper was stopped")
    one_line(capsys, f"pid {helper.pid}", "is stopped")
    assert not second_core._team and not _alive(helper.pid), "the stopped helper was left behind"


def test_a_helper_stopped_for_a_moment_as_by_ctrl_z_and_fg_is_kept(block, capsys):
    """A stop shorter than STOPPED_SECONDS (Ctrl-Z stops both processes, `fg` continues both) costs nothing:
    the helper does the job once continued, and nothing is said."""
    w, x = block
    helper = shared(w, x)
    capsys.readouterr()
    os.kill(helper.pid, signal.SIGSTOP)
    threading.Timer(second_core.STOPPED_SECONDS / 5, os.kill, (helper.pid, signal.SIGCONT)).start()
    assert_same_product(products.matmul(x, w), x @ np.ascontiguousarray(w), "after a short stop")
    assert second_core._team == [helper] and capsys.readouterr().err == ""


def test_a_refused_fork_is_one_line_and_every_product_is_made_here(block, monkeypatch, capsys):
    """fork failing with EAGAIN (a full process table, a cgroup's pids.max): no helper, x @ w all the same."""
    w, x = block

    def no_fork():
        raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))

    monkeypatch.setattr(second_core.os, "fork", no_fork)
    for _ in range(3):  # the second product would fork the helper
        assert_same_product(products.matmul(x, w), x @ np.ascontiguousarray(w), "with fork refused")
    one_line(capsys, "could not be made", "Resource temporarily unavailable")
    assert not second_core._team


def test_memfd_create_missing_is_one_line_and_the_cache_is_ordinary_memory(monkeypatch, capsys):
    """memfd_create refused with ENOSYS (an old kernel, a sandbox): the cache buffer is np.empty memory, the
    helper is given up, and attention over it is attention."""
    def no_memfd(name, flags=0):
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    monkeypatch.setattr(second_core.os, "memfd_create", no_memfd)
    cache = products.kv_buffer((2, 2, 12, 256, 64))
    assert cache.shape == (2, 2, 12, 256, 64) and id(shared_cache.root(cache)) not in shared_cache.shared
    one_line(capsys, "cannot be shared", "Function not implemented")
    rng = np.random.default_rng(21)
    cache[...] = rng.standard_normal(cache.shape, dtype=np.float32)
    q, mask = rng.standard_normal((12, 2, 64), dtype=np.float32), causal_mask(2, 100)
    k, v = cache[0, 0, :, :102], cache[0, 1, :, :102]
    assert np.array_equal(products.share_heads(attention, q, k, v, mask), attention(q, k, v, mask))


# In a fresh process under a memory limit (RLIMIT_AS): a helper is forked while the program holds SPARE_MB more
# than it will later (the helper keeps its copy of them), so the helper's mapping of a new cache does not fit
# under the limit the parent's does: the job fails with ENOMEM in the helper.
UNDER_A_LIMIT = """
import resource, sys
import numpy as np
from speed import products, second_core
from gpt2 import attention, causal_mask
rng = np.random.default_rng(22)
w = np.asfortranarray(rng.standard_normal((768, 2304), dtype=np.float32)); w.flags.writeable = False
x = rng.standard_normal((2, 768), dtype=np.float32)
q, mask = rng.standard_normal((12, 2, 64), dtype=np.float32), causal_mask(2, 100)
def heads(cache):
    k, v = cache[0, 0, :, :102], cache[0, 1, :, :102]
    return products.share_heads(attention, q, k, v, mask), attention(q, k, v, mask)
heads(products.kv_buffer((1, 2, 12, 512, 64)))  # attention met once: the next helper has it
spare = np.empty(SPARE_MB << 20, dtype=np.uint8)
size = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) << 10
resource.setrlimit(resource.RLIMIT_AS, (size + (LIMIT_MB << 20), resource.getrlimit(resource.RLIMIT_AS)[1]))
products.matmul(x, w); products.matmul(x, w)  # the helper, forked with the spare memory
assert second_core._team, "no helper was made"
del spare
shared, alone = heads(products.kv_buffer((1, 2, 12, CACHE_POSITIONS, 64)))
print("same" if np.array_equal(shared, alone) else "other heads", not second_core._team)
"""


def test_a_memory_limit_the_helpers_cache_does_not_fit_is_one_line_and_the_heads_are_attended_here():
    """ENOMEM in the helper (its copy of memory the program has freed since, plus the new cache, pass the
    limit): the heads are attended here, the same bits, and one line names the error."""
    program = (UNDER_A_LIMIT.replace("SPARE_MB", "96").replace("LIMIT_MB", "64")
               .replace("CACHE_POSITIONS", str((64 << 20) // (2 * 12 * 64 * 4))))  # a 64 MB cache
    done = subprocess.run([sys.executable, "-c", program], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["same", "True"], done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "Cannot allocate memory" in lines[0] and "one core" in lines[0], lines


def test_a_helper_the_program_waited_for_itself_is_lost_and_stopping_it_kills_nothing(block, monkeypatch):
    """A program that waits for every child of its own (os.wait) reaps the helper too: the next wait says it has
    ended, and `stop` sends no signal to its pid, which may be another process's by then."""
    w, x = block
    helper = second_core.Helper({id(w): w}, products.columns, rows_max=4)
    os.kill(helper.pid, KILL)
    os.waitpid(helper.pid, 0)  # the program's own wait
    helper.post(x, id(w), False, 1152, 2304)
    with pytest.raises(second_core.HelperLost, match=f"pid {helper.pid}\\) has ended \\(how, unknown\\)"):
        helper.collect(np.empty((3, 1152), dtype=np.float32))
    other = second_core.Helper({id(w): w}, products.columns, rows_max=4)
    os.kill(other.pid, KILL)
    os.waitpid(other.pid, 0)  # waited for before any wait of the helper's own looked
    killed = []
    monkeypatch.setattr(second_core.os, "kill", lambda *signal_to: killed.append(signal_to))
    helper.stop()
    other.stop()
    assert killed == []


def test_attention_met_after_its_models_matrices_were_freed_forks_no_helper_that_holds_nothing():
    """tools/benchmark_forward.py frees its bandwidth matrix, then a small model's attention runs twice: the
    helper was forked with attention's function and no matrix, and failed on max() of nothing (a traceback
    after the measurements). Now there is simply no helper until a matrix is shared again."""
    w = read_only(np.asfortranarray(np.random.default_rng(5).standard_normal((768, 2304), dtype=np.float32)))
    shared(w, np.ones((2, 768), dtype=np.float32))
    del w
    gc.collect()  # the helper's only matrix is freed; the helper still runs

    def attend(q, k, v, mask):
        return attention(q, k, v, mask)

    assert second_core._team_for(attend, None, None) is None  # first meeting: remembered
    assert second_core._team_for(attend, None, None) is None  # second: nothing alive to share, no helper forked
