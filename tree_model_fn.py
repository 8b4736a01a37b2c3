"""Token trees through a model function: the contract's extension, and the KV cache kept along tree paths.

Read model_fn.py first (the contract for a chain, and `create_model_fn`), then gpt2.py's token trees.

The contract for trees: `model(x, n, parents)` with a list of m parents reads the LAST m tokens of x as the
nodes of a token tree hanging after the prefix x[:-m]: parents[i] is the index of node i's parent among the
nodes, or -1 for a node that follows the prefix directly (parents come first: parents[i] < i). Of the m + 1
prefixes "the prefix" and "the prefix + the path root .. node i", the rows of the last n are returned. Example
with x = [5, 7, 1, 2] and parents = [-1, -1] (two alternatives after [5, 7]) and n = 3: the rows after [5, 7],
[5, 7, 1], [5, 7, 2]. A chain, parents = [-1, 0, .., m - 2], gives what parents=None gives. The target scores a
whole tree in one call, model(x + nodes, m + 1, parents); a model function that knows no trees still serves
for chains, which the samplers ask for without parents.

create_model_fn hands a call here when it has parents, or when its cache holds the last call's tree. Each
call reuses as much of the cache as it can and feeds only the rest of x (`tree_call`):
- the same tokens with the same parents: a frontier expansion (x + nodes, the earlier nodes cached) feeds only
  the new nodes; a sequence that only grew feeds only the new tokens;
- or x continues the cached prefix along ONE path of the cached tree (the target's accepted guesses, the
  draft's chosen branch): that path's keys and values are gathered into place (gpt2.keep_path);
- anything else falls back to the longest prefix x shares with the cache (a rollback: free).
"""

from gpt2 import gpt2, keep_path, rollback


def tree_call(weights, n_head, cache, cached_tokens, x, n, parents, kv_cache, n_common):
    """(logits [n, n_vocab], the new cache, how many positions were fed) of model(x, n, parents).

    n_common: how many leading tokens x shares with cached_tokens, the tokens at the cache's positions."""
    follows = None if parents is None else follows_of(len(x), parents)  # [len(x)]: what each token follows
    if not kv_cache:  # picoGPT's full recompute, the tree's parents extended over the prefix
        return gpt2(x, **weights, n_head=n_head, n_logits=n, parents=follows), cache, len(x)
    past = reusable_cache(cache, cached_tokens, x, follows, n_common)
    past = rollback(past, min(past.length, len(x) - n))  # feed at least the last n tokens: the rows
    if follows is not None and min(follows[past.length :]) < past.n_prefix - 1:
        # a fed node follows a cached token that is not the prefix's last (gpt2 hangs new nodes only there or
        # from cached nodes): cut the cache back to just after that token
        past = rollback(past, min(follows[past.length :]) + 1)
    n_keep = past.length  # x[:n_keep] are cached: feed the rest
    fed_parents = None if follows is None else [p - past.n_prefix for p in follows[n_keep:]]
    logits, present = gpt2(x[n_keep:], **weights, n_head=n_head, past=past, n_logits=n, parents=fed_parents)
    return logits, present, len(x) - n_keep


def follows_of(n_tokens, parents):
    """The position each token of x comes right after (-1 for the first): a chain, then the tree's nodes.

    follows_of(5, None) == [-1, 0, 1, 2, 3]; follows_of(5, [-1, -1, 0]) == [-1, 0, 1, 1, 2]: nodes 0 and 1
    (positions 2 and 3) both follow the prefix's last token (position 1); node 2 follows node 0.
    """
    parents = [] if parents is None else [int(parent) for parent in parents]
    n_prefix = n_tokens - len(parents)
    return list(range(-1, n_prefix - 1)) + [n_prefix + parent for parent in parents]


def reusable_cache(cache, cached_tokens, x, follows, n_common):
    """The cache rolled back, or gathered along one tree path, to the longest start of x it holds.

    follows: None for a plain sequence x, else follows_of(len(x), parents) of a tree call. Either x's leading
    plain sequence continues the cached prefix along one path of the cached tree: then that path is
    gathered into place (gpt2.keep_path; a path that goes straight on moves nothing); or (tree calls only)
    the first k positions hold x's first k tokens with the same parents, tree nodes included: then it is a
    rollback to k. Whichever keeps more. A plain-sequence call always gets a plain-sequence cache.
    """
    n_prefix, tree = cache.n_prefix, cache.parents
    n_chain = len(x) if follows is None else chain_length(follows)  # x's leading plain sequence
    n_same = 0 if follows is None else min(n_common, same_length(follows_of(cache.length, tree), follows))
    n_seq = min(n_common, n_prefix, n_chain)  # the tokens x shares with the cached prefix
    path = []
    if n_seq == n_prefix:  # then down the tree, as long as x's tokens are one of the children
        children = {(p, cached_tokens[n_prefix + i]): i for i, p in reversed(list(enumerate(tree)))}  # first wins
        for token in x[n_prefix:n_chain]:
            child = children.get((path[-1] if path else -1, token))
            if child is None:
                break
            path.append(child)
    if n_seq + len(path) >= n_same:
        return keep_path(cache, path) if n_seq == n_prefix else rollback(cache, n_seq)
    return rollback(cache, n_same)


def same_length(a, b):
    """How many leading items the lists a and b share: same_length([1, 2, 3], [1, 2, 5]) == 2."""
    return next((i for i, (item_a, item_b) in enumerate(zip(a, b)) if item_a != item_b), min(len(a), len(b)))


def chain_length(follows):
    """How many leading tokens each follow the one before: the plain sequence a tree call starts with."""
    return next((i for i, f in enumerate(follows) if f != i - 1), len(follows))


def check_tree_call(x, n, parents):
    """ValueError, saying what was wrong, for a tree call the contract does not allow."""
    m = len(parents)
    if not 1 <= m <= len(x):
        raise ValueError(f"parents names the last m tokens of x as tree nodes: 1 <= m <= len(x)={len(x)}; got {m}")
    bad = [i for i, parent in enumerate(parents) if int(parent) != parent or not -1 <= parent < i]
    if bad:
        raise ValueError(f"parents[{bad[0]}] = {parents[bad[0]]}: each parent must be -1 or an earlier node's index")
    if not 1 <= n <= min(m + 1, len(x)):
        raise ValueError(f"model(x, n, parents) gives the rows of the last n of the m + 1 = {m + 1} prefixes "
                         f"(n <= len(x) = {len(x)} too); got n={n}")
