"""K="auto" prices a proposing round's overhead o: it declines rounds that cost more than they yield.

Read lookahead.py's AutoK first (o, ROUND_OVERHEAD): these tests are its specification. Every figure here is
worked out from recorded rounds and a given r(m), never from a clock. CHEAP_PASS_R is an r(m) of a machine where
a pass over two rows costs barely more than one (an AVX-512 machine's, with a helper on its second core): there a
policy without o takes a round at the slightest hope and loses on text that lookup cannot predict.
Teeth: the policy without the overhead (target.round_overhead = 0, the old cost model) fails the first test.
"""

import dataclasses

import numpy as np
import pytest

import drafters
import lookahead
import sampling
from records import Check, Round, SpeculativeStats
from speed.calibration import MeasuredCosts
from tools.markov import TARGET_TABLE, markov_model

CHEAP_PASS_R = [1.0, 1.07, 1.09, 1.11, 1.19, 1.27, 1.34, 1.42, 1.49, 1.56, 1.63, 1.70, 1.77, 1.84, 1.91, 1.98, 2.05]
SHORT_MATCH = [7, 8, 9, 10, 11, 7]  # its last token, 7, came before: a 1-token match
LONG_MATCH = list(range(30)) + list(range(20))  # its last 20 tokens came before


def round_with(checks):
    """A Round whose checks kept/rejected guesses at depths 1, 2, ...: round_with([True, False])."""
    return Round(1, len(checks), None, [Check(d + 1, 0, 1.0, 0.5, 0.0, kept) for d, kept in enumerate(checks)],
                 [0], ["draft"])


def lookup_round(match_length, checks):
    """A Round of a lookup proposal after a match of match_length tokens, its guesses kept or not as `checks`."""
    proposal = drafters.LookupProposal([0] * len(checks), sampling.chain_parents(len(checks)), None, match_length)
    return dataclasses.replace(round_with(checks), proposal=proposal)


def target_costing(round_overhead):
    """A Markov target with CHEAP_PASS_R; round_overhead None: AutoK's own ROUND_OVERHEAD."""
    model = markov_model(TARGET_TABLE)
    model.r_table, model.round_overhead = CHEAP_PASS_R, round_overhead
    return model


def auto_after_failing_rounds(round_overhead):
    """AutoK after 20 one-guess rounds after a 1-token match and 20 after a 2-token match, each guess kept only in
    the 1st and the 11th round of its 20 (about 1 guess in 10 kept)."""
    auto = lookahead.AutoK(drafters.prompt_lookup(), target_costing(round_overhead), k_max=16)
    for match_length in (1, 2):
        for i in range(20):
            auto.record(lookup_round(match_length, [i in (0, 10)]))
    return auto


@pytest.mark.parametrize("round_overhead, proposes", [(None, False), (0.0, True)])
def test_auto_declines_rounds_whose_guesses_keep_failing_where_a_two_row_pass_is_cheap(round_overhead, proposes):
    """The kept guesses weigh 0.95^19 + 0.95^9 = 1.007 after the newer checks of their bucket, all 20 weigh
    sum 0.95^j (j < 20) = 12.83, and the prior has aged as the 20 checks (2 * 0.95^20 = 0.717): A(1) =
    (1.007 + 0.717 * 2/3) / (12.83 + 0.717) = 0.110 and A(2-3) = (1.007 + 0.717 * 3/4) / 13.55 = 0.114. A
    one-guess round yields 1.110 tokens for r(2) + o = 1.17 steps (0.95 per step), two guesses 1 + 0.110 +
    0.110 * 0.114 = 1.122 for 1.19 (0.94): below the plain step's 1, so k = 0. The cost model without o prices
    the one-guess round at 1.110 / 1.07 = 1.04 and proposes guesses that are thrown away 9 times in 10."""
    auto = auto_after_failing_rounds(round_overhead)
    weights, prior_weight, kept = (1 - 0.95**20) / 0.05, 2 * 0.95**20, 0.95**19 + 0.95**9
    a_1, a_2 = (kept + prior_weight * 2 / 3) / (weights + prior_weight), (kept + prior_weight * 3 / 4) / (
        weights + prior_weight)
    assert auto.acceptance(1)[:2] == pytest.approx([a_1, a_2])
    o = lookahead.ROUND_OVERHEAD if round_overhead is None else round_overhead
    assert auto.expected_rate(1, 1) == pytest.approx((1 + a_1) / (1.07 + o))
    assert auto.expected_rate(2, 1) == pytest.approx((1 + a_1 + a_1 * a_2) / (1.09 + o))
    assert (auto.choose(SHORT_MATCH) > 0) == proposes


def test_auto_still_proposes_where_guesses_are_kept_and_a_long_match_proposes_k_max():
    """Kept in 9 rounds of 10 after a 1-token match: A(1) is near 0.9, and a round is worth far more than its
    overhead. A 20-token match before any evidence: a = 17/18 at every position, (1 + a + ... + a^16) = 11.2
    tokens for r(17) + o = 2.15 steps, a rate of 5.2: k_max = 16, as without o."""
    auto = lookahead.AutoK(drafters.prompt_lookup(), target_costing(None), k_max=16)
    for i in range(20):
        auto.record(lookup_round(1, [i % 10 != 0]))
    assert auto.choose(SHORT_MATCH) > 0 and auto.expected_rate(auto.choose(SHORT_MATCH), 1) > 1.2
    assert auto.choose(LONG_MATCH) == 16
    assert auto.expected_rate(16, 20) == pytest.approx((1 - (17 / 18) ** 17) / (1 / 18) / (2.05 + 0.1))


def test_a_plain_step_pays_no_overhead_and_a_target_may_give_its_own():
    """k = 0 is the plain step, 1 token for 1 step whatever o is; o = 0.5 makes a one-guess round cost 1.57."""
    auto = lookahead.AutoK(drafters.prompt_lookup(), target_costing(0.5), k_max=4)
    assert auto.overhead == 0.5 and auto.expected_rate(0, 1) == 1.0
    assert auto.expected_rate(1, 1) == pytest.approx((1 + 2 / 3) / (1.07 + 0.5))
    assert lookahead.AutoK(drafters.prompt_lookup(), markov_model(TARGET_TABLE), 4).overhead == lookahead.ROUND_OVERHEAD


def text_target(text, n_vocab, round_overhead):
    """A target that is certain the text goes on as `text` does (one-hot rows), with CHEAP_PASS_R and o."""

    def target(x, n=1):
        rows = np.zeros((n, n_vocab))  # [n, n_vocab]
        positions = np.minimum(np.arange(len(x) - n + 1, len(x) + 1), len(text) - 1)  # [n]
        rows[np.arange(n), np.asarray(text)[positions]] = 1.0
        return rows

    target.n_vocab, target.r_table, target.round_overhead = n_vocab, CHEAP_PASS_R, round_overhead
    return target


def lookup_run(text, prompt_length, round_overhead):
    stats = SpeculativeStats()
    target = text_target(text, 16, round_overhead)
    sampling.speculative_sampling(text[:prompt_length], drafters.prompt_lookup(), target, len(text) - prompt_length,
                                  "auto", np.random.default_rng(0), stats=stats)
    return stats


def test_on_text_lookup_cannot_predict_auto_proposes_in_few_rounds_and_on_a_copy_in_nearly_all():
    """Random text over 16 tokens: every token came before, so matches are short and a guess is right 1 time
    in 16 (a = 1/16, under the break-even 0.07 of r(2) alone). With o as calibrate measures it where a step is
    fast (0.01), auto proposes only while a bucket is young, its prior not yet outweighed: in under a seventh of
    the rounds (38 of 399 with this seed; 25 with ROUND_OVERHEAD). Teeth: a prior that never ages (2 checks'
    weight at 2/3 against at most 20 of evidence, A never under 0.06) kept proposing in 246 of 384 rounds,
    each a round whose pass costs more than a step and whose guess is almost always thrown away. On a text
    that gives back its prompt, auto copies it in long rounds: more than 10 tokens per pass."""
    unpredictable = np.random.default_rng(0).integers(0, 16, 500).tolist()
    share = {o: sum(k > 0 for k in stats.ks) / stats.rounds
             for o, stats in ((o, lookup_run(unpredictable, 100, o)) for o in (0.01, None))}
    assert share[0.01] < 1 / 7 and share[None] < 1 / 10, share
    prompt = np.random.default_rng(1).integers(0, 16, 200).tolist()
    assert lookup_run(prompt + prompt, 200, 0.01).tokens_per_target_pass > 10


# ------------------------------------------------------------------------------------------------------------
# o as calibrate measures it, from a costs file; and the plan a plain step reuses
# ------------------------------------------------------------------------------------------------------------


def auto_planning_with_measured_o(round_overhead):
    """AutoK on a target given its costs as a costs file gives them (MeasuredCosts.use): CHEAP_PASS_R and o, after
    60 one-guess rounds after a 1-token match and 60 after a 2-token match, a guess kept in the 51st and the 56th
    round of each 60 (9 and 4 newer checks of its bucket)."""
    target = markov_model(TARGET_TABLE)
    MeasuredCosts(r_table=CHEAP_PASS_R, round_overhead=round_overhead).use(target)
    auto = lookahead.AutoK(drafters.prompt_lookup(), target, k_max=16)
    for match_length in (1, 2):
        for i in range(60):
            auto.record(lookup_round(match_length, [i in (50, 55)]))
    return auto


@pytest.mark.parametrize("round_overhead, k", [(0.02, 0), (0.0, 1)])
def test_auto_with_a_measured_o_declines_a_round_that_yields_less_than_the_pass_and_o_cost(round_overhead, k):
    """All 60 checks of a bucket weigh sum 0.95^j (j < 60) = 19.08, the kept ones 0.95^9 + 0.95^4 = 1.445, the
    aged prior 2 * 0.95^60 = 0.092: A(1) = (1.445 + 0.092 * 2/3) / 19.17 = 0.079, A(2-3) = 0.079 too. A
    one-guess round yields 1.079 tokens: for r(2) + o = 1.09 steps with o = 0.02 as measured (0.99 per step:
    k = 0), for 1.07 without (1.008: k = 1). Two guesses, 1 + 0.079 + 0.079^2 = 1.085 for 1.09 + o, lose
    either way."""
    auto = auto_planning_with_measured_o(round_overhead)
    weights, prior_weight, kept = (1 - 0.95**60) / 0.05, 2 * 0.95**60, 0.95**9 + 0.95**4
    assert auto.acceptance(1)[:2] == pytest.approx([(kept + prior_weight * mu) / (weights + prior_weight)
                                                    for mu in (2 / 3, 3 / 4)])
    assert auto.overhead == round_overhead and auto.choose(SHORT_MATCH) == k


def test_auto_with_a_measured_o_still_copies_a_long_passage_k_max_deep():
    """A 20-token match: 11.2 tokens for r(17) + o = 2.07 steps, 5.4 per step: k_max = 16."""
    auto = auto_planning_with_measured_o(0.02)
    assert auto.choose(LONG_MATCH) == 16
    assert auto.expected_rate(16, 20) == pytest.approx((1 - (17 / 18) ** 17) / (1 / 18) / (2.05 + 0.02))


def test_the_plan_a_plain_step_reuses_gives_the_tokens_and_ks_that_planning_every_round_anew_gives(monkeypatch):
    """AutoK keeps its best k by match length until a round checks a guess (best_after_match): a run of K="auto"
    with lookup, a Markov target drawn from (temperature 1: the same seed, the same draws), writes the same
    tokens in rounds of the same k as one that plans every round anew. Teeth: a plan kept after the counts
    changed proposes differently."""
    def run():
        stats = SpeculativeStats()
        target = target_costing(0.01)
        prompt = [0, 1, 2, 0, 1, 1, 2, 0]
        tokens = sampling.speculative_sampling(prompt, drafters.prompt_lookup(), target, 300, "auto",
                                               np.random.default_rng(3), stats=stats)
        return tokens, stats.ks

    kept = run()
    monkeypatch.setattr(lookahead.AutoK, "best_after_match", lambda self, n: int(np.argmax(self.expected_rates(n))))
    anew = run()
    assert kept == anew and 0 in kept[1] and len(set(kept[1])) > 2, kept[1]
