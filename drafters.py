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


# ------------------------------------------------------------------------------------------------------------
# K="auto": each round's lookahead from the cost model and the acceptance seen so far
# ------------------------------------------------------------------------------------------------------------

# r(m): the time of a target pass over m new positions, in 1-position passes, measured with the KV cache on our
# 2-core machines (NumPy's OpenBLAS; 124M, medians; the table of the drafters issue, m = 2..16, with the
# missing m filled in linearly). A multi-row product repacks each weight matrix, so r jumps at m = 2 and then
# stays nearly flat. benchmark_forward.py measures it on your machine; set `target_model.r_table` (a list,
# r_table[m - 1] = r(m)) to use your own figures.
R_TABLE = [1.0, 2.46, 2.74, 2.99, 3.24, 2.99, 2.73, 2.48, 2.92, 3.10, 3.29, 3.47, 3.46, 3.44, 3.43, 3.42]


class AutoK:
    """K="auto": before each round, the k in 0 .. k_max that maximises the expected tokens per unit of time.

    The cost model (Leviathan et al.'s, with the measured r of a multi-row pass): a round with lookahead k
    costs c k + r(k + 1) one-position target steps (c: one draft step; r(k + 1): the target's pass over the last
    token and k guesses) and writes on average 1 + a_1 + a_1 a_2 + ... + a_1 ... a_k tokens, where a_i is the
    chance that guess i is kept given guesses 1 .. i - 1 were (with one a for every position this is
    (1 - a^(k+1)) / (1 - a)). k = 0 is a plain step: 1 token for 1. So a proposal is made only when it is
    expected to beat plain decoding, which is what keeps prompt lookup from losing on prose.

    Where the numbers come from (all fixed before the round, so the same seed gives the same tokens):
    - a_i: kept / checked at draft position i over the rounds so far, with counts that decay by DECAY per
      round (the text changes: a passage being copied, then free prose) and a Beta(1, 1) prior (a = 1/2
      before anything is seen).
    - c: the drafter's `cost` if it gives one (lookup: 0), else the ratio of the draft's and the target's
      weights (`n_params`; a decoding step is memory-bound, so its time goes with the bytes it reads), else 1/2.
    - r(m): `target_model.r_table` if set, else R_TABLE above.
    A drafter that proposes less than k (a lookup that found a short match, or none) costs only what it sent.

    Exploration: a policy that never proposes never learns that proposing has become worth it (a passage
    starts being copied). After PROBE_AFTER declined rounds in a row it proposes once, as a probe: k_max
    guesses from a free drafter (lookup: only the target's pass is paid, and it shows several positions at
    once), one guess from a drafter that runs a model (each guess costs c). Each probe that does not change
    its mind doubles the wait (up to PROBE_AFTER_MAX), so on text where proposals never pay the probes cost a
    vanishing share of the time.
    """

    DECAY = 0.9
    PROBE_AFTER = 4
    PROBE_AFTER_MAX = 64

    def __init__(self, drafter, target_model, k_max):
        if isinstance(k_max, bool) or not isinstance(k_max, (int, np.integer)) or k_max < 1:
            raise ValueError(f"k_max must be a whole number >= 1; got {k_max!r}")
        self.k_max = int(k_max)
        self.c = draft_cost(as_drafter(drafter), target_model)
        r_table = list(getattr(target_model, "r_table", R_TABLE))
        self.r = [r_table[min(m, len(r_table)) - 1] for m in range(1, self.k_max + 2)]  # self.r[m - 1] = r(m)
        self.kept = np.zeros(self.k_max)  # decayed counts of kept guesses, by draft position 1 .. k_max
        self.checked = np.zeros(self.k_max)  # decayed counts of checked guesses
        self.declined_in_a_row = 0
        self.probe_after = self.PROBE_AFTER

    def acceptance(self):
        """[k_max]: a_i, the estimated chance that guess i is kept given the guesses before it were."""
        return (self.kept + 1) / (self.checked + 2)  # Beta(1, 1) prior

    def expected_rate(self, k):
        """Expected tokens per one-position target step of a round with lookahead k."""
        expected_tokens = 1 + np.sum(np.cumprod(self.acceptance()[:k]))  # 1 + a_1 + a_1 a_2 + ...
        return expected_tokens / (self.c * k + self.r[k])

    def choose(self):
        """This round's k: the best by the cost model, or k_max as a probe after a run of declined rounds."""
        best = max(range(self.k_max + 1), key=self.expected_rate)
        if best > 0:
            self.declined_in_a_row, self.probe_after = 0, self.PROBE_AFTER
            return best
        self.declined_in_a_row += 1
        if self.declined_in_a_row > self.probe_after:
            self.declined_in_a_row = 0
            self.probe_after = min(2 * self.probe_after, self.PROBE_AFTER_MAX)
            return self.k_max if self.c == 0 else 1  # a free drafter probes deep; a model draft, one guess
        return 0

    def record(self, round_):
        """Learn from a finished round (a sampling.Round): which draft positions were checked and kept."""
        self.kept *= self.DECAY
        self.checked *= self.DECAY
        for check in round_.checks:
            if check.depth <= self.k_max:
                self.checked[check.depth - 1] += 1
                self.kept[check.depth - 1] += check.kept


class HFSchedule:
    """Hugging Face's heuristic lookahead (assistant models' "heuristic" schedule), for comparison with AutoK:
    start at 5; after a round that kept every guess, k + 2; otherwise k - 1 (never below 1). Costs play no part.
    """

    def __init__(self, drafter, target_model, k_max, k_start=5):
        self.k_max, self.k = k_max, min(k_start, k_max)

    def choose(self):
        return self.k

    def record(self, round_):
        all_kept = round_.k > 0 and len(round_.checks) > 0 and all(check.kept for check in round_.checks)
        self.k = min(self.k + 2, self.k_max) if all_kept else max(self.k - 1, 1)


def draft_cost(drafter, target_model):
    """c: the drafter's `cost` if known, else the draft's weights over the target's (n_params), else 1/2."""
    cost = getattr(drafter, "cost", None)
    if cost is not None:
        return float(cost)
    draft_params = getattr(getattr(drafter, "model", None), "n_params", None)
    target_params = getattr(target_model, "n_params", None)
    if draft_params and target_params:
        return draft_params / target_params
    return 0.5
