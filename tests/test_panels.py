"""panels.matmul is x @ w: for every number of rows a pass may have, and every matrix of GPT-2's four sizes.

Read panels.py first (why a product of a few rows goes panel by panel, its columns split between two processes).
tests/test_helper_process.py checks the products the helper process shares. The reference is
NumPy's own x @ w in float32; the products may differ from it only by float32 rounding, since they add the
same products in another order.
"""

import numpy as np
import pytest

import panels
from gpt2 import HPARAMS


def family_shapes():
    """Every [n_in, n_out] matrix shape of the 124M-1558M family: the four of a block, and the LM head wte.T."""
    shapes = []
    for hparams in HPARAMS.values():
        n_embd = hparams["n_embd"]
        for shape in [(n_embd, 3 * n_embd), (n_embd, n_embd), (n_embd, 4 * n_embd), (4 * n_embd, n_embd),
                      (n_embd, hparams["n_vocab"])]:
            if shape not in shapes:
                shapes.append(shape)
    return shapes


def assert_same_product(y, reference, what):
    """y equals reference to float32 rounding: the largest difference is below 1e-5 of the largest entry (the
    rounding of sums of up to 6,400 products of numbers of one scale; a wrong column is off by its size)."""
    assert y.shape == reference.shape and y.dtype == np.float32, what
    scale = float(np.abs(reference).max())
    worst = float(np.abs(y - reference).max())
    assert worst <= 1e-5 * scale, f"{what}: off by {worst:.3g}, more than float32 rounding of entries of {scale:.3g}"


@pytest.mark.parametrize("n_in, n_out", family_shapes(), ids=lambda value: str(value))
def test_every_row_count_from_1_to_64_gives_x_times_w(n_in, n_out):
    """One random matrix of the shape, column-major and read-only as the loaders keep it (small values, like
    GPT-2's), and 64 random rows: panels.matmul(x[:m], w) against x[:m] @ w for m = 1 .. 64 (the 64-row
    reference's first m rows: a BLAS product's rows do not depend on the other rows, beyond rounding). From the
    second product on, where a helper process can run, its columns are shared with it, as a model's are."""
    rng = np.random.default_rng(n_in * 100_000 + n_out)
    w = np.empty((n_in, n_out), dtype=np.float32, order="F")
    rng.random(out=w.T, dtype=np.float32)  # fills w column by column, in place
    w -= 0.5
    w *= 0.04  # values in [-0.02, 0.02)
    w.flags.writeable = False
    x = rng.standard_normal((64, n_in), dtype=np.float32)  # [64, n_in]
    reference = x @ np.ascontiguousarray(w) if n_in * n_out < 10**7 else x @ w  # [64, n_out]
    for m in range(1, 65):
        assert_same_product(panels.matmul(x[:m], w), reference[:m], f"{m} rows through [{n_in}, {n_out}]")


def test_the_check_has_teeth_a_product_with_two_panels_swapped_fails():
    """A layout bug that puts one panel's columns where another's belong is caught by the same check."""
    rng = np.random.default_rng(0)
    w = np.asfortranarray(rng.standard_normal((768, 768), dtype=np.float32) * 0.02)
    x = rng.standard_normal((4, 768), dtype=np.float32)
    y = panels.matmul(x, w)
    width = panels.panel_width(768)
    swapped = np.concatenate([y[:, width : 2 * width], y[:, :width], y[:, 2 * width :]], axis=1)
    assert_same_product(y, x @ w, "the right product")
    with pytest.raises(AssertionError, match="off by"):
        assert_same_product(swapped, x @ w, "two panels swapped")


def test_a_long_prompt_and_a_row_major_matrix_take_plain_blas_and_give_the_same_product():
    """More than PANEL_ROWS_MAX rows (a prompt) and a row-major w (a test's or a tiny model's plain array) are
    multiplied by one BLAS call: the same product, and a row-major w is accepted as it is."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((768, 2304), dtype=np.float32) * 0.02  # row-major
    x = rng.standard_normal((panels.PANEL_ROWS_MAX + 36, 768), dtype=np.float32)
    for matrix in (w, np.asfortranarray(w)):
        assert_same_product(panels.matmul(x, matrix), x @ w, "a long prompt")
        assert_same_product(panels.matmul(x[:5], matrix), x[:5] @ w, "5 rows")
