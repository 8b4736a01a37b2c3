"""The forward-pass steps of EXERCISES.md graded one at a time: steps 1-4 and 12, each on its own functions only.

Read EXERCISES.md's steps 1-4 and 12 and tests/step_fixtures.py first (the saved calls of the reference, and
the stand-ins made of them).

Each check calls the step's own function on the reference's saved arguments and compares with the saved
result; where that function calls another step's (mha calls attention, gpt2 calls layer_norm, mha and a mask),
the check swaps in a stand-in that replays the reference (tests/step_fixtures.py). So a learner's step 3 is
graded whether or not their step 2 is written yet. Each check is a function returning the list of what is
wrong (empty: right), so that tests/test_step_checks_teeth.py can show it fails for a wrong version.
`python -m pytest -m step2` (or `python classroom.py grade 2`) runs one step's checks.
"""

import numpy as np
import pytest

import gpt2
from step_fixtures import (attention_stand_in, layer_norm_stand_in, load, mask_stand_ins, mha_stand_in, same,
                           saved_cache)

FORWARD = load()["forward"]
PARAMS, N_HEAD = FORWARD["params"], FORWARD["hparams"]["n_head"]


def compare(name, got, expected, atol=1e-5):
    """[] if got has expected's shape, float32 dtype and values (to atol), else one line saying what differs."""
    got = np.asarray(got)
    if got.shape != expected.shape:
        return [f"{name}: shape {got.shape}, expected {expected.shape}"]
    if got.dtype != np.float32:
        return [f"{name}: dtype {got.dtype}, expected float32 (a float64 scalar slipped in?)"]
    if not np.allclose(got, expected, rtol=1e-4, atol=atol):
        return [f"{name}: largest difference {np.abs(got - expected).max():.3g} from the reference"]
    return []


# --- step 1: layer_norm ---------------------------------------------------------------------------------------


def layer_norm_errors(layer_norm):
    row, expected = np.array([[1, 2, 3, 6]], np.float32), np.array([[-1.1381, -0.0690, 1, 4.2071]], np.float32)
    errors = compare("the worked example", layer_norm(row, np.float32(2), np.float32(1)), expected, atol=1e-4)
    for i, call in enumerate(FORWARD["layer_norm"]):
        got = layer_norm(call["x"], call["g"], call["b"])
        errors += compare(f"saved call {i} (x {call['x'].shape})", got, call["out"])
    return errors


@pytest.mark.step1
def test_layer_norm_gives_the_worked_example_and_the_references_output_on_every_saved_call():
    """The worked example of EXERCISES.md (row [1, 2, 3, 6], g = 2, b = 1) and the reference's layer norms of a
    tiny GPT-2's passes, one of them on rows of variance ~1e-6, where leaving out eps changes everything."""
    errors = layer_norm_errors(gpt2.layer_norm)
    assert errors == [], "\n".join(errors[:5])


# --- step 2: attention and causal_mask ------------------------------------------------------------------------


def attention_errors(attention):
    q, k = np.array([[[1, 0]]], np.float32), np.array([[[1, 0], [0, 1]]], np.float32)
    v, mask = np.array([[[1, 2], [3, 4]]], np.float32), np.zeros((1, 2), np.float32)
    errors = compare("the worked example", attention(q, k, v, mask), np.array([[[1.6605, 2.6605]]], np.float32), 1e-4)
    near_200 = np.array([[[200, 0]]], np.float32), np.full((1, 2, 2), [np.sqrt(2), 0], np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # a softmax that overflows says so in the check, not here
        got = attention(*near_200, v, mask)
    errors += compare("scores near 200", got, np.array([[[2, 3]]], np.float32), 1e-4)
    for i, call in enumerate(FORWARD["attention"]):
        errors += compare(f"saved call {i} (q {call['q'].shape}, k {call['k'].shape})",
                          attention(call["q"], call["k"], call["v"], call["mask"]), call["out"])
    return errors


def causal_mask_errors(causal_mask):
    errors = compare("causal_mask(2, 1), the worked example", causal_mask(2, 1),
                     np.array([[0, 0, -1e10], [0, 0, 0]], np.float32))
    for call in FORWARD["causal_mask"]:
        mask = causal_mask(call["n_seq"], call["n_past"])
        errors += compare(f"causal_mask({call['n_seq']}, {call['n_past']})", mask, call["out"])
    return errors


@pytest.mark.step2
def test_attention_gives_the_worked_example_and_the_references_output_on_every_saved_call():
    """The worked example (one head, scores [0.7071, 0], output [1.6605, 2.6605]); the same keys and values with
    both scores 200 (q = [200, 0], each key [sqrt 2, 0]): weights [0.5, 0.5], output [2, 3], where a softmax
    that does not subtract the max gets exp(200) = inf in float32, and NaN; and every attention of the tiny
    model's passes, chunked ones included (n_past > 0), in float32."""
    errors = attention_errors(gpt2.attention)
    assert errors == [], "\n".join(errors[:5])


@pytest.mark.step2
def test_the_causal_mask_lets_position_n_past_plus_i_see_keys_up_to_itself_for_every_n_past():
    """causal_mask(2, 1) = [[0, 0, -1e10], [0, 0, 0]], and the reference's masks for n_seq 1..6 and n_past
    0..6, float32: a mask that ignores n_past is right only for n_past = 0."""
    errors = causal_mask_errors(gpt2.causal_mask)
    assert errors == [], "\n".join(errors[:5])


# --- step 3: mha ----------------------------------------------------------------------------------------------


def mha_errors(mha, monkeypatch):
    """Each saved mha call replayed: the same output, and the same keys and values written into the cache at
    positions n_past .. n_past + n_seq - 1 (the positions before them untouched)."""
    monkeypatch.setattr(gpt2, "attention", attention_stand_in(FORWARD["attention"]))
    errors = []
    for i, call in enumerate(FORWARD["mha"]):
        n_past, n_seq = call["n_past"], len(call["x"])
        kv = np.zeros((2, N_HEAD, call["capacity"], call["kv_before"].shape[-1]), np.float32)
        kv[:, :, :n_past] = call["kv_before"]
        attn = PARAMS["blocks"][call["block"]]["attn"]
        try:
            out = mha(call["x"], **attn, n_head=N_HEAD, kv=kv, n_past=n_past, mask=call["mask"])
        except AssertionError as error:  # a stand-in did not recognise its arguments
            errors.append(f"saved call {i} (n_past {n_past}): {error}")
            continue
        errors += compare(f"saved call {i} (n_past {n_past}), the output", out, call["out"])
        errors += compare(f"saved call {i} (n_past {n_past}), the cache", kv[:, :, : n_past + n_seq], call["kv_after"])
    return errors


@pytest.mark.step3
def test_mha_writes_the_new_keys_and_values_after_the_cached_ones_and_gives_the_references_output(monkeypatch):
    """Every mha call of the tiny model's passes (empty caches, chunks after 3 cached positions, a pass after a
    rollback, a tree), with attention replayed from the reference's saved calls."""
    errors = mha_errors(gpt2.mha, monkeypatch)
    assert errors == [], "\n".join(errors[:5])


# --- steps 4 and 12: gpt2 -------------------------------------------------------------------------------------


def stand_ins_for_gpt2(monkeypatch, *, masks):
    """layer_norm, mha and causal_mask replayed (steps 1-3; the chain before a tree needs step 2's mask), and the
    tree mask too for step 4 (it is step 12's)."""
    monkeypatch.setattr(gpt2, "layer_norm", layer_norm_stand_in(FORWARD["layer_norm"]))
    monkeypatch.setattr(gpt2, "mha", mha_stand_in(FORWARD["mha"]))
    causal_mask, tree_mask = mask_stand_ins(FORWARD)
    monkeypatch.setattr(gpt2, "causal_mask", causal_mask)
    if masks:
        monkeypatch.setattr(gpt2, "tree_mask", tree_mask)


def passes_errors(forward, trees):
    """The saved passes (the plain ones, or the tree one) run again: the same logits, and with a cache the
    same present (its keys and values, its length, its tree)."""
    errors = []
    for run in FORWARD["passes"]:
        if ("tree" in run["name"]) != trees:
            continue
        past = saved_cache(gpt2.Cache, run["past_kv"], run["past_parents"], FORWARD["hparams"]["n_ctx"])
        try:
            result = forward(run["inputs"], **PARAMS, n_head=N_HEAD, past=past, **run["kwargs"])
        except AssertionError as error:
            errors.append(f"{run['name']}: {error}")
            continue
        logits, present = result if past is not None else (result, None)
        errors += compare(f"{run['name']}: the logits", logits, run["logits"])
        if past is not None and not (isinstance(present, gpt2.Cache) and same(present.kv, run["present_kv"])
                                     and list(present.parents) == run["present_parents"]):
            errors.append(f"{run['name']}: the returned cache is not the reference's (its length, keys and values, "
                          f"or tree)")
    return errors


@pytest.mark.step4
def test_gpt2_gives_the_references_logits_and_cache_for_full_chunked_cut_back_and_n_logits_passes(monkeypatch):
    """A full pass, a pass in two chunks (positions 3.. after 3 cached), two tokens after a cache cut back to 4
    positions with n_logits=1: the same logits and present as the reference, with layer_norm, mha and the masks
    replayed (so a wrong wpe slice or a missing ln_f shows here, whatever steps 1-3 hold)."""
    stand_ins_for_gpt2(monkeypatch, masks=True)
    errors = passes_errors(gpt2.gpt2, trees=False)
    assert errors == [], "\n".join(errors[:5])


@pytest.mark.step4
def test_gpt2_still_checks_its_inputs(monkeypatch):
    """The calls to _check_inputs stay: no tokens, or more than n_ctx positions, is a ValueError, raised before
    anything else runs (steps 1-3 played back, so a missing call is said as such, not as another step's error)."""
    stand_ins_for_gpt2(monkeypatch, masks=True)
    for inputs, expected in (([], "at least one"), ([1] * (FORWARD["hparams"]["n_ctx"] + 1), "n_ctx")):
        try:
            gpt2.gpt2(inputs, **PARAMS, n_head=N_HEAD)
        except ValueError as error:
            assert expected in str(error), f"gpt2 of {len(inputs)} tokens: {error}"
            continue
        except NotImplementedError:  # gpt2 not written yet: its own message says so
            raise
        except Exception as error:  # noqa: BLE001 (whatever a gpt2 without the check runs into next)
            pytest.fail(f"gpt2 of {len(inputs)} tokens raised {type(error).__name__}, not _check_inputs' ValueError: "
                        f"keep the call to _check_inputs first")
        pytest.fail(f"gpt2 of {len(inputs)} tokens raised no ValueError: keep the call to _check_inputs first")


def tree_mask_errors(tree_mask):
    errors = []
    for i, call in enumerate(FORWARD["tree_mask"]):
        errors += compare(f"saved call {i} (n_prefix {call['n_prefix']})",
                          tree_mask(call["ancestors"], call["n_prefix"]), call["out"])
    return errors


@pytest.mark.step12
def test_tree_mask_lets_each_node_see_the_prefix_its_ancestors_and_itself():
    errors = tree_mask_errors(gpt2.tree_mask)
    assert errors == [], "\n".join(errors[:5])


@pytest.mark.step12
def test_gpt2_scores_a_token_tree_after_a_cached_prefix_as_the_reference_does(monkeypatch):
    """Inputs [1, 5, 9, 2] with parents [-1, -1, 0, 0] after 3 cached tokens: the logits of every path and the
    cache with the tree, with layer_norm, mha and the causal mask replayed."""
    stand_ins_for_gpt2(monkeypatch, masks=False)
    errors = passes_errors(gpt2.gpt2, trees=True)
    assert errors == [], "\n".join(errors[:5])
