"""GPT-2's forward pass in NumPy, with a KV cache that can score a token tree.

The first file to read: a ladder of small pure functions, from the bottom up, whose parameters are named as in
OpenAI's checkpoint, so `gpt2(ids, **params, n_head=hparams["n_head"])` works:

    gelu, softmax, layer_norm, linear      the building blocks
    ffn                                    the MLP of a block: linear -> gelu -> linear
    tree_ancestors, tree_mask, causal_mask which positions each new token may attend to (a tree, a chain)
    attention, mha                         masked multi-head self-attention
    transformer_block                      x + mha(ln_1(x)), then x + ffn(ln_2(x))
    gpt2                                   embeddings -> blocks -> ln_f -> logits (the LM head is wte, tied)
    empty_cache, rollback, keep_path       make, shorten, and keep one path of a KV cache

The KV cache. Attention needs the keys and values of every earlier position; `gpt2` takes them in as `past` and
hands back `present` (openai/gpt-2's `past` -> `present`). A cache is a value, `Cache(buffer, length, parents)`:
a float32 buffer [n_layer, 2, n_head, capacity, head_dim] and how many positions of it hold keys and values.
A pass writes its new positions right after `length` and reads the cached ones as views: nothing is copied,
and rolling back is a smaller length. A value vouches only for its first `length` positions, so hand on only
the NEWEST value of a buffer (`Cache` says why). `past=None` is an empty cache, and returns only the logits.

    logits, present = gpt2([464, 2068], **params, n_head=12, past=empty_cache(params["blocks"], 12))
    logits, present = gpt2([7586], **params, n_head=12, past=present)   # one new token, 2 old ones cached
    logits, present = gpt2([318], **params, n_head=12, past=rollback(present, 2))  # 2 kept, 1 new

Trees. `parents` lets one pass score a tree of candidate tokens: row i of the logits is the distribution after
the cached tokens and the path root .. node i (`tree_mask`); `keep_path` keeps the accepted path (a plain
sequence again). A chain is a tree with one branch.

    logits, present = gpt2([2068, 3049, 21831], **params, n_head=12, past=present, parents=[-1, -1, 0])
    present = keep_path(present, [0, 2])   # "quick fox" accepted: a plain sequence of length + 2

Everything stays float32 (under NumPy 2 a float32 array times a NumPy float64 scalar is float64, and every
later product would read twice the bytes): NumPy scalar constants are made float32 by hand.

Take on trust, or read after the model: `linear` multiplies through speed/products.py's `matmul`, which makes a
pass over a few positions cost about what one costs and shares the work with a second core (`kv_buffer` and
`share_heads` do the same for attention); docs/BENCHMARKS.md's "Speed of the forward pass" measures it.

Shape letters: n_seq new positions, n_past cached ones, n_embd model width, n_head heads, n_vocab vocabulary
size, n_layer blocks, n_ctx the longest context (wpe's rows), head_dim = n_embd / n_head.
"""

from typing import NamedTuple

import numpy as np

from speed.products import kv_buffer, matmul, share_heads

SQRT_2_OVER_PI = np.float32(np.sqrt(2 / np.pi))  # float32, or gelu would turn every activation into float64


def gelu(x):
    """GPT-2's GELU, the tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).

    x^3 is written x * x * x: NumPy computes float32 `x**3` with a general power function per element,
    which made this line cost as much as a whole weight matrix.
    """
    return 0.5 * x * (1 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))  # same shape as x


def softmax(x):
    """Softmax over the last axis; subtracting the max first keeps exp from overflowing.

    np.maximum.reduce and np.add.reduce are what np.max and np.sum call, without their Python-level argument
    handling: a decoding step calls this n_layer times on tiny arrays, where that handling is most of the cost.
    """
    exp_x = np.exp(x - np.maximum.reduce(x, axis=-1, keepdims=True))  # same shape as x
    return exp_x / np.add.reduce(exp_x, axis=-1, keepdims=True)  # same shape as x


def layer_norm(x, g, b, eps: float = 1e-5):
    """Normalise each row of x to mean 0 and variance 1, then scale by g and shift by b.

    The means are sums over n_embd (np.add.reduce: the same numbers as np.mean, which wraps it in Python
    that costs more than the sum itself for one row; 2 * n_layer + 1 calls per decoding step).
    """
    n_embd = x.shape[-1]
    mean = np.add.reduce(x, axis=-1, keepdims=True) / n_embd  # [n_seq, 1]
    centered = x - mean  # [n_seq, n_embd]
    variance = np.add.reduce(centered * centered, axis=-1, keepdims=True) / n_embd  # [n_seq, 1]
    return g * centered / np.sqrt(variance + eps) + b  # [n_seq, n_embd]


def linear(x, w, b):
    """x @ w + b: [m, n_in] @ [n_in, n_out] + [n_out] -> [m, n_out].

    The product is products.matmul(x, w): x @ w, computed the way that makes a few rows cost about what one
    row costs (a speculative round's verification pass; speed/products.py says how and why).
    """
    return matmul(x, w) + b  # [m, n_in] @ [n_in, n_out] + [n_out] -> [m, n_out]


def ffn(x, c_fc, c_proj):
    """The MLP of a block: widen to 4 * n_embd, GELU, project back."""
    a = gelu(linear(x, **c_fc))  # [n_seq, n_embd] -> [n_seq, 4 * n_embd]
    return linear(a, **c_proj)  # [n_seq, 4 * n_embd] -> [n_seq, n_embd]


class Cache(NamedTuple):
    """A KV cache (see the module docstring): the buffer, how many positions of it are valid, their tree.

    buffer [n_layer, 2, n_head, capacity, head_dim] float32 (per layer the keys, 0, and the values, 1);
    length <= capacity; parents: () for a plain sequence, else the parents of the last len(parents) positions,
    which are the nodes of a token tree. The first pass into a buffer too small for its new positions copies
    what is cached into a fresh buffer of capacity n_ctx.

    The rule that makes writing in place safe: a value (buffer, length) vouches only for positions
    0 .. length - 1. A pass with past=(buffer, length) writes positions length .. length + n_seq - 1 (and
    keep_path writes from the first node it moves); a write at position w breaks every OTHER value of the same
    buffer longer than w. So hand on only the newest value, and roll back by making shorter values from it:
    `rollback(present, 5)`, a pass, then `rollback(present, 3)`, a pass, is safe (each write starts above what
    the later, shorter value reads); going back to an old, longer value after a shorter one was written to is
    not. model_fn.create_model_fn keeps a single cache in its closure and so follows the rule by construction.
    """

    buffer: np.ndarray
    length: int
    parents: tuple = ()

    @property
    def n_prefix(self) -> int:
        """Positions before the tree: the plain sequence every node hangs after."""
        return self.length - len(self.parents)

    @property
    def kv(self):
        """[n_layer, 2, n_head, length, head_dim]: a view of the keys and values the cache vouches for."""
        return self.buffer[:, :, :, : self.length]


def empty_cache(blocks, n_head: int, n_ctx: int = 0) -> Cache:
    """A cache holding no positions, with room for n_ctx (0: the first pass allocates wpe's n_ctx)."""
    n_embd = blocks[0]["ln_1"]["g"].shape[0]
    return Cache(kv_buffer((len(blocks), 2, n_head, n_ctx, n_embd // n_head)), 0)


def rollback(cache: Cache, length: int) -> Cache:
    """The same cache cut back to its first `length` positions (speculative decoding's rejected guesses).

    Free: the buffer is shared, only the length is smaller (see the rule in the module docstring). Cutting
    into a tree keeps its first nodes: rollback(Cache(buffer, 7, (-1, -1, 0)), 6).parents == (-1, -1).
    """
    if not 0 <= length <= cache.length:
        raise ValueError(f"rollback(cache, length) needs 0 <= length <= cache.length={cache.length}; got {length}")
    return Cache(cache.buffer, length, cache.parents[: max(0, length - cache.n_prefix)])


def keep_path(cache: Cache, path) -> Cache:
    """The cache of the prefix followed by the tree nodes `path` (root first), as a plain sequence.

    After a tree pass, cache.kv holds the prefix, then every node in input order. Keeping the accepted path
    is a gather along the positions axis: node path[j] moves from position n_prefix + path[j] to
    n_prefix + j. Example: prefix of 5, nodes with parents (-1, -1, 0, 1, 3) and path [1, 3, 4]: positions
    6, 8, 9 move to 5, 6, 7 and the result is (buffer, 8, ()). Nodes only move down (path[j] >= j), so the
    write starts at the first node that moves and breaks only longer values (the tree value itself).
    """
    path = [int(node) for node in path]
    parents = cache.parents
    expected = [-1] + path[:-1]  # a path: the root follows the prefix, then each node is its predecessor's child
    if any(not 0 <= node < len(parents) for node in path) or [parents[node] for node in path] != expected[: len(path)]:
        raise ValueError(f"keep_path: {path} is not a root-to-node path of the tree with parents {parents}")
    start = next((j for j, node in enumerate(path) if node != j), len(path))  # nodes before it stay in place
    if start < len(path):
        positions = cache.n_prefix + np.array(path[start:])  # [n_moved] where the nodes are now
        destination = slice(cache.n_prefix + start, cache.n_prefix + len(path))  # where they go
        cache.buffer[:, :, :, destination] = cache.buffer[:, :, :, positions]  # the gather (reads, then writes)
    return Cache(cache.buffer, cache.n_prefix + len(path))


def tree_ancestors(parents):
    """[m, m] bool: row i marks node i and its ancestors. parents[i] < i, or -1 for a root.

    For parents (-1, -1, 0, 2): node 2's row marks nodes 0 and 2; node 3's marks 0, 2 and 3. A node's depth
    (0 for a root) is its row's sum minus 1.
    """
    ancestors = np.eye(len(parents), dtype=bool)  # [m, m]: every node sees itself
    for i, parent in enumerate(parents):
        if parent >= 0:
            ancestors[i] |= ancestors[parent]  # [m]: and whatever its parent sees
    return ancestors


def tree_mask(ancestors, n_prefix: int):
    """[n_seq, n_prefix + m]: 0 where a new node may look (the prefix, its ancestors, itself), -1e10 elsewhere.

    ancestors: the last n_seq rows of tree_ancestors(all m nodes), the new nodes being the last n_seq. A
    chain gives the usual causal mask; for n_seq=2, n_prefix=1 (keys: positions 0, 1, 2):
        [[0, 0, -1e10],
         [0, 0,     0]]
    """
    n_seq = ancestors.shape[0]
    prefix = np.zeros((n_seq, n_prefix), dtype=np.float32)  # [n_seq, n_prefix]: everyone sees the prefix
    nodes = np.where(ancestors, np.float32(0), np.float32(-1e10))  # [n_seq, m]
    return np.concatenate([prefix, nodes], axis=1)  # [n_seq, n_prefix + m]


def causal_mask(n_seq: int, n_past: int):
    """[n_seq, n_past + n_seq]: the mask of a chain, new position i sees keys 0 .. n_past + i (-1e10 after).

    A chain is the tree in which each node's parent is the node before, so this equals tree_mask of that tree
    (the tests check it): causal_mask(2, 1) == [[0, 0, -1e10], [0, 0, 0]] (the queries are positions 1 and 2).
    """
    hidden = np.full((n_seq, n_past + n_seq), -1e10, dtype=np.float32)  # [n_seq, n_past + n_seq]
    return np.triu(hidden, k=n_past + 1)  # key j is hidden from new position i when j > n_past + i


def attention(q, k, v, mask):
    """Scaled dot-product attention for all heads at once.

    q [n_head, n_seq, head_dim], k and v [n_head, n_past + n_seq, head_dim], mask [n_seq, n_past + n_seq].
    """
    scale = np.float32(1 / np.sqrt(q.shape[-1]))  # float32, see the module docstring
    scores = matmul(q, k.transpose(0, 2, 1)) * scale + mask  # [n_head, n_seq, n_past + n_seq]: q @ k.T
    return softmax(scores) @ v  # [n_head, n_seq, head_dim]


def mha(x, c_attn, c_proj, n_head: int, kv, n_past: int, mask):
    """Masked multi-head self-attention of the new positions over the cached and new ones.

    x [n_seq, n_embd]; kv [2, n_head, capacity, head_dim] is this block's part of the cache buffer, holding
    the keys and values of positions 0 .. n_past - 1. The new keys and values are WRITTEN into it at
    positions n_past .. n_past + n_seq - 1 (the one write of the forward pass; see the module docstring);
    attention then reads positions 0 .. n_past + n_seq - 1 as views. Returns the output [n_seq, n_embd].
    """
    n_seq, n_embd = x.shape
    head_dim = n_embd // n_head

    qkv = linear(x, **c_attn)  # [n_seq, n_embd] -> [n_seq, 3 * n_embd]

    # split into q, k, v and each into heads, in one reshape: the 3 * n_embd columns are q's n_embd, then
    # k's, then v's, and within each, head 0's head_dim columns, then head 1's, ...
    qkv = qkv.reshape(n_seq, 3, n_head, head_dim)  # [n_seq, 3 * n_embd] -> [n_seq, 3, n_head, head_dim]
    q, k, v = qkv.transpose(1, 2, 0, 3)  # 3 x [n_head, n_seq, head_dim]

    # the cache: the new keys and values go right after the cached ones, in place
    kv[0, :, n_past : n_past + n_seq] = k  # [n_head, n_seq, head_dim]
    kv[1, :, n_past : n_past + n_seq] = v  # [n_head, n_seq, head_dim]
    k, v = kv[:, :, : n_past + n_seq]  # 2 x [n_head, n_past + n_seq, head_dim]: views, no copy

    out = share_heads(attention, q, k, v, mask)  # [n_head, n_seq, head_dim]: attention(q, k, v, mask), on 2 cores

    # merge the heads: [n_head, n_seq, head_dim] -> [n_seq, n_head, head_dim] -> [n_seq, n_embd]
    out = out.transpose(1, 0, 2).reshape(n_seq, n_embd)
    return linear(out, **c_proj)  # [n_seq, n_embd]


def transformer_block(x, mlp, attn, ln_1, ln_2, n_head: int, kv, n_past: int, mask):
    """One pre-norm block: x + attention(ln_1(x)), then x + mlp(ln_2(x)). Writes its keys and values into kv."""
    x = x + mha(layer_norm(x, **ln_1), **attn, n_head=n_head, kv=kv, n_past=n_past, mask=mask)  # [n_seq, n_embd]
    x = x + ffn(layer_norm(x, **ln_2), **mlp)  # [n_seq, n_embd]
    return x


def gpt2(inputs, wte, wpe, blocks, ln_f, n_head: int, past=None, n_logits=None, parents=None):
    """Logits of the next token after each of the new positions `inputs`.

    inputs: list of token ids; they follow the n_past positions whose keys and values are in `past`.
    wte [n_vocab, n_embd], wpe [n_ctx, n_embd], blocks, ln_f: the weights (see the module docstring).
    past: a `Cache` from an earlier call, `empty_cache(...)`, or None (no cache).
    n_logits: compute logits for the last n_logits new positions only (default: all of them); a sampler
        that needs one next-token distribution saves the [n_seq, n_embd] x [n_embd, n_vocab] product.
    parents: None (a chain: each input follows the one before), or the tree the inputs form: parents[i] is
        the index of node i's parent, or -1 when node i follows the last token of the prefix. Indices count
        the tree nodes already in `past` (past.parents, usually none) first, then the inputs; parents come
        first. Node i sits at position n_prefix + its depth and attends to the prefix, its ancestors and
        itself, so row i is the logits after the prefix + the path from the root to node i. Example, with
        "The" cached: inputs [quick, slow, fox], parents [-1, -1, 0] scores "The quick", "The slow" and
        "The quick fox" in one pass (positions 1, 1, 2).

    Returns logits [n_logits, n_vocab] (float32); or (logits, present) when a cache was passed in, where
    present = Cache(buffer, n_past + n_seq, tree) holds past followed by every input in order, and its tree
    is past.parents + parents (in the example above, (-1, -1, 0)): keep_path(present, [0, 2]) then keeps
    "The quick fox" as a plain sequence. parents=None on a plain sequence leaves a plain sequence (tree ()).
    """
    return_cache = past is not None
    if past is None:
        past = empty_cache(blocks, n_head)  # no cache is an empty cache: one code path
    n_past, n_seq, n_ctx = past.length, len(inputs), wpe.shape[0]
    n_logits = n_seq if n_logits is None else n_logits
    _check_inputs(inputs, n_past, n_logits, n_vocab=wte.shape[0], n_ctx=n_ctx)
    new_parents = _chain(len(past.parents), n_seq) if parents is None else tuple(int(p) for p in parents)
    _check_parents(new_parents, n_seq, n_cached_nodes=len(past.parents))
    tree = past.parents + new_parents  # the cached nodes (usually none), then the inputs

    ancestors = tree_ancestors(tree)[len(past.parents) :]  # [n_seq, m]: the new nodes' rows
    depths = ancestors.sum(axis=1) - 1  # [n_seq]: 0 for a root; a chain on a sequence: 0, 1, 2, ...
    mask = tree_mask(ancestors, past.n_prefix)  # [n_seq, n_past + n_seq]
    buffer = _room_for(past, n_seq, n_ctx)  # [n_layer, 2, n_head, capacity, head_dim]

    # token embedding + position embedding; node i sits at position n_prefix + depth(i)
    x = wte[inputs] + wpe[past.n_prefix + depths]  # [n_seq, n_embd]
    for block, kv in zip(blocks, buffer):  # kv: [2, n_head, capacity, head_dim], a view into the buffer
        x = transformer_block(x, **block, n_head=n_head, kv=kv, n_past=n_past, mask=mask)  # [n_seq, n_embd]
    plain = parents is None and not past.parents  # a chain after a plain sequence is a longer plain sequence
    present = Cache(buffer, n_past + n_seq, () if plain else tree)

    x = layer_norm(x[n_seq - n_logits :], **ln_f)  # [n_logits, n_embd]
    logits = matmul(x, wte.T)  # [n_logits, n_embd] @ [n_embd, n_vocab] -> [n_logits, n_vocab]: the LM head is wte
    return (logits, present) if return_cache else logits


def _chain(n_cached_nodes: int, n_seq: int):
    """The parents of n_seq inputs that each follow the one before, the first after the last cached node."""
    return tuple(range(n_cached_nodes - 1, n_cached_nodes + n_seq - 1))  # e.g. (-1, 0, 1) with no cached nodes


def _room_for(past: Cache, n_seq: int, n_ctx: int):
    """past's buffer if it has room for n_seq more positions; else a new one of capacity n_ctx, holding past."""
    buffer = past.buffer  # [n_layer, 2, n_head, capacity, head_dim]
    if past.length + n_seq <= buffer.shape[3]:
        return buffer
    n_layer, _, n_head, _, head_dim = buffer.shape
    bigger = kv_buffer((n_layer, 2, n_head, n_ctx, head_dim))  # [n_layer, 2, n_head, n_ctx, head_dim] float32
    bigger[:, :, :, : past.length] = past.kv  # the one copy of the cache, on its first pass into the new buffer
    return bigger


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


def _check_parents(parents, n_seq: int, n_cached_nodes: int):
    """ValueError unless parents has one entry per input and each is -1 or an earlier node."""
    if len(parents) != n_seq:
        raise ValueError(f"parents needs one entry per input token ({n_seq}); got {len(parents)}")
    bad = [i for i, parent in enumerate(parents) if not -1 <= parent < n_cached_nodes + i]
    if bad:
        raise ValueError(
            f"parents[{bad[0]}] = {parents[bad[0]]}: a parent must be -1 (follows the prefix) or an EARLIER node "
            f"(0 .. {n_cached_nodes + bad[0] - 1}); list the tree's nodes parents first"
        )


def random_params(hparams: dict, rng: np.random.Generator, std: float = 0.02) -> dict:
    """Random float32 weights of GPT-2's shapes in the loaders' layout (products.column_major), for tests and benchmarks.

    Every term is non-trivial: biases are random and layer-norm gains and shifts are not 1 and 0, so a
    forward pass that forgets one of them gives different logits. Every array is read-only, as the loaders'
    are. Each block matrix is made column-major as it is drawn, so the memory needed is the weights plus one
    matrix (1558M: 6.2 GB, not twice that).
    """
    n_vocab, n_ctx, n_embd, n_layer = (hparams[k] for k in ("n_vocab", "n_ctx", "n_embd", "n_layer"))

    def constant(array):  # read-only, as the loaders' weights are (products.matmul shares only those)
        array.flags.writeable = False
        return array

    def normal(*shape, scale=std):
        return constant(scale * rng.standard_normal(shape, dtype=np.float32))  # float32: a Python float adapts

    def norm():
        return {"g": constant(1 + normal(n_embd, scale=0.1)), "b": normal(n_embd, scale=0.1)}

    def dense(n_in, n_out):  # column-major as it is made: one matrix at a time is copied, never all of them
        return {"w": constant(np.asfortranarray(normal(n_in, n_out))), "b": normal(n_out)}

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
    return {"wte": wte, "wpe": wpe, "blocks": blocks, "ln_f": norm()}  # in products.column_major's layout already
