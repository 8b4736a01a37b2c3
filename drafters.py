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
1-position target step (0.0 for a lookup that runs no model; None when unknown).

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

    def propose(self, x, k, rng, n_vocab):
        """k tokens, each drawn from the draft's distribution after x and the tokens drawn before it."""
        tokens, rows = [], []
        for _ in range(k):
            p_next = sampling._check_probs(self.model(x + tokens, 1), 1, n_vocab, "the draft model")[0]  # [n_vocab]
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
