"""The drafter and tree comparison that `python tools/benchmark.py --drafters ... --trees ...` prints (a tool).

Read tools/benchmark.py first (what c and r are, how a run is timed) and drafters.py (the drafters compared). This
module never imports tools/benchmark.py; tools/benchmark.py imports it, measures c and r(m), and hands them in.

    python tools/benchmark.py --drafters model,lookup,staged --drafter_Ks 2,4,auto,hf --trees "2,1,1;2,2,1"

adds two tables, each in both cache settings and on two groups of prompts: "copying" (a passage to repeat,
code to extend: prompt lookup finds what comes next in the prompt) and "free" (nothing to copy).
- The drafter table: one row per drafter (the draft model's chain, prompt lookup, staged drafting; see
  drafters.py) and K (fixed, "auto": lookahead.AutoK, "hf": Hugging Face's schedule, k + 2 after a round that
  kept every guess and k - 1 otherwise). alpha, the mean k proposed, tokens per target pass, the measured
  speedup over autoregressive sampling in the same cache setting, and the cost model's prediction for what
  the run proposed: round i proposed m_i tokens, so
      predicted = sum_i tokens_per_round(alpha, m_i) / (c * draft-model calls + sum_i r(m_i + 1)),
  with r measured for every m up to k_max + 1 (lookup runs no model: it costs nothing but its target passes).
  K="auto" plans with the c and r(m) this run measured (set as the draft model's `cost` and the target's
  `r_table`), not with lookahead.R_TABLE.
- The tree table: each tree of --trees against the chain that sends the target as many rows (a tree with
  n nodes against the chain K = n; (2, 1, 1) has 6 nodes, (2, 2, 1) has 10): tokens per target pass, the share
  of guesses kept, and the wall-time speedup.
With --random_weights, lookup's acceptance is meaningless: a random model repeats itself, and lookup proposes
copies of its own output, which it then keeps.
"""

from dataclasses import dataclass, field

import numpy as np

import drafters
from drafters import tree_speculative_sampling
from lookahead import tokens_per_round
from command_line.flags import check_whole_number
from records import timed
from model_fn import create_model_fn
from records import AutoregressiveStats, SpeculativeStats
from sampling import autoregressive_sampling, speculative_sampling

RANDOM_MEANINGLESS = "meaningless"  # what lookup's acceptance is called with random weights


def random_prompt_groups(rng, n_vocab):
    """With random weights: random token ids; the "copying" prompt holds a 12-token passage twice, then its start."""
    passage = rng.integers(0, n_vocab, 12).tolist()
    return {"copying": [passage + passage + passage[:3]], "free": [rng.integers(0, n_vocab, 27).tolist()]}


def check_drafter_flags(drafter_names, drafter_Ks, trees, max_ngram):
    """ValueError unless the drafters are known, each K is a whole number >= 1, "auto" or "hf", trees are shapes."""
    for name in drafter_names:
        if name not in ("model", "lookup", "staged"):
            raise ValueError(f"--drafters takes model, lookup and staged (comma-separated); got {name!r}")
    for K in drafter_Ks:
        if K not in ("auto", "hf"):
            check_whole_number(K, 'every K in --drafter_Ks (or "auto", "hf")', 1)
    for tree in trees:
        if not tree or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in tree):
            raise ValueError(f"--trees takes shapes like 2,1,1;2,2,1 (whole numbers >= 1); got {tree!r}")
    if max_ngram is not None:  # None: no cap (the longest match)
        check_whole_number(max_ngram, "--max_ngram", 1)


def parse_trees(value):
    """Fire gives "2,1,1;2,2,1" as a string, "2,1,1" as a tuple, "2" as an int: always a list of tuples of ints."""
    if value is None:
        return []
    if isinstance(value, int) and not isinstance(value, bool):  # one level: --trees 2
        return [(value,)]
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        return [tuple(value)]
    if not isinstance(value, (str, list, tuple)):  # --trees alone (fire: True), a float
        raise ValueError(f"--trees takes shapes like 2,1,1;2,2,1; got {value!r}")
    parts = value.split(";") if isinstance(value, str) else list(value)
    try:
        return [tuple(int(b) for b in str(part).strip("()[] ").split(",")) for part in parts]
    except ValueError:
        raise ValueError(f"--trees takes shapes like 2,1,1;2,2,1; got {value!r}") from None


def tree_nodes(tree):
    """Nodes of a tree of branching (b1, b2, ...): b1 + b1 b2 + ...; (2, 2, 1, 1) has 2 + 4 + 4 + 4 = 14."""
    nodes, width = 0, 1
    for branching in tree:
        width *= branching
        nodes += width
    return nodes


def make_drafter(name, draft_model, max_ngram):
    """The drafter called `name`: the draft model itself (Chen's chain), prompt lookup, or staged drafting."""
    if name == "model":
        return draft_model
    if name == "lookup":
        return drafters.prompt_lookup(max_ngram=max_ngram)
    return drafters.staged(draft_model, max_ngram=max_ngram)


@dataclass
class DrafterRun:
    """What one drafter and K did over a group of prompts: wall time, the sampler's stats (summed over the
    prompts), the texts, and what the cost model needs: draft-model calls and proposal sizes."""

    seconds: float = 0.0
    stats: object = None
    texts: list = field(default_factory=list)  # the token lists, to compare greedy runs
    draft_calls: int = 0
    proposal_sizes: list = field(default_factory=list)  # tokens proposed in each round (0: a plain step)

    @property
    def ms_per_token(self):
        return 1e3 * self.seconds / self.stats.tokens


def run_speculative(prompts, draft, target, N, settings, kv_cache, seed, sample, costs=None):
    """One DrafterRun over the prompts: sample(prompt, draft_model, target_model, rng, stats) for each, with
    fresh model functions (empty caches) and a fresh np.random.default_rng(seed) per prompt.

    costs (this cache setting's Costs): K="auto" then plans with the c and r(m) measured in this run (the draft
    model's `cost`, the target's `r_table`) instead of lookahead's defaults; they are fixed before the run,
    so the same seed still gives the same tokens.
    """
    run = DrafterRun(stats=SpeculativeStats())
    for prompt in prompts:
        draft_model = create_model_fn(*draft, **settings, kv_cache=kv_cache)
        target_model = create_model_fn(*target, **settings, kv_cache=kv_cache)
        if costs is not None:
            draft_model.cost = costs.c
            r_table = [1.0] + [costs.r(K) for K in range(1, max(costs.target_pass) + 1)]  # r_table[m - 1] = r(m)
            target_model.r_table = r_table
        rng = np.random.default_rng(seed)
        before = len(getattr(run.stats, "round_log", []))
        ids, seconds = timed(lambda: sample(prompt, draft_model, target_model, rng, run.stats))
        run.seconds += seconds
        run.texts.append(ids)
        run.draft_calls += draft_model.stats.calls
        log = getattr(run.stats, "round_log", None)
        if log is not None:
            run.proposal_sizes += [len(r.proposal.tokens) for r in log[before:]]  # m_i: what was proposed
    return run


def run_autoregressive(prompts, target, N, settings, kv_cache, seed):
    run = DrafterRun(stats=AutoregressiveStats())
    for prompt in prompts:
        rng = np.random.default_rng(seed)
        model = create_model_fn(*target, **settings, kv_cache=kv_cache)
        ids, seconds = timed(lambda: autoregressive_sampling(prompt, model, N, rng, stats=run.stats))
        run.seconds += seconds
        run.texts.append(ids)
    return run


def predicted_run_speedup(run, costs):
    """The cost model's speedup for what the run proposed, at its measured alpha.

    Round i proposed m_i tokens: it writes tokens_per_round(alpha, m_i) on average and its target pass costs
    r(m_i + 1) (r(1) = 1: a plain step); the draft model's calls cost c each (lookup makes none). So
    speedup = sum_i tokens_per_round(alpha, m_i) / (c * draft calls + sum_i r(m_i + 1)). With a fixed chain
    of K this is the formula of the classic table. None when the costs of some m_i + 1 were not measured.
    """
    sizes = run.proposal_sizes
    if not sizes or any(m > 0 and not costs.covers(m) for m in sizes):
        return None
    alpha = run.stats.acceptance_rate
    tokens = sum(tokens_per_round(alpha, m) for m in sizes)
    cost = costs.c * run.draft_calls + sum(costs.r(m) if m > 0 else 1.0 for m in sizes)
    return tokens / cost


def run_drafter_comparison(prompt_groups, draft, target, drafter_names, drafter_Ks, trees, N, settings, seed,
                           max_ngram, costs_by_mode, progress):
    """{kv_cache: {"autoregressive": {group: Run}, "rows": {(group, drafter, K): DrafterRun},
    "trees": {(group, shape): DrafterRun}}}: every drafter and K, and each tree against the chain with as many
    nodes, on every prompt group, in each cache setting of `modes`."""
    results = {}
    if not prompt_groups:
        return results
    for costs in costs_by_mode:
        kv_cache = costs.kv_cache
        mode = results[kv_cache] = {"autoregressive": {}, "rows": {}, "trees": {}}
        for group, prompts in prompt_groups.items():
            progress.set_postfix_str(f"{group}, autoregressive, cache {'on' if kv_cache else 'off'}")
            mode["autoregressive"][group] = run_autoregressive(prompts, target, N, settings, kv_cache, seed)
            progress.update()
            for name in drafter_names:
                for K in drafter_Ks:
                    progress.set_postfix_str(f"{group}, {name}, K={K}, cache {'on' if kv_cache else 'off'}")

                    def sample(prompt, draft_model, target_model, rng, stats, name=name, K=K):
                        drafter = make_drafter(name, draft_model, max_ngram)
                        return speculative_sampling(prompt, drafter, target_model, N, K, rng, stats=stats)

                    mode["rows"][group, name, K] = run_speculative(prompts, draft, target, N, settings, kv_cache,
                                                                   seed, sample, costs)
                    progress.update()
            for tree in trees:
                for shape in (tree, (1,) * tree_nodes(tree)):  # the tree, then the chain with as many nodes
                    progress.set_postfix_str(f"{group}, tree {shape}, cache {'on' if kv_cache else 'off'}")

                    def sample(prompt, draft_model, target_model, rng, stats, shape=shape):
                        if len(set(shape)) == 1 and shape[0] == 1:
                            return speculative_sampling(prompt, draft_model, target_model, N, len(shape), rng,
                                                        stats=stats)
                        return tree_speculative_sampling(prompt, draft_model, target_model, N, shape, rng,
                                                         stats=stats)

                    mode["trees"][group, shape] = run_speculative(prompts, draft, target, N, settings, kv_cache,
                                                                  seed, sample)
                    progress.update()
    return results


def drafter_table_rows(comparison, costs_by_mode, random_weights, greedy):
    """The drafter table as rows of strings: header first. One row per cache setting, prompt group, drafter, K.

    greedy (temperature 0): a last column says whether the texts are autoregressive sampling's, token for token.
    """
    header = ["cache", "prompts", "drafter", "K", "alpha", "mean k", "tokens/pass", "speedup (measured)",
              "speedup (predicted)"] + (["greedy text"] if greedy else [])
    rows = [header]
    for costs in costs_by_mode:
        if costs.kv_cache not in comparison:
            continue
        mode = comparison[costs.kv_cache]
        for (group, name, K), run in mode["rows"].items():
            autoregressive = mode["autoregressive"][group]
            alpha = f"{run.stats.acceptance_rate:.2f}" if run.stats.checked else "n/a"
            if random_weights and name == "lookup" and run.stats.checked:
                alpha += f" ({RANDOM_MEANINGLESS})"
            sizes = run.proposal_sizes
            mean_k = f"{np.mean(sizes):.1f}" if sizes else "n/a"
            predicted = predicted_run_speedup(run, costs)
            rows.append(["on" if costs.kv_cache else "off", group, name, str(K), alpha, mean_k,
                         f"{run.stats.tokens_per_target_pass:.2f}",
                         f"{autoregressive.ms_per_token / run.ms_per_token:.2f}x",
                         "n/a" if predicted is None else f"{predicted:.2f}x"]
                        + (["same" if run.texts == autoregressive.texts else "differs"] if greedy else []))
    return rows


def tree_table_rows(comparison):
    """Trees against chains of as many nodes: the rows each pass sent the target (the proposal and the last token:
    at temperature 0 a tree is the greedy chain, so it sends fewer than its shape's nodes), tokens per pass,
    wall-time speedup."""
    header = ["cache", "prompts", "shape", "rows per target pass", "alpha", "tokens/pass", "speedup (measured)"]
    rows = [header]
    for kv_cache, mode in comparison.items():
        for (group, shape), run in mode["trees"].items():
            autoregressive = mode["autoregressive"][group]
            chain = len(set(shape)) == 1 and shape[0] == 1
            name = f"chain K={len(shape)}" if chain else "tree " + ",".join(map(str, shape))
            sent = f"{np.mean(run.proposal_sizes) + 1:.1f}" if run.proposal_sizes else "n/a"  # proposal + last token
            rows.append(["on" if kv_cache else "off", group, name, sent,
                         f"{run.stats.acceptance_rate:.2f}" if run.stats.checked else "n/a",
                         f"{run.stats.tokens_per_target_pass:.2f}",
                         f"{autoregressive.ms_per_token / run.ms_per_token:.2f}x"])
    return rows
