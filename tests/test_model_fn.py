"""create_model_fn's model function with token trees: `model(x, n=1, parents=None) -> probs [n, n_vocab]`.

Read model_fn.py (and gpt2.py's cache) first: these tests are its specification.

The contract (sampling.py's module docstring): with parents = a list of m ints, the last m tokens of x are the
nodes of a tree hanging after the prefix x[:-m]; the m + 1 "prefixes" are the prefix itself, then the prefix +
the path root .. node i for each node; the result is the rows of the LAST n of them. So the reference for a
row is simply the model run on that prefix as a plain sequence, with no cache (picoGPT's full recompute):
these tests compare against exactly that. Both sides compute the same float32 network, summing in different
orders (a tree pass masks instead of slicing), so rows agree to 1e-6 (probabilities of size ~1/64).

Then the cache: the positions a call computes (stats.positions) are derived in each docstring from what the
cache holds, and the rows must still be the plain-sequence ones whatever was reused or gathered.
"""

import numpy as np
import pytest

import gpt2
from conftest import path_to
from model_fn import create_model_fn
from loaders.random_weights import random_params

HPARAMS = {"n_vocab": 64, "n_ctx": 48, "n_embd": 32, "n_head": 4, "n_layer": 2}
PROMPT = [1, 2, 3, 4, 5]
TOLERANCE = 1e-6  # max |row - the plain-sequence row|


def tiny_params(seed=1):
    """Random weights with position embeddings of scale 1, so that the position of a node matters."""
    rng = np.random.default_rng(seed)
    params = random_params(HPARAMS, rng, std=0.3)
    params["wpe"] = rng.standard_normal(params["wpe"].shape, dtype=np.float32)  # [n_ctx, n_embd]
    return params


PARAMS = tiny_params()

# Trees as parents lists (parents first), with several roots and depths up to 4.
TREES = {
    "one_node": [-1],
    "chain_of_4": [-1, 0, 1, 2],
    "three_roots": [-1, -1, -1],
    "two_by_two": [-1, -1, 0, 0, 1, 1],  # branching (2, 2)
    "2_2_1": [-1, -1, 0, 0, 1, 1, 2, 3, 4, 5],  # branching (2, 2, 1): 10 nodes
    "ragged_depth_4": [-1, -1, 0, 2, 3, 1, -1, 5],  # depths 0 0 1 2 3 1 0 2
}


def model_fn(**kwargs):
    return create_model_fn(PARAMS, HPARAMS, **kwargs)


def plain_rows(prefix, nodes, parents, n):
    """The reference: the last n of the m + 1 prefixes, each run as a plain sequence with no cache."""
    reference = model_fn(kv_cache=False)
    sequences = [prefix] + [prefix + [nodes[j] for j in path_to(parents, i)] for i in range(len(nodes))]
    return np.concatenate([reference(sequence) for sequence in sequences[-n:]])  # [n, n_vocab]


def nodes_for(parents, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, HPARAMS["n_vocab"], size=len(parents)).tolist()


# --- rows: a tree pass gives the rows of each path run as a plain sequence -----------------------------------


@pytest.mark.parametrize("kv_cache", [True, False])
@pytest.mark.parametrize("tree", list(TREES))
def test_tree_rows_equal_the_rows_of_each_path_run_as_a_plain_sequence(tree, kv_cache):
    """All m + 1 rows (n = m + 1, as the target asks), and the last len(frontier) rows (as the draft asks)."""
    parents = TREES[tree]
    nodes, m = nodes_for(parents), len(parents)
    for n in sorted({m + 1, m, 1} - {0}):
        model = model_fn(kv_cache=kv_cache)
        model(PROMPT)  # something cached first, as in a real run
        rows = model(PROMPT + nodes, n=n, parents=parents)
        assert rows.shape == (n, HPARAMS["n_vocab"]) and rows.dtype == np.float64
        assert np.abs(rows - plain_rows(PROMPT, nodes, parents, n)).max() <= TOLERANCE


def test_a_chain_given_as_parents_is_the_same_as_parents_none():
    """parents = [-1, 0, 1, ..., m - 2] gives exactly what parents=None gives, with the same cost."""
    x = PROMPT + [9, 8, 7, 6]
    plain, chained = model_fn(), model_fn()
    rows_plain = plain(x, n=5)
    rows_chained = chained(x, n=5, parents=[-1, 0, 1, 2])
    assert np.abs(rows_plain - rows_chained).max() <= TOLERANCE
    assert plain.stats == chained.stats


# --- the cache across calls -----------------------------------------------------------------------------------


def test_a_frontier_expansion_feeds_only_the_new_nodes():
    """The draft of a (2, 2, 1) tree: x (5 positions), then depth 1's two nodes (2 positions: the prefix is
    cached), then depth 2's four nodes under them (4: the two earlier nodes are cached), then depth 3's four
    (4). Every call's rows are the plain-sequence ones."""
    parents = TREES["2_2_1"]
    nodes = nodes_for(parents, seed=3)
    model = model_fn()
    model(PROMPT)
    for n_nodes, n_new, expected_positions in [(2, 2, 5 + 2), (6, 4, 5 + 2 + 4), (10, 4, 5 + 2 + 4 + 4)]:
        rows = model(PROMPT + nodes[:n_nodes], n=n_new, parents=parents[:n_nodes])
        assert model.stats.positions == expected_positions
        assert np.abs(rows - plain_rows(PROMPT, nodes[:n_nodes], parents[:n_nodes], n_new)).max() <= TOLERANCE


def test_after_a_tree_pass_a_call_along_one_path_gathers_that_paths_keys_and_values():
    """The target scores a (2, 2, 1) tree (the prompt's last token + 10 nodes = 11 positions, the first 4
    prompt tokens were cached); the path to node 7 (nodes 0, 2, 7) is accepted and a bonus token follows.
    The next call x + path + bonus (a plain sequence) computes 1 position: the path is gathered. A second
    tree hung after x, asking for the row after x too (n = m + 1), computes x's last token again (its row
    is asked for) + the 3 nodes."""
    parents = TREES["2_2_1"]
    nodes = nodes_for(parents, seed=4)
    model = model_fn()
    model(PROMPT[:-1])  # 4 positions
    model(PROMPT + nodes, n=11, parents=parents)  # 11 positions
    path = [nodes[j] for j in path_to(parents, 7)]  # 3 tokens
    x = PROMPT + path + [33]
    rows = model(x)
    assert model.stats.positions == 4 + 11 + 1
    assert np.abs(rows - model_fn(kv_cache=False)(x)).max() <= TOLERANCE

    more = [40, 41, 42]
    rows = model(x + more, n=4, parents=[-1, -1, 0])
    assert model.stats.positions == 4 + 11 + 1 + 1 + 3
    assert np.abs(rows - plain_rows(x, more, [-1, -1, 0], 4)).max() <= TOLERANCE


def test_the_target_verifying_the_next_tree_reuses_the_accepted_path():
    """The target's own rhythm: score tree 1, keep a path, score tree 2 hung after path + bonus. The second
    call needs the row after the bonus token, so it feeds the bonus + tree 2's nodes: 1 + 3 positions."""
    parents = TREES["two_by_two"]
    nodes = nodes_for(parents, seed=5)
    model = model_fn()
    model(PROMPT + nodes, n=7, parents=parents)  # 5 + 6 positions
    x = PROMPT + [nodes[j] for j in path_to(parents, 5)] + [17]  # nodes 1, 5 kept, bonus 17
    tree_2 = [-1, -1, 1]
    rows = model(x + [20, 21, 22], n=4, parents=tree_2)
    assert model.stats.positions == 11 + 1 + 3
    assert np.abs(rows - plain_rows(x, [20, 21, 22], tree_2, 4)).max() <= TOLERANCE


def test_anything_else_falls_back_to_the_longest_reusable_prefix():
    """After a tree pass over PROMPT + 6 nodes: a sequence that leaves the prompt after 3 tokens computes
    everything from there (3 + 2 = 5 positions); a path that leaves the tree after its root computes the
    rest (the root is gathered, 2 positions computed)."""
    parents = TREES["two_by_two"]
    nodes = nodes_for(parents, seed=6)
    model, full = model_fn(), model_fn(kv_cache=False)

    model(PROMPT + nodes, n=7, parents=parents)
    x = PROMPT[:3] + [60, 61, 62, 63]
    assert np.abs(model(x) - full(x)).max() <= TOLERANCE
    assert model.stats.positions == 11 + 4

    model(PROMPT + nodes, n=7, parents=parents)  # the prompt's last 2 tokens + the 6 nodes: 8 positions
    x = PROMPT + [nodes[0], 62, 63]  # node 0 is a root; 62 is none of its children
    assert np.abs(model(x) - full(x)).max() <= TOLERANCE
    assert model.stats.positions == 11 + 4 + 8 + 2


def test_rolling_back_recomputes_only_the_positions_after_the_shared_prefix():
    """Speculative decoding's rejection: after x + 4 guesses (9 positions), x + 1 kept guess + another
    token computes 1 position (5 + 1 cached), and n=3 rows of it recompute the last 3."""
    model, full = model_fn(), model_fn(kv_cache=False)
    model(PROMPT + [10, 11, 12, 13], n=5)
    x = PROMPT + [10, 50]
    assert np.abs(model(x) - full(x)).max() <= TOLERANCE
    assert model.stats.positions == 9 + 1
    assert np.abs(model(x, n=3) - full(x, n=3)).max() <= TOLERANCE
    assert model.stats.positions == 9 + 1 + 3
    assert (model.stats.calls, model.stats.rows) == (3, 5 + 1 + 3)


def test_without_the_cache_every_call_computes_all_of_x_tree_included():
    model = model_fn(kv_cache=False)
    model(PROMPT + [1, 2, 3], n=4, parents=[-1, -1, 0])
    model(PROMPT)
    assert (model.stats.calls, model.stats.positions, model.stats.rows) == (2, 8 + 5, 4 + 1)


def random_calls(rng, n_calls):
    """A seeded mix of what samplers do: grow x, roll back, hang a tree, expand it, follow one of its paths.

    Yields (x, n, parents). After a tree, half of the calls follow one of its paths (plus a token or two).
    """
    x, tree_nodes, tree_parents = list(PROMPT), [], []
    for _ in range(n_calls):
        kinds = ["path", "expand", "tree", "grow", "rollback"]
        kind = rng.choice(kinds, p=[0.5, 0.2, 0.1, 0.1, 0.1] if tree_nodes else [0, 0, 0.5, 0.3, 0.2])
        if kind == "expand":
            tree_parents = tree_parents + rng.integers(-1, len(tree_nodes), size=rng.integers(1, 4)).tolist()
            tree_nodes = tree_nodes + rng.integers(0, 64, size=len(tree_parents) - len(tree_nodes)).tolist()
        elif kind == "tree":
            tree_parents = [-1] + [int(rng.integers(-1, i)) for i in range(1, int(rng.integers(2, 7)))]
            tree_nodes = rng.integers(0, 64, size=len(tree_parents)).tolist()
        else:
            if kind == "path":
                x = x + [tree_nodes[j] for j in path_to(tree_parents, int(rng.integers(len(tree_nodes))))]
            elif kind == "rollback":
                x = x[: max(1, len(x) - int(rng.integers(1, 4)))]
            tree_nodes, tree_parents = [], []
            x = x + rng.integers(0, 64, size=int(rng.integers(1, 3))).tolist()
            if len(x) > 36:
                x = list(PROMPT)  # a new prompt: nothing to reuse
            yield x, int(rng.integers(1, min(3, len(x)) + 1)), None
            continue
        yield x + tree_nodes, int(rng.integers(1, len(tree_nodes) + 2)), tree_parents


def test_a_random_mix_of_calls_always_gives_the_full_recompute_rows():
    """Whatever the cache holds, reuses or gathers, every call's rows are the no-cache model's."""
    model, full = model_fn(), model_fn(kv_cache=False)
    for x, n, parents in random_calls(np.random.default_rng(7), 80):
        assert np.abs(model(x, n=n, parents=parents) - full(x, n=n, parents=parents)).max() <= TOLERANCE
    assert model.stats.positions < full.stats.positions / 3  # the cache did save work


# --- attributes and bad input -----------------------------------------------------------------------------------


def test_n_params_counts_every_weight_once():
    """Per block 12 n_embd^2 + 13 n_embd (c_attn 3e^2 + 3e, c_proj e^2 + e, c_fc 4e^2 + 4e, mlp's c_proj
    4e^2 + e, two layer norms 4e), plus wte, wpe and ln_f; the LM head is wte (tied). For 124M's shapes this
    is the famous 124,439,808; here 64*32 + 48*32 + 2*32 + 2 * (12*32^2 + 13*32) = 29,056."""
    model = model_fn()
    assert model.n_params == 64 * 32 + 48 * 32 + 2 * 32 + 2 * (12 * 32**2 + 13 * 32) == 29_056
    assert (model.n_vocab, model.n_ctx) == (64, 48)


@pytest.mark.parametrize(
    "x, n, parents",
    [
        (PROMPT + [1, 2], 1, [0, -1]),  # a parent after its child
        (PROMPT + [1, 2], 1, [-1, 1]),  # a node its own parent
        (PROMPT + [1, 2], 1, [-1, -2]),  # not a node index
        (PROMPT + [1, 2], 4, [-1, -1]),  # more rows than the m + 1 prefixes
        (PROMPT + [1, 2], 0, [-1, -1]),  # no rows
        (PROMPT + [1, 2], 1, []),  # an empty tree: call model(x) instead
        ([1, 2], 1, [-1, 0, 1]),  # more nodes than tokens
    ],
)
def test_a_call_outside_the_contract_is_a_value_error(x, n, parents):
    with pytest.raises(ValueError):
        model_fn()(x, n=n, parents=parents)
