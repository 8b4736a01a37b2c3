"""sampling.py as an executable specification: the model function, greedy exactness, cost, stats, errors.

Read sampling.py first: these tests are its specification.

The statistical proof that speculative sampling has the target's distribution is in
test_speculative_exactness.py; here the models are tiny random GPT-2s (loaders.random_weights.random_params) and, for the
error cases, hand-built tables.
"""

import ast
import inspect
import re
import textwrap

import numpy as np
import pytest

import drafters
import gpt2
import sampling
from records import AutoregressiveStats, SpeculativeStats
from sampling import autoregressive_sampling, speculative_sampling
from model_fn import create_model_fn, logits_to_probs
from loaders.random_weights import random_params

TARGET_HPARAMS = {"n_vocab": 64, "n_ctx": 64, "n_embd": 32, "n_head": 4, "n_layer": 2}
DRAFT_HPARAMS = {"n_vocab": 64, "n_ctx": 64, "n_embd": 16, "n_head": 2, "n_layer": 1}  # same vocabulary
PROMPT = [1, 2, 3]


def tiny_gpt2(hparams, seed):
    """Random GPT-2 weights whose greedy output wanders over many tokens.

    With random_params' small position embeddings, greedy decoding of a random model repeats one token
    forever (the tied embedding makes the last token the best guess), and "speculative equals
    autoregressive" would be checked on a single repeated token. Position embeddings of scale 1 make the
    greedy output change from position to position.
    """
    rng = np.random.default_rng(seed)
    params = random_params(hparams, rng, std=0.3)
    params["wpe"] = rng.standard_normal(params["wpe"].shape, dtype=np.float32)  # [n_ctx, n_embd]
    return params


def noisy_copy(params, seed, scale=0.05):
    """The same weights plus small noise: a draft that agrees with the target often, but not always."""
    rng = np.random.default_rng(seed)
    if isinstance(params, dict):
        return {name: noisy_copy(value, rng, scale) for name, value in params.items()}
    if isinstance(params, list):
        return [noisy_copy(value, rng, scale) for value in params]
    return params + scale * rng.standard_normal(params.shape, dtype=np.float32)


TARGET_PARAMS = tiny_gpt2(TARGET_HPARAMS, seed=1)
DRAFT_PARAMS = tiny_gpt2(DRAFT_HPARAMS, seed=2)  # another seed and another shape
NOISY_DRAFT_PARAMS = noisy_copy(TARGET_PARAMS, seed=3)


def target_fn(**kwargs):
    return create_model_fn(TARGET_PARAMS, TARGET_HPARAMS, **kwargs)


def table_model(rows, n_vocab=None):
    """A model function that ignores the context: every row is `rows` (a [n_vocab] list)."""

    def model(x, n=1):
        return np.tile(np.asarray(rows, dtype=np.float64), (n, 1))  # [n, n_vocab]

    if n_vocab is not None:
        model.n_vocab = n_vocab
    return model


# --- logits -> probabilities: temperature, top-k, top-p ---------------------------------------------------


def test_temperature_zero_is_an_exact_one_hot_at_the_first_argmax():
    """Greedy decoding: a row of exact 0s and one exact 1, at the first of tied maxima (like np.argmax)."""
    probs = logits_to_probs(np.array([[0.5, 3.0, 3.0, -1.0], [7.0, 1.0, 2.0, 7.0]], dtype=np.float32), 0)
    assert probs.tolist() == [[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]


def test_temperature_zero_works_at_gpt2_vocabulary_size():
    """50 257 logits per row, all equal: one-hot at index 0 (cheaply: no [n_vocab, n_vocab] identity)."""
    probs = logits_to_probs(np.zeros((3, 50257), dtype=np.float32), 0)
    assert probs.shape == (3, 50257) and (probs[:, 0] == 1).all() and probs.sum() == 3


@pytest.mark.step6
def test_top_k_and_top_p_give_the_hand_computed_distributions():
    """logits [2, 1, 0, -1] at temperature 0.5 are [4, 2, 0, -2]; softmax: e^4, e^2, 1, e^-2 over their sum
    63.1217 = [0.864955, 0.117059, 0.015842, 0.002144].
    - top_k=2: softmax of [4, 2] = [1/(1+e^-2), e^-2/(1+e^-2)] = [0.880797, 0.119203, 0, 0].
    - top_k=2, top_p=0.8: the first token alone has 0.880797 >= 0.8: [1, 0, 0, 0].
    - top_p=0.95 alone: 0.864955 < 0.95, 0.864955 + 0.117059 = 0.982014 >= 0.95: the top two,
      renormalised: [0.880797, 0.119203, 0, 0].
    - top_p=0.99: the top three (0.982014 < 0.99): [e^4, e^2, 1] / 62.9867 = [0.866813, 0.117310, 0.015876, 0].
    - temperature 1, top_p=0.8: softmax [0.643914, 0.236883, 0.087144, 0.032059]; 0.643914 < 0.8, so the top
      two: [e^2, e^1] / (e^2 + e) = [0.731059, 0.268941, 0, 0].
    """
    logits = np.array([[2.0, 1.0, 0.0, -1.0]], dtype=np.float32)
    cases = [
        (dict(temperature=0.5), [0.864955, 0.117059, 0.015842, 0.002144]),
        (dict(temperature=0.5, top_k=2), [0.880797, 0.119203, 0, 0]),
        (dict(temperature=0.5, top_k=2, top_p=0.8), [1, 0, 0, 0]),
        (dict(temperature=0.5, top_p=0.95), [0.880797, 0.119203, 0, 0]),
        (dict(temperature=0.5, top_p=0.99), [0.866813, 0.117310, 0.015876, 0]),
        (dict(temperature=1.0, top_p=0.8), [0.731059, 0.268941, 0, 0]),
    ]
    for kwargs, expected in cases:
        probs = logits_to_probs(logits, **kwargs)
        assert probs.dtype == np.float64
        np.testing.assert_allclose(probs[0], expected, atol=1e-6, err_msg=str(kwargs))


@pytest.mark.step6
def test_top_p_keeps_in_every_row_its_own_smallest_set():
    """Two rows, the worked example's logits and the same reversed: at temperature 0.5 with top_p=0.95 each
    keeps its own top two ([0.880797, 0.119203, 0, 0], and that reversed). A cumulative sum over the whole
    array, not along each row, carries row 0's total into row 1, which then keeps only its top token."""
    logits = np.array([[2.0, 1.0, 0.0, -1.0], [-1.0, 0.0, 1.0, 2.0]], dtype=np.float32)
    probs = logits_to_probs(logits, temperature=0.5, top_p=0.95)
    np.testing.assert_allclose(probs, [[0.880797, 0.119203, 0, 0], [0, 0, 0.119203, 0.880797]], atol=1e-6)


@pytest.mark.step6
def test_top_p_keeps_the_smallest_set_reaching_top_p_exactly_at_the_boundary():
    """Logits [0, -ln 2, -2 ln 2, -2 ln 2] give exactly [0.5, 0.25, 0.125, 0.125]. With top_p=0.75 the
    first two already sum to 0.75 >= top_p, so the others are dropped (HF's rule): [2/3, 1/3, 0, 0].
    With top_p=0.7 the same two are needed; with top_p=0.76 the third is needed, and the fourth, tied
    with it, is kept too: all four, the input unchanged."""
    ln2 = np.log(2)
    logits = np.array([[0.0, -ln2, -2 * ln2, -2 * ln2]])
    np.testing.assert_allclose(logits_to_probs(logits, 1.0, top_p=0.75)[0], [2 / 3, 1 / 3, 0, 0], atol=1e-12)
    np.testing.assert_allclose(logits_to_probs(logits, 1.0, top_p=0.7)[0], [2 / 3, 1 / 3, 0, 0], atol=1e-12)
    np.testing.assert_allclose(logits_to_probs(logits, 1.0, top_p=0.76)[0], [0.5, 0.25, 0.125, 0.125], atol=1e-12)


def test_top_k_keeps_ties_with_the_kth_largest_logit():
    """HF's rule: keep every logit >= the k-th largest. [3, 1, 1, 0] with top_k=2 keeps 3, 1, 1."""
    probs = logits_to_probs(np.array([[3.0, 1.0, 1.0, 0.0]], dtype=np.float32), 1.0, top_k=2)
    assert (probs[0] > 0).tolist() == [True, True, True, False]


def test_the_model_function_applies_temperature_top_k_and_top_p_to_every_row():
    """Its rows are logits_to_probs of gpt2's logits with the same settings; top_k=5 leaves 5 tokens."""
    logits = gpt2.gpt2(PROMPT + [4, 5], **TARGET_PARAMS, n_head=4)  # [5, n_vocab]
    for kwargs in [dict(temperature=0.7, top_k=5), dict(temperature=1.3, top_p=0.5), dict(temperature=0)]:
        probs = target_fn(**kwargs)(PROMPT + [4, 5], n=3)
        np.testing.assert_allclose(probs, logits_to_probs(logits[-3:], **kwargs), atol=1e-6)
        if "top_k" in kwargs:
            assert ((probs > 0).sum(axis=-1) == 5).all()


# --- the model function: rows, KV cache, cost counters -----------------------------------------------------


def test_row_i_is_the_distribution_after_the_prefix_of_length_len_x_minus_n_plus_1_plus_i():
    """model(x, n)[i] == model(x[:len(x) - n + 1 + i], 1)[0], with and without the KV cache."""
    x = PROMPT + [10, 20, 30, 40]
    for kv_cache in (True, False):
        rows = target_fn(kv_cache=kv_cache)(x, n=4)
        for i in range(4):
            alone = target_fn(kv_cache=False)(x[: len(x) - 4 + 1 + i], 1)[0]
            np.testing.assert_allclose(rows[i], alone, atol=1e-6)


def test_the_kv_cache_gives_the_full_recompute_probabilities_and_computes_only_new_positions():
    """Growing x one token at a time: the cached model computes 1 position per call after the prompt,
    the picoGPT-style model len(x) positions per call, and the probabilities agree."""
    cached, full = target_fn(), target_fn(kv_cache=False)
    x = list(PROMPT)
    for token in [7, 8, 9, 10]:
        np.testing.assert_allclose(cached(x), full(x), atol=1e-6)
        x.append(token)
    assert (cached.stats.calls, cached.stats.positions, cached.stats.rows) == (4, 3 + 1 + 1 + 1, 4)
    assert (full.stats.calls, full.stats.positions, full.stats.rows) == (4, 3 + 4 + 5 + 6, 4)


def test_the_cache_rolls_back_to_the_shared_prefix_and_recomputes_only_the_rest():
    """After x = 8 tokens, a call on x[:5] + [50, 51] computes 2 positions (the cache is cut to 5 tokens),
    a call asking for n=3 rows of the same list recomputes the last 3, and the results are the full
    recompute's."""
    model, full = target_fn(), target_fn(kv_cache=False)
    x = PROMPT + [10, 11, 12, 13, 14]
    model(x)
    assert model.stats.positions == 8
    changed = x[:5] + [50, 51]
    np.testing.assert_allclose(model(changed), full(changed), atol=1e-6)
    assert model.stats.positions == 8 + 2
    np.testing.assert_allclose(model(changed, n=3), full(changed, n=3), atol=1e-6)
    assert model.stats.positions == 8 + 2 + 3
    assert model.n_vocab == 64 and model.n_ctx == 64


# --- temperature 0: speculative output is the greedy output, token for token ---------------------------------


@pytest.mark.parametrize("draft_name", ["independent", "noisy_copy", "target"])
@pytest.mark.parametrize("K", [1, 3, 5])
def test_at_temperature_zero_speculative_output_equals_autoregressive_output(draft_name, K):
    """Greedy decoding of the target, whatever the draft: an independent random GPT-2 (another seed and
    shape, almost every draft rejected), a noisy copy of the target (some kept, some rejected), and the
    target's own weights (every draft kept: acceptance rate 1)."""
    draft_params, draft_hparams = {
        "independent": (DRAFT_PARAMS, DRAFT_HPARAMS),
        "noisy_copy": (NOISY_DRAFT_PARAMS, TARGET_HPARAMS),
        "target": (TARGET_PARAMS, TARGET_HPARAMS),
    }[draft_name]
    draft = create_model_fn(draft_params, draft_hparams, temperature=0)
    stats = SpeculativeStats()
    expected = autoregressive_sampling(PROMPT, target_fn(temperature=0), 40, np.random.default_rng(0))
    got = speculative_sampling(PROMPT, draft, target_fn(temperature=0), 40, K, np.random.default_rng(1), stats=stats)
    assert got == expected
    assert len(set(expected[len(PROMPT) :])) > 10  # the greedy output really wanders
    if draft_name == "target":
        assert stats.acceptance_rate == 1.0 and stats.checked == stats.drafted
    if draft_name == "noisy_copy":
        assert 0 < stats.acceptance_rate < 1


# --- cost: what each model computes in a round -----------------------------------------------------------


def logged(model, log, name):
    """Wrap a model function to record (name, len(x), n, positions computed) for every call."""

    def wrapper(x, n=1):
        before = model.stats.positions
        probs = model(x, n)
        log.append((name, len(x), n, model.stats.positions - before))
        return probs

    wrapper.n_vocab, wrapper.n_ctx = model.n_vocab, model.n_ctx
    return wrapper


def test_each_round_the_target_computes_k_plus_1_positions_and_the_draft_one_per_guess():
    """Call by call: the target's first pass computes the prompt and the K guesses; every later pass
    exactly its K + 1 rows (the last token written, not yet cached, and the K guesses). The draft computes
    the prompt once, then 1 position per guess, except 2 at the start of a round after an all-accepted
    round (the K-th guess, never fed to the draft, and the free extra token). Totals agree with
    model.stats, and are far below the picoGPT-style full recompute of the same calls."""
    K, N = 3, 40
    target = create_model_fn(TARGET_PARAMS, TARGET_HPARAMS, temperature=1.0)
    draft = create_model_fn(NOISY_DRAFT_PARAMS, TARGET_HPARAMS, temperature=1.0)
    log, stats = [], SpeculativeStats()
    out = speculative_sampling(
        PROMPT, logged(draft, log, "draft"), logged(target, log, "target"), N, K, np.random.default_rng(4), stats=stats
    )
    assert len(out) == len(PROMPT) + N

    all_accepted_rounds = 0
    previous_target_len = None  # len(x + drafts) of the previous round's target call
    first_draft_of_round = True
    for name, len_x, n, positions in log:
        if name == "target":
            first_pass = previous_target_len is None
            assert positions == (len_x if first_pass else n) and n <= K + 1  # (the last round may draft fewer)
            previous_target_len, first_draft_of_round = len_x, True
        else:
            if previous_target_len is None and first_draft_of_round:
                assert positions == len(PROMPT)
            elif first_draft_of_round and len_x == previous_target_len + 1:  # all K guesses were kept
                assert positions == 2
                all_accepted_rounds += 1
            else:
                assert positions == 1
            first_draft_of_round = False
    assert all_accepted_rounds > 0 and stats.checked > stats.accepted  # both kinds of round happened

    assert target.stats.calls == stats.target_passes == stats.rounds
    assert target.stats.positions == len(PROMPT) - 1 + stats.drafted + stats.rounds
    assert target.stats.rows == stats.drafted + stats.rounds
    assert draft.stats.calls == stats.draft_passes == stats.drafted
    assert draft.stats.positions == len(PROMPT) - 1 + stats.draft_passes + all_accepted_rounds
    full_recompute = sum(len_x for name, len_x, n, positions in log if name == "target")
    assert target.stats.positions < full_recompute / 5


def test_autoregressive_sampling_makes_one_pass_of_one_position_per_token():
    model, stats = target_fn(), AutoregressiveStats()
    autoregressive_sampling(PROMPT, model, 20, np.random.default_rng(0), stats=stats)
    assert (model.stats.calls, model.stats.positions, model.stats.rows) == (20, len(PROMPT) + 19, 20)
    assert (stats.tokens, stats.target_passes, stats.tokens_per_target_pass) == (20, 20, 1.0)


# --- output length, seeds, stop token, stats --------------------------------------------------------------


@pytest.mark.parametrize("N", [0, 1, 2, 5, 6, 17])
def test_both_samplers_return_the_prompt_and_exactly_n_new_ints(N):
    """Never more than N: the last round drafts only what fits (K = 4, so N = 5 is one full round)."""
    draft = create_model_fn(NOISY_DRAFT_PARAMS, TARGET_HPARAMS)
    for out in [
        autoregressive_sampling(PROMPT, target_fn(), N, np.random.default_rng(0)),
        speculative_sampling(PROMPT, draft, target_fn(), N, 4, np.random.default_rng(0)),
    ]:
        assert len(out) == len(PROMPT) + N and out[: len(PROMPT)] == PROMPT
        assert all(type(token) is int for token in out)


def test_the_same_seed_gives_the_same_tokens_and_another_seed_other_tokens():
    def run(sampler, seed):
        if sampler == "autoregressive":
            return autoregressive_sampling(PROMPT, target_fn(), 30, np.random.default_rng(seed))
        draft = create_model_fn(DRAFT_PARAMS, DRAFT_HPARAMS)
        return speculative_sampling(PROMPT, draft, target_fn(), 30, 3, np.random.default_rng(seed))

    for sampler in ("autoregressive", "speculative"):
        assert run(sampler, 5) == run(sampler, 5)
        assert run(sampler, 5) != run(sampler, 6)


def test_a_stop_token_ends_both_samplers_right_after_it_identically():
    """At temperature 0 with stop token = the 9th greedy token, both outputs are the greedy output up to
    and including its first occurrence, whatever K (the stop can fall inside a run of accepted drafts)."""
    greedy = autoregressive_sampling(PROMPT, target_fn(temperature=0), 30, np.random.default_rng(0))
    stop = greedy[len(PROMPT) + 8]
    expected = greedy[: greedy.index(stop, len(PROMPT)) + 1]
    assert autoregressive_sampling(PROMPT, target_fn(temperature=0), 30, np.random.default_rng(0), stop) == expected
    for K in (1, 2, 4, 8):
        draft = create_model_fn(NOISY_DRAFT_PARAMS, TARGET_HPARAMS, temperature=0)
        stats = SpeculativeStats()
        rng = np.random.default_rng(0)
        got = speculative_sampling(PROMPT, draft, target_fn(temperature=0), 30, K, rng, stop_token=stop, stats=stats)
        assert got == expected and stats.tokens == len(expected) - len(PROMPT)


def test_speculative_stats_add_up():
    """tokens = N; drafted = draft passes; checked <= drafted; per-position lists have K entries whose sums
    are the totals; a second run adds to the same object."""
    K, stats = 4, SpeculativeStats()
    for seed in (0, 1):
        draft = create_model_fn(NOISY_DRAFT_PARAMS, TARGET_HPARAMS)
        speculative_sampling(PROMPT, draft, target_fn(), 30, K, np.random.default_rng(seed), stats=stats)
    assert stats.tokens == 60
    assert stats.drafted == stats.draft_passes and stats.accepted <= stats.checked <= stats.drafted
    assert [len(stats.drafted_at), len(stats.checked_at), len(stats.accepted_at)] == [K, K, K]
    assert (sum(stats.drafted_at), sum(stats.checked_at), sum(stats.accepted_at)) == (
        stats.drafted,
        stats.checked,
        stats.accepted,
    )
    assert stats.acceptance_rate == stats.accepted / stats.checked
    assert stats.tokens_per_target_pass == stats.tokens / stats.target_passes > 1
    assert "acceptance rate" in stats.summary() and "(by draft position: " in stats.summary()


def test_a_summary_of_rounds_that_drafted_nothing_says_so_instead_of_an_empty_list():
    """K=auto can keep k = 0 for a whole run: the summary once read "(by draft position: )"."""
    assert SpeculativeStats().summary().endswith("acceptance rate alpha = 0.00 (no guess was drafted)")


# --- bad input: one clear ValueError each ----------------------------------------------------------------


def test_a_prompt_plus_n_beyond_the_context_is_a_value_error():
    draft = create_model_fn(DRAFT_PARAMS, DRAFT_HPARAMS)
    with pytest.raises(ValueError, match="n_ctx=64"):
        autoregressive_sampling(PROMPT, target_fn(), 62, np.random.default_rng(0))
    with pytest.raises(ValueError, match="n_ctx=64"):
        speculative_sampling(PROMPT, draft, target_fn(), 62, 4, np.random.default_rng(0))
    assert len(autoregressive_sampling(PROMPT, target_fn(), 61, np.random.default_rng(0))) == 64  # just fits
    assert len(speculative_sampling(PROMPT, draft, target_fn(), 61, 4, np.random.default_rng(0))) == 64


@pytest.mark.parametrize(
    "x, N, K, message",
    [([], 5, 2, "prompt x is empty"), (PROMPT, -1, 2, "N, the number"), (PROMPT, 5, 0, "lookahead K")],
)
def test_an_empty_prompt_a_negative_n_or_k_below_1_is_a_value_error(x, N, K, message):
    model = table_model([0.5, 0.5])
    with pytest.raises(ValueError, match=message):
        speculative_sampling(x, model, model, N, K, np.random.default_rng(0))
    if K >= 1:
        with pytest.raises(ValueError, match=message):
            autoregressive_sampling(x, model, N, np.random.default_rng(0))


def test_draft_and_target_with_different_vocabularies_are_a_value_error():
    """Said by the n_vocab attributes up front, or found from the widths of the returned rows."""
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="different vocabularies"):
        speculative_sampling([0, 1], table_model([1.0, 0, 0], 3), table_model([1.0, 0], 2), 5, 2, rng)
    with pytest.raises(ValueError, match="do not share a vocabulary"):
        speculative_sampling([0, 1], table_model([1.0, 0, 0]), table_model([1.0, 0]), 5, 2, rng)


@pytest.mark.parametrize(
    "rows, message",
    [([0.5, 0.7, -0.2], "negative or NaN"), ([0.5, np.nan, 0.5], "negative or NaN"), ([0.5, 0.3, 0.1], "sum to 1")],
)
def test_probabilities_that_are_not_a_distribution_are_a_value_error(rows, message):
    """Negative, NaN, or rows summing to 0.9 (off by more than 1e-3), from either model."""
    good = table_model([0.2, 0.3, 0.5])
    with pytest.raises(ValueError, match=message):
        autoregressive_sampling(PROMPT, table_model(rows), 3, np.random.default_rng(0))
    with pytest.raises(ValueError, match="the draft model returned.*" + message):
        speculative_sampling(PROMPT, table_model(rows), good, 3, 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="the target model returned.*" + message):
        speculative_sampling(PROMPT, good, table_model(rows), 3, 2, np.random.default_rng(0))


def test_rows_off_by_less_than_1e_3_are_accepted():
    model = table_model([0.2, 0.3, 0.4995])
    assert len(autoregressive_sampling(PROMPT, model, 3, np.random.default_rng(0))) == 6


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(temperature=-1), "temperature"),
        (dict(top_k=0), "top_k"),
        (dict(top_p=0), "top_p"),
        (dict(top_p=1.5), "top_p"),
    ],
)
def test_bad_sampling_settings_are_a_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        target_fn(**kwargs)


def test_asking_the_model_function_for_more_rows_than_tokens_is_a_value_error():
    with pytest.raises(ValueError, match="1 <= n <= len"):
        target_fn()(PROMPT, n=4)


def step_comments(*functions):
    """The numbers of the `# Step N` comments in the source of the functions, in order of appearance."""
    text = "\n".join(inspect.getsource(function) for function in functions)
    return [int(number) for number in re.findall(r"# Step (\d)", text)]


def code_of(function):
    """The code of a function without its docstring and comments (ast.unparse keeps no comment)."""
    node = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]
    node.body = node.body[1:] if ast.get_docstring(node) else node.body
    return ast.unparse(node)


def test_the_chain_round_names_chen_et_als_steps_1_to_4_in_order_as_jaymodys_sampler_does():
    """jaymody/speculative-sampling's `speculative_sampling` tags its round `# Step 1` .. `# Step 4`, in order:
    draft K tokens, one target pass, accept or resample, the bonus token. The round here (speculative_stream,
    then _verify_chain for Steps 3 and 4) names the same steps in the same order, each once, and the round's
    code meets no tree, K policy or lookup: those are the extensions' (their names do not appear in it)."""
    assert step_comments(sampling.speculative_stream, sampling._verify_chain) == [1, 2, 3, 4]
    code = code_of(sampling.speculative_stream) + code_of(sampling._verify_chain)
    assert re.findall(r"\b(parents|tree\w*|auto|hf|match_length)\b", code) == []


def test_the_step_check_sees_steps_out_of_order():
    """Its teeth: a function whose comments say Step 2 before Step 1 reads [2, 1]; the tree's round (an extension)
    is caught naming trees."""
    def swapped():
        pass  # Step 2: the target
        pass  # Step 1: the draft
    assert step_comments(swapped) == [2, 1]
    assert re.findall(r"\b(parents|tree\w*|auto|hf|match_length)\b", code_of(drafters.tree_stream)) != []
