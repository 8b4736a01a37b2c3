"""Decode one prompt twice with the same GPT-2 weights: plain autoregressive sampling, then speculative sampling.

    python main.py                       # the demo: 124M drafts for 355M, K=4, greedy, 40 tokens
    python main.py --help                # every flag
    python main.py --kv_cache False      # both samplers the picoGPT way: the whole sequence again every pass
    python main.py --drafter lookup      # guesses copied from earlier text (prompt lookup): no draft model
    python main.py --K auto              # each round's lookahead chosen from what earlier rounds showed
    python main.py --tree 2,2,1          # a tree of guesses (2 at depth 1, 2 under each, 1 under those)
    python main.py --trace               # one line per round: the guesses, p, q, the draw, kept or rejected
    python main.py --plot img/rounds.png # a picture of the rounds (needs matplotlib)

What happens: (1) every flag is checked (command_line/flags.py) before anything else: a misspelt flag or
`--seed -1` ends at once with one line `error: ...`; (2) what is missing is downloaded (OpenAI's release files
into --models_dir/SIZE; a model may also be a local folder, OpenAI's or a Hugging Face one) and both models are
loaded (no draft model with `--drafter lookup`); (3) autoregressive sampling with the target alone, one target
pass per token, its text printed token by token; (4) speculative sampling, its text printed round by round and
colored by where each token came from (show.py): a kept guess green, the target's token after a rejection red,
the free token after a round that kept every guess blue; (5) both runs' times, the speedup, the acceptance
rate, the target passes and the drafter's rounds; at temperature 0 the two texts must be the target's greedy
text, and are compared.

Timing: loading is not timed, nor a warm-up pass of each model over the prompt, nor choosing the route each
product takes on this machine (speed/routes.settle: a few seconds at a model's first run here, kept in its
folder for the next): one-off costs fall on neither sampler. Then each sampler gets fresh model functions (an empty KV cache) and runs once; the pass over the
prompt and printing the text are part of its time.

Why the speedup depends on the cache: with the KV cache a decoding step reads every weight once for one
position, so it is memory-bound, and a speculative round pays one target pass over K + 1 positions, which
costs r(K + 1) one-position passes (the README's "When does it pay off on a CPU?"; r(m) is measured on this
machine before the timed runs, for K=auto). Without a cache (picoGPT's way, `--kv_cache False`) every pass
recomputes the whole sequence anyway, so checking K + 1 tokens costs about what one step does, and
speculative sampling wins more. tools/benchmark.py measures both.

Bad flags, a failed download, or a damaged checkpoint (including weights that are NaN or infinite) end with
one line `error: ...` and exit code 2 (bad input) or 1 (download or checkpoint), without a traceback.

Read before it: sampling.py (Algorithm 2), drafters.py (where guesses come from) and show.py (the rounds
printed). command_line/flags.py reads the command line (fire's syntax) and checks every flag before anything
runs; main() below lists them with a line of help each (`python main.py --help`).
"""

import math
import sys
import time
from pathlib import Path

import speed.openblas_env  # noqa: F401  before NumPy loads OpenBLAS, which reads its settings then

import numpy as np

import drafters
import sampling
import show
from command_line.flags import (
    K_POLICIES,
    check_fits_context,
    check_flags,
    damage_as_one_line,
    errors_as_one_line,
    tree_nodes,
    tree_text,
)
from command_line.scripts import run_script
from records import AutoregressiveStats, SpeculativeStats, timed
from model_fn import create_model_fn
from loaders.download import MODEL_SIZES
from utils import check_same_tokenizer, download_and_load
from loaders.weights import CheckpointError
from speed import calibration
from speed import routes as product_routes


# ------------------------------------------------------------------------------------------------------------
# Loading the models
# ------------------------------------------------------------------------------------------------------------


def check_models_fit(draft, target, prompt_ids, flags):
    """ValueError unless the models share a tokenizer and prompt + N, K, the tree and n-grams fit the context.

    draft is None when the drafter needs no draft model; then only the target's context counts.
    """
    models = [target] if draft is None else [draft, target]
    if draft is not None:
        check_same_tokenizer(draft, target, (flags.draft_model_size, flags.target_model_size))
    n_ctx = min(hparams["n_ctx"] for _, hparams, _ in models)
    whose = "the target's context" if draft is None else "the models' context"
    if len(prompt_ids) + flags.n_tokens_to_generate > n_ctx:
        raise ValueError(
            f"the prompt ({len(prompt_ids)} tokens) + --n_tokens_to_generate {flags.n_tokens_to_generate} = "
            f"{len(prompt_ids) + flags.n_tokens_to_generate} tokens is more than {whose} of {n_ctx}: "
            f"use a shorter prompt or generate fewer tokens"
        )
    check_fits_context(flags, n_ctx, whose)
    if flags.tree is not None:  # the last round's tree sits after the prompt and up to N - 1 new tokens
        needed = len(prompt_ids) + flags.n_tokens_to_generate - 1 + tree_nodes(flags.tree, n_ctx)
        if needed > n_ctx:
            raise ValueError(
                f"--tree {tree_text(flags.tree)} ({tree_nodes(flags.tree, n_ctx)} nodes) after the prompt "
                f"({len(prompt_ids)} tokens) and up to {flags.n_tokens_to_generate - 1} new tokens needs {needed} "
                f"positions, more than {whose} of {n_ctx}: use a smaller tree or generate fewer tokens"
            )


def damaged_weights(params, prefix=""):
    """The first weight tensor that holds NaN or infinite values, as 'name (n NaN, m infinite of size)', or None.

    params: picoGPT's nested dicts and lists of arrays. Such weights make every logit NaN, and greedy decoding
    of NaN logits writes token 0 ("!") forever, so they are reported instead of decoded.
    """
    if isinstance(params, dict):
        items = params.items()
    elif isinstance(params, (list, tuple)):
        items = enumerate(params)
    else:
        array = np.asarray(params)
        if np.isfinite(array.sum(dtype=np.float64)):  # NaN and inf survive a sum; float64 cannot overflow here
            return None
        n_nan, n_inf = int(np.isnan(array).sum()), int(np.isinf(array).sum())
        return f"{prefix} ({n_nan} NaN and {n_inf} infinite of {array.size} values)"
    for key, value in items:
        found = damaged_weights(value, f"{prefix}.{key}" if prefix else str(key))
        if found:
            return found
    return None


def check_weights_finite(model, name, role):
    """CheckpointError if a loaded model, (encoder, hparams, params), has NaN or infinite weights."""
    found = damaged_weights(model[2])
    if found:
        raise CheckpointError(f"the {role} {name} has NaN or infinite weights in {found}: the checkpoint is damaged; "
                              f"download or convert it again")


def load_and_check(flags):
    """Download and load the models, check them, encode the prompt: (draft, target, prompt_ids).

    draft and target are (encoder, hparams, params); draft is None with --drafter lookup. Raises ValueError
    (bad input), DownloadError, or CheckpointError (a subclass of ValueError), each with a message that says
    what to do.
    """
    draft, target = download_and_load(
        flags.draft_model_size, flags.target_model_size, flags.models_dir, base_url=flags.base_url,
        retries=flags.download_retries, deadline_seconds=flags.download_deadline,
    )
    prompt_ids = target[0].encode(flags.prompt)  # the target's tokenizer; check_models_fit makes sure they agree
    if not prompt_ids:
        raise ValueError("--prompt is empty: give some text to continue")
    check_models_fit(draft, target, prompt_ids, flags)
    for model, name, role in ((draft, flags.draft_model_size, "draft"), (target, flags.target_model_size, "target")):
        if model is not None:
            check_weights_finite(model, name, role)
    return draft, target, prompt_ids


# ------------------------------------------------------------------------------------------------------------
# The head to head
# ------------------------------------------------------------------------------------------------------------


def describe(name, hparams):
    """'355M (24 layers, 1024 wide)'."""
    return f"{name} ({hparams['n_layer']} layers, {hparams['n_embd']} wide)"


def token_bytes_of(encoder):
    """token id -> the bytes it stands for (GPT-2's tokens are byte sequences, written as unicode stand-ins)."""
    return lambda token: bytes(encoder.byte_decoder[char] for char in encoder.decoder[token])


def make_drafter(flags, new_draft):
    """The draft argument of the speculative stream for these flags: a model function or a drafter."""
    if flags.drafter == "lookup":
        return drafters.prompt_lookup(max_ngram=flags.max_ngram, min_ngram=flags.min_ngram)
    if flags.drafter == "staged":
        return drafters.staged(new_draft(), max_ngram=flags.max_ngram)
    return new_draft()  # a model function is a drafter (sampling.as_drafter): Chen et al.'s Step 1


def speculative_rounds(flags, prompt_ids, draft, target, rng, stats):
    """The Rounds of one speculative run: a chain with K (a number or "auto"), or a tree with --tree."""
    N = flags.n_tokens_to_generate
    if flags.tree is not None:
        return drafters.tree_speculative_stream(prompt_ids, draft, target, N, flags.tree, rng, stats=stats)
    return sampling.speculative_stream(prompt_ids, draft, target, N, flags.K, rng, stats=stats)


def run_autoregressive(prompt_ids, model, flags, stream):
    """Autoregressive sampling, its text streamed token by token: (token ids, seconds, AutoregressiveStats)."""
    stats = AutoregressiveStats()
    ids = list(prompt_ids)
    start = time.perf_counter()
    rng = np.random.default_rng(flags.seed)
    for token in sampling.autoregressive_stream(prompt_ids, model, flags.n_tokens_to_generate, rng, stats=stats):
        ids.append(token)
        stream.write([token])
    seconds = time.perf_counter() - start
    stream.finish()
    return ids, seconds, stats


def run_speculative(prompt_ids, draft, target, flags, stream):
    """Speculative sampling, its text streamed round by round: (token ids, seconds, stats, rounds)."""
    stats = SpeculativeStats()
    ids, rounds = list(prompt_ids), []
    start = time.perf_counter()
    for rnd in speculative_rounds(flags, prompt_ids, draft, target, np.random.default_rng(flags.seed), stats):
        ids.extend(rnd.tokens)
        rounds.append(rnd)
        stream.write(rnd.tokens, rnd.origins)
    seconds = time.perf_counter() - start
    stream.finish()
    return ids, seconds, stats, rounds


def mean(values):
    """The mean of a list of numbers, 0.0 for an empty one."""
    return sum(values) / len(values) if values else 0.0


def with_costs(model, costs, draft=False):
    """The model function with the costs K=auto plans with set on it (a target's r_table, a draft's cost)."""
    if costs is not None:
        costs.use(None, model) if draft else costs.use(model)
    return model


def target_folder(flags):
    """The target's folder, where what was measured for it is kept (a released size's or a local one), or None
    for a model in the Hugging Face cache, which is not this project's to write into."""
    size = flags.target_model_size
    return Path(size) if Path(size).is_dir() else Path(flags.models_dir) / size if size in MODEL_SIZES else None


def calibrated_costs(flags, target, draft, routes):
    """(MeasuredCosts, lines to print): the costs K=auto plans with, from --r_table, else measured now.

    target, draft: the warm-up model functions (draft None without a draft model); routes: the products' routes,
    as speed/routes.settle gave them. A measured table is written next to the target's folder, so that
    --r_table can give it again.
    """
    if flags.r_table is not None:
        return calibration.load_costs(flags.r_table), [f"K=auto plans with the costs in {flags.r_table}"]
    costs, seconds = timed(lambda: calibration.calibrate(target, draft, routes=routes))
    costs.target, costs.draft = flags.target_model_size, flags.draft_model_size or ""
    lines = [f"K=auto plans with costs measured on this machine ({seconds:.1f} s, before the timed runs)"]
    name = calibration.COSTS_FILE if flags.kv_cache else calibration.COSTS_FILE.replace(".json", "_no_cache.json")
    folder = target_folder(flags)
    if folder is None:
        lines.append(f"(not written to a file: {flags.target_model_size} lives in the Hugging Face cache, which is "
                     f"not this project's to write into)")
        return costs, lines
    try:
        path = calibration.save_costs(folder / name, costs)
    except OSError as error:
        lines.append(f"(not written to {folder / name}: {error.strerror or error})")
    else:
        lines.append(f"(written to {path}; --r_table {path} plans with them again: the same seed, the same tokens)")
    return costs, lines


def lookahead_text(flags):
    """'K=4', 'K=auto', 'K=hf', or 'tree 2,2,1 (10 nodes)'."""
    if flags.tree is not None:
        return f"tree {tree_text(flags.tree)} ({tree_nodes(flags.tree, math.inf)} nodes)"
    return f"K={flags.K}"


def drafter_text(flags):
    """The drafter in words, for the run's heading."""
    if flags.drafter == "lookup":
        longest = "the longest match" if flags.max_ngram is None else f"matches counted up to {flags.max_ngram} tokens"
        return f"drafter lookup (prompt lookup: {longest}, at least {flags.min_ngram} tokens)"
    if flags.drafter == "staged":
        return f"drafter staged (draft {flags.draft_model_size}, itself drafted by prompt lookup)"
    return f"draft {flags.draft_model_size}"


def acceptance_by_position(stats, flags):
    """('0.50, 0.25, n/a', 3): the acceptance rate at each draft position 1..K (with K=auto, K=hf or a tree: up
    to the deepest one drafted); n/a where no guess was ever checked."""
    rates = stats.acceptance_rate_at
    while len(rates) > 1 and not stats.drafted_at[len(rates) - 1]:  # positions never even drafted
        rates = rates[:-1]
    if flags.K not in K_POLICIES and flags.tree is None:
        rates = rates + [None] * (flags.K - len(rates))  # a fixed K: positions 1..K, never reached ones n/a
    return ", ".join("n/a" if rate is None else f"{rate:.2f}" for rate in rates), len(rates)


def round_report(flags, stats, rounds):
    """The drafter's lines: rounds and mean k, lookup's matches, a tree's nodes per pass and accepted depths."""
    ks = [rnd.k for rnd in rounds]
    lines = [f"drafter {flags.drafter}, {lookahead_text(flags)}: {len(rounds)} rounds, mean k {mean(ks):.2f}"]
    if flags.drafter == "lookup":
        matched = sum(1 for rnd in rounds if rnd.proposal.tokens)
        share = matched / len(rounds) if rounds else 0.0
        lines[0] += f"; {matched} of {len(rounds)} rounds ({share:.0%}) found a match"
    if flags.tree is not None:
        depths = [sum(origin == "draft" for origin in rnd.origins) for rnd in rounds]
        nodes = sum(len(rnd.proposal.tokens) for rnd in rounds)
        histogram = ", ".join(f"{d}: {depths.count(d)}" for d in range(max(depths, default=0) + 1))
        lines.append(f"tree: {nodes / max(stats.target_passes, 1):.2f} nodes per target pass; accepted paths went "
                     f"{mean(depths):.2f} deep on average, {max(depths, default=0)} at most (rounds by depth: "
                     f"{histogram})")
    return lines


# The Args lines of main()'s docstring run past 120 columns on purpose: fire's --help shows only the first line
# of each argument's text.
def main(
    prompt="Alan Turing theorized that computers would one day become",
    n_tokens_to_generate=40,
    draft_model_size="124M",
    target_model_size="355M",
    K=4,
    temperature=0.0,
    top_k=None,
    top_p=None,
    seed=123,
    kv_cache=True,
    models_dir="models",
    base_url=None,
    download_retries=3,
    drafter="model",
    max_ngram=None,
    min_ngram=1,
    tree=None,
    color="auto",
    trace=False,
    plot=None,
    download_deadline=None,
    r_table=None,
):
    """Generate the same continuation with autoregressive sampling (target alone) and speculative sampling.

    Every flag is checked first. Loading is not timed. Each model first runs once over the prompt as an
    untimed warm-up; then each sampler gets fresh model functions (empty caches) and runs once, and its time
    includes the pass over the prompt.

    Args:
        prompt: the text to continue (default: "Alan Turing theorized that computers would one day become").
        n_tokens_to_generate: N, how many new tokens each sampler writes.
        draft_model_size: the small draft model. OpenAI's sizes 124M, 355M, 774M, 1558M (downloaded into models_dir); Hugging Face names gpt2 (= 124M), gpt2-medium (= 355M), gpt2-large (= 774M), gpt2-xl (= 1558M), distilgpt2, their Hub ids (openai-community/gpt2, ..., distilbert/distilgpt2) or any owner/name of a GPT-2 repository with model.safetensors (read from the Hugging Face cache, else downloaded into it); or a local folder (OpenAI's or Hugging Face's layout). Not used with --drafter lookup.
        target_model_size: the big target model whose distribution both samplers reproduce; any name --draft_model_size takes.
        K: lookahead, draft tokens guessed per round (>= 1); or auto: each round's K chosen by the cost model from what earlier rounds showed; or hf: Hugging Face's schedule (start at 5, +2 after a round that kept every guess, else -1). Leviathan et al. call it gamma.
        temperature: 0 is greedy decoding (then both texts must be identical); > 0 samples from softmax(logits / temperature).
        top_k: keep only the top_k most likely tokens before sampling (default: all).
        top_p: keep only the smallest set of most likely tokens whose probability sums to top_p (default: all).
        seed: seed of the np.random.Generator (a whole number >= 0); each sampler gets a fresh one with this seed.
        kv_cache: true keeps the keys and values of earlier tokens. false recomputes the whole sequence in every forward pass, as picoGPT does: the setting in which checking K + 1 tokens is almost free.
        models_dir: where released sizes are downloaded to (models_dir/124M/...).
        base_url: where to download from, http(s)://... (default: $GPT2_BASE_URL, else OpenAI's bucket).
        download_retries: how often a failed download is retried (waiting 1, 2, 4, ... s) before giving up (0 to 20).
        drafter: where the guesses come from: model (the draft model samples them), lookup (copied from earlier text after a repeated n-gram: prompt lookup, no draft model), staged (the draft model's own guesses drafted by prompt lookup).
        max_ngram: prompt lookup (lookup, staged) follows the longest earlier match of the text's end; a number caps it: a longer match counts as max_ngram tokens, the most recent occurrence of the last max_ngram tokens wins (3: the original prompt lookup). Default: no cap.
        min_ngram: prompt lookup: a match shorter than this is no match (the round is then a plain target step).
        tree: a tree of guesses checked in one target pass, its branching per depth, e.g. 2,2,1 (overrides K; needs --drafter model).
        color: color the speculative text by where each token came from: auto (on a terminal, unless NO_COLOR is set), always, never.
        trace: print one line per round: the drafted tokens, for each checked guess p, q, the uniform draw and kept or rejected, and the residual's or the bonus token.
        plot: write a picture of the rounds to this file, e.g. img/rounds.png (needs matplotlib).
        download_deadline: the most seconds one file's download may take, all retries together (default: $GPT2_DOWNLOAD_DEADLINE, else an hour); what arrived is kept, and the next run resumes it.
        r_table: with --K auto, plan with the costs in this file (r(m) and c, as calibration.save_costs writes them, e.g. models/355M/r_table.json) instead of measuring them before the timed runs; the same seed then gives the same tokens.
    """
    arguments = dict(locals())  # main()'s arguments, as given
    with errors_as_one_line():
        flags = check_flags(**arguments)
        draft, target, prompt_ids = load_and_check(flags)

    # From here on the input has been checked: any exception is a bug and keeps its traceback (except NaN: see
    # damage_as_one_line).
    encoder, target_hparams, target_params = target
    settings = dict(temperature=flags.temperature, top_k=flags.top_k, top_p=flags.top_p, kv_cache=flags.kv_cache)
    token_bytes = token_bytes_of(encoder)
    color = show.wants_color(flags.color, sys.stdout)
    N = flags.n_tokens_to_generate

    def new_draft():
        return create_model_fn(draft[2], draft[1], **settings)

    def new_target():
        return create_model_fn(target_params, target_hparams, **settings)

    if draft is not None:
        print(f"draft  {describe(flags.draft_model_size, draft[1])}")
    else:
        print("draft  none: prompt lookup copies guesses from earlier text (--draft_model_size is not used)")
    print(f"target {describe(flags.target_model_size, target_hparams)}")
    cache_note = "on" if flags.kv_cache else "OFF (every forward pass recomputes the whole sequence, picoGPT's way)"
    print(f"{lookahead_text(flags)}, drafter {flags.drafter}, temperature={flags.temperature}, top_k={flags.top_k}, "
          f"top_p={flags.top_p}, seed={flags.seed}, KV cache {cache_note}")
    print(f"prompt ({len(prompt_ids)} tokens): {flags.prompt}\n", flush=True)

    with damage_as_one_line():
        warm_draft, warm_target = (new_draft() if draft is not None else None), new_target()
        if warm_draft is not None:
            warm_draft(prompt_ids)  # warm-up, not timed: see the docstring
        warm_target(prompt_ids)
        with errors_as_one_line():  # a routes file that is not one settle wrote: one line naming it
            routes, line = product_routes.settle(target_folder(flags))  # each product's fastest route: not timed
        print(line, flush=True)
        costs = None
        if flags.K == "auto" and flags.tree is None:  # K=auto plans with r(m) and c: measured now, not timed
            costs, lines = calibrated_costs(flags, warm_target, warm_draft, routes)
            print("\n".join(lines) + f"\n{costs.summary()}\n", flush=True)

        def new_costed_target():
            return with_costs(new_target(), costs)

        def new_costed_draft():
            return with_costs(new_draft(), costs, draft=True)

        print(f"autoregressive sampling, target {flags.target_model_size} alone:")
        print(flags.prompt, end="", flush=True)
        ar_ids, ar_time, ar_stats = run_autoregressive(prompt_ids, new_target(), flags, show.TextStream(token_bytes,
                                                                                                      sys.stdout))
        print(f"  {ar_stats.tokens} tokens in {ar_time:.2f} s = {ar_stats.tokens / ar_time:.2f} tokens/s; "
              f"{ar_stats.target_passes} target forward passes\n", flush=True)

        print(f"speculative sampling, {drafter_text(flags)}, target {flags.target_model_size}, "
              f"{lookahead_text(flags)}:")
        print(show.legend(color))
        print(flags.prompt, end="", flush=True)
        sp_ids, sp_time, sp_stats, rounds = run_speculative(
            prompt_ids, make_drafter(flags, new_costed_draft), new_costed_target(), flags,
            show.TextStream(token_bytes, sys.stdout, color)
        )
    draft_passes = f"{sp_stats.draft_passes} draft forward passes" if draft is not None else "no draft model"
    print(f"  {sp_stats.tokens} tokens in {sp_time:.2f} s = {sp_stats.tokens / sp_time:.2f} tokens/s; "
          f"{len(rounds)} rounds, {sp_stats.target_passes} target forward passes, {draft_passes}\n")
    if flags.trace:
        for rnd in rounds:
            print(show.trace_line(rnd, token_bytes, color))
        print()

    by_position, n_positions = acceptance_by_position(sp_stats, flags)
    print(f"speedup: {ar_time / sp_time:.2f}x (wall time, autoregressive / speculative)")
    print(f"acceptance rate: {sp_stats.acceptance_rate:.2f} ({sp_stats.accepted} of {sp_stats.checked} checked "
          f"draft tokens kept; by draft position 1..{n_positions}: {by_position})")
    print(f"target forward passes: autoregressive {ar_stats.target_passes}, speculative {sp_stats.target_passes} "
          f"({sp_stats.tokens_per_target_pass:.2f} tokens per target pass)")
    for line in round_report(flags, sp_stats, rounds):
        print(line)
    if flags.temperature == 0:
        if ar_ids == sp_ids:
            print("temperature 0: the two texts are identical: yes (both are the target's greedy text)")
        else:
            first = next(i for i, (a, b) in enumerate(zip(ar_ids, sp_ids)) if a != b) - len(prompt_ids)
            print(f"temperature 0: the two texts are identical: NO, they part at new token {first}. A "
                  f"multi-token pass and a 1-token pass round float32 differently, which can flip a near-tie "
                  f"between the two most likely tokens")
    else:
        print(f"temperature {flags.temperature}: the two texts are two samples from the same distribution (the "
              f"samplers use the random numbers differently), so they need not be identical")
    if flags.plot is not None:
        names = f"draft {flags.draft_model_size}" if draft is not None else "prompt lookup"
        title = (f"{len(rounds)} rounds of speculative sampling: {names}, target {flags.target_model_size}, "
                 f"{lookahead_text(flags)}, temperature {flags.temperature}")
        with errors_as_one_line():  # --plot was checked before the run; a disk that filled since is one line too
            show.plot_rounds(rounds, token_bytes, flags.plot, title=title)
        print(f"the rounds are drawn in {flags.plot}")


def run_command_line(argv):
    """`python main.py ARGS`: fire's help for --help / -h, else the checked flags, each as the text typed, into
    main() (command_line/scripts.run_script, as every script of the project).

    Before anything runs, the flags and the standard output are checked. The ways the terminal, the disk or
    the user can end a run end it in one line (scripts.ending_as_one_line): Ctrl-C is `Interrupted.` (exit
    130), a full disk names the file, and when the reader of the output goes away (`python main.py | head`)
    the run stops quietly, as Unix tools do. A terminal whose encoding cannot show a character gets it as
    an escape (\\xe9).
    """
    run_script(main, argv, "main.py", as_text=True)


if __name__ == "__main__":
    run_command_line(sys.argv[1:])
