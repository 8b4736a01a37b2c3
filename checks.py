"""Input checks at the entry points: what guards the samplers and the model function, apart from the math.

sampling.py and model_fn.py read like the papers; everything here only makes bad input end in one clear
ValueError that says what was wrong and what to do (never an assert, never a traceback from deep inside):
the prompt, N and the generator; the rows a model returns (distributions of the right shape); what a drafter
proposes; the sampling settings; a model function's call; logits that went NaN because weights are damaged.
Nothing in the algorithm depends on how they are written: a reader can skip this file.
"""

import numpy as np


def check_prompt(x, N, rng, models):
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


def shared_vocabulary_size(draft_model, target_model):
    """The models' common n_vocab (None if neither says); a ValueError if they say different things."""
    sizes = {getattr(model, "n_vocab", None) for model in (draft_model, target_model)} - {None}
    if len(sizes) > 1:
        raise ValueError(
            f"the draft and target models have different vocabularies (n_vocab {draft_model.n_vocab} and "
            f"{target_model.n_vocab}): speculative sampling needs models that share one tokenizer"
        )
    return sizes.pop() if sizes else None


def check_probs(probs, n_rows, n_vocab, who):
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


def check_proposal(proposal, k, n_vocab, who):
    """The depth of each proposed token (1 for a child of x), after checking the proposal is well formed.

    A ValueError naming the drafter for: tokens, parents and rows of different lengths, a parent that does
    not come before its child, a proposal deeper than k, or rows that are not [m, n_vocab] distributions.
    """
    m = len(proposal.tokens)
    if len(proposal.parents) != m or (m and len(proposal.rows) != m):
        raise ValueError(
            f"the drafter {who!r} proposed {m} tokens with {len(proposal.parents)} parents and "
            f"{len(proposal.rows)} rows: a Proposal needs one parent and one row per token (see Proposal)"
        )
    depths = []
    for index, parent in enumerate(proposal.parents):
        if not -1 <= parent < index:
            raise ValueError(
                f"the drafter {who!r} gave token {index} the parent {parent}: a parent must be -1 (x itself) or an "
                f"earlier token's index"
            )
        depths.append(1 if parent == -1 else depths[parent] + 1)
    if max(depths, default=0) > k:
        raise ValueError(f"the drafter {who!r} proposed {max(depths)} tokens deep, more than this round's k={k}")
    if m:
        check_probs(proposal.rows, m, n_vocab, f"the drafter {who!r}")
    return depths


def check_chain(proposal, k, n_vocab, drafter):
    """The vocabulary size (n_vocab, or the width of the proposal's rows when n_vocab is None), after checking
    the proposal (`check_proposal`) and that it is a chain: a tree of guesses goes to drafters.tree_stream."""
    who = getattr(drafter, "name", type(drafter).__name__)
    check_proposal(proposal, k, n_vocab, who)
    if proposal.parents != list(range(-1, len(proposal.tokens) - 1)):  # not a chain
        raise ValueError(
            f"the drafter {who!r} proposed a tree (parents {proposal.parents}): speculative_stream verifies a "
            f"chain of guesses; verify a tree with drafters.tree_stream, which takes the same arguments"
        )
    return proposal.rows.shape[1] if n_vocab is None and len(proposal.tokens) else n_vocab


def check_settings(temperature, top_k, top_p):
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 means greedy decoding); got {temperature}")
    if top_k is not None and (int(top_k) != top_k or top_k < 1):
        raise ValueError(f"top_k must be None or a whole number >= 1; got {top_k}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must be None or in (0, 1]; got {top_p}")


def check_finite(logits):
    """NaN or infinite logits come from damaged weights: decoding them would print garbage ("!" forever)."""
    if not np.isfinite(logits).all():
        n_nan, n_inf = int(np.isnan(logits).sum()), int(np.isinf(logits).sum())
        raise ValueError(
            f"the model produced NaN/inf logits ({n_nan} NaN and {n_inf} infinite of {np.size(logits)}): its weights "
            f"are damaged (NaN or infinite values, or so large that the forward pass overflowed); download or "
            f"convert the checkpoint again"
        )


def check_call(x, n, parents, n_ctx):
    """ValueError, saying what was wrong, for a call the model-function contract does not allow."""
    if len(x) > n_ctx:
        raise ValueError(f"{len(x)} tokens do not fit in the model's context of n_ctx={n_ctx} positions")
    if parents is not None:
        return check_tree_call(x, n, parents)
    if not 1 <= n <= len(x):
        raise ValueError(f"model(x, n) needs 1 <= n <= len(x) = {len(x)}; got n={n}")


def check_tree_call(x, n, parents):
    """ValueError, saying what was wrong, for a tree call the contract does not allow."""
    m = len(parents)
    if not 1 <= m <= len(x):
        raise ValueError(f"parents names the last m tokens of x as tree nodes: 1 <= m <= len(x)={len(x)}; got {m}")
    bad = [i for i, parent in enumerate(parents) if int(parent) != parent or not -1 <= parent < i]
    if bad:
        raise ValueError(f"parents[{bad[0]}] = {parents[bad[0]]}: each parent must be -1 or an earlier node's index")
    if not 1 <= n <= min(m + 1, len(x)):
        raise ValueError(f"model(x, n, parents) gives the rows of the last n of the m + 1 = {m + 1} prefixes "
                         f"(n <= len(x) = {len(x)} too); got n={n}")
