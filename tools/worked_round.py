"""Two rounds of speculative sampling worked through with numbers, and the README's two pictures of a round.

A tool: read sampling.py's module docstring (Chen et al.'s Algorithm 2) first, or the README's "How a round
works, with numbers", which shows what this prints.

    python tools/worked_round.py             # prints the rounds (the README's "How a round works, with numbers")
                                             # and draws the two pictures into a new temporary folder
    python tools/worked_round.py --out img   # the same, drawing the README's own pictures in img/

Without --out nothing in the repository changes: the pictures in img/ are the figures command's to rewrite
(tools/make_readme_figures.py passes --out's folder itself).

The models are the hand-made second-order Markov tables of the exactness test (3 tokens, the next-token
distribution depends on the last two tokens), so every number can be checked by hand. The rounds follow
Chen et al.'s Algorithm 2 in sampling.py's letters (q: TARGET_TABLE, p: DRAFT_TABLE, K: lookahead), written out here
step by step instead of calling sampling.py, so that each uniform draw can be printed beside what it decided.
Every token is drawn by inverse CDF from one uniform u: the first token whose cumulative probability is > u
(sampling.py's `_sample`). tests/test_readme.py checks that the README shows exactly what this prints.

Nothing here is random at run time: the draws come from np.random.default_rng(SEED), and SEED was chosen
(by trying seeds in order) so that the first round keeps a guess and then rejects one, and the second earns a bonus token.
"""

import sys
import tempfile
from pathlib import Path

import numpy as np

# `python tools/worked_round.py` puts tools/ first on the path: put the repository's root there too
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.markov import DRAFT_TABLE, TARGET_TABLE  # noqa: E402  the exactness test's Markov tables
from loaders.safe_files import save_figure  # noqa: E402
from command_line.flags import errors_as_one_line  # noqa: E402
from command_line.scripts import check_output_folder, run_script  # noqa: E402

PROMPT = [0, 0, 0]  # ends in (0, 0), where p = [0.2, 0.3, 0.5] and q = [0.6, 0.4, 0.0] overlap only partly
SEED = 65
K = 2
N_ROUNDS = 2


def positive_part(f):
    """(f)₊ = max(f, 0), elementwise, NOT normalised: (q − p)₊ sums to 1 − β."""
    return np.maximum(f, 0.0)


def inverse_cdf(probs, u):
    """The token drawn by the uniform u from `probs` (which may be unnormalised): first token with cdf > u·total."""
    cdf = np.cumsum(probs)  # [n_vocab]
    return int(np.searchsorted(cdf, u * cdf[-1], side="right"))


def row(table, x):
    """The distribution after the token list x: table[second-to-last token, last token]."""
    return table[x[-2], x[-1]]  # [n_vocab]


def speculative_round(x, k, rng):
    """One round of Algorithm 2 from x with lookahead k: a dict of everything it computed, for printing.

    Step 1: the draft samples k guesses one by one; Step 2: the target's k + 1 rows; Step 3: keep guess t if
    u < q(g)/p(g), else draw from the residual (q − p)₊ and stop; Step 4: all kept: a bonus token from q[k].
    """
    drafts, p_rows, draft_draws = [], [], []
    for _ in range(k):  # Step 1
        p = row(DRAFT_TABLE, x + drafts)  # [n_vocab]
        u = rng.random()
        drafts.append(inverse_cdf(p, u))
        p_rows.append(p)
        draft_draws.append(u)
    q_rows = [row(TARGET_TABLE, x + drafts[:t]) for t in range(k + 1)]  # Step 2: [k + 1] rows [n_vocab]
    checks, written, origins, residual = [], [], [], None  # residual stays None unless a guess is rejected
    for t in range(k):  # Step 3
        g, p, q = drafts[t], p_rows[t], q_rows[t]
        u = rng.random()
        kept = bool(u < q[g] / p[g])
        checks.append(dict(depth=t + 1, token=g, p=p[g], q=q[g], u=u, kept=kept))
        if kept:
            written.append(g)
            origins.append("draft")
            continue
        beta = np.minimum(p, q).sum()
        unnormalised = positive_part(q - p)  # [n_vocab], sums to 1 − beta
        u = rng.random()
        token = inverse_cdf(unnormalised, u)
        residual = dict(depth=t + 1, p=p, q=q, beta=beta, unnormalised=unnormalised,
                        normalised=unnormalised / unnormalised.sum(), u=u, token=token)
        written.append(token)
        origins.append("residual")
        break
    bonus = None
    if residual is None:  # Step 4: every guess kept
        u = rng.random()
        token = inverse_cdf(q_rows[k], u)
        bonus = dict(q=q_rows[k], u=u, token=token)
        written.append(token)
        origins.append("bonus")
    return dict(x=list(x), drafts=drafts, p_rows=p_rows, draft_draws=draft_draws, q_rows=q_rows, checks=checks,
                residual=residual, bonus=bonus, written=written, origins=origins)


def worked_rounds(seed=SEED, k=K, n_rounds=N_ROUNDS):
    """n_rounds rounds from PROMPT, each continuing from the tokens the last one wrote."""
    rng = np.random.default_rng(seed)
    x, rounds = list(PROMPT), []
    for _ in range(n_rounds):
        rounds.append(speculative_round(x, k, rng))
        x = x + rounds[-1]["written"]
    return rounds


def fmt(values):
    return "[" + ", ".join(f"{v:.2f}" for v in values) + "]"


def report(rounds):
    """The rounds as the text block the README shows."""
    lines = [f"prompt {PROMPT}, K = {K}, tokens 0, 1, 2; draws from np.random.default_rng({SEED})"]
    for i, rnd in enumerate(rounds, 1):
        x, drafts = rnd["x"], rnd["drafts"]
        lines.append(f"round {i}, after ... {x[-2]}, {x[-1]}")
        for t, (p, u, g) in enumerate(zip(rnd["p_rows"], rnd["draft_draws"], drafts)):
            context = (x + drafts)[len(x) + t - 2 : len(x) + t]
            lines.append(f"  Step 1  draft after {context[0]}, {context[1]}: p = {fmt(p)}   u = {u:.3f} -> guess "
                         f"{t + 1} = {g}")
        lines.append(f"  Step 2  one target pass over {len(drafts) + 1} positions gives {len(drafts) + 1} rows:")
        for t, q in enumerate(rnd["q_rows"]):
            context = (x + drafts)[len(x) + t - 2 : len(x) + t]
            lines.append(f"            q after {context[0]}, {context[1]} = {fmt(q)}")
        for check in rnd["checks"]:
            verdict = "kept" if check["kept"] else "rejected"
            sign = "<" if check["kept"] else ">="
            ratio = min(1.0, check["q"] / check["p"])
            lines.append(f"  Step 3  guess {check['depth']} = {check['token']}: min(1, q/p) = min(1, {check['q']:.2f}/"
                         f"{check['p']:.2f}) = {ratio:.2f}; u = {check['u']:.3f} {sign} {ratio:.2f}: {verdict}")
        residual = rnd["residual"]
        if residual is not None:
            lines.append(f"          beta = sum min(p, q) = {residual['beta']:.2f}; (q - p)+ = "
                         f"{fmt(residual['unnormalised'])} (sums to 1 - beta = {1 - residual['beta']:.2f}),")
            lines.append(f"          normalised {fmt(residual['normalised'])}; u = {residual['u']:.3f} -> "
                         f"token {residual['token']} (the residual's)")
        bonus = rnd["bonus"]
        if bonus is not None:
            lines.append(f"  Step 4  every guess kept: bonus token from the last row {fmt(bonus['q'])}: "
                         f"u = {bonus['u']:.3f} -> token {bonus['token']}")
        written = ", ".join(f"{token} ({origin})" for token, origin in zip(rnd["written"], rnd["origins"]))
        lines.append(f"  written: {written}; one target pass, {len(drafts)} draft steps")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------------
# The pictures
# ------------------------------------------------------------------------------------------------------------


def plot_overlap(plt, p, q, path, title):
    """p and q as bars over the tokens; min(p, q) (what the kept guesses hand out) and (q − p)₊ (what the residual
    hands out) shaded: stacked, they are q."""
    tokens = np.arange(len(q))
    overlap, residual = np.minimum(p, q), positive_part(q - p)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.bar(tokens, overlap, width=0.6, color="tab:green", alpha=0.75, label=f"min(p, q): kept guesses (β = {overlap.sum():.2f})")
    ax.bar(tokens, residual, width=0.6, bottom=overlap, color="tab:red", alpha=0.75, hatch="//",
           label=f"(q − p)₊: residual (1 − β = {residual.sum():.2f})")
    ax.step(np.r_[tokens - 0.3, tokens[-1] + 0.3], np.r_[p, p[-1]], where="post", color="black", linestyle="--",
            linewidth=1.5, label="p, the draft")
    for t in tokens:
        ax.hlines(q[t], t - 0.3, t + 0.3, color="tab:blue", linewidth=2.5, label="q, the target" if t == 0 else None)
    ax.set(xticks=tokens, xlabel="token", ylabel="probability", ylim=(0, 1), title=title)
    ax.legend(fontsize="small", loc="upper left")
    save(plt, fig, path)


def plot_caches(plt, path):
    """The two KV caches across one round of K = 3 in which guess 1 is kept and guess 2 rejected."""
    fig, axes = plt.subplots(4, 1, figsize=(10.5, 5.4))
    cached, fed, guess, dropped = "#bbbbbb", "#7fb3e6", "#9ad19a", "#f2b8b8"
    rows = [
        ("draft, Step 1: feeds xn, g1, g2\n(one position per step)",
         [("x1", cached), ("...", cached), ("x(n-1)", cached), ("xn", fed), ("g1", fed), ("g2", fed),
          ("g3", "white")], "the draft's cache ends one token short: g3 is sampled from the row after g2 and "
         "never fed, since nobody needs the row after it"),
        ("target, Step 2: one pass over\nthe last token + K guesses",
         [("x1", cached), ("...", cached), ("x(n-1)", cached), ("xn", fed), ("g1", fed), ("g2", fed),
          ("g3", fed)], "cached prefix (gray); fed in this pass (blue): K + 1 positions, xn first, because it "
         "was sampled, never fed"),
        ("target, after Step 3: g1 kept,\ng2 rejected -> rolled back",
         [("x1", cached), ("...", cached), ("x(n-1)", cached), ("xn", cached), ("g1", guess), ("g2", dropped),
          ("g3", dropped)], "the cache is cut back to the accepted prefix x1 .. g1; y, drawn from the residual, "
         "is written but not fed"),
        ("both, next round: each rolls\nback to x1 .. g1, feeds y",
         [("x1", cached), ("...", cached), ("x(n-1)", cached), ("xn", cached), ("g1", cached), ("y", fed)],
         "had all K been kept, the draft would feed g3 and the bonus token (2 positions), the target the bonus "
         "token + K guesses"),
    ]
    for ax, (label, boxes, note) in zip(axes, rows):
        for i, (text, color) in enumerate(boxes):
            ax.add_patch(plt.Rectangle((i, 0), 0.92, 0.9, facecolor=color, edgecolor="black"))
            ax.text(i + 0.46, 0.45, text, ha="center", va="center", fontsize=9)
        ax.text(-0.2, 0.45, label, ha="right", va="center", fontsize=9)
        ax.text(0, -0.35, note, ha="left", va="center", fontsize=8, style="italic")
        ax.set(xlim=(-3.6, 9.2), ylim=(-0.6, 1.0))
        ax.axis("off")
    fig.suptitle("The two KV caches across one round (K = 3): g1 kept, g2 rejected, y drawn from the residual")
    save(plt, fig, path)


def save(plt, fig, path):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    save_figure(fig, path, dpi=90)
    plt.close(fig)
    print(f"wrote {path}")


def main(out=None):
    """Print the two rounds and draw the two pictures.

    Args:
        out: the folder the pictures go into (default: a new temporary folder).
    """
    with errors_as_one_line():
        out = check_output_folder(out, "--out") if out is not None else Path(tempfile.mkdtemp(prefix="worked-round-"))
    rounds = worked_rounds()
    print(report(rounds))
    try:
        import matplotlib
    except ImportError:  # the rounds above need NumPy alone; the two pictures need the optional extra
        print("the two pictures need matplotlib, an optional extra: pip install -r requirements/plots.txt")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rejected = next(rnd for rnd in rounds if rnd["residual"] is not None)["residual"]
    plot_overlap(plt, rejected["p"], rejected["q"], out / "worked_round_overlap.png",
                 "the rejected guess's position: q (target) and p (draft)")
    plot_caches(plt, out / "kv_caches_round.png")


if __name__ == "__main__":
    run_script(main, sys.argv[1:], "tools/worked_round.py")
