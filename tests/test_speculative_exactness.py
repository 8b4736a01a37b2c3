"""Speculative sampling is EXACT: its tokens have the target's distribution, not an approximation of it.

The models here are hand-built second-order Markov chains over a 3-token vocabulary (tools/markov.py): the
next-token distribution depends on the last TWO tokens, so reading the wrong row (an off-by-one in the prefix)
changes the distribution. The draft is deliberately bad in both directions: it puts mass on tokens the target
never produces after some contexts, and gives probability 0 to tokens the target does produce. With N = 5 new
tokens there are 3**5 = 243 possible outputs, whose exact probabilities we compute by enumeration from the
target table, and we compare the empirical distribution of S sampled outputs with them.

The bound. For S independent samples from a distribution P over M outcomes with empirical distribution
P^, the total-variation distance TV = 1/2 sum_i |P^_i - P_i| satisfies
  - E[TV] <= 1/2 sum_i sqrt(P_i (1 - P_i) / S), because E|P^_i - P_i| <= sqrt(Var P^_i) (Jensen) and
    S P^_i is Binomial(S, P_i);
  - changing one of the S samples moves TV by at most 1/S, so McDiarmid's inequality gives
    Pr[TV >= E[TV] + eps] <= exp(-2 S eps^2); with eps = sqrt(ln(1/delta) / (2 S)) that is <= delta.
So a correct sampler exceeds  bound = 1/2 sum_i sqrt(P_i (1 - P_i) / S) + sqrt(ln(1/delta) / (2 S))  with
probability at most delta = 1e-9 for ANY seed: a correct implementation never flakes (and the seeds are fixed
anyway). With S = 5000 samples the bound is about 0.105 and a correct sampler measures 0.03 - 0.05.

A wrong rule samples from some other distribution P' at a fixed distance D = TV(P', P) (estimated with
100 000 samples: (a) 0.21 - 0.24, (b) 0.61 - 0.63, (c) 0.91 - 0.93). Its empirical TV from P is at least
D - TV(P^, P'), so it passes only if its own sampling noise TV(P^, P') reaches D - bound. That noise has
mean <= 1/2 sum_i sqrt(P'_i / S) <= 1/2 sqrt(M / S) (Cauchy-Schwarz; M = 243 outcomes), and by McDiarmid
again it exceeds that mean by eps with probability <= exp(-2 S eps^2). The wrong-rule tests use S = 10 000
samples (bound 0.074, 1/2 sqrt(M / S) = 0.078), so even for (a) eps >= 0.21 - 0.074 - 0.078 = 0.058 and a
wrong rule passes with probability below exp(-67) ~ 1e-29: the same check always fails for it.

The wrong rules are small replacements for the steps of sampling.py, swapped in with pytest's monkeypatch, so
the production code stays the one readable implementation. Rules (a) and (c) replace Steps 3-4 (`_verify_chain`)
whole with tests/verifiers.py's, not just `_residual`, so that the check of the checker holds however
`_verify_chain` is split into functions (EXERCISES.md's step 9 has a learner write it):
  (a) on a rejection, resample from the target q instead of the residual (q - p)_+;
  (b) draft the draft's argmax (a greedy draft) but keep using the draft's full probability p in min(1, q/p);
  (c) compare each draft token with the target row one position too early (the prefix without the last token).
"""

import numpy as np
import pytest

import sampling
from tools.markov import DRAFT_TABLE, TARGET_TABLE, exact_distribution, markov_model, total_variation, tv_bound
from records import SpeculativeStats
from sampling import autoregressive_sampling, speculative_sampling
from verifiers import chain_verifier

PROMPT = [2, 0, 1]  # three tokens, so that even the off-by-one variant (c) has two tokens of context
N = 5  # 3**5 = 243 possible outputs; N > K + 1 for K = 1, 2, 3, so rounds end inside the output
DELTA = 1e-9
N_SAMPLES = 5_000  # per test of a correct sampler: bound ~0.105, ~1.5 ms a run: ~7 s each on 2 busy cores
WRONG_RULE_SAMPLES = 10_000  # per wrong rule: bound ~0.074, so that wrong rules fail by a wide margin


def speculative_tv(K, n_samples, seed, stop_token=None):
    """(TV of n_samples speculative outputs from the exact target distribution, the bound)."""
    rng = np.random.default_rng(seed)
    draft, target = markov_model(DRAFT_TABLE), markov_model(TARGET_TABLE)
    samples = [
        tuple(speculative_sampling(PROMPT, draft, target, N, K, rng, stop_token=stop_token)[len(PROMPT) :])
        for _ in range(n_samples)
    ]
    exact = exact_distribution(TARGET_TABLE, PROMPT, N, stop_token)
    return total_variation(samples, exact), tv_bound(exact, n_samples)


def test_the_tables_are_distributions_and_the_draft_disagrees_in_both_directions():
    """The premises of the exactness tests: rows sum to 1; somewhere the draft has mass where the target has
    none and misses a token the target can produce; and every row depends on the context."""
    assert np.allclose(TARGET_TABLE.sum(-1), 1) and np.allclose(DRAFT_TABLE.sum(-1), 1)
    assert np.any((DRAFT_TABLE > 0) & (TARGET_TABLE == 0))
    assert np.any((DRAFT_TABLE == 0) & (TARGET_TABLE > 0))
    # the distribution changes with the older token a as well as with the last token b
    assert not np.allclose(TARGET_TABLE[0], TARGET_TABLE[1]) and not np.allclose(TARGET_TABLE[:, 0], TARGET_TABLE[:, 1])


def test_autoregressive_sampling_matches_the_exact_distribution():
    """The reference sampler itself: 5 000 samples of 5 tokens are within the TV bound of enumeration."""
    rng = np.random.default_rng(0)
    target = markov_model(TARGET_TABLE)
    samples = [tuple(autoregressive_sampling(PROMPT, target, N, rng)[len(PROMPT) :]) for _ in range(N_SAMPLES)]
    exact = exact_distribution(TARGET_TABLE, PROMPT, N)
    tv, bound = total_variation(samples, exact), tv_bound(exact, N_SAMPLES)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"


@pytest.mark.parametrize("K", [1, 2, 3, 4, 7])
def test_speculative_sampling_has_the_target_distribution_for_every_lookahead(K, record_property):
    """For K = 1, 2, 3 the 5 tokens span several rounds (N > K + 1); K = 4 is one full round with the free
    extra token; K = 7 > N drafts only what fits. Every case is within the TV bound of the exact
    distribution, with a draft that is wrong in both directions. (The README's table quotes what is recorded.)"""
    tv, bound = speculative_tv(K, n_samples=N_SAMPLES, seed=100 + K)
    record_property("K", K)
    record_property("tv", tv)
    record_property("bound", bound)
    assert tv < bound, f"K={K}: TV {tv:.4f} >= bound {bound:.4f}"


def test_speculative_sampling_with_a_stop_token_has_the_target_distribution():
    """With stop token 2, outputs are cut right after the first 2; their distribution is the target's
    autoregressive one cut the same way (a stop inside an accepted run of drafts drops the rest)."""
    tv, bound = speculative_tv(K=3, n_samples=N_SAMPLES, seed=7, stop_token=2)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"


# --- the same test fails for wrong rules ----------------------------------------------------------------------


def argmax_draft(self, x, k, rng, n_vocab):
    """Wrong rule (b): draft the draft's most likely token, but report the full distribution p as the
    proposal. The token was proposed with probability 1, not p(token), so min(1, q/p) is the wrong ratio."""
    tokens, rows = [], []
    for _ in range(k):
        p_next = self.model(x + tokens, 1)[0]  # [n_vocab]
        tokens.append(int(np.argmax(p_next)))
        rows.append(p_next)
    return sampling.Proposal(tokens, sampling.chain_parents(len(tokens)), np.array(rows).reshape(len(tokens), -1))


def target_rows_one_too_early(guesses, p, q, rng):
    """Wrong rule (c): guess t is checked against q[t - 1], the target's distribution after x + guesses[:t - 1]
    (the prefix one token short), instead of q[t], after x + guesses[:t]."""
    return chain_verifier(None)(guesses, p, np.vstack([q[:1], q[:-1]]), rng)  # rows 1 .. m one prefix too early


WRONG_RULES = {
    # (a): on a rejection draw from q itself, forgetting that q's overlap with p was already offered through the
    # accepted drafts; tokens both models like come out too often
    "a_resample_from_target": (sampling, "_verify_chain", chain_verifier("replacement from the target's row")),
    "b_argmax_draft_full_p_ratio": (sampling.ModelDrafter, "propose", argmax_draft),
    "c_target_row_off_by_one": (sampling, "_verify_chain", target_rows_one_too_early),
}


@pytest.mark.parametrize("rule", sorted(WRONG_RULES))
def test_the_exactness_test_fails_for_a_wrong_rule(rule, monkeypatch, record_property):
    """Swap one step of sampling.py for a wrong version and run the same check as above (K = 2, so N = 5
    spans two rounds): the empirical TV from the exact distribution is above the bound that a correct
    sampler stays under (with more samples, so a smaller bound: see the module docstring)."""
    where, name, wrong = WRONG_RULES[rule]
    monkeypatch.setattr(where, name, wrong)
    tv, bound = speculative_tv(K=2, n_samples=WRONG_RULE_SAMPLES, seed=3)
    record_property("tv", tv)
    record_property("bound", bound)
    assert tv > bound, f"{rule}: TV {tv:.4f} is not above the bound {bound:.4f}"


def test_draft_equal_to_target_accepts_every_draft_token():
    """q/p = 1 for every token when draft = target, and r < 1 always: acceptance rate 1, and N = 3 (K + 1)
    tokens in 3 rounds of K = 3 drafts plus the free extra token; (K + 1) tokens per target pass."""
    target = markov_model(TARGET_TABLE)
    stats = SpeculativeStats()
    speculative_sampling(PROMPT, markov_model(TARGET_TABLE), target, 12, 3, np.random.default_rng(5), stats=stats)
    assert stats.acceptance_rate == 1.0 and stats.acceptance_rate_at == [1.0, 1.0, 1.0]
    assert (stats.rounds, stats.tokens, stats.target_passes, stats.draft_passes) == (3, 12, 3, 9)
    assert stats.tokens_per_target_pass == 4.0
