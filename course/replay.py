"""The reference's calls, recorded and replayed: stand-ins that let each exercise step be graded on its own.

Read EXERCISES.md first. A step's checks must not run through another step's functions: a learner graded on
step 3 (`mha`) may not have written step 2's `attention` yet. So where a step's function calls another step's,
the check swaps in a stand-in that REPLAYS the reference: it looks the arguments up among the calls the
reference made in the same scenario and returns what the reference returned. It computes nothing, so it holds
no solution; a function that calls it with arguments the reference never saw gets an error saying so (the
mistake is then in the caller, which is the step being graded).

`recording` wraps a function of the reference to save its calls (course/scenarios.py runs the scenarios).
The saved calls are shipped in tests/fixtures/steps.json for a learner's `grade N`, and drawn fresh for the
gradebook (course/hidden.py). Arrays travel as {"dtype", "shape", "base64"} (little-endian bytes): small,
exact, and safe to read from a process that is not trusted (`decode` builds numbers and arrays, nothing else).
"""

import base64

import numpy as np

def encode(value):
    """Arrays (and nested dicts, lists, tuples of them) as JSON-able values."""
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<"))
        return {"dtype": value.dtype.str.lstrip("<>|="), "shape": list(value.shape),
                "base64": base64.b64encode(data.tobytes()).decode("ascii")}
    if isinstance(value, dict):
        return {key: encode(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(item) for item in value]
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    return value


def decode(value):
    """The inverse of `encode` (tuples come back as lists). Only plain number dtypes are read: an array of
    Python objects from an untrusted writer is a ValueError, never an object."""
    if isinstance(value, dict) and set(value) == {"dtype", "shape", "base64"}:
        if np.dtype(value["dtype"]).kind not in "biuf":
            raise ValueError(f"an array of dtype {value['dtype']!r}: only booleans and numbers are read")
        raw = base64.b64decode(value["base64"])
        return np.frombuffer(raw, dtype=np.dtype(value["dtype"]).newbyteorder("<")).reshape(value["shape"]).copy()
    if isinstance(value, dict):
        return {key: decode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [decode(item) for item in value]
    return value


def same(a, b, atol=1e-5):
    """Equal shapes and values within atol (relative 1e-4): how a stand-in recognises its arguments."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-4, atol=atol))


class Replay:
    """A stand-in for the function `name`: finds the saved call whose `keys` match the arguments, returns its
    "out" (a copy), and counts how often it was used."""

    def __init__(self, name, calls, keys):
        self.name, self.calls, self.keys, self.used = name, calls, keys, 0

    def find(self, **arguments):
        for call in self.calls:
            if all(same(arguments[key], call[key]) for key in self.keys):
                self.used += 1
                return call
        shapes = {key: np.shape(arguments[key]) for key in self.keys}
        raise AssertionError(f"{self.name} was called with arguments {shapes} that the reference never passed it "
                             f"here: look at what your code computes before it calls {self.name}")


def layer_norm_stand_in(calls):
    replay = Replay("layer_norm", calls, ("x", "g"))
    return lambda x, g, b, eps=1e-5: replay.find(x=x, g=g)["out"].copy()


def attention_stand_in(calls):
    replay = Replay("attention", calls, ("q", "k", "v", "mask"))
    return lambda q, k, v, mask: replay.find(q=q, k=k, v=v, mask=mask)["out"].copy()


def mask_stand_ins(calls):
    """(causal_mask, tree_mask) stand-ins from the saved masks: causal ones by (n_seq, n_past), tree ones by
    (ancestors, n_prefix)."""
    causal = {(call["n_seq"], call["n_past"]): call["out"] for call in calls["causal_mask"]}
    trees = Replay("tree_mask", calls["tree_mask"], ("ancestors", "n_prefix"))

    def causal_mask(n_seq, n_past):
        if (n_seq, n_past) not in causal:
            raise AssertionError(f"causal_mask({n_seq}, {n_past}) is not among the saved masks: {sorted(causal)}")
        return causal[n_seq, n_past].copy()

    return causal_mask, lambda ancestors, n_prefix: trees.find(ancestors=ancestors, n_prefix=n_prefix)["out"].copy()


def mha_stand_in(calls):
    """Writes the saved new keys and values into kv at n_past (as `mha` must) and returns the saved output,
    once the mask hides what the reference's hid there (a key hidden: below -1e4; the value itself may differ)."""
    replay = Replay("mha", calls, ("x", "n_past"))

    def mha(x, c_attn, c_proj, n_head, kv, n_past, mask):
        call = replay.find(x=x, n_past=n_past)
        hidden, expected = np.asarray(mask) < -1e4, np.asarray(call["mask"]) < -1e4  # [n_seq, n_keys] each
        if hidden.shape != expected.shape or not np.array_equal(hidden, expected):
            what = f"of shape {hidden.shape}, not {expected.shape}" if hidden.shape != expected.shape else \
                f"that hides {int(hidden.sum())} (query, key) pairs where the reference's hides {int(expected.sum())}"
            raise AssertionError(f"mha was given a mask {what} (n_past {n_past}, {len(x)} new positions): look at "
                                 f"the mask your code builds and hands to every block")
        n_seq = len(x)
        kv[:, :, n_past : n_past + n_seq] = call["kv_after"][:, :, n_past : n_past + n_seq]
        return call["out"].copy()

    return mha


def saved_cache(cache_type, past_kv, past_parents, n_ctx):
    """A saved pass's cache as a `cache_type` (gpt2.Cache of the graded folder): its keys and values in a buffer of
    n_ctx positions, and its tree; None for a pass without a cache."""
    if past_kv is None:
        return None
    n_layer, _, n_head, length, head_dim = past_kv.shape
    buffer = np.zeros((n_layer, 2, n_head, n_ctx, head_dim), np.float32)
    buffer[:, :, :, :length] = past_kv
    return cache_type(buffer, length, tuple(past_parents))


def accept_stand_in(calls):
    """Draws u = rng.random() as `_accept` must, then looks the decision up among the saved (q, p, u)."""
    def accept(q_row, p_row, token, rng):
        u = rng.random()
        for call in calls:
            if call["u"] == u and np.isclose(call["q"], q_row[token]) and np.isclose(call["p"], p_row[token]):
                return call["kept"], u
        raise AssertionError(f"_accept was asked about q(token)={q_row[token]:.6f}, p(token)={p_row[token]:.6f} "
                             f"with u={u:.6f}, which the reference never asked in this round: is the row right, "
                             f"and are the uniforms drawn in the reference's order?")

    return accept


def residual_stand_in(calls):
    replay = Replay("_residual", calls, ("q_row", "p_row"))
    return lambda q_row, p_row: replay.find(q_row=q_row, p_row=p_row)["out"].copy()


def recording(module, name, calls, record):
    """Wrap module.name so that each call appends record(args, kwargs, kwargs_after, result) to calls (args and kwargs
    copied before the call); returns the original."""
    original = getattr(module, name)

    def wrapper(*args, **kwargs):
        copy = lambda value: value.copy() if isinstance(value, np.ndarray) else value  # noqa: E731
        before = {key: copy(value) for key, value in kwargs.items()}  # views into the cache change later
        args_before = [copy(value) for value in args]
        result = original(*args, **kwargs)
        calls.append(record(args_before, before, kwargs, result))
        return result

    setattr(module, name, wrapper)
    return original
