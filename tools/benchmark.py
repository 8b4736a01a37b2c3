"""When does speculative sampling pay off? Acceptance, costs and speedup for a draft/target pair and each K.

A tool, not on the reading path: read lookahead.py (the cost model it measures: c, r and the expected tokens
per round) and the README's "When does it pay off on a CPU?" first. Its drafter and tree comparison is
tools/compare_drafters.py, its plots tools/benchmark_plots.py.

    python tools/benchmark.py                                    # 124M drafts for 355M, K = 1..8, real weights
    python tools/benchmark.py --kv_cache False                   # the same, picoGPT's way (no cache)
    python tools/benchmark.py --random_weights                   # no checkpoint needed: cost figures only
    python tools/benchmark.py --random_weights --target_model_size 1558M --Ks 1,2,4,8

What it prints, for each K: alpha, the measured speedup (wall time, and target passes: LMFlow's "gamma" table,
what speculative sampling would give if draft steps were free and r were 1), and the speedup predicted by
Leviathan et al.'s formula (r = 1) and by the same formula with the measured r, (1 - alpha^(K+1)) /
((1 - alpha) (c K + r)). With the KV cache a 1-token step is memory-bound and r(K + 1) is what this machine
measures; without it (`--kv_cache False`) every pass recomputes the whole sequence anyway, so a verification
pass's K extra rows barely show and speculative sampling wins more. Both tables are worth seeing.

How: c and r are timed through the model functions the samplers call (model_fn.create_model_fn), after a prefix
of --prefix_length tokens, each the fastest of --repeats calls, in turns (noise only ever adds time, and turns
make it hit both alike). Then each sampler runs over the prompts with fresh model functions after an untimed
warm-up: autoregressive sampling once, speculative sampling once per K. Run it on a quiet machine: OpenBLAS's
threads spin while they wait for each other, so another busy process slows a step unevenly
(OPENBLAS_NUM_THREADS=1 gives steadier numbers on a busy one).

--random_weights: random weights of the real shapes, for when no checkpoint is present. Their acceptance rate
means nothing (about 0 at temperature 0); the costs are real. So instead of a measured alpha the table gives
the predicted speedup for the alphas of --alphas, and the alpha at which speculative sampling breaks even.
--drafters model,lookup,staged and --trees "2,1,1;2,2,1" add tables of drafters and trees on prompts that
invite copying and prompts that do not (tools/compare_drafters.py says what they hold).

Plots go into --img_dir if matplotlib is installed (`pip install -r requirements/plots.txt`): speedup and alpha
against K, ms per token against K, and for --random_weights the predicted speedup and ms per token for each
alpha (drawn by tools/benchmark_plots.py; `run` names the files). By default into plots/, made if need be, not
img/: the README's figures there are the figures command's (tools/make_readme_figures.py), as its text is.
"""

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's root: python tools/...

import speed.openblas_env  # noqa: E402,F401  before NumPy loads OpenBLAS, which reads its settings then

import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from speed.layouts import for_model  # noqa: E402
from loaders.random_weights import check_memory_for, random_params

from loaders.download import HPARAMS
from lookahead import AUTO_K_MAX, break_even_alpha, predicted_speedup
from command_line.flags import MAX_SEED, as_bool, as_text, as_whole_number, check_model_names, check_models_dir, check_sampling_flags
from command_line.flags import as_typed_text, check_whole_number, errors_as_one_line
from command_line.scripts import as_fractions, as_whole_numbers, check_output_folder, run_script
from records import timed
from utils import check_same_tokenizer, download_and_load
from records import AutoregressiveStats, SpeculativeStats
from sampling import autoregressive_sampling, speculative_sampling
from model_fn import create_model_fn
from loaders.download import MODEL_SIZES
from loaders.hf_folder import read_hf_hparams
from loaders.weights import read_openai_hparams
from loaders.hub import DISTILGPT2_HPARAMS, HUB_MODELS
from tools.benchmark_plots import import_pyplot, plot_drafters, plot_measured, plot_random
from tools.compare_drafters import (
    RANDOM_MEANINGLESS,
    check_drafter_flags,
    drafter_table_rows,
    parse_trees,
    random_prompt_groups,
    run_drafter_comparison,
    tree_table_rows,
)

DEFAULT_PROMPTS = (
    "Alan Turing theorized that computers would one day become",
    "The capital of France is Paris. The capital of Germany is",
    "Once upon a time, in a small village by the sea, there lived",
    "The most important thing to remember when writing software is",
    "In 1969, the first humans walked on the moon. The mission was called",
)
DEFAULT_ALPHAS = (0.5, 0.7, 0.8, 0.9)
COPY_PROMPTS = (  # for --drafters and --trees: text a good drafter can copy, a passage to repeat, code to extend
    "Please repeat the passage exactly.\nPassage: The library opens at nine in the morning and closes at six in "
    "the evening. Children under twelve must be accompanied by an adult.\nRepeated: The library opens at nine",
    "def mean(values):\n    total = 0\n    for value in values:\n        total += value\n    return total / "
    "len(values)\n\n\ndef variance(values):\n    total = 0\n    for value in values:\n",
)
FREE_PROMPTS = DEFAULT_PROMPTS[:2]  # text with nothing to copy


# ------------------------------------------------------------------------------------------------------------
# Measuring c and r
# ------------------------------------------------------------------------------------------------------------


def pass_times(passes, repeats, progress=None):
    """Seconds of each pass (model, x, n), i.e. of model(x, n): the fastest of `repeats` timed calls.

    Each model first gets one untimed call, which caches all of x; with the cache, each later call keeps
    x[:len(x) - n] and feeds the last n tokens again: a pass over n new tokens after a cached prefix. Without
    it, every call recomputes all of x. The passes are timed in turns (A B C, A B C, ...), not one after the
    other (A A A, B B B), so that a burst of load from another process hits them alike and their ratios, c
    and r, stay steadier than the times themselves.
    """
    for model, x, n in passes:
        model(x, n)
    best = [float("inf")] * len(passes)
    for _ in range(repeats):
        for i, (model, x, n) in enumerate(passes):
            best[i] = min(best[i], timed(lambda: model(x, n))[1])
        if progress is not None:
            progress.update()
    return best


@dataclass
class Costs:
    """Measured pass times in seconds (see the module docstring), and c and r derived from them."""

    kv_cache: bool
    prefix_length: int
    draft_step: float  # a 1-token draft pass
    target_step: float  # a 1-token target pass
    target_pass: dict = field(default_factory=dict)  # {K: a (K + 1)-token target pass}

    @property
    def c(self):
        return self.draft_step / self.target_step

    def r(self, K):
        """r of a (K + 1)-token pass: measured, or interpolated linearly between the Ks measured around it."""
        if K in self.target_pass:
            return self.target_pass[K] / self.target_step
        measured = sorted(self.target_pass)
        if not measured or not measured[0] <= K <= measured[-1]:
            raise KeyError(f"r was measured for K in {measured}, not around {K}")
        return float(np.interp(K, measured, [self.target_pass[k] for k in measured])) / self.target_step

    def covers(self, K):
        """True if r(K) was measured or can be interpolated."""
        return bool(self.target_pass) and min(self.target_pass) <= K <= max(self.target_pass)


def measure_costs(draft, target, Ks, prefix_length, kv_cache, settings, repeats, rng, progress):
    """Costs of one cache setting. draft and target are (params, hparams); settings: temperature, top_k, top_p."""
    n_vocab = target[1]["n_vocab"]
    tokens = rng.integers(0, n_vocab, prefix_length + max(Ks) + 1).tolist()  # any tokens: the cost is the same
    one_token = tokens[: prefix_length + 1]  # a 1-token pass after prefix_length tokens

    def model(params_hparams):
        return create_model_fn(*params_hparams, **settings, kv_cache=kv_cache)

    passes = [(model(draft), one_token, 1), (model(target), one_token, 1)]  # 1-token steps
    passes += [(model(target), tokens[: prefix_length + K + 1], K + 1) for K in Ks]  # (K + 1)-token passes
    draft_step, target_step, *target_passes = pass_times(passes, repeats, progress)
    return Costs(kv_cache, prefix_length, draft_step, target_step, dict(zip(Ks, target_passes)))


# ------------------------------------------------------------------------------------------------------------
# Running the samplers
# ------------------------------------------------------------------------------------------------------------


@dataclass
class Run:
    """What one sampler did over all the prompts: wall time, and the sampler's stats (summed over prompts)."""

    seconds: float = 0.0
    stats: object = None
    texts: list = field(default_factory=list)  # the token lists, to compare greedy runs

    @property
    def ms_per_token(self):
        return 1e3 * self.seconds / self.stats.tokens


def run_samplers(prompts, draft, target, Ks, N, settings, kv_cache, seed, progress):
    """Autoregressive sampling once and speculative sampling once per K, over every prompt: (Run, {K: Run}).

    draft, target: (params, hparams). Each run gets fresh model functions (empty caches) and a fresh
    np.random.default_rng(seed); an untimed pass of each model over the first prompt comes first (warm-up).
    """

    def new(params_hparams):
        return create_model_fn(*params_hparams, **settings, kv_cache=kv_cache)

    new(draft)(prompts[0])  # warm-up, not timed
    new(target)(prompts[0])

    autoregressive = Run(stats=AutoregressiveStats())
    for prompt in prompts:
        rng = np.random.default_rng(seed)
        ids, seconds = timed(lambda: autoregressive_sampling(prompt, new(target), N, rng, stats=autoregressive.stats))
        autoregressive.seconds += seconds
        autoregressive.texts.append(ids)
        progress.update()

    speculative = {}
    for K in Ks:
        speculative[K] = run = Run(stats=SpeculativeStats())
        for prompt in prompts:
            rng = np.random.default_rng(seed)
            ids, seconds = timed(
                lambda: speculative_sampling(prompt, new(draft), new(target), N, K, rng, stats=run.stats)
            )
            run.seconds += seconds
            run.texts.append(ids)
            progress.update()
    return autoregressive, speculative


# ------------------------------------------------------------------------------------------------------------
# Tables
# ------------------------------------------------------------------------------------------------------------


def print_measured_table(costs, autoregressive, speculative, Ks):
    """The table for real weights: measured alpha and speedups beside the two predictions."""
    print(f"autoregressive: {autoregressive.ms_per_token:.1f} ms/token ({autoregressive.stats.tokens} tokens, "
          f"{autoregressive.stats.target_passes} target passes)")
    print(f"costs at a {costs.prefix_length}-token prefix: c = {costs.c:.3f} (draft step "
          f"{1e3 * costs.draft_step:.1f} ms / target step {1e3 * costs.target_step:.1f} ms)\n")
    header = ("K", "alpha", "speedup", "speedup", "c", "r", "spec", "predicted", "predicted")
    header2 = ("", "", "(wall)", "(passes)", "", "", "ms/token", "(cK+1)", "(cK+r)")
    row_format = "{:>3} {:>6} {:>8} {:>9} {:>6} {:>6} {:>9} {:>10} {:>10}"
    print(row_format.format(*header))
    print(row_format.format(*header2))
    for K in Ks:
        run, alpha = speculative[K], speculative[K].stats.acceptance_rate
        row = (K, f"{alpha:.2f}", f"{autoregressive.ms_per_token / run.ms_per_token:.2f}x",
               f"{run.stats.tokens_per_target_pass:.2f}x", f"{costs.c:.3f}", f"{costs.r(K):.3f}",
               f"{run.ms_per_token:.1f}", f"{predicted_speedup(alpha, K, costs.c):.2f}x",
               f"{predicted_speedup(alpha, K, costs.c, costs.r(K)):.2f}x")
        print(row_format.format(*row))


def print_random_table(costs, alphas, Ks, autoregressive=None, speculative=None):
    """The table for random weights: measured costs, predicted speedups for each alpha, break-even alphas.

    autoregressive, speculative: the sampler runs in this cache setting, or None if there were none.
    """
    mode = "with the KV cache" if costs.kv_cache else "without a cache (picoGPT's way: full recompute)"
    print(f"\n{mode}: c = {costs.c:.2f} (draft step {1e3 * costs.draft_step:.1f} ms / target step "
          f"{1e3 * costs.target_step:.1f} ms, at a {costs.prefix_length}-token prefix)")
    if autoregressive is not None:
        print(f"autoregressive sampling: {autoregressive.ms_per_token:.1f} ms/token; speculative sampling "
              f"below at the acceptance rate of random weights ({_random_alpha(speculative):.2f}; at 0 each round "
              f"writes one token, so 'round/step' is the measured cost of a round, to compare with cK+r)")
    n = len(alphas)
    group = 6 * n - 1  # the width of n columns of 5 characters
    row_format = "{:>3} {:>5} {:>5} {:>9} {:>6} {:>5} | " + " ".join(["{:>5}"] * n) + " | " + " ".join(
        ["{:>5}"] * n) + " | {:>11}"
    print(" " * 39 + f"| {'predicted speedup, cK+1':^{group}} | {'predicted, with r: cK+r':^{group}} |")
    alpha_names = [f"a={alpha:g}" for alpha in alphas]
    print(row_format.format("K", "c", "r", "spec", "round/", "cK+r", *alpha_names, *alpha_names, "break-even"))
    print(row_format.format("", "", "", "ms/token", "step", "", *[""] * (2 * n), "alpha(cK+r)"))
    for K in Ks:
        c, r = costs.c, costs.r(K)
        if autoregressive is not None:
            spec_ms = f"{speculative[K].ms_per_token:.1f}"
            round_ms = 1e3 * speculative[K].seconds / speculative[K].stats.rounds
            round_over_step = f"{round_ms / autoregressive.ms_per_token:.2f}"
        else:
            spec_ms = round_over_step = "-"
        alpha = break_even_alpha(K, c, r)
        row = (K, f"{c:.2f}", f"{r:.2f}", spec_ms, round_over_step, f"{c * K + r:.2f}",
               *(f"{predicted_speedup(a, K, c):.2f}" for a in alphas),
               *(f"{predicted_speedup(a, K, c, r):.2f}" for a in alphas),
               "never" if alpha is None else f"{alpha:.2f}")
        print(row_format.format(*row))


def _random_alpha(speculative):
    stats = [run.stats for run in speculative.values()]
    checked = sum(s.checked for s in stats)
    return sum(s.accepted for s in stats) / checked if checked else 0.0


def format_table(rows, markdown=False):
    """rows of strings (header first) as aligned text, or as a markdown table."""
    if markdown:
        lines = ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join([lines[0], "|" + " --- |" * len(rows[0])] + lines[1:])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in rows)


# ------------------------------------------------------------------------------------------------------------
# The command line
# ------------------------------------------------------------------------------------------------------------


def as_list(value, name, kind):
    """Fire gives "1,2,4" as a tuple, "4" as an int, "[0.5]" as a list: always a list of `kind`."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    try:
        return [kind(v) for v in values]
    except (TypeError, ValueError):
        raise ValueError(f"--{name} must be a comma-separated list like 1,2,4; got {value!r}") from None


def comparison_flags(drafters, drafter_Ks, trees, max_ngram):
    """(drafter names, drafter Ks, trees) of the flags of the drafter and tree comparisons, each checked
    (check_drafter_flags); drafters and trees None for none."""
    drafter_names = [] if drafters is None else as_list(drafters.split(",") if isinstance(drafters, str)
                                                        else drafters, "drafters", str)
    drafter_Ks = as_list(drafter_Ks, "drafter_Ks", lambda v: v)  # whole numbers, "auto", "hf": checked below
    trees = parse_trees(trees)
    check_drafter_flags(drafter_names, drafter_Ks if drafter_names else [], trees, max_ngram)
    return drafter_names, drafter_Ks, trees


def as_prompts(value, flag):
    """[str] of a prompts flag: one text, or fire's list of them (--prompts '["one", "two"]'). At least one, and
    none empty: an empty prompt has no token for the first pass to continue from."""
    prompts = [as_typed_text(prompt, flag) for prompt in (value if isinstance(value, (list, tuple)) else [value])]
    if not prompts:
        raise ValueError(f"{flag} is empty: give a prompt, or a list of them like '[\"one\", \"two\"]'")
    if "" in prompts:
        raise ValueError(f"{flag}: prompt {prompts.index('') + 1} of {len(prompts)} is empty; give each some text")
    return prompts


def hparams_of(name):
    """The shapes of a released size or a Hugging Face name (gpt2 is 124M's, distilgpt2 its own), or of a local
    folder (hparams.json or a Hugging Face config.json)."""
    if name in HPARAMS:
        return HPARAMS[name]
    sizes = {key: size for short, (hub_id, size) in HUB_MODELS.items() for key in (short, hub_id)}
    if name in sizes:  # a Hugging Face name or its Hub id ("openai-community/gpt2")
        return HPARAMS[sizes[name]] if sizes[name] else DISTILGPT2_HPARAMS
    folder = Path(name)
    if (folder / "hparams.json").is_file():
        return read_openai_hparams(folder / "hparams.json")  # checked as the loaders check it
    if (folder / "config.json").is_file():
        return read_hf_hparams(folder / "config.json")
    raise ValueError(f"{name!r} is neither one of {', '.join(MODEL_SIZES + tuple(HUB_MODELS))} nor a folder with GPT-2 "
                     f"hyperparameters")


def model_name(name):
    """A short name for titles and file names: '124M', or the last part of a folder's path."""
    return name if name in MODEL_SIZES or name in HUB_MODELS else Path(name).name


def measured_random_params(hparams, rng):
    """random_params(hparams, rng) stored as this machine measured (speed/layouts.for_model): the layouts a model
    folder would be read in, so that a timing tool times what a run would."""
    return random_params(hparams, rng, layouts=for_model(None, hparams))


def random_pair(draft_model_size, target_model_size, seed):
    """Random weights of the two models' shapes and one random 10-token prompt: (draft, target, [prompt_ids]).

    draft and target are (params, hparams).
    """
    draft_hparams, target_hparams = hparams_of(draft_model_size), hparams_of(target_model_size)
    if draft_hparams["n_vocab"] != target_hparams["n_vocab"]:
        raise ValueError(f"the draft and target have different vocabularies (n_vocab {draft_hparams['n_vocab']} "
                         f"and {target_hparams['n_vocab']})")
    check_memory_for([(draft_model_size, draft_hparams), (target_model_size, target_hparams)])  # both are made
    rng = np.random.default_rng(seed)
    prompt_ids = rng.integers(0, target_hparams["n_vocab"], 10).tolist()
    print(f"making random weights of the shapes of {draft_model_size} and {target_model_size} ...", flush=True)
    draft = (measured_random_params(draft_hparams, rng), draft_hparams)
    target = (measured_random_params(target_hparams, rng), target_hparams)
    return draft, target, [prompt_ids]


def load_pair(draft_model_size, target_model_size, prompts, models_dir):
    """The two models (downloaded first if missing) and the encoded prompts: (draft, target, [prompt_ids, ...]).

    draft and target are (params, hparams). Raises ValueError unless they share a tokenizer.
    """
    check_model_names(draft_model_size, target_model_size)
    draft, target = download_and_load(draft_model_size, target_model_size, models_dir)  # (encoder, hparams, params)
    check_same_tokenizer(draft, target, (draft_model_size, target_model_size))
    prompt_ids = [target[0].encode(prompt) for prompt in prompts]
    return (draft[2], draft[1]), (target[2], target[1]), prompt_ids


def main(
    draft_model_size="124M",
    target_model_size="355M",
    Ks=(1, 2, 3, 4, 5, 6, 7, 8),
    prompts=DEFAULT_PROMPTS,
    n_tokens_to_generate=40,
    temperature=0.0,
    top_k=None,
    top_p=None,
    seed=0,
    kv_cache=True,
    random_weights=False,
    alphas=DEFAULT_ALPHAS,
    prefix_length=32,
    repeats=5,
    models_dir="models",
    img_dir="plots",
    drafters=None,
    drafter_Ks=(2, 4, "auto", "hf"),
    trees=None,
    max_ngram=None,
    k_max=AUTO_K_MAX,
    copy_prompts=COPY_PROMPTS,
    free_prompts=FREE_PROMPTS,
):
    """Print the table of acceptance, costs and speedups for each K (see the module docstring), and plot it.

    Args:
        draft_model_size: the draft model: 124M, 355M, 774M, 1558M (downloaded into models_dir); gpt2 (= 124M), gpt2-medium (= 355M), gpt2-large (= 774M), gpt2-xl (= 1558M), distilgpt2, their Hub ids or any owner/name of a GPT-2 repository (from the Hugging Face cache, else the Hub); or a local folder.
        target_model_size: the target model: any name --draft_model_size takes.
        Ks: the lookaheads to try, comma-separated: 1,2,4,8.
        prompts: the prompts (one string, or a list); each sampler continues each of them. With --random_weights one random 10-token prompt is used instead.
        n_tokens_to_generate: new tokens per prompt and run.
        temperature: 0 is greedy decoding (then both samplers must give the same texts, which is checked).
        top_k: keep only the top_k most likely tokens (default: all).
        top_p: keep only the nucleus of probability top_p (default: all).
        seed: seed of the np.random.Generator of each run (and of the random weights).
        kv_cache: True keeps the keys and values of earlier tokens; False recomputes the whole sequence in every pass, as picoGPT does.
        random_weights: use random weights of the models' shapes: cost figures only (no checkpoint needed).
        alphas: with --random_weights, the acceptance rates to predict the speedup for, comma-separated.
        prefix_length: tokens before the pass whose time gives c and r.
        repeats: timed calls per cost measurement; the fastest counts.
        models_dir: where released sizes are downloaded to.
        img_dir: where the plots go, a folder made if need be (needs matplotlib: pip install -r requirements/plots.txt).
        drafters: also compare drafters, comma-separated: model,lookup,staged (see drafters.py), in both cache settings, on prompts that invite copying and prompts that do not.
        drafter_Ks: the K of each drafter row: whole numbers, "auto" (lookahead.AutoK) and "hf" (Hugging Face's schedule).
        trees: also compare token trees with the chains that send as many rows to the target, e.g. "2,1,1;2,2,1".
        max_ngram: the longest match prompt lookup uses (lookup and staged); None: no cap, the longest match.
        k_max: r(m) is measured up to m = k_max + 1 rows (and no more than the tokens per run need) for the predictions; lookahead.AUTO_K_MAX caps what "auto" and "hf" propose.
        copy_prompts: the prompts that invite copying, for the drafter and tree tables (random ids with --random_weights).
        free_prompts: the prompts with nothing to copy.
    """
    run(**locals())


def run(draft_model_size="124M", target_model_size="355M", Ks=(1, 2, 3, 4, 5, 6, 7, 8), prompts=DEFAULT_PROMPTS,
        n_tokens_to_generate=40, temperature=0.0, top_k=None, top_p=None, seed=0, kv_cache=True,
        random_weights=False, alphas=DEFAULT_ALPHAS, prefix_length=32, repeats=5, models_dir="models", img_dir="plots",
        drafters=None, drafter_Ks=(2, 4, "auto", "hf"), trees=None, max_ngram=None, k_max=AUTO_K_MAX,
        copy_prompts=COPY_PROMPTS, free_prompts=FREE_PROMPTS):
    """`main` (same arguments), returning what it measured: {"costs": [Costs per cache setting, --kv_cache's
    first], "autoregressive": Run, "speculative": {K: Run}, "drafter_rows": [[str]], "tree_rows": [[str]]}
    (the last two: table rows, header first, or None; tools/make_readme_figures.py builds on all of it)."""
    with errors_as_one_line():  # every flag first (command_line/scripts.py's checkers), then the models
        Ks, alphas = as_whole_numbers(Ks, "--Ks"), as_fractions(alphas, "--alphas")
        seed = as_whole_number(seed, "--seed", 0, MAX_SEED)
        kv_cache, random_weights = as_bool(kv_cache, "--kv_cache"), as_bool(random_weights, "--random_weights")
        check_models_dir(as_text(models_dir, "--models_dir"))
        check_output_folder(img_dir, "--img_dir")
        drafter_names, drafter_Ks, trees = comparison_flags(drafters, drafter_Ks, trees, max_ngram)
        check_whole_number(k_max, "--k_max", 1)
        prompts = as_prompts(prompts, "--prompts")
        copy_prompts = as_prompts(copy_prompts, "--copy_prompts")
        free_prompts = as_prompts(free_prompts, "--free_prompts")
        for flag, value in (("--n_tokens_to_generate", n_tokens_to_generate), ("--prefix_length", prefix_length),
                            ("--repeats", repeats)):
            check_whole_number(value, flag, 1)
        check_sampling_flags(temperature, top_k, top_p)
        compare = bool(drafter_names or trees)
        if random_weights:
            draft, target, prompt_ids = random_pair(draft_model_size, target_model_size, seed)
            prompt_groups = random_prompt_groups(np.random.default_rng(seed + 2), target[1]["n_vocab"])
        else:
            extra = copy_prompts + free_prompts if compare else []
            draft, target, all_ids = load_pair(draft_model_size, target_model_size, prompts + extra, models_dir)
            prompt_ids, extra_ids = all_ids[: len(prompts)], all_ids[len(prompts) :]
            prompt_groups = {"copying": extra_ids[: len(copy_prompts)], "free": extra_ids[len(copy_prompts) :]}
        if not compare:
            prompt_groups = {}
        n_ctx = min(draft[1]["n_ctx"], target[1]["n_ctx"])
        flag_of = {"--prompts": prompt_ids, "--copy_prompts": prompt_groups.get("copying", []),
                   "--free_prompts": prompt_groups.get("free", [])}  # (the last two only with --drafters or --trees)
        longest, flag = max((len(ids), flag) for flag, group in flag_of.items() for ids in group)
        if longest + n_tokens_to_generate > n_ctx:
            raise ValueError(f"the longest prompt, {longest} tokens of {flag}, + --n_tokens_to_generate "
                             f"{n_tokens_to_generate} is more than the models' context of {n_ctx} tokens: generate "
                             f"fewer tokens, or give {flag} shorter prompts")
        deepest = min(k_max, n_tokens_to_generate - 1) if drafter_names else 0  # no proposal is longer
        # r(m) at m = 2, 3, 5, 9, ... and deepest + 1 (between them it is interpolated: Costs.r)
        cost_Ks = sorted(set(Ks) | {K for K in (1, 2, 4, 8, 16, 32) if K < deepest} | {deepest} - {0})
        if prefix_length + max(cost_Ks) + 1 > n_ctx:
            raise ValueError(f"--prefix_length {prefix_length} + the largest K + 1 is more than the context of {n_ctx}")

    # From here on the input has been checked: any exception is a bug and keeps its traceback.
    names = model_name(draft_model_size), model_name(target_model_size)
    cache_word = "cache" if kv_cache else "nocache"
    modes = (kv_cache, not kv_cache) if random_weights or compare else (kv_cache,)
    rng = np.random.default_rng(seed + 1)
    n_runs = len(prompt_ids) * (1 + len(Ks))
    n_runs += len(modes) * len(prompt_groups) * (1 + len(drafter_names) * len(drafter_Ks) + 2 * len(trees))
    with tqdm(total=len(modes) * repeats + n_runs, desc="benchmark", unit="run", leave=False) as progress:
        settings = dict(temperature=temperature, top_k=top_k, top_p=top_p)
        costs_by_mode = [measure_costs(draft, target, cost_Ks, prefix_length, mode, settings, repeats, rng, progress)
                         for mode in modes]
        autoregressive, speculative = run_samplers(prompt_ids, draft, target, Ks, n_tokens_to_generate, settings,
                                                   kv_cache, seed, progress)
        comparison = run_drafter_comparison(prompt_groups, draft, target, drafter_names, drafter_Ks, trees,
                                            n_tokens_to_generate, settings, seed, max_ngram, costs_by_mode, progress)

    title = f"{names[0]} drafts for {names[1]}, KV cache {'on' if kv_cache else 'off'}"
    weights = "RANDOM weights (acceptance is meaningless: cost figures only)" if random_weights else "real weights"
    print(f"\n{title}, {weights}; temperature {temperature}, {len(prompt_ids)} prompt(s) x "
          f"{n_tokens_to_generate} tokens per run")
    if random_weights:
        print_random_table(costs_by_mode[0], alphas, Ks, autoregressive, speculative)
        print_random_table(costs_by_mode[1], alphas, Ks)
    else:
        print_measured_table(costs_by_mode[0], autoregressive, speculative, Ks)
        if temperature == 0:
            same = all(run.texts == autoregressive.texts for run in speculative.values())
            print(f"\ntemperature 0: every speculative text is the autoregressive (greedy) one: {'yes' if same else 'NO'}")

    results = {"costs": costs_by_mode, "autoregressive": autoregressive, "speculative": speculative,
               "drafter_rows": None, "tree_rows": None}
    if drafter_names:
        results["drafter_rows"] = drafter_table_rows(comparison, costs_by_mode, random_weights, temperature == 0)
        print(f"\ndrafters, {n_tokens_to_generate} tokens per prompt; speedups against autoregressive sampling in the "
              f"same cache setting; predicted: the cost model at the row's alpha with the measured c and r(m)")
        print(format_table(results["drafter_rows"]))
        if random_weights:
            print(f"(random weights: lookup's alpha is {RANDOM_MEANINGLESS}: random models repeat themselves, so "
                  f"looked-up copies of their own output are kept)")
    if trees:
        results["tree_rows"] = tree_table_rows(comparison)
        print("\ntrees against chains that send the same number of rows to the target (draft: the draft model)")
        print(format_table(results["tree_rows"]))
    plt = import_pyplot()
    if plt is None:
        return results
    img_dir = Path(img_dir)
    if random_weights:
        plot_random(plt, sorted(costs_by_mode, key=lambda c: not c.kv_cache), alphas, Ks, kv_cache, autoregressive,
                    speculative, f"{names[0]} drafts for {names[1]}, random weights",
                    [img_dir / f"predicted_speedup_random_{names[0]}_{names[1]}.png",
                     img_dir / f"ms_per_token_random_{names[0]}_{names[1]}_{cache_word}.png"])
    else:
        plot_measured(plt, costs_by_mode[0], autoregressive, speculative, Ks, title,
                      [img_dir / f"speedup_{names[0]}_{names[1]}_{cache_word}.png",
                       img_dir / f"ms_per_token_{names[0]}_{names[1]}_{cache_word}.png"])
    if results["drafter_rows"]:
        random_word = "_random" if random_weights else ""
        plot_drafters(plt, results["drafter_rows"], f"drafters for {names[1]}"
                      f"{', random weights (alpha is an accident)' if random_weights else ''}",
                      img_dir / f"drafters{random_word}_{names[0]}_{names[1]}.png")
    return results


PROMPT_FLAGS = ("prompts", "copy_prompts", "free_prompts")


def prompts_kept_whole(argv):
    """argv with the text of each prompts flag quoted for fire (repr), unless it is a list ('["one", "two"]'):
    fire reads "Hello, world" as the two prompts "Hello" and "world"; main.py and compare_llama_cpp keep it one.

    prompts_kept_whole(["--prompts", "Hello, world"]) == ["--prompts", "'Hello, world'"]
    """
    argv = list(argv)
    for i, argument in enumerate(argv):
        flag, has_value, value = argument.partition("=")
        if not flag.startswith("--") or flag[2:].replace("-", "_") not in PROMPT_FLAGS:
            continue
        if has_value and not value.lstrip().startswith("["):
            argv[i] = f"{flag}={value!r}"
        elif not has_value and i + 1 < len(argv) and not re.match(r"--|-[a-zA-Z]|\s*\[", argv[i + 1]):
            argv[i + 1] = repr(argv[i + 1])  # (a flag next: --prompts has no value, which as_prompts says)
    return argv


if __name__ == "__main__":
    run_script(main, prompts_kept_whole(sys.argv[1:]), "tools/benchmark.py")
