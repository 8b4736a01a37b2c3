"""A model function from GPT-2 weights: the one interface the samplers see a model through.

Read gpt2.py first (the forward pass and its KV cache as a value); sampling.py comes next and uses what
this file builds. Three things live here: the contract a model function keeps, the shaping of logits into
the distribution we sample from (temperature, top-k, top-p), and `create_model_fn`, which keeps the KV
cache in a closure so that a sampler never has to think about it.

The model-function contract
---------------------------
Both samplers see a model only as a function `model(x, n=1) -> probs [n, n_vocab]`: the next-token
distributions after each of the last n prefixes of the token list x. Row i is the distribution of the token
that follows x[:len(x) - n + 1 + i], so row n - 1 is "what comes after all of x". Example with
x = [5, 7, 9] and n = 2: row 0 is the distribution after [5, 7], row 1 after [5, 7, 9]. A model function may
carry the attributes `n_vocab` and `n_ctx` (its longest input); the samplers check prompts against them.
`create_model_fn` builds one from GPT-2 weights; the tests build others from hand-written Markov tables.

Trees: `model(x, n, parents)` with a list of m parents reads the LAST m tokens of x as the nodes of a token
tree hanging after the prefix x[:-m]: parents[i] is the index of node i's parent among the nodes, or -1 for a
node that follows the prefix directly (parents come first: parents[i] < i). Of the m + 1 prefixes "the prefix"
and "the prefix + the path root .. node i", the rows of the last n are returned. Example with x = [5, 7, 1, 2]
and parents = [-1, -1] (two alternatives after [5, 7]) and n = 3: the rows after [5, 7], [5, 7, 1], [5, 7, 2].
A chain, parents = [-1, 0, .., m - 2], gives what parents=None gives. The target scores a whole tree in one
call, model(x + nodes, m + 1, parents); a model function that knows no trees still serves for chains, which
the samplers ask for without parents.
"""

from dataclasses import dataclass

import numpy as np

from gpt2 import empty_cache, gpt2, keep_path, rollback


# ------------------------------------------------------------------------------------------------------------
# Shaping logits into the distribution we sample from: temperature, top-k, top-p
# ------------------------------------------------------------------------------------------------------------


def softmax64(x, where=None, out=None):
    """Softmax over the last axis in float64, so each row sums to 1 to ~1e-16 (float32 rows are off by ~1e-7).

    where: None, or a boolean array like x: the softmax of the entries where it is True; the others get
        probability exactly 0, and exp is not even computed for them (top_k leaves 50 of 50257 tokens, say).
        softmax64([[0, ln 3, 5]], where=[[True, True, False]]) is [[0.25, 0.75, 0]].
    out: a float64 array like x to write the result into (it may be x itself), instead of a new array. A new
        [n, 50257] float64 array costs more than its arithmetic here: its fresh memory pages are mapped in one
        page fault at a time, so logits_to_probs reuses its one array.
    """
    x = np.asarray(x, dtype=np.float64)
    row_max = np.max(x, axis=-1, keepdims=True, where=True if where is None else where, initial=-np.inf)  # [n, 1]
    exp_x = np.subtract(x, row_max, out=out)  # like x; -inf logits become exactly 0 below
    np.exp(exp_x, out=exp_x, where=True if where is None else where)  # in place
    if where is not None:
        exp_x[~where] = 0.0  # the tokens left out
    exp_x /= np.sum(exp_x, axis=-1, keepdims=True)
    return exp_x


def logits_to_probs(logits, temperature=1.0, top_k=None, top_p=None):
    """Turn float32 logits [n, n_vocab] into float64 sampling distributions [n, n_vocab].

    The order is Hugging Face's: divide by the temperature, keep the top_k largest logits, then keep the
    top_p "nucleus" of what is left.
    - temperature 0 is greedy decoding, done exactly: a one-hot row at the argmax (ties go to the first index,
      like np.argmax). There is no division by a tiny epsilon, and top_k / top_p do not matter.
    - top_k: keep the logits >= the k-th largest (HF's rule: a tie with the k-th largest is kept too).
    - top_p: keep the smallest set of most likely tokens whose probabilities sum to >= top_p (HF's rule: a
      token is kept if the tokens ahead of it sum to < top_p), then renormalise. Tokens exactly as likely as
      the last one kept are kept too (HF breaks such ties by its sort order).
    NaN or infinite logits are a ValueError: they come from damaged weights, and decoding them would print
    garbage (np.argmax of a row of NaN is token 0, "!").

    Worked example (the test checks it): logits [2, 1, 0, -1] at temperature 0.5 are [4, 2, 0, -2], with
    softmax [0.8650, 0.1171, 0.0158, 0.0021]. top_k=2 keeps [4, 2]: [0.8808, 0.1192, 0, 0]. Adding
    top_p=0.8 keeps only the first token, since 0.8808 >= 0.8 already: [1, 0, 0, 0].

    Cost: this runs once per decoding step on a whole row of 50257 logits, so it avoids work that reads no
    weights: greedy decoding takes the argmax of the float32 logits (no float64 copy, no softmax); otherwise
    one float64 array is made and then updated in place, and top_p sorts only the most likely tokens (top_k's,
    or the top 1024 when they hold top_p of the mass, else the whole row).
    """
    logits = np.asarray(logits)  # [n, n_vocab], float32 from gpt2
    if not np.isfinite(logits).all():
        n_nan, n_inf = int(np.isnan(logits).sum()), int(np.isinf(logits).sum())
        raise ValueError(
            f"the model produced NaN/inf logits ({n_nan} NaN and {n_inf} infinite of {logits.size}): its weights "
            f"are damaged (NaN or infinite values, or so large that the forward pass overflowed); download or "
            f"convert the checkpoint again"
        )
    if temperature == 0:
        greedy = np.argmax(logits, axis=-1)  # [n]: float32 -> float64 is exact, so it would pick the same token
        one_hot = np.zeros(logits.shape, dtype=np.float64)  # [n, n_vocab]
        one_hot[np.arange(len(logits)), greedy] = 1.0
        return one_hot
    scaled = np.divide(logits, temperature, dtype=np.float64)  # [n, n_vocab]: the one float64 copy
    kept = None  # [n, n_vocab] bool: the tokens top_k keeps (None: all)
    if top_k is not None and top_k < scaled.shape[-1]:
        # on the logits before scaling: dividing by temperature > 0 keeps their order and their ties
        kth_largest = np.partition(logits, -top_k, axis=-1)[:, -top_k]  # [n]
        kept = logits >= kth_largest[:, None]  # [n, n_vocab]
    probs = softmax64(scaled, where=kept, out=scaled)  # [n, n_vocab], in place
    if top_p is not None and top_p < 1:
        for i, row in enumerate(probs):  # row [n_vocab] is a view: it is cut down in place
            # the nucleus is among the most likely tokens: top_k's, or else the top 1024 if they reach top_p
            candidates = row[kept[i]] if kept is not None else np.partition(row, -min(1024, len(row)))[-1024:]
            sorted_probs = np.sort(candidates)[::-1]  # [n_candidates], most likely first
            mass = np.cumsum(sorted_probs)  # [n_candidates]: mass[i] = mass of the tokens 0 .. i
            if mass[-1] < top_p and len(candidates) < len(row):  # not enough: sort the whole row
                sorted_probs = np.sort(row)[::-1]  # [n_vocab]
                mass = np.cumsum(sorted_probs)  # [n_vocab]
            # token i is kept if the tokens ahead of it, mass[i - 1], sum to < top_p; token 0 always is
            n_keep = 1 + np.searchsorted(mass[:-1], top_p, side="left")
            row[row < sorted_probs[n_keep - 1]] = 0.0  # ties with the last kept token stay
            row /= row.sum()
    return probs


# ------------------------------------------------------------------------------------------------------------
# A model function from GPT-2 weights, with the KV cache kept in its closure
# ------------------------------------------------------------------------------------------------------------


@dataclass
class ModelStats:
    """What a model function built by `create_model_fn` has done so far (read it as `model.stats`).

    calls:     forward passes of the network (one per call of the model function).
    positions: token positions the forward passes computed: the tokens (tree nodes included) fed to the
               network. With the KV cache, those whose keys and values were not cached yet (a path gathered
               from the last tree is copied, not computed: it does not count); without it, len(x) per call.
    rows:      next-token distributions computed (the LM head's rows; n per call).
    """

    calls: int = 0
    positions: int = 0
    rows: int = 0


def create_model_fn(params, hparams, temperature=1.0, top_k=None, top_p=None, kv_cache=True):
    """Build `model(x, n=1, parents=None) -> probs [n, n_vocab]` (see the module docstring) from GPT-2 weights.

    params, hparams: as loaded by utils.load_encoder_hparams_and_params (or gpt2.random_params).
    temperature, top_k, top_p: how logits become distributions (see `logits_to_probs`); the samplers draw
        from exactly these shaped distributions, so give the draft and the target the same settings.
    kv_cache: True keeps the keys and values of the tokens seen in the previous call. False recomputes the
        whole of x on every call, as picoGPT does (for comparing the two): one gpt2 pass over x, with the
        tree's parents extended over the prefix.

    Where the cache lives: `gpt2` is a pure function of its cache value (cache in, (logits, cache) out), so
    someone has to hold on to the cache between calls: here the two variables `cache` (a gpt2.Cache: the
    prefix, then maybe the nodes of the last tree) and `cached_tokens` (the token at each of its positions)
    of this closure. It is the only holder, so writing in place is safe (gpt2.py's rule). Each call reuses
    as much as it can and feeds only the rest of x:
    - the same tokens with the same parents: a frontier expansion (x + nodes, the earlier nodes cached)
      feeds only the new nodes; a sequence that only grew feeds only the new tokens;
    - or x continues the cached prefix along ONE path of the cached tree (the target's accepted guesses, the
      draft's chosen branch): that path's keys and values are gathered into place (gpt2.keep_path);
    - anything else falls back to the longest prefix x shares with the cache (a rollback: free).
    The last n tokens are always fed, because the logits of their positions are the n rows asked for. So
    tokens a sampler threw away (rejected guesses) are recomputed when they come back, and nothing else is.
    The model also has the attributes `n_vocab`, `n_ctx`, `n_params` (the number of weights, for cost
    estimates) and `stats` (a `ModelStats`).
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 means greedy decoding); got {temperature}")
    if top_k is not None and (int(top_k) != top_k or top_k < 1):
        raise ValueError(f"top_k must be None or a whole number >= 1; got {top_k}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must be None or in (0, 1]; got {top_p}")
    n_head = hparams["n_head"]
    n_ctx = params["wpe"].shape[0]  # [n_ctx, n_embd]
    stats = ModelStats()

    cached_tokens = []  # the token at each position of `cache`
    cache = empty_cache(params["blocks"], n_head, n_ctx)  # one buffer [n_layer, 2, n_head, n_ctx, head_dim]

    def model(x, n=1, parents=None):
        nonlocal cached_tokens, cache
        x = list(x)
        _check_model_call(x, n, parents, n_ctx)
        follows = None if parents is None else _follows(len(x), parents)  # [len(x)]: what each token follows

        if kv_cache:
            past = _reusable_cache(cache, cached_tokens, x, follows)
            past = rollback(past, min(past.length, len(x) - n))  # feed at least the last n tokens: the rows
            if follows is not None and min(follows[past.length :]) < past.n_prefix - 1:
                # a fed node follows a cached token that is not the prefix's last (gpt2 hangs new nodes only
                # there or from cached nodes): cut the cache back to just after that token
                past = rollback(past, min(follows[past.length :]) + 1)
            n_keep = past.length  # x[:n_keep] are cached: feed the rest
            fed_parents = None if follows is None else [p - past.n_prefix for p in follows[n_keep:]]
            logits, cache = gpt2(x[n_keep:], **params, n_head=n_head, past=past, n_logits=n, parents=fed_parents)
            cached_tokens = x
        else:
            n_keep = 0  # picoGPT's full recompute, the tree's parents extended over the prefix
            logits = gpt2(x, **params, n_head=n_head, n_logits=n, parents=follows)

        stats.calls += 1
        stats.positions += len(x) - n_keep
        stats.rows += n
        return logits_to_probs(logits, temperature, top_k, top_p)  # [n, n_vocab] float64

    model.n_vocab = params["wte"].shape[0]
    model.n_ctx = n_ctx
    model.n_params = _n_weights(params)
    model.stats = stats
    return model


def _check_model_call(x, n, parents, n_ctx):
    """ValueError, saying what was wrong, for a call the model-function contract does not allow."""
    if len(x) > n_ctx:
        raise ValueError(f"{len(x)} tokens do not fit in the model's context of n_ctx={n_ctx} positions")
    if parents is None:
        if not 1 <= n <= len(x):
            raise ValueError(f"model(x, n) needs 1 <= n <= len(x) = {len(x)}; got n={n}")
        return
    m = len(parents)
    if not 1 <= m <= len(x):
        raise ValueError(f"parents names the last m tokens of x as tree nodes: 1 <= m <= len(x)={len(x)}; got {m}")
    bad = [i for i, parent in enumerate(parents) if int(parent) != parent or not -1 <= parent < i]
    if bad:
        raise ValueError(f"parents[{bad[0]}] = {parents[bad[0]]}: each parent must be -1 or an earlier node's index")
    if not 1 <= n <= min(m + 1, len(x)):
        raise ValueError(f"model(x, n, parents) gives the rows of the last n of the m + 1 = {m + 1} prefixes "
                         f"(n <= len(x) = {len(x)} too); got n={n}")


def _follows(n_tokens, parents):
    """The position each token of x comes right after (-1 for the first): a chain, then the tree's nodes.

    _follows(5, None) == [-1, 0, 1, 2, 3]; _follows(5, [-1, -1, 0]) == [-1, 0, 1, 1, 2]: nodes 0 and 1
    (positions 2 and 3) both follow the prefix's last token (position 1); node 2 follows node 0.
    """
    parents = [] if parents is None else [int(parent) for parent in parents]
    n_prefix = n_tokens - len(parents)
    return list(range(-1, n_prefix - 1)) + [n_prefix + parent for parent in parents]


def _reusable_cache(cache, cached_tokens, x, follows):
    """The cache rolled back, or gathered along one tree path, to the longest start of x it holds.

    follows: None for a plain sequence x, else _follows(len(x), parents) of a tree call. Either x's leading
    plain sequence continues the cached prefix along one path of the cached tree: then that path is
    gathered into place (gpt2.keep_path; a path that goes straight on moves nothing); or (tree calls only)
    the first k positions hold x's first k tokens with the same parents, tree nodes included: then it is a
    rollback to k. Whichever keeps more. A plain-sequence call always gets a plain-sequence cache.
    """
    n_prefix, tree = cache.n_prefix, cache.parents
    n_chain = len(x) if follows is None else _chain_length(follows)  # x's leading plain sequence
    n_same = 0 if follows is None else min(  # the same tokens, each following the same position
        common_prefix_length(cached_tokens, x), common_prefix_length(_follows(cache.length, tree), follows)
    )

    n_seq = common_prefix_length(cached_tokens[:n_prefix], x[:n_chain])  # along the cached prefix
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


def _chain_length(follows):
    """How many leading tokens each follow the one before: the plain sequence a tree call starts with."""
    return next((i for i, f in enumerate(follows) if f != i - 1), len(follows))


def _n_weights(params):
    """The number of weights in a nested dict/list of arrays (wte counts once: the LM head is tied to it)."""
    if isinstance(params, dict):
        return sum(_n_weights(value) for value in params.values())
    if isinstance(params, list):
        return sum(_n_weights(value) for value in params)
    return int(params.size)


def common_prefix_length(a, b):
    """How many leading tokens the lists a and b share: common_prefix_length([1, 2, 3], [1, 2, 5, 6]) == 2."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:  # the usual case (x only grew since the last call): one fast list comparison
        return n
    return int(np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))[0])
