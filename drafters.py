"""Drafters: where the guesses of a speculative round come from, besides the draft model's own (sampling.py).

Read sampling.py first: its docstring states the drafter contract (`propose(x, k, rng, n_vocab) -> Proposal`)
and its ModelDrafter is Chen et al.'s Step 1. Every drafter here keeps that contract, so the same
`sampling.speculative_stream` verifies all of them, and the proof of exactness in sampling.py covers them all:

    TreeDrafter    a tree of the draft model's top tokens (SpecInfer), scored by the target in one pass;
                   `tree_speculative_sampling` runs it
    PromptLookup   guesses copied from earlier in the text: no model at all, so a draft step is free
    Staged         the draft model's own guesses, made faster by speculative sampling with prompt lookup

A looked-up or top-ranked token was chosen, not sampled, so its row is one-hot (see the contract). How many
guesses each round asks for is lookahead.py's business (K="auto").
"""

import numpy as np

import sampling
from sampling import Proposal, chain_parents


class TreeDrafter:
    """A tree of guesses from a draft model: `branching[d]` candidates under each node of depth d.

    tree(draft_model, (2, 2, 1)) proposes the draft's 2 most likely tokens after x, the 2 most likely after
    each of those, and the most likely after each of the 4: 2 + 4 + 4 = 10 nodes. The draft expands each
    depth's frontier in ONE call (the frontier is always the last nodes, since nodes are listed depth by depth):
    depth 1 asks model(x, 1); depth d > 1 asks model(x + nodes, n=len(frontier), parents=parents).

    Why the TOP tokens and not independent samples of p: both keep the round exact (see sampling._verify), but
    with samples, siblings repeat each other whenever p is peaked (at temperature 0 every sample is the argmax),
    and a repeated candidate can never be kept after its twin was rejected: its row is wasted. The top tokens
    are distinct alternatives. A candidate chosen by rank is deterministic, so its row is one-hot: it is kept
    with probability min(1, q(c)/1) = q(c), and on a rejection q loses c: (q - onehot(c))_+, renormalised.
    Tokens the draft gives probability 0 are never proposed, so at temperature 0 (one-hot draft rows) every
    node has one candidate and the tree is the greedy chain.
    """

    name = "tree"

    def __init__(self, model, branching):
        self.model = model
        self.branching = check_tree(branching)
        self.cost = getattr(model, "cost", None)
        self.n_vocab = getattr(model, "n_vocab", None)
        self.passes = 0

    def propose(self, x, k, rng, n_vocab):
        """The tree cut to its first k depths: Proposal(tokens, parents, one-hot rows). rng is not used."""
        tokens, parents = [], []
        frontier = [-1]  # the nodes whose children come next (-1: x itself)
        for depth, n_children in enumerate(self.branching[:k]):
            if depth == 0:
                p = self.model(x, 1)  # [1, n_vocab]: after x
            elif parents == chain_parents(len(tokens)):  # a chain so far: the plain model-function contract
                p = self.model(x + tokens, len(frontier))  # [1, n_vocab]
            else:
                p = self.model(x + tokens, len(frontier), parents=parents)  # [len(frontier), n_vocab]
            p = sampling._check_probs(p, len(frontier), n_vocab, "the draft model")
            self.passes += 1
            next_frontier = []
            for node, p_row in zip(frontier, p):
                for token in top_tokens(p_row, n_children):
                    tokens.append(token)
                    parents.append(node)
                    next_frontier.append(len(tokens) - 1)
            frontier = next_frontier
        width = p.shape[1] if tokens else (n_vocab or 0)
        rows = np.zeros((len(tokens), width))  # [m, n_vocab]
        rows[np.arange(len(tokens)), tokens] = 1.0  # one-hot: each candidate was chosen, not sampled
        return Proposal(tokens=tokens, parents=parents, rows=rows)


def top_tokens(p_row, n):
    """The n most likely tokens of p_row [n_vocab] that have probability > 0, most likely first (ties: lower
    id first, like np.argmax): top_tokens([0.1, 0.5, 0.0, 0.4], 3) == [1, 3, 0]."""
    order = np.argsort(-p_row, kind="stable")[:n]  # [n]
    return [int(token) for token in order if p_row[token] > 0]


def check_tree(branching):
    """The branching as a tuple of whole numbers >= 1, or a ValueError saying what is wrong."""
    try:
        branching = tuple(branching)
    except TypeError:
        raise ValueError(f"a tree is a tuple of branchings per depth, like (2, 2, 1); got {branching!r}") from None
    if not branching:
        raise ValueError("a tree needs at least one depth, like (2, 2, 1) or (1,) for a one-token chain")
    if any(isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1 for b in branching):
        raise ValueError(f"each branching of a tree must be a whole number >= 1; got {branching}")
    return tuple(int(b) for b in branching)


def tree(draft_model, branching):
    """A TreeDrafter: the draft's top tokens, `branching[d]` under each node of depth d (see TreeDrafter)."""
    return TreeDrafter(draft_model, branching)


def tree_size(branching):
    """Nodes of a tree: tree_size((2, 2, 1)) == 2 + 2*2 + 2*2*1 == 10."""
    return int(sum(np.cumprod(branching)))


def tree_speculative_stream(x, draft, target_model, N, tree, rng, stop_token=None, stats=None):
    """`speculative_stream` with a tree of guesses: `tree` gives the branching per depth (see TreeDrafter).

    (2, 2, 1) proposes 2 candidates after x, 2 under each, 1 under each of those: 10 nodes, scored by the
    target in one pass. (1,) * K is the chain of speculative_stream with K: one code path.
    """
    tree = check_tree(tree)
    x = sampling._check_prompt(x, N, rng, [target_model, draft])  # first, so that a bad prompt or N is named as such
    check_tree_fits(x, N, tree, draft, target_model)
    return sampling.speculative_stream(x, TreeDrafter(draft, tree), target_model, N, len(tree), rng, stop_token, stats)


def check_tree_fits(x, N, tree, draft_model, target_model):
    """A ValueError, before any model runs, if some round of the tree sampler would not fit in a model's context.

    A round that starts with L tokens has k = min(len(tree), T - L - 1) depths (T = len(x) + N): the target
    reads L + tree_size(tree[:k]) tokens, the draft L + tree_size(tree[:k - 1]) (it never expands the last
    depth). Every L from len(x) to T - 1 can occur (rounds that write one token each). Example: a prompt of 50
    tokens, N = 10, n_ctx = 64 and the tree (3, 3, 3) of 39 nodes: the first round needs 50 + 39 = 89
    positions, an error.
    """
    T = len(x) + N
    nodes = [tree_size(tree[:k]) for k in range(len(tree) + 1)]  # nodes[k]: the tree cut to k depths
    for model, own_depths in ((target_model, 0), (draft_model, -1)):
        n_ctx = getattr(model, "n_ctx", None)
        for L in range(len(x), T) if n_ctx is not None else ():
            k = max(0, min(len(tree), T - L - 1) + own_depths)
            if L + nodes[k] > n_ctx:
                raise ValueError(
                    f"the tree {tree} does not fit in the context: a round after {L} tokens (prompt {len(x)}, "
                    f"N={N}) sends {nodes[k]} tree nodes, and {L} + {nodes[k]} > n_ctx={n_ctx} positions; use a "
                    f"smaller tree, a shorter prompt or fewer tokens"
                )


def tree_speculative_sampling(x, draft, target_model, N, tree, rng, stop_token=None, stats=None):
    """x followed by N new tokens sampled by `tree_speculative_stream`, as a list of ints."""
    return sampling._prompt_and_tokens(x, tree_speculative_stream(x, draft, target_model, N, tree, rng, stop_token, stats))


# ------------------------------------------------------------------------------------------------------------
# Prompt lookup: guesses copied from earlier in the text, no model at all
# ------------------------------------------------------------------------------------------------------------


class PromptLookup:
    """Prompt lookup decoding (Saxena 2023; Hugging Face's `prompt_lookup_num_tokens`; llama.cpp's lookup).

    Take the last n tokens of x (n from max_ngram down to min_ngram), find where that n-gram occurred
    before in x (prompt and generated tokens alike; the most recent occurrence wins), and propose the
    tokens that followed it there, up to k. No model runs: cost 0. A looked-up token is not drawn from a
    distribution, so its row is one-hot, and the round stays exact (sampling._verify: kept with probability
    q(token)). No match: an empty proposal, and the round is a plain target step.

    Example, max_ngram=2: x = [5, 6, 7, 8, 5, 6]. The 2-gram (5, 6) ended at position 2 before, followed by
    7, 8, 5, 6: with k = 3 the proposal is [7, 8, 5].

    The index: for each n, a dict {n-gram: the end of its most recent occurrence that has a token after it}.
    Each call indexes only the tokens added since the last call, so a generation of L tokens costs O(L)
    dictionary updates in all, not a rescan of x per round (that would be O(L^2)). A call whose x does not
    extend the indexed tokens (a new prompt, or the guesses of a staged round thrown away) rebuilds it.
    """

    name = "lookup"
    cost = 0.0  # no model pass
    passes = 0

    def __init__(self, max_ngram=3, min_ngram=1):
        for value, what in ((max_ngram, "max_ngram"), (min_ngram, "min_ngram")):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{what} must be a whole number >= 1; got {value!r}")
        if min_ngram > max_ngram:
            raise ValueError(f"min_ngram={min_ngram} is more than max_ngram={max_ngram}: the search goes from "
                             f"max_ngram down to min_ngram")
        self.max_ngram, self.min_ngram = int(max_ngram), int(min_ngram)
        self.tokens = []  # the tokens indexed so far (a prefix of the x of the last call)
        self.last_end = {n: {} for n in range(self.min_ngram, self.max_ngram + 1)}  # n -> {n-gram: end}

    def index(self, x):
        """Bring the index up to date with x: record every n-gram x[e - n : e] that has a token x[e] after it."""
        if x[: len(self.tokens)] != self.tokens:  # not an extension of what was indexed: start again
            self.tokens = []
            self.last_end = {n: {} for n in self.last_end}
        first_new_end = max(len(self.tokens), 1)  # ends e < len(self.tokens) are indexed already
        self.tokens = list(x)
        for end in range(first_new_end, len(x)):  # x[end] follows the n-gram that ends there
            for n, last_end in self.last_end.items():
                if end >= n:
                    last_end[tuple(x[end - n : end])] = end  # later occurrences overwrite: the most recent wins

    def lookup(self, x, k):
        """The (up to) k tokens that followed the most recent earlier occurrence of x's longest suffix n-gram."""
        self.index(x)
        for n in range(self.max_ngram, self.min_ngram - 1, -1):  # the longest suffix first
            end = self.last_end[n].get(tuple(x[len(x) - n :])) if len(x) >= n else None
            if end is not None:  # end < len(x): the suffix itself has no token after it, so it is not found
                return list(x[end : end + k])
        return []

    def propose(self, x, k, rng, n_vocab):
        """Proposal(looked-up tokens, a chain, one-hot rows); empty when nothing matches. rng is not used."""
        tokens = self.lookup(list(x), k)
        rows = np.zeros((len(tokens), n_vocab))  # [m, n_vocab]
        rows[np.arange(len(tokens)), tokens] = 1.0  # deterministic: one-hot
        return Proposal(tokens=tokens, parents=chain_parents(len(tokens)), rows=rows)


def prompt_lookup(max_ngram=3, min_ngram=1):
    """A PromptLookup drafter: guesses copied from after the last earlier match of x's final n-gram."""
    return PromptLookup(max_ngram, min_ngram)


# ------------------------------------------------------------------------------------------------------------
# Staged drafting: the draft model's own proposals made by speculative sampling with prompt lookup
# ------------------------------------------------------------------------------------------------------------


class Staged:
    """Staged speculation (Spector & Re 2023): speculative sampling of the DRAFT, with prompt lookup as its draft.

    The draft model's k guesses are produced by an inner speculative_stream(x, lookup, draft_model, k, K=k):
    lookup guesses, the draft model checks them in one pass, and by the exactness of speculative sampling
    the k tokens that come out are exact samples of the draft's distribution p, as if drawn one by one.
    Their rows are the draft's rows at each position (the inner rounds' target_rows), so the outer round
    checks them with min(1, q/p) exactly as it checks a plain draft's guesses: the outer round stays exact.
    What is gained: where the text repeats itself, the draft makes fewer passes than guesses.
    """

    name = "staged"

    def __init__(self, draft_model, max_ngram=3):
        self.model = draft_model
        self.lookup = PromptLookup(max_ngram)
        self.cost = getattr(draft_model, "cost", None)
        self.n_vocab = getattr(draft_model, "n_vocab", None)
        self.passes = 0

    def propose(self, x, k, rng, n_vocab):
        """k exact samples of the draft model, drawn by the inner speculative rounds, with the draft's rows."""
        tokens, rows = [], []
        for inner_round in sampling.speculative_stream(x, self.lookup, self.model, k, k, rng):
            tokens += inner_round.tokens
            rows += list(inner_round.target_rows)  # p at each position: the draft is the inner target
            self.passes += 1  # one pass of the draft model per inner round
        if not tokens:
            return Proposal.empty(n_vocab or 0)
        return Proposal(tokens=tokens, parents=chain_parents(len(tokens)), rows=np.array(rows))  # rows [k, n_vocab]


def staged(draft_model, max_ngram=3):
    """A Staged drafter: the draft model's guesses, drafted in turn by prompt lookup."""
    return Staged(draft_model, max_ngram)


