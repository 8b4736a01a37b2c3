"""gpt2.py is GPT-2: its logits match Hugging Face's GPT2LMHeadModel, and its KV cache changes nothing.

Read gpt2.py first: these tests are its specification.

The reference is a real, independent implementation: tests/make_hf_fixture.py built random-weight
`transformers.GPT2LMHeadModel`s of four shapes (1, 3, 4 and 8 heads; 1 to 3 layers), with random biases and
layer-norm gains/shifts so that no term hides, ran a few inputs through them in PyTorch, and saved the weights
(in OpenAI's layout), the inputs, HF's logits and HF's KV cache to tests/fixtures/hf_gpt2_<name>.npz. These
tests need only NumPy. For token trees (`parents`), hf_gpt2_trees.npz holds another such model, a few trees
hung after a prefix, and HF's last row for each node's path run as a plain sequence.

Tolerances: both sides compute in float32 (about 7 significant digits) with logits of size ~1-6, summing in
different orders; 1e-4 leaves room for that and nothing else (the last test shows that dropping any single
weight, bias or layer-norm term moves the logits by far more). Two NumPy runs of the same network that only
split the work differently (chunks through the cache) agree to 1e-5.
"""

from functools import lru_cache

import numpy as np
import pytest
from conftest import FIXTURES_DIR, path_to

from gpt2 import Cache, empty_cache, gpt2, keep_path, rollback

MODEL_NAMES = ["tiny", "three_heads", "eight_heads", "one_head"]  # tests/fixtures/hf_gpt2_<name>.npz
N_INPUTS = 3  # per model: 1 token, 7 tokens, n_ctx tokens (the last one)
HF_TOLERANCE = 1e-4  # max |our logit - HF's logit|
CACHE_TOLERANCE = 1e-5  # max |chunked - full pass|


def unflatten(flat):
    """{"blocks.0.attn.c_attn.w": w, "wte": wte, ...} -> {"blocks": [{"attn": {"c_attn": {"w": w}}}], "wte": wte}.

    A key segment that is a number is an index into a list (the blocks).
    """
    nested = {}
    for key, value in flat.items():
        *path, leaf = key.split(".")
        node = nested
        for segment, next_segment in zip(path, path[1:] + [leaf]):
            default = [] if next_segment.isdigit() else {}
            if segment.isdigit():
                while len(node) <= int(segment):
                    node.append(default.copy())
                node = node[int(segment)]
            else:
                node = node.setdefault(segment, default)
        node[leaf] = value
    return nested


def leaves(params, prefix=""):
    """The inverse of unflatten: [("blocks.0.attn.c_attn.w", array), ...]."""
    if isinstance(params, np.ndarray):
        return [(prefix, params)]
    items = enumerate(params) if isinstance(params, list) else params.items()
    return [leaf for key, value in items for leaf in leaves(value, f"{prefix}.{key}" if prefix else str(key))]


@lru_cache(maxsize=None)
def load_fixture(name):
    """(hparams, params, cases) from hf_gpt2_<name>.npz; cases[k] = (ids: list[int], hf_logits, hf_present).

    Cached: tests must not modify what they get (the test that perturbs params copies them first).
    """
    with np.load(FIXTURES_DIR / f"hf_gpt2_{name}.npz") as npz:
        arrays = dict(npz)
    hparams = {key.split(".")[1]: int(value) for key, value in arrays.items() if key.startswith("hparams.")}
    param_names = ("wte", "wpe", "ln_f", "blocks")
    params = unflatten({key: value for key, value in arrays.items() if key.split(".")[0] in param_names})
    cases = [
        (arrays[f"inputs.{k}"].tolist(), arrays[f"hf_logits.{k}"], arrays[f"hf_present.{k}"])
        for k in range(N_INPUTS)
    ]
    return hparams, params, cases


def full_length_ids(name):
    """The fixture's input of exactly n_ctx tokens."""
    hparams, _, cases = load_fixture(name)
    ids = cases[-1][0]
    assert len(ids) == hparams["n_ctx"], "the fixture's last input should be n_ctx long"
    return ids


def max_abs_diff(a, b):
    assert a.shape == b.shape, f"shapes differ: {a.shape} vs {b.shape}"
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


# --- the fixture itself -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_the_fixture_holds_float32_params_of_the_shapes_in_its_hparams(name):
    """The layout in notes/CONTRACTS.md; it guards the other tests against reading a broken fixture."""
    hparams, params, cases = load_fixture(name)
    n_vocab, n_ctx, n_embd, n_layer = (hparams[k] for k in ("n_vocab", "n_ctx", "n_embd", "n_layer"))
    assert params["wte"].shape == (n_vocab, n_embd)
    assert params["wpe"].shape == (n_ctx, n_embd)
    assert len(params["blocks"]) == n_layer
    assert params["blocks"][-1]["mlp"]["c_proj"]["w"].shape == (4 * n_embd, n_embd)
    assert params["blocks"][0]["attn"]["c_attn"]["w"].shape == (n_embd, 3 * n_embd)
    assert all(value.dtype == np.float32 for _, value in leaves(params))
    assert len(leaves(params)) == 4 + 12 * n_layer
    assert [len(ids) for ids, _, _ in cases] == [1, 7, n_ctx]


# --- gpt2 == Hugging Face -----------------------------------------------------------------------------------


@pytest.mark.parametrize("k", range(N_INPUTS))
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_logits_match_hugging_face_gpt2lmheadmodel(name, k, record_property):
    """Same weights, same ids -> HF's logits to 1e-4, as float32 [len(ids), n_vocab] (no float64 creeping in).
    The difference is recorded for the README's sentence on it (tools/small_parts.py's hf_agreement_text)."""
    hparams, params, cases = load_fixture(name)
    ids, hf_logits, _ = cases[k]
    logits = gpt2(ids, **params, n_head=hparams["n_head"])
    assert logits.dtype == np.float32
    diff = max_abs_diff(logits, hf_logits)
    record_property("max_abs_diff", diff)
    record_property("tolerance", HF_TOLERANCE)
    assert diff <= HF_TOLERANCE


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_the_kv_cache_holds_hugging_faces_keys_and_values(name):
    """present.kv[layer, 0] = the keys and present.kv[layer, 1] = the values HF caches, [n_head, n_seq, head_dim]."""
    hparams, params, cases = load_fixture(name)
    n_head = hparams["n_head"]
    for ids, hf_logits, hf_present in cases:
        logits, present = gpt2(ids, **params, n_head=n_head, past=empty_cache(params["blocks"], n_head))
        assert present.kv.dtype == np.float32 and present.length == len(ids)
        assert max_abs_diff(present.kv, hf_present) <= HF_TOLERANCE
        assert max_abs_diff(logits, hf_logits) <= HF_TOLERANCE


# --- the KV cache -------------------------------------------------------------------------------------------


def chunkings(n):
    """Ways to cut n tokens into consecutive chunks: named ones, and three random ones from a seeded rng."""
    named = {"one_at_a_time": [1] * n, "3_5_rest": [3, 5, n - 8], "all_but_one_then_one": [n - 1, 1]}
    rng = np.random.default_rng(20240601)
    for i in range(3):
        cuts = np.sort(rng.choice(np.arange(1, n), size=rng.integers(1, 6), replace=False))
        named[f"random_{i}"] = np.diff(np.concatenate([[0], cuts, [n]])).tolist()
    return named


CHUNKING_NAMES = list(chunkings(16))


@pytest.mark.parametrize("chunking", CHUNKING_NAMES)
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_feeding_in_chunks_gives_the_full_pass_logits(name, chunking):
    """Feeding n_ctx tokens in chunks, each chunk with the cache of the ones before it, gives the full pass.

    The logits of the chunks, stacked, equal the logits of one pass over all the tokens, and so do the final
    caches; each chunk's cache has grown by the chunk's length (one buffer, written in place, throughout).
    """
    hparams, params, _ = load_fixture(name)
    n_head = hparams["n_head"]
    ids = full_length_ids(name)
    sizes = chunkings(len(ids))[chunking]
    assert sum(sizes) == len(ids) and min(sizes) >= 1

    full_logits, full_present = gpt2(ids, **params, n_head=n_head, past=empty_cache(params["blocks"], n_head))

    past, chunk_logits, start = empty_cache(params["blocks"], n_head), [], 0
    for size in sizes:
        logits, past = gpt2(ids[start : start + size], **params, n_head=n_head, past=past)
        start += size
        assert logits.shape == (size, hparams["n_vocab"]) and logits.dtype == np.float32
        assert past.length == start and past.kv.dtype == np.float32
        chunk_logits.append(logits)

    assert max_abs_diff(np.concatenate(chunk_logits), full_logits) <= CACHE_TOLERANCE
    assert max_abs_diff(past.kv, full_present.kv) <= CACHE_TOLERANCE


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_a_cache_cut_back_to_a_prefix_continues_like_a_fresh_pass_over_that_prefix(name):
    """Speculative decoding's rollback: cache k tokens, keep the first m (rollback(cached, m)), add new tokens.

    The result must be what a fresh pass over ids[:m] + new gives: the m kept positions carry nothing of
    the k - m dropped ones. The new tokens differ from the dropped ones, as after a rejected draft. The new
    tokens are written into the same buffer, over the dropped ones, so m goes DOWN from one try to the next:
    each pass writes at positions >= m, which the later, shorter rollbacks do not read (gpt2.py's rule).
    """
    hparams, params, _ = load_fixture(name)
    n_head, n_vocab = hparams["n_head"], hparams["n_vocab"]
    ids = full_length_ids(name)
    k = 3 * len(ids) // 4
    _, cached = gpt2(ids[:k], **params, n_head=n_head, past=empty_cache(params["blocks"], n_head))

    for m in sorted({0, 1, k // 2, k - 1}, reverse=True):
        new = [(token + 1) % n_vocab for token in ids[m : m + 3]]  # 3 tokens, each unlike the dropped one
        logits, present = gpt2(new, **params, n_head=n_head, past=rollback(cached, m))

        fresh = empty_cache(params["blocks"], n_head)
        fresh_logits, fresh_present = gpt2(ids[:m] + new, **params, n_head=n_head, past=fresh)
        assert max_abs_diff(logits, fresh_logits[m:]) <= CACHE_TOLERANCE
        assert max_abs_diff(present.kv, fresh_present.kv) <= CACHE_TOLERANCE


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_no_cache_is_the_same_as_an_empty_cache(name):
    """gpt2(ids) == gpt2(ids, past=empty_cache(...))[0]; present.kv is [n_layer, 2, n_head, len(ids), head_dim]."""
    hparams, params, cases = load_fixture(name)
    n_head, n_layer, head_dim = hparams["n_head"], hparams["n_layer"], hparams["n_embd"] // hparams["n_head"]

    empty = empty_cache(params["blocks"], n_head)
    assert empty.length == 0 and empty.kv.shape == (n_layer, 2, n_head, 0, head_dim)
    assert empty.kv.dtype == np.float32

    for ids, _, _ in cases:
        without_cache = gpt2(ids, **params, n_head=n_head)
        assert isinstance(without_cache, np.ndarray), "without a cache gpt2 returns the logits alone"
        with_cache, present = gpt2(ids, **params, n_head=n_head, past=empty)
        assert max_abs_diff(without_cache, with_cache) <= CACHE_TOLERANCE
        assert present.kv.shape == (n_layer, 2, n_head, len(ids), head_dim) and present.length == len(ids)
        assert present.kv.dtype == np.float32 and present.parents == ()


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_n_logits_returns_the_last_rows_of_the_full_logits(name):
    """n_logits=j gives rows [-j:] of the full logits, with or without a cache, and the cache is still whole."""
    hparams, params, _ = load_fixture(name)
    n_head = hparams["n_head"]
    ids = full_length_ids(name)
    full_logits = gpt2(ids, **params, n_head=n_head)

    for n_logits in sorted({1, 2, len(ids) // 2, len(ids)}):
        logits = gpt2(ids, **params, n_head=n_head, n_logits=n_logits)
        assert logits.shape == (n_logits, hparams["n_vocab"]) and logits.dtype == np.float32
        assert max_abs_diff(logits, full_logits[-n_logits:]) <= CACHE_TOLERANCE

    # with a cache of the first half, the second half's last rows, and a cache of all the tokens
    half = len(ids) // 2
    _, past = gpt2(ids[:half], **params, n_head=n_head, past=empty_cache(params["blocks"], n_head))
    for n_logits in sorted({1, 3, len(ids) - half}):
        logits, present = gpt2(ids[half:], **params, n_head=n_head, past=past, n_logits=n_logits)
        assert logits.shape == (n_logits, hparams["n_vocab"])
        assert max_abs_diff(logits, full_logits[-n_logits:]) <= CACHE_TOLERANCE
        assert present.length == len(ids)


# --- token trees: one pass scores every path -----------------------------------------------------------------


@lru_cache(maxsize=None)
def load_trees():
    """(hparams, params, trees) from hf_gpt2_trees.npz; trees[k] = (prefix, nodes, parents, hf_rows [m, n_vocab])."""
    with np.load(FIXTURES_DIR / "hf_gpt2_trees.npz") as npz:
        arrays = dict(npz)
    hparams = {key.split(".")[1]: int(value) for key, value in arrays.items() if key.startswith("hparams.")}
    param_names = ("wte", "wpe", "ln_f", "blocks")
    params = unflatten({key: value for key, value in arrays.items() if key.split(".")[0] in param_names})
    n_trees = sum(key.startswith("nodes.") for key in arrays)
    trees = [
        tuple(arrays[f"{field}.{k}"].tolist() for field in ("prefix", "nodes", "parents")) + (arrays[f"hf_rows.{k}"],)
        for k in range(n_trees)
    ]
    return hparams, params, trees


TREE_CASES = range(5)  # the trees of hf_gpt2_trees.npz (tests/make_hf_fixture.py's TREES)


def cached_prefix(params, n_head, prefix):
    """A cache holding the prefix (an empty one for an empty prefix)."""
    past = empty_cache(params["blocks"], n_head)
    return gpt2(prefix, **params, n_head=n_head, past=past)[1] if prefix else past


@pytest.mark.parametrize("k", TREE_CASES)
def test_a_tree_pass_gives_hf_gpt2s_logits_for_every_path(k):
    """Row i of one pass over the nodes (the prefix cached) = HF's last row for prefix + the path to node i.

    The trees have several roots and depths up to 5 (parents in tests/make_hf_fixture.py's TREES); present
    holds the prefix, then every node in input order.
    """
    hparams, params, trees = load_trees()
    prefix, nodes, parents, hf_rows = trees[k]
    n_head = hparams["n_head"]
    logits, present = gpt2(nodes, **params, n_head=n_head, past=cached_prefix(params, n_head, prefix), parents=parents)
    assert logits.dtype == np.float32
    assert max_abs_diff(logits, hf_rows) <= HF_TOLERANCE
    assert (present.length, present.n_prefix) == (len(prefix) + len(nodes), len(prefix))
    assert present.parents == tuple(parents)


@pytest.mark.parametrize("k", TREE_CASES)
def test_the_prefix_can_come_in_the_same_pass_as_the_tree_or_without_a_cache(k):
    """No cache: inputs = prefix + nodes, the prefix a chain and the roots hanging from its last token."""
    hparams, params, trees = load_trees()
    prefix, nodes, parents, hf_rows = trees[k]
    n = len(prefix)
    whole = [i - 1 for i in range(n)] + [n + p if p >= 0 else n - 1 for p in parents]
    logits = gpt2(prefix + nodes, **params, n_head=hparams["n_head"], parents=whole)
    assert max_abs_diff(logits[n:], hf_rows) <= HF_TOLERANCE


@pytest.mark.parametrize("k", TREE_CASES)
def test_a_frontier_expansion_over_cached_nodes_gives_the_same_rows(k):
    """Nodes fed in two passes (the second's parents may be cached nodes) give the one-pass rows."""
    hparams, params, trees = load_trees()
    prefix, nodes, parents, hf_rows = trees[k]
    n_head, half = hparams["n_head"], (len(nodes) + 1) // 2
    first, past = gpt2(nodes[:half], **params, n_head=n_head, past=cached_prefix(params, n_head, prefix),
                       parents=parents[:half])
    second, present = gpt2(nodes[half:], **params, n_head=n_head, past=past, parents=parents[half:])
    assert max_abs_diff(np.concatenate([first, second]), hf_rows) <= HF_TOLERANCE


@pytest.mark.parametrize("k", TREE_CASES)
def test_keeping_one_path_leaves_the_cache_of_that_path_as_a_plain_sequence(k):
    """keep_path(present, path to node i's parent), then node i alone: HF's row for node i, every i.

    The kept cache is prefix + path as a plain sequence, equal to a fresh pass over it; the keep is a gather
    in place, so each i starts from a fresh tree pass.
    """
    hparams, params, trees = load_trees()
    prefix, nodes, parents, hf_rows = trees[k]
    n_head = hparams["n_head"]
    for i in range(len(nodes)):
        _, tree = gpt2(nodes, **params, n_head=n_head, past=cached_prefix(params, n_head, prefix), parents=parents)
        path = path_to(parents, i)[:-1]
        kept = keep_path(tree, path)
        assert (kept.length, kept.parents) == (len(prefix) + len(path), ())
        sequence = prefix + [nodes[j] for j in path]
        if sequence:
            fresh = cached_prefix(params, n_head, sequence)
            assert max_abs_diff(kept.kv, fresh.kv) <= CACHE_TOLERANCE
        logits, _ = gpt2([nodes[i]], **params, n_head=n_head, past=kept)
        assert max_abs_diff(logits[0], hf_rows[i]) <= HF_TOLERANCE


def test_a_chain_given_as_parents_is_the_same_pass_as_parents_none():
    """parents = [-1, 0, 1, ...]: the same logits and keys and values as parents=None. The cache says it is a
    tree (what it was given); keeping its one path makes it the plain sequence parents=None leaves."""
    hparams, params, cases = load_fixture("tiny")
    ids, hf_logits, hf_present = cases[1]
    n_head = hparams["n_head"]
    chain = list(range(-1, len(ids) - 1))
    logits, present = gpt2(ids, **params, n_head=n_head, past=empty_cache(params["blocks"], n_head), parents=chain)
    assert max_abs_diff(logits, hf_logits) <= HF_TOLERANCE
    assert present.parents == tuple(chain) and max_abs_diff(present.kv, hf_present) <= HF_TOLERANCE
    kept = keep_path(present, range(len(ids)))
    assert kept.buffer is present.buffer and (kept.length, kept.parents) == (len(ids), ())


def test_a_cache_is_one_buffer_written_in_place_and_rolling_back_copies_nothing():
    """gpt2.py's rule, visible: a pass writes into past's buffer (no copy of the cache); rollback shares it.

    And its flip side, the reason only the newest value is handed on: an OLD value that claimed a position a
    later pass wrote over no longer holds its own keys there.
    """
    hparams, params, _ = load_fixture("tiny")
    n_head, ids = hparams["n_head"], full_length_ids("tiny")
    _, past = gpt2(ids[:10], **params, n_head=n_head, past=empty_cache(params["blocks"], n_head))
    _, present = gpt2(ids[10:12], **params, n_head=n_head, past=past)
    assert present.buffer is past.buffer and present.buffer.shape[3] == hparams["n_ctx"]
    assert rollback(present, 5).buffer is present.buffer

    keys_before = past.kv.copy()
    _, other = gpt2([(ids[5] + 1) % hparams["n_vocab"]], **params, n_head=n_head, past=rollback(past, 5))
    assert max_abs_diff(other.kv, keys_before[:, :, :, :6]) > 100 * CACHE_TOLERANCE  # position 5 rewritten
    assert max_abs_diff(past.kv[:, :, :, :5], keys_before[:, :, :, :5]) == 0  # below it: untouched


@pytest.mark.parametrize(
    "parents",
    [[0, -1], [-1, 1], [-1, -2], [-1], [-1, 0, 1]],  # child first; its own parent; not an index; too few; too many
)
def test_parents_that_are_not_a_tree_of_the_inputs_raise_value_error(parents):
    hparams, params, _ = load_trees()
    with pytest.raises(ValueError):
        gpt2([1, 2], **params, n_head=hparams["n_head"], parents=parents)


def test_keep_path_refuses_what_is_not_a_root_to_node_path():
    hparams, params, trees = load_trees()
    prefix, nodes, parents, _ = trees[0]  # parents [-1, -1, 0, 0, 1, 1, 2, 3, 4, 5]
    _, tree = gpt2(nodes, **params, n_head=hparams["n_head"], past=cached_prefix(params, hparams["n_head"], prefix),
                   parents=parents)
    for bad in ([2], [0, 4], [0, 2, 2], [10]):  # not from a root; 4 is not 0's child; repeated; no node 10
        with pytest.raises(ValueError):
            keep_path(tree, bad)
    assert isinstance(keep_path(tree, [1, 4, 8]), Cache)


# --- bad input ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tiny", "one_head"])
def test_more_tokens_than_n_ctx_in_total_raise_value_error(name):
    """n_ctx positions is all wpe has: past + new tokens beyond that is a ValueError, not a wrong answer.

    Exactly n_ctx in total is fine (the full-length fixture inputs, and n_ctx - 1 cached + 1 new here).
    """
    hparams, params, _ = load_fixture(name)
    n_head, n_ctx = hparams["n_head"], hparams["n_ctx"]
    ids = full_length_ids(name)  # n_ctx tokens
    with pytest.raises(ValueError):
        gpt2(ids + [0], **params, n_head=n_head)
    with pytest.raises(ValueError):
        gpt2(ids + [0], **params, n_head=n_head, past=empty_cache(params["blocks"], n_head))

    _, past = gpt2(ids[:-1], **params, n_head=n_head, past=empty_cache(params["blocks"], n_head))  # n_ctx - 1
    logits, full = gpt2(ids[-1:], **params, n_head=n_head, past=past)  # n_ctx in total: fine
    assert full.length == n_ctx
    with pytest.raises(ValueError):
        gpt2(ids[-2:], **params, n_head=n_head, past=past)  # n_ctx - 1 + 2
    with pytest.raises(ValueError):
        gpt2([0], **params, n_head=n_head, past=full)  # n_ctx + 1


def test_empty_inputs_raise_value_error():
    """No new token: nothing to compute logits for, so ValueError, with or without a cache."""
    hparams, params, cases = load_fixture("tiny")
    n_head = hparams["n_head"]
    with pytest.raises(ValueError):
        gpt2([], **params, n_head=n_head)
    with pytest.raises(ValueError):
        gpt2([], **params, n_head=n_head, past=empty_cache(params["blocks"], n_head))
    _, past = gpt2(cases[1][0], **params, n_head=n_head, past=empty_cache(params["blocks"], n_head))
    with pytest.raises(ValueError):
        gpt2([], **params, n_head=n_head, past=past)


# --- the fixture has teeth ----------------------------------------------------------------------------------


def reset_to_hf_initial_value(key, value):
    """What HF's initialisation would have left: biases 0, layer-norm gains 1; weight matrices zeroed."""
    if key.endswith(".g"):
        return np.ones_like(value)
    return np.zeros_like(value)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_weight_bias_and_layer_norm_term_shows_in_the_logits(name, record_property):
    """Resetting any single parameter array moves the logits 100x further from HF's than the tolerance.

    So the comparison with HF above cannot pass for a forward pass that forgets, say, ln_f.b, one block's
    mlp.c_fc.b, or the position embedding: every term the fixture's random weights hold is exercised.
    """
    hparams, params, cases = load_fixture(name)
    ids, hf_logits, _ = cases[-1]
    flat = dict(leaves(params))
    least = float("inf")
    for key in flat:
        perturbed = unflatten({**flat, key: reset_to_hf_initial_value(key, flat[key])})
        diff = max_abs_diff(gpt2(ids, **perturbed, n_head=hparams["n_head"]), hf_logits)
        assert diff > 100 * HF_TOLERANCE, f"resetting {key} does not show"
        least = min(least, diff)
    record_property("least_max_abs_diff", least)  # the README quotes it (tools/small_parts.py's hf_agreement_text)
