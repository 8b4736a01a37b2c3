"""The round's steps of EXERCISES.md graded one at a time: step 8 (`_residual`), 9 (`sampling._verify_chain`, then
`drafters._verify_tree`), 13 (prompt lookup).

Read EXERCISES.md's steps 8, 9 and 13 and tests/step_fixtures.py first (the saved calls of the reference, and
the stand-ins made of them).

Step 9's verifiers may call steps 7 and 8 (`_accept`, `_residual`) or compute the same inline; either way its
result must not depend on how far the learner got with them, so the checks swap in stand-ins that replay the
reference's own calls of those two in the same round. Each round is replayed with the saved seed: the tokens
written, their origins, the Checks and the rows must be the reference's exactly (one uniform per check, then
one for the written token, as `_verify_chain`'s docstring says). The exactness of the rule itself is proved against
enumeration by tests/test_speculative_exactness.py and tests/test_tree_sampling.py, which run the whole sampler.
Each check is a function returning the list of what is wrong, so tests/test_step_checks_teeth.py can show that a
wrong version fails it.
"""

import numpy as np
import pytest

import drafters
import sampling
from course.probe import patched
from step_fixtures import accept_stand_in, load, residual_stand_in

ROUNDS = load()["rounds"]


# --- step 8: _residual ----------------------------------------------------------------------------------------


def residual_errors(residual):
    errors = []
    for i, call in enumerate(ROUNDS["residual"]):
        got = np.asarray(residual(call["q_row"].copy(), call["p_row"].copy()))
        if got.shape != call["out"].shape or not np.allclose(got, call["out"], atol=1e-12):
            errors.append(f"rows {i}: q={np.round(call['q_row'], 3)}, p={np.round(call['p_row'], 3)} gives "
                          f"{np.round(got, 3)}, expected {np.round(call['out'], 3)}")
    return errors


@pytest.mark.step8
def test_the_residual_of_random_and_one_hot_rows_is_the_references():
    """Twelve pairs of rows over 6 tokens, some one-hot (a deterministic proposal, or a target sure of itself)."""
    errors = residual_errors(sampling._residual)
    assert errors == [], "\n".join(errors[:5])


# --- step 9: _verify_chain and _verify_tree ------------------------------------------------------------------


def as_tree_contract(verify_chain):
    """A `_verify_chain(guesses, p, q, rng)` as a `_verify_tree(q, proposal, rng, depths)` of chains: a chain's
    written token t has the target's row t."""
    def verify(q, proposal, rng, depths):
        written, origins, checks = verify_chain(list(proposal.tokens), proposal.rows, q, rng)
        return written, origins, checks, list(range(len(written)))
    return verify


def verify_errors(verify, trees):
    """Every saved round of a chain (trees=False: one child per node, or nothing proposed) or of a tree, with
    _accept and _residual replayed from the reference's calls (as the gradebook's probe replays them)."""
    errors = []
    for i, case in enumerate(ROUNDS["verify"]):
        is_tree = len(set(case["parents"])) < len(case["parents"])
        if is_tree != trees:
            continue
        stand_ins = {"_accept": accept_stand_in(case["accept_calls"]),
                     "_residual": residual_stand_in(case["residual_calls"])}
        proposal = sampling.Proposal(tokens=list(case["tokens"]), parents=list(case["parents"]), rows=case["rows"])
        where = f"round {i} (parents {case['parents']}, tokens {case['tokens']}, seed {case['seed']})"
        try:  # drafters too, where it imported them by name
            with patched("sampling", stand_ins), patched("drafters", stand_ins):
                tokens, origins, checks, rows = verify(case["q"], proposal, np.random.default_rng(case["seed"]),
                                                       list(case["depths"]))
        except AssertionError as error:  # a stand-in was asked what the reference never asked
            errors.append(f"{where}: {error}")
            continue
        got = {"tokens": [int(t) for t in tokens], "origins": list(origins), "rows": [int(r) for r in rows],
               "checks": [[c.depth, c.token, c.p, c.q, c.u, c.kept] for c in checks]}
        expected = {"tokens": case["written"], "origins": case["origins"], "rows": case["rows_used"],
                    "checks": case["checks"]}
        for part in ("tokens", "origins", "rows"):
            if got[part] != expected[part]:
                errors.append(f"{where}: {part} {got[part]}, expected {expected[part]}")
        if len(got["checks"]) != len(expected["checks"]) or not all(
                g[:2] == e[:2] and np.allclose(g[2:5], e[2:5]) and g[5] == e[5]
                for g, e in zip(got["checks"], expected["checks"])):
            errors.append(f"{where}: checks (depth, token, p, q, u, kept) {got['checks']}, "
                          f"expected {expected['checks']}")
    return errors


@pytest.mark.step9
def test_verifying_a_chain_writes_and_records_what_the_reference_does_for_its_own_uniforms():
    """Chains of 0 to 4 guesses, 12 random rounds each: kept guesses, the first rejection's residual token, the
    bonus token after a fully kept chain (or after nothing proposed), and the Check of each guess tried."""
    errors = verify_errors(as_tree_contract(sampling._verify_chain), trees=False)
    assert errors == [], "\n".join(errors[:5])


@pytest.mark.step9
def test_verifying_a_tree_tries_siblings_against_the_residual_left_by_the_ones_before():
    """Five tree shapes, 12 random rounds each: after a rejected sibling the next is tried against the residual,
    and Check.q records that row's probability."""
    errors = verify_errors(drafters._verify_tree, trees=True)
    assert errors == [], "\n".join(errors[:5])


# --- step 13: prompt lookup -----------------------------------------------------------------------------------


def lookup_errors(make_lookup):
    """Growing random texts, now and then cut back: lookup(x, 5), match_length(x) and the automaton's work
    counted so far (`index.steps`: the reference's count, so each state given an end counts once) after each change."""
    errors = []
    for setting in ROUNDS["lookup"]:
        lookup, x = make_lookup(setting["max_ngram"], setting["min_ngram"]), []
        for step, text in enumerate(setting["texts"]):
            x = x[: text["keep"]] + text["append"]
            got = (lookup.lookup(x, 5), lookup.match_length(x), getattr(lookup.index, "steps", None))
            if got != (text["lookup"], text["match_length"], text["steps"]):
                errors.append(f"max_ngram={setting['max_ngram']}, min_ngram={setting['min_ngram']}, text {step} "
                              f"{x[-12:]} (its last 12 tokens): lookup, match length, index.steps {got}, expected "
                              f"{(text['lookup'], text['match_length'], text['steps'])}")
                break
    return errors


@pytest.mark.step13
def test_lookup_follows_the_most_recent_occurrence_of_the_longest_match_as_the_text_grows_and_is_cut_back():
    """Texts of 2, 3 and 6 token kinds (long matches, many ties) under four n-gram settings, 100 changes each; the
    work counted in SuffixAutomaton.steps as the reference counts it (tests/test_lookup_work.py reads it)."""
    errors = lookup_errors(drafters.prompt_lookup)
    assert errors == [], "\n".join(errors[:5])


@pytest.mark.step13
def test_the_longest_match_beats_a_more_recent_short_one_and_ties_go_to_the_most_recent():
    """Code repeats short contexts everywhere: after `1 2 3 4` the text went on with 7 the first time; a later
    `5 2 3 4` went on with 8. Capped at 3 tokens (the original lookup), the suffix `2 3 4` last occurred before 8;
    the longest match, `1 2 3 4`, before 7. Two earlier `1 2 3 4`, both after a 5 (followed by 7, then 9), and
    the text now ends `6 1 2 3 4`: a tie at 4 tokens, and the most recent wins."""
    x = [1, 2, 3, 4, 7, 0, 5, 2, 3, 4, 8, 0, 1, 2, 3, 4]
    assert drafters.prompt_lookup().lookup(x, 2) == [7, 0] and drafters.prompt_lookup().match_length(x) == 4
    assert drafters.prompt_lookup(max_ngram=3).lookup(x, 2) == [8, 0]
    assert drafters.prompt_lookup(max_ngram=3).match_length(x) == 3
    x = [5, 1, 2, 3, 4, 7, 5, 1, 2, 3, 4, 9, 6, 1, 2, 3, 4]
    assert drafters.prompt_lookup().lookup(x, 1) == [9] and drafters.prompt_lookup().match_length(x) == 4


@pytest.mark.step13
def test_the_docstring_examples_one_hot_rows_and_the_match_length():
    lookup = drafters.prompt_lookup()
    proposal = lookup.propose([5, 6, 7, 8, 5, 6], 3, np.random.default_rng(0), n_vocab=10)
    assert proposal.tokens == [7, 8, 5] and proposal.parents == [-1, 0, 1] and proposal.match_length == 2
    assert proposal.rows.shape == (3, 10) and (proposal.rows.argmax(1) == [7, 8, 5]).all()
    assert proposal.rows.sum() == 3.0
    assert drafters.prompt_lookup().lookup([1, 2, 1, 2], 4) == [1, 2, 1, 2]  # the copy runs into itself
    assert drafters.prompt_lookup().lookup([1, 2, 1, 3, 1], 2) == [3, 1]  # the most recent occurrence wins
    nothing = lookup.propose([1, 2, 3], 3, np.random.default_rng(0), 10)
    assert nothing.tokens == [] and nothing.match_length == 0
