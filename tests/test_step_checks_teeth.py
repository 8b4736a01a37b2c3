"""Each step's check fails for a wrong version of the step's function: the checks of the graded steps have teeth.

Read EXERCISES.md, tests/test_steps_forward.py, tests/test_steps_rounds.py and tests/test_accept_and_residual.py
first. The wrong versions here are each one slip away from the right answer, so `python classroom.py student`
leaves this file out of a student copy (with the other teacher-only files it lists).
"""

import types

import numpy as np
import pytest

import drafters
import gpt2
import sampling
import verifiers
from test_accept_and_residual import accept_errors
from test_steps_forward import (attention_errors, causal_mask_errors, layer_norm_errors, mha_errors, passes_errors,
                                stand_ins_for_gpt2)
from test_steps_rounds import as_tree_contract, lookup_errors, residual_errors, verify_errors


def causal_mask_ignoring_n_past(n_seq, n_past):
    """The slip EXERCISES.md warns of: np.triu(..., k=1), right only for an empty cache."""
    return np.triu(np.full((n_seq, n_past + n_seq), -1e10, dtype=np.float32), k=1)[:, -(n_past + n_seq):]


def test_a_causal_mask_that_ignores_n_past_fails_step_2():
    errors = causal_mask_errors(causal_mask_ignoring_n_past)
    assert errors and all("causal_mask(" in error for error in errors)
    assert not any(error.startswith(f"causal_mask({n}, 0)") for n in range(1, 7) for error in errors)


def test_an_attention_scaled_by_a_float64_numpy_scalar_fails_step_2():
    """The values are right; the dtype is float64 (the slip most often seen). Caught on every NumPy the
    requirements allow: from NumPy 2 on, float32 array / np.float64 scalar is float64 (NumPy 1 kept float32,
    which is why requirements.txt asks for numpy>=2.0)."""
    def attention_float64_scale(q, k, v, mask):
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1]) + mask
        return gpt2.softmax(scores) @ v

    assert any("dtype float64" in error for error in attention_errors(attention_float64_scale))


def test_an_attention_whose_softmax_does_not_subtract_the_max_fails_step_2():
    """EXERCISES.md promises a numerically safe softmax: at scores near 200, exp overflows float32 and the
    weights are inf / inf = NaN."""
    def naive_softmax_attention(q, k, v, mask):
        weights = np.exp(q @ k.transpose(0, 2, 1) / np.float32(np.sqrt(q.shape[-1])) + mask)
        return weights / weights.sum(-1, keepdims=True) @ v

    errors = attention_errors(naive_softmax_attention)
    assert [error.split(":")[0] for error in errors] == ["scores near 200"]


def test_a_layer_norm_with_the_unbiased_variance_or_without_eps_fails_step_1():
    def unbiased(x, g, b, eps=1e-5):
        return g * (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, ddof=1, keepdims=True) + eps) + b

    def without_eps(x, g, b, eps=1e-5):
        return g * (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True)) + b

    assert layer_norm_errors(unbiased) and layer_norm_errors(without_eps)


def test_an_mha_that_writes_its_keys_at_position_0_fails_step_3(monkeypatch):
    """The reference's mha handed the cache from position 0 on and told n_past = 0: the new keys land at 0."""
    def keys_at_zero(x, c_attn, c_proj, n_head, kv, n_past, mask):
        return gpt2.mha(x, c_attn, c_proj, n_head, kv, 0, mask[:, n_past:])

    errors = mha_errors(keys_at_zero, monkeypatch)
    assert errors and not any("n_past 0)" in error for error in errors)


@pytest.mark.parametrize("wrong", ["drawing twice", "upside down", "reporting another u"])
def test_the_accept_check_fails_for_a_wrong_accept(wrong):
    def accept(q_row, p_row, token, rng):
        u = rng.random()
        if wrong == "drawing twice":
            u = rng.random()  # a wasted draw: the seed's tokens change, and u is not the first draw
        ratio = p_row[token] / q_row[token] if wrong == "upside down" else q_row[token] / p_row[token]
        reported = np.random.default_rng().random() if wrong == "reporting another u" else u
        return bool(u < ratio), reported

    assert accept_errors(accept) != []


def test_a_residual_that_resamples_from_the_target_fails_step_8():
    assert residual_errors(lambda q_row, p_row: q_row)


@pytest.mark.parametrize("mistake, fails_the_chain", [("replacement from the target's row", True),
                                                      ("twice the acceptance ratio", True),
                                                      ("same row for every sibling", False),
                                                      ("Check.q from the node's own row", False),
                                                      ("rows off by one", False)])
def test_a_wrong_verify_fails_step_9_where_its_mistake_shows(mistake, fails_the_chain):
    """A chain has no siblings, so the sibling mistakes show in the tree part only (and a chain's rows are not
    the learner's to return: its token t has row t); the right rule passes both."""
    chain = lambda mistake: as_tree_contract(verifiers.chain_verifier(mistake))  # noqa: E731
    assert verify_errors(chain(None), trees=False) == []
    assert verify_errors(verifiers.verifier(None), trees=True) == []
    assert bool(verify_errors(chain(mistake), trees=False)) == fails_the_chain
    assert verify_errors(verifiers.verifier(mistake), trees=True)


def test_a_gpt2_that_hands_every_block_no_mask_fails_step_4_and_an_all_seeing_tree_mask_fails_step_12(monkeypatch):
    """mha is replayed in steps 4 and 12, so the mask it is handed is all a pass's check sees of the masks: the
    replay compares which keys it hides with the reference's (it once looked calls up by x and n_past alone, and
    a gpt2 with no mask at all, or a tree whose nodes all see each other, passed)."""
    stand_ins_for_gpt2(monkeypatch, masks=True)
    causal_mask = gpt2.causal_mask
    monkeypatch.setattr(gpt2, "causal_mask", lambda n_seq, n_past: np.zeros_like(causal_mask(n_seq, n_past)))
    errors = passes_errors(gpt2.gpt2, trees=False)
    assert errors and all("mha was given a mask that hides 0 (query, key) pairs" in error for error in errors)
    stand_ins_for_gpt2(monkeypatch, masks=False)
    monkeypatch.setattr(gpt2, "tree_mask", lambda ancestors, n_prefix: np.zeros(
        (len(ancestors), n_prefix + len(ancestors[0])), dtype=np.float32))
    errors = passes_errors(gpt2.gpt2, trees=True)
    assert errors and all("mha was given a mask that hides 0 (query, key) pairs" in error for error in errors)


def test_an_accept_that_draws_nothing_when_q_is_at_least_p_fails_step_7():
    """The shortcut step 7's worked example ("the guess is always kept") invites: no draw where q(token) >=
    p(token). The guess is kept as it should be, but the round's u and every later draw of the run move (its check
    once tried q/p < 1 only)."""
    def shortcut(q_row, p_row, token, rng):
        if q_row[token] >= p_row[token]:
            return True, 0.0
        u = rng.random()
        return bool(u < q_row[token] / p_row[token]), u

    errors = accept_errors(shortcut)
    assert errors and all("q/p = 1.67" in error for error in errors)


def test_a_lookup_that_skips_the_token_after_the_match_fails_step_13(monkeypatch):
    def skipping(self, x, k):
        n, end = self.match(x)
        return [] if n == 0 else [int(t) for t in (list(x) * (k + 2))[end + 1 : end + 1 + k]]

    monkeypatch.setattr(drafters.PromptLookup, "lookup", skipping)
    assert lookup_errors(drafters.prompt_lookup)


def test_a_record_ends_that_does_not_count_its_work_fails_step_13_in_the_copy_and_in_the_gradebook(monkeypatch):
    """Right ends, right lookups, but `self.steps` not counted: tests/test_lookup_work.py would then miss a walk
    that never stops early, so the count is part of the step. The shipped check fails it, and the gradebook on
    fresh texts scores it 0 naming the part that differs (the reference passes the same request)."""
    from course import hidden, probe

    request = hidden.request(13, 0)
    expected = hidden.expected_answers(request)
    assert hidden.judge(request, expected, hidden.through_json(probe.observe(request)))[0].passed

    def uncounted(self, state, end, changes):
        while state > 0 and self.last_end[state] < end:
            changes.append((self.last_end, state, self.last_end[state]))
            self.last_end[state] = end
            state = self.link[state]

    monkeypatch.setattr(drafters.SuffixAutomaton, "_record_ends", uncounted)
    errors = lookup_errors(drafters.prompt_lookup)
    assert errors and all("index.steps" in error for error in errors)
    judged = hidden.judge(request, expected, hidden.through_json(probe.observe(request)))[0]
    assert not judged.passed and "its steps: a different value" in judged.reason


def test_the_stand_ins_replay_the_reference_and_refuse_what_it_never_did():
    """A stand-in that answered anything would let a wrong caller pass: asked about rows the reference never
    used, it raises, and the check reports it."""
    errors = verify_errors(lambda q, proposal, rng, depths: sampling._residual(q[0] * 0 + 1, q[0]), trees=False)
    assert errors and any("never" in error for error in errors)


def test_a_tree_verifier_that_imported_accept_and_residual_by_name_still_meets_the_stand_ins(monkeypatch):
    """Step 9 is graded alone: _accept and _residual are replaced by replays of the reference's calls. A learner's
    drafters.py that wrote `from sampling import _accept, _residual` holds names of its own, which the stand-ins
    must replace too, or step 9's grade would run steps 7 and 8's (here: unwritten ones, raising)."""
    from course import hidden, probe

    request = hidden.request(9, 0)
    expected = hidden.expected_answers(request)  # the reference's own answers, before anything is replaced

    def unwritten(*args):
        raise NotImplementedError("Step 7: write sampling._accept")

    for module in (sampling, drafters):
        monkeypatch.setattr(module, "_accept", unwritten, raising=False)
        monkeypatch.setattr(module, "_residual", unwritten, raising=False)
    # the reference's _verify_tree as if it read the names drafters holds: sampling._accept is drafters._accept
    held = types.SimpleNamespace(**{**vars(sampling), "_accept": lambda *a: drafters._accept(*a),
                                    "_residual": lambda *a: drafters._residual(*a)})
    by_name = types.FunctionType(drafters._verify_tree.__code__, {**vars(drafters), "sampling": held})
    monkeypatch.setattr(drafters, "_verify_tree", by_name)

    assert verify_errors(drafters._verify_tree, trees=True) == []
    assert all(check.passed for check in hidden.judge(request, expected, hidden.through_json(probe.observe(request))))
