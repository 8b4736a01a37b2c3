"""A model function from GPT-2 weights: the one interface the samplers see a model through.

Read gpt2.py first; sampling.py comes next and uses what this file builds.

The model-function contract: `model(x, n=1) -> probs [n, n_vocab]`, the next-token distributions after each of
the last n prefixes of the token list x. Row i follows x[:len(x) - n + 1 + i], so row n - 1 is "what comes
after all of x". Example: x = [5, 7, 9], n = 2: row 0 is the distribution after [5, 7], row 1 after [5, 7, 9].
A model function may carry `n_vocab` and `n_ctx` (its longest input); the samplers check prompts against them.
The tests build other model functions from hand-written Markov tables.

Two things live here: `logits_to_probs`, the shaping of logits into the distribution we sample from
(temperature, top-k, top-p), and `create_model_fn`, which keeps the KV cache in a closure so that a sampler
never has to think about it. Token trees (`model(x, n, parents)`) are tree_model_fn.py's, an extension.
"""

from dataclasses import dataclass

import numpy as np

from gpt2 import empty_cache, gpt2, rollback
from speed import plug
from tree_model_fn import check_tree_call, tree_call


def softmax64(x):
    """Softmax over the last axis in float64, so that each row sums to 1 to ~1e-16 (float32: ~1e-7)."""
    exp_x = np.exp(x - np.max(x, axis=-1, keepdims=True))  # [n, n_vocab]; a logit of -inf gives exactly 0
    return exp_x / np.sum(exp_x, axis=-1, keepdims=True)  # [n, n_vocab]


def logits_to_probs(logits, temperature=1.0, top_k=None, top_p=None):
    """Float32 logits [n, n_vocab] -> float64 sampling distributions [n, n_vocab], in Hugging Face's order.

    temperature 0 is greedy: a one-hot row at the argmax (ties: the first). Else divide by the temperature;
    top_k keeps the logits >= the k-th largest; top_p then keeps the fewest most likely tokens whose
    probabilities sum to >= top_p (a token is kept if those ahead of it sum to < top_p; ties with the last
    kept stay) and renormalises. Example: logits [2, 1, 0, -1], temperature 0.5: [4, 2, 0, -2], softmax
    [0.8650, 0.1171, 0.0158, 0.0021]; top_k=2: [0.8808, 0.1192, 0, 0]; and top_p=0.8: [1, 0, 0, 0].
    """
    _check_finite(logits)
    if temperature == 0:
        probs = np.zeros(logits.shape)  # [n, n_vocab] float64
        probs[np.arange(len(logits)), np.argmax(logits, axis=-1)] = 1.0  # all on the most likely token
        return probs
    logits = np.asarray(logits, dtype=np.float64) / temperature  # [n, n_vocab]
    if top_k is not None and top_k < logits.shape[-1]:
        kth_largest = np.partition(logits, -top_k, axis=-1)[:, -top_k:-top_k + 1]  # [n, 1]
        logits = np.where(logits >= kth_largest, logits, -np.inf)  # [n, n_vocab]: the rest get probability 0
    probs = softmax64(logits)  # [n, n_vocab]
    if top_p is not None and top_p < 1:
        for row in probs:  # [n_vocab], a view: cut down in place
            sorted_probs = np.sort(row)[::-1]  # [n_vocab], most likely first
            mass_before = np.concatenate([[0.0], np.cumsum(sorted_probs)[:-1]])  # [n_vocab]: of those ahead of each
            smallest_kept = sorted_probs[mass_before < top_p][-1]
            row[row < smallest_kept] = 0.0
            row /= row.sum()
    return probs


@dataclass
class ModelStats:
    """What a model function has done so far (`model.stats`): calls (forward passes), positions (tokens fed to
    the network: those not cached yet), rows (next-token distributions computed, n per call)."""

    calls: int = 0
    positions: int = 0
    rows: int = 0


def create_model_fn(params, hparams, temperature=1.0, top_k=None, top_p=None, kv_cache=True, plain=False):
    """`model(x, n=1) -> probs [n, n_vocab]` (the contract above) from GPT-2 weights, its KV cache in a closure.

    temperature, top_k, top_p: see `logits_to_probs`; give the draft and the target the same. kv_cache False
    recomputes all of x at every call, as picoGPT does. plain True runs gpt2.py alone; else speed plugs in
    (speed/plug.py: the same logits to float32 rounding, faster). The cache holds the tokens of the last call;
    a call keeps the longest start of x it shares with them (rejected guesses are rolled back) and feeds the
    rest, always the last n tokens, whose positions give the n rows. Attributes: n_vocab, n_ctx, n_params, stats.
    """
    _check_settings(temperature, top_k, top_p)
    n_head, n_ctx = hparams["n_head"], params["wpe"].shape[0]
    if plain:  # the core alone: the weights as loaded, a cache buffer of np.zeros
        weights, cache = params, empty_cache(params["blocks"], n_head, n_ctx)
    else:  # speed plugs in here: routed products, a shared cache buffer, heads on two cores
        weights, cache = plug.fast(params, n_head, n_ctx)
    tokens, stats = [], ModelStats()  # tokens: the token at each position of `cache`

    def model(x, n=1, parents=None):
        nonlocal cache, tokens
        x = list(x)
        _check_call(x, n, parents, n_ctx)
        n_common = common_prefix_length(tokens, x) if kv_cache else 0  # x's first n_common tokens are cached
        if parents is not None or cache.parents:  # a token tree, or the call after one: tree_model_fn.py
            logits, cache, n_fed = tree_call(weights, n_head, cache, tokens, x, n, parents, kv_cache, n_common)
        else:
            n_keep = min(n_common, len(x) - n)  # feed at least the last n tokens: their positions give the rows
            logits, cache = gpt2(x[n_keep:], **weights, n_head=n_head, past=rollback(cache, n_keep), n_logits=n)
            n_fed = len(x) - n_keep
        tokens = x
        stats.calls, stats.positions, stats.rows = stats.calls + 1, stats.positions + n_fed, stats.rows + n
        return logits_to_probs(logits, temperature, top_k, top_p)  # [n, n_vocab] float64

    model.n_vocab, model.n_ctx, model.n_params, model.stats = params["wte"].shape[0], n_ctx, _n_weights(params), stats
    return model


def common_prefix_length(a, b):
    """How many leading tokens the lists a and b share: common_prefix_length([1, 2, 3], [1, 2, 5, 6]) == 2."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:  # the usual case (x only grew since the last call): one fast list comparison
        return n
    return int(np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))[0])


# ------------------------------------------------------------------------------------------------------------
# Input checks, apart from the math: bad input gets one clear ValueError
# ------------------------------------------------------------------------------------------------------------


def _n_weights(params):
    """The number of weights in a nested dict/list of arrays (wte counts once: the LM head is tied to it)."""
    if isinstance(params, dict):
        return sum(_n_weights(value) for value in params.values())
    if isinstance(params, list):
        return sum(_n_weights(value) for value in params)
    return int(params.size)


def _check_settings(temperature, top_k, top_p):
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 means greedy decoding); got {temperature}")
    if top_k is not None and (int(top_k) != top_k or top_k < 1):
        raise ValueError(f"top_k must be None or a whole number >= 1; got {top_k}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must be None or in (0, 1]; got {top_p}")


def _check_finite(logits):
    """NaN or infinite logits come from damaged weights: decoding them would print garbage ("!" forever)."""
    if not np.isfinite(logits).all():
        n_nan, n_inf = int(np.isnan(logits).sum()), int(np.isinf(logits).sum())
        raise ValueError(
            f"the model produced NaN/inf logits ({n_nan} NaN and {n_inf} infinite of {np.size(logits)}): its weights "
            f"are damaged (NaN or infinite values, or so large that the forward pass overflowed); download or "
            f"convert the checkpoint again"
        )


def _check_call(x, n, parents, n_ctx):
    """ValueError, saying what was wrong, for a call the model-function contract does not allow."""
    if len(x) > n_ctx:
        raise ValueError(f"{len(x)} tokens do not fit in the model's context of n_ctx={n_ctx} positions")
    if parents is not None:
        return check_tree_call(x, n, parents)
    if not 1 <= n <= len(x):
        raise ValueError(f"model(x, n) needs 1 <= n <= len(x) = {len(x)}; got n={n}")
