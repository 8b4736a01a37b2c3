"""Where speed plugs into the plain model: the one seam, installed by model_fn.create_model_fn.

gpt2.py is the math alone: `x @ w + b`, `q @ k.T`, a cache buffer of np.zeros. It runs as fast as it does here
because model_fn.py hands `gpt2` three things made by this file instead of the plain ones (`fast`):

- the weights, each matrix wrapped in a `Matrix`, whose `x @ w` is products.matmul(x, w): the route measured
  fastest on this machine for that kind of matrix and that many rows, a share of the columns multiplied by each
  helper process on another core (speed/products.py, speed/second_core.py);
- the cache buffer, made in memory the helpers can map where they share the heads (products.kv_buffer);
- each block's `attend` (gpt2.mha's seam): gpt2.attention with the heads split with the helper
  (products.share_heads) and the scores q @ k.T by their measured route (`routed_attention`).

Nothing here changes what is computed: the same products, added in another order, so the logits agree with the
plain core's to float32 rounding and greedy decoding writes the same tokens (tests/test_plug.py runs both).
`python main.py --plain` (create_model_fn(..., plain=True)) runs the core alone.

    weights, cache = fast(params, n_head=12, n_ctx=1024)
    logits, present = gpt2.gpt2([464, 2068], **weights, n_head=12, past=cache)   # the same logits, faster
"""

import gpt2
from speed import products


class Matrix:
    """A weight matrix whose `x @ w` takes this machine's route (products.matmul); indexing and `.T` as an array.

    NumPy hands `x @ w` to `w.__rmatmul__(x)` because `__array_ufunc__` is None. `wte[ids]` (the embedding) is
    the array's rows; `wte.T` (the tied LM head) is a Matrix of the transposed view, products' "head" kind.
    """

    __array_ufunc__ = None  # x @ Matrix: NumPy steps aside, Python calls Matrix.__rmatmul__

    def __init__(self, array):
        self.array = array

    def __rmatmul__(self, x):
        return products.matmul(x, self.array)  # x @ array: [m, n_in] @ [n_in, n_out] -> [m, n_out]

    def __getitem__(self, index):
        return self.array[index]

    def __array__(self, dtype=None, copy=None):
        return self.array if dtype is None else self.array.astype(dtype)

    @property
    def T(self):
        return Matrix(self.array.T)

    @property
    def shape(self):
        return self.array.shape

    @property
    def dtype(self):
        return self.array.dtype


class Keys:
    """The keys k for gpt2.attention, whose `k.transpose(0, 2, 1)` is a `Matrix`: so attention's scores q @ k.T
    take their measured route (products' "scores" kind: "turned round" for a few queries, where BLAS would pack
    a transposed operand), and gpt2.attention itself does the rest."""

    def __init__(self, k):
        self.k = k  # [n_head, n_keys, head_dim]

    def transpose(self, *axes):
        return Matrix(self.k.transpose(*axes))  # [n_head, head_dim, n_keys], a view


def routed_attention(q, k, v, mask):
    """gpt2.attention, its scores by their measured route. A module-level function: the helper knows it by id."""
    return gpt2.attention(q, Keys(k), v, mask)  # [n_head, n_seq, head_dim]


def shared_attention(q, k, v, mask):
    """routed_attention over every head, half of them in the helper process where one runs."""
    return products.share_heads(routed_attention, q, k, v, mask)  # [n_head, n_seq, head_dim]


def fast_weights(params):
    """params with each weight matrix (the blocks' and wte) a `Matrix` and each block's attention shared."""

    def dense(layer):  # {"w": [n_in, n_out], "b": [n_out]}
        return {**layer, "w": Matrix(layer["w"])}

    def block(b):
        attn = {"c_attn": dense(b["attn"]["c_attn"]), "c_proj": dense(b["attn"]["c_proj"]), "attend": shared_attention}
        mlp = {"c_fc": dense(b["mlp"]["c_fc"]), "c_proj": dense(b["mlp"]["c_proj"])}
        return {**b, "attn": attn, "mlp": mlp}

    return {**params, "wte": Matrix(params["wte"]), "blocks": [block(b) for b in params["blocks"]]}


def fast_cache(blocks, n_head: int, n_ctx: int):
    """An empty gpt2.Cache with room for n_ctx positions, its buffer where products.kv_buffer puts it."""
    n_embd = blocks[0]["ln_1"]["g"].shape[0]
    buffer = products.kv_buffer((len(blocks), 2, n_head, n_ctx, n_embd // n_head))  # float32, uninitialised
    return gpt2.Cache(buffer, 0)


def fast(params, n_head: int, n_ctx: int):
    """(weights, an empty cache) for gpt2, with speed plugged in (see the module docstring)."""
    return fast_weights(params), fast_cache(params["blocks"], n_head, n_ctx)
