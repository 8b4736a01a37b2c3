"""Decode one prompt twice with the same GPT-2 weights: plain autoregressive sampling, then speculative sampling.

    python main.py                       # the demo: 124M drafts for 355M, K=4, greedy, 40 tokens
    python main.py --help                # every flag
    python main.py --kv_cache False      # both samplers the picoGPT way: the whole sequence again every pass
    python main.py --drafter lookup      # guesses copied from earlier text (prompt lookup): no draft model
    python main.py --K auto              # each round's lookahead chosen from what earlier rounds showed
    python main.py --tree 2,2,1          # a tree of guesses (2 at depth 1, 2 under each, 1 under those)
    python main.py --trace               # one line per round: the guesses, p, q, the draw, kept or rejected
    python main.py --plot rounds.png     # a picture of the rounds (needs matplotlib)
    python main.py --html rounds.html    # a web page of the rounds: every round's p, q, u, residual, one click away
    python main.py --verbose             # also what only the machine needs (each matrix product's route)
    python main.py --plain               # gpt2.py alone, without speed/ plugged in: the same tokens, slower

What happens, as main() reads: (1) every flag is checked (command_line/flags.py) before anything else: a misspelt
flag, `--seed -1`, a failed download or a damaged checkpoint ends with one line `error: ...` (exit code 2 for bad
input, else 1); (2) what is missing is downloaded (OpenAI's release files into --models_dir/SIZE; a model may also
be a local folder, OpenAI's or a Hugging Face one) and both models are loaded and checked (command_line/checks.py;
no draft model with `--drafter lookup`); (3) a warm-up, not timed (command_line/warm_up.py); (4) autoregressive
sampling with the target alone, one target pass per token, its text printed token by token; (5) speculative
sampling, its text printed round by round and colored by where each token came from (show.py): a kept guess green,
the target's token after a rejection red, the free token after a round that kept every guess blue; (6) the report
(command_line/report.py): both runs' times, the speedup, the acceptance rate, the target passes and the drafter's
rounds; at temperature 0 the two texts must be the target's greedy text, and are compared.

Timing: loading is not timed, nor the warm-up: a pass of each model over the prompt, and measuring how this
machine multiplies the target's matrices fastest (a few seconds at a model's first run here, kept in its folder
as routes.json for the next run): one-off costs fall on neither sampler. Then each sampler gets fresh model
functions (an empty KV cache) and runs once; the pass over the prompt and printing the text are part of its time.

Why the speedup depends on the cache: with the KV cache a decoding step reads every weight once for one
position, so it is memory-bound, and a speculative round pays one target pass over K + 1 positions, which
costs r(K + 1) one-position passes (the README's "When does it pay off on a CPU?"; r(m) is measured on this
machine before the timed runs, for K=auto). Without a cache (picoGPT's way, `--kv_cache False`) every pass
recomputes the whole sequence anyway, so checking K + 1 tokens costs about what one step does, and
speculative sampling wins more. tools/benchmark.py measures both.

Read before it: sampling.py (Algorithm 2), drafters.py (where guesses come from) and show.py (the rounds
printed). command_line/ is what a command owes the person who typed it (checks, one-line errors, the report):
machinery to take on trust. main() below lists every flag with a line of help (`python main.py --help`).
"""

import sys
import time

import speed.openblas_env  # noqa: F401  before NumPy loads OpenBLAS, which reads its settings then

import numpy as np

import drafters
import sampling
import show
from command_line import page, report
from command_line.checks import load_and_check
from command_line.flags import check_flags, errors_as_one_line, overflow_said_once
from command_line.report import Run
from command_line.scripts import run_script
from command_line.warm_up import check_kept_files, warm_up, with_costs
from model_fn import create_model_fn
from records import AutoregressiveStats, SpeculativeStats


def run_autoregressive(prompt_ids, model, flags, stream):
    """Autoregressive sampling, its text streamed token by token: a Run (ids, seconds, stats, no rounds)."""
    stats = AutoregressiveStats()
    ids = list(prompt_ids)
    start = time.perf_counter()
    rng = np.random.default_rng(flags.seed)
    for token in sampling.autoregressive_stream(prompt_ids, model, flags.n_tokens_to_generate, rng, stats=stats):
        ids.append(token)
        stream.write([token])
    seconds = time.perf_counter() - start
    stream.finish()
    return Run(ids, seconds, stats, None)


def run_speculative(prompt_ids, draft, target, flags, stream):
    """Speculative sampling, its text streamed round by round: a Run (ids, seconds, stats, rounds)."""
    stats = SpeculativeStats()
    ids, rounds = list(prompt_ids), []
    start = time.perf_counter()
    for rnd in speculative_rounds(flags, prompt_ids, draft, target, np.random.default_rng(flags.seed), stats):
        ids.extend(rnd.tokens)
        rounds.append(rnd)
        stream.write(rnd.tokens, rnd.origins)
    seconds = time.perf_counter() - start
    stream.finish()
    return Run(ids, seconds, stats, rounds)


def speculative_rounds(flags, prompt_ids, draft, target, rng, stats):
    """The Rounds of one speculative run: a chain with K (a number or "auto"), or a tree with --tree."""
    N = flags.n_tokens_to_generate
    if flags.tree is not None:
        return drafters.tree_speculative_stream(prompt_ids, draft, target, N, flags.tree, rng, stats=stats)
    return sampling.speculative_stream(prompt_ids, draft, target, N, flags.K, rng, stats=stats)


def make_drafter(flags, new_draft):
    """The draft argument of the speculative stream for these flags: a model function or a drafter."""
    if flags.drafter == "lookup":
        return drafters.prompt_lookup(max_ngram=flags.max_ngram, min_ngram=flags.min_ngram)
    if flags.drafter == "staged":
        return drafters.staged(new_draft(), max_ngram=flags.max_ngram)
    return new_draft()  # a model function is a drafter (sampling.as_drafter): Chen et al.'s Step 1


# The Args lines of main()'s docstring run past 120 columns on purpose: fire's --help shows only the first line
# of each argument's text.
def main(prompt="Alan Turing theorized that computers would one day become", n_tokens_to_generate=40,
         draft_model_size="124M", target_model_size="355M", K=4, temperature=0.0, top_k=None, top_p=None, seed=123,
         kv_cache=True, models_dir="models", base_url=None, download_retries=3, drafter="model", max_ngram=None,
         min_ngram=1, tree=None, color="auto", trace=False, plot=None, download_deadline=None, r_table=None,
         verbose=False, plain=False, html=None):
    """Generate the same continuation with autoregressive sampling (target alone) and speculative sampling.

    Args:
        prompt: the text to continue (default: "Alan Turing theorized that computers would one day become").
        n_tokens_to_generate: N, how many new tokens each sampler writes.
        draft_model_size: the small draft model. OpenAI's sizes 124M, 355M, 774M, 1558M (downloaded into models_dir); Hugging Face names gpt2 (= 124M), gpt2-medium (= 355M), gpt2-large (= 774M), gpt2-xl (= 1558M), distilgpt2, their Hub ids (openai-community/gpt2, ..., distilbert/distilgpt2) or any owner/name of a GPT-2 repository with model.safetensors (read from the Hugging Face cache, else downloaded into it); or a local folder (OpenAI's or Hugging Face's layout). Not used with --drafter lookup.
        target_model_size: the big target model whose distribution both samplers reproduce; any name --draft_model_size takes.
        K: lookahead, draft tokens guessed per round (>= 1); or auto: each round's K chosen by the cost model from what earlier rounds showed; or hf: Hugging Face's schedule (start at 5, +2 after a round that kept every guess, else -1).
        temperature: 0 is greedy decoding (then both texts must be identical); > 0 samples from softmax(logits / temperature).
        top_k: keep only the top_k most likely tokens before sampling (default: all).
        top_p: keep only the smallest set of most likely tokens whose probability sums to top_p (default: all).
        seed: seed of the np.random.Generator (a whole number >= 0); each sampler gets a fresh one with this seed.
        kv_cache: true keeps the keys and values of earlier tokens; false recomputes the whole sequence in every forward pass, as picoGPT does.
        models_dir: where released sizes are downloaded to (models_dir/124M/...).
        base_url: where to download from, http(s)://... (default: $GPT2_BASE_URL, else OpenAI's bucket).
        download_retries: how often a failed download is retried (waiting 1, 2, 4, ... s) before giving up (0 to 20).
        drafter: where the guesses come from: model (the draft model), lookup (copied from earlier text: prompt lookup, no draft model), staged (the draft model's own guesses drafted by prompt lookup).
        max_ngram: prompt lookup follows the longest earlier match of the text's end; a number caps it (3: the original prompt lookup). Default: no cap.
        min_ngram: prompt lookup (--drafter lookup): a match shorter than this is no match (the round is then a plain target step).
        tree: a tree of guesses checked in one target pass, its branching per depth, e.g. 2,2,1 (overrides K; needs --drafter model).
        color: color the speculative text by where each token came from: auto (on a terminal, unless NO_COLOR is set), always, never.
        trace: print one line per round: the drafted tokens, for each checked guess p, q, the uniform draw and kept or rejected.
        plot: write a picture of the rounds to this file, e.g. rounds.png (needs matplotlib).
        download_deadline: the most seconds one file's download may take, all retries together (default: $GPT2_DOWNLOAD_DEADLINE, else an hour).
        r_table: with --K auto, plan with the costs in this file (as a run with --K auto keeps them, e.g. models/355M/r_table.json) instead of measuring them.
        verbose: also print what only the machine needs: the route each matrix product takes on this machine.
        plain: run gpt2.py alone, without speed/ plugged in (the same greedy tokens, slower): what the core does by itself.
        html: write a web page of the rounds to this file, e.g. rounds.html: each guess's p, q and u, the residual, the bonus token's row (one self-contained file).
    """
    arguments = dict(locals())  # main()'s arguments, as given
    with errors_as_one_line():  # a bad flag, a failed download, a damaged checkpoint: one line `error: ...`
        flags = check_flags(**arguments)
        check_kept_files(flags)  # a bad routes file, a costs file of another model or machine: before loading
        draft, target, prompt_ids = load_and_check(flags)  # (encoder, hparams, params) each; draft None: lookup
    settings = dict(temperature=flags.temperature, top_k=flags.top_k, top_p=flags.top_p, kv_cache=flags.kv_cache,
                    plain=flags.plain)

    def new_draft():  # a fresh model function: an empty KV cache
        return create_model_fn(draft[2], draft[1], **settings)

    def new_target():
        return create_model_fn(target[2], target[1], **settings)

    report.print_heading(flags, draft, target, prompt_ids)
    token_bytes, color = report.token_bytes_of(target[0]), show.wants_color(flags.color, sys.stdout)
    with overflow_said_once():  # from here on any exception but NaN's (scripts.ending_as_one_line) is a bug
        costs = warm_up(flags, prompt_ids, new_draft if draft is not None else None, new_target)  # not timed

        report.print_run_heading(flags, speculative=False)
        autoregressive = run_autoregressive(prompt_ids, new_target(), flags, show.TextStream(token_bytes, sys.stdout))
        report.print_run(autoregressive)

        report.print_run_heading(flags, speculative=True, color=color)
        drafter = make_drafter(flags, lambda: with_costs(new_draft(), costs, draft=True))
        speculative = run_speculative(prompt_ids, drafter, with_costs(new_target(), costs), flags,
                                      show.TextStream(token_bytes, sys.stdout, color))
        report.print_run(speculative, has_draft=draft is not None)
    report.print_summary(flags, len(prompt_ids), autoregressive, speculative, token_bytes, color)
    page.write_page(flags, autoregressive, speculative, token_bytes, costs)  # --html FILE: the rounds' page


def run_command_line(argv):
    """`python main.py ARGS`: fire's help for --help, else the flags as typed into main(); Ctrl-C, a full disk or
    a closed pipe end the run in one line (command_line/scripts.run_script, as every script of the project)."""
    run_script(main, argv, "main.py", as_text=True)


if __name__ == "__main__":
    run_command_line(sys.argv[1:])
