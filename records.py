"""What the samplers record: each round's checks and the tokens it wrote, and the counts a run adds up.

sampling.py's samplers yield a `Round` for every draft-then-verify round (`speculative_stream`), holding a
`Check` for every guess put to Step 3's accept/reject test; show.py draws them, lookahead.AutoK learns from
them, and the tests replay them. `AutoregressiveStats` and `SpeculativeStats` are what a caller passes as
`stats=` to have a run counted: tokens, passes, guesses drafted, checked and kept, alpha. The words (Step 3,
q, p, the residual) are Chen et al.'s, as sampling.py's docstring transcribes them; this file needs nothing
but the standard library.
"""

import time
from dataclasses import dataclass, field, replace


# ------------------------------------------------------------------------------------------------------------
# What a round did: its checks and the tokens it wrote (the samplers yield one Round per round)
# ------------------------------------------------------------------------------------------------------------


@dataclass
class Check:
    """One proposed token put to the accept/reject test of Step 3: kept exactly when u < q / p."""

    depth: int  # its draft position in the round: 1 for a guess right after x, 2 for the next, ...
    token: int
    p: float  # the probability the proposal gave the token (1.0 for a deterministic, one-hot proposal)
    q: float  # the target's probability of the token at that point (after earlier siblings' residual updates)
    u: float  # the uniform draw, u ~ U[0, 1)
    kept: bool


@dataclass
class Round:
    """One draft-then-verify round, as `speculative_stream` yields it.

    index:       1, 2, ... within a run.
    k:           the lookahead of the round, the guesses asked for (0: a plain target step); the proposal may
                 hold fewer (prompt lookup proposes only what it finds).
    proposal:    what the drafter proposed (a Proposal: tokens, parents, rows).
    checks:      the Checks of Step 3, in the order they were made.
    tokens:      the tokens written, in order (cut right after a stop token).
    origins:     one per written token: "draft" (a guess that was kept), "residual" (drawn from the residual
                 after a rejection), "bonus" (Step 4's free token, drawn from the target's row after the last
                 kept guess; in a round with nothing proposed, the plain step's token).
    target_rows: [len(tokens), n_vocab] the target's distribution q at each written position, before any
                 residual update (the staged drafter reads them); None in the log of SpeculativeStats.
    """

    index: int
    k: int
    proposal: object
    checks: list
    tokens: list
    origins: list
    target_rows: object = None


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
    drafted:         tokens proposed (Step 1); for a tree, every node.
    checked:         proposed tokens that went through the accept/reject test (Step 3). Guesses below a
                     rejection are never checked: they are thrown away.
    accepted:        checked tokens that were kept.
    drafted_at[i], checked_at[i], accepted_at[i]: the same, for draft position (depth) i + 1 of a round.
    draft_passes:    forward passes of the draft model (0 for a drafter that runs no model, like lookup).
    target_passes:   forward passes of the target (one per round).
    round_log:       every Round, without its probability rows (they would take megabytes per round).
    Read from round_log: ks, each round's lookahead k (K="auto" chooses it round by round); nodes, proposed
    tokens sent to the target (the same as drafted); matched_rounds, rounds whose proposal was not empty (for
    prompt lookup: the rounds that found a match); accepted_depths, how many guesses of each round were kept.

    acceptance_rate = accepted / checked is the empirical alpha of Leviathan et al.: the chance that a
    guess is kept. acceptance_rate_at[i] is the same for draft position i + 1 (given positions 1 .. i were
    kept), None where no guess was ever checked ("n/a": 0 of 0 is not a rate).
    tokens_per_target_pass = tokens / target_passes (autoregressive sampling has 1.0).
    """

    tokens: int = 0
    checked: int = 0
    accepted: int = 0
    drafted_at: list = field(default_factory=list)
    checked_at: list = field(default_factory=list)
    accepted_at: list = field(default_factory=list)
    draft_passes: int = 0
    target_passes: int = 0
    round_log: list = field(default_factory=list)

    def count(self, round_, draft_passes):
        """Add one Round, and the draft passes it took, to the counts."""
        depths = []  # depths[i]: guess i's draft position, one more than its parent's (1 right after x)
        for parent in round_.proposal.parents:
            depths.append(1 if parent < 0 else depths[parent] + 1)
        for counts in (self.drafted_at, self.checked_at, self.accepted_at):  # one counter per draft position
            counts += [0] * (max(depths, default=0) - len(counts))
        for depth in depths:
            self.drafted_at[depth - 1] += 1
        for check in round_.checks:
            self.checked_at[check.depth - 1] += 1
            self.accepted_at[check.depth - 1] += check.kept
        self.tokens += len(round_.tokens)
        self.checked += len(round_.checks)
        self.accepted += sum(check.kept for check in round_.checks)
        self.draft_passes += draft_passes
        self.target_passes += 1
        self.round_log.append(replace(round_, target_rows=None, proposal=replace(round_.proposal, rows=None)))

    @property
    def acceptance_rate(self):
        return self.accepted / self.checked if self.checked else 0.0

    @property
    def acceptance_rate_at(self):
        return [a / c if c else None for a, c in zip(self.accepted_at, self.checked_at)]

    @property
    def tokens_per_target_pass(self):
        return self.tokens / self.target_passes if self.target_passes else 0.0

    @property
    def rounds(self):
        return self.target_passes  # one target pass per round

    @property
    def drafted(self):
        return sum(self.drafted_at)

    @property
    def ks(self):
        return [round_.k for round_ in self.round_log]

    @property
    def nodes(self):
        return self.drafted

    @property
    def matched_rounds(self):
        return sum(len(round_.proposal.tokens) > 0 for round_ in self.round_log)

    @property
    def accepted_depths(self):
        return [sum(check.kept for check in round_.checks) for round_ in self.round_log]

    @property
    def mean_k(self):
        return sum(self.ks) / len(self.ks) if self.ks else 0.0

    def summary(self):
        """A few readable lines: the round counts and the acceptance rate by draft position."""
        per_position = ", ".join("n/a" if rate is None else f"{rate:.2f}" for rate in self.acceptance_rate_at)
        by_position = f" (by draft position: {per_position})" if per_position else " (no guess was drafted)"
        return (
            f"{self.tokens} tokens in {self.rounds} rounds: {self.target_passes} target passes, "
            f"{self.draft_passes} draft passes, {self.tokens_per_target_pass:.2f} tokens per target pass\n"
            f"draft tokens: {self.drafted} drafted, {self.checked} checked, {self.accepted} accepted; "
            f"acceptance rate alpha = {self.acceptance_rate:.2f}{by_position}"
        )


def timed(fn):
    """(what fn() returns, its wall time in seconds)."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start
