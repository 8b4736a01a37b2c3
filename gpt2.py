"""GPT-2's forward pass in NumPy, with a KV cache.

A ladder of small pure functions, from the bottom up (the names of the parameters are the names in OpenAI's
checkpoint, so `gpt2(ids, **params, n_head=hparams["n_head"])` works):

    gelu, softmax, layer_norm, linear      the building blocks
    ffn                                    the MLP of a block: linear -> gelu -> linear
    attention, mha                         causal multi-head self-attention, all heads in one product
    transformer_block                      x + mha(ln_1(x)), then x + ffn(ln_2(x))
    gpt2                                   embeddings -> blocks -> ln_f -> logits (the LM head is wte, tied)

The KV cache is a value, not hidden state (like `past` -> `present` in openai/gpt-2). Attention needs the keys
and values of every earlier position; instead of recomputing them, `gpt2` takes them in as `past` and hands
back `present` = `past` + the keys and values of the new positions:

    logits, present = gpt2([464, 2068], **params, n_head=12, past=empty_cache(params["blocks"], 12))
    logits, present = gpt2([7586], **params, n_head=12, past=present)   # one new token, 2 old ones cached

There is one code path: without a cache, `gpt2` runs with an empty one and returns only the logits. A cache
is a plain array, so rolling it back to its first n tokens (as speculative decoding does with rejected
tokens) is slicing: `present[:, :, :, :n]`.

Everything is float32 from end to end. Under NumPy 2, a float32 array times a NumPy float64 scalar (such as
`np.sqrt(2 / np.pi)`) is float64, which makes every later matrix product twice as heavy; so constants that
are NumPy scalars are made float32 by hand (plain Python floats are fine: they adapt to the array).

Shape letters: n_seq new positions, n_past cached positions, n_embd model width, n_head heads,
n_vocab vocabulary size, n_layer blocks.
"""

import numpy as np

# The shapes of OpenAI's four released models (their hparams.json files).
HPARAMS = {
    "124M": {"n_vocab": 50257, "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12},
    "355M": {"n_vocab": 50257, "n_ctx": 1024, "n_embd": 1024, "n_head": 16, "n_layer": 24},
    "774M": {"n_vocab": 50257, "n_ctx": 1024, "n_embd": 1280, "n_head": 20, "n_layer": 36},
    "1558M": {"n_vocab": 50257, "n_ctx": 1024, "n_embd": 1600, "n_head": 25, "n_layer": 48},
}

SQRT_2_OVER_PI = np.float32(np.sqrt(2 / np.pi))  # float32, or gelu would turn every activation into float64


def gelu(x):
    """GPT-2's GELU, the tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).

    x^3 is written x * x * x: NumPy computes float32 `x**3` with a general power function per element,
    which made this line cost as much as a whole weight matrix.
    """
    return 0.5 * x * (1 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))  # same shape as x


def softmax(x):
    """Softmax over the last axis; subtracting the max first keeps exp from overflowing."""
    exp_x = np.exp(x - np.max(x, axis=-1, keepdims=True))  # same shape as x
    return exp_x / np.sum(exp_x, axis=-1, keepdims=True)  # same shape as x


def layer_norm(x, g, b, eps: float = 1e-5):
    """Normalise each row of x to mean 0 and variance 1, then scale by g and shift by b."""
    mean = np.mean(x, axis=-1, keepdims=True)  # [n_seq, 1]
    centered = x - mean  # [n_seq, n_embd]
    variance = np.mean(centered * centered, axis=-1, keepdims=True)  # [n_seq, 1]
    return g * centered / np.sqrt(variance + eps) + b  # [n_seq, n_embd]


def linear(x, w, b):
    """x @ w + b: [m, n_in] @ [n_in, n_out] + [n_out] -> [m, n_out]."""
    return x @ w + b


def ffn(x, c_fc, c_proj):
    """The MLP of a block: widen to 4 * n_embd, GELU, project back."""
    a = gelu(linear(x, **c_fc))  # [n_seq, n_embd] -> [n_seq, 4 * n_embd]
    return linear(a, **c_proj)  # [n_seq, 4 * n_embd] -> [n_seq, n_embd]


def attention(q, k, v, mask):
    """Scaled dot-product attention for all heads at once.

    q [n_head, n_seq, head_dim], k and v [n_head, n_past + n_seq, head_dim], mask [n_seq, n_past + n_seq].
    """
    scale = np.float32(1 / np.sqrt(q.shape[-1]))  # float32, see the module docstring
    scores = q @ k.transpose(0, 2, 1) * scale + mask  # [n_head, n_seq, n_past + n_seq]
    return softmax(scores) @ v  # [n_head, n_seq, head_dim]


def causal_mask(n_seq: int, n_past: int):
    """[n_seq, n_past + n_seq]: 0 where new position i may look (keys 0 .. n_past + i), -1e10 after that.

    For n_seq=2, n_past=1 (the keys are positions 0, 1, 2; the queries are positions 1 and 2):
        [[0, 0, -1e10],
         [0, 0,     0]]
    """
    return np.triu(np.full((n_seq, n_past + n_seq), -1e10, dtype=np.float32), k=n_past + 1)


def mha(x, c_attn, c_proj, n_head: int, past):
    """Causal multi-head self-attention of the new positions over the cached and new ones.

    x [n_seq, n_embd]; past [2, n_head, n_past, head_dim] holds the keys and values of the earlier positions.
    Returns the output [n_seq, n_embd] and present [2, n_head, n_past + n_seq, head_dim].
    """
    n_seq, n_embd = x.shape
    head_dim = n_embd // n_head

    qkv = linear(x, **c_attn)  # [n_seq, n_embd] -> [n_seq, 3 * n_embd]

    # split into q, k, v and each into heads, in one reshape: the 3 * n_embd columns are q's n_embd, then
    # k's, then v's, and within each, head 0's head_dim columns, then head 1's, ...
    qkv = qkv.reshape(n_seq, 3, n_head, head_dim)  # [n_seq, 3 * n_embd] -> [n_seq, 3, n_head, head_dim]
    q, k, v = qkv.transpose(1, 2, 0, 3)  # 3 x [n_head, n_seq, head_dim]

    # the cache: the new keys and values go after the cached ones
    present = np.concatenate([past, np.stack([k, v])], axis=2)  # [2, n_head, n_past + n_seq, head_dim]
    k, v = present  # 2 x [n_head, n_past + n_seq, head_dim]

    mask = causal_mask(n_seq, n_past=past.shape[2])  # [n_seq, n_past + n_seq]
    out = attention(q, k, v, mask)  # [n_head, n_seq, head_dim]

    # merge the heads: [n_head, n_seq, head_dim] -> [n_seq, n_head, head_dim] -> [n_seq, n_embd]
    out = out.transpose(1, 0, 2).reshape(n_seq, n_embd)
    return linear(out, **c_proj), present  # [n_seq, n_embd], [2, n_head, n_past + n_seq, head_dim]


def transformer_block(x, mlp, attn, ln_1, ln_2, n_head: int, past):
    """One pre-norm block: x + attention(ln_1(x)), then x + mlp(ln_2(x)). Returns (x, present)."""
    a, present = mha(layer_norm(x, **ln_1), **attn, n_head=n_head, past=past)  # [n_seq, n_embd]
    x = x + a  # [n_seq, n_embd]
    x = x + ffn(layer_norm(x, **ln_2), **mlp)  # [n_seq, n_embd]
    return x, present


def empty_cache(blocks, n_head: int):
    """A KV cache holding no positions: [n_layer, 2, n_head, 0, head_dim] float32."""
    n_embd = blocks[0]["ln_1"]["g"].shape[0]
    return np.zeros((len(blocks), 2, n_head, 0, n_embd // n_head), dtype=np.float32)


def gpt2(inputs, wte, wpe, blocks, ln_f, n_head: int, past=None, n_logits=None):
    """Logits of the next token after each of the new positions `inputs`.

    inputs: list of token ids; they follow the n_past tokens whose keys and values are in `past`.
    wte [n_vocab, n_embd], wpe [n_ctx, n_embd], blocks, ln_f: the weights (see the module docstring).
    past: a KV cache [n_layer, 2, n_head, n_past, head_dim] from an earlier call, `empty_cache(...)`, or None.
    n_logits: compute logits for the last n_logits new positions only (default: all of them); a sampler
        that needs one next-token distribution saves the [n_seq, n_embd] x [n_embd, n_vocab] product.

    Returns logits [n_logits, n_vocab] (float32); or (logits, present) when a cache was passed in, where
    present [n_layer, 2, n_head, n_past + n_seq, head_dim] is past followed by the new positions.
    """
    return_cache = past is not None
    if past is None:
        past = empty_cache(blocks, n_head)  # no cache is an empty cache: one code path
    n_past, n_seq = past.shape[3], len(inputs)
    n_logits = n_seq if n_logits is None else n_logits
    _check_inputs(inputs, n_past, n_logits, n_vocab=wte.shape[0], n_ctx=wpe.shape[0])

    # token embedding + position embedding; the new tokens sit at positions n_past .. n_past + n_seq - 1
    x = wte[inputs] + wpe[n_past : n_past + n_seq]  # [n_seq, n_embd]

    presents = []
    for block, block_past in zip(blocks, past):  # block_past: [2, n_head, n_past, head_dim]
        x, block_present = transformer_block(x, **block, n_head=n_head, past=block_past)  # [n_seq, n_embd]
        presents.append(block_present)
    present = np.stack(presents)  # [n_layer, 2, n_head, n_past + n_seq, head_dim]

    x = layer_norm(x[n_seq - n_logits :], **ln_f)  # [n_logits, n_embd]
    logits = x @ wte.T  # [n_logits, n_embd] @ [n_embd, n_vocab] -> [n_logits, n_vocab]: the LM head is wte
    return (logits, present) if return_cache else logits


def _check_inputs(inputs, n_past: int, n_logits: int, n_vocab: int, n_ctx: int):
    """ValueError, saying what to do, for inputs the model cannot take."""
    if len(inputs) == 0:
        raise ValueError("gpt2 needs at least one new token id in `inputs`; got an empty list")
    if n_past + len(inputs) > n_ctx:
        raise ValueError(
            f"{n_past} cached + {len(inputs)} new tokens = {n_past + len(inputs)} is more than GPT-2's context "
            f"of n_ctx={n_ctx} positions: use a shorter prompt or generate fewer tokens"
        )
    if not 1 <= n_logits <= len(inputs):
        raise ValueError(f"n_logits must be between 1 and len(inputs)={len(inputs)}; got {n_logits}")
    bad = [i for i in inputs if not 0 <= i < n_vocab]
    if bad:
        raise ValueError(f"token ids must be in [0, {n_vocab}); got {bad[:5]}")


def column_major(params: dict) -> dict:
    """The same parameters, with each block's weight matrices stored column by column (Fortran order).

    Shapes and values do not change: w is still [n_in, n_out] and `x @ w` is the same product; only the order
    of the numbers in memory does. A decoding step multiplies ONE row x by each w. With w stored column by
    column, each output x @ w[:, j] is a dot product over contiguous memory, which OpenBLAS streams faster:
    on our 2-core machines 124M's 48 block matrices took 8.0 ms instead of 10.0 ms for a one-row product, and
    multi-row products were no slower. (The LM head, x @ wte.T, gets this layout for free: wte.T is wte
    read column by column.) The loaders in utils.py and `random_params` return parameters in this layout.
    """

    def convert(tree):
        if isinstance(tree, dict):
            return {key: convert(value) for key, value in tree.items()}
        return np.asfortranarray(tree) if tree.ndim == 2 else tree  # the [n_in, n_out] matrices

    return {**params, "blocks": [convert(block) for block in params["blocks"]]}


def random_params(hparams: dict, rng: np.random.Generator, std: float = 0.02) -> dict:
    """Random float32 weights of GPT-2's shapes, in the checkpoint's layout, for tests and benchmarks.

    Every term is non-trivial: biases are random and layer-norm gains and shifts are not 1 and 0, so a
    forward pass that forgets one of them gives different logits.
    """
    n_vocab, n_ctx, n_embd, n_layer = (hparams[k] for k in ("n_vocab", "n_ctx", "n_embd", "n_layer"))

    def normal(*shape, scale=std):
        return scale * rng.standard_normal(shape, dtype=np.float32)  # float32: a Python float adapts

    def norm():
        return {"g": 1 + normal(n_embd, scale=0.1), "b": normal(n_embd, scale=0.1)}

    def dense(n_in, n_out):
        return {"w": normal(n_in, n_out), "b": normal(n_out)}

    blocks = [
        {
            "ln_1": norm(),
            "attn": {"c_attn": dense(n_embd, 3 * n_embd), "c_proj": dense(n_embd, n_embd)},
            "ln_2": norm(),
            "mlp": {"c_fc": dense(n_embd, 4 * n_embd), "c_proj": dense(4 * n_embd, n_embd)},
        }
        for _ in range(n_layer)
    ]
    wte, wpe = normal(n_vocab, n_embd), normal(n_ctx, n_embd, scale=0.01)
    params = {"wte": wte, "wpe": wpe, "blocks": blocks, "ln_f": norm()}
    return column_major(params)
