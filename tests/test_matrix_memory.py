"""The blocks' weight matrices in one array, in 2 MB pages (loaders/matrix_memory.py): where the loaders put them.

Read loaders/matrix_memory.py first. Every loader (the TF checkpoint's, the Hugging Face folder's, random
weights) gives block matrices that are views into one array starting at a 2 MB boundary, each at a multiple of
ALIGN bytes, none overlapping another, in the layout asked, read-only down to the array (so the helper processes
may share them: second_core._frozen). The page sizes are Linux's own, read from /proc/self/smaps.
"""

import mmap
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO_ROOT

from loaders.hf_folder import load_hf_gpt2
from loaders.matrix_memory import ALIGN, HUGE_PAGE, TRANSPARENT_HUGE_PAGES, MatrixMemory, for_block_matrices
from loaders.random_weights import random_params
from loaders.tf_checkpoint import load_gpt2_params_from_tf_ckpt
from loaders.weights import gpt2_param_shapes
from speed import second_core
from tools.benchmark_forward import block_matrices  # c_attn, attn's c_proj, c_fc, mlp's c_proj of every block

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TINY = {"n_vocab": 50, "n_ctx": 16, "n_embd": 8, "n_head": 2, "n_layer": 2}  # the fixtures' shapes


LOADERS = {  # name -> params from that loader: OpenAI's checkpoint, a Hugging Face folder, random weights
    "tf checkpoint": lambda: load_gpt2_params_from_tf_ckpt(FIXTURES / "tf_ckpt" / "model.ckpt", TINY),
    "hf folder": lambda: load_hf_gpt2(FIXTURES / "hf_folder_tiny")[1],
    "random": lambda: random_params(TINY, np.random.default_rng(0)),
    "random by rows": lambda: random_params(TINY, np.random.default_rng(0), layouts={"blocks": "rows", "head": "rows"}),
}


@pytest.mark.parametrize("loader", LOADERS)
def test_every_loader_puts_the_block_matrices_side_by_side_in_one_array_starting_at_a_2_mb_boundary(loader):
    params = LOADERS[loader]()
    matrices = block_matrices(params)
    block = matrices[0].base
    assert all(w.base is block for w in matrices) and params["wte"].base is not block
    starts = sorted(w.ctypes.data for w in matrices)
    assert starts[0] % HUGE_PAGE == 0 and all(start % ALIGN == 0 for start in starts)
    ends = sorted(w.ctypes.data + w.nbytes for w in matrices)
    assert all(end <= next_start for end, next_start in zip(ends, starts[1:]))  # none overlaps the next


@pytest.mark.parametrize("loader", LOADERS)
def test_the_matrices_and_their_array_are_read_only_so_the_helpers_may_share_them(loader):
    matrices = block_matrices(LOADERS[loader]())
    assert not matrices[0].base.flags.writeable
    assert all(not w.flags.writeable and second_core._frozen(w) for w in matrices)


def test_its_teeth_a_matrix_in_an_array_left_writable_is_not_shared():
    """Before `seal`, a read-only view is not enough: the array under it could still change its numbers."""
    memory = MatrixMemory({"w": ((768, 768), True)})
    w = memory.empty("w")
    w.flags.writeable = False
    assert not second_core._frozen(w)
    memory.seal()
    assert second_core._frozen(w)


def test_each_view_has_its_shape_layout_and_the_numbers_written_into_it():
    """Column-major where asked, row-major else; writing one matrix leaves its neighbour's numbers alone."""
    memory = MatrixMemory({"a": ((3, 5), True), "b": ((5, 2), False)})
    a, b = memory.empty("a"), memory.empty("b")
    a[...], b[...] = np.arange(15).reshape(3, 5), -np.arange(10).reshape(5, 2)
    assert a.flags.f_contiguous and not a.flags.c_contiguous and b.flags.c_contiguous
    assert a.shape == (3, 5) and b.shape == (5, 2) and a.dtype == b.dtype == np.float32
    np.testing.assert_array_equal(a, np.arange(15).reshape(3, 5))
    np.testing.assert_array_equal(b, -np.arange(10).reshape(5, 2))
    assert memory.empty("a bias") is None  # not one of its matrices: the loader makes an array of its own


def test_random_weights_are_the_numbers_they_were_before_the_one_array():
    """The same draws in the same order, whatever memory they land in: a second Generator draws them one by one
    as random_params always has (ln_1's gain and shift, c_attn's matrix and bias, c_proj's, ln_2's, c_fc's, ...)."""
    params = random_params(TINY, np.random.default_rng(0))
    rng, n = np.random.default_rng(0), TINY["n_embd"]
    expected = []
    for _ in range(TINY["n_layer"]):
        rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)  # ln_1's g and b
        for n_in, n_out in ((n, 3 * n), (n, n)):
            expected.append(0.02 * rng.standard_normal((n_in, n_out), dtype=np.float32))
            rng.standard_normal(n_out, dtype=np.float32)  # its bias
        rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)  # ln_2's
        for n_in, n_out in ((n, 4 * n), (4 * n, n)):
            expected.append(0.02 * rng.standard_normal((n_in, n_out), dtype=np.float32))
            rng.standard_normal(n_out, dtype=np.float32)
    for got, want in zip(block_matrices(params), expected):
        np.testing.assert_array_equal(got, want)


def anon_huge_bytes(address):
    """Bytes of 2 MB pages ("AnonHugePages" in /proc/self/smaps) in the mapping that holds `address`."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's first line: "start-end perms ..."
            start, end = (int(part, 16) for part in fields[0].split("-"))
            inside = start <= address < end
        elif inside and fields[0] == "AnonHugePages:":
            return int(fields[1]) * 1024
    raise AssertionError(f"no mapping holds address {address:#x}")


def two_mb_pages_on_request():
    """Why not, or None: Linux gives a program 2 MB pages where it asks (or always)."""
    linux_has_them = Path(TRANSPARENT_HUGE_PAGES).exists() and hasattr(mmap, "MADV_HUGEPAGE")
    if not sys.platform.startswith("linux") or not linux_has_them:
        return "2 MB pages on request are Linux's (transparent huge pages)"
    if "[never]" in Path(TRANSPARENT_HUGE_PAGES).read_text():
        return f"{TRANSPARENT_HUGE_PAGES} says never"
    return None


@pytest.mark.skipif(two_mb_pages_on_request() is not None, reason=str(two_mb_pages_on_request()))
def test_linux_backs_the_whole_array_with_2_mb_pages_even_a_model_whose_matrices_are_each_under_4_mb():
    """n_embd 512: c_attn 3 MB, c_proj 1 MB, c_fc and mlp c_proj 4 MB each, 12 MB a block; on their own
    arrays the 1 and 3 MB ones could hold no 2 MB page. In one array of fresh memory, every page is 2 MB (in a
    process that has freed as much before, an array of NumPy's own could reuse 4 KB pages: the suite does)."""
    shapes = gpt2_param_shapes({"n_vocab": 10, "n_ctx": 4, "n_embd": 512, "n_layer": 2})
    memory = for_block_matrices(shapes)  # by column
    matrices = [memory.empty(name) for name in shapes if name.endswith("/w")]
    for w in matrices:
        w[...] = 1.0  # the pages come when first written
    size = sum(w.nbytes for w in matrices)
    assert anon_huge_bytes(matrices[0].ctypes.data) >= size - HUGE_PAGE


@pytest.mark.skipif(not hasattr(mmap, "MADV_NOHUGEPAGE"), reason="madvise's MADV_NOHUGEPAGE is Linux's")
def test_its_teeth_memory_linux_was_told_to_keep_in_4_kb_pages_shows_none():
    memory = mmap.mmap(-1, 8 * HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    memory.madvise(mmap.MADV_NOHUGEPAGE)
    array = np.frombuffer(memory, dtype=np.uint8)
    array[...] = 1
    assert anon_huge_bytes(array.ctypes.data) == 0
    del array
    memory.close()


UNDER_A_MEMORY_LIMIT = """
import resource
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))
from loaders.matrix_memory import MatrixMemory
MatrixMemory({"w": ((50000, 50000), True)})  # 9.3 GiB
"""


@pytest.mark.skipif(not hasattr(mmap, "MADV_HUGEPAGE"), reason="the mapped memory is Linux's")
def test_no_room_under_a_memory_limit_is_a_MemoryError_as_numpys_is_which_the_command_line_ends_in_one_line():
    """Under `ulimit -v` (RLIMIT_AS 2 GiB) the mapping fails with ENOMEM; command_line/scripts.ending_as_one_line
    turns a MemoryError, not an OSError, into its one `error: out of memory` line."""
    run = subprocess.run([sys.executable, "-c", UNDER_A_MEMORY_LIMIT], cwd=REPO_ROOT, capture_output=True, text=True)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == "MemoryError: Unable to map 9.3 GiB for the weight matrices"
