"""Drafters: where the guesses of a speculative round come from.

The drafter contract
--------------------
Speculative sampling (sampling.py) needs, each round, a few proposed tokens after the sequence x so far,
and for each proposed token the distribution it was drawn from. A drafter gives exactly that:

    proposal = drafter.propose(x, k, rng, n_vocab)     # a Proposal, at most k deep

    Proposal.tokens   the m proposed tokens, in order (m <= k for a chain; m = 0 is allowed)
    Proposal.parents  parents[i] is the index of token i's parent among the proposed tokens, or -1 when
                      token i follows x directly: a chain is [-1, 0, 1, ..., m - 2]; a tree has siblings
    Proposal.rows     [m, n_vocab]: rows[i] is the distribution tokens[i] was drawn from, given x and the path
                      to its parent. A deterministic proposal (a token looked up, not sampled) has a one-hot
                      row: it was "drawn" from a distribution that is certain of it.

A round with no proposal (k = 0, or m = 0) is a plain target step: one target position, one token.
Siblings (tokens with the same parent) must be drawn independently of each other given that parent.

Worked example: x = [5, 7], k = 2, a vocabulary of 4 tokens. A draft model whose distribution after [5, 7] is
[0.1, 0.6, 0.2, 0.1] draws token 1; after [5, 7, 1] its distribution is [0.0, 0.0, 0.5, 0.5] and it draws 3:

    Proposal(tokens=[1, 3], parents=[-1, 0],
             rows=[[0.1, 0.6, 0.2, 0.1],
                   [0.0, 0.0, 0.5, 0.5]])

A prompt-lookup drafter that finds "7 1 3" earlier in x proposes the same tokens with one-hot rows
[[0, 1, 0, 0], [0, 0, 0, 1]].

Every drafter also has a `name` (for reports) and a `cost`: the time of one draft step as a fraction of one
1-position target step (0.0 for a lookup that runs no model; None when unknown). A drafter that runs a model
counts its forward passes in `passes` (the samplers' statistics read it; 0 or absent for none).

A model function (sampling.py's contract, `model(x, n) -> probs [n, n_vocab]`) is a drafter too: `as_drafter`
wraps it as Chen et al.'s Step 1, k tokens sampled one by one. So wherever a drafter is accepted, a model
function is.
"""

from dataclasses import dataclass

import numpy as np

import sampling


@dataclass
class Proposal:
    """What a drafter proposes for one round (see the module docstring): m tokens, their parents, their rows."""

    tokens: list  # [m] token ids, parents first
    parents: list  # [m] index of each token's parent among `tokens`, or -1 for a child of x
    rows: np.ndarray  # [m, n_vocab] float64: the distribution each token was drawn from

    @staticmethod
    def empty(n_vocab):
        """The proposal of a drafter that declines: no tokens, so the round is a plain target step."""
        return Proposal(tokens=[], parents=[], rows=np.zeros((0, n_vocab)))


def chain_parents(m):
    """The parents of a chain of m tokens, each following the one before: chain_parents(3) == [-1, 0, 1]."""
    return list(range(-1, m - 1))


class ModelDrafter:
    """A model function as a drafter: Chen et al.'s Step 1, k tokens sampled one by one from the draft."""

    name = "model"

    def __init__(self, model):
        self.model = model
        self.cost = getattr(model, "cost", None)
        self.n_vocab = getattr(model, "n_vocab", None)
        self.passes = 0  # forward passes of the draft model so far (the samplers count them per round)

    def propose(self, x, k, rng, n_vocab):
        """k tokens, each drawn from the draft's distribution after x and the tokens drawn before it."""
        tokens, rows = [], []
        for _ in range(k):
            p_next = sampling._check_probs(self.model(x + tokens, 1), 1, n_vocab, "the draft model")[0]  # [n_vocab]
            self.passes += 1
            tokens.append(sampling._sample(p_next, rng))
            rows.append(p_next)
        if not tokens:
            return Proposal.empty(n_vocab or 0)
        return Proposal(tokens=tokens, parents=chain_parents(len(tokens)), rows=np.array(rows))  # rows [k, n_vocab]


def as_drafter(draft):
    """`draft` itself if it is a drafter (it has a `propose` method), else the model function as a ModelDrafter."""
    if hasattr(draft, "propose"):
        return draft
    if callable(draft):
        return ModelDrafter(draft)
    raise ValueError(
        f"the draft must be a model function `model(x, n) -> probs` or a drafter with a `propose` method "
        f"(see drafters.py); got {type(draft).__name__}"
    )


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
