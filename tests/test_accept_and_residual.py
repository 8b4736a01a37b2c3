"""The two small rules of a round, checked by hand: `_accept` (EXERCISES.md, step 7) and `_residual` (step 8).

Read sampling.py's module docstring and the two functions' docstrings first.

test_speculative_exactness.py proves the whole sampler exact, but it cannot see everything these functions
promise. `_accept` returns the ONE uniform it drew (the round's record shows it beside p and q, and one draw per
check keeps a seed's tokens fixed); a second draw, or a u that is not the one decided by, samples just as well.
And a residual that is not normalised still samples correctly there, because `sampling._sample` scales its
uniform draw by the cumulative sum's total; the docstring promises a distribution, so these tests check the
numbers. Teeth: wrong versions fail the same checks (tests/test_step_checks_teeth.py, which a student copy
leaves out: a wrong version is one edit away from the right one).
"""

import numpy as np
import pytest

from sampling import _accept, _residual

Q_ROW, P_ROW, TOKEN = np.array([0.5, 0.2, 0.3]), np.array([0.3, 0.5, 0.2]), 1  # q/p = 0.2/0.5 = 0.4 at TOKEN


def accept_errors(accept):
    """What `accept` gets wrong on the worked example q(token) = 0.2, p(token) = 0.5 over 200 seeds, and on the
    token whose q/p = 0.5/0.3 is above 1 over 50 more: its u must be the seed's first rng.random(), the generator
    must have moved on by exactly that one draw (a guess with q >= p is kept too, but by the same one draw: a
    shortcut that draws nothing there shifts every later draw of the run), and the guess must be kept exactly
    when u < q/p (so u = 0.3 keeps the first and u = 0.7 does not; the second is always kept)."""
    errors = []
    for token, seeds in ((TOKEN, range(200)), (0, range(200, 250))):
        ratio = Q_ROW[token] / P_ROW[token]
        for seed in seeds:
            rng, twin = np.random.default_rng(seed), np.random.default_rng(seed)
            kept, u = accept(Q_ROW, P_ROW, token, rng)
            first, second = twin.random(), twin.random()
            if u != first:
                errors.append(f"seed {seed}, q/p = {ratio:.3g}: u = {u}, but the first rng.random() is {first}")
            if rng.random() != second:
                errors.append(f"seed {seed}, q/p = {ratio:.3g}: the generator did not move on by exactly one "
                              f"rng.random()")
            if kept != (u < ratio):
                errors.append(f"seed {seed}: kept = {kept} with u = {u} and q/p = {ratio:.3g}")
    return errors


@pytest.mark.step7
def test_accept_keeps_the_guess_exactly_when_its_one_uniform_draw_is_below_q_over_p():
    errors = accept_errors(_accept)
    assert errors == [], "\n".join(errors[:5])


@pytest.mark.step8
def test_the_residual_is_q_minus_p_clipped_at_0_and_normalised_to_sum_1():
    """q = [0.5, 0.3, 0.2], p = [0.2, 0.2, 0.6]: q - p = [0.3, 0.1, -0.4]; clipped at 0: [0.3, 0.1, 0], whose
    total 0.4 is 1 - beta (beta = sum min(p, q) = 0.2 + 0.2 + 0.2 = 0.6, the chance a draft is kept);
    normalised: [0.75, 0.25, 0]."""
    q, p = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.2, 0.6])
    np.testing.assert_allclose(_residual(q, p), [0.75, 0.25, 0.0], atol=1e-12)


@pytest.mark.step8
def test_equal_rows_have_no_residual_and_give_back_the_target_row():
    """q = p: (q - p)_+ is all 0 (a rejection cannot happen), so there is nothing to normalise; q is returned."""
    q = np.array([0.1, 0.6, 0.3])
    np.testing.assert_allclose(_residual(q, q.copy()), q, atol=1e-12)
