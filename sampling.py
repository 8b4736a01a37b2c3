"""Autoregressive and speculative sampling, both written against one model-function contract.

Read model_fn.py first (what a model function is), and skim records.py (what a run records: each Round, and
the statistics); lookahead.py (how many guesses a round makes) and drafters.py (where else guesses come from)
build on this file. It is longer than the others because it holds Chen et al.'s
Algorithm 2 whole, each step beside the proof that relies on it: splitting it would split the proof.

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

Chen et al.'s Algorithm 2; its step numbers tag the code: `speculative_stream` (a round), `_score` (Step 2),
`_verify` (Steps 3-4), `_accept` and `_residual` (Step 3)
-------------------------------------------------------------------------------------------------------------
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
In Step 3 the ratio is evaluated at the drafted token x = x~_t, and "sample from (q - p)_+" means from its
normalised form (the paper writes (f)_+ for "max(f, 0) normalised"; this file does not, see the notation
below). The transcription keeps three index slips of the paper; read them as follows:
- t names two things: the prompt's last index (x_0, ..., x_t; n <- t) and the loop variable of Steps 1 and 3.
  The loops' t counts the guesses of the round, 1 .. K.
- Step 3 increments n on every kept guess AND indexes x_{n+t}: read every index in Steps 1-4 with n frozen at
  its value when the round began (x_{n+t} is the round's t-th new token), and add the tokens written at the end.
- Step 4's free token is conditioned on the whole accepted sequence x_1, ..., x_{n+K} (the paper prints
  "x_1, ..., x_n, x_{n+K}", dropping the "..." between x_n and x_{n+K}).

Notation used everywhere in this file: (f)_+ = max(f, 0), elementwise, NOT normalised;
normalise(f) = f / sum_x f(x). The residual distribution drawn from after a rejection is normalise((q - p)_+).

Two details this implementation adds: the last round drafts only as many tokens as still fit, so exactly N
tokens come out and the target never reads past the prompt + N positions; and an optional stop token ends
sampling right after it appears (both samplers, the same way).

Why the output is distributed exactly as the target's
-----------------------------------------------------
The proof rests on one identity, true for any two distributions q and p and every token x:

    q(x) = min(p(x), q(x)) + (q(x) - p(x))_+

(if q(x) <= p(x) the two terms are q(x) and 0; otherwise p(x) and q(x) - p(x)). Summed over x it says
1 = beta + sum_x (q(x) - p(x))_+, where beta = sum_x min(p(x), q(x)).

Take one position, with target distribution q and draft distribution p over the vocabulary. The draft
proposes x~ ~ p and it is kept with probability min(1, q(x~)/p(x~)). So x is proposed and kept with
probability p(x) min(1, q(x)/p(x)) = min(p(x), q(x)); some proposal is kept with probability beta; a rejection
happens with probability 1 - beta = sum_x (q(x) - p(x))_+, and then the token is drawn from
normalise((q - p)_+) = (q - p)_+ / (1 - beta). So the token written is x with probability

    P(x) = min(p(x), q(x)) + (1 - beta) (q(x) - p(x))_+ / (1 - beta)
         = min(p(x), q(x)) + (q(x) - p(x))_+
         = q(x)                                            (the identity; if beta = 1, p = q and no rejection
                                                            happens: the second term is 0 from the start).

The next position is then drawn, by the same argument, from q given the token actually written (drafts after
a rejection are thrown away), and the free extra token of Step 4 is drawn from q itself. By induction every
token has the target's conditional distribution, so the whole sequence does. Nothing in the proof needs p to
be close to q: a bad draft costs speed (more rejections), never correctness; the draft may even give
probability to tokens the target never produces (they are always rejected, because q = 0 there) and
probability 0 to tokens the target can produce (the residual (q - p)_+ supplies them).

Trees (SpecInfer's rule, `_verify`): the same identity, applied once per sibling. Fix a node whose target
row is q, with candidates c_1 .. c_s, candidate c_j drawn from its row p_j. Let q_1 = q and
q_{j+1} = normalise((q_j - p_j)_+), the row the next candidate is tried against after c_j is rejected, and
beta_j = sum_x min(p_j(x), q_j(x)).
Claim: "try c_j against q_j, c_{j+1} against q_{j+1}, ..., else draw from q_{s+1}" writes a token
distributed as q_j. For j = s + 1 it is a draw from q_{s+1} itself. For j <= s, by the claim for j + 1:

    P(x) = p_j(x) min(1, q_j(x)/p_j(x)) + P(c_j rejected) P(x written from c_{j+1} on | c_j rejected)
         = min(p_j(x), q_j(x))          + (1 - beta_j) (q_j(x) - p_j(x))_+ / (1 - beta_j)  =  q_j(x)

by the identity q = min(p, q) + (q - p)_+ above. Two things make the second line true:
- the residual update: the candidates after c_j must be tried against q_{j+1}, the part of q_j that
  keeping c_j could not hand out. Trying them against q_j again gives tokens that c_j already offered a
  second chance (the tests' wrong rule (a) does that and fails).
- independent siblings: "P(x written from c_{j+1} on | c_j rejected) = q_{j+1}(x)" needs c_{j+1}, .., c_s
  and their uniforms to be independent of c_j and u_j, so that knowing c_j was rejected says nothing about
  them. Siblings drawn independently from p (with replacement), or fixed in advance, qualify; a sibling
  whose draw depends on an earlier sibling (chosen after seeing whether c_j was kept, say) is not covered.
So the token written at this depth has distribution q (j = 1). If it is a kept candidate c, the round
goes on under c, whose children were drawn from the draft given the path to c only; the same argument
one depth down writes the next token from the target's row after the path: by induction every written
token has the target's distribution given the tokens before it, as in the chain's proof. A kept leaf's
free token and a node without candidates are plain draws from q.
Deterministic candidates (drafters.tree's top tokens, a looked-up token) are draws from one-hot rows
p_j = onehot(c_j) (constants: independent of everything): c_j is kept with probability
min(1, q_j(c_j)/1) = q_j(c_j), and normalise((q_j - onehot(c_j))_+) is q_j with c_j removed, renormalised.
One candidate per node (a chain) makes this exactly Chen et al.'s Steps 3-4.

The model-function contract
---------------------------
Both samplers see a model only as a function `model(x, n=1) -> probs [n, n_vocab]`: the next-token
distributions after each of the last n prefixes of x (and, for trees, `model(x, n, parents)`). model_fn.py
states the contract in full and builds one from GPT-2 weights; the tests build others from Markov tables.

The drafter contract
--------------------
Speculative sampling needs, each round, a few proposed tokens after x and, for each, the distribution it was
drawn from: `drafter.propose(x, k, rng, n_vocab) -> Proposal`. `Proposal`'s docstring states the contract with
a worked example; `as_drafter` makes a model function one (Chen et al.'s Step 1), and drafters.py has the rest.

Sampling uses inverse-CDF draws with one `rng.random()` per token, and accept/reject uses one `rng.random()`
per draft token, so the same `np.random.Generator` seed always gives the same tokens.
"""

import dataclasses
from dataclasses import dataclass

import numpy as np

import lookahead
from records import Check, Round

# ------------------------------------------------------------------------------------------------------------
# Step 1: what a drafter proposes (the drafter contract), and the draft model's own guesses
# ------------------------------------------------------------------------------------------------------------


@dataclass
class Proposal:
    """What a drafter proposes for one round: m tokens, their parents, their rows. The drafter contract:

    Speculative sampling needs, each round, a few proposed tokens after the sequence x so far,
    and for each proposed token the distribution it was drawn from. A drafter gives exactly that:

        proposal = drafter.propose(x, k, rng, n_vocab)     # a Proposal, at most k deep

        Proposal.tokens   the m proposed tokens, in order (m <= k for a chain; m = 0 is allowed)
        Proposal.parents  parents[i] is the index of token i's parent among the proposed tokens, or -1 when
                          token i follows x directly: a chain is [-1, 0, 1, ..., m - 2]; a tree has siblings
        Proposal.rows     [m, n_vocab]: rows[i] is the distribution tokens[i] was drawn from, given x and the path
                          to its parent. A deterministic proposal (a token looked up, not sampled) has a one-hot
                          row: it was "drawn" from a distribution that is certain of it.
        Proposal.match_length   optional (default 0): for guesses copied from earlier in x (prompt lookup), how
                          many of x's last tokens matched where they were copied from. K="auto" trusts a long
                          match more than a short one; such a drafter also has `match_length(x)`, which tells the
                          length before proposing (lookahead.AutoK asks it when choosing the round's k).

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

    A model function (model_fn.py's contract, `model(x, n) -> probs [n, n_vocab]`) is a drafter too: `as_drafter`
    wraps it as Chen et al.'s Step 1, k tokens sampled one by one. So wherever a drafter is accepted, a model
    function is.
    drafters.py has the other drafters (prompt lookup, staged drafting, trees).
    """

    tokens: list  # [m] token ids, parents first
    parents: list  # [m] index of each token's parent among `tokens`, or -1 for a child of x
    rows: np.ndarray  # [m, n_vocab] float64: the distribution each token was drawn from
    match_length: int = 0  # prompt lookup: how many of x's last tokens the guesses follow (0: not a lookup)

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
            p_next = _check_probs(self.model(x + tokens, 1), 1, n_vocab, "the draft model")[0]  # [n_vocab]
            self.passes += 1
            tokens.append(_sample(p_next, rng))
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
        f"(see the drafter contract in sampling.py's docstring); got {type(draft).__name__}"
    )


# ------------------------------------------------------------------------------------------------------------
# The samplers, as streams: they yield what they write as they go, so a caller can show it
# ------------------------------------------------------------------------------------------------------------


def autoregressive_stream(x, model, N, rng, stop_token=None, stats=None):
    """Yield N new tokens one by one, each drawn from model(x)[-1] (Chen et al.'s Algorithm 1).

    rng: a np.random.Generator; the same seed gives the same tokens. stop_token: end right after this token
    (it is yielded) even if fewer than N tokens were written. stats: an `AutoregressiveStats` to fill in.
    """
    x = _check_prompt(x, N, rng, [model])
    n_vocab = getattr(model, "n_vocab", None)
    for _ in range(N):
        q = _check_probs(model(x, 1), 1, n_vocab, "the model")  # [1, n_vocab]
        token = _sample(q[0], rng)
        x.append(token)
        if stats is not None:
            stats.tokens += 1
            stats.target_passes += 1
        yield token
        if token == stop_token:
            return


def autoregressive_sampling(x, model, N, rng, stop_token=None, stats=None):
    """x followed by the N new tokens of `autoregressive_stream` (fewer after a stop token), as a list of ints."""
    return [int(token) for token in x] + list(autoregressive_stream(x, model, N, rng, stop_token, stats))


def speculative_stream(x, draft, target_model, N, K, rng, stop_token=None, stats=None):
    """Yield one `Round` per round of speculative sampling (Chen et al.'s Algorithm 2) until N tokens are written.

    The tokens are distributed exactly as `autoregressive_sampling(x, target_model, N, ...)`'s (see the
    module docstring). draft: a model function or a drafter (drafters.py) over the target's vocabulary.
    K: lookahead, the deepest a round's proposal may go (a whole number >= 1); or "auto": lookahead.AutoK picks
    each round's k (0 allowed: a plain step) from the cost model and the rounds before it; or "hf": Hugging
    Face's schedule (lookahead.HFSchedule), for comparison. The last round proposes less if fewer tokens remain, so
    exactly N come out. rng: a np.random.Generator; the same seed gives the same tokens. stop_token: end right
    after this token (it is included; the rest of its round is dropped). stats: a `SpeculativeStats` to fill in.
    """
    drafter = as_drafter(draft)
    policy = None
    if K in ("auto", "hf"):  # a policy picks each round's k: the cost model's (AutoK) or Hugging Face's schedule
        policy_class = lookahead.AutoK if K == "auto" else lookahead.HFSchedule
        policy = policy_class(drafter, target_model, k_max=max(1, min(lookahead.AUTO_K_MAX, N - 1)))
    elif isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 1:
        raise ValueError(f'the lookahead K must be a whole number >= 1, "auto" or "hf"; got {K!r}')
    n_vocab = _shared_vocabulary_size(drafter, target_model)  # None if neither says
    x = _check_prompt(x, N, rng, [target_model, getattr(drafter, "model", None)])

    T = len(x) + N  # the length to reach (Chen et al.'s T)
    index = 0
    while len(x) < T:  # Chen: while n < T
        index += 1
        k = min(policy.choose(x) if policy else K, T - len(x) - 1)  # writes <= k + 1 tokens, never past T
        draft_passes_before = getattr(drafter, "passes", 0)

        # Step 1: the drafter proposes a chain (or a tree) of at most k tokens after x
        proposal = drafter.propose(x, k, rng, n_vocab) if k > 0 else Proposal.empty(n_vocab or 0)
        depths = _check_proposal(proposal, k, n_vocab, getattr(drafter, "name", type(drafter).__name__))
        if n_vocab is None and len(proposal.tokens):
            n_vocab = proposal.rows.shape[1]  # the drafter showed its vocabulary size; the target must match it

        # Step 2: ONE pass of the target scores x and every proposed token: q[0] after x, q[i + 1] after the
        # path from x to token i
        q = _score(target_model, x, proposal, n_vocab)  # [m + 1, n_vocab]

        # Steps 3 and 4: keep guesses by min(1, q/p), descending the tree; a residual or a bonus token ends it
        tokens, origins, checks, rows = _verify(q, proposal, rng, depths)

        if stop_token in tokens:  # end right after the stop token, as autoregressive sampling does
            cut = tokens.index(stop_token) + 1
            tokens, origins, rows = tokens[:cut], origins[:cut], rows[:cut]
            T = len(x) + len(tokens)
        x.extend(tokens)
        round_ = Round(index, k, proposal, checks, tokens, origins, target_rows=q[rows])
        if stats is not None:
            _count_round(stats, round_, depths, getattr(drafter, "passes", 0) - draft_passes_before)
        if policy is not None:
            policy.record(round_)
        yield round_


def speculative_sampling(x, draft, target_model, N, K, rng, stop_token=None, stats=None):
    """x followed by N new tokens (fewer after a stop token), sampled by `speculative_stream`, as a list of ints."""
    return _prompt_and_tokens(x, speculative_stream(x, draft, target_model, N, K, rng, stop_token, stats))


def _prompt_and_tokens(x, rounds):
    """The prompt x as ints, followed by the tokens every Round of `rounds` wrote."""
    x = [int(token) for token in x]
    for round_ in rounds:
        x.extend(round_.tokens)
    return x


# ------------------------------------------------------------------------------------------------------------
# The steps of a round, as small functions (the tests swap in wrong versions to show that they notice)
# ------------------------------------------------------------------------------------------------------------


def _score(target_model, x, proposal, n_vocab):
    """Step 2: the target's m + 1 distributions after x and after the path to each proposed token, in ONE call.

    A chain is asked for without `parents`, so a model function that knows no trees still serves as a target.
    """
    m = len(proposal.tokens)
    if proposal.parents == list(range(-1, m - 1)):  # a chain: the plain contract
        probs = target_model(x + proposal.tokens, m + 1)  # [m + 1, n_vocab]
    else:
        probs = target_model(x + proposal.tokens, m + 1, parents=proposal.parents)  # [m + 1, n_vocab]
    return _check_probs(probs, m + 1, n_vocab, "the target model")


def _verify(q, proposal, rng, depths):
    """Steps 3 and 4 over a chain or a tree: SpecInfer's multi-candidate speculative sampling (Miao et al. 2023).

    Start at x. Try the children of the current node in turn: candidate c, drawn from the row p_c, is kept
    with probability min(1, q(c)/p_c(c)); on a rejection the target's row becomes the residual
    normalise((q - p_c)_+) before the next candidate is tried. If one is kept, descend under it and go on; if all are
    rejected, draw a token from the last residual and stop ("residual"); at a node with no children (a kept
    leaf, or x itself when nothing was proposed), draw Step 4's free token from the target's row ("bonus").
    With one child per node this is exactly Chen et al.'s Steps 3-4.

    Why this is exact: the module docstring's proof, for trees (the tree tests check it).

    Returns (tokens, origins, checks, rows): the written tokens, their origins, the Checks made, and for each
    written token the index of its target row in q (0 for x, i + 1 for token i).
    """
    children = {}  # node index (-1 for x) -> its children, in proposal order
    for i, parent in enumerate(proposal.parents):
        children.setdefault(parent, []).append(i)

    tokens, origins, checks, rows = [], [], [], []
    node = -1
    while True:
        q_row = q[node + 1]  # [n_vocab]: the target's distribution after the path to `node`
        rows.append(node + 1)
        candidates = children.get(node, [])
        if not candidates:  # Step 4: every guess on the path was kept (or none was proposed)
            tokens.append(_sample(q_row, rng))
            origins.append("bonus")
            return tokens, origins, checks, rows
        residual = q_row
        for c in candidates:  # Step 3, for each candidate in turn
            token, p_row = proposal.tokens[c], proposal.rows[c]
            kept, u = _accept(residual, p_row, token, rng)
            checks.append(Check(depths[c], token, float(p_row[token]), float(residual[token]), u, kept))
            if kept:
                break
            residual = _residual(residual, p_row)
        else:  # every candidate was rejected: a token from the last residual ends the round
            tokens.append(_sample(residual, rng))
            origins.append("residual")
            return tokens, origins, checks, rows
        tokens.append(token)
        origins.append("draft")
        node = c


def _accept(q_row, p_row, token, rng):
    """Step 3: keep the proposed `token` with probability min(1, q(token) / p(token)). Returns (kept, u).

    p(token) > 0, because the token was drawn from p. At temperature 0 both rows are one-hot and p(token)
    is 1, so this keeps the guess exactly when the target's greedy choice is the same token.
    """
    u = rng.random()  # u ~ U[0, 1)
    return bool(u < q_row[token] / p_row[token]), u  # u < q/p has probability min(1, q/p)


def _residual(q_row, p_row):
    """Step 3, on a rejection: the residual distribution normalise((q - p)_+), where (f)_+ = max(f, 0).

    Its total, sum (q - p)_+ = 1 - beta, is the chance of a rejection, so it is > 0 whenever a rejection can
    happen. Only rows that are equal up to rounding can reach here with a total of 0; then q is the answer.
    """
    residual = np.maximum(q_row - p_row, 0.0)  # [n_vocab]
    total = residual.sum()
    return residual / total if total > 0 else q_row



def _sample(probs, rng, block_size=1024):
    """One token id drawn from `probs` [n_vocab] by inverse CDF with a single rng.random().

    The token is the first whose cumulative probability exceeds u = rng.random() * total. A token of
    probability 0 is never drawn (the cumulative sum does not step up at it).

    A cumulative sum over all 50257 tokens is a sequential loop, timed in docs/BENCHMARKS.md's
    "Speed of the forward pass", so the search has two levels: the sums of blocks of block_size tokens (a
    vectorised sum), the block where their cumulative sum passes u, then a cumulative sum inside that block only.
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


def _count_round(stats, round_, depths, draft_passes):
    """Add one Round to a SpeculativeStats. depths[i] is the depth of proposed token i (1 for a child of x)."""
    k_deepest = max(depths, default=0)
    for counts in (stats.drafted_at, stats.checked_at, stats.accepted_at):  # one counter per draft position
        counts += [0] * (k_deepest - len(counts))
    for depth in depths:
        stats.drafted_at[depth - 1] += 1
    for check in round_.checks:
        stats.checked_at[check.depth - 1] += 1
        stats.accepted_at[check.depth - 1] += int(check.kept)
    n_kept = sum(check.kept for check in round_.checks)
    stats.rounds += 1
    stats.tokens += len(round_.tokens)
    stats.drafted += len(depths)
    stats.checked += len(round_.checks)
    stats.accepted += n_kept
    stats.draft_passes += draft_passes
    stats.target_passes += 1
    stats.ks.append(round_.k)
    stats.nodes += len(depths)
    stats.matched_rounds += int(len(depths) > 0)
    stats.accepted_depths.append(n_kept)
    stats.round_log.append(dataclasses.replace(round_, target_rows=None, proposal=_without_rows(round_.proposal)))


def _without_rows(proposal):
    """The proposal with its [m, n_vocab] rows dropped (None), for the round log."""
    return dataclasses.replace(proposal, rows=None)


def _check_proposal(proposal, k, n_vocab, who):
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
    for i, parent in enumerate(proposal.parents):
        if not -1 <= parent < i:
            raise ValueError(
                f"the drafter {who!r} gave token {i} the parent {parent}: a parent must be -1 (x itself) or an "
                f"earlier token's index"
            )
        depths.append(1 if parent == -1 else depths[parent] + 1)
    if max(depths, default=0) > k:
        raise ValueError(f"the drafter {who!r} proposed {max(depths)} tokens deep, more than this round's k={k}")
    if m:
        _check_probs(proposal.rows, m, n_vocab, f"the drafter {who!r}")
    return depths



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
