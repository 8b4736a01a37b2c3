"""GPT-2's forward pass in NumPy, with its KV cache as an explicit value: picoGPT's ladder of small functions.

Read from the top: gelu, softmax, layer_norm, linear; ffn (a block's MLP); causal_mask, attention, mha
(masked multi-head self-attention); transformer_block ("pre-norm": x + mha(ln_1(x)), then x + ffn(ln_2(x)));
gpt2 (embeddings, blocks, ln_f, logits). Parameters are named as in OpenAI's checkpoint, so
`gpt2(ids, **params, n_head=hparams["n_head"])` works. The LM head (hidden state -> one logit per token) reuses
the token embedding wte: it is "tied". Everything stays float32: constants are Python floats.

Shapes: n_seq new positions, n_past cached ones, n_embd model width, n_head heads, head_dim = n_embd / n_head,
n_vocab tokens, n_ctx the longest context (wpe's rows), n_layer blocks.

The KV cache (openai/gpt-2's `past` -> `present`): attention needs the keys and values of every earlier
position, so `gpt2` takes them in as `past` and hands back `present`, a `Cache`: a buffer with room for
`capacity` positions, and how many it holds. A pass writes after them; rolling back is a smaller length.

    logits, present = gpt2([464, 2068], **params, n_head=12, past=empty_cache(params["blocks"], 12))
    logits, present = gpt2([7586], **params, n_head=12, past=present)              # 1 new token, 2 cached
    logits, present = gpt2([318], **params, n_head=12, past=rollback(present, 2))  # 2 kept, 1 new

Token trees (read after sampling.py) are at the end. Speed plugs in from outside (model_fn.py, speed/plug.py).
"""

import math
from typing import NamedTuple

import numpy as np


def gelu(x):
    """GPT-2's GELU, the tanh approximation."""
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))  # same shape as x


def softmax(x):
    """Softmax over the last axis; subtracting the max first keeps exp from overflowing."""
    exp_x = np.exp(x - x.max(axis=-1, keepdims=True))  # same shape as x
    return exp_x / exp_x.sum(axis=-1, keepdims=True)  # same shape as x


def layer_norm(x, g, b, eps: float = 1e-5):
    """Normalise each row of x to mean 0 and variance 1, then scale by g and shift by b."""
    mean = x.mean(axis=-1, keepdims=True)  # [n_seq, 1]
    centered = x - mean  # [n_seq, n_embd]
    variance = (centered * centered).mean(axis=-1, keepdims=True)  # [n_seq, 1]: the mean squared deviation
    x = centered / np.sqrt(variance + eps)  # [n_seq, n_embd]: mean 0, variance 1
    return g * x + b  # [n_seq, n_embd]


def linear(x, w, b):
    """x @ w + b."""
    return x @ w + b  # [m, n_in] @ [n_in, n_out] + [n_out] -> [m, n_out]


def ffn(x, c_fc, c_proj):
    """The MLP of a block: widen to 4 * n_embd, GELU, project back."""
    a = gelu(linear(x, **c_fc))  # [n_seq, n_embd] -> [n_seq, 4 * n_embd]
    return linear(a, **c_proj)  # [n_seq, 4 * n_embd] -> [n_seq, n_embd]


def causal_mask(n_seq: int, n_past: int):
    """[n_seq, n_past + n_seq]: new position i sees keys 0 .. n_past + i (0), not the later ones (-1e10).
    causal_mask(2, 1) == [[0, 0, -1e10], [0, 0, 0]]: the queries are positions 1 and 2."""
    hidden = np.full((n_seq, n_past + n_seq), -1e10, dtype=np.float32)  # [n_seq, n_past + n_seq]
    return np.triu(hidden, k=n_past + 1)  # key j is hidden from new position i when j > n_past + i


def attention(q, k, v, mask):
    """softmax(q k^T / sqrt(head_dim) + mask) v, for every head at once."""
    scores = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])  # [n_head, n_seq, n_past + n_seq]
    return softmax(scores + mask) @ v  # [n_head, n_seq, n_past + n_seq] @ [n_head, ., head_dim] -> [n_head, n_seq, head_dim]


def mha(x, c_attn, c_proj, n_head: int, kv, n_past: int, mask, attend=None):
    """Masked multi-head self-attention of x [n_seq, n_embd] over the cached positions and itself. kv: this block's
    cache, the new keys and values written after n_past. attend: None for `attention`, or the weights' own."""
    n_seq, n_embd = x.shape
    head_dim = n_embd // n_head

    qkv = linear(x, **c_attn)  # [n_seq, n_embd] -> [n_seq, 3 * n_embd]: q's columns, then k's, then v's
    qkv = qkv.reshape(n_seq, 3, n_head, head_dim)  # [n_seq, 3, n_head, head_dim]: split into heads
    q, k, v = qkv.transpose(1, 2, 0, 3)  # 3 x [n_head, n_seq, head_dim]

    kv[0, :, n_past : n_past + n_seq] = k  # [n_head, n_seq, head_dim]: the new keys after the cached ones
    kv[1, :, n_past : n_past + n_seq] = v  # [n_head, n_seq, head_dim]: and the new values
    k, v = kv[:, :, : n_past + n_seq]  # 2 x [n_head, n_past + n_seq, head_dim]: views, no copy

    out = (attend or attention)(q, k, v, mask)  # [n_head, n_seq, head_dim]
    out = out.transpose(1, 0, 2).reshape(n_seq, n_embd)  # [n_seq, n_head, head_dim] -> [n_seq, n_embd]: merge heads
    return linear(out, **c_proj)  # [n_seq, n_embd]


def transformer_block(x, mlp, attn, ln_1, ln_2, n_head: int, kv, n_past: int, mask):
    """One pre-norm block. Writes its new keys and values into kv."""
    x = x + mha(layer_norm(x, **ln_1), **attn, n_head=n_head, kv=kv, n_past=n_past, mask=mask)  # [n_seq, n_embd]
    x = x + ffn(layer_norm(x, **ln_2), **mlp)  # [n_seq, n_embd]
    return x


class Cache(NamedTuple):
    """A KV cache: buffer [n_layer, 2, n_head, capacity, head_dim] (keys, 0, and values, 1), the `length`
    positions it holds, the `parents` of its last positions if they are a token tree (() for a plain sequence).
    A pass writes in place after `length`, so hand on only the newest value (model_fn.py keeps one)."""

    buffer: np.ndarray
    length: int
    parents: tuple = ()

    @property
    def n_prefix(self) -> int:
        """Positions before the tree: the plain sequence every node hangs after."""
        return self.length - len(self.parents)

    @property
    def kv(self):
        """[n_layer, 2, n_head, length, head_dim]: the keys and values it holds (a view)."""
        return self.buffer[:, :, :, : self.length]


def empty_cache(blocks, n_head: int, n_ctx: int = 0) -> Cache:
    """A cache holding no positions, with room for n_ctx (0: the first pass makes room for wpe's n_ctx)."""
    n_embd = blocks[0]["ln_1"]["g"].shape[0]
    return Cache(np.zeros((len(blocks), 2, n_head, n_ctx, n_embd // n_head), dtype=np.float32), 0)


def rollback(cache: Cache, length: int) -> Cache:
    """The cache cut back to its first `length` positions: the same buffer, a smaller length."""
    if not 0 <= length <= cache.length:
        raise ValueError(f"rollback(cache, length) needs 0 <= length <= cache.length={cache.length}; got {length}")
    return Cache(cache.buffer, length, cache.parents[: max(0, length - cache.n_prefix)])


def gpt2(inputs, wte, wpe, blocks, ln_f, n_head: int, past=None, n_logits=None, parents=None):
    """Logits [n_logits, n_vocab] of the next token after each of the last n_logits new positions `inputs`.

    inputs: token ids following the n_past positions cached in `past` (a Cache, or None for none).
    n_logits: rows to compute (default all); parents: None for a chain, else a token tree (see the end).
    Returns the logits, or (logits, present) when a cache was passed in: present holds past and the inputs.
    """
    return_cache = past is not None
    past = empty_cache(blocks, n_head) if past is None else past  # no cache is an empty cache
    n_past, n_seq = past.length, len(inputs)
    n_logits = n_seq if n_logits is None else n_logits
    _check_inputs(inputs, n_past, n_logits, n_vocab=wte.shape[0], n_ctx=wpe.shape[0])
    if parents is None and not past.parents:  # a chain: position n_past + i, the causal mask
        tree, positions, mask = (), n_past + np.arange(n_seq), causal_mask(n_seq, n_past)  # [n_seq], [n_seq, n_past + n_seq]
    else:  # a token tree: its own positions and mask (the last section)
        tree, positions, mask = tree_positions_and_mask(past, n_seq, parents)
    buffer = _room_for(past, n_seq, wpe.shape[0])  # [n_layer, 2, n_head, capacity, head_dim]

    x = wte[inputs] + wpe[positions]  # [n_seq, n_embd]: token embedding + position embedding
    for block, kv in zip(blocks, buffer):  # kv: [2, n_head, capacity, head_dim], this block's part of the cache
        x = transformer_block(x, **block, n_head=n_head, kv=kv, n_past=n_past, mask=mask)  # [n_seq, n_embd]
    present = Cache(buffer, n_past + n_seq, tree)

    x = layer_norm(x[n_seq - n_logits :], **ln_f)  # [n_logits, n_embd]
    logits = x @ wte.T  # [n_logits, n_embd] @ [n_embd, n_vocab] -> [n_logits, n_vocab]: the tied LM head
    return (logits, present) if return_cache else logits


def _room_for(past: Cache, n_seq: int, n_ctx: int):
    """past's buffer if it has room for n_seq more positions; else a new one of capacity n_ctx, holding past."""
    if past.length + n_seq <= past.buffer.shape[3]:
        return past.buffer
    n_layer, _, n_head, _, head_dim = past.buffer.shape
    bigger = np.zeros((n_layer, 2, n_head, n_ctx, head_dim), dtype=np.float32)  # [n_layer, 2, n_head, n_ctx, head_dim]
    bigger[:, :, :, : past.length] = past.buffer[:, :, :, : past.length]  # the one copy of the cache
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


# ------------------------------------------------------------------------------------------------------------
# Token trees: one pass scores several continuations (read after sampling.py; EXERCISES.md step 12)
# ------------------------------------------------------------------------------------------------------------


def tree_ancestors(parents):
    """[m, m] bool: row i marks node i and its ancestors (parents[i] < i, or -1 for a root). For parents
    (-1, -1, 0, 2): node 2's row marks nodes 0 and 2; node 3's marks 0, 2 and 3."""
    ancestors = np.eye(len(parents), dtype=bool)  # [m, m]: every node sees itself
    for i, parent in enumerate(parents):
        if parent >= 0:
            ancestors[i] |= ancestors[parent]  # [m]: and whatever its parent sees
    return ancestors


def tree_mask(ancestors, n_prefix: int):
    """[n_seq, n_prefix + m]: 0 where a new node may look (the prefix, its ancestors, itself), -1e10 elsewhere.
    ancestors: the new nodes' rows of tree_ancestors. A chain gives causal_mask's [[0, 0, -1e10], [0, 0, 0]]."""
    n_seq = ancestors.shape[0]
    prefix = np.zeros((n_seq, n_prefix), dtype=np.float32)  # [n_seq, n_prefix]: everyone sees the prefix
    nodes = np.where(ancestors, np.float32(0), np.float32(-1e10))  # [n_seq, m]
    return np.concatenate([prefix, nodes], axis=1)  # [n_seq, n_prefix + m]


def tree_positions_and_mask(past: Cache, n_seq: int, parents):
    """(tree, positions, mask) of a pass whose inputs are tree nodes: parents[i] is node i's parent (cached nodes
    counted first) or -1 after the prefix; a node sits at n_prefix + its depth (0 for a root here; drafters counts
    a root's depth as 1, its distance from x). "The" cached, inputs [quick, slow, fox] with parents [-1, -1, 0]
    score "The quick", "The slow", "The quick fox" (positions 1, 1, 2)."""
    n_cached = len(past.parents)
    new = tuple(range(n_cached - 1, n_cached + n_seq - 1)) if parents is None else tuple(int(p) for p in parents)
    _check_parents(new, n_seq, n_cached)
    tree = past.parents + new  # the cached nodes, then the inputs
    ancestors = tree_ancestors(tree)[n_cached:]  # [n_seq, m]: the new nodes' rows
    depths = ancestors.sum(axis=1) - 1  # [n_seq]: 0 for a root
    return tree, past.n_prefix + depths, tree_mask(ancestors, past.n_prefix)


def keep_path(cache: Cache, path) -> Cache:
    """The prefix and the tree nodes `path` (root first) as a plain sequence: node path[j] moves to n_prefix + j
    (prefix 5, parents (-1, -1, 0, 1, 3), path [1, 3, 4]: positions 6, 8, 9 move to 5, 6, 7)."""
    path = [int(node) for node in path]
    parents = cache.parents
    expected = [-1] + path[:-1]  # the root follows the prefix, then each node is its predecessor's child
    if any(not 0 <= node < len(parents) for node in path) or [parents[node] for node in path] != expected[: len(path)]:
        raise ValueError(f"keep_path: {path} is not a root-to-node path of the tree with parents {parents}")
    start = next((j for j, node in enumerate(path) if node != j), len(path))  # nodes before it stay in place
    if start < len(path):
        positions = cache.n_prefix + np.array(path[start:])  # [n_moved] where the nodes are now
        destination = slice(cache.n_prefix + start, cache.n_prefix + len(path))  # where they go
        cache.buffer[:, :, :, destination] = cache.buffer[:, :, :, positions]  # the gather (reads, then writes)
    return Cache(cache.buffer, cache.n_prefix + len(path))


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
