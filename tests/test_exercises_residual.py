"""The residual distribution of speculative sampling, checked by hand (EXERCISES.md, step 8).

test_speculative_exactness.py proves the whole sampler exact, but it cannot see one slip in `_residual`: a
residual that is not normalised still samples correctly there, because `sampling._sample` scales its uniform
draw by the cumulative sum's total. The docstring promises a distribution, so these tests check the numbers.
"""

import numpy as np

from sampling import _residual


def test_the_residual_is_q_minus_p_clipped_at_0_and_normalised_to_sum_1():
    """q = [0.5, 0.3, 0.2], p = [0.2, 0.2, 0.6]: q - p = [0.3, 0.1, -0.4]; clipped at 0: [0.3, 0.1, 0], whose
    total 0.4 is 1 - beta (beta = sum min(p, q) = 0.2 + 0.2 + 0.2 = 0.6, the chance a draft is kept);
    normalised: [0.75, 0.25, 0]."""
    q, p = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.2, 0.6])
    np.testing.assert_allclose(_residual(q, p), [0.75, 0.25, 0.0], atol=1e-12)


def test_equal_rows_have_no_residual_and_give_back_the_target_row():
    """q = p: (q - p)_+ is all 0 (a rejection cannot happen), so there is nothing to normalise; q is returned."""
    q = np.array([0.1, 0.6, 0.3])
    np.testing.assert_allclose(_residual(q, q.copy()), q, atol=1e-12)
