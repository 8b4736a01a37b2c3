"""How many guesses a round should propose: the cost model of a round, and the K policies that plan with it.

Read sampling.py first (a round, its Steps 1-4); drafters.py after (where guesses come from). sampling.py asks
`policy(K, ...)` here for the object whose `choose(x)` gives each round's k and whose `record(round_)` learns from
the round: K itself (FixedK), K="auto" (AutoK) or K="hf" (HFSchedule). tools/benchmark.py prints the same
formulas as tables.

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
  yields (1 - alpha^(K + 1)) / (1 - alpha) tokens on average (Leviathan et al., equation 1). In two lines: a
  round writes at least i tokens (i = 1 .. K + 1) exactly when its first i - 1 guesses are kept, probability
  alpha^(i - 1); so E[tokens] = sum_{i=1..K+1} P(tokens >= i) = 1 + alpha + ... + alpha^K, a geometric series.
"""

import bisect

import numpy as np

AUTO_K_MAX = 16  # K="auto" never proposes deeper than this: a 17-row pass, the most r(m) is calibrated for


# ------------------------------------------------------------------------------------------------------------
# The model of the cost
# ------------------------------------------------------------------------------------------------------------


def tokens_per_round(alpha, K):
    """Expected tokens a round writes: 1 + alpha + ... + alpha^K (= (1 - alpha^(K+1)) / (1 - alpha) for alpha < 1).

    tokens_per_round(0.8, 4) = 1 + 0.8 + 0.64 + 0.512 + 0.4096 = 3.3616; alpha = 1 gives K + 1.
    """
    return sum(alpha**i for i in range(K + 1))


def predicted_speedup(alpha, K, c, r=1.0):
    """(1 - alpha^(K+1)) / ((1 - alpha) (c K + r)); r = 1 is Leviathan et al.'s formula.

    Example: alpha 0.8, K 4, c 0.4: Leviathan 3.3616 / 2.6 = 1.29x; with r = 2.5: 3.3616 / 4.1 = 0.82x.
    """
    return tokens_per_round(alpha, K) / (c * K + r)


def break_even_alpha(K, c, r=1.0):
    """The alpha at which the predicted speedup is 1 (bisection; it grows with alpha), or None if it never is.

    At alpha = 1 the speedup is (K + 1) / (c K + r): if that is <= 1, no alpha wins.
    """
    if predicted_speedup(1.0, K, c, r) <= 1:
        return None
    low, high = 0.0, 1.0
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (middle, high) if predicted_speedup(middle, K, c, r) < 1 else (low, middle)
    return (low + high) / 2


# ------------------------------------------------------------------------------------------------------------
# The K policies: where a round's k comes from (sampling.speculative_stream asks `policy(K, ...)`)
# ------------------------------------------------------------------------------------------------------------


def policy(K, drafter, target_model, N):
    """The K policy of a run of N tokens: FixedK(K) for a whole number K >= 1; AutoK for "auto", HFSchedule for
    "hf" (both at most min(AUTO_K_MAX, N - 1) deep). A ValueError for any other K."""
    if isinstance(K, str) and K in ("auto", "hf"):
        policy_class = AutoK if K == "auto" else HFSchedule
        return policy_class(drafter, target_model, k_max=max(1, min(AUTO_K_MAX, N - 1)))
    if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 1:
        raise ValueError(f'the lookahead K must be a whole number >= 1, "auto" or "hf"; got {K!r}')
    return FixedK(K)


class FixedK:
    """K as given: every round proposes k = K guesses (fewer only when fewer tokens remain)."""

    def __init__(self, K):
        self.k = int(K)

    def choose(self, x=None):
        return self.k

    def record(self, round_):
        pass


# ------------------------------------------------------------------------------------------------------------
# K="auto": each round's lookahead from the cost model and the acceptance seen so far
# ------------------------------------------------------------------------------------------------------------

# r(m): the time of a target pass over m new positions, in 1-position passes, measured with the KV cache on an Intel
# Xeon with 2 cores (NumPy's OpenBLAS; 124M, medians after 512 cached tokens, by tools/benchmark_forward.py in a run
# before the one docs/BENCHMARKS.md's r(m) table shows: a run's figures differ from the next one's). speed/products.py
# multiplies a few rows panel by panel, a share of the columns in a helper process on each other core, so r stays near 1
# for two positions and then grows far more slowly than m, as the arithmetic catches up with the reading of the weights.
# speed/calibration.py's `calibrate` measures it on your machine (main.py does, before its timed runs; so does
# tools/benchmark_text.py); set `target_model.r_table` (a list, r_table[m - 1] = r(m)) to use your own figures. This
# table holds r(1) .. r(16); a 17-row pass (16 guesses) is costed at r(16), the table's last figure, as any shorter
# r_table's last figure stands for the rows it lacks (`AutoK`).
R_TABLE = [1.00, 1.04, 1.24, 1.26, 1.46, 1.50, 1.64, 1.61, 1.81, 1.94, 2.04, 2.01, 2.14, 2.17, 2.37, 2.35]

# o: what a round that proposes costs beyond its target pass, in one-position target steps (AutoK's docstring), where
# nothing measured it: speed/calibration.py's `calibrate` measures it with r(m), and the costs' `use(target_model)`
# sets `target_model.round_overhead`.
ROUND_OVERHEAD = 0.1


MATCH_BUCKETS = (1, 2, 4, 8, 16)  # the shortest match of each bucket: 1, 2-3, 4-7, 8-15, 16 and more tokens


def match_bucket(n):
    """The bucket of a match n >= 1 tokens long: 1 -> 0, 2-3 -> 1, 4-7 -> 2, 8-15 -> 3, 16 and more -> 4."""
    return bisect.bisect_right(MATCH_BUCKETS, n) - 1


class AutoK:
    """K="auto": before each round, the k in 0 .. k_max that maximises the expected tokens per unit of time.

    The cost model (Leviathan et al.'s, with the measured r of a multi-row pass and a round's overhead): a
    round with lookahead k >= 1 costs c k + r(k + 1) + o one-position target steps (c: one draft step;
    r(k + 1): the target's pass over the last token and k guesses; o: what a proposing round costs beyond
    its passes, see below) and writes on average 1 + a_1 + a_1 a_2 + ... + a_1 ... a_k tokens, where a_i is
    the chance that guess i is kept given guesses 1 .. i - 1 were (with one a for every position this is
    (1 - a^(k+1)) / (1 - a)). k = 0 is a plain step: 1 token for 1. So a proposal is made only when it is
    expected to beat plain decoding, which is what keeps prompt lookup from losing on prose. In one line:

        k* = argmax over k = 0 .. k_max of  (1 + sum_{j=1..k} a_1 a_2 ... a_j) / (c k + r(k + 1) + o [k > 0])

    o, the overhead of a proposing round (`target_model.round_overhead`, as calibrate measures it, else
    ROUND_OVERHEAD = 0.1 steps): r(m) times the target's pass alone, but a round that proposes also pays for
    what surrounds it, beyond what a plain step pays: the proposal, m rows checked, Steps 3-4 (a rejection
    draws from the residual), the Round's records. calibrate times that work on this machine, the pass left
    out (speed/calibration.round_overhead_seconds): a fraction of a millisecond, so a hundredth of a step or
    so where steps are fast, less where they are slower. Where a two-row pass costs barely more than one,
    that decides a one-guess round: with r(2) = 1.07, say, it "wins" as soon as a_1 > 0.07; with o = 0.02, only
    from a_1 > 0.09. Worked example, a_1 = 0.08: without o, 1.08 / 1.07 = 1.01 > 1 (propose, and lose the
    round's own work); with o = 0.02, 1.08 / 1.09 = 0.99 < 1 (k = 0). A copied passage (a = 17/18 for 16
    guesses, r(17) = 2.05, say): 11.2 / 2.07 = 5.4 instead of 11.2 / 2.05 = 5.5, still far above 1.

    Where a_i comes from, by the drafter (all fixed before the round, so the same seed gives the same tokens):
    - A drafter that tells its match (prompt lookup: `drafter.match_length(x)`, asked with this round's x):
      by the match's length n. Guess i of a proposal that follows an n-token match is, if guesses 1 .. i - 1
      were kept, the token after an (n + i - 1)-token match of the same earlier occurrence (the match grows
      by one with each kept guess): what a lookup one token later would propose. So one table A by match
      length serves every draft position:

          a_i = A(n + i - 1),   A(l) = (kept_b + s_b mu_b) / (checked_b + s_b),   b = the bucket of l

      with the buckets 1, 2-3, 4-7, 8-15, 16+ (MATCH_BUCKETS), kept_b / checked_b the guesses of bucket b
      kept / checked so far, each older check's weight multiplied by MATCH_DECAY at every newer check of the
      bucket (the text changes: a passage being copied, then free prose), and a prior worth s_b checks at
      Laplace's rule of succession mu_b = (l_b + 1) / (l_b + 2), l_b the bucket's shortest match (a copy that
      has held for l tokens holds once more with chance (l + 1) / (l + 2), before any evidence): 2/3 for one
      token, 17/18 for 16. The prior ages as the checks do: s_b = PRIOR_WEIGHT at first, multiplied by
      MATCH_DECAY at every check of the bucket. (A prior that never aged kept 2 checks at 2/3 against at most
      20 checks' weight of evidence: A(1) never fell under 0.06, above what a guess after a short match is
      worth on prose where r(2) is near 1, and such rounds were taken for ever and lost.) No match (n = 0):
      nothing to propose, k = 0. So a long match proposes a long run, and a short one, once the text has
      shown that short matches are rarely followed, declines.
    - Any other drafter (a draft model): by draft position alone, a_i = (kept_i + 1) / (checked_i + 2) (a
      Beta(1, 1) prior), the counts multiplied by DECAY after every round.
    - c: the drafter's `cost` (or its model's) if it gives one (lookup: 0; a drafter's `cost` is the time of
      one draft step as a fraction of one 1-position target step), else the ratio of the draft's and the target's
      weights (`n_params`; a decoding step is memory-bound, so its time goes with the bytes it reads), else 1/2.
    - r(m): `target_model.r_table` if set (r_table[m - 1] = r(m); speed/calibration.py's `calibrate` measures one on this machine),
      else R_TABLE above.
    A drafter that proposes less than k costs only what it sent.

    Exploration, for the drafters without a match: a policy that never proposes never learns that proposing
    has become worth it (a passage starts being copied). After PROBE_AFTER declined rounds in a row it proposes
    once, as a probe: k_max guesses from a free drafter, one guess from a drafter that runs a model (each guess
    costs c). Each probe that does not change its mind doubles the wait (up to PROBE_AFTER_MAX). A drafter
    with a match needs no probes: a longer match is a new bucket, tried with its own (hopeful) prior.
    """

    DECAY = 0.9  # by position: per round
    MATCH_DECAY = 0.95  # by match length: per check of the same bucket (about the last 20 count)
    PRIOR_WEIGHT = 2.0
    PROBE_AFTER = 4
    PROBE_AFTER_MAX = 64

    def __init__(self, drafter, target_model, k_max):
        if isinstance(k_max, bool) or not isinstance(k_max, (int, np.integer)) or k_max < 1:
            raise ValueError(f"k_max must be a whole number >= 1; got {k_max!r}")
        self.k_max = int(k_max)
        self.drafter = drafter
        self.by_match = hasattr(drafter, "match_length")
        self.c = draft_cost(drafter, target_model)
        r_table = list(getattr(target_model, "r_table", None) or R_TABLE)
        # self.r[m - 1] = r(m), the table's last figure for the rows past its end
        self.r = [r_table[min(m, len(r_table)) - 1] for m in range(1, self.k_max + 2)]
        overhead = getattr(target_model, "round_overhead", None)
        self.overhead = float(ROUND_OVERHEAD if overhead is None else overhead)  # o: a proposing round's extra cost
        n_cells = len(MATCH_BUCKETS) if self.by_match else self.k_max  # buckets of match length, or positions
        self.kept = np.zeros(n_cells)  # decayed counts of kept guesses
        self.checked = np.zeros(n_cells)  # decayed counts of checked guesses
        self.prior = np.array([(n + 1) / (n + 2) for n in MATCH_BUCKETS]) if self.by_match else None  # mu_b
        self.prior_weight = np.full(n_cells, self.PRIOR_WEIGHT)  # s_b (by match): aged as the checks of b are
        self.best_by_match = {}  # {min(n, 16): the best k after an n-token match}, until the counts change
        self.declined_in_a_row = 0
        self.probe_after = self.PROBE_AFTER

    def acceptance(self, n=None):
        """[k_max]: a_i, the estimated chance that guess i is kept given the guesses before it were; n: the
        match length of the proposal (for a drafter that tells it)."""
        if not self.by_match:
            return (self.kept + 1) / (self.checked + 2)  # Beta(1, 1) prior
        by_bucket = (self.kept + self.prior_weight * self.prior) / (self.checked + self.prior_weight)  # A, by b
        buckets = np.searchsorted(MATCH_BUCKETS, n + np.arange(self.k_max), side="right") - 1  # match_bucket(n + i)
        return by_bucket[buckets]  # [k_max]: a_i = A(n + i - 1), i = 1 .. k_max

    def expected_rates(self, n=None):
        """[k_max + 1]: the expected tokens per one-position target step of a round with lookahead k = 0 .. k_max
        (after an n-token match), all at once:
        (1 + a_1 + a_1 a_2 + ... + a_1 ... a_k) / (c k + r(k + 1) + o [k > 0])."""
        expected_tokens = 1 + np.concatenate(([0.0], np.cumsum(np.cumprod(self.acceptance(n)))))  # [k_max + 1]
        k = np.arange(self.k_max + 1)  # [k_max + 1]
        return expected_tokens / (self.c * k + np.asarray(self.r) + self.overhead * (k > 0))

    def expected_rate(self, k, n=None):
        """Expected tokens per one-position target step of a round with lookahead k (after an n-token match)."""
        return float(self.expected_rates(n)[k])

    def choose(self, x=None):
        """This round's k for the text x so far: the best by the cost model (see the class), or a probe."""
        if self.by_match:
            if x is None:
                raise ValueError("AutoK.choose(x) needs the text x: the drafter's match length depends on it")
            n = self.drafter.match_length(x)
            return 0 if n == 0 else self.best_after_match(n)
        best = int(np.argmax(self.expected_rates()))
        if best > 0:
            self.declined_in_a_row, self.probe_after = 0, self.PROBE_AFTER
            return best
        self.declined_in_a_row += 1
        if self.declined_in_a_row > self.probe_after:
            self.declined_in_a_row = 0
            self.probe_after = min(2 * self.probe_after, self.PROBE_AFTER_MAX)
            return self.k_max if self.c == 0 else 1  # a free drafter probes deep; a model draft, one guess
        return 0

    def best_after_match(self, n):
        """The best k after an n-token match (the first best, as max() takes it). Every match of 16 tokens or
        more sees the same a_i, and a round that checks nothing changes no count: the choice is kept until a
        round does (a plain step costs no more planning than this look-up)."""
        key = min(n, MATCH_BUCKETS[-1])
        if key not in self.best_by_match:
            self.best_by_match[key] = int(np.argmax(self.expected_rates(n)))
        return self.best_by_match[key]

    def record(self, round_):
        """Learn from a finished round (a records.Round): which guesses were checked and kept."""
        if self.by_match:
            n = getattr(round_.proposal, "match_length", 0)
            if n > 0 and round_.checks:
                self.best_by_match.clear()  # the counts change: every choice is planned again
            for check in round_.checks if n > 0 else ():
                b = match_bucket(n + check.depth - 1)  # the match a kept path had reached at this guess
                self.kept[b] = self.MATCH_DECAY * self.kept[b] + check.kept
                self.checked[b] = self.MATCH_DECAY * self.checked[b] + 1
                self.prior_weight[b] *= self.MATCH_DECAY
            return
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

    def choose(self, x=None):
        return self.k

    def record(self, round_):
        all_kept = round_.k > 0 and len(round_.checks) > 0 and all(check.kept for check in round_.checks)
        self.k = min(self.k + 2, self.k_max) if all_kept else max(self.k - 1, 1)


def draft_cost(drafter, target_model):
    """c: the drafter's `cost` (or its model's) if known, else the draft's weights over the target's (n_params),
    else 1/2."""
    cost = getattr(drafter, "cost", None)
    if cost is None:
        cost = getattr(getattr(drafter, "model", None), "cost", None)
    if cost is not None:
        return float(cost)
    draft_params = getattr(getattr(drafter, "model", drafter), "n_params", None)  # a drafter's model, or a model function
    target_params = getattr(target_model, "n_params", None)
    if draft_params and target_params:
        return draft_params / target_params
    return 0.5
