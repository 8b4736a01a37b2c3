"""What a round records, as an executable specification: every field `Check`'s and `Round`'s docstrings promise.

Read records.py's `Check` and `Round`, sampling.py's `_verify_chain` and drafters.py's `_verify_tree` first. The exactness tests judge the
tokens' distribution; they cannot see a round that samples right but records wrong, say a Check whose q is the
target's row before the earlier siblings' residual updates (Check's docstring forbids it). show.py and the
statistics read these records.

How: run real rounds (a chain, a tree of top tokens, a tree of independently sampled siblings, on the Markov tables
of tools/markov.py) with a target that keeps the q it returned, then REPLAY each round: walk its own proposal
from x, try the children of each node in turn against the target's row, updated to the residual
normalise((q - p)_+) after each rejection, and decide each candidate with the u its Check recorded. The replay
must give the same Checks (depth, token, p, q, kept = u < q/p, with 0 <= u < 1), in the same order, one per
candidate tried and none for the others; the written tokens must be the kept path followed by one token labelled
"residual" (after a rejection, with probability > 0 in the last residual) or "bonus" (at a node without children,
with probability > 0 in the target's row); and Round.target_rows must be the target's row at each written
position, before any residual update. The replay uses the recorded uniforms, not a seed, so it does not care in
which order a verifier draws them, nor how it is split into functions. A chain runs through
`sampling.speculative_stream`, the trees through `drafters.tree_stream`.

Teeth: tests/verifiers.py's verifiers with one mistake in the records, swapped in whole for `_verify_chain` and
`_verify_tree`, fail the replay, with a message naming the wrong field; the rule done right, written another
way (the residual inline), passes it.
"""

import numpy as np
import pytest

import drafters
import sampling
from tools.markov import DRAFT_TABLE, TARGET_TABLE, markov_model
from test_tree_sampling import SampledTree
from verifiers import chain_verifier, residual, verifier

PROMPT = [2, 0, 1]
RUNS, N = 40, 12  # 40 runs of 12 tokens: ~100 rounds per drafter, with kept, rejected and bonus tokens


def recorded_rounds(make_drafter, K, stream, seed):
    """[(round, the q the target returned for it)] of RUNS speculative runs on the Markov tables."""
    rng, returned = np.random.default_rng(seed), []
    target_markov = markov_model(TARGET_TABLE)

    def target(x, n=1, parents=None):
        returned.append(target_markov(x, n, parents))  # [n, n_vocab]
        return returned[-1]

    target.n_vocab = 3
    pairs = []
    for _ in range(RUNS):
        for round_ in stream(PROMPT, make_drafter(), target, N, K, rng):
            pairs.append((round_, returned[-1]))  # one target call per round
    return pairs


RUNS_OF = {  # name -> (drafter factory, K, the stream that runs it)
    "chain": (lambda: sampling.ModelDrafter(markov_model(DRAFT_TABLE)), 3, sampling.speculative_stream),
    "tree of top tokens": (lambda: drafters.tree(markov_model(DRAFT_TABLE), (2, 2, 1)), 3, drafters.tree_stream),
    "tree of sampled siblings": (lambda: SampledTree(markov_model(DRAFT_TABLE), (2, 2)), 2, drafters.tree_stream),
}


def replay_errors(round_, q):
    """What in the round's record differs from a replay of the rule on its own proposal, q and uniforms ([] if
    nothing): one line per difference, naming the field."""
    proposal, checks, errors = round_.proposal, round_.checks, []
    children, depths = {}, []
    for i, parent in enumerate(proposal.parents):
        children.setdefault(parent, []).append(i)
        depths.append(1 if parent == -1 else depths[parent] + 1)
    node, n_checked, kept_tokens, rows = -1, 0, [], []
    while True:
        row = q[node + 1]  # [n_vocab]
        rows.append(node + 1)
        candidates = children.get(node, [])
        if not candidates:
            last_origin, last_row = "bonus", row
            break
        tried = row
        for c in candidates:
            if n_checked == len(checks):
                return errors + [f"round {round_.index}: no Check for candidate {c} (token {proposal.tokens[c]}), "
                                 f"which the rule tries"]
            check, token = checks[n_checked], proposal.tokens[c]
            n_checked += 1
            p = proposal.rows[c][token]
            expected = {"depth": depths[c], "token": token, "p": p, "q": tried[token], "kept": check.u < tried[token] / p}
            for name, value in expected.items():
                if not np.isclose(getattr(check, name), value, rtol=1e-9, atol=1e-12):
                    errors.append(f"round {round_.index}, check {n_checked}: Check.{name} is {getattr(check, name)}, "
                                  f"the rule gives {value}")
            if not 0 <= check.u < 1:
                errors.append(f"round {round_.index}, check {n_checked}: Check.u = {check.u} is not in [0, 1)")
            if expected["kept"]:
                break
            tried = residual(tried, proposal.rows[c])
        else:
            last_origin, last_row = "residual", tried
            break
        kept_tokens.append(token)
        node = c
    if n_checked < len(checks):
        errors.append(f"round {round_.index}: {len(checks) - n_checked} Checks more than candidates tried")
    expected_origins = ["draft"] * len(kept_tokens) + [last_origin]
    if round_.origins != expected_origins:
        errors.append(f"round {round_.index}: Round.origins is {round_.origins}, the rule gives {expected_origins}")
    if round_.tokens[:-1] != kept_tokens or len(round_.tokens) != len(kept_tokens) + 1:
        errors.append(f"round {round_.index}: Round.tokens is {round_.tokens}, the kept path is {kept_tokens}")
    elif last_row[round_.tokens[-1]] <= 0:
        errors.append(f"round {round_.index}: the {last_origin} token {round_.tokens[-1]} has probability 0 in "
                      f"the row it must be drawn from, {last_row}")
    if len(round_.target_rows) != len(rows) or not np.allclose(round_.target_rows, q[rows]):
        errors.append(f"round {round_.index}: Round.target_rows is not the target's row at each written position")
    return errors


def all_errors(run):
    """The replay's complaints about every round of one RUNS_OF run, and how many rounds it had."""
    pairs = recorded_rounds(*RUNS_OF[run], seed=len(run))
    return [error for round_, q in pairs for error in replay_errors(round_, q)], len(pairs)


def test_a_chain_rounds_checks_tokens_and_rows_are_what_the_rule_gives_for_its_own_uniforms():
    errors, n_rounds = all_errors("chain")
    assert n_rounds > 50 and errors == [], "\n".join(errors[:10])


@pytest.mark.parametrize("run", ["tree of top tokens", "tree of sampled siblings"])
def test_a_tree_rounds_checks_record_the_residual_row_each_sibling_was_tried_against(run):
    """Check.q of the second sibling is its probability in normalise((q - p_1)_+), not in q."""
    errors, n_rounds = all_errors(run)
    assert n_rounds > 50 and errors == [], "\n".join(errors[:10])


def test_the_runs_reach_every_case_the_replay_checks():
    """Rounds with a kept sibling after a rejected one, with every guess rejected, and with a bonus token: so
    that each field is checked where a mistake would show."""
    origins, second_sibling_kept = set(), False
    for round_, _ in recorded_rounds(*RUNS_OF["tree of top tokens"], seed=1):
        origins.add(round_.origins[-1])
        depths = [check.depth for check in round_.checks]
        second_sibling_kept |= any(a == b and check.kept for a, b, check in zip(depths, depths[1:], round_.checks[1:]))
    assert origins >= {"residual", "bonus"} and second_sibling_kept


@pytest.mark.parametrize("mistake, field", [
    ("Check.q from the node's own row", "Check.q"),
    ("same row for every sibling", "Check.q"),
    ("Check.p from the target's row", "Check.p"),
    ("Check.u a fresh draw", "Check.kept"),
    ("twice the acceptance ratio", "Check.kept"),
    ("Check.depth counts checks", "Check.depth"),
    ("a Check for every sibling", "Checks more than candidates tried"),
    ("rows off by one", "Round.target_rows"),
    ("every last token a bonus", "Round.origins"),
])
def test_the_record_checks_fail_for_a_wrong_record(mistake, field, monkeypatch):
    """tests/verifiers.py's verifiers with the mistake, swapped in whole for both verifiers: the replay names the
    wrong field."""
    monkeypatch.setattr(sampling, "_verify_chain", chain_verifier(mistake))
    monkeypatch.setattr(drafters, "_verify_tree", verifier(mistake))
    errors = [error for run in RUNS_OF for error in all_errors(run)[0]]
    assert any(field in error for error in errors), f"{mistake}: no complaint about {field}; got {errors[:3]}"


def test_the_record_checks_pass_a_correct_verify_written_another_way(monkeypatch):
    """tests/verifiers.py's rule done right, with the residual computed inline (no `_residual`, no `_accept`)."""
    monkeypatch.setattr(sampling, "_verify_chain", chain_verifier(None))
    monkeypatch.setattr(drafters, "_verify_tree", verifier(None))
    for run in RUNS_OF:
        errors, _ = all_errors(run)
        assert errors == [], "\n".join(errors[:10])
