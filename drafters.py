"""Drafters: where the guesses of a speculative round come from, besides the draft model's own (sampling.py),
and trees of guesses, verified by SpecInfer's rule.

Read sampling.py first: `Proposal`'s docstring states the drafter contract (`propose(x, k, rng, n_vocab) ->
Proposal`) and its ModelDrafter is Chen et al.'s Step 1. Every drafter here keeps that contract:

    PromptLookup   guesses copied from after the longest earlier match in the text (found by a
                   SuffixAutomaton, kept up to date token by token): no model at all, so a draft step is free
    Staged         the draft model's own guesses, made faster by speculative sampling with prompt lookup
    TreeDrafter    a tree of the draft model's top tokens (SpecInfer), scored by the target in one pass

The chains of guesses (lookup, staged) go through `sampling.speculative_stream` itself, and sampling.py's proof
covers them. A tree is verified beside it, by `tree_stream` (the "Trees" section, with the proof extended to
siblings): the same round with SpecInfer's Steps 2-4, which on a one-branch tree are the chain's.

A looked-up or top-ranked token was chosen, not sampled: its row is one-hot. A drafter has a `name` (for reports),
may have a `cost` (one draft step over one 1-position target step; 0.0 for a lookup), which K="auto" plans with,
and counts the forward passes of its model in `passes`. How many guesses a round asks for is lookahead.py's.
"""

from dataclasses import dataclass

import numpy as np

import lookahead
import sampling
from model_fn import common_prefix_length
from checks import check_probs, check_prompt, check_proposal, shared_vocabulary_size
from records import Check, Round
from sampling import Proposal, chain_parents


# ------------------------------------------------------------------------------------------------------------
# Prompt lookup: guesses copied from earlier in the text, no model at all
# ------------------------------------------------------------------------------------------------------------


class SuffixAutomaton:
    """Every earlier occurrence of the text's suffixes, kept up to date one token at a time (Blumer et al. 1985).

    A suffix automaton of a text is the smallest automaton that accepts exactly the text's substrings. Its
    states group substrings by where they end: all the substrings of one state end at the same set of
    positions of the text (their "end set"), and a state's substrings are the suffixes of its longest one,
    `length[s]` tokens long, down to `length[link[s]] + 1` tokens. The suffix link `link[s]` goes to the state of
    the next shorter suffixes (whose end set is larger). The states on the suffix links from `last` (the state
    of the whole text) hold every suffix of the text, longest first. Appending a token (`extend`) adds one state
    and at most one more (a "clone" that splits a state whose substrings stopped ending at the same places):
    amortised O(1) new states and transitions per token (the classic construction, as in "SAM Decoding",
    Hu et al. 2024, which drafts from it).

    What prompt lookup needs from it, after each token: the longest suffix of the text that also ended
    earlier (with a token after it), and where it ended most recently. The new state's suffix link s is the
    state of that suffix: by the construction it is the longest suffix whose end set holds more than the new
    end. Its length is `length[s]`; where it ended most recently takes more care. Each state keeps
    `last_end[s]`, the most recent end of its substrings that it has been GIVEN. Giving an end e to "every
    state whose end set holds e" means giving it to the states on the suffix links from the state made when e
    was the text's end: one walk per token, as long as the number of distinct end sets among the text's
    suffixes (the whole text for a run of one token repeated: O(L^2) over L tokens). Two facts make it lazy:

    1. The copy goes on. If the longest match before this token, n tokens ending most recently at e, was
       followed there by this very token (x[e] == token), the new longest match is n + 1 tokens ending at
       e + 1, with no state read. Proof: those n + 1 tokens ended at e + 1, earlier than the new end, so the
       match is at least n + 1 long; a match of n + 2 would, without its last token, be a match of n + 1
       before this token, longer than n. And any earlier end e' of the n + 1 tokens has the n tokens
       ending at e' - 1, an earlier end of the old match, so e' - 1 <= e. On a^n, (ab)^n and any text that
       keeps copying, every token after the first few takes this path.
    2. Ends can wait. Otherwise (the copy broke) the ends of the tokens that took path 1 are handed out
       now, newest first (`_record_ends`, from `pending`), before s is read. A walk that gives end e stops
       at the first state whose last_end is e or later: that state's ancestors all have at least as much,
       because the ends given are ordered along every walk: a parent's last_end is never older than its
       child's (true for a new state, whose last_end is 0, and for a clone, which takes the last_end of
       the state it splits off and sits between it and that state's old parent; a walk only raises a prefix
       of a path to e, below states that have e or later). So after the hand-out every state holds the
       latest end it has, and s's `last_end` is where the match ended most recently. A state is raised at
       most once per hand-out, and only where the old walk would have written it: never more work than
       that walk, and O(1) per token while the copy goes on.

    A text whose copies keep breaking while its repeated suffixes grow (a b aa b aaa b ...) still makes the
    hand-outs long: there the most recent ends of O(L^1.5) (state, end) pairs really do change, and finding
    the most recent occurrence of every match in linear time is the "rightmost LZ77 parsing" problem, for
    which no simple linear method is known (Larsson 2014 answers such queries in O(L log L)).

    With max_ngram = m the match is the last m tokens (if the longest match is longer), whose state is not
    s: `window[L]` tracks the state of the text's last min(m, L) tokens in O(1) steps a token (drop the first
    token: at most one suffix link down, plus one if this token's clone split it; then follow the token).
    The states of suffixes of at most m tokens (at most m of them) get the new end at once, after the match
    is read: O(m) per token, no lazy ends needed.

    Example: the text 5 6 7 5 6. After the last token, the longest suffix that ended earlier is 5 6 (ending at
    position 2, followed by 7): `match` is (2, 2).

    `truncate(n)` takes the text back to its first n tokens by undoing the changes of each later token (each
    `extend` logs them), so a drafter whose guesses were thrown away need not rebuild from the start. `steps`
    counts the work done (suffix links followed, ends given): tests count it on the worst texts.
    """

    def __init__(self, max_ngram=None, min_ngram=1):
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.tokens = []  # the text
        self.next = [{}]  # next[s]: {token: state}, the transitions; state 0 is the empty string
        self.link = [-1]  # link[s]: the state of the longest suffix of s's strings in another state
        self.length = [0]  # length[s]: the length of s's longest string
        self.last_end = [0]  # last_end[s]: the most recent end (exclusive) of s's strings given to s so far
        self.last = 0  # the state of the whole text
        self.longest = [(0, 0)]  # longest[L]: the first L tokens' match before min_ngram is applied
        self.matches = [(0, 0)]  # matches[L]: (length, end) of the text's first L tokens' match (see `match`)
        self.pending = []  # (end, state): ends not yet given to the states on the suffix links from `state`
        self.window = [0]  # with max_ngram: window[L], the state of the first L tokens' last min(max_ngram, L)
        self.log = []  # log[L - 1]: the changes the L-th token made, for truncate
        self.steps = 0  # suffix links followed and ends given, all told (the work; see the class docstring)

    @property
    def match(self):
        """(n, end): the suffix of the text n tokens long, with n = min(the longest that ended earlier, max_ngram),
        and `end`, the most recent earlier position after it (x[end - n : end] == x[-n:], end < len(x)), so x[end]
        is what followed it there. (0, 0) when no suffix of min_ngram tokens or more ended earlier."""
        return self.matches[-1]

    def extend(self, token):
        """Append one token: the automaton's construction step, then the match (see the class)."""
        changes = []  # (list, index, old value) of every overwrite; None as old: a key added to a dict
        new_end = len(self.tokens) + 1
        self.tokens.append(token)
        cur = self._new_state(self.length[self.last] + 1, {}, 0, 0)  # its own end is given with the others
        p = self.last
        while p != -1 and token not in self.next[p]:  # the suffixes that never had `token` after them
            changes.append((self.next[p], token, None))
            self.next[p][token] = cur
            p = self.link[p]
            self.steps += 1
        if p != -1:
            q = self.next[p][token]
            if self.length[p] + 1 == self.length[q]:
                self.link[cur] = q
            else:  # q's strings no longer end at the same places: its shorter ones move to a clone
                clone = self._new_state(self.length[p] + 1, dict(self.next[q]), self.link[q], self.last_end[q])
                while p != -1 and self.next[p].get(token) == q:
                    changes.append((self.next[p], token, q))
                    self.next[p][token] = clone
                    p = self.link[p]
                    self.steps += 1
                changes.append((self.link, q, self.link[q]))
                self.link[q] = self.link[cur] = clone
        changes.append((self, "last", self.last))
        self.last = cur
        if self.max_ngram is None:
            n, end = self._longest_match(cur, token, new_end, changes)
        else:
            n, end = self._window_match(cur, token, new_end, changes)
        self.longest.append((n, end))
        self.matches.append((n, end) if n >= self.min_ngram else (0, 0))
        self.log.append(changes)

    def _new_state(self, length, next_, link, last_end):
        self.next.append(next_)
        self.link.append(link)
        self.length.append(length)
        self.last_end.append(last_end)
        return len(self.length) - 1

    def _longest_match(self, cur, token, new_end, changes):
        """(n, end): the longest suffix that ended earlier and its most recent earlier end (facts 1 and 2)."""
        n, end = self.longest[-1]
        self.steps += 1
        if n > 0 and self.tokens[end] == token:  # fact 1: the copy goes on
            self.pending.append((new_end, cur))
            return n + 1, end + 1
        for pending_end, state in reversed(self.pending):  # fact 2: newest first
            self._record_ends(state, pending_end, changes)
        changes.append((self, "pending", self.pending))
        self.pending = [(new_end, cur)]
        s = self.link[cur]
        return (self.length[s], self.last_end[s]) if s > 0 else (0, 0)

    def _window_match(self, cur, token, new_end, changes):
        """With max_ngram = m: (n, end) of the suffix min(m, the longest match) long; the window's states (the
        suffixes of at most m tokens) then get the new end."""
        m = self.max_ngram
        window = cur
        if len(self.tokens) > m:  # drop the first token of the last m, then follow `token`
            state = self.window[-1]
            while state > 0 and self.length[self.link[state]] >= m - 1:
                state = self.link[state]
                self.steps += 1
            window = self.next[state][token]
        self.window.append(window)
        n = min(self.length[self.link[cur]], m)
        state = window if n == m else self.link[cur]  # the state of the n-token suffix
        match = (n, self.last_end[state]) if n > 0 else (0, 0)
        self._record_ends(window, new_end, changes)
        return match

    def _record_ends(self, state, end, changes):
        """Give `end` to the states on the suffix links from `state`, up to the first that has `end` or a later
        one (its ancestors have too: see the class docstring); log each overwrite for truncate."""
        while state > 0 and self.last_end[state] < end:
            changes.append((self.last_end, state, self.last_end[state]))
            self.last_end[state] = end
            state = self.link[state]
            self.steps += 1

    def truncate(self, n):
        """Take the text back to its first n tokens, undoing each later token's changes, newest first."""
        while len(self.tokens) > n:
            if self.max_ngram is None:
                self.pending.pop()  # the token's own end; a hand-out it made is undone below
            for target, key, old in reversed(self.log.pop()):
                if target is self:
                    setattr(self, key, old)
                elif old is None:
                    del target[key]
                else:
                    target[key] = old
            n_states = 2 if self.length[-1] != len(self.tokens) else 1  # the token's state, and its clone if any
            for values in (self.next, self.link, self.length, self.last_end):
                del values[len(values) - n_states :]
            for values in (self.tokens, self.longest, self.matches) + ((self.window,) if self.max_ngram else ()):
                values.pop()


@dataclass
class LookupProposal(Proposal):
    """A Proposal of looked-up guesses, with the match they follow. match_length: how many of x's last tokens
    matched where the guesses were copied from (0: not a lookup); K="auto" trusts a long match more than a
    short one (lookahead.AutoK)."""

    match_length: int = 0


class PromptLookup:
    """Prompt lookup decoding (Saxena 2023; Hugging Face's `prompt_lookup_num_tokens`; llama.cpp's lookup),
    with the longest match (as "SAM Decoding", Hu et al. 2024, finds it).

    Find the longest suffix of x that occurred earlier in x (prompt and generated tokens alike), take its most
    recent earlier occurrence, and propose the tokens that followed it there, up to k. No model runs: cost 0.
    A looked-up token is not drawn from a distribution, so its row is one-hot, and the round stays exact
    (kept with probability q(token): sampling.py's proof). No match: an empty proposal, and the round is a plain
    target step. The proposal carries the match's length (Proposal.match_length), and `match_length(x)` tells
    it before proposing: K="auto" trusts a long match more than a short one (lookahead.AutoK).

    max_ngram: None (the default) for no cap; a whole number n makes a longer match count as n tokens long, so
    the proposal follows the most recent occurrence of x's last n tokens (what the original prompt lookup
    does with n = 3). min_ngram: a match shorter than this is no match.

    Example: x = [5, 6, 7, 8, 5, 6]. The longest suffix that occurred before is (5, 6), ending at position 2,
    followed by 7, 8, 5, 6: with k = 3 the proposal is [7, 8, 5], match length 2. The copy may run into the
    tokens it proposes: for x = [1, 2, 1, 2] the match (1, 2) ends at 2, and with k = 4 the proposal is
    [1, 2, 1, 2] (the pattern of period 2 goes on).

    The index is a SuffixAutomaton: each call appends only the tokens added since the last call, so the search
    costs no rescan of x. A call whose x does not extend the indexed tokens (the guesses of a staged round
    thrown away) takes the index back to the tokens they share and goes on from there.
    """

    name = "lookup"
    cost = 0.0  # no model pass
    passes = 0

    def __init__(self, max_ngram=None, min_ngram=1):
        for value, what in ((max_ngram, "max_ngram"), (min_ngram, "min_ngram")):
            if value is None and what == "max_ngram":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{what} must be a whole number >= 1 (max_ngram may be None: no cap); got {value!r}")
        if max_ngram is not None and min_ngram > max_ngram:
            raise ValueError(f"min_ngram={min_ngram} is more than max_ngram={max_ngram}: a match counts as at most "
                             f"max_ngram tokens and must be at least min_ngram long")
        self.max_ngram = None if max_ngram is None else int(max_ngram)
        self.min_ngram = int(min_ngram)
        self.index = SuffixAutomaton(self.max_ngram, self.min_ngram)

    def match(self, x):
        """(n, end) for x (SuffixAutomaton.match): the match's length and where it ended most recently."""
        x, tokens = (x if isinstance(x, list) else list(x)), self.index.tokens
        if len(x) < len(tokens) or x[: len(tokens)] != tokens:  # not an extension: back to what they share
            self.index.truncate(common_prefix_length(tokens, x))
        for token in x[len(tokens) :]:  # the index's own list grows as it extends
            self.index.extend(int(token))
        return self.index.match

    def match_length(self, x):
        """How many of x's last tokens the proposal for x would follow (0: no match, nothing proposed)."""
        return self.match(x)[0]

    def lookup(self, x, k):
        """The (up to) k tokens that followed the most recent earlier occurrence of x's longest matched suffix."""
        n, end = self.match(x)
        if n == 0:
            return []
        period = len(x) - end  # past x's end, the copy continues with the tokens it copied
        tokens = list(x[end : end + k])
        while len(tokens) < k:
            tokens.append(tokens[len(tokens) - period])
        return [int(token) for token in tokens]

    def propose(self, x, k, rng, n_vocab):
        """Proposal(looked-up tokens, a chain, one-hot rows, the match length); empty when nothing matches.
        rng is not used."""
        tokens = self.lookup(x, k)
        rows = np.zeros((len(tokens), n_vocab))  # [m, n_vocab]
        rows[np.arange(len(tokens)), tokens] = 1.0  # deterministic: one-hot
        n = self.index.match[0] if tokens else 0
        return LookupProposal(tokens=tokens, parents=chain_parents(len(tokens)), rows=rows, match_length=n)


def prompt_lookup(max_ngram=None, min_ngram=1):
    """A PromptLookup drafter: guesses copied from after the most recent earlier occurrence of x's longest
    matched suffix. prompt_lookup(max_ngram=3, min_ngram=1) is the original prompt lookup: the last 3 tokens
    at most."""
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

    def __init__(self, draft_model, max_ngram=None):
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


def staged(draft_model, max_ngram=None):
    """A Staged drafter: the draft model's guesses, drafted in turn by prompt lookup."""
    return Staged(draft_model, max_ngram)


# ------------------------------------------------------------------------------------------------------------
# Trees: several candidates per position, verified by SpecInfer's rule (the chain's round, extended to siblings)
# ------------------------------------------------------------------------------------------------------------


class TreeDrafter:
    """A tree of guesses from a draft model: `branching[d]` candidates under each node of depth d.

    tree(draft_model, (2, 2, 1)) proposes the draft's 2 most likely tokens after x, the 2 most likely after
    each of those, and the most likely after each of the 4: 2 + 4 + 4 = 10 nodes. The draft expands each
    depth's frontier in ONE call (the frontier is always the last nodes, since nodes are listed depth by depth):
    depth 1 asks model(x, 1); a deeper one model(x + nodes, len(frontier), parents) (no parents while a chain).

    Why the TOP tokens and not independent samples of p: both keep the round exact (see `tree_stream`), but
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
            p = check_probs(p, len(frontier), n_vocab, "the draft model")
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
    """`tree_stream` with a TreeDrafter: `tree` gives the branching per depth (see TreeDrafter).

    (2, 2, 1) proposes 2 candidates after x, 2 under each, 1 under each of those: 10 nodes, scored by the
    target in one pass. (1,) * K is a chain of K of the draft's top tokens.
    """
    tree = check_tree(tree)
    x = check_prompt(x, N, rng, [target_model, draft])  # first, so that a bad prompt or N is named as such
    check_tree_fits(x, N, tree, draft, target_model)
    return tree_stream(x, TreeDrafter(draft, tree), target_model, N, len(tree), rng, stop_token, stats)


def check_tree_fits(x, N, tree, draft_model, target_model):
    """A ValueError, before any model runs, if some round of the tree sampler would not fit in a model's context:
    a round after L tokens (len(x) <= L < T = len(x) + N) has k = min(len(tree), T - L - 1) depths; the target
    reads L + tree_size(tree[:k]) tokens, the draft L + tree_size(tree[:k - 1]). A prompt of 50, N = 10, n_ctx
    64 and the tree (3, 3, 3) of 39 nodes: the first round needs 50 + 39 = 89 positions, an error."""
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


def tree_stream(x, draft, target_model, N, K, rng, stop_token=None, stats=None):
    """`sampling.speculative_stream` for a drafter whose proposals may be trees: one `Round` per round.

    The same round, with Step 2 asking the target about every node (`_score_tree`) and Steps 3-4 walking the
    tree by SpecInfer's rule (`_verify_tree`, Miao et al. 2023). On a chain (one child per node) it writes the
    chain round's tokens with the same draws: tests/test_tree_sampling.py runs both with one seed.

    Why this is exact: sampling.py's identity q = min(p, q) + (q - p)_+, applied once per sibling. Fix a node
    whose target row is q, with candidates c_1 .. c_s, candidate c_j drawn from its row p_j. Let q_1 = q and
    q_{j+1} = normalise((q_j - p_j)_+), the row the next candidate is tried against after c_j is rejected, and
    beta_j = sum_x min(p_j(x), q_j(x)).
    Claim: "try c_j against q_j, c_{j+1} against q_{j+1}, ..., else draw from q_{s+1}" writes a token
    distributed as q_j. For j = s + 1 it is a draw from q_{s+1} itself. For j <= s, by the claim for j + 1:

        P(x) = p_j(x) min(1, q_j(x)/p_j(x)) + P(c_j rejected) P(x written from c_{j+1} on | c_j rejected)
             = min(p_j(x), q_j(x))          + (1 - beta_j) (q_j(x) - p_j(x))_+ / (1 - beta_j)  =  q_j(x)

    by the identity. Two things make the second line true:
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
    Deterministic candidates (TreeDrafter's top tokens, a looked-up token) are draws from one-hot rows
    p_j = onehot(c_j) (constants: independent of everything): c_j is kept with probability
    min(1, q_j(c_j)/1) = q_j(c_j), and normalise((q_j - onehot(c_j))_+) is q_j with c_j removed, renormalised.
    One candidate per node (a chain) makes this exactly Chen et al.'s Steps 3-4.
    """
    drafter = sampling.as_drafter(draft)
    policy = lookahead.policy(K, drafter, target_model, N)
    n_vocab = shared_vocabulary_size(drafter, target_model)
    x = check_prompt(x, N, rng, [target_model, getattr(drafter, "model", None)])
    T = len(x) + N
    index = 0
    while len(x) < T:
        index += 1
        k = min(policy.choose(x), T - len(x) - 1)
        draft_passes = getattr(drafter, "passes", 0)
        # Step 1: the drafter proposes a chain or a tree of at most k tokens after x
        proposal = drafter.propose(x, k, rng, n_vocab) if k > 0 else Proposal.empty(n_vocab)
        depths = check_proposal(proposal, k, n_vocab, getattr(drafter, "name", type(drafter).__name__))
        if n_vocab is None and len(proposal.tokens):
            n_vocab = proposal.rows.shape[1]  # the drafter showed its vocabulary size; the target must match it
        # Step 2: ONE target pass: q[0] after x, q[i + 1] after the path from x to token i
        q = _score_tree(target_model, x, proposal, n_vocab)  # [m + 1, n_vocab]
        # Steps 3 and 4: keep candidates by min(1, q/p), descending the tree; a residual or a bonus token ends it
        tokens, origins, checks, rows = _verify_tree(q, proposal, rng, depths)
        if stop_token in tokens:  # end right after the stop token, as autoregressive sampling does
            cut = tokens.index(stop_token) + 1
            tokens, origins, rows = tokens[:cut], origins[:cut], rows[:cut]
            T = len(x) + len(tokens)
        x.extend(tokens)
        round_ = Round(index, k, proposal, checks, tokens, origins, target_rows=q[rows])
        if stats is not None:
            stats.count(round_, getattr(drafter, "passes", 0) - draft_passes)
        policy.record(round_)
        yield round_


def _score_tree(target_model, x, proposal, n_vocab):
    """Step 2: the target's m + 1 distributions after x and after the path to each proposed token, in ONE call.

    A chain is asked for without `parents`, so a model function that knows no trees still serves as a target.
    """
    m = len(proposal.tokens)
    if proposal.parents == chain_parents(m):  # a chain: the plain contract
        probs = target_model(x + proposal.tokens, m + 1)  # [m + 1, n_vocab]
    else:
        probs = target_model(x + proposal.tokens, m + 1, parents=proposal.parents)  # [m + 1, n_vocab]
    return check_probs(probs, m + 1, n_vocab, "the target model")


def _verify_tree(q, proposal, rng, depths):
    """Steps 3 and 4 over a tree (or a chain): SpecInfer's multi-candidate speculative sampling (Miao et al. 2023).

    Start at x. Try the children of the current node in turn: candidate c, drawn from the row p_c, is kept
    with probability min(1, q(c)/p_c(c)) (`sampling._accept`); on a rejection the target's row becomes the
    residual normalise((q - p_c)_+) (`sampling._residual`) before the next candidate is tried. If one is kept,
    descend under it and go on; if all are rejected, draw a token from the last residual and stop ("residual");
    at a node with no children (a kept leaf, or x itself when nothing was proposed), draw Step 4's free token
    from the target's row ("bonus"). With one child per node this is exactly sampling._verify_chain.
    depths[i] is token i's depth (1 for a child of x), which its Check records.

    Why this is exact: `tree_stream`'s docstring. Returns (tokens, origins, checks, rows): the written tokens,
    their origins, the Checks made, and each written token's target row in q (0 for x, i + 1 for token i).
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
            tokens.append(sampling._sample(q_row, rng))
            origins.append("bonus")
            return tokens, origins, checks, rows
        residual = q_row
        for c in candidates:  # Step 3, for each candidate in turn
            token, p_row = proposal.tokens[c], proposal.rows[c]
            kept, u = sampling._accept(residual, p_row, token, rng)
            checks.append(Check(depths[c], token, float(p_row[token]), float(residual[token]), u, kept))
            if kept:
                break
            residual = sampling._residual(residual, p_row)
        else:  # every candidate was rejected: a token from the last residual ends the round
            tokens.append(sampling._sample(residual, rng))
            origins.append("residual")
            return tokens, origins, checks, rows
        tokens.append(token)
        origins.append("draft")
        node = c
