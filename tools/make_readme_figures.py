"""Every number, table and plot of README.md and BENCHMARKS.md, from ONE run of ONE command (a tool).

Read the README first (it says what each number means), then the scripts this one runs; nothing here is on
the learner's path.

    python tools/make_readme_figures.py --random_weights            # what the pages show (no OpenAI weights
                                                                    # where this is developed); ~15 minutes
    python tools/make_readme_figures.py                             # OpenAI's 124M and 355M (downloaded first)
    python tools/make_readme_figures.py --random_weights --dry_run  # print the generated parts, write nothing

README.md and BENCHMARKS.md mark each generated part:

    <!-- NAME: begin (python tools/make_readme_figures.py ...) -->
    ...
    <!-- NAME: end -->

and this script replaces what is between the two marks, in whichever of the two files holds them, and nothing
else. The prose around the marks is written by hand and says only what holds whatever a run measures; every
number a run can change is inside a generated part, so the tables, the plots and the sentences that quote
them always come from the same run. The parts, in the order the run makes them (README: the learning path;
BENCHMARKS: the measured tables):

    worked-round      README: tools/worked_round.py's two rounds on the exactness test's Markov tables (and its
                      pictures)
    exactness-table   README: the statistical test's total variations against their bounds
    cost-table        README: c and r with and without the KV cache, the predicted speedup at ONE alpha,
                      break-even alphas; cost-summary: the sentences that read it
    drafter-table     BENCHMARKS: benchmark.py's drafters (model, lookup, staged; fixed K and K=auto), and
                      drafter-summary
    tree-table        BENCHMARKS: token trees against chains that send the target as many rows
    sample-run        README: `python main.py` on random weights of the 124M and 355M shapes, the folders of
                      tools/random_models.py (skipped with real weights: then `python main.py` is the sample run)
    break-even-table  BENCHMARKS: the break-even alpha of each drafter by the cost model, from lookahead.R_TABLE
                      (no timing)
    forward-run       BENCHMARKS: how tools/benchmark_forward.py ran: two processes, OpenBLAS's default threads
                      and one
    forward-table, forward-breakdown, forward-summary, r-table, context-table
                      BENCHMARKS: tools/benchmark_forward.py's measurements (--json), formatted by its own
                      table functions
    peer-speed        BENCHMARKS: Hugging Face transformers for scale (tools/measure_hf_speed.py), when torch is
                      installed
    loading-table     BENCHMARKS: tools/measure_loading.py: peak memory and time of loading each size in both
                      layouts
    lookup-timing, bpe-timing, sampler-timing, design-timing
                      BENCHMARKS: small timings: prompt lookup's index against a full scan, a very long word
                      through encoder.py, the sampler's float64 work, gpt2.py's small design choices
    hf-agreement, unicode-count
                      README and BENCHMARKS: how closely gpt2 matches Hugging Face's fixtures, and how many code
                      points encoder.py and tiktoken encode differently (the installed regex and tiktoken)
    machine           both: which machine and command made the numbers, and when

tools/benchmark_forward.py, tools/measure_loading.py and tools/measure_hf_speed.py run as processes of their
own: OpenBLAS reads its thread count (OPENBLAS_NUM_THREADS) when NumPy loads, so a thread count belongs to a
process, and a load's peak memory must be measured in a fresh one.

It also moves the pages' line links, like [`def _residual`](sampling.py#L549), to the line where the code in
their backticks now is, so that a link never lands on the wrong function after an edit above it.

Numbers from a shared machine move from run to run; that is why they are regenerated together, never patched
one by one. The one exception is --only: it remeasures the named small timings alone (they need no model),
and their marks then name the command that wrote them.
"""

import contextlib
import functools
import importlib.util
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import fire
import numpy as np

# `python tools/make_readme_figures.py` puts tools/ first on the path: put the repository's root there too (the
# modules it measures, and `tools.`), and tests/ (the tests' own helpers, which some parts reuse)
REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import benchmark  # noqa: E402
import drafters  # noqa: E402
import lookahead  # noqa: E402
from gpt2 import HPARAMS, random_params  # noqa: E402
from cli import errors_as_one_line  # noqa: E402
from main import timed  # noqa: E402
from model_fn import logits_to_probs  # noqa: E402
from sampling import _check_probs, _sample  # noqa: E402
from tools import benchmark_forward, worked_round  # noqa: E402
from tools.benchmark_forward import blas_description, blas_threads, machine_description, r_of_m  # noqa: E402
from tools.random_models import write_random_models  # noqa: E402

ALPHA = 0.8  # the one acceptance rate the cost table predicts at
KS = (1, 2, 4, 8)


# ------------------------------------------------------------------------------------------------------------
# Writing into the README
# ------------------------------------------------------------------------------------------------------------


def replace_block(text, name, content, command):
    """text with the part between `<!-- name: begin ... -->` and `<!-- name: end -->` replaced by content.

    The begin mark records the command that wrote the part. A part inside a list item has its marks indented,
    and its content is indented as they are. A missing mark is a ValueError: the README's prose decides where
    a generated part goes, not this script.
    """
    pattern = re.compile(rf"^([ \t]*)<!-- {re.escape(name)}: begin[^>]*-->\n.*?^[ \t]*<!-- {re.escape(name)}: end -->",
                         re.S | re.M)
    if not pattern.search(text):
        raise ValueError(f"README.md has no <!-- {name}: begin --> ... <!-- {name}: end --> marks: add them where "
                         f"the part should go")
    block = f"<!-- {name}: begin ({command}) -->\n{content.rstrip()}\n<!-- {name}: end -->"
    return pattern.sub(lambda match: textwrap.indent(block, match.group(1)), text, count=1)


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
                      f"{lookahead.predicted_speedup(alpha, K, c):.2f}× / {lookahead.predicted_speedup(alpha, K, c, r):.2f}×",
                      fmt_alpha(lookahead.break_even_alpha(K, c, r))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def span(values, fmt="{:.2f}"):
    """'0.60–0.84' (or '0.60' when all are equal), of the values that are not None."""
    values = [v for v in values if v is not None]
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return low if low == high else f"{low}–{high}"


def wrap(text):
    """text as the README's lines of at most 116 characters; a bullet's next lines indented under its text.

    A code span (`...`) is never split, so no line can start with a "+ " or "- " from inside one (markdown
    would read it as a list): wrap('`"!" + c`') keeps '`"!" + c`' whole.
    """
    indent = "  " if text.startswith("- ") else ""
    whole = re.sub(r"`[^`]*`", lambda code: code.group(0).replace(" ", "\0"), text)  # NUL: a space not to break at
    return textwrap.fill(whole, width=116, subsequent_indent=indent, break_on_hyphens=False,
                         break_long_words=False).replace("\0", " ")


def cost_summary(costs_by_mode, Ks, alpha, names):
    """The sentences that read the cost table, with its numbers."""
    cache, nocache = sorted(costs_by_mode, key=lambda costs: not costs.kv_cache)
    lines = []
    for costs, label in ((cache, "With the cache"), (nocache, "Without the cache")):
        rs = [costs.r(K) for K in Ks]
        leviathan = [lookahead.predicted_speedup(alpha, K, costs.c) for K in Ks]
        with_r = [lookahead.predicted_speedup(alpha, K, costs.c, costs.r(K)) for K in Ks]
        even = {K: lookahead.break_even_alpha(K, costs.c, costs.r(K)) for K in Ks}
        never = [K for K in Ks if even[K] is None]
        wins = [K for K in Ks if even[K] is not None]
        best = max(Ks, key=lambda K: lookahead.predicted_speedup(alpha, K, costs.c, costs.r(K)))
        text = (f"- **{label}, r = {span(rs)}** and c = {costs.c:.3f} ({names[0]} step / {names[1]} step). "
                f"At α = {alpha:g}, Leviathan's formula (r = 1) predicts {span(leviathan)}×; with the measured r "
                f"the prediction is {span(with_r)}× (best at K = {best}).")
        if wins:
            text += f" The pair breaks even at α = {span([even[K] for K in wins])} for K = {', '.join(map(str, wins))}"
            text += f", and never for K = {', '.join(map(str, never))}." if never else "."
        else:
            text += " No α breaks even at any K: even at α = 1 a round costs more target steps than it writes tokens."
        lines.append(wrap(text))
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
    """`python main.py` on random weights of the 124M and 355M shapes, saved as Hugging Face folders by
    tools/random_models.py with the same seed: its output.

    The folders go to a temporary directory, so the command shown names /tmp/random-124M and /tmp/random-355M.
    """
    with tempfile.TemporaryDirectory() as tmp:
        folders = write_random_models(sizes, tmp, seed, tokenizer_dir)
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
# Scripts run as processes of their own
# ------------------------------------------------------------------------------------------------------------


def shown_command(args, env=None):
    """The command as one would type it: shown_command(["tools/benchmark_forward.py", "--sizes", ""],
    {"OPENBLAS_NUM_THREADS": "1"}) == "OPENBLAS_NUM_THREADS=1 python tools/benchmark_forward.py --sizes ''"."""
    return " ".join([f"{name}={value}" for name, value in (env or {}).items()]
                    + ["python", shlex.join(str(arg) for arg in args)])


def run_json_script(args, env=None):
    """What `python *args --json FILE` writes into FILE, run in the repository as a process of its own (its
    output shows as it comes). A process of its own, because OpenBLAS reads OPENBLAS_NUM_THREADS once, when
    NumPy loads. A failure stops this run, naming the command."""
    print(f"\n$ {shown_command(args, env)}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "measured.json"
        done = subprocess.run([sys.executable, *map(str, args), "--json", str(path)], cwd=REPO,
                              env={**os.environ, **(env or {})})
        if done.returncode != 0:
            raise SystemExit(f"`{shown_command(args, env)}` failed (exit status {done.returncode}); its output is "
                             f"above")
        return json.loads(path.read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------------------------
# The speed of the forward pass: benchmark_forward.py, twice
# ------------------------------------------------------------------------------------------------------------


FORWARD_SIZES = "124M,355M,774M,1558M"
CONTEXT_LENGTHS = "16,64,128,256,384,512,640,768,896,1000"
FLOOR_TARGET = 1.2  # the goal: a decoding step at most 1.2x the strict floor
CONTEXT_TARGET = 1.15  # the goal: a step at 1,000 tokens of context at most 1.15x the step at 16


def measure_forward(sizes, no_cache_sizes, context_size, context_lengths, settings):
    """benchmark_forward.py twice, each a process of its own: the sizes (and the context) with OpenBLAS's
    default threads, then the context alone with one thread.

    Returns {"results": [SizeResult], "contexts": {"2 threads": ContextResult, "1 thread": ...},
    "runs": [(the command as typed, the run's description from the JSON)]}.
    """
    flags = [word for name, value in settings.items() for word in (f"--{name}", value)]
    context = ["--context_size", context_size or "None", "--context_lengths", context_lengths]
    commands = [(["tools/benchmark_forward.py", "--sizes", sizes, "--no_cache_sizes", no_cache_sizes, *flags, *context,
                  "--img_dir", "None"], None)]
    if context_size:
        commands.append((["tools/benchmark_forward.py", "--sizes", "", "--no_cache_sizes", "", *context,
                          "--context_rounds", settings["context_rounds"], "--img_dir", "None"],
                         {"OPENBLAS_NUM_THREADS": "1"}))
    forward = {"results": [], "contexts": {}, "runs": []}
    for args, env in commands:
        results, context_result, run = benchmark_forward.from_json(run_json_script(args, env))
        forward["results"] += results
        if context_result is not None:
            label = benchmark_forward.threads_label(run["threads"])
            if label in forward["contexts"]:  # OPENBLAS_NUM_THREADS=1 was set for both runs
                label += f", run {len(forward['runs']) + 1}"
            forward["contexts"][label] = context_result
        forward["runs"].append((shown_command(args, env), run))
    return forward


def forward_run_text(forward):
    """The sentences that say how benchmark_forward.py ran: its commands, threads, minutes and load."""
    lines = []
    for command, run in forward["runs"]:
        start, end = run["load_average"]
        lines.append(wrap(f"- OpenBLAS with {benchmark_forward.threads_label(run['threads'])}, {run['minutes']:.1f} "
                          f"minutes, load average {start:.2f} at the start and {end:.2f} at the end: `{command}`"))
    return "\n".join(lines)


def ratio_text(values, fmt="{:.2f}"):
    """'1.42–2.20×': the span of some ratios."""
    return span(values, fmt) + "×"


def sizes_text(sizes):
    """'124M', '124M and 355M', '124M, 355M and 774M'."""
    return sizes[0] if len(sizes) == 1 else f"{', '.join(sizes[:-1])} and {sizes[-1]}"


def forward_summary(results):
    """The sentences that read the main table and the breakdown, with their numbers."""
    best = {res.size: min(res.sampler_steps) / res.floor for res in results}
    median = [float(np.median(res.sampler_steps)) / res.median_floor for res in results]
    met = [size for size, ratio in best.items() if ratio <= FLOOR_TARGET]
    products = [(res.breakdown["block products"] + res.breakdown["LM head"]) / res.breakdown["sampler step"]
                for res in results]
    product_rates = [rate(res) for res in results for _, rate in benchmark_forward.BREAKDOWN_RATES[:2]]
    sampler_work = [res.breakdown["logits_to_probs"] + res.breakdown["_check_probs + _sample"] for res in results]
    share = max(work / res.breakdown["sampler step"] for work, res in zip(sampler_work, results))
    lines = [f"- The best runs are {ratio_text(list(best.values()))} the strict floor, the median runs "
             f"{ratio_text(median)} the median floor. The goal, at most {FLOOR_TARGET}× the strict floor, "
             + (f"is met for {sizes_text(met)}." if met else "is not met at any size."),
             f"- The matrix products (the blocks' and the LM head's) are {span([100 * p for p in products], '{:.0f}')}% "
             f"of a step and ran at {span([r / 1e9 for r in product_rates], '{:.1f}')} GB/s, against "
             f"{span([max(res.bandwidths) / 1e9 for res in results], '{:.1f}')} GB/s for the best single product.",
             f"- The sampler's own work at temperature 0 (`logits_to_probs`, `_check_probs`, `_sample`) takes "
             f"{span([1e3 * w for w in sampler_work])} ms, at most {share:.1%} of a step."]
    uncached = [res for res in results if res.no_cache]
    if uncached:
        lines.append("- Without the cache a step takes " + "; ".join(
            f"{ratio_text([res.no_cache / min(res.sampler_steps)], '{:.1f}')} the cached one for {res.size} "
            f"({ratio_text([res.picogpt / min(res.sampler_steps)], '{:.1f}')} in picoGPT's setting)"
            for res in uncached) + ".")
    return "\n".join(wrap(line) for line in lines)


def r_summary(results):
    """The sentence that reads the r(m) table."""
    r2 = [r_of_m(res.pass_seconds, statistic)[2] for res in results for statistic in (min, np.median)
          if 2 in res.pass_seconds]
    m_max = max(results[0].pass_seconds)
    r_last = [r_of_m(res.pass_seconds, statistic)[m_max] for res in results for statistic in (min, np.median)]
    return wrap(f"In this run r(2) is {span(r2)} and r({m_max}) is {span(r_last)} (bests and medians of "
                f"{sizes_text([res.size for res in results])}).") if r2 else ""


def context_summary(contexts):
    """The sentence that reads the context table: the ratio at the longest length, for each thread count."""
    ratios, met, missed = [], [], []
    for label, context in contexts.items():
        medians = benchmark_forward.context_medians(context)
        lengths = sorted(medians)
        ratio = medians[lengths[-1]] / medians[lengths[0]]
        ratios.append(f"{ratio:.3f}× with {label}")  # three decimals: 1.151 is above a goal of 1.15
        (met if ratio <= CONTEXT_TARGET else missed).append(label)
    text = (f"The median step at {lengths[-1]} tokens of context over the one at {lengths[0]}: "
            f"{', '.join(ratios)}. The goal is at most {CONTEXT_TARGET}×: ")
    if met and missed:
        return wrap(text + f"met with {' and '.join(met)}, not with {' or '.join(missed)}.")
    return wrap(text + (f"met with {' and '.join(met)}." if met else f"not met with {' or '.join(missed)}."))


def forward_blocks(forward, rounds):
    """The parts from tools/benchmark_forward.py's two runs (rounds: the breakdown's --breakdown_rounds)."""
    results, contexts = forward["results"], forward["contexts"]
    blocks = {"forward-run": forward_run_text(forward)}
    if results:
        blocks["forward-table"] = benchmark_forward.main_table(results, markdown=True)
        blocks["forward-breakdown"] = benchmark_forward.breakdown_table(results, markdown=True, rounds=rounds)
        blocks["forward-summary"] = forward_summary(results)
        blocks["r-table"] = benchmark_forward.r_table(results, markdown=True) + "\n\n" + r_summary(results)
    if contexts:
        blocks["context-table"] = (benchmark_forward.context_table_by_label(contexts, markdown=True) + "\n\n"
                                   + context_summary(contexts))
    return blocks


def plot_forward(forward, img_dir):
    """img_dir/forward_r_of_m.png and forward_ms_per_token_vs_context.png, from the measurements."""
    plt = benchmark_forward.import_pyplot()
    if plt is None:
        return
    if forward["results"]:
        benchmark_forward.plot_r_of_m(plt, forward["results"], Path(img_dir) / "forward_r_of_m.png")
    if forward["contexts"]:
        size = next(iter(forward["contexts"].values())).size
        floor = next((res.floor for res in forward["results"] if res.size == size), None)
        benchmark_forward.plot_context(plt, forward["contexts"], floor,
                                       Path(img_dir) / "forward_ms_per_token_vs_context.png")


# ------------------------------------------------------------------------------------------------------------
# For scale: Hugging Face transformers, when it is installed
# ------------------------------------------------------------------------------------------------------------


PEER_INSTALL = "pip install torch==2.13.0 transformers"


def peer_installed():
    """True when torch and transformers can be imported here (tools/measure_hf_speed.py needs both)."""
    return all(importlib.util.find_spec(name) is not None for name in ("torch", "transformers"))


def peer_block(forward, sizes, settings):
    """tools/measure_hf_speed.py (a process of its own) against this repository's best runs of the same sizes,
    prompt, tokens and threads; or one line saying it was skipped and how to include it."""
    if not peer_installed():
        return wrap(f"The comparison with Hugging Face `transformers` was skipped in this run: torch and "
                    f"transformers are not installed. To include it, `{PEER_INSTALL}` and run the command again.")
    ours = {res.size: min(res.sampler_steps) * 1e3 for res in forward["results"] if res.size in sizes}
    threads = forward["runs"][0][1]["threads"]
    peer = run_json_script(["tools/measure_hf_speed.py", "--sizes", ",".join(ours), "--n_prompt",
                            settings["n_prompt"], "--n_new", settings["n_new"], "--threads", threads])
    lines = [wrap(f"Hugging Face `transformers` {peer['transformers']} on torch {peer['torch']}, CPU, "
                  f"{benchmark_forward.threads_label(peer['threads'])}, greedy with its KV cache, {peer['n_new']} "
                  f"tokens after {peer['n_prompt']}, random weights of the same shapes, the best of {peer['repeats']} "
                  f"runs (`tools/measure_hf_speed.py`), right after this repository's runs above (their best):"), "",
             "| size | transformers, ms/token | this repository, ms/token | transformers / this repository |",
             "| --- | --- | --- | --- |"]
    for size, mine in ours.items():
        theirs = peer["ms_per_token"][size]
        lines.append(f"| {size} | {theirs:.1f} | {mine:.1f} | {theirs / mine:.2f}× |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------------
# Loading weights: tools/measure_loading.py
# ------------------------------------------------------------------------------------------------------------


LAYOUTS = {"TF checkpoint": "OpenAI's TF checkpoint", "HF safetensors": "Hugging Face safetensors"}
LOADING_MEMORY_GOAL = 1.15  # peak resident memory at most 1.15x the weights
LOADING_TIME_GOAL = 2.0  # a load at most 2x the time of reading the file's bytes


def bytes_text(n):
    """Bytes as a person reads them, to 3 significant digits: '6.23 GB', '498 MB', '10.7 kB'."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} bytes"


def loading_table(loads):
    """Markdown: one row per size and layout, then whether the two goals were met, and how far the time goal is
    from what copying the file into fresh memory alone takes (tools/measure_loading.py's fresh_copy)."""
    lines = ["| size | layout | weights | peak resident memory | × the weights | × above an empty Python | load | "
             "`cat` (warm) | load / `cat` | copy into fresh memory | copy / `cat` |", "|" + " --- |" * 11]
    memory_met, time_met = [], []
    for load in loads:
        weights, peak, seconds, cat, copy = (load[key] for key in ("weights", "peak", "seconds", "cat", "fresh_copy"))
        lines.append(f"| {load['size']} | {LAYOUTS.get(load['layout'], load['layout'])} | {bytes_text(weights)} | "
                     f"{bytes_text(peak)} | {peak / weights:.2f}× | {(peak - load['empty_python']) / weights:.2f}× | "
                     f"{seconds:.3g} s | {cat:.3g} s | {seconds / cat:.1f}× | {copy:.3g} s | {copy / cat:.1f}× |")
        memory_met.append(peak / weights <= LOADING_MEMORY_GOAL)
        time_met.append(seconds / cat <= LOADING_TIME_GOAL)
    copies = [load["fresh_copy"] / load["cat"] for load in loads]
    lines += ["", wrap(f"The memory goal (at most {LOADING_MEMORY_GOAL}× the weights) is met by {sum(memory_met)} "
                       f"of these {len(loads)} loads; the time goal (at most {LOADING_TIME_GOAL:g}× reading the file) "
                       f"by {sum(time_met)} of {len(loads)}. Copying the file's bytes into one fresh array, with no "
                       f"check and no reordering, took {span(copies, '{:.1f}')}× the `cat` by itself.")]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------------
# When each drafter pays off by the cost model: lookahead.R_TABLE, no measurement
# ------------------------------------------------------------------------------------------------------------


BREAK_EVEN_KS = (1, 2, 3, 4, 7, 15)
BREAK_EVEN_PAIRS = (("124M", "355M"), ("124M", "1558M"))


def n_weights(hparams):
    """The weights of a GPT-2 of these shapes, counted as create_model_fn's `n_params` counts them (wte once:
    the LM head is tied to it). Per block 12 n_embd² + 13 n_embd: c_attn, attn's c_proj, c_fc and mlp's c_proj
    hold 3 + 1 + 4 + 4 = 12 n_embd² weights and 3 + 1 + 4 + 1 = 9 n_embd biases, ln_1 and ln_2 4 n_embd.

    n_weights(HPARAMS["124M"]) == 50257·768 + 1024·768 + 2·768 + 12·(12·768² + 13·768) == 124_439_808.
    """
    n_embd = hparams["n_embd"]
    per_block = 12 * n_embd**2 + 13 * n_embd
    return (hparams["n_vocab"] + hparams["n_ctx"]) * n_embd + 2 * n_embd + hparams["n_layer"] * per_block


def break_even_table(r_table=None, Ks=BREAK_EVEN_KS, pairs=BREAK_EVEN_PAIRS):
    """The break-even α of each drafter for each k, by the cost model with r(m) from lookahead.R_TABLE (the
    same lookup AutoK does: r(m) = r_table[min(m, len(r_table)) - 1]) and c as AutoK estimates it: 0 for
    prompt lookup (its `cost`), the ratio of the models' weights for a GPT-2 draft. No timing: the same
    every run, and tests/test_readme.py recomputes it."""
    r_table = list(lookahead.R_TABLE if r_table is None else r_table)

    def r(m):
        return r_table[min(m, len(r_table)) - 1]

    rows = [("lookup", drafters.PromptLookup.cost)]
    rows += [(f"{draft} drafting for {target}", n_weights(HPARAMS[draft]) / n_weights(HPARAMS[target]))
             for draft, target in pairs]
    even = {name: {K: lookahead.break_even_alpha(K, c, r(K + 1)) for K in Ks} for name, c in rows}
    lines = [wrap(f"With r(m) as `lookahead.R_TABLE` holds it (medians measured on 2-core machines; 124M, with the cache: "
                  f"r(2) = {r(2):.2f}, r(8) = {r(8):.2f}, r(16) = {r(16):.2f}), the α needed to break even is:"), "",
             "| drafter | c | " + " | ".join(f"k = {K}" for K in Ks) + " |", "|" + " --- |" * (len(Ks) + 2)]
    for name, c in rows:
        lines.append(f"| {name} | {f'{c:.3f}' if c else '0'} | " + " | ".join(fmt_alpha(even[name][K]) for K in Ks)
                     + " |")
    lines += ["", "(\"never\": no α ≤ 1 breaks even; c is the ratio of the models' weights, as K=\"auto\" "
                  "estimates it.)"]
    reading = []
    if 1 in Ks and all(even[name][1] is None for name, _ in rows):
        reading.append(f"a one-guess round never pays (it writes two tokens at best and costs at least r(2) = "
                       f"{r(2):.2f} steps)")
    for name, _ in rows:
        wins = {K: alpha for K, alpha in even[name].items() if alpha is not None}
        if wins:
            K = min(wins, key=wins.get)
            reading.append(f"{'a free lookup' if name == 'lookup' else name} needs α ≥ {wins[K]:.2f} at best "
                           f"(k = {K})")
        else:
            reading.append(f"{name} never pays")
    lines += ["", wrap("So with a KV cache, by this model, " + "; ".join(reading) + ".")]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------------
# Small timings the prose would otherwise quote from memory
# ------------------------------------------------------------------------------------------------------------


def best_seconds(fns, repeats):
    """The fastest of `repeats` calls of each of fns, called in turns so that noise hits them alike (and
    noise only ever adds time): best_seconds([f, g], 3) times f, g, f, g, f, g and returns [best f, best g]."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], timed(fn)[1])
    return best


def duration_text(seconds):
    """'1.4 µs' under a millisecond, else '24.0 ms'."""
    return f"{seconds * 1e6:.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:.1f} ms"


def lookup_timing(n_tokens=1000, alphabet=50, repeats=5, seed=0):
    """(seconds per call with PromptLookup's index, seconds per call with a Python full scan).

    One pass calls each once per new token of a random text of an `alphabet`-token vocabulary, up to n_tokens
    tokens, as a generation does: n_tokens calls, on prefixes cut before the clock starts (so no call pays for
    copying its input), the index with a fresh PromptLookup each pass (it grows with the text). Each is the
    best of `repeats` passes, the two taken in turns (best_seconds), divided by the calls in a pass.
    """
    from test_drafters import brute_force_lookup  # tests/test_drafters.py's full scan, the index's reference

    x = np.random.default_rng(seed).integers(0, alphabet, n_tokens).tolist()
    prefixes = [x[:n] for n in range(1, n_tokens + 1)]

    def indexed():
        lookup = drafters.prompt_lookup()
        for prefix in prefixes:
            lookup.lookup(prefix, 4)

    def scanned():
        for prefix in prefixes:
            brute_force_lookup(prefix, 4, 3, 1)

    return [seconds / n_tokens for seconds in best_seconds([indexed, scanned], repeats)]


def lookup_text(forward, repeats=5):
    """The sentence on prompt lookup's cost, beside a 124M step of the same run (if it measured 124M)."""
    indexed, scanned = lookup_timing(repeats=repeats)
    text = (f"Called once per new token up to 1,000 tokens (a 50-token alphabet), the best of {repeats} passes of "
            f"1,000 calls: a lookup took {duration_text(indexed)} per call with the index and "
            f"{duration_text(scanned)} with a Python full scan ({scanned / indexed:.0f}× as long)")
    step = next((min(res.sampler_steps) for res in forward["results"] if res.size == "124M"), None)
    return wrap(text + (f"; a 124M target step took {step * 1e3:.1f} ms in the same run." if step else "."))


def bpe_text(tokenizer_dir, n_letters=100_000, seed=0):
    """The sentence on encoding one very long word with encoder.py (and tiktoken, when it is installed)."""
    from encoder import get_encoder

    word = "".join(np.random.default_rng(seed).choice(list("abcdefghijklmnopqrstuvwxyz"), size=n_letters))
    ours = timed(lambda: get_encoder(tokenizer_dir.name, tokenizer_dir.parent).encode(word))[1]
    text = f"a word of {n_letters:,} random letters encodes in {ours:.2f} s"
    if importlib.util.find_spec("tiktoken") is not None:
        from test_encoder import tiktoken_gpt2

        reference = tiktoken_gpt2(tokenizer_dir)
        text += f" (tiktoken: {timed(lambda: reference.encode(word, disallowed_special=()))[1]:.3f} s)"
    return wrap(f"In this run {text}, reading the vocabulary included.")


TIMED_SIZE = "124M"  # the shapes of the small timings below


SAMPLER_CASES = {  # the settings the sampler timing compares, by what the README calls them
    "greedy (temperature 0)": dict(temperature=0),
    "temperature 1": dict(temperature=1.0),
    "temperature 1, top_k 50, top_p 0.9": dict(temperature=1.0, top_k=50, top_p=0.9),
    "temperature 1, top_p 0.9": dict(temperature=1.0, top_p=0.9),
}


def sampler_table(repeats=200, seed=0):
    """Markdown: ms of `logits_to_probs` + `_check_probs` + `_sample` on one row of random logits, per setting."""
    rng = np.random.default_rng(seed)
    n_vocab = HPARAMS[TIMED_SIZE]["n_vocab"]
    logits = rng.standard_normal((1, n_vocab), dtype=np.float32)  # [1, n_vocab]

    def sample(settings):
        return _sample(_check_probs(logits_to_probs(logits, **settings), 1, n_vocab, "the model")[0], rng)

    lines = [f"| one row of {n_vocab:,} standard-normal logits, best of {repeats} | ms |", "| --- | --- |"]
    probs = np.full(n_vocab, 1 / n_vocab)  # float64 [n_vocab]
    cases = {f"`logits_to_probs` + `_check_probs` + `_sample`, {label}": functools.partial(sample, settings)
             for label, settings in SAMPLER_CASES.items()}
    cases[f"`np.cumsum` over the {n_vocab:,} float64 probabilities alone"] = lambda: np.cumsum(probs)
    for label, seconds in zip(cases, best_seconds(list(cases.values()), repeats)):
        lines.append(f"| {label} | {seconds * 1e3:.3f} |")
    return "\n".join(lines)


def design_table(repeats=200, product_repeats=10, seed=0):
    """Markdown: the small choices gpt2.py makes, each timed against the other way, on TIMED_SIZE's shapes.

    The products go through all the block matrices of a random TIMED_SIZE model (4 per block, as a decoding
    step does: far more bytes than any CPU cache holds), the elementwise work on one row.
    """
    rng = np.random.default_rng(seed)
    params = random_params(HPARAMS[TIMED_SIZE], rng)  # block matrices column-major, as the loaders give them
    n_embd = params["wte"].shape[1]
    matrices = benchmark_forward.block_matrices(params)
    row_major = [np.ascontiguousarray(m) for m in matrices]
    rows = {n: rng.standard_normal((1, n), dtype=np.float32) for n in (n_embd, 4 * n_embd)}  # [1, n_in]
    rows64 = {n: row.astype(np.float64) for n, row in rows.items()}
    rows8 = {n: rng.standard_normal((8, n), dtype=np.float32) for n in rows}  # [8, n_in]: a verification pass
    x, row = rows[4 * n_embd], rows[n_embd]  # x: what GELU sees, [1, 4 n_embd]

    def products(by_size, weights):
        return lambda: [by_size[m.shape[0]] @ m for m in weights]

    def left_products(by_size, weights):  # gpt2.linear's way: the big matrix on the left
        return lambda: [(m.T @ by_size[m.shape[0]].T).T for m in weights]

    cases = [  # (what, gpt2.py's way, its function, the other way, its function, calls to time)
        (f"GELU's cube of a [1, {4 * n_embd}] float32 row", "`x * x * x`", lambda: x * x * x, "`x**3`",
         lambda: x**3, repeats),
        (f"one row through each of the {len(matrices)} block matrices", "column-major (`gpt2.column_major`)",
         products(rows, matrices), "row-major", products(rows, row_major), product_repeats),
        (f"8 rows through each of the {len(matrices)} block matrices (`gpt2.linear`)", "`(w.T @ x.T).T`",
         left_products(rows8, matrices), "`x @ w`", products(rows8, matrices), product_repeats),
        ("one row through the same products, after it met a float64 scalar", "float32 row", products(rows, matrices),
         "float64 row (every matrix converted each time)", products(rows64, matrices), product_repeats),
        (f"the mean of a [1, {n_embd}] row (`layer_norm`)", "`np.add.reduce(x, axis=-1, keepdims=True) / n`",
         lambda: np.add.reduce(row, axis=-1, keepdims=True) / n_embd, "`np.mean(x, axis=-1, keepdims=True)`",
         lambda: np.mean(row, axis=-1, keepdims=True), repeats),
    ]
    lines = [f"| {TIMED_SIZE}'s shapes, best of {repeats} ({product_repeats} for the products), in turns | "
             f"gpt2.py's way | time | the other way | time | other / gpt2.py's |", "|" + " --- |" * 6]
    for what, ours_label, ours, other_label, other, calls in cases:
        mine, theirs = best_seconds([ours, other], calls)
        lines.append(f"| {what} | {ours_label} | {duration_text(mine)} | {other_label} | {duration_text(theirs)} | "
                     f"{theirs / mine:.2f}× |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------------
# How closely the peers agree: numbers the tests check, quoted from this run
# ------------------------------------------------------------------------------------------------------------


def scientific(x, digits=1):
    """scientific(3.1e-06) == '3.1e-6', scientific(1e-4, 0) == '1e-4': as a person writes it."""
    mantissa, exponent = f"{x:.{digits}e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def hf_agreement_text():
    """The sentence on gpt2 against Hugging Face's logits in tests/fixtures: the largest difference over every
    fixture and input, and the least that resetting one parameter array moves the logits (the test's teeth)."""
    import test_gpt2
    from gpt2 import gpt2

    worst, least = 0.0, float("inf")
    for name in test_gpt2.MODEL_NAMES:
        hparams, params, cases = test_gpt2.load_fixture(name)
        for ids, hf_logits, _ in cases:
            worst = max(worst, test_gpt2.max_abs_diff(gpt2(ids, **params, n_head=hparams["n_head"]), hf_logits))
        ids, hf_logits, _ = cases[-1]
        flat = dict(test_gpt2.leaves(params))
        for key, value in flat.items():
            reset = test_gpt2.unflatten({**flat, key: test_gpt2.reset_to_hf_initial_value(key, value)})
            least = min(least, test_gpt2.max_abs_diff(gpt2(ids, **reset, n_head=hparams["n_head"]), hf_logits))
    return wrap(f"In this run `gpt2` matches within {scientific(worst)} (the bound is "
                f"{scientific(test_gpt2.HF_TOLERANCE, 0)}), and resetting any single parameter array to what HF's "
                f"initialisation leaves (0, or 1 for a layer-norm gain) moves the logits by at least {least:.2f}.")


def unicode_text(tokenizer_dir, last=0x31FFF):
    """The sentence on how many code points encoder.py (the `regex` package's Unicode tables) and tiktoken
    encode differently, written as "!" + c + "'s"; or why it was not counted."""
    if importlib.util.find_spec("tiktoken") is None:
        return "(tiktoken is not installed, so this run did not count them: `pip install -r requirements-dev.txt`.)"
    import regex
    import tiktoken
    from encoder import get_encoder
    from test_encoder import tiktoken_gpt2

    ours, reference = get_encoder(tokenizer_dir.name, tokenizer_dir.parent), tiktoken_gpt2(tokenizer_dir)
    texts = ["!" + chr(c) + "'s" for c in range(0x80, last + 1) if not 0xD800 <= c <= 0xDFFF]  # no surrogates
    differ = sum(ours.encode(text) != reference.encode(text, disallowed_special=()) for text in texts)
    return wrap(f"With `regex` {regex.__version__} and tiktoken {tiktoken.__version__}, {differ:,} code points "
                f"from U+0080 to U+{last:04X} give different ids when written as `\"!\" + c + \"'s\"`.")


def drafter_summary(drafter_rows):
    """The sentences that read the drafter table: the measured speedups by cache setting and K, and lookup's."""
    header, *rows = drafter_rows
    column = {name: i for i, name in enumerate(header)}

    def speedups(selected):
        return [float(row[column["speedup (measured)"]].rstrip("x×")) for row in selected]

    lines = []
    for cache, label in (("on", "With the cache"), ("off", "Without the cache")):
        mine = [row for row in rows if row[column["cache"]] == cache]
        Ks = list(dict.fromkeys(row[column["K"]] for row in mine))
        if not mine:
            continue
        parts = [f"{span(speedups([row for row in mine if row[column['K']] == K]))}× at K = {K}" for K in Ks]
        lookups = [row for row in mine if row[column["drafter"]] == "lookup"]
        text = f"- **{label}**, the measured speedups over the drafters and prompts: " + ", ".join(parts)
        text += f"; lookup's alone {span(speedups(lookups))}×." if lookups else "."
        lines.append(wrap(text))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------------
# The command line
# ------------------------------------------------------------------------------------------------------------


PAGES = ("README.md", "BENCHMARKS.md")  # the files with generated parts
SMALL_PARTS = {  # the parts that need no model run: name -> f(forward's measurements, OpenAI's 124M folder)
    "lookup-timing": lambda forward, tokenizer_dir: lookup_text(forward),
    "bpe-timing": lambda forward, tokenizer_dir: bpe_text(tokenizer_dir),
    "sampler-timing": lambda forward, tokenizer_dir: sampler_table(),
    "design-timing": lambda forward, tokenizer_dir: design_table(),
    "hf-agreement": lambda forward, tokenizer_dir: hf_agreement_text(),
    "unicode-count": lambda forward, tokenizer_dir: unicode_text(tokenizer_dir),
}


def write_parts(texts, blocks, command):
    """{page: text} with each block between its marks, in every page that has them (the machine part is in
    both). A block that no page marks is a ValueError: the pages' prose decides where a part goes."""
    texts = dict(texts)
    for name, content in blocks.items():
        marked = [page for page, text in texts.items() if f"<!-- {name}: begin" in text]
        if not marked:
            raise ValueError(f"no page of {', '.join(map(str, texts))} has <!-- {name}: begin --> ... "
                             f"<!-- {name}: end --> marks: add them where the part should go")
        for page in marked:
            texts[page] = replace_block(texts[page], name, content, command)
    return texts


def write_or_print(texts, blocks, command, dry_run, started):
    """Print the parts (dry_run), or write them into the pages and move the pages' line links."""
    minutes = (time.time() - started) / 60
    if dry_run:
        for name, content in blocks.items():
            print(f"--- {name}\n{content}\n")
        return
    for page, text in write_parts(texts, blocks, command).items():
        page.write_text(fix_line_links(text), encoding="utf-8")
    print(f"wrote {', '.join(map(str, texts))} ({', '.join(blocks)}) in {minutes:.1f} minutes")


def main(random_weights=False, draft_model_size="124M", target_model_size="355M", Ks=KS, alpha=ALPHA,
         n_tokens_to_generate=12, repeats=3, prefix_length=32, seed=0, pages=PAGES, img_dir="img",
         models_dir="models", dry_run=False, sample_run_tokens=40, drafters="model,lookup,staged",
         drafter_Ks=(4, "auto"), trees="2,1,1", sample_run_sizes=("124M", "355M"), exactness=True,
         forward_sizes=FORWARD_SIZES, forward_no_cache_sizes="124M", forward_repeats=7, forward_n_new=32,
         forward_breakdown_rounds=15, forward_r_repeats=5, forward_context_size="124M",
         forward_context_lengths=CONTEXT_LENGTHS, forward_context_rounds=6, peer_sizes="124M,355M",
         loading_sizes="124M,1558M", loading_repeats=2, timings=True, agreement=True, only=None):
    """Regenerate the numbers, tables and plots of README.md and BENCHMARKS.md (see the module docstring) from one run.

    Args:
        random_weights: random weights of the real shapes (costs only; alpha means nothing) instead of OpenAI's.
        draft_model_size, target_model_size: the pair of the cost table (sizes or folders).
        Ks: the lookaheads of the cost table.
        alpha: the ONE acceptance rate the cost table predicts at.
        n_tokens_to_generate, repeats, prefix_length, seed: as in benchmark.py.
        pages: the files to write into (each part goes where its marks are). img_dir: where the plots go.
        dry_run: print the generated parts instead of writing them.
        sample_run_tokens: tokens of the sample run (random weights only).
        drafters, drafter_Ks, trees: the drafter and tree comparisons, as in benchmark.py ("" for none).
        sample_run_sizes: the draft and target shapes of the sample run (random weights only).
        exactness: False leaves the exactness table as it is (it takes the statistical test's ~10 s).
        forward_sizes, forward_no_cache_sizes, forward_repeats, forward_n_new, forward_breakdown_rounds,
            forward_r_repeats, forward_context_size, forward_context_lengths, forward_context_rounds:
            benchmark_forward.py's --sizes, --no_cache_sizes, --repeats, ... (its own defaults, for all four
            sizes: some minutes on a quiet 2-core machine, much longer on a busy one; sizes "" and context_size
            None leave the forward pass's parts as they are).
        peer_sizes: the sizes Hugging Face transformers decodes for scale, when torch and transformers are
            installed (of those benchmark_forward.py measured).
        loading_sizes, loading_repeats: tools/measure_loading.py's --sizes and --repeats ("": leave the
            loading table as it is).
        timings: False leaves the small timings (prompt lookup, the BPE, the sampler, gpt2.py's details) as
            they are.
        agreement: False leaves the agreement with the peers (HF's logits, tiktoken's Unicode) as it is.
        only: some of the small parts alone, comma-separated (of SMALL_PARTS: lookup-timing, bpe-timing,
            sampler-timing, design-timing, hf-agreement, unicode-count), each marked as measured alone.
    """
    started = time.time()
    flags = " --random_weights" if random_weights else ""
    command = f"python tools/make_readme_figures.py{flags}"
    from conftest import models_dir as tokenizer_parent  # $GPT2_MODELS_DIR, else models/: OpenAI's 124M files

    with errors_as_one_line():
        Ks = benchmark.as_list(Ks, "Ks", int)
        texts = {REPO / page: (REPO / page).read_text(encoding="utf-8") for page in benchmark.as_list(pages, "pages", str)}
        if only:
            names = benchmark.as_list(only.split(",") if isinstance(only, str) else only, "only", str)
            unknown = [name for name in names if name not in SMALL_PARTS]
            if unknown:
                raise ValueError(f"--only takes some of {', '.join(SMALL_PARTS)}; got {', '.join(unknown)}")
    if only:
        command = f"python tools/make_readme_figures.py --only {','.join(names)}"
        note = (f"(Measured alone, not in the run the other numbers come from: `{command}` on "
                f"{machine_description()}, {time.strftime('%Y-%m-%d', time.gmtime())}.)")
        blocks = {name: SMALL_PARTS[name]({"results": []}, tokenizer_parent() / "124M") + "\n\n" + wrap(note)
                  for name in names}
        return write_or_print(texts, blocks, command, dry_run, started)
    blocks = {}

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
        blocks["drafter-summary"] = drafter_summary(results["drafter_rows"])
    if results["tree_rows"]:
        blocks["tree-table"] = benchmark.format_table(results["tree_rows"], markdown=True)

    if random_weights:
        blocks["sample-run"] = sample_run(seed + 123, tokenizer_parent() / "124M", sample_run_tokens,
                                          benchmark.as_list(sample_run_sizes, "sample_run_sizes", str))
    blocks["break-even-table"] = break_even_table()

    forward = {"results": [], "contexts": {}, "runs": []}
    forward_sizes = ",".join(benchmark_forward.parse_list(forward_sizes)) if forward_sizes else ""
    if forward_sizes or forward_context_size:
        settings = {"repeats": forward_repeats, "n_new": forward_n_new, "breakdown_rounds": forward_breakdown_rounds,
                    "r_repeats": forward_r_repeats, "context_rounds": forward_context_rounds}
        no_cache = ",".join(benchmark_forward.parse_list(forward_no_cache_sizes)) if forward_no_cache_sizes else ""
        lengths = ",".join(map(str, benchmark_forward.parse_list(forward_context_lengths, int)))
        forward = measure_forward(forward_sizes, no_cache, forward_context_size, lengths, settings)
        blocks.update(forward_blocks(forward, forward_breakdown_rounds))
        if forward["results"]:
            n_prompt = forward["runs"][0][1]["settings"]["n_prompt"]
            blocks["peer-speed"] = peer_block(forward, benchmark_forward.parse_list(peer_sizes),
                                              {"n_prompt": n_prompt, "n_new": forward_n_new})
        if not dry_run:
            plot_forward(forward, img_dir)
    if loading_sizes:
        with tempfile.TemporaryDirectory() as tmp:
            loads = run_json_script(["tools/measure_loading.py", "--sizes",
                                     ",".join(benchmark_forward.parse_list(loading_sizes)), "--repeats",
                                     loading_repeats, "--folder", Path(tmp) / "gpt2-load"])["loads"]
        blocks["loading-table"] = loading_table(loads)
    for name, part in SMALL_PARTS.items():
        if timings if name.endswith("-timing") else agreement:
            blocks[name] = part(forward, tokenizer_parent() / "124M")

    minutes = (time.time() - started) / 60
    blocks["machine"] = (f"Made by `{command}` in {minutes:.1f} minutes on {machine_description()}, "
                         f"{blas_description()} ({benchmark_forward.threads_label(blas_threads())} by default), "
                         f"{time.strftime('%Y-%m-%d', time.gmtime())}; "
                         f"{'random weights of the real shapes' if random_weights else 'OpenAI weights'}.")
    return write_or_print(texts, blocks, command, dry_run, started)


if __name__ == "__main__":
    fire.Fire(main)
