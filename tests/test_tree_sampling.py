"""Tree verification (SpecInfer's multi-candidate rule) as an executable specification.

The statistical check is the chain's (tests/test_speculative_exactness.py explains the TV bound): the empirical
joint distribution of N = 5 tokens from the hand-built Markov draft and target (tools/markov.py) against exact
enumeration, for several tree shapes, with a derived bound a correct sampler exceeds with probability 1e-9.
The tree drafter proposes the draft's TOP tokens (deterministic, one-hot rows), so with a 3-token vocabulary a
branching of 2 offers two of the three tokens and (3,) offers all of them.

Teeth: two wrong rules particular to siblings, each a whole wrong Steps 3-4 from tests/verifiers.py swapped in
for drafters._verify_tree with monkeypatch (so the check of the checker holds however a tree verifier is split
into functions), each fail the same check:
  (a) try every sibling against the SAME target row q instead of the residual left by the ones before it (the
      replacement after all are rejected still comes from a residual, the last sibling's against q): exactly
      right for a chain, so only trees catch it; a rejected token comes back;
  (b) inflate the acceptance ratio, keeping a candidate when u < 2 q/p: the draft's top tokens come out too
      often.
The wrong rules sit at TV 0.23 (a) and 0.53 (b) from the target (each measured with 100 000 samples of the
(2, 2, 1) tree). With S = 10 000 samples for (a) the bound is 0.074 and a wrong rule's own sampling noise has
mean <= 1/2 sqrt(243 / S) = 0.078, so (a) passes only if its noise exceeds its mean by 0.23 - 0.074 - 0.078 =
0.078, probability <= exp(-2 S 0.078^2) = exp(-121) by McDiarmid (tests/test_speculative_exactness.py derives
both bounds). (b) is further off and needs fewer: S = 3 000, bound 0.136, noise mean <= 0.142, so it passes
only if its noise exceeds its mean by 0.53 - 0.136 - 0.142 = 0.25, probability <= exp(-2 S 0.25^2) = exp(-375).
At temperature 0 any tree gives the target's greedy output, on Markov tables and on tiny random GPT-2s.
"""

import numpy as np
import pytest

import drafters
import sampling
from tools.markov import DRAFT_TABLE, TARGET_TABLE, exact_distribution, markov_model, total_variation, tv_bound
from records import SpeculativeStats
from sampling import autoregressive_sampling
from model_fn import create_model_fn
from drafters import tree_speculative_sampling
from test_sampling import NOISY_DRAFT_PARAMS, TARGET_HPARAMS, TARGET_PARAMS
from verifiers import verifier

PROMPT = [2, 0, 1]
N = 5  # 3**5 = 243 outcomes
N_SAMPLES = 2_500  # bound ~0.15 for a correct sampler


def tree_tv(tree, n_samples, seed):
    """(TV of n_samples tree-speculative outputs from the exact target distribution, the bound)."""
    rng = np.random.default_rng(seed)
    draft, target = markov_model(DRAFT_TABLE), markov_model(TARGET_TABLE)
    samples = [
        tuple(tree_speculative_sampling(PROMPT, draft, target, N, tree, rng)[len(PROMPT) :]) for _ in range(n_samples)
    ]
    exact = exact_distribution(TARGET_TABLE, PROMPT, N)
    return total_variation(samples, exact), tv_bound(exact, n_samples)


@pytest.mark.parametrize("tree", [(2,), (2, 1), (2, 2, 1), (3, 1), (1, 1, 1)])
def test_tree_speculative_sampling_has_the_target_distribution_for_every_shape(tree):
    """Two siblings, two siblings with a child each, a (2, 2, 1) tree of 10 nodes, every token at depth 1
    (the target's token is always among the candidates), and the chain (1, 1, 1): all within the bound."""
    tv, bound = tree_tv(tree, N_SAMPLES, seed=sum(tree) * 10 + len(tree))
    assert tv < bound, f"tree {tree}: TV {tv:.4f} >= bound {bound:.4f}"


@pytest.mark.parametrize("mistake, n_samples", [("same row for every sibling", 10_000),  # bound ~0.074
                                                ("twice the acceptance ratio", 3_000)])  # bound ~0.136
def test_the_tree_exactness_test_fails_for_a_wrong_sibling_rule(mistake, n_samples, monkeypatch):
    """Each wrong rule moves the distribution of the (2, 2, 1) tree's output far outside the bound."""
    monkeypatch.setattr(drafters, "_verify_tree", verifier(mistake))
    tv, bound = tree_tv((2, 2, 1), n_samples, seed=11)
    assert tv > bound, f"{mistake}: TV {tv:.4f} is not above the bound {bound:.4f}"


def one_hot_table(table):
    """The greedy version of a Markov table: each row one-hot at its argmax (what temperature 0 makes)."""
    greedy = np.zeros_like(table)
    np.put_along_axis(greedy, table.argmax(-1)[..., None], 1.0, axis=-1)
    return greedy


@pytest.mark.parametrize("tree", [(1,), (2,), (2, 2, 1), (3, 3), (1, 2, 1, 2)])
def test_at_temperature_zero_every_tree_gives_the_greedy_output_of_markov_tables(tree):
    target = markov_model(one_hot_table(TARGET_TABLE))
    expected = autoregressive_sampling(PROMPT, target, 12, np.random.default_rng(0))
    got = tree_speculative_sampling(PROMPT, markov_model(one_hot_table(DRAFT_TABLE)), target, 12, tree,
                                    np.random.default_rng(1))
    assert got == expected


@pytest.mark.parametrize("tree", [(2, 2, 1), (3,), (1, 1, 1, 1), (2, 1, 2)])
def test_at_temperature_zero_every_tree_gives_the_greedy_output_of_gpt2(tree):
    """Tiny random GPT-2s through create_model_fn (the tree mask and the cache's gathered paths): the tree
    sampler's text is the target's greedy text; the noisy-copy draft has some guesses kept, some not."""
    def target():
        return create_model_fn(TARGET_PARAMS, TARGET_HPARAMS, temperature=0)

    expected = autoregressive_sampling([1, 2, 3], target(), 30, np.random.default_rng(0))
    stats = SpeculativeStats()
    draft = create_model_fn(NOISY_DRAFT_PARAMS, TARGET_HPARAMS, temperature=0)
    got = tree_speculative_sampling([1, 2, 3], draft, target(), 30, tree, np.random.default_rng(1), stats=stats)
    assert got == expected
    assert 0 < stats.accepted < stats.checked


def test_at_temperature_one_a_tree_round_scores_every_node_in_one_target_pass_and_one_draft_pass_per_depth():
    """(2, 2, 1) has 2 + 4 + 4 = 10 nodes: each full round sends 10 nodes (11 rows) to the target in ONE
    call, and the draft makes 3 calls, one per depth; the accepted path is at most 3 deep."""
    calls = []
    target_markov = markov_model(TARGET_TABLE)

    def target(x, n=1, parents=None):
        calls.append(("target", n, None if parents is None else len(parents)))
        return target_markov(x, n, parents)

    target.n_vocab = 3
    stats = SpeculativeStats()
    tree_speculative_sampling(PROMPT, markov_model(DRAFT_TABLE), target, 40, (2, 2, 1), np.random.default_rng(3),
                              stats=stats)
    full_rounds = [call for call in calls if call[2] == 10]
    assert len(calls) == stats.rounds == stats.target_passes and full_rounds
    assert all(n == 11 for _, n, _ in full_rounds)
    assert stats.draft_passes == sum(min(3, k) for k in stats.ks)
    assert max(stats.accepted_depths) <= 3 and stats.nodes == stats.drafted


@pytest.mark.parametrize("tree, message", [((), "at least one depth"), ((2, 0), "whole number >= 1"),
                                           ((2, 1.5), "whole number >= 1"), ("abc", "whole number >= 1")])
def test_a_bad_tree_is_a_value_error(tree, message):
    with pytest.raises(ValueError, match=message):
        tree_speculative_sampling(PROMPT, markov_model(DRAFT_TABLE), markov_model(TARGET_TABLE), 5, tree,
                                  np.random.default_rng(0))


def test_top_tokens_are_the_most_likely_with_probability_above_zero():
    assert drafters.top_tokens(np.array([0.1, 0.5, 0.0, 0.4]), 3) == [1, 3, 0]
    assert drafters.top_tokens(np.array([0.0, 1.0, 0.0]), 2) == [1]  # a one-hot row offers one candidate
    assert drafters.tree_size((2, 2, 1)) == 10


class SampledTree:
    """A tree drafter whose siblings are INDEPENDENT samples of the draft's row (with replacement), each reported
    with that row: the general case of SpecInfer's rule (drafters.tree_stream's proof), where p_j(c_j) < 1."""

    name, cost = "sampled tree", None

    def __init__(self, model, branching):
        self.model, self.branching = model, branching

    def propose(self, x, k, rng, n_vocab):
        tokens, parents, rows, frontier = [], [], [], [-1]
        for depth, n_children in enumerate(self.branching[:k]):
            p = self.model(x + tokens, len(frontier), parents=parents) if depth else self.model(x, 1)  # [n, n_vocab]
            next_frontier = []
            for node, p_row in zip(frontier, p):
                for _ in range(n_children):
                    tokens.append(sampling._sample(p_row, rng))
                    parents.append(node)
                    rows.append(p_row)
                    next_frontier.append(len(tokens) - 1)
            frontier = next_frontier
        return sampling.Proposal(tokens, parents, np.array(rows).reshape(len(tokens), -1))


def test_a_tree_of_independently_sampled_siblings_has_the_target_distribution_too():
    """Siblings drawn from p (repeats allowed, rows p, not one-hot) at two depths, (2, 2): the multi-candidate
    rule with its residual updates is exact for them as well (measured TV ~0.07, bound ~0.15)."""
    rng = np.random.default_rng(21)
    draft, target = markov_model(DRAFT_TABLE), markov_model(TARGET_TABLE)
    samples = [tuple(sampling._prompt_and_tokens(PROMPT, drafters.tree_stream(PROMPT, SampledTree(draft, (2, 2)),
                                                                              target, N, 2, rng))[len(PROMPT):])
               for _ in range(N_SAMPLES)]
    exact = exact_distribution(TARGET_TABLE, PROMPT, N)
    tv, bound = total_variation(samples, exact), tv_bound(exact, N_SAMPLES)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"


def test_a_tree_too_large_for_the_context_is_a_value_error_before_any_model_runs():
    """Prompt 50 + N = 10 fits n_ctx = 64, but the first round of (3, 3, 3) would send 50 + 39 = 89 tokens;
    (2, 2) needs 50 + 6 = 56 at first and at most 61 + 0 later: it runs."""
    calls = []

    def model(x, n=1, parents=None):
        calls.append(len(x))
        return markov_model(TARGET_TABLE)(x, n, parents)

    model.n_vocab, model.n_ctx = 3, 64
    prompt = [0, 1, 2] * 16 + [0, 1]
    with pytest.raises(ValueError, match=r"does not fit in the context.*50 \+ 39 > n_ctx=64"):
        tree_speculative_sampling(prompt, model, model, 10, (3, 3, 3), np.random.default_rng(0))
    assert calls == []
    assert len(tree_speculative_sampling(prompt, model, model, 10, (2, 2), np.random.default_rng(0))) == 60
    assert max(calls) <= 64


@pytest.mark.parametrize("K, seed", [(1, 0), (3, 1), (4, 2)])
def test_a_one_branch_tree_through_the_tree_verifier_is_the_chain_round_with_the_same_draws(K, seed):
    """The tree extension on the core's case: the draft model's chain of guesses, verified by SpecInfer's rule
    (drafters.tree_stream, `_verify_tree`) and by Chen et al.'s (sampling.speculative_stream, `_verify_chain`),
    with one seed. Every round proposes, keeps and writes the same tokens with the same Checks (the same
    uniforms: one per guess tried, one per written draw), and the generator ends in the same state."""
    draft, target = markov_model(DRAFT_TABLE), markov_model(TARGET_TABLE)
    chain_rng, tree_rng = np.random.default_rng(seed), np.random.default_rng(seed)
    chain = list(sampling.speculative_stream(PROMPT, draft, target, 30, K, chain_rng, stop_token=None))
    tree = list(drafters.tree_stream(PROMPT, sampling.ModelDrafter(draft), target, 30, K, tree_rng))
    assert [(r.k, r.proposal.tokens, r.tokens, r.origins, r.checks) for r in chain] == \
           [(r.k, r.proposal.tokens, r.tokens, r.origins, r.checks) for r in tree]
    assert all(np.array_equal(a.target_rows, b.target_rows) for a, b in zip(chain, tree))
    assert {origin for r in chain for origin in r.origins} == {"draft", "residual", "bonus"}
    assert chain_rng.random() == tree_rng.random()
