"""The scenarios the reference runs so that each exercise step can be graded alone, with every call recorded.

Read course/replay.py first (what the recorded calls are for, and the stand-ins made of them).

The reference solutions (the teacher's repository) run a few small scenarios, and every call to the step
functions is recorded with its arguments and result:
- forward: a tiny random GPT-2's weights; each call of layer_norm, attention, mha (with its block's part of the
  cache before and after), tree_mask in the passes below, causal_mask for every (n_seq, n_past) of a small
  grid, and the passes themselves (gpt2's inputs, cache, logits, present): a full pass, a pass in two chunks,
  one after a rollback, one with n_logits, and a token tree after a cached prefix.
- rounds: _residual on random rows; drafters._verify_tree on random chains and trees (with its own _accept and _residual
  calls, so a step-9 check can stand in for them); prompt lookup on growing and cut-back random texts.

With seeds 0 and 1 they are the calls a student copy ships (tests/make_step_fixtures.py writes them); the
gradebook runs them again with seeds drawn when it grades (course/hidden.py), on cases no copy holds.
"""

import numpy as np

import drafters
import gpt2
import sampling
from course.replay import recording
from loaders.random_weights import random_params

HPARAMS = {"n_vocab": 16, "n_ctx": 12, "n_embd": 8, "n_head": 2, "n_layer": 2}
TREE_SHAPES = [[], [-1], [-1, 0], [-1, 0, 1], [-1, 0, 1, 2], [-1, -1], [-1, -1, 0], [-1, 0, 0, 1, 2],
               [-1, -1, -1, 0, 1], [-1, -1, 0, 0, 2]]  # proposals' parents: chains first, then trees
LOOKUP_SETTINGS = [(None, 1), (3, 1), (2, 2), (None, 3)]  # (max_ngram, min_ngram)


def plain(tree):
    """Weights as plain row-major float32 arrays (whatever layout the loaders use)."""
    if isinstance(tree, dict):
        return {key: plain(value) for key, value in tree.items()}
    if isinstance(tree, list):
        return [plain(value) for value in tree]
    return np.ascontiguousarray(tree, dtype=np.float32)


def forward_part(seed=0):
    """The forward scenarios run by the reference on a tiny random GPT-2 drawn with `seed`, every step call
    recorded (see the module docstring)."""
    rng = np.random.default_rng(seed)
    params = plain(random_params(HPARAMS, rng, std=0.3))
    n_head = HPARAMS["n_head"]
    calls = {"layer_norm": [], "attention": [], "mha": [], "tree_mask": [], "passes": []}
    originals = {
        "layer_norm": recording(gpt2, "layer_norm", calls["layer_norm"],
                                lambda a, before, kw, out: {"x": a[0], "g": kw["g"], "b": kw["b"], "out": out}),
        "attention": recording(gpt2, "attention", calls["attention"],
                               lambda a, before, kw, out: dict(zip("qkv", a[:3]), mask=a[3], out=out)),
        "mha": recording(gpt2, "mha", calls["mha"], lambda a, before, kw, out: {
            "x": a[0], "block": next(i for i, b in enumerate(params["blocks"]) if b["attn"]["c_attn"] is kw["c_attn"]),
            "n_past": kw["n_past"], "mask": kw["mask"], "capacity": kw["kv"].shape[2],
            "kv_before": before["kv"][:, :, : kw["n_past"]],  # only the valid positions: the rest is np.empty's
            "kv_after": kw["kv"][:, :, : kw["n_past"] + len(a[0])].copy(), "out": out}),
        "tree_mask": recording(gpt2, "tree_mask", calls["tree_mask"],
                               lambda a, before, kw, out: {"ancestors": a[0], "n_prefix": a[1], "out": out}),
    }
    try:
        def run(name, inputs, past=None, **kwargs):
            result = gpt2.gpt2(inputs, **params, n_head=n_head, past=past, **kwargs)
            logits, present = result if past is not None else (result, None)
            calls["passes"].append({
                "name": name, "inputs": list(inputs), "kwargs": kwargs,
                "past_kv": None if past is None else past.kv.copy(),
                "past_parents": [] if past is None else list(past.parents),
                "logits": logits, "present_kv": None if present is None else present.kv.copy(),
                "present_parents": None if present is None else list(present.parents)})
            return present

        run("a full pass without a cache", [3, 1, 4, 1, 5, 9])
        first = run("the first chunk into an empty cache", [3, 1, 4], gpt2.empty_cache(params["blocks"], n_head))
        run("the next chunk after 3 cached positions", [1, 5, 9], first)
        cut = run("the first chunk again, to cut back", [3, 1, 4, 1, 5], gpt2.empty_cache(params["blocks"], n_head))
        run("two tokens after a cache cut back to 4 positions, logits of the last only", [2, 6],
            gpt2.rollback(cut, 4), n_logits=1)
        prefix = run("a prefix before a tree", [3, 1, 4], gpt2.empty_cache(params["blocks"], n_head))
        run("a token tree after a cached prefix", [1, 5, 9, 2], prefix, parents=[-1, -1, 0, 0])
    finally:
        for name, original in originals.items():
            setattr(gpt2, name, original)

    spread = np.float32(1) + np.float32(1e-3) * rng.standard_normal((3, 8), dtype=np.float32)  # eps matters
    block = params["blocks"][0]["ln_1"]
    calls["layer_norm"].append({"x": spread, **block, "out": gpt2.layer_norm(spread, **block)})
    calls["causal_mask"] = [{"n_seq": n_seq, "n_past": n_past, "out": gpt2.causal_mask(n_seq, n_past)}
                            for n_seq in range(1, 7) for n_past in range(0, 7)]
    for parents in ([-1, -1, 0, 1], [-1, 0, 0, 2, -1], [-1]):
        ancestors = gpt2.tree_ancestors(parents)
        for n_prefix in (0, 2):
            calls["tree_mask"].append({"ancestors": ancestors, "n_prefix": n_prefix,
                                       "out": gpt2.tree_mask(ancestors, n_prefix)})
    return {"hparams": HPARAMS, "params": params, **calls}


def random_row(rng, n_vocab):
    """A distribution: one-hot (a deterministic proposal) one time in four, else a Dirichlet draw."""
    if rng.random() < 0.25:
        return np.eye(n_vocab)[rng.integers(n_vocab)]
    return rng.dirichlet(np.ones(n_vocab) * 0.7)


def rounds_part(seed=1):
    """The round scenarios (residuals, verified chains and trees, prompt lookups) drawn with `seed`."""
    rng = np.random.default_rng(seed)
    residuals = []
    for _ in range(12):
        q_row, p_row = random_row(rng, 6), random_row(rng, 6)
        residuals.append({"q_row": q_row, "p_row": p_row, "out": sampling._residual(q_row, p_row)})

    verify_cases = []
    for parents in TREE_SHAPES:
        for _ in range(12):
            n_vocab, seed = 5, int(rng.integers(2**31))
            rows = np.array([random_row(rng, n_vocab) for _ in parents]).reshape(len(parents), n_vocab)
            tokens = [int(rng.choice(n_vocab, p=row)) for row in rows]
            q = np.array([random_row(rng, n_vocab) for _ in range(len(parents) + 1)])  # [m + 1, n_vocab]
            depths = [len(path_from_root(parents, i)) for i in range(len(parents))]
            accepts, residual_calls = [], []
            original_accept, original_residual = sampling._accept, sampling._residual

            def accept(q_row, p_row, token, generator):
                kept, u = original_accept(q_row, p_row, token, generator)
                accepts.append({"q": float(q_row[token]), "p": float(p_row[token]), "u": u, "kept": kept})
                return kept, u

            def residual(q_row, p_row):
                out = original_residual(q_row, p_row)
                residual_calls.append({"q_row": q_row.copy(), "p_row": p_row.copy(), "out": out})
                return out

            sampling._accept, sampling._residual = accept, residual
            try:
                proposal = sampling.Proposal(tokens=tokens, parents=list(parents), rows=rows)
                rng_of_the_round = np.random.default_rng(seed)
                written, origins, checks, target_rows = drafters._verify_tree(q, proposal, rng_of_the_round, depths)
            finally:
                sampling._accept, sampling._residual = original_accept, original_residual
            verify_cases.append({
                "q": q, "tokens": tokens, "parents": list(parents), "rows": rows, "depths": depths, "seed": seed,
                "written": written, "origins": origins, "rows_used": target_rows,
                "checks": [[c.depth, c.token, c.p, c.q, c.u, c.kept] for c in checks],
                "accept_calls": accepts, "residual_calls": residual_calls})

    lookups = []
    for n_vocab in (2, 3, 6):
        for max_ngram, min_ngram in LOOKUP_SETTINGS:
            lookup = drafters.prompt_lookup(max_ngram, min_ngram)
            x, texts = [], []  # each text: the last one cut back to `keep` tokens, then `append`ed to
            for _ in range(100):
                keep = int(rng.integers(0, len(x) + 1)) if rng.random() < 0.15 else len(x)
                added = rng.integers(0, n_vocab, size=5 if not x else rng.integers(1, 4)).tolist()
                x = x[:keep] + added
                texts.append({"keep": keep, "append": added, "lookup": lookup.lookup(x, 5),
                              "match_length": lookup.match_length(x), "steps": lookup.index.steps})
            lookups.append({"max_ngram": max_ngram, "min_ngram": min_ngram, "texts": texts})
    return {"residual": residuals, "verify": verify_cases, "lookup": lookups}


def path_from_root(parents, i):
    """Node i's path from its root: its depth is the path's length (1 for a child of x)."""
    path = []
    while i >= 0:
        path.append(i)
        i = parents[i]
    return path
