"""A model function from GPT-2 weights: the one interface the samplers see a model through.

Read gpt2.py first; sampling.py comes next and uses what this file builds.

The model-function contract: `model(x, n=1) -> probs [n, n_vocab]`, the next-token distributions after each of
the last n prefixes of the token list x. Row i follows x[:len(x) - n + 1 + i], so row n - 1 is "what comes
after all of x". Example: x = [5, 7, 9], n = 2: row 0 is the distribution after [5, 7], row 1 after [5, 7, 9].
A model function may carry `n_vocab` and `n_ctx` (its longest input); the samplers check prompts against them.
The tests build other model functions from hand-written Markov tables.

Two things live here: `logits_to_probs`, the shaping of logits into the distribution we sample from
(temperature, top-k, top-p), and `create_model_fn`, which keeps the KV cache in a closure so that a sampler
never has to think about it. Token trees (`model(x, n, parents)`) are an extension, in the last section.
"""

from dataclasses import dataclass

import numpy as np

from checks import check_call, check_finite, check_settings
from gpt2 import empty_cache, gpt2, keep_path, rollback, softmax
from speed import plug


def logits_to_probs(logits, temperature=1.0, top_k=None, top_p=None):
    """Float32 logits [n, n_vocab] -> float64 sampling distributions [n, n_vocab], in Hugging Face's order.

    temperature 0 is greedy: a one-hot row at the argmax (ties: the first). Else divide by the temperature;
    top_k keeps the logits >= the k-th largest; top_p then keeps the fewest most likely tokens whose
    probabilities sum to >= top_p (a token is kept if those ahead of it sum to < top_p; ties with the last
    kept stay) and renormalises. Example: logits [2, 1, 0, -1], temperature 0.5: [4, 2, 0, -2], softmax
    [0.8650, 0.1171, 0.0158, 0.0021]; top_k=2: [0.8808, 0.1192, 0, 0]; and top_p=0.8: [1, 0, 0, 0].
    """
    check_finite(logits)
    if temperature == 0:
        probs = np.zeros(logits.shape)  # [n, n_vocab] float64
        probs[np.arange(len(logits)), np.argmax(logits, axis=-1)] = 1.0  # all on the most likely token
        return probs
    logits = np.asarray(logits, dtype=np.float64) / temperature  # [n, n_vocab]
    if top_k is not None and top_k < logits.shape[-1]:
        kth_largest = np.partition(logits, -top_k, axis=-1)[:, -top_k, None]  # [n, 1]
        logits = np.where(logits >= kth_largest, logits, -np.inf)  # [n, n_vocab]: exp(-inf) = 0 for the rest
    probs = softmax(logits)  # [n, n_vocab] float64: each row sums to 1 to ~1e-16 (float32: ~1e-7)
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
    check_settings(temperature, top_k, top_p)
    n_head, n_ctx = hparams["n_head"], params["wpe"].shape[0]
    if plain:  # the core alone: the weights as loaded, a cache buffer of np.zeros
        weights, cache = params, empty_cache(params["blocks"], n_head, n_ctx)
    else:  # speed plugs in here: routed products, a shared cache buffer, heads on two cores
        weights, cache = plug.fast(params, n_head, n_ctx)
    tokens, stats = [], ModelStats()  # tokens: the token at each position of `cache`

    def model(x, n=1, parents=None):
        nonlocal cache, tokens
        x = list(x)
        check_call(x, n, parents, n_ctx)
        n_common = common_prefix_length(tokens, x) if kv_cache else 0  # x's first n_common tokens are cached
        if parents is not None or cache.parents:  # a token tree, or the call after one: see the last section
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


def _n_weights(params):
    """The number of weights in a nested dict/list of arrays (wte counts once: the LM head is tied to it)."""
    if isinstance(params, dict):
        return sum(_n_weights(value) for value in params.values())
    if isinstance(params, list):
        return sum(_n_weights(value) for value in params)
    return int(params.size)


# ------------------------------------------------------------------------------------------------------------
# Token trees, an extension (read after sampling.py and drafters.py): the contract, and the cache along paths
# ------------------------------------------------------------------------------------------------------------
#
# The contract for trees: `model(x, n, parents)` with a list of m parents reads the LAST m tokens of x as the
# nodes of a token tree hanging after the prefix x[:-m]: parents[i] is the index of node i's parent among the
# nodes, or -1 for a node that follows the prefix directly (parents come first: parents[i] < i). Of the m + 1
# prefixes "the prefix" and "the prefix + the path root .. node i", the rows of the last n are returned. Example
# with x = [5, 7, 1, 2] and parents = [-1, -1] (two alternatives after [5, 7]) and n = 3: the rows after [5, 7],
# [5, 7, 1], [5, 7, 2]. A chain, parents = [-1, 0, .., m - 2], gives what parents=None gives. The target scores a
# whole tree in one call, model(x + nodes, m + 1, parents); a model function that knows no trees still serves
# for chains, which the samplers ask for without parents.
#
# create_model_fn hands a call here when it has parents, or when its cache holds the last call's tree. Each
# call reuses as much of the cache as it can and feeds only the rest of x (`tree_call`):
# - the same tokens with the same parents: a frontier expansion (x + nodes, the earlier nodes cached) feeds only
#   the new nodes; a sequence that only grew feeds only the new tokens;
# - or x continues the cached prefix along ONE path of the cached tree (the target's accepted guesses, the
#   draft's chosen branch): that path's keys and values are gathered into place (gpt2.keep_path);
# - anything else falls back to the longest prefix x shares with the cache (a rollback: free).


def tree_call(weights, n_head, cache, cached_tokens, x, n, parents, kv_cache, n_common):
    """(logits [n, n_vocab], the new cache, how many positions were fed) of model(x, n, parents).

    n_common: how many leading tokens x shares with cached_tokens, the tokens at the cache's positions."""
    follows = None if parents is None else follows_of(len(x), parents)  # [len(x)]: what each token follows
    if not kv_cache:  # picoGPT's full recompute, the tree's parents extended over the prefix
        return gpt2(x, **weights, n_head=n_head, n_logits=n, parents=follows), cache, len(x)
    past = reusable_cache(cache, cached_tokens, x, follows, n_common)
    past = rollback(past, min(past.length, len(x) - n))  # feed at least the last n tokens: the rows
    if follows is not None and min(follows[past.length :]) < past.n_prefix - 1:
        # a fed node follows a cached token that is not the prefix's last (gpt2 hangs new nodes only there or
        # from cached nodes): cut the cache back to just after that token
        past = rollback(past, min(follows[past.length :]) + 1)
    n_keep = past.length  # x[:n_keep] are cached: feed the rest
    fed_parents = None if follows is None else [p - past.n_prefix for p in follows[n_keep:]]
    logits, present = gpt2(x[n_keep:], **weights, n_head=n_head, past=past, n_logits=n, parents=fed_parents)
    return logits, present, len(x) - n_keep


def follows_of(n_tokens, parents):
    """The position each token of x comes right after (-1 for the first): a chain, then the tree's nodes.

    follows_of(5, None) == [-1, 0, 1, 2, 3]; follows_of(5, [-1, -1, 0]) == [-1, 0, 1, 1, 2]: nodes 0 and 1
    (positions 2 and 3) both follow the prefix's last token (position 1); node 2 follows node 0.
    """
    parents = [] if parents is None else [int(parent) for parent in parents]
    n_prefix = n_tokens - len(parents)
    return list(range(-1, n_prefix - 1)) + [n_prefix + parent for parent in parents]


def reusable_cache(cache, cached_tokens, x, follows, n_common):
    """The cache rolled back, or gathered along one tree path, to the longest start of x it holds.

    follows: None for a plain sequence x, else follows_of(len(x), parents) of a tree call. Either x's leading
    plain sequence continues the cached prefix along one path of the cached tree: then that path is
    gathered into place (gpt2.keep_path; a path that goes straight on moves nothing); or (tree calls only)
    the first k positions hold x's first k tokens with the same parents, tree nodes included: then it is a
    rollback to k. Whichever keeps more. A plain-sequence call always gets a plain-sequence cache.
    """
    n_prefix, tree = cache.n_prefix, cache.parents
    n_chain = len(x) if follows is None else chain_length(follows)  # x's leading plain sequence
    n_same = 0 if follows is None else min(n_common, same_length(follows_of(cache.length, tree), follows))
    n_seq = min(n_common, n_prefix, n_chain)  # the tokens x shares with the cached prefix
    path = []
    if n_seq == n_prefix:  # then down the tree, as long as x's tokens are one of the children
        children = {(p, cached_tokens[n_prefix + i]): i for i, p in reversed(list(enumerate(tree)))}  # first wins
        for token in x[n_prefix:n_chain]:
            child = children.get((path[-1] if path else -1, token))
            if child is None:
                break
            path.append(child)
    if n_seq + len(path) >= n_same:
        return keep_path(cache, path) if n_seq == n_prefix else rollback(cache, n_seq)
    return rollback(cache, n_same)


def same_length(a, b):
    """How many leading items the lists a and b share: same_length([1, 2, 3], [1, 2, 5]) == 2."""
    return next((i for i, (item_a, item_b) in enumerate(zip(a, b)) if item_a != item_b), min(len(a), len(b)))


def chain_length(follows):
    """How many leading tokens each follow the one before: the plain sequence a tree call starts with."""
    return next((i for i, f in enumerate(follows) if f != i - 1), len(follows))


