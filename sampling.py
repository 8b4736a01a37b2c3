"""Autoregressive and speculative sampling, both written against one model-function contract.

Read model_fn.py first (what a model function is), and skim records.py (what a run records: each Round, and
the statistics). This file is Chen et al.'s Algorithm 2 for a chain of guesses, each step beside the proof that
relies on it; what extends it (other drafters, trees of guesses, K policies) lives beside it, in drafters.py and
lookahead.py, and plugs in at the points named at the end of this docstring.

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

Chen et al.'s Algorithm 2; its step numbers tag the code: `speculative_stream` (a round: Steps 1 and 2),
`_verify_chain` (Steps 3-4), `_accept` and `_residual` (Step 3)
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
proposes x~ ~ p and it is kept with probability min(1, q(x~)/p(x~)) (`_accept`). So x is proposed and kept
with probability p(x) min(1, q(x)/p(x)) = min(p(x), q(x)); some proposal is kept with probability beta; a
rejection happens with probability 1 - beta = sum_x (q(x) - p(x))_+, and then the token is drawn from
normalise((q - p)_+) = (q - p)_+ / (1 - beta) (`_residual`). So the token written is x with probability

    P(x) = min(p(x), q(x)) + (1 - beta) (q(x) - p(x))_+ / (1 - beta)
         = min(p(x), q(x)) + (q(x) - p(x))_+
         = q(x)                                            (the identity; if beta = 1, p = q and no rejection
                                                            happens: the second term is 0 from the start).

The next position is then drawn, by the same argument, from q given the token actually written (drafts after
a rejection are thrown away), and the free extra token of Step 4 is drawn from q itself. By induction every
token has the target's conditional distribution, so the whole sequence does. Nothing in the proof needs p to
be close to q: a bad draft costs speed (more rejections), never correctness; the draft may even give
probability to tokens the target never produces (they are always rejected, because q = 0 there) and
probability 0 to tokens the target can produce (the residual (q - p)_+ supplies them). A guess that was chosen
rather than drawn is a draw from a one-hot row p = onehot(guess): kept with probability q(guess).

The model-function contract
---------------------------
Both samplers see a model only as a function `model(x, n=1) -> probs [n, n_vocab]`: the next-token
distributions after each of the last n prefixes of x. model_fn.py states the contract in full and builds one
from GPT-2 weights; the tests build others from Markov tables. Sampling uses inverse-CDF draws with one
`rng.random()` per token, and accept/reject uses one `rng.random()` per guess, so the same
`np.random.Generator` seed always gives the same tokens.

Beside the core: where the extensions plug in
---------------------------------------------
- Step 1 asks a drafter: `drafter.propose(x, k, rng, n_vocab) -> Proposal` (the drafter contract, in
  `Proposal`'s docstring). A draft model is one (`as_drafter`); drafters.py has others (guesses looked up in
  the text itself, a draft drafted in turn).
- Each round's k comes from `policy.choose(x)`: K itself, or a K policy of lookahead.py (K="auto", "hf").
- A drafter may propose a tree of guesses instead of a chain: drafters.py's "Trees" section verifies those,
  with the proof above extended to siblings (`tree_stream`); on a one-branch tree it writes this file's tokens.
The input checks (prompt, N, rng, probabilities, proposals) are checks.py's, apart from the math: skip them.
"""

from dataclasses import dataclass

import numpy as np

import lookahead
from checks import check_chain, check_probs, check_prompt, shared_vocabulary_size
from records import Check, Round

# ------------------------------------------------------------------------------------------------------------
# Step 1: what a drafter proposes (the drafter contract), and the draft model's own guesses
# ------------------------------------------------------------------------------------------------------------


@dataclass
class Proposal:
    """What a drafter proposes for one round: m guesses and the rows they were drawn from. The drafter contract:

    Speculative sampling needs, each round, a few guessed tokens after the sequence x so far, and for each
    guess the distribution it was drawn from. A drafter gives exactly that:

        proposal = drafter.propose(x, k, rng, n_vocab)     # a Proposal of at most k guesses

        Proposal.tokens   the m guesses, in order (m <= k; m = 0 is allowed: the round is a plain target step)
        Proposal.parents  chain_parents(m) = [-1, 0, 1, ..., m - 2]: each guess follows the one before it
                          (-1: the first follows x itself). drafters.py's trees use other parents.
        Proposal.rows     [m, n_vocab]: rows[t] is the distribution p that tokens[t] was drawn from, given x
                          and the guesses before it. A guess chosen rather than drawn has a one-hot row.

    Worked example: x = [5, 7], k = 2, a vocabulary of 4 tokens. A draft model whose distribution after [5, 7] is
    [0.1, 0.6, 0.2, 0.1] draws token 1; after [5, 7, 1] its distribution is [0.0, 0.0, 0.5, 0.5] and it draws 3:

        Proposal(tokens=[1, 3], parents=[-1, 0],
                 rows=[[0.1, 0.6, 0.2, 0.1],
                       [0.0, 0.0, 0.5, 0.5]])
    """

    tokens: list  # [m] token ids
    parents: list  # [m] chain_parents(m) for a chain
    rows: np.ndarray  # [m, n_vocab] float64: the distribution each token was drawn from

    @staticmethod
    def empty(n_vocab):
        """The proposal of a round that guesses nothing: the round is a plain target step."""
        return Proposal(tokens=[], parents=[], rows=np.zeros((0, n_vocab or 0)))


def chain_parents(m):
    """The parents of a chain of m tokens, each following the one before: chain_parents(3) == [-1, 0, 1]."""
    return list(range(-1, m - 1))


class ModelDrafter:
    """A model function as a drafter: Chen et al.'s Step 1, k tokens sampled one by one from the draft.

    `passes` counts the draft's forward passes (the statistics read it, round by round).
    """

    name = "model"

    def __init__(self, model):
        self.model = model
        self.n_vocab = getattr(model, "n_vocab", None)
        self.passes = 0

    def propose(self, x, k, rng, n_vocab):
        """Step 1: k tokens, each drawn from the draft's distribution after x and the tokens drawn before it."""
        tokens, p = [], []
        for _ in range(k):
            p_next = check_probs(self.model(x + tokens, 1), 1, n_vocab, "the draft model")[0]  # [n_vocab]
            self.passes += 1
            tokens.append(_sample(p_next, rng))
            p.append(p_next)
        if not tokens:
            return Proposal.empty(n_vocab)
        return Proposal(tokens=tokens, parents=chain_parents(k), rows=np.array(p))  # rows [k, n_vocab]


def as_drafter(draft):
    """`draft` itself if it is a drafter (it has a `propose` method), else the model function as a ModelDrafter."""
    if hasattr(draft, "propose"):
        return draft
    if callable(draft):
        return ModelDrafter(draft)
    raise ValueError(
        f"the draft must be a model function `model(x, n) -> probs` or a drafter with a `propose` method "
        f"(see the drafter contract in sampling.Proposal's docstring); got {type(draft).__name__}"
    )


# ------------------------------------------------------------------------------------------------------------
# The samplers, as streams: they yield what they write as they go, so a caller can show it
# ------------------------------------------------------------------------------------------------------------


def autoregressive_stream(x, model, N, rng, stop_token=None, stats=None):
    """Yield N new tokens one by one, each drawn from model(x)[-1] (Chen et al.'s Algorithm 1).

    rng: a np.random.Generator; the same seed gives the same tokens. stop_token: end right after this token
    (it is yielded) even if fewer than N tokens were written. stats: an `AutoregressiveStats` to fill in.
    """
    x = check_prompt(x, N, rng, [model])
    n_vocab = getattr(model, "n_vocab", None)
    for _ in range(N):
        q = check_probs(model(x, 1), 1, n_vocab, "the model")  # [1, n_vocab]
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
    module docstring). draft: the draft model function, or a drafter (see `Proposal`) over the target's
    vocabulary. K: the lookahead, guesses per round (a whole number >= 1; lookahead.py adds "auto" and "hf").
    The last round guesses fewer if fewer tokens remain, so exactly N come out. rng: a np.random.Generator; the
    same seed gives the same tokens. stop_token: end right after this token (it is included; the rest of its
    round is dropped). stats: a `SpeculativeStats` to fill in.
    """
    drafter = as_drafter(draft)
    policy = lookahead.policy(K, drafter, target_model, N)  # each round's k: K itself, or a K policy's choice
    n_vocab = shared_vocabulary_size(drafter, target_model)  # None if neither says
    x = check_prompt(x, N, rng, [target_model, getattr(drafter, "model", None)])

    T = len(x) + N  # the length to reach (Chen et al.'s T)
    index = 0
    while len(x) < T:  # Chen: while n < T
        index += 1
        k = min(policy.choose(x), T - len(x) - 1)  # a round writes <= k + 1 tokens: never past T
        draft_passes = getattr(drafter, "passes", 0)

        # Step 1: the drafter guesses up to k tokens after x, each drawn from its row of p
        proposal = drafter.propose(x, k, rng, n_vocab) if k > 0 else Proposal.empty(n_vocab)
        n_vocab = check_chain(proposal, k, n_vocab, drafter)
        guesses, p = proposal.tokens, proposal.rows  # [m], [m, n_vocab]

        # Step 2: ONE target call gives q[t], the target's distribution after x + guesses[:t], t = 0 .. m
        q = check_probs(target_model(x + guesses, len(guesses) + 1), len(guesses) + 1, n_vocab, "the target model")

        # Steps 3 and 4: keep each guess with probability min(1, q/p); a residual or a bonus token ends the round
        tokens, origins, checks = _verify_chain(guesses, p, q, rng)

        if stop_token in tokens:  # end right after the stop token, as autoregressive sampling does
            cut = tokens.index(stop_token) + 1
            tokens, origins = tokens[:cut], origins[:cut]
            T = len(x) + len(tokens)
        x.extend(tokens)
        round_ = Round(index, k, proposal, checks, tokens, origins, target_rows=q[: len(tokens)])
        if stats is not None:
            stats.count(round_, getattr(drafter, "passes", 0) - draft_passes)
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
# Steps 3 and 4, and the draws (the tests swap in wrong versions to show that they notice)
# ------------------------------------------------------------------------------------------------------------


def _verify_chain(guesses, p, q, rng):
    """Steps 3 and 4 over a chain of m guesses: which are kept, and the token that ends the round.

    guesses [m] were drawn from the rows p [m, n_vocab]; q [m + 1, n_vocab] are the target's rows (q[t]: after
    x + guesses[:t]). For t = 0 .. m - 1: keep guesses[t] with probability min(1, q[t]/p[t]) (`_accept`); on
    the first rejection, draw the round's last token from the residual normalise((q[t] - p[t])_+) (`_residual`)
    and stop. If every guess was kept, Step 4 draws a bonus token from q[m]. One rng.random() per guess tried,
    then one for the token drawn. Returns (tokens, origins, checks): the tokens written, where each came from
    ("draft", "residual" or "bonus"), and one records.Check per guess tried.
    """
    tokens, origins, checks = [], [], []
    for t in range(len(guesses)):  # Step 3
        kept, u = _accept(q[t], p[t], guesses[t], rng)
        checks.append(Check(t + 1, guesses[t], float(p[t][guesses[t]]), float(q[t][guesses[t]]), u, kept))
        if not kept:  # rejected: a token from the residual ends the round
            tokens.append(_sample(_residual(q[t], p[t]), rng))
            origins.append("residual")
            return tokens, origins, checks
        tokens.append(guesses[t])
        origins.append("draft")
    tokens.append(_sample(q[len(guesses)], rng))  # Step 4: every guess was kept, so a bonus token from q[m]
    origins.append("bonus")
    return tokens, origins, checks


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


def _sample(probs, rng):
    """One token id drawn from `probs` [n_vocab] by inverse CDF, with a single rng.random().

    The token is the first whose cumulative probability exceeds u = rng.random() * total (the total is 1 up to
    rounding). Example: probs [0.1, 0.2, 0.3, 0.4] have the cumulative sums [0.1, 0.3, 0.6, 1.0]; u = 0.5 gives
    token 2. A token of probability 0 is never drawn (the cumulative sum does not step up at it).
    """
    cdf = np.cumsum(probs)  # [n_vocab]
    token = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))  # the first token whose cdf is > u
    if token == len(cdf):  # u rounded up to the total: the last token of probability > 0
        token = int(np.flatnonzero(probs)[-1])
    return token
