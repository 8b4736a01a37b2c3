"""Autoregressive and speculative sampling, both written against one model-function contract.

The idea
--------
Plain (autoregressive) sampling asks the big model for one next-token distribution, draws one token, appends
it, and asks again: N tokens cost N forward passes of the big model, one after the other.

Speculative sampling (Chen et al. 2023, "Accelerating Large Language Model Decoding with Speculative
Sampling", Algorithm 2; found at the same time by Leviathan et al. 2022, "Fast Inference from Transformers via
Speculative Decoding", Algorithm 1) lets a small, cheap *draft* model guess K tokens one by one, then asks
the big *target* model to score all K guesses in ONE forward pass. A transformer computes the next-token
distribution after every position of its input anyway, so one pass over the K guesses gives the K + 1
distributions "after the prefix", "after the prefix and guess 1", ..., "after all K guesses". Each guess is
kept with probability min(1, target / draft); the first one that is not kept is replaced by a sample from a
corrected distribution, and if all K are kept the last target distribution gives one more token for free.
The result is distributed EXACTLY like sampling from the target alone (proof below), in fewer target passes.

Notation: Chen et al.'s letters (as in jaymody/speculative-sampling)
---------------------------------------------------------------------
    q     the TARGET model's next-token distribution           (Leviathan et al.: p(x), model M_p)
    p     the DRAFT model's next-token distribution            (Leviathan et al.: q(x), model M_q)
    K     lookahead: tokens drafted per round                  (Leviathan et al.: gamma)
The letters p and q are SWAPPED between the two papers; this file uses Chen et al.'s throughout.

Chen et al.'s Algorithm 2, with the step numbers used as comments in `speculative_sampling`
--------------------------------------------------------------------------------------------
    Given lookahead K and minimum target sequence length T.
    Given auto-regressive target model q(.|.), and auto-regressive draft model p(.|.),
    initial prompt sequence x_0, ..., x_t.
    Initialise n <- t.
    while n < T do
        [Step 1] for t = 1 : K do
                     Sample draft auto-regressively x~_t ~ p(x | x_1, ..., x_n, x~_1, ..., x~_{t-1})
                 end for
        [Step 2] In parallel, compute K + 1 sets of logits from drafts x~_1, ..., x~_K:
                     q(x | x_1, ..., x_n), q(x | x_1, ..., x_n, x~_1), ..., q(x | x_1, ..., x_n, x~_1, ..., x~_K)
        [Step 3] for t = 1 : K do
                     Sample r ~ U[0, 1] from a uniform distribution.
                     if r < min(1, q(x | x_1, ..., x_{n+t-1}) / p(x | x_1, ..., x_{n+t-1})) then
                         Set x_{n+t} <- x~_t and n <- n + 1.
                     else
                         sample x_{n+t} ~ (q(x | x_1, ..., x_{n+t-1}) - p(x | x_1, ..., x_{n+t-1}))_+
                         and exit for loop.
                     end if
                 end for
        [Step 4] if all tokens x_{n+1}, ..., x_{n+K} are accepted then
                     sample extra token x_{n+K+1} ~ q(x | x_1, ..., x_n, x_{n+K}) and set n <- n + 1.
                 end if
    end while
(In Step 3 the ratio is evaluated at the drafted token x = x~_t; (f)_+ means max(f, 0) normalised to sum 1.)

Two details this implementation adds: the last round drafts only as many tokens as still fit, so exactly N
tokens come out and the target never reads past the prompt + N positions; and an optional stop token ends
sampling right after it appears (both samplers, the same way).

Why the output is distributed exactly as the target's
-----------------------------------------------------
Take one position, with target distribution q and draft distribution p over the vocabulary. The draft
proposes x~ ~ p and it is kept with probability min(1, q(x~)/p(x~)). The chance that a proposal is kept is
beta = sum_x p(x) min(1, q(x)/p(x)) = sum_x min(p(x), q(x)), and 1 - beta = sum_x (q(x) - p(x))_+
(because sum_x q(x) = 1 = sum_x [min(p(x), q(x)) + (q(x) - p(x))_+]). So the token written is x with
probability

    P(x) = p(x) min(1, q(x)/p(x)) + (1 - beta) (q(x) - p(x))_+ / (1 - beta)
         = min(p(x), q(x))        + (q(x) - p(x))_+
         = q(x).

The next position is then drawn, by the same argument, from q given the token actually written (drafts after
a rejection are thrown away), and the free extra token of Step 4 is drawn from q itself. By induction every
token has the target's conditional distribution, so the whole sequence does. Nothing in the proof needs p to
be close to q: a bad draft costs speed (more rejections), never correctness; the draft may even give
probability to tokens the target never produces (they are always rejected, because q = 0 there) and
probability 0 to tokens the target can produce (the residual (q - p)_+ supplies them).

Cost of a round (with the KV cache of `create_model_fn`)
---------------------------------------------------------
- draft: K forward passes of one new position each; the first pass of a round computes two positions after a
  round in which all K guesses were kept (the K-th guess was never fed to the draft, because nobody needed
  the distribution after it). Guesses thrown away after a rejection are rolled back out of the cache.
- target: ONE forward pass computing K + 1 positions: the last token written in the previous round (its
  keys and values are not cached yet, because it was sampled from the target's output rather than fed in) and
  the K guesses. Its logits are computed for those K + 1 rows only.
- the very first round also computes the prompt, in both models.
- result: between 1 and K + 1 tokens. If every guess is kept independently with probability alpha, a round
  yields (1 - alpha^(K + 1)) / (1 - alpha) tokens on average (Leviathan et al., equation 1).

The model-function contract
---------------------------
Both samplers see a model only as a function `model(x, n=1) -> probs [n, n_vocab]`: the next-token
distributions after each of the last n prefixes of the token list x. Row i is the distribution of the token
that follows x[:len(x) - n + 1 + i], so row n - 1 is "what comes after all of x". Example with
x = [5, 7, 9] and n = 2: row 0 is the distribution after [5, 7], row 1 after [5, 7, 9]. A model function may
carry the attributes `n_vocab` and `n_ctx` (its longest input); the samplers check prompts against them.
`create_model_fn` builds one from GPT-2 weights; the tests build others from hand-written Markov tables.

Sampling uses inverse-CDF draws with one `rng.random()` per token, and accept/reject uses one `rng.random()`
per draft token, so the same `np.random.Generator` seed always gives the same tokens.
"""

from dataclasses import dataclass, field

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
        page fault at a time (~0.2 ms per array, measured), so logits_to_probs reuses its one array.
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
               network. With the KV cache, those whose keys and values were not cached yet; without it,
               len(x) for every call.
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
        follows = _follows(len(x), parents)  # [len(x)]: the position of x that each token comes after

        if kv_cache:
            past = _reusable_cache(cache, cached_tokens, x, follows, is_chain=parents is None)
            past = rollback(past, min(past.length, len(x) - n))  # feed at least the last n tokens: the rows
            if parents is not None and min(follows[past.length :]) < past.n_prefix - 1:
                past = rollback(past, min(follows[past.length :]) + 1)  # a fed node hangs from inside the prefix
            n_keep = past.length  # x[:n_keep] are cached: feed the rest
            fed_parents = None if parents is None else [p - past.n_prefix for p in follows[n_keep:]]
            logits, cache = gpt2(x[n_keep:], **params, n_head=n_head, past=past, n_logits=n, parents=fed_parents)
            cached_tokens = x
        else:
            n_keep = 0  # picoGPT's full recompute, the tree's parents extended over the prefix
            logits = gpt2(x, **params, n_head=n_head, n_logits=n, parents=None if parents is None else follows)

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


def _reusable_cache(cache, cached_tokens, x, follows, is_chain):
    """The cache rolled back, or gathered along one tree path, to the longest start of x it holds.

    Either the first k positions hold x's first k tokens with the same parents (`follows`): then it is a
    rollback to k; or x's chain part continues the cached prefix along one path of the cached tree: then
    that path is gathered into place (gpt2.keep_path). Whichever keeps more; a chain call always gets a
    plain sequence (gathering a path that continues straight on moves nothing).
    """
    n_prefix, tree = cache.n_prefix, cache.parents
    n_chain = len(x) if is_chain else _chain_length(follows)  # x's leading plain sequence
    n_same = min(_common_prefix_length(cached_tokens, x), _common_prefix_length(_follows(cache.length, tree), follows))

    n_seq = _common_prefix_length(cached_tokens[:n_prefix], x[:n_chain])  # along the cached prefix
    path = []
    if n_seq == n_prefix:  # then down the tree, as long as x's tokens are one of the children
        for token in x[n_prefix:n_chain]:
            parent = path[-1] if path else -1
            child = next((i for i, p in enumerate(tree) if p == parent and cached_tokens[n_prefix + i] == token), None)
            if child is None:
                break
            path.append(child)
    if is_chain or n_seq + len(path) > n_same:
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


def _common_prefix_length(a, b):
    """How many leading tokens the lists a and b share: _common_prefix_length([1, 2, 3], [1, 2, 5, 6]) == 2."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:  # the usual case (x only grew since the last call): one fast list comparison
        return n
    return int(np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))[0])


# ------------------------------------------------------------------------------------------------------------
# Statistics the samplers fill in
# ------------------------------------------------------------------------------------------------------------


@dataclass
class AutoregressiveStats:
    """Filled in by `autoregressive_sampling(..., stats=AutoregressiveStats())`; counts add up over runs.

    tokens:        new tokens written.
    target_passes: calls of the model function (forward passes); one per token.
    """

    tokens: int = 0
    target_passes: int = 0

    @property
    def tokens_per_target_pass(self):
        return self.tokens / self.target_passes if self.target_passes else 0.0


@dataclass
class SpeculativeStats:
    """Filled in by `speculative_sampling(..., stats=SpeculativeStats())`; counts add up over runs.

    rounds:          draft-then-verify rounds (each makes exactly one target pass).
    tokens:          new tokens written.
    drafted:         draft tokens proposed (Step 1).
    checked:         draft tokens that went through the accept/reject test (Step 3). Drafts after the
                     first rejection of a round are never checked: they are thrown away.
    accepted:        checked draft tokens that were kept.
    drafted_at[i], checked_at[i], accepted_at[i]: the same, for draft position i + 1 of a round (1 .. K).
    draft_passes, target_passes: calls of each model function (forward passes).

    acceptance_rate = accepted / checked is the empirical alpha of Leviathan et al.: the chance that a
    draft token is kept. acceptance_rate_at[i] is the same for draft position i + 1 (given positions
    1 .. i were kept). tokens_per_target_pass = tokens / target_passes (autoregressive sampling has 1.0).
    """

    rounds: int = 0
    tokens: int = 0
    drafted: int = 0
    checked: int = 0
    accepted: int = 0
    drafted_at: list = field(default_factory=list)
    checked_at: list = field(default_factory=list)
    accepted_at: list = field(default_factory=list)
    draft_passes: int = 0
    target_passes: int = 0

    @property
    def acceptance_rate(self):
        return self.accepted / self.checked if self.checked else 0.0

    @property
    def acceptance_rate_at(self):
        return [a / c if c else 0.0 for a, c in zip(self.accepted_at, self.checked_at)]

    @property
    def tokens_per_target_pass(self):
        return self.tokens / self.target_passes if self.target_passes else 0.0

    def summary(self):
        """A few readable lines, e.g. for main.py."""
        per_position = ", ".join(f"{rate:.2f}" for rate in self.acceptance_rate_at)
        return (
            f"{self.tokens} tokens in {self.rounds} rounds: {self.target_passes} target passes, "
            f"{self.draft_passes} draft passes, {self.tokens_per_target_pass:.2f} tokens per target pass\n"
            f"draft tokens: {self.drafted} drafted, {self.checked} checked, {self.accepted} accepted; "
            f"acceptance rate alpha = {self.acceptance_rate:.2f} (by draft position: {per_position})"
        )


# ------------------------------------------------------------------------------------------------------------
# The samplers
# ------------------------------------------------------------------------------------------------------------


def autoregressive_sampling(x, model, N, rng, stop_token=None, stats=None):
    """x followed by N new tokens, each drawn from model(x)[-1] (Chen et al.'s Algorithm 1), as a list of ints.

    rng: a np.random.Generator; the same seed gives the same tokens. stop_token: end right after this token
    (it is included) even if fewer than N tokens were written. stats: an `AutoregressiveStats` to fill in.
    """
    x = _check_prompt(x, N, rng, [model])
    n_vocab = getattr(model, "n_vocab", None)
    T = len(x) + N  # the length to reach (Chen et al.'s T)
    while len(x) < T:
        q = _check_probs(model(x, 1), 1, n_vocab, "the model")  # [1, n_vocab]
        token = _sample(q[0], rng)
        x.append(token)
        if stats is not None:
            stats.tokens += 1
            stats.target_passes += 1
        if token == stop_token:
            break
    return x


def speculative_sampling(x, draft_model, target_model, N, K, rng, stop_token=None, stats=None):
    """x followed by N new tokens, sampled by Chen et al.'s Algorithm 2, as a list of ints.

    The tokens are distributed exactly as `autoregressive_sampling(x, target_model, N, ...)`'s (see the
    module docstring). draft_model, target_model: model functions over the same vocabulary. K: lookahead
    (draft tokens per round, >= 1); the last round drafts fewer if fewer tokens remain, so exactly N come out.
    rng: a np.random.Generator; the same seed gives the same tokens. stop_token: end right after this token
    (it is included; drafts after it are dropped). stats: a `SpeculativeStats` to fill in.
    """
    if int(K) != K or K < 1:
        raise ValueError(f"the lookahead K must be a whole number >= 1; got {K}")
    n_vocab = _shared_vocabulary_size(draft_model, target_model)  # None if the models do not say
    x = _check_prompt(x, N, rng, [draft_model, target_model])
    if stats is not None:  # one counter per draft position 1 .. K
        for counts in (stats.drafted_at, stats.checked_at, stats.accepted_at):
            counts += [0] * (K - len(counts))

    T = len(x) + N  # the length to reach (Chen et al.'s T)
    while len(x) < T:  # Chen: while n < T
        k = min(K, T - len(x) - 1)  # this round's lookahead: it writes at most k + 1 tokens, never past T

        # Step 1: the draft model guesses k tokens one by one (k passes of the draft)
        drafts, p = _draft(draft_model, x, k, rng, n_vocab)  # k token ids, p: [k, n_vocab]
        if n_vocab is None and k > 0:
            n_vocab = p.shape[1]  # the draft showed its vocabulary size; the target must match it

        # Step 2: ONE pass of the target scores the k + 1 prefixes x, x + drafts[:1], ..., x + drafts
        q = _score(target_model, x, drafts, n_vocab)  # [k + 1, n_vocab]; row t goes with drafts[t]

        # Step 3: keep draft t with probability min(1, q/p); the first rejected one is replaced by a
        # sample from the residual (q - p)_+, and the drafts after it are thrown away
        new_tokens = []
        for t in range(k):
            if _accept(q[t], p[t], drafts[t], rng):
                new_tokens.append(drafts[t])
            else:
                new_tokens.append(_sample(_residual(q[t], p[t]), rng))
                break
        else:
            # Step 4: all k drafts were kept: the target's last row gives one more token for free
            new_tokens.append(_sample(q[k], rng))

        if stats is not None:
            _count_round(stats, k, n_accepted=len(new_tokens) - 1)
        if stop_token in new_tokens:  # end right after the stop token, as autoregressive sampling does
            new_tokens = new_tokens[: new_tokens.index(stop_token) + 1]
            T = len(x) + len(new_tokens)
        x.extend(new_tokens)
        if stats is not None:
            stats.tokens += len(new_tokens)
    return x


# ------------------------------------------------------------------------------------------------------------
# The steps of a round, as small functions (the tests swap in wrong versions to show that they notice)
# ------------------------------------------------------------------------------------------------------------


def _draft(draft_model, x, k, rng, n_vocab):
    """Step 1: k tokens sampled one by one from the draft, and the k distributions they came from.

    Returns (drafts, p): drafts[t] ~ p[t] = draft distribution after x + drafts[:t]; p is [k, n_vocab].
    """
    drafts, rows = [], []
    for _ in range(k):
        p_next = _check_probs(draft_model(x + drafts, 1), 1, n_vocab, "the draft model")[0]  # [n_vocab]
        drafts.append(_sample(p_next, rng))
        rows.append(p_next)
    p = np.array(rows) if rows else np.zeros((0, n_vocab or 0))  # [k, n_vocab]
    return drafts, p


def _score(target_model, x, drafts, n_vocab):
    """Step 2: the target's k + 1 distributions after x, x + drafts[:1], ..., x + drafts, in ONE call."""
    k = len(drafts)
    return _check_probs(target_model(x + drafts, k + 1), k + 1, n_vocab, "the target model")  # [k+1, n_vocab]


def _accept(q_row, p_row, token, rng):
    """Step 3: keep the drafted `token` with probability min(1, q(token) / p(token)).

    p(token) > 0, because the token was drawn from p. At temperature 0 both rows are one-hot and p(token)
    is 1, so this keeps the draft exactly when the target's greedy choice is the same token.
    """
    r = rng.random()  # r ~ U[0, 1)
    return r < q_row[token] / p_row[token]  # r < q/p has probability min(1, q/p)


def _residual(q_row, p_row):
    """Step 3, on a rejection: the residual distribution (q - p)_+ = max(q - p, 0), normalised.

    Its total, 1 - beta = sum (q - p)_+, is the chance of a rejection, so it is > 0 whenever a rejection can
    happen. Only rows that are equal up to rounding can reach here with a total of 0; then q is the answer.
    """
    residual = np.maximum(q_row - p_row, 0.0)  # [n_vocab]
    total = residual.sum()
    return residual / total if total > 0 else q_row


def _sample(probs, rng, block_size=1024):
    """One token id drawn from `probs` [n_vocab] by inverse CDF with a single rng.random().

    The token is the first whose cumulative probability exceeds u = rng.random() * total. A token of
    probability 0 is never drawn (the cumulative sum does not step up at it).

    A cumulative sum over all 50257 tokens is a sequential loop that took 0.2 ms, 1% of a whole 124M decoding
    step, so the search has two levels: the sums of blocks of block_size tokens (a vectorised sum), the
    block where their cumulative sum passes u, then a cumulative sum inside that block only (~0.03 ms).
    Example with block_size = 2 and probs [0.1, 0.2, 0.3, 0.4]: block sums [0.3, 0.7], cumulative
    [0.3, 1.0]; u = 0.5 falls in block 1 (0.3 <= u < 1.0), 0.2 into it, where the cumulative sums are
    [0.3, 0.7]: token 2, as a search of the whole cumulative sum [0.1, 0.3, 0.6, 1.0] finds. (The two can
    differ only when u is within rounding, ~1e-16, of a step.)
    """
    block_starts = np.arange(0, len(probs), block_size)  # [n_blocks]
    block_sums = np.add.reduceat(probs, block_starts)  # [n_blocks]
    block_cdf = np.cumsum(block_sums)  # [n_blocks]
    u = rng.random() * block_cdf[-1]  # uniform on [0, total)
    block = int(np.searchsorted(block_cdf, u, side="right"))  # the first block whose cdf is > u: its sum is > 0
    if block == len(block_cdf):  # u rounded up to the total: the last block that holds any probability
        block = int(np.flatnonzero(block_sums)[-1])
    in_block = probs[block_starts[block] : block_starts[block] + block_size]  # [<= block_size]
    u_in_block = u - (block_cdf[block - 1] if block > 0 else 0.0)  # >= 0
    token = int(np.searchsorted(np.cumsum(in_block), u_in_block, side="right"))
    if token == len(in_block):  # the block's own cumulative sum rounded below u: its last token of probability > 0
        token = int(np.flatnonzero(in_block)[-1])
    return int(block_starts[block]) + token


def _count_round(stats, k, n_accepted):
    """Add one round that drafted k tokens and kept the first n_accepted of them to a SpeculativeStats."""
    n_checked = min(n_accepted + 1, k)  # the first rejection is checked too; the drafts after it are not
    stats.rounds += 1
    stats.drafted += k
    stats.checked += n_checked
    stats.accepted += n_accepted
    for t in range(k):
        stats.drafted_at[t] += 1
        stats.checked_at[t] += int(t < n_checked)
        stats.accepted_at[t] += int(t < n_accepted)
    stats.draft_passes += k
    stats.target_passes += 1


# ------------------------------------------------------------------------------------------------------------
# Input checks: bad input gets one clear ValueError
# ------------------------------------------------------------------------------------------------------------


def _check_prompt(x, N, rng, models):
    """The prompt as a new list of ints, after checking x, N, rng against the models' n_ctx and n_vocab."""
    x = [int(token) for token in x]
    if len(x) == 0:
        raise ValueError("the prompt x is empty: give at least one token id (e.g. the encoded prompt text)")
    if int(N) != N or N < 0:
        raise ValueError(f"N, the number of tokens to generate, must be a whole number >= 0; got {N}")
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a np.random.Generator, e.g. np.random.default_rng(0); got {type(rng)}")
    for model in models:
        n_ctx = getattr(model, "n_ctx", None)
        if n_ctx is not None and len(x) + N > n_ctx:
            raise ValueError(
                f"the prompt ({len(x)} tokens) + N={N} new tokens = {len(x) + N} tokens is more than the "
                f"model's context of n_ctx={n_ctx}: use a shorter prompt or generate fewer tokens"
            )
        n_vocab = getattr(model, "n_vocab", None)
        if n_vocab is not None and not all(0 <= token < n_vocab for token in x):
            raise ValueError(f"prompt token ids must be in [0, {n_vocab}); got {x}")
    return x


def _shared_vocabulary_size(draft_model, target_model):
    """The models' common n_vocab (None if neither says); a ValueError if they say different things."""
    sizes = {getattr(model, "n_vocab", None) for model in (draft_model, target_model)} - {None}
    if len(sizes) > 1:
        raise ValueError(
            f"the draft and target models have different vocabularies (n_vocab {draft_model.n_vocab} and "
            f"{target_model.n_vocab}): speculative sampling needs models that share one tokenizer"
        )
    return sizes.pop() if sizes else None


def _check_probs(probs, n_rows, n_vocab, who):
    """probs as a float64 array after checking it is [n_rows, n_vocab] of distributions (rows sum to 1 +- 1e-3).

    n_vocab None: any width. `who` names the model in the error message.
    """
    probs = np.asarray(probs, dtype=np.float64)
    if probs.ndim != 2 or probs.shape[0] != n_rows or (n_vocab is not None and probs.shape[1] != n_vocab):
        expected = f"[{n_rows}, {n_vocab if n_vocab is not None else 'n_vocab'}]"
        raise ValueError(
            f"{who} returned probabilities of shape {list(probs.shape)}, expected {expected}; if the widths "
            f"differ, the draft and target models do not share a vocabulary"
        )
    if not probs.min() >= 0:  # also catches NaN: min is NaN then, and NaN >= 0 is False
        raise ValueError(f"{who} returned probabilities that are negative or NaN: {probs.min(axis=-1)}")
    row_sums = probs.sum(axis=-1)  # [n_rows]
    if not np.abs(row_sums - 1).max() <= 1e-3:  # NaN-safe the same way (an inf probability sums to inf)
        raise ValueError(f"{who} returned rows that do not sum to 1 (within 1e-3): row sums {row_sums}")
    return probs
