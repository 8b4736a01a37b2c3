"""products.matmul is x @ w: for every number of rows a pass may have, and every matrix of GPT-2's four sizes.

Read speed/products.py first (why a product of a few rows goes panel by panel, its columns split between two processes).
tests/test_second_core.py checks the products the helper process shares. The reference is
NumPy's own x @ w in float32; the products may differ from it only by float32 rounding, since they add the
same products in another order.
"""

import numpy as np
import pytest

from speed import products
from loaders.download import HPARAMS


@pytest.fixture(autouse=True)
def default_routes(monkeypatch):
    """Every test here multiplies by the default routes (products.default_route): a test elsewhere that chose
    routes for its machine (calibrate, tools/pass_parts.py) leaves them in the module."""
    monkeypatch.setattr(products, "_routes", {})


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
def test_every_row_count_a_pass_routes_and_a_prompts_give_x_times_w(n_in, n_out):
    """One random matrix of the shape, column-major and read-only as the loaders keep it (small values, like
    GPT-2's), and 64 random rows: products.matmul(x[:m], w) against the 64-row reference's first m rows (a BLAS
    product's rows do not depend on the other rows, beyond rounding) for every m a pass shares panel by panel,
    1 .. PANEL_ROWS_MAX, then PANEL_ROWS_MAX + 1 and 64, a prompt's one BLAS call (as every m between). From the
    second product on, where a helper process can run, its columns are shared with it, as a model's are."""
    rng = np.random.default_rng(n_in * 100_000 + n_out)
    w = np.empty((n_in, n_out), dtype=np.float32, order="F")
    rng.random(out=w.T, dtype=np.float32)  # fills w column by column, in place
    w -= 0.5
    w *= 0.04  # values in [-0.02, 0.02)
    w.flags.writeable = False
    x = rng.standard_normal((64, n_in), dtype=np.float32)  # [64, n_in]
    reference = x @ np.ascontiguousarray(w) if n_in * n_out < 10**7 else x @ w  # [64, n_out]
    for m in [*range(1, products.PANEL_ROWS_MAX + 2), 64]:
        assert_same_product(products.matmul(x[:m], w), reference[:m], f"{m} rows through [{n_in}, {n_out}]")


def test_panels_are_as_wide_as_openblas_small_kernel_allows_for_every_shape_of_the_family():
    """The widths panel_width's docstring names, for the n_in of 124M-1558M (n_embd and 4 n_embd): 64 for 768,
    32 for 1024 to 1600, 16 for 3072, 8 for 4096 to 6400, the same for every pass of 1 to 16 rows; for 768,
    32 from 19 rows on (19 x 64 = 1,216 > 1,200). Each is the widest power of two up to 64 with
    rows x width x n_in <= 100^3 and rows x width <= 1,200, rows = max(m, 16)."""
    for n_in, width in {768: 64, 1024: 32, 1280: 32, 1600: 32, 3072: 16, 4096: 8, 5120: 8, 6400: 8}.items():
        assert [products.panel_width(n_in, m) for m in range(1, 17)] == [width] * 16, f"n_in = {n_in}"
    assert [products.panel_width(768, m) for m in range(17, 25)] == [64, 64] + [32] * 6
    for n_in in (768, 1024, 1280, 1600, 3072, 4096, 5120, 6400):
        for m in range(1, 25):
            width, rows = products.panel_width(n_in, m), max(m, 16)
            assert rows * width * n_in <= 100**3 and rows * width <= 1200, (n_in, m, width)
            assert width == 64 or rows * 2 * width * n_in > 100**3 or rows * 2 * width > 1200, (n_in, m, width)


def test_the_check_has_teeth_a_product_with_two_panels_swapped_fails():
    """A layout bug that puts one panel's columns where another's belong is caught by the same check."""
    rng = np.random.default_rng(0)
    w = np.asfortranarray(rng.standard_normal((768, 768), dtype=np.float32) * 0.02)
    x = rng.standard_normal((4, 768), dtype=np.float32)
    y = products.matmul(x, w)
    width = products.panel_width(768)
    swapped = np.concatenate([y[:, width : 2 * width], y[:, :width], y[:, 2 * width :]], axis=1)
    assert_same_product(y, x @ w, "the right product")
    with pytest.raises(AssertionError, match="off by"):
        assert_same_product(swapped, x @ w, "two panels swapped")


def test_a_long_prompt_and_a_row_major_matrix_take_plain_blas_and_give_the_same_product():
    """More than PANEL_ROWS_MAX rows (a prompt) and a row-major w (a test's or a tiny model's plain array) are
    multiplied by one BLAS call: the same product, and a row-major w is accepted as it is."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((768, 2304), dtype=np.float32) * 0.02  # row-major
    x = rng.standard_normal((products.PANEL_ROWS_MAX + 36, 768), dtype=np.float32)
    for matrix in (w, np.asfortranarray(w)):
        assert_same_product(products.matmul(x, matrix), x @ w, "a long prompt")
        assert_same_product(products.matmul(x[:5], matrix), x[:5] @ w, "5 rows")


def head_shapes():
    """(n_head, head_dim) of each size of the family: 12 x 64 for 124M ... 25 x 64 for 1558M."""
    return sorted({(h["n_head"], h["n_embd"] // h["n_head"]) for h in HPARAMS.values()})


@pytest.mark.parametrize("n_head, head_dim", head_shapes(), ids=lambda value: str(value))
def test_attention_scores_for_every_query_count_give_q_times_k_transposed(n_head, head_dim):
    """gpt2.attention's scores, products.matmul(q, k.transpose(0, 2, 1)), against NumPy's q @ k.T for m = 1 .. 64
    queries over 1, 100 and 1,000 cached keys (plus the m new ones): the same numbers to float32 rounding, for
    the products turned round (2 .. PANEL_ROWS_MAX queries) and the plain ones alike."""
    rng = np.random.default_rng(n_head)
    for n_cached in (1, 100, 1000):
        q = rng.standard_normal((n_head, 64, head_dim), dtype=np.float32)  # [n_head, 64, head_dim]
        k = rng.standard_normal((n_head, n_cached + 64, head_dim), dtype=np.float32)  # [n_head, keys, head_dim]
        for m in range(1, 65):
            keys = k[:, : n_cached + m]  # [n_head, n_cached + m, head_dim], a view as in gpt2.mha
            y = products.matmul(q[:, :m], keys.transpose(0, 2, 1))  # [n_head, m, n_cached + m]
            assert y.flags.c_contiguous, f"{m} queries over {n_cached} cached keys: not a contiguous array"
            assert_same_product(y, q[:, :m] @ keys.transpose(0, 2, 1), f"{m} queries over {n_cached} cached keys")


def test_the_scores_of_2_to_PANEL_ROWS_MAX_queries_are_computed_turned_round(monkeypatch):
    """The dispatch, watched: turned_round runs for a transposed k and 2 .. PANEL_ROWS_MAX queries, and for
    nothing else (one query, a prompt's many, or a k that is not a transposed view)."""
    calls = []
    turned_round = products.turned_round
    monkeypatch.setattr(products, "turned_round", lambda x, w: calls.append(x.shape[1]) or turned_round(x, w))
    rng = np.random.default_rng(0)
    q = rng.standard_normal((12, 40, 64), dtype=np.float32)
    k = rng.standard_normal((12, 600, 64), dtype=np.float32)
    for m in range(1, 41):
        products.matmul(q[:, :m], k.transpose(0, 2, 1))  # a transposed view: k.T
        products.matmul(q[:, :m], np.ascontiguousarray(k.transpose(0, 2, 1)))  # k.T stored as such: plain q @ w
    assert calls == list(range(2, products.PANEL_ROWS_MAX + 1))


def test_the_check_has_teeth_scores_turned_round_without_the_last_transpose_fail(monkeypatch):
    """A turned-round product handed back the wrong way round ([n_stack, n_out, m] read as [n_stack, m, n_out],
    as a reshape instead of a transpose would) is caught by the same check."""
    def wrong(x, w):
        product = np.matmul(w.transpose(0, 2, 1), np.ascontiguousarray(x.transpose(0, 2, 1)))  # [.., n_out, m]
        return product.reshape(x.shape[0], x.shape[1], w.shape[2])  # the numbers in the wrong places
    monkeypatch.setattr(products, "turned_round", wrong)
    rng = np.random.default_rng(0)
    q = rng.standard_normal((12, 4, 64), dtype=np.float32)
    k = rng.standard_normal((12, 516, 64), dtype=np.float32)
    with pytest.raises(AssertionError, match="off by"):
        assert_same_product(products.matmul(q, k.transpose(0, 2, 1)), q @ k.transpose(0, 2, 1), "4 queries")
