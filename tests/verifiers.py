"""Steps 3-4 of a round written out again, right and with one deliberate mistake: the checkers' own samplers.

Read sampling.py's `_verify_chain` and drafters.py's `_verify_tree` first (and do EXERCISES.md's step 9 before
reading this file: it holds an answer).

The tests that check the checkers (tests/test_speculative_exactness.py, tests/test_tree_sampling.py,
tests/test_verify_records.py) swap one of these in for `drafters._verify_tree` (`verifier`) or
`sampling._verify_chain` (`chain_verifier`) WHOLE and show that the graded check fails for it. Swapping in all
of Steps 3-4, not a wrong `_residual` or `_accept`, keeps those tests independent of how a verifier is split
into functions: a correct one that computes the residual inline passes them too.

`verifier(None)` is the rule done right, written as plainly as possible, without sampling.py's helpers (it draws
its uniforms in the same order as `_verify_tree` and `_verify_chain`: one per check, then one for the written
token). Each name in MISTAKES switches on one mistake.
"""

import numpy as np

from records import Check
from sampling import Proposal, chain_parents

MISTAKES = {
    "replacement from the target's row": "after a rejection, the next sibling and the replacement token use the "
    "target's row q, not the residual (for a chain: resampling from q)",
    "same row for every sibling": "every sibling is tried against the target's row q; only the replacement token "
    "comes from a residual (the last sibling's, against q): right for a chain, wrong for a tree",
    "twice the acceptance ratio": "a candidate is kept when u < 2 q/p",
    "a looked-up token kept when merely allowed": "a deterministic (one-hot) candidate is kept whenever "
    "q(token) > 0, not with probability q(token)",
    "Check.q from the node's own row": "the Check records q(token) from the target's row before the earlier "
    "siblings' residual updates",
    "Check.p from the target's row": "the Check records the target's probability of the token as p",
    "Check.u a fresh draw": "the Check records another uniform than the one the decision used",
    "Check.depth counts checks": "the Check's depth is the number of the check in the round, not the token's depth",
    "a Check for every sibling": "the siblings after a kept candidate get a Check too, as if they had been tried",
    "rows off by one": "each written token's row index is the node's index, not node + 1",
    "every last token a bonus": "the token written after a rejection is labelled 'bonus', not 'residual'",
}


def draw(row, rng):
    """One token from the distribution `row` (not necessarily normalised), by inverse CDF with one rng.random()."""
    cdf = np.cumsum(row)  # [n_vocab]
    token = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    return min(token, int(np.flatnonzero(row)[-1]))  # a u rounded up to the total: the last possible token


def residual(q_row, p_row):
    """normalise((q - p)_+), or q itself when that is all zeros."""
    left = np.maximum(q_row - p_row, 0.0)  # [n_vocab]
    return left / left.sum() if left.sum() > 0 else q_row


def verifier(mistake=None):
    """A function with `drafters._verify_tree`'s contract, making the named mistake (None: none; see MISTAKES)."""
    if mistake is not None and mistake not in MISTAKES:
        raise ValueError(f"unknown mistake {mistake!r}; known: {sorted(MISTAKES)}")

    def verify(q, proposal, rng, depths):
        children = {}  # node (-1 for x) -> its children, in proposal order
        for i, parent in enumerate(proposal.parents):
            children.setdefault(parent, []).append(i)
        tokens, origins, checks, rows = [], [], [], []
        node = -1
        while True:
            row = q[node + 1]  # [n_vocab]: the target's distribution after the path to `node`
            rows.append(node if mistake == "rows off by one" else node + 1)
            candidates = children.get(node, [])
            if not candidates:  # Step 4: the bonus token
                tokens.append(draw(row, rng))
                origins.append("bonus")
                return tokens, origins, checks, rows
            tried, replacement = row, row  # the row the next candidate is tried against; the replacement's row
            for j, c in enumerate(candidates):
                token, p_row = proposal.tokens[c], proposal.rows[c]
                u = rng.random()
                ratio = tried[token] / p_row[token] * (2 if mistake == "twice the acceptance ratio" else 1)
                kept = bool(u < ratio)
                if mistake == "a looked-up token kept when merely allowed" and p_row[token] == 1.0:
                    kept = bool(tried[token] > 0)
                checks.append(Check(
                    depth=len(checks) + 1 if mistake == "Check.depth counts checks" else depths[c],
                    token=token,
                    p=float(q[node + 1][token] if mistake == "Check.p from the target's row" else p_row[token]),
                    q=float(row[token] if mistake == "Check.q from the node's own row" else tried[token]),
                    u=float(rng.random()) if mistake == "Check.u a fresh draw" else u,
                    kept=kept,
                ))
                if kept:
                    if mistake == "a Check for every sibling":
                        checks += [Check(depths[s], proposal.tokens[s], float(proposal.rows[s][proposal.tokens[s]]),
                                         float(tried[proposal.tokens[s]]), 0.5, False) for s in candidates[j + 1 :]]
                    break
                if mistake == "same row for every sibling":
                    replacement = residual(row, p_row)
                elif mistake != "replacement from the target's row":
                    tried = replacement = residual(tried, p_row)
            else:  # every candidate was rejected
                tokens.append(draw(replacement, rng))
                origins.append("bonus" if mistake == "every last token a bonus" else "residual")
                return tokens, origins, checks, rows
            tokens.append(token)
            origins.append("draft")
            node = c

    verify.__name__ = f"verify with the mistake {mistake!r}" if mistake else "verify"
    return verify


def chain_verifier(mistake=None):
    """`verifier(mistake)` with `sampling._verify_chain`'s contract: (guesses, p, q, rng) -> (tokens, origins,
    checks), for swapping into the chain round (the mistakes that concern siblings make none on a chain)."""
    verify = verifier(mistake)

    def verify_chain(guesses, p, q, rng):
        proposal = Proposal(tokens=list(guesses), parents=chain_parents(len(guesses)), rows=p)
        tokens, origins, checks, _ = verify(q, proposal, rng, list(range(1, len(guesses) + 1)))
        return tokens, origins, checks

    verify_chain.__name__ = f"verify_chain with the mistake {mistake!r}" if mistake else "verify_chain"
    return verify_chain
