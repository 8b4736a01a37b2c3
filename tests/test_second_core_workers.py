"""Any number of workers gives the numbers of one process: forced to 3 and 4 on this 2-core machine, and 1 alone.

Read speed/second_core.py first (workers(): this process and workers() - 1 helper processes, each an equal
share of the panels or heads; GPT2_WORKERS forces the count over the measured one). A machine with 2 cores
cannot measure what 4 to 16 cores do, but it can prove that every split is correct: with 3 and 4 workers (two
or three helpers spinning on 2 cores: slow, never wrong) every product, the attention heads and whole decodes
equal one process's to float32 rounding, a killed helper and Ctrl-C end as with one helper, and under
`taskset -c 0` a run measures nothing to choose and takes 1. No test here reads a clock.
"""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import REPO_ROOT

import gpt2
import sampling
from gpt2 import attention, causal_mask
from loaders.random_weights import random_params
from model_fn import create_model_fn
from speed import plug, products, second_core, shared_cache
from test_products import assert_same_product, default_routes  # noqa: F401  the default routes here too
from test_run_endings import command, interrupted
from test_second_core import _alive, a_cache, forked, read_only
from test_second_core_failures import KILL
from tools.model_files import write_hf_folder

pytestmark = pytest.mark.skipif(second_core.unavailable() is not None,
                                reason=f"no helper process here: {second_core.unavailable()}")

# a random GPT-2 whose every matrix and KV cache is big enough to be shared (second_core.MIN_BYTES)
HPARAMS = {"n_vocab": 1024, "n_ctx": 512, "n_embd": 512, "n_head": 8, "n_layer": 2}
TOLERANCE = 1e-4  # logits of size ~1, the same terms added in another order: a few 1e-6 apart


@pytest.fixture(params=[3, 4])
def workers(request, monkeypatch):
    """GPT2_WORKERS=3 (then 4) on this machine, helpers of that count from the next shared product on; after the
    test, no helper is left and the variable is unset."""
    monkeypatch.setattr(second_core, "_REASON", None)
    monkeypatch.setenv(second_core.WORKERS_VARIABLE, str(request.param))
    second_core.renew()
    yield request.param
    second_core._stop_team()


def team_of(count):
    """The running helpers, after checking that there are count - 1 of them."""
    team = list(second_core._team)
    assert len(team) == count - 1, f"{len(team)} helpers for {count} workers"
    return team


@pytest.fixture(scope="module")
def matrices():
    """A c_fc-shaped block matrix (column-major) and an LM head (wte, multiplied as wte.T), read-only; and the
    same two stored the other way round (speed/layouts.py's "rows": w row-major, wte in Fortran order)."""
    rng = np.random.default_rng(30)
    w = np.empty((768, 3072), dtype=np.float32, order="F")
    w[...] = rng.standard_normal((768, 3072), dtype=np.float32) * 0.02
    wte = rng.standard_normal((5003, 768), dtype=np.float32) * 0.02  # 5003 columns: a last panel not whole
    return read_only(w), read_only(wte), read_only(np.ascontiguousarray(w)), read_only(np.asfortranarray(wte))


def test_every_product_shared_among_3_or_4_workers_is_x_times_w_bit_for_bit_one_process(workers, matrices):
    """For m = 1 .. PANEL_ROWS_MAX rows and 200 (a prompt: one BLAS call, the helpers asleep), the block matrix
    and the LM head, each stored by column and by row: x @ w to float32 rounding, the same bits as one process
    multiplying every column, and each helper did a share (its job count grew)."""
    w, wte, w_rows, wte_rows = matrices
    rng = np.random.default_rng(31)
    x = rng.standard_normal((200, 768), dtype=np.float32)
    for matrix in (w, wte.T, w_rows, wte_rows.T):
        products.matmul(x[:2], matrix)
        products.matmul(x[:2], matrix)  # the second product forks the helpers, which have the matrix
        reference = x @ np.ascontiguousarray(matrix)
        for m in [*range(1, products.PANEL_ROWS_MAX + 1), 200]:
            posted = [helper.posted for helper in team_of(workers)]
            y = products.matmul(x[:m], matrix)
            assert_same_product(y, reference[:m], f"{m} rows, {workers} workers")
            if m <= products.PANEL_ROWS_MAX:
                alone = np.empty_like(y)
                products.columns(x[:m], matrix, 0, matrix.shape[1], alone)
                assert np.array_equal(y, alone), f"{m} rows: {workers} workers changed bits"
                assert [helper.posted for helper in team_of(workers)] == [n + 1 for n in posted], m


def test_the_heads_shared_among_3_or_4_workers_are_attention_bit_for_bit(workers, matrices):
    """12 heads over a shared cache, 1 .. PANEL_ROWS_MAX queries and a 200-query prompt: gpt2.attention's
    result, bit for bit, each helper attending with its share."""
    w = matrices[0]
    rng = np.random.default_rng(32)
    for _ in range(2):  # the second product forks the helpers
        products.matmul(rng.standard_normal((2, 768), dtype=np.float32), w)
    buffer = a_cache(rng, capacity=300)
    for _ in range(2):  # the first meets the attention function; the second forks helpers that have it
        products.share_heads(attention, np.ones((12, 1, 64), np.float32), *buffer[0, :, :, :9], causal_mask(1, 8))
    for m in [*range(1, products.PANEL_ROWS_MAX + 1), 200]:
        q = rng.standard_normal((12, m, 64), dtype=np.float32)
        k, v = buffer[1, :, :, : 50 + m] if m < 200 else buffer[1, :, :, :200]
        mask = causal_mask(m, k.shape[1] - m)
        posted = [helper.posted for helper in team_of(workers)]
        assert np.array_equal(products.share_heads(attention, q, k, v, mask), attention(q, k, v, mask)), m
        assert [helper.posted for helper in team_of(workers)] == [n + 1 for n in posted], m


@pytest.mark.parametrize("heads", [1, 2])
def test_heads_shared_by_fewer_workers_than_the_products_are_attention_bit_for_bit(workers, matrices, heads):
    """The heads' own count (products.use_head_workers, as speed/routes.py measures it) below the products': a
    step's and a round's heads go to that many processes only (1: this process alone, no helper posted), the same
    bits as gpt2.attention; a prompt's heads still go to every worker."""
    w = matrices[0]
    rng = np.random.default_rng(34)
    for _ in range(2):  # the second product forks the helpers
        products.matmul(rng.standard_normal((2, 768), dtype=np.float32), w)
    buffer = a_cache(rng, capacity=300)
    for _ in range(2):  # the first meets the attention function; the second forks helpers that have it
        products.share_heads(attention, np.ones((12, 1, 64), np.float32), *buffer[0, :, :, :9], causal_mask(1, 8))
    products.use_head_workers(heads)
    attends_bit_for_bit(buffer, rng, workers, heads)


def test_a_cache_made_with_a_steps_heads_unshared_is_this_processs_own_and_a_prompts_heads_go_as_copies(
        workers, matrices):
    """With a step's heads measured faster in this process alone (use_head_workers(1)), the cache a run then makes
    is this process's own memory (products.kv_buffer), a step's and a round's heads stay here, and a prompt's go
    to every helper with copies of their keys and values: the same bits as gpt2.attention."""
    w = matrices[0]
    rng = np.random.default_rng(35)
    for _ in range(2):  # the second product forks the helpers
        products.matmul(rng.standard_normal((2, 768), dtype=np.float32), w)
    products.use_head_workers(1)
    buffer = a_cache(rng, capacity=300)
    assert id(shared_cache.root(buffer)) not in shared_cache.shared
    prompt = rng.standard_normal((12, 200, 64), dtype=np.float32)
    for _ in range(2):  # the first meets the attention function; the second forks helpers that have it
        products.share_heads(attention, prompt, *buffer[0, :, :, :200], causal_mask(200, 0))
    attends_bit_for_bit(buffer, rng, workers, heads=1)


def attends_bit_for_bit(buffer, rng, workers, heads):
    """Queries of a step, of rounds (4 and PANEL_ROWS_MAX) and of a prompt (200) over the buffer's second layer:
    share_heads gives gpt2.attention's bits, and posts a job to the first heads - 1 helpers (a prompt's: to every
    helper)."""
    for m in (1, 4, products.PANEL_ROWS_MAX, 200):
        q = rng.standard_normal((12, m, 64), dtype=np.float32)
        k, v = buffer[1, :, :, : 50 + m] if m < 200 else buffer[1, :, :, :200]
        mask = causal_mask(m, k.shape[1] - m)
        posted = [helper.posted for helper in team_of(workers)]
        assert np.array_equal(products.share_heads(attention, q, k, v, mask), attention(q, k, v, mask)), m
        sharing = workers - 1 if m > products.PANEL_ROWS_MAX else heads - 1
        expected = [n + (i < sharing) for i, n in enumerate(posted)]
        assert [helper.posted for helper in team_of(workers)] == expected, (m, heads)


@pytest.fixture(scope="module")
def params():
    return random_params(HPARAMS, np.random.default_rng(33), std=0.05)


def test_whole_decodes_with_3_or_4_workers_give_one_process_logits_and_greedy_tokens(workers, params):
    """A prompt of 20 tokens, a 5-token verification pass and one token: the plugged model's logits within
    TOLERANCE of the plain core's. Then autoregressive and speculative decoding (K = 4, a draft of the same
    weights at temperature 0.7, so guesses are rejected and rolled back) write the plain core's greedy tokens,
    with every helper at work."""
    n_head, n_ctx = HPARAMS["n_head"], HPARAMS["n_ctx"]
    weights, cache = plug.fast(params, n_head, n_ctx)
    plain_cache = gpt2.empty_cache(params["blocks"], n_head, n_ctx)
    rng = np.random.default_rng(34)
    for n_new in (20, 5, 1, 1):
        ids = rng.integers(0, HPARAMS["n_vocab"], n_new).tolist()
        fast_logits, cache = gpt2.gpt2(ids, **weights, n_head=n_head, past=cache)
        plain_logits, plain_cache = gpt2.gpt2(ids, **params, n_head=n_head, past=plain_cache)
        assert np.abs(fast_logits - plain_logits).max() <= TOLERANCE, f"{n_new} new positions, {workers} workers"
    prompt, runs = [5, 17, 300, 42], []
    for plain in (True, False):
        target = create_model_fn(params, HPARAMS, temperature=0, plain=plain)
        draft = create_model_fn(params, HPARAMS, temperature=0.7, plain=plain)
        runs.append((sampling.autoregressive_sampling(prompt, target, 24, np.random.default_rng(0)),
                     sampling.speculative_sampling(prompt, draft, target, 24, 4, np.random.default_rng(0))))
    assert runs[0] == runs[1] and runs[0][0] == runs[0][1]
    assert all(helper.posted > 0 for helper in team_of(workers)), "a helper did no job"


def test_a_killed_helper_of_3_workers_is_one_line_and_the_product_is_made_here(matrices, capsys, monkeypatch):
    """SIGKILL to the second of two helpers: the next product is still x @ w, every helper is given up (the
    one alive stopped too, none left behind), in one line, and later products fork nothing."""
    monkeypatch.setattr(second_core, "_REASON", None)
    monkeypatch.setenv(second_core.WORKERS_VARIABLE, "3")
    w = matrices[0]
    x = np.random.default_rng(35).standard_normal((3, 768), dtype=np.float32)
    products.matmul(x, w)
    products.matmul(x, w)
    first, second = team_of(3)
    capsys.readouterr()
    os.kill(second.pid, KILL)
    assert_same_product(products.matmul(x, w), x @ np.ascontiguousarray(w), "after a helper was killed")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and f"pid {second.pid}" in lines[0] and "one core" in lines[0], lines
    assert not second_core._team and not _alive(first.pid) and not _alive(second.pid)
    assert_same_product(products.matmul(x, w), x @ np.ascontiguousarray(w), "on one core")
    assert not second_core._team and capsys.readouterr().err == ""


def test_a_program_that_forks_with_3_workers_multiplies_alone_in_the_child_and_keeps_its_helpers(workers, matrices):
    """A program's own fork: the child's products are x @ w, made by the child alone (the helpers are not its
    own), and the parent's helpers go on sharing the parent's."""
    w = matrices[0]
    x = np.random.default_rng(36).standard_normal((3, 768), dtype=np.float32)
    products.matmul(x, w)
    products.matmul(x, w)
    team = team_of(workers)
    reference = x @ np.ascontiguousarray(w)
    def child():
        same = np.allclose(products.matmul(x, w), reference, rtol=1e-5, atol=1e-5)
        return 0 if same and not second_core._team else 3

    status = forked(child)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"the child's product (status {status})"
    assert second_core._team == team and all(_alive(helper.pid) for helper in team)
    assert_same_product(products.matmul(x, w), reference, "in the parent, after the fork")


def test_every_helper_of_4_workers_ends_when_its_parent_ends():
    """Each helper holds no copy of the others' pipe ends: a program that makes 3 helpers and exits leaves none."""
    program = (
        "import os, numpy as np\nos.environ['GPT2_WORKERS'] = '4'\nfrom speed import second_core, products\n"
        "w = np.asfortranarray(np.ones((768, 2304), dtype=np.float32)); w.flags.writeable = False\n"
        "x = np.ones((2, 768), dtype=np.float32); products.matmul(x, w); products.matmul(x, w)\n"
        "print(*[helper.pid for helper in second_core._team], flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    pids = [int(pid) for pid in done.stdout.split()]
    assert len(pids) == 3, (done.stdout, done.stderr)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(map(_alive, pids)):
        time.sleep(0.05)
    assert not any(map(_alive, pids)), f"helpers outlived their parent: {[p for p in pids if _alive(p)]}"


ONE_CORE = """
import os, numpy as np
from loaders.random_weights import random_params
from model_fn import create_model_fn
from sampling import autoregressive_sampling
from speed import routes, second_core
hparams = {"n_vocab": 1024, "n_ctx": 512, "n_embd": 512, "n_head": 8, "n_layer": 2}
params = random_params(hparams, np.random.default_rng(0), std=0.05)
plain, fast = (create_model_fn(params, hparams, temperature=0, plain=p) for p in (True, False))
tokens = autoregressive_sampling([1, 2], fast, 8, np.random.default_rng(0))
table = routes.choose(repeats=1)
same = tokens == autoregressive_sampling([1, 2], plain, 8, np.random.default_rng(0))
print(second_core.workers(), table.get("workers"), routes.worker_counts(), same, "1 core " in routes.fingerprint())
"""


@pytest.mark.parametrize("forced", ["", "3"])
def test_under_taskset_on_one_core_a_run_works_and_takes_one_worker(forced):
    """A process allowed one core (os.sched_setaffinity, as `taskset -c 0`), GPT2_WORKERS unset or 3: no helper,
    one worker, nothing to measure among counts, the same greedy tokens as the plain core, "1 core" in the
    fingerprint."""
    env = {**os.environ, second_core.WORKERS_VARIABLE: forced}
    done = subprocess.run([sys.executable, "-c", ONE_CORE], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300, env=env, preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "None", "[1]", "True", "True"], done.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="a test cannot press Ctrl-C in a Windows console")
def test_ctrl_c_with_3_workers_is_one_line_interrupted_and_leaves_no_helper(tmp_path, release_124M_dir,
                                                                            monkeypatch):
    """main.py with GPT2_WORKERS=3, decoding without the cache on a model whose matrices are shared: Ctrl-C is
    `Interrupted.` and exit code 130, as with one helper, and no helper outlives it (each is a fork of main.py,
    its command line naming the model's folder)."""
    hparams = {**HPARAMS, "n_vocab": 50257, "n_ctx": 1024}
    folder = write_hf_folder(tmp_path / "wide", random_params(hparams, np.random.default_rng(0), std=0.05), hparams,
                             release_124M_dir)
    monkeypatch.setenv(second_core.WORKERS_VARIABLE, "3")  # for the child
    code, err = interrupted(command("main.py", "--drafter", "lookup", "--n_tokens_to_generate", 1000, "--kv_cache",
                                    "false", "--prompt", "Hi", "--target_model_size", folder), tmp_path,
                            "autoregressive sampling")
    # (stderr holds the weights' reading bar before it: this model's file is big enough to show one)
    assert code == 130 and err.splitlines()[-1] == "Interrupted." and "Traceback" not in err, err
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and forks_naming(folder):
        time.sleep(0.05)
    assert not forks_naming(folder), "helpers outlived the interrupted run"


def forks_naming(folder):
    """The pids of live processes whose command line names folder (main.py and its helpers)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                named = str(folder).encode() in cmdline.read()
        except OSError:
            continue
        if named and _alive(int(pid)):
            pids.append(int(pid))
    return pids
