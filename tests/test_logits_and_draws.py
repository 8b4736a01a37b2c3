"""The per-step float64 work of sampling.py, as a specification: what its shortcuts must not change.

Read model_fn.py (logits_to_probs) and sampling.py (_sample) first: these tests are its specification.

`logits_to_probs` and `_sample` run once per decoding step over a whole row of 50257 values, so they take
shortcuts (no softmax at temperature 0, in-place float64 arrays, top_p sorting only what top_k left, a
two-level inverse-CDF search). These tests hold them to the plain formulas, written out here, and check
that damaged weights (NaN or infinite logits) are refused instead of decoded.
"""

import numpy as np
import pytest

import gpt2
from sampling import _sample
from model_fn import create_model_fn, logits_to_probs
from loaders.random_weights import random_params


def plain_logits_to_probs(logits, temperature, top_k=None, top_p=None):
    """The textbook version, one new array per step: temperature -> top_k -> softmax -> top_p (HF's order)."""
    logits = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        return (np.arange(logits.shape[-1]) == np.argmax(logits, axis=-1)[:, None]).astype(np.float64)
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth_largest = np.sort(logits, axis=-1)[:, -top_k]
        logits = np.where(logits < kth_largest[:, None], -np.inf, logits)
    exp_x = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs = exp_x / exp_x.sum(axis=-1, keepdims=True)
    if top_p is not None and top_p < 1:
        sorted_probs = np.sort(probs, axis=-1)[:, ::-1]
        mass_before = np.cumsum(sorted_probs, axis=-1) - sorted_probs  # mass of the tokens ahead of each
        n_keep = np.sum(mass_before < top_p, axis=-1)
        smallest_kept = sorted_probs[np.arange(len(probs)), n_keep - 1]
        probs = np.where(probs >= smallest_kept[:, None], probs, 0.0)
        probs = probs / probs.sum(axis=-1, keepdims=True)
    return probs


class FixedDraws:
    """Stands in for a np.random.Generator whose random() returns the given numbers in turn."""

    def __init__(self, values):
        self.values = list(values)

    def random(self):
        return self.values.pop(0)


def one_level_inverse_cdf(probs, r):
    """The token a single cumulative sum over the whole row gives for the uniform draw r."""
    cdf = np.cumsum(probs)
    return int(np.searchsorted(cdf, r * cdf[-1], side="right"))


@pytest.mark.parametrize(
    "settings",
    [dict(temperature=0), dict(temperature=1.0), dict(temperature=0.7, top_k=50), dict(temperature=1.3, top_p=0.9),
     dict(temperature=0.8, top_k=40, top_p=0.5), dict(temperature=1.0, top_k=3000, top_p=0.95),
     dict(temperature=0.3, top_p=0.9), dict(temperature=0.3, top_p=0.9999999), dict(temperature=1.0, top_k=1)],
    ids=str,
)
def test_logits_to_probs_equals_the_textbook_formulas_on_gpt2_sized_rows(settings):
    """Rows of 50257 float32 logits (scale 3, as a trained model's): logits_to_probs gives the distributions of
    the formulas written out apart (plain_logits_to_probs) to 1e-15 (float64 rounding), and a one-hot row at
    temperature 0. The settings cut top_p after top_k's tokens, after few tokens (temperature 0.3: the top
    1024 hold 0.9 of the mass), after many (temperature 1.3) and almost nowhere (top_p 0.9999999); top_k = 1 keeps
    the largest alone (a slice [-1:0] of the partition was empty there, and every sampled run with it failed)."""
    logits = 3 * np.random.default_rng(0).standard_normal((3, 50257), dtype=np.float32)  # [3, n_vocab]
    probs = logits_to_probs(logits, **settings)
    assert probs.dtype == np.float64 and probs.shape == (3, 50257)
    np.testing.assert_allclose(probs, plain_logits_to_probs(logits, **settings), rtol=0, atol=1e-15)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("temperature", [0, 1.0])
def test_nan_or_infinite_logits_are_a_value_error_not_a_greedy_token(bad, temperature):
    """np.argmax of a row holding NaN is the NaN's index, so greedy decoding of damaged weights would print
    token after token of garbage; the row is refused instead, with a message that says why."""
    logits = np.zeros((2, 10), dtype=np.float32)
    logits[1, 4] = bad
    with pytest.raises(ValueError, match="the model produced NaN/inf logits.*weights are damaged"):
        logits_to_probs(logits, temperature)


def test_a_model_function_with_a_nan_weight_refuses_to_decode():
    """End to end: one NaN in one weight matrix of a tiny GPT-2 makes every logit NaN, and the model
    function raises the ValueError rather than returning a row the sampler would draw token 0 from."""
    hparams = {"n_vocab": 16, "n_ctx": 8, "n_embd": 8, "n_head": 2, "n_layer": 1}
    params = random_params(hparams, np.random.default_rng(0))
    damaged = params["blocks"][0]["mlp"]["c_fc"]["w"].copy(order="F")  # weights are read-only: a damaged copy
    damaged[3, 5] = np.nan
    params["blocks"][0]["mlp"]["c_fc"]["w"] = damaged
    model = create_model_fn(params, hparams, temperature=0)
    with pytest.raises(ValueError, match="NaN/inf logits"):
        model([1, 2, 3], 1)


def test_sample_draws_the_first_token_whose_cumulative_probability_exceeds_u():
    """For 400 uniform draws on a row with many zero-probability tokens (and long runs of zeros at both ends),
    _sample returns the token the inverse-CDF rule written out here gives, and never a token of probability 0."""
    rng = np.random.default_rng(1)
    probs = rng.random(5000) * (rng.random(5000) < 0.3)  # [5000]: ~70% zeros
    probs[:2100] = 0.0  # whole blocks of zeros at the start
    probs[-50:] = 0.0  # and at the end
    probs /= probs.sum()
    draws = list(rng.random(400)) + [0.0, 1 - 2**-53]  # the extremes of rng.random() too
    tokens = [_sample(probs, FixedDraws([r])) for r in draws]
    assert tokens == [one_level_inverse_cdf(probs, r) for r in draws]
    assert all(probs[token] > 0 for token in tokens)


def test_sample_draws_the_one_token_of_a_one_hot_row_at_either_end():
    """Greedy rows are one-hot; the draw must be that token, also at the first and the last token id."""
    for hot in [0, 1023, 1024, 50256]:
        row = np.zeros(50257)
        row[hot] = 1.0
        assert [_sample(row, FixedDraws([r])) for r in (0.0, 0.5, 1 - 2**-53)] == [hot] * 3
