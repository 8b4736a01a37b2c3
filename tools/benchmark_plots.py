"""The pictures tools/benchmark.py draws, and the two helpers every plotting tool shares (a tool, not on the reading path).

Read tools/benchmark.py first: these functions draw what it measured (its Costs and Runs) and the drafter table of
tools/compare_drafters.py. matplotlib is optional (requirements/plots.txt); without it a run says how to get it.
"""

import numpy as np

from lookahead import predicted_speedup
from loaders.safe_files import save_figure


def import_pyplot():
    """matplotlib.pyplot (drawing into files, no window), or None with a note on how to install it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("\nmatplotlib is not installed, so no plots were written. To get them: "
              "pip install -r requirements/plots.txt")
        return None
    return plt


def save(plt, fig, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    save_figure(fig, path, dpi=90)
    plt.close(fig)
    print(f"wrote {path}")


def plot_measured(plt, costs, autoregressive, speculative, Ks, title, paths):
    """speedup (measured and predicted) and alpha vs K; ms/token of both samplers vs K."""
    alphas = [speculative[K].stats.acceptance_rate for K in Ks]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(Ks, [autoregressive.ms_per_token / speculative[K].ms_per_token for K in Ks], "o-", label="measured (wall time)")
    left.plot(Ks, [speculative[K].stats.tokens_per_target_pass for K in Ks], "s--", label="in target passes (tokens per pass)")
    left.plot(Ks, [predicted_speedup(a, K, costs.c) for a, K in zip(alphas, Ks)], ":", label="predicted, cK+1")
    left.plot(Ks, [predicted_speedup(a, K, costs.c, costs.r(K)) for a, K in zip(alphas, Ks)], "-.",
              label="predicted, cK+r")
    left.axhline(1, color="gray", linewidth=0.8)
    left.set(xlabel="K (draft tokens per round)", xticks=Ks, ylabel="speedup over autoregressive", title="speedup")
    left.legend()
    right.plot(Ks, alphas, "o-")
    right.set(xlabel="K (draft tokens per round)", xticks=Ks, ylabel="acceptance rate alpha", ylim=(0, 1.05),
              title="acceptance rate")
    fig.suptitle(title)
    save(plt, fig, paths[0])

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.axhline(autoregressive.ms_per_token, color="C0", label="autoregressive")
    ax.plot(Ks, [speculative[K].ms_per_token for K in Ks], "o-", color="C1", label="speculative")
    ax.set(xlabel="K (draft tokens per round)", xticks=Ks, ylabel="ms per token", ylim=(0, None), title=title)
    ax.legend()
    save(plt, fig, paths[1])


def plot_random(plt, costs_by_mode, alphas, Ks, kv_cache, autoregressive, speculative, title, paths):
    """Predicted speedup vs K for each alpha, with and without the cache; ms/token measured and predicted."""
    fig, axes = plt.subplots(1, len(costs_by_mode), figsize=(5 * len(costs_by_mode), 4), sharey=True)
    for ax, costs in zip(np.atleast_1d(axes), costs_by_mode):
        for i, alpha in enumerate(alphas):
            ax.plot(Ks, [predicted_speedup(alpha, K, costs.c, costs.r(K)) for K in Ks], "o-", color=f"C{i}",
                    label=f"alpha={alpha:g}")
            ax.plot(Ks, [predicted_speedup(alpha, K, costs.c) for K in Ks], ":", color=f"C{i}")
        ax.axhline(1, color="gray", linewidth=0.8)
        mode = "with KV cache" if costs.kv_cache else "without cache (full recompute)"
        ax.set(xlabel="K (draft tokens per round)", xticks=Ks, title=f"{mode}: c={costs.c:.2f}")
    np.atleast_1d(axes)[0].set_ylabel("predicted speedup (solid: cK+r, dotted: cK+1)")
    np.atleast_1d(axes)[0].legend(fontsize="small")
    fig.suptitle(title)
    save(plt, fig, paths[0])

    costs = next(c for c in costs_by_mode if c.kv_cache == kv_cache)  # the setting the samplers ran in
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.axhline(autoregressive.ms_per_token, color="gray", label="autoregressive (measured)")
    ax.plot(Ks, [speculative[K].ms_per_token for K in Ks], "kx-", label="speculative, alpha~0 (measured)")
    for i, alpha in enumerate(alphas):
        predicted = [autoregressive.ms_per_token / predicted_speedup(alpha, K, costs.c, costs.r(K)) for K in Ks]
        ax.plot(Ks, predicted, "o--", color=f"C{i}", label=f"speculative, alpha={alpha:g} (predicted)")
    mode = "KV cache on" if kv_cache else "KV cache off"
    ax.set(xlabel="K (draft tokens per round)", xticks=Ks, ylabel="ms per token", ylim=(0, None), title=f"{title}, {mode}")
    ax.legend(fontsize="small")
    save(plt, fig, paths[1])


def plot_drafters(plt, drafter_rows, title, path):
    """Measured and predicted speedup of each drafter and K: one panel per cache setting and prompt group."""
    header, *rows = drafter_rows
    column = {name: i for i, name in enumerate(header)}
    panels = sorted({(row[column["cache"]], row[column["prompts"]]) for row in rows}, key=lambda p: (p[0] != "on", p[1]))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4), sharey=True, squeeze=False)
    for ax, (cache, group) in zip(axes[0], panels):
        chosen = [row for row in rows if (row[column["cache"]], row[column["prompts"]]) == (cache, group)]
        labels = [f"{row[column['drafter']]}\nK={row[column['K']]}" for row in chosen]
        x = np.arange(len(chosen))

        def values(name):
            return [float(row[column[name]][:-1]) if row[column[name]] != "n/a" else np.nan for row in chosen]

        ax.bar(x - 0.2, values("speedup (measured)"), width=0.4, label="measured (wall time)")
        ax.bar(x + 0.2, values("speedup (predicted)"), width=0.4, label="predicted (cost model)")
        ax.axhline(1, color="gray", linewidth=0.8)
        ax.set_xticks(x, labels, fontsize=7)
        ax.set_title(f"{group} prompts, KV cache {cache}", fontsize=10)
    axes[0][0].set_ylabel("speedup over autoregressive")
    axes[0][0].legend(fontsize="small")
    fig.suptitle(title)
    save(plt, fig, path)
