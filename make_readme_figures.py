"""Every number, table and plot the README shows, from ONE run of ONE command, written into README.md.

    python make_readme_figures.py --random_weights            # what the README shows (no OpenAI weights where
                                                              # this is developed); a few minutes on 2 cores
    python make_readme_figures.py                             # OpenAI's 124M and 355M (downloaded first)
    python make_readme_figures.py --random_weights --dry_run  # print the generated parts, leave README.md alone

The README marks each generated part:

    <!-- NAME: begin (python make_readme_figures.py ...) -->
    ...
    <!-- NAME: end -->

and this script replaces what is between the two marks and nothing else. The prose around the marks is
written by hand and says only what holds whatever a run measures; every number a run can change is inside a
generated part, so the tables, the plots and the sentences that quote them always come from the same run.
The parts:

    machine        which machine and command made the numbers, and when
    worked-round   img/worked_round.py's two rounds on the exactness test's Markov tables (and its two pictures)
    sample-run     `python main.py` on random weights of the 124M and 355M shapes (skipped with real weights:
                   then `python main.py` itself is the sample run)
    cost-table     c and r with and without the KV cache, the predicted speedup at ONE alpha, break-even alphas
    cost-summary   the sentences that read the cost table
    (and whatever benchmark.py's drafter and tree comparisons print, as the drafters land)

It also moves the README's line links, like [`def _accept`](sampling.py#L419), to the line where the code in
their backticks now is, so that a link never lands on the wrong function after an edit above it.

Numbers from a shared 2-core machine move by 10-20% from run to run; that is why they are regenerated
together, never patched one by one.
"""

import contextlib
import io
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import fire
import numpy as np

import benchmark
from benchmark import machine_description
from gpt2 import random_params
from main import errors_as_one_line

REPO = Path(__file__).resolve().parent
sys.path[:0] = [str(REPO / "img"), str(REPO / "tests")]

ALPHA = 0.8  # the one acceptance rate the cost table predicts at
KS = (1, 2, 4, 8)


# ------------------------------------------------------------------------------------------------------------
# Writing into the README
# ------------------------------------------------------------------------------------------------------------


def replace_block(text, name, content, command):
    """text with the part between `<!-- name: begin ... -->` and `<!-- name: end -->` replaced by content.

    The begin mark records the command that wrote the part. A missing mark is a ValueError: the README's prose
    decides where a generated part goes, not this script.
    """
    pattern = re.compile(rf"<!-- {re.escape(name)}: begin[^>]*-->\n.*?<!-- {re.escape(name)}: end -->", re.S)
    if not pattern.search(text):
        raise ValueError(f"README.md has no <!-- {name}: begin --> ... <!-- {name}: end --> marks: add them where "
                         f"the part should go")
    block = f"<!-- {name}: begin ({command}) -->\n{content.rstrip()}\n<!-- {name}: end -->"
    return pattern.sub(lambda _: block, text, count=1)


LINK = re.compile(r"\[`([^`]+)`([^\]]*)\]\((\w+\.py)#L(\d+)\)")


def fix_line_links(text, root=REPO):
    """Point every [`code` ...](file.py#LN) link at the first line of file.py that holds `code`.

    A link whose line still holds its code stays as it is (so a name defined twice keeps the chosen line).
    Example: [`def _accept`](sampling.py#L400) becomes [`def _accept`](sampling.py#L419) when the def moved.
    """

    def fix(match):
        code, rest, path, line = match.group(1), match.group(2), match.group(3), int(match.group(4))
        lines = (Path(root) / path).read_text(encoding="utf-8").splitlines()
        if line <= len(lines) and code in lines[line - 1]:
            return match.group(0)
        found = [i + 1 for i, source in enumerate(lines) if code in source]
        if not found:
            raise ValueError(f"the README links to `{code}` in {path}, which no line of {path} holds any more: "
                             f"fix the link by hand")
        return f"[`{code}`{rest}]({path}#L{found[0]})"

    return LINK.sub(fix, text)


# ------------------------------------------------------------------------------------------------------------
# The cost table
# ------------------------------------------------------------------------------------------------------------


def fmt_alpha(alpha):
    return "never" if alpha is None else f"{alpha:.2f}"


def cost_table(costs_by_mode, Ks, alpha):
    """Markdown: one row per K, with the cache and without it side by side, predictions at ONE alpha."""
    head = ["K"]
    for costs in costs_by_mode:
        mode = "cache" if costs.kv_cache else "no cache"
        head += [f"c ({mode})", f"r ({mode})", f"predicted at α = {alpha:g}: r = 1 / measured r ({mode})",
                 f"break-even α ({mode})"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for K in Ks:
        cells = [str(K)]
        for costs in costs_by_mode:
            c, r = costs.c, costs.r(K)
            cells += [f"{c:.3f}", f"{r:.2f}",
                      f"{benchmark.predicted_speedup(alpha, K, c):.2f}× / {benchmark.predicted_speedup(alpha, K, c, r):.2f}×",
                      fmt_alpha(benchmark.break_even_alpha(K, c, r))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def span(values, fmt="{:.2f}"):
    """'0.60–0.84' (or '0.60' when all are equal), of the values that are not None."""
    values = [v for v in values if v is not None]
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return low if low == high else f"{low}–{high}"


def cost_summary(costs_by_mode, Ks, alpha, names):
    """The sentences that read the cost table, with its numbers."""
    cache, nocache = sorted(costs_by_mode, key=lambda costs: not costs.kv_cache)
    lines = []
    for costs, label in ((cache, "With the cache"), (nocache, "Without the cache")):
        rs = [costs.r(K) for K in Ks]
        leviathan = [benchmark.predicted_speedup(alpha, K, costs.c) for K in Ks]
        with_r = [benchmark.predicted_speedup(alpha, K, costs.c, costs.r(K)) for K in Ks]
        even = {K: benchmark.break_even_alpha(K, costs.c, costs.r(K)) for K in Ks}
        never = [K for K in Ks if even[K] is None]
        wins = [K for K in Ks if even[K] is not None]
        best = max(Ks, key=lambda K: benchmark.predicted_speedup(alpha, K, costs.c, costs.r(K)))
        text = (f"- **{label}, r = {span(rs)}** and c = {costs.c:.3f} ({names[0]} step / {names[1]} step). "
                f"At α = {alpha:g}, Leviathan's formula (r = 1) predicts {span(leviathan)}×; with the measured r "
                f"the prediction is {span(with_r)}× (best at K = {best}).")
        if wins:
            text += f" The pair breaks even at α = {span([even[K] for K in wins])} for K = {', '.join(map(str, wins))}"
            text += f", and never for K = {', '.join(map(str, never))}." if never else "."
        else:
            text += " No α breaks even at any K: even at α = 1 a round costs more target steps than it writes tokens."
        lines.append(textwrap.fill(text, width=116, subsequent_indent="  ", break_on_hyphens=False))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------------
# The exactness table: the statistical test's own runs
# ------------------------------------------------------------------------------------------------------------


RULES = {  # the wrong rules of tests/test_speculative_exactness.py, in words; others are named by their key
    "a_resample_from_target": "on a rejection, resample from q instead of (q − p)₊",
    "b_argmax_draft_full_p_ratio": "draft the argmax but put the draft's full p in the ratio",
    "c_target_row_off_by_one": "compare against the target row one position off",
}


def rule_description(rule):
    """RULES[rule], or the key in words: 'd_keep_any_lookup' -> 'keep any lookup'."""
    return RULES.get(rule, " ".join(rule.split("_")[1:] if re.match(r"[a-z]_", rule) else rule.split("_")))


def exactness_table():
    """Markdown: the total variation of the correct sampler for each K of the test, and of each wrong rule,
    beside the bound each must stay under (correct) or exceed (wrong), from the test's own functions."""
    import test_speculative_exactness as exactness
    from _pytest.monkeypatch import MonkeyPatch

    correct = [exactness.speculative_tv(K, n_samples=exactness.N_SAMPLES, seed=100 + K) for K in (1, 2, 3, 4, 7)]
    lines = ["| rule | total variation | bound |", "| --- | --- | --- |",
             f"| speculative, K = 1, 2, 3, 4, 7 (correct) | {span([tv for tv, _ in correct], '{:.3f}')} | "
             f"{span([bound for _, bound in correct], '{:.3f}')} |"]
    import sampling

    for rule in sorted(exactness.WRONG_RULES):
        *owner, name, wrong = exactness.WRONG_RULES[rule]  # (module or class, attribute, wrong version)
        with MonkeyPatch.context() as patch:
            patch.setattr(owner[0] if owner else sampling, name, wrong)
            tv, bound = exactness.speculative_tv(K=2, n_samples=exactness.WRONG_RULE_SAMPLES, seed=3)
        lines.append(f"| wrong: {rule_description(rule)} | {tv:.3f} | {bound:.3f} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------------
# The sample run
# ------------------------------------------------------------------------------------------------------------


def sample_run(seed, tokenizer_dir, n_tokens, sizes=("124M", "355M")):
    """`python main.py` on random weights of the 124M and 355M shapes, saved as Hugging Face folders: its output.

    The folders go to a temporary directory, so the command shown names /tmp/random-124M and /tmp/random-355M.
    """
    from test_main import write_hf_folder  # tests/test_main.py writes the HF folders its tests use

    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as tmp:
        folders = []
        names = [benchmark.model_name(size) for size in sizes]
        if names[0] == names[1]:
            names = [f"{names[0]}-draft", f"{names[1]}-target"]
        for size, name in zip(sizes, names):
            hparams = benchmark.hparams_of(size)
            folders.append(write_hf_folder(Path(tmp) / f"random-{name}", random_params(hparams, rng), hparams,
                                           tokenizer_dir))
        command = [sys.executable, "main.py", "--draft_model_size", str(folders[0]), "--target_model_size",
                   str(folders[1]), "--n_tokens_to_generate", str(n_tokens)]
        help_text = subprocess.run([sys.executable, "main.py", "--help"], cwd=REPO, capture_output=True, text=True,
                                   env={**os.environ, "PAGER": "cat"}).stdout
        if "--color" in help_text:
            command += ["--color", "never"]
        out = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True).stdout
    shown = " ".join(["python"] + command[1:]).replace(str(Path(tmp)), "/tmp")
    return f"```text\n$ {shown}\n{out.replace(str(Path(tmp)), '/tmp').rstrip()}\n```"


# ------------------------------------------------------------------------------------------------------------
# The command line
# ------------------------------------------------------------------------------------------------------------


def main(random_weights=False, draft_model_size="124M", target_model_size="355M", Ks=KS, alpha=ALPHA,
         n_tokens_to_generate=12, repeats=3, prefix_length=32, seed=0, readme="README.md", img_dir="img",
         models_dir="models", dry_run=False, sample_run_tokens=40, drafters="model,lookup,staged",
         drafter_Ks=(4, "auto"), trees="2,1,1", sample_run_sizes=("124M", "355M"), exactness=True):
    """Regenerate the README's numbers, tables and plots (see the module docstring) from one run.

    Args:
        random_weights: random weights of the real shapes (costs only; alpha means nothing) instead of OpenAI's.
        draft_model_size, target_model_size: the pair of the cost table (sizes or folders).
        Ks: the lookaheads of the cost table.
        alpha: the ONE acceptance rate the cost table predicts at.
        n_tokens_to_generate, repeats, prefix_length, seed: as in benchmark.py.
        readme: the file to write into. img_dir: where the plots go.
        dry_run: print the generated parts instead of writing them.
        sample_run_tokens: tokens of the sample run (random weights only).
        drafters, drafter_Ks, trees: the drafter and tree comparisons, as in benchmark.py ("" for none).
        sample_run_sizes: the draft and target shapes of the sample run (random weights only).
        exactness: False leaves the exactness table as it is (it takes the statistical test's ~10 s).
    """
    started = time.time()
    flags = " --random_weights" if random_weights else ""
    command = f"python make_readme_figures.py{flags}"
    with errors_as_one_line():
        Ks = benchmark.as_list(Ks, "Ks", int)
        readme_path = Path(readme)
        text = readme_path.read_text(encoding="utf-8")
    blocks = {}

    import worked_round  # img/worked_round.py

    blocks["worked-round"] = "```text\n" + worked_round.report(worked_round.worked_rounds()) + "\n```"
    if exactness:
        blocks["exactness-table"] = exactness_table()
    if not dry_run:
        worked_round.main(img_dir)

    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet):  # benchmark.py's own tables: the README gets markdown instead
        results = benchmark.run(draft_model_size=draft_model_size, target_model_size=target_model_size, Ks=Ks,
                                n_tokens_to_generate=n_tokens_to_generate, seed=seed, random_weights=random_weights,
                                alphas=sorted({*benchmark.DEFAULT_ALPHAS, alpha}), prefix_length=prefix_length, repeats=repeats,
                                 models_dir=models_dir, img_dir=img_dir if not dry_run else tempfile.mkdtemp(),
                                drafters=drafters or None, drafter_Ks=drafter_Ks, trees=trees or None)
    names = benchmark.model_name(draft_model_size), benchmark.model_name(target_model_size)
    costs_by_mode = sorted(results["costs"], key=lambda costs: not costs.kv_cache)
    blocks["cost-table"] = cost_table(costs_by_mode, Ks, alpha)
    blocks["cost-summary"] = cost_summary(costs_by_mode, Ks, alpha, names)
    if results["drafter_rows"]:
        blocks["drafter-table"] = benchmark.format_table(results["drafter_rows"], markdown=True)
    if results["tree_rows"]:
        blocks["tree-table"] = benchmark.format_table(results["tree_rows"], markdown=True)

    if random_weights:
        from conftest import models_dir as tokenizer_parent

        blocks["sample-run"] = sample_run(seed + 123, tokenizer_parent() / "124M", sample_run_tokens,
                                          benchmark.as_list(sample_run_sizes, "sample_run_sizes", str))

    minutes = (time.time() - started) / 60
    blocks["machine"] = (f"Made by `{command}` in {minutes:.1f} minutes on {machine_description()}, "
                         f"{time.strftime('%Y-%m-%d', time.gmtime())}; "
                         f"{'random weights of the real shapes' if random_weights else 'OpenAI weights'}.")
    if dry_run:
        for name, content in blocks.items():
            print(f"--- {name}\n{content}\n")
        return
    for name, content in blocks.items():
        text = replace_block(text, name, content, command)
    readme_path.write_text(fix_line_links(text), encoding="utf-8")
    print(f"wrote {readme_path} ({', '.join(blocks)}) in {minutes:.1f} minutes")


if __name__ == "__main__":
    fire.Fire(main)
