"""Prompt lookup's index does work in proportion to the text on the texts that repeat the most: counted, not timed.

Read drafters.py's SuffixAutomaton first (facts 1 and 2 of its docstring). tests/test_drafters.py checks what
the index answers against a full scan; this file checks how much it works to answer it.

The worst texts for an index of earlier occurrences are the most repetitive ones: a^n (every suffix occurred
before, each with its own set of ends), (ab)^n, and the Fibonacci word (the most repetitive text that never
settles into a period). Giving every new end to every state that has it (a walk along all the suffix links)
does work and logs undo entries in proportion to n^2 on them: doubling n quadruples both. Here both must at
most double, plus a margin of 10% for the first tokens' fixed cost: ratios at most 2.2 as n goes 1,000 ->
2,000 -> 4,000. The counts are exact (no clock), so the bound is safe on any machine.
"""

import pytest

import drafters

SIZES = (1_000, 2_000, 4_000)
MAX_RATIO = 2.2


def fibonacci_word(n):
    """The first n tokens of the Fibonacci word 0 1 0 0 1 0 1 0 0 1 0 0 1 ... (f_k = f_{k-1} f_{k-2})."""
    previous, word = [0], [0, 1]
    while len(word) < n:
        previous, word = word, word + previous
    return word[:n]


WORST_TEXTS = {
    "a^n": lambda n: [7] * n,
    "(ab)^n": lambda n: [7, 8] * (n // 2),
    "Fibonacci": fibonacci_word,
}


def work(text, max_ngram=None):
    """(suffix links followed and ends given, undo entries logged) to index `text` token by token."""
    index = drafters.SuffixAutomaton(max_ngram)
    for token in text:
        index.extend(token)
    return getattr(index, "steps", None), sum(len(changes) for changes in index.log)


@pytest.mark.parametrize("max_ngram", [None, 3], ids=["longest match", "max_ngram 3"])
@pytest.mark.parametrize("name", sorted(WORST_TEXTS))
def test_indexing_the_most_repetitive_texts_does_work_in_proportion_to_their_length(name, max_ngram):
    counts = [work(WORST_TEXTS[name](n), max_ngram) for n in SIZES]
    logged = [entries for _, entries in counts]
    for smaller, larger in zip(logged, logged[1:]):
        assert larger <= MAX_RATIO * smaller, f"{name}: undo entries {logged} for n = {SIZES}"
    steps = [steps for steps, _ in counts]
    assert None not in steps, "SuffixAutomaton counts its work in `steps`"
    for smaller, larger in zip(steps, steps[1:]):
        assert larger <= MAX_RATIO * smaller, f"{name}: steps {steps} for n = {SIZES}"


def test_the_work_counter_counts_the_walks_along_the_suffix_links():
    """Teeth: with fact 1 switched off (every token hands out its end at once, along the whole path), a^n
    makes 1 + 2 + ... + n steps: the counter sees the quadratic walk, so the test above could fail. The
    answers are the same either way: only the work differs."""
    lazy = drafters.SuffixAutomaton()
    for token in [7] * 1_000:
        lazy.extend(token)

    class Eager(drafters.SuffixAutomaton):
        def extend(self, token):
            self.longest[-1] = (0, 0)  # never "the copy goes on": a hand-out at every token
            super().extend(token)

    eager = Eager()
    for token in [7] * 1_000:
        eager.extend(token)
    assert lazy.steps < 3_000 and eager.steps > 1_000 * 999 // 2
    assert eager.matches == lazy.matches


def test_a_prompt_of_8192_copies_of_one_token_is_indexed_at_once():
    """The case that took 17-20 s and 4.2 GB: one lookup over 8,192 repeated tokens. Linear work: under 10 steps
    and 10 undo entries a token (the quadratic walk: about 4,096 a token)."""
    lookup = drafters.prompt_lookup()
    assert lookup.lookup([464] * 8_192, 5) == [464] * 5
    assert lookup.match_length([464] * 8_192) == 8_191
    assert lookup.index.steps < 10 * 8_192
    assert sum(len(changes) for changes in lookup.index.log) < 10 * 8_192
