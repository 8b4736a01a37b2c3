"""drafters.py as an executable specification: prompt lookup, staged drafting, K="auto", each exact.

Read sampling.py (the drafter contract) and drafters.py first: these tests are its specification.

Exactness is checked as for the chain (tests/test_speculative_exactness.py derives the TV bound): N = 5 tokens
from the Markov target of tools/markov.py, against enumeration. The prompt repeats itself, so lookups fire.
Teeth: a wrong rule particular to deterministic proposals, "keep a looked-up token whenever the target gives
it any probability" (instead of with probability q(token)), must fail the same check.
"""

import numpy as np
import pytest

import drafters
import lookahead
import sampling
import verifiers
from tools.markov import DRAFT_TABLE, TARGET_TABLE, exact_distribution, markov_model, total_variation, tv_bound
from records import SpeculativeStats
from tools.full_scan_lookup import brute_force_lookup
from sampling import autoregressive_sampling, speculative_sampling
from model_fn import create_model_fn
from test_sampling import NOISY_DRAFT_PARAMS, TARGET_HPARAMS, TARGET_PARAMS
from test_tree_sampling import one_hot_table
from test_lookahead_overhead import lookup_round, round_with

PROMPT = [0, 1, 2, 0, 1, 2, 0, 1]  # repeats: (0, 1) was followed by 2 before, so lookup proposes 2, 0, 1, ...
N = 5
N_SAMPLES = 2_500  # bound ~0.15 (tests/test_speculative_exactness.py)
WRONG_RULE_SAMPLES = 3_000  # bound ~0.136


def drafter_tv(make_drafter, K, n_samples, seed):
    """(TV of n_samples outputs of speculative sampling with a fresh drafter each run, the bound).

    The target claims r(m) = 1 for every m (Leviathan et al.'s assumption), so that K="auto" proposes from the
    first round: with an r(2) of 2.5 (DIPPING_R's) it would decline every round of a 5-token run (its first probe comes
    in round 5) and the check would never see a guess. The runs must have checked guesses, or the test says so.
    """
    rng = np.random.default_rng(seed)
    target = markov_model(TARGET_TABLE)
    target.r_table = [1.0] * (N + 1)
    stats = SpeculativeStats()
    samples = [
        tuple(speculative_sampling(PROMPT, make_drafter(), target, N, K, rng, stats=stats)[len(PROMPT) :])
        for _ in range(n_samples)
    ]
    assert stats.checked > n_samples, f"K={K}: only {stats.checked} guesses checked in {n_samples} runs"
    exact = exact_distribution(TARGET_TABLE, PROMPT, N)
    return total_variation(samples, exact), tv_bound(exact, n_samples)


def cheap_markov_draft():
    """The Markov draft, said to cost 0.1 of a target step (else K="auto" would take c = 1/2 and decline)."""
    draft = markov_model(DRAFT_TABLE)
    draft.cost = 0.1
    return draft


DRAFTERS = {
    "lookup": lambda: drafters.prompt_lookup(),
    "staged": lambda: drafters.staged(cheap_markov_draft(), max_ngram=2),
}


@pytest.mark.parametrize("name, K", [("lookup", 3), ("lookup", "auto"), ("staged", 2), ("staged", "auto")])
def test_each_drafter_gives_the_target_distribution(name, K):
    tv, bound = drafter_tv(DRAFTERS[name], K, N_SAMPLES, seed=len(name) + (7 if K == "auto" else K))
    assert tv < bound, f"{name}, K={K}: TV {tv:.4f} >= bound {bound:.4f}"


def test_the_exactness_test_fails_for_keeping_a_looked_up_token_the_target_merely_allows(monkeypatch):
    """The wrong rule keeps a deterministic (one-hot) proposal whenever q(token) > 0, not with probability q: a
    whole wrong `_verify_chain` (tests/verifiers.py), so the check does not depend on how it is split."""
    monkeypatch.setattr(sampling, "_verify_chain", verifiers.chain_verifier("a looked-up token kept when merely allowed"))
    tv, bound = drafter_tv(DRAFTERS["lookup"], 3, WRONG_RULE_SAMPLES, seed=5)
    assert tv > bound, f"TV {tv:.4f} is not above the bound {bound:.4f}"


# --- prompt lookup itself -------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_vocab", [2, 3, 6])
def test_the_incremental_index_finds_what_a_full_scan_finds_at_every_step_of_a_growing_text(n_vocab):
    """Small vocabularies make long matches and many ties; now and then the text is cut back (a staged round's
    guesses thrown away) and the index must undo its tokens, not keep what it learned from them."""
    rng = np.random.default_rng(n_vocab)
    for max_ngram, min_ngram in [(None, 1), (3, 1), (2, 2), (4, 2), (None, 3)]:
        lookup = drafters.prompt_lookup(max_ngram, min_ngram)
        x = rng.integers(0, n_vocab, size=5).tolist()
        for _ in range(250):
            assert (lookup.lookup(x, 5), lookup.match_length(x)) == brute_force_lookup(x, 5, max_ngram, min_ngram)
            if rng.random() < 0.15:
                x = x[: rng.integers(0, len(x) + 1)]
            x += rng.integers(0, n_vocab, size=rng.integers(1, 4)).tolist()


def test_each_new_token_is_added_to_the_index_once_and_a_cut_back_index_is_the_one_built_afresh(monkeypatch):
    """No rescan: lookups on a text that grows token by token extend the automaton once per token in all. And
    truncate undoes exactly: the automaton of a text cut back equals the one built from the shorter text."""
    extended = []
    real_extend = drafters.SuffixAutomaton.extend
    monkeypatch.setattr(drafters.SuffixAutomaton, "extend", lambda self, t: extended.append(t) or real_extend(self, t))
    text = np.random.default_rng(0).integers(0, 3, size=200).tolist()
    lookup = drafters.prompt_lookup()
    for length in range(1, len(text) + 1):
        lookup.lookup(text[:length], 4)
    assert extended == text
    lookup.index.truncate(120)
    fresh = drafters.SuffixAutomaton()
    for token in text[:120]:
        fresh.extend(token)
    for part in ("tokens", "next", "link", "length", "last_end", "last", "matches"):
        assert getattr(lookup.index, part) == getattr(fresh, part), part


@pytest.mark.parametrize("kwargs, message", [({"max_ngram": 0}, "max_ngram"), ({"max_ngram": 3, "min_ngram": 4}, "min_ngram=4"),
                                             ({"max_ngram": 2.5}, "whole number")])
def test_bad_ngram_settings_are_a_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        drafters.prompt_lookup(**kwargs)


# --- temperature 0: every drafter gives the greedy text --------------------------------------------------------


@pytest.mark.parametrize("name", ["lookup", "staged", "model"])
@pytest.mark.parametrize("K", [3, "auto", "hf"])
def test_at_temperature_zero_each_drafter_gives_the_greedy_output_of_gpt2(name, K):
    def target():
        return create_model_fn(TARGET_PARAMS, TARGET_HPARAMS, temperature=0)

    prompt = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]
    expected = autoregressive_sampling(prompt, target(), 30, np.random.default_rng(0))
    draft_model = create_model_fn(NOISY_DRAFT_PARAMS, TARGET_HPARAMS, temperature=0)
    draft = {"lookup": drafters.prompt_lookup(), "staged": drafters.staged(draft_model), "model": draft_model}[name]
    stats = SpeculativeStats()
    assert speculative_sampling(prompt, draft, target(), 30, K, np.random.default_rng(1), stats=stats) == expected
    assert len(stats.ks) == stats.rounds and stats.tokens == 30


def test_at_temperature_zero_lookup_reproduces_greedy_markov_output():
    target = markov_model(one_hot_table(TARGET_TABLE))
    expected = autoregressive_sampling(PROMPT, target, 20, np.random.default_rng(0))
    assert speculative_sampling(PROMPT, drafters.prompt_lookup(), target, 20, 4, np.random.default_rng(1)) == expected


# --- K="auto" ---------------------------------------------------------------------------------------------------


def free_draft():
    """A draft that claims to cost nothing and tells no match: K="auto" estimates its acceptance by position."""
    draft = markov_model(DRAFT_TABLE)
    draft.cost = 0.0
    return draft


# r(m) with a dip at m = 8, as one BLAS call for every product measured on 2-core machines: the numbers below
# are worked out from it (a target model's r_table is what AutoK plans with)
DIPPING_R = [1.0, 2.46, 2.74, 2.99, 3.24, 2.99, 2.73, 2.48, 2.92, 3.10, 3.29, 3.47, 3.46, 3.44, 3.43, 3.42]


def target_with_r(r_table):
    """markov_model(TARGET_TABLE) carrying r_table, the costs AutoK plans with."""
    model = markov_model(TARGET_TABLE)
    model.r_table = r_table
    return model


def test_auto_by_position_declines_a_free_draft_when_guesses_are_rarely_kept_and_proposes_long_runs_when_they_are():
    """A free one-guess round pays when (1 + a) / r(2) > 1, i.e. a > 1.46: never. Longer ones pay only for a
    near 1: at the prior a = 1/2 even k = 7 gives (2 - 0.5^7) / r(8) = 0.80 < 1, so auto declines. After ten
    rounds that kept all 8 guesses (a ~ 0.9 at every position) the best k maximises (1 + a + ... + a^k) / r(k+1);
    with DIPPING_R's dip at r(8) = 2.48 that is k = 7, not k_max = 8 (r(9) = 2.92). Thirty rejections later,
    a ~ 0 again and auto declines."""
    auto = lookahead.AutoK(free_draft(), target_with_r(DIPPING_R), k_max=8)
    assert auto.choose() == 0  # the prior a = 1/2 does not pay for a multi-row pass
    for _ in range(10):
        auto.record(round_with([True] * 8))
    assert auto.choose() == 7
    for _ in range(30):
        auto.record(round_with([False]))
    assert auto.choose() == 0


def test_auto_by_position_probes_after_a_run_of_declined_rounds_and_waits_twice_as_long_each_time():
    auto = lookahead.AutoK(free_draft(), target_with_r(DIPPING_R), k_max=4)
    ks = [auto.choose() for _ in range(20)]
    assert ks == [0] * 4 + [4] + [0] * 8 + [4] + [0] * 6


def test_auto_with_lookup_trusts_a_long_match_and_learns_to_decline_a_short_one():
    """By match length (lookahead.AutoK): a_i = A(n + i - 1), A of a bucket starting at Laplace's (l + 1)/(l + 2).
    A 20-token match: a = 17/18 at every position, and (1 + a + ... + a^k) / r(k + 1) grows with k up to
    k_max = 16 (11.2 / 3.42 = 3.3 there, DIPPING_R's r(16) being its last entry, used beyond). A 1-token match
    before any evidence: a_1 = 2/3, a_2 = a_3 = 3/4, ..., best k = 7 at 1.42 (DIPPING_R's dip at r(8)). After ten
    1-token matches whose first guess was rejected, the prior has aged as ten checks (its weight 2 * 0.95^10 =
    1.20): A(1) = (1.20 * 2/3) / (1.20 + sum of 0.95^j for j < 10 = 8.03) = 0.087, and every k is worse than a
    plain step: k = 0, while the 20-token match still proposes 16. No match: nothing to propose, k = 0."""
    lookup = drafters.prompt_lookup()
    auto = lookahead.AutoK(lookup, target_with_r(DIPPING_R), k_max=16)
    long_match = list(range(30)) + list(range(20))
    short_match = [7, 8, 9, 10, 11, 7]
    assert lookup.match_length(long_match) == 20 and lookup.match_length(short_match) == 1
    assert auto.choose(long_match) == 16 and auto.choose(short_match) == 7
    for _ in range(10):
        auto.record(lookup_round(1, [False]))
    prior_weight = 2 * 0.95**10
    assert auto.acceptance(1)[0] == pytest.approx(prior_weight * 2 / 3 / (prior_weight + (1 - 0.95**10) / 0.05))
    assert auto.choose(short_match) == 0 and auto.choose(long_match) == 16
    assert auto.choose([1, 2, 3]) == 0
    with pytest.raises(ValueError, match="needs the text x"):
        auto.choose()


def test_auto_files_each_checked_guess_under_the_match_its_path_had_reached():
    """A proposal after 14 tokens whose guesses went kept, kept, rejected: the checks were made at matches of
    14, 15 (bucket 8-15) and 16 (bucket 16+) tokens."""
    auto = lookahead.AutoK(drafters.prompt_lookup(), markov_model(TARGET_TABLE), k_max=8)
    auto.record(lookup_round(14, [True, True, False]))
    assert auto.checked.tolist() == [0, 0, 0, 0.95 + 1, 1] and auto.kept.tolist() == [0, 0, 0, 0.95 + 1, 0]
    assert [lookahead.match_bucket(n) for n in (1, 2, 3, 4, 7, 8, 15, 16, 500)] == [0, 1, 1, 2, 2, 3, 3, 4, 4]


def test_auto_gives_a_model_draft_its_cost_and_hf_schedule_grows_by_2_and_shrinks_by_1():
    target = create_model_fn(TARGET_PARAMS, TARGET_HPARAMS)
    draft = create_model_fn(NOISY_DRAFT_PARAMS, TARGET_HPARAMS)
    assert lookahead.AutoK(draft, target, 4).c == 1.0  # same weights' size: c from n_params
    assert lookahead.AutoK(drafters.prompt_lookup(), target, 4).c == 0.0
    hf = lookahead.HFSchedule(None, None, k_max=10)
    assert hf.choose() == 5
    hf.record(round_with([True] * 5))
    assert hf.choose() == 7
    hf.record(round_with([True, False]))
    assert hf.choose() == 6
