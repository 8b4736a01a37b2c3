"""Saved calls of the reference, and stand-ins made of them, so that each exercise step is graded on its own.

Read EXERCISES.md and tests/make_step_fixtures.py (which writes the saved calls) first.

A step's checks must not run through another step's functions: a learner grading step 3 (`mha`) may not have
written step 2's `attention` yet. So where a step's function calls another step's, the check swaps in a
stand-in that REPLAYS the reference: it looks the arguments up among the calls the reference made in the same
scenario (tests/fixtures/steps.json) and returns what the reference returned. It computes nothing, so it
holds no solution; a function that calls it with arguments the reference never saw gets an error saying so
(the mistake is then in the caller, which is the step being graded).

The fixture stores arrays as {"dtype", "shape", "base64"} (little-endian bytes), which keeps it small and exact.
"""

import base64
import json

import numpy as np

from conftest import FIXTURES_DIR

STEPS_FIXTURE = FIXTURES_DIR / "steps.json"


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
    """The inverse of `encode` (tuples come back as lists)."""
    if isinstance(value, dict) and set(value) == {"dtype", "shape", "base64"}:
        raw = base64.b64decode(value["base64"])
        return np.frombuffer(raw, dtype=np.dtype(value["dtype"]).newbyteorder("<")).reshape(value["shape"]).copy()
    if isinstance(value, dict):
        return {key: decode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [decode(item) for item in value]
    return value


def load():
    """The saved calls: {part: ...}, as tests/make_step_fixtures.py wrote them."""
    if not STEPS_FIXTURE.is_file():
        raise FileNotFoundError(f"{STEPS_FIXTURE} is missing: run `python tests/make_step_fixtures.py` in the "
                                f"teacher's repository (it needs the reference solutions)")
    return decode(json.loads(STEPS_FIXTURE.read_text(encoding="utf-8")))


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
    """Writes the saved new keys and values into kv at n_past (as `mha` must) and returns the saved output."""
    replay = Replay("mha", calls, ("x", "n_past"))

    def mha(x, c_attn, c_proj, n_head, kv, n_past, mask):
        call = replay.find(x=x, n_past=n_past)
        n_seq = len(x)
        kv[:, :, n_past : n_past + n_seq] = call["kv_after"][:, :, n_past : n_past + n_seq]
        return call["out"].copy()

    return mha


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
