"""gpt2.py is GPT-2: its logits match Hugging Face's GPT2LMHeadModel, and its KV cache changes nothing.

The reference is a real, independent implementation: tests/make_hf_fixture.py built random-weight
`transformers.GPT2LMHeadModel`s of four shapes (1, 3, 4 and 8 heads; 1 to 3 layers), with random biases and
layer-norm gains/shifts so that no term hides, ran a few inputs through them in PyTorch, and saved the weights
(in OpenAI's layout), the inputs, HF's logits and HF's KV cache to tests/fixtures/hf_gpt2_<name>.npz. These
tests need only NumPy.

Tolerances: both sides compute in float32 (about 7 significant digits) with logits of size ~1-6, summing in
different orders; 1e-4 leaves room for that and nothing else (the last test shows that dropping any single
weight, bias or layer-norm term moves the logits by far more). Two NumPy runs of the same network that only
split the work differently (chunks through the cache) agree to 1e-5.
"""

from functools import lru_cache

import numpy as np
import pytest
from conftest import FIXTURES_DIR

from gpt2 import empty_cache, gpt2, rollback

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
def test_logits_match_hugging_face_gpt2lmheadmodel(name, k):
    """Same weights, same ids -> HF's logits to 1e-4, as float32 [len(ids), n_vocab] (no float64 creeping in)."""
    hparams, params, cases = load_fixture(name)
    ids, hf_logits, _ = cases[k]
    logits = gpt2(ids, **params, n_head=hparams["n_head"])
    assert logits.dtype == np.float32
    assert max_abs_diff(logits, hf_logits) <= HF_TOLERANCE


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
def test_every_weight_bias_and_layer_norm_term_shows_in_the_logits(name):
    """Resetting any single parameter array moves the logits 100x further from HF's than the tolerance.

    So the comparison with HF above cannot pass for a forward pass that forgets, say, ln_f.b, one block's
    mlp.c_fc.b, or the position embedding: every term the fixture's random weights hold is exercised.
    """
    hparams, params, cases = load_fixture(name)
    ids, hf_logits, _ = cases[-1]
    flat = dict(leaves(params))
    for key in flat:
        perturbed = unflatten({**flat, key: reset_to_hf_initial_value(key, flat[key])})
        logits = gpt2(ids, **perturbed, n_head=hparams["n_head"])
        assert max_abs_diff(logits, hf_logits) > 100 * HF_TOLERANCE, f"resetting {key} does not show"
