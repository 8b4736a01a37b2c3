"""Model functions read from hand-written second-order Markov tables, for tests of the samplers and drafters.

The tests' models (tests/test_speculative_exactness.py and others), and the worked round's (tools/worked_round.py):
it lives with the tools because a tool may not import a test module, while a test may import a tool.

The next-token distribution depends on the last TWO tokens, so reading the wrong row (an off-by-one in the
prefix) changes the distribution. The draft is deliberately bad in both directions: it puts mass on tokens the
target never produces after some contexts, and gives probability 0 to tokens the target does produce.
"""

import itertools

import numpy as np

# next-token distributions of a second-order Markov chain: TABLE[a, b] = distribution after the tokens a, b
TARGET_TABLE = np.array(
    [
        [[0.6, 0.4, 0.0], [0.1, 0.2, 0.7], [0.0, 0.5, 0.5]],  # after (0, 0), (0, 1), (0, 2)
        [[0.3, 0.0, 0.7], [0.8, 0.1, 0.1], [0.2, 0.6, 0.2]],  # after (1, 0), (1, 1), (1, 2)
        [[0.5, 0.5, 0.0], [0.0, 0.3, 0.7], [0.4, 0.2, 0.4]],  # after (2, 0), (2, 1), (2, 2)
    ]
)
DRAFT_TABLE = np.array(
    [
        [[0.2, 0.3, 0.5], [0.5, 0.5, 0.0], [0.3, 0.3, 0.4]],  # (0,0): mass on 2, which the target never
        [[0.3, 0.4, 0.3], [0.2, 0.2, 0.6], [0.6, 0.2, 0.2]],  # gives; (0,1): misses 2, the target's favourite
        [[0.1, 0.1, 0.8], [0.6, 0.4, 0.0], [0.4, 0.2, 0.4]],  # (2,2): the one row where draft = target
    ]
)


def paths(x, n, parents):
    """The token lists whose next-token rows model(x, n, parents) returns (see sampling.py's contract).

    paths([7, 8, 1, 2], 3, parents=[-1, -1]) == [[7, 8], [7, 8, 1], [7, 8, 2]][-3:]: the prefix [7, 8], then
    the prefix followed by the path to each node (here two siblings after it).
    """
    if parents is None:
        return [x[:end] for end in range(len(x) - n + 1, len(x) + 1)]
    m = len(parents)
    prefix, nodes = x[: len(x) - m], x[len(x) - m :]
    node_paths = []
    for i, parent in enumerate(parents):
        node_paths.append((node_paths[parent] if parent >= 0 else []) + [nodes[i]])
    return [prefix + path for path in [[]] + node_paths][-n:]


def markov_model(table):
    """A model function (the sampling.py contract, trees included) reading a second-order Markov table: the
    row after a token list is table[its last two tokens]."""

    def model(x, n=1, parents=None):
        return np.array([table[path[-2], path[-1]] for path in paths(list(x), n, parents)])  # [n, n_vocab]

    model.n_vocab = table.shape[-1]
    return model


def exact_distribution(table, prompt, n_tokens, stop_token=None):
    """{tuple of new tokens: probability} of autoregressive sampling from `table`, by enumeration.

    With a stop token, every full sequence is cut after its first stop token (the tokens before it are drawn
    the same way whether or not sampling would go on), and the probabilities of equal cuts add up.
    """
    n_vocab = table.shape[-1]
    distribution = {}
    for tokens in itertools.product(range(n_vocab), repeat=n_tokens):
        x = list(prompt) + list(tokens)
        probability = np.prod([table[x[j - 2], x[j - 1], x[j]] for j in range(len(prompt), len(x))])
        if stop_token in tokens:
            tokens = tokens[: tokens.index(stop_token) + 1]
        distribution[tokens] = distribution.get(tokens, 0.0) + probability
    return distribution


def tv_bound(exact, n_samples, delta=1e-9):
    """1/2 sum_i sqrt(P_i (1 - P_i) / S) + sqrt(ln(1/delta) / (2 S)): see tests/test_speculative_exactness.py."""
    p = np.array(list(exact.values()))
    return 0.5 * np.sum(np.sqrt(p * (1 - p) / n_samples)) + np.sqrt(np.log(1 / delta) / (2 * n_samples))


def total_variation(samples, exact):
    """1/2 sum over outcomes of |empirical frequency - exact probability| (outcomes never sampled included)."""
    counts = {}
    for sample in samples:
        counts[sample] = counts.get(sample, 0) + 1
    outcomes = set(exact) | set(counts)
    return 0.5 * sum(abs(counts.get(o, 0) / len(samples) - exact.get(o, 0.0)) for o in outcomes)
