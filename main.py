"""Decode one prompt twice with the same GPT-2 weights: plain autoregressive sampling, then speculative sampling.

    python main.py                       # the demo: 124M drafts for 355M, K=4, greedy, 40 tokens
    python main.py --help                # every flag
    python main.py --kv_cache False      # both samplers the picoGPT way: the whole sequence again every pass

What happens:

1. Download what is missing (OpenAI's release files, into --models_dir/SIZE, with progress bars) and load both
   models. A model may also be a local folder: OpenAI's layout (hparams.json + model.ckpt.*) or a Hugging Face
   GPT-2 folder (config.json + model.safetensors), e.g. `--draft_model_size path/to/distilgpt2`.
2. Autoregressive sampling with the target alone: one target forward pass per token.
3. Speculative sampling: the draft guesses K tokens, one target pass checks them all (see sampling.py).
4. Print both texts, their times and tokens/s, the speedup, the acceptance rate and each run's target
   forward passes. At temperature 0 both samplers must give the target's greedy text, so the two texts are
   compared.

Timing: loading is not timed. Before timing, each model runs once over the prompt (a warm-up, not timed),
so one-off costs (the first touch of freshly loaded weights, OpenBLAS starting its threads) fall on neither
sampler. Then each sampler gets fresh model functions, so both start with an empty KV cache, and runs once;
the pass over the prompt is part of its time.

Why the speedup depends on the cache (measured on a 2-core machine with NumPy's OpenBLAS): with the KV cache a
decoding step reads every weight once for one position, so it is memory-bound, while a target pass over the
K + 1 new positions of a speculative round costs 2-3x a 1-position pass (OpenBLAS repacks the whole weight
matrix for a multi-row product). Without a cache (picoGPT's way, `--kv_cache False`) every pass recomputes the
whole sequence anyway, so checking K + 1 tokens costs about the same as one step, and speculative sampling
wins more. benchmark.py measures both.

Bad flags, a failed download, or a damaged checkpoint end with one line `error: ...` and exit code 2 (bad
input) or 1 (download or checkpoint).
"""

import sys
import time
from contextlib import contextmanager
from pathlib import Path

import fire
import numpy as np

from sampling import (
    AutoregressiveStats,
    SpeculativeStats,
    autoregressive_sampling,
    create_model_fn,
    speculative_sampling,
)
from utils import MODEL_SIZES, CheckpointError, DownloadError, download_gpt2_files, load_encoder_hparams_and_params

RELEASED_N_CTX = 1024  # the context of all four released sizes


# ------------------------------------------------------------------------------------------------------------
# Checking the flags and loading the models (the only place where bad input is expected)
# ------------------------------------------------------------------------------------------------------------


def check_whole_number(value, flag, minimum):
    """ValueError unless value is an int >= minimum (fire turns `--K 4` into 4, `--K four` into "four")."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{flag} must be a whole number >= {minimum}; got {value!r}")


def check_model_names(draft_model_size, target_model_size):
    """ValueError unless each model is a released size or an existing folder."""
    for flag, name in (("--draft_model_size", draft_model_size), ("--target_model_size", target_model_size)):
        if name not in MODEL_SIZES and not Path(name).is_dir():
            raise ValueError(
                f"{flag} must be one of {', '.join(MODEL_SIZES)} or a local folder with GPT-2 weights; got {name!r}"
            )


def check_sampling_flags(temperature, top_k, top_p):
    """ValueError unless temperature >= 0, top_k is None or >= 1, top_p is None or in (0, 1]."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
        raise ValueError(f"--temperature must be a number >= 0 (0 is greedy decoding); got {temperature!r}")
    if top_k is not None:
        check_whole_number(top_k, "--top_k", 1)
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1):
        raise ValueError(f"--top_p must be a number in (0, 1]; got {top_p!r}")


def check_flags(n_tokens_to_generate, draft_model_size, target_model_size, K, temperature, top_k, top_p):
    """One clear ValueError for the first bad flag, before anything is downloaded."""
    check_model_names(draft_model_size, target_model_size)
    check_whole_number(K, "--K (draft tokens per round)", 1)
    check_whole_number(n_tokens_to_generate, "--n_tokens_to_generate", 1)
    both_released = draft_model_size in MODEL_SIZES and target_model_size in MODEL_SIZES
    if both_released and n_tokens_to_generate + 1 > RELEASED_N_CTX:  # a prompt has at least one token
        raise ValueError(
            f"--n_tokens_to_generate {n_tokens_to_generate} plus the prompt is more than GPT-2's context of "
            f"{RELEASED_N_CTX} tokens: generate fewer tokens"
        )
    check_sampling_flags(temperature, top_k, top_p)


def check_same_tokenizer(draft, target, names):
    """ValueError unless the two models, each (encoder, hparams, params), share one tokenizer."""
    (draft_encoder, draft_hparams, _), (target_encoder, target_hparams, _) = draft, target
    if draft_hparams["n_vocab"] != target_hparams["n_vocab"] or draft_encoder.encoder != target_encoder.encoder:
        raise ValueError(
            f"the draft {names[0]} (n_vocab {draft_hparams['n_vocab']}) and the target {names[1]} "
            f"(n_vocab {target_hparams['n_vocab']}) have different vocabularies: speculative sampling needs a "
            f"draft and a target that share one tokenizer"
        )


def check_models_fit(draft, target, prompt_ids, n_tokens_to_generate, names):
    """ValueError unless the two models share a tokenizer and prompt + N fits in both contexts."""
    check_same_tokenizer(draft, target, names)
    n_ctx = min(draft[1]["n_ctx"], target[1]["n_ctx"])
    if len(prompt_ids) + n_tokens_to_generate > n_ctx:
        raise ValueError(
            f"the prompt ({len(prompt_ids)} tokens) + --n_tokens_to_generate {n_tokens_to_generate} = "
            f"{len(prompt_ids) + n_tokens_to_generate} tokens is more than the models' context of {n_ctx}: "
            f"use a shorter prompt or generate fewer tokens"
        )


def download_and_load(draft_model_size, target_model_size, models_dir, **download_options):
    """Download what is missing of both models, then load both: (draft, target), each (encoder, hparams, params).

    Both are downloaded before either is loaded, so a broken download shows before minutes of loading.
    download_options go to utils.download_gpt2_files (base_url, retries).
    """
    for name in (draft_model_size, target_model_size):
        if name in MODEL_SIZES:
            download_gpt2_files(name, Path(models_dir) / name, **download_options)
    print(f"loading the draft {draft_model_size} and the target {target_model_size} ...", flush=True)
    draft = load_encoder_hparams_and_params(draft_model_size, models_dir)
    target = load_encoder_hparams_and_params(target_model_size, models_dir)
    return draft, target


@contextmanager
def errors_as_one_line():
    """Inside: the documented errors of bad input become one line `error: ...` on stderr and an exit code.

    DownloadError and CheckpointError (a broken download or file) exit with 1; any other ValueError (a bad
    flag) with 2. Nothing else is caught: any other exception is a bug and keeps its traceback.
    """
    try:
        yield
    except (DownloadError, CheckpointError) as error:  # CheckpointError first: it is also a ValueError
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def load_and_check(prompt, n_tokens_to_generate, draft_model_size, target_model_size, K, temperature, top_k,
                   top_p, models_dir, base_url, download_retries):
    """Check the flags, download and load both models, encode the prompt: (draft, target, prompt_ids).

    draft and target are (encoder, hparams, params). Raises ValueError (bad input), DownloadError, or
    CheckpointError (a subclass of ValueError), each with a message that says what to do.
    """
    check_flags(n_tokens_to_generate, draft_model_size, target_model_size, K, temperature, top_k, top_p)
    draft, target = download_and_load(
        draft_model_size, target_model_size, models_dir, base_url=base_url, retries=download_retries
    )
    prompt_ids = target[0].encode(prompt)  # the target's tokenizer; check_models_fit makes sure they agree
    if not prompt_ids:
        raise ValueError("--prompt is empty: give some text to continue")
    check_models_fit(draft, target, prompt_ids, n_tokens_to_generate, (draft_model_size, target_model_size))
    return draft, target, prompt_ids


# ------------------------------------------------------------------------------------------------------------
# The head to head
# ------------------------------------------------------------------------------------------------------------


def timed(fn):
    """(what fn() returns, its wall time in seconds)."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def describe(name, hparams):
    """'355M (24 layers, 1024 wide)'."""
    return f"{name} ({hparams['n_layer']} layers, {hparams['n_embd']} wide)"


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
):
    """Generate the same continuation with autoregressive sampling (target alone) and speculative sampling.

    Loading is not timed. Each model first runs once over the prompt as an untimed warm-up; then each sampler
    gets fresh model functions (empty caches) and runs once, and its time includes the pass over the prompt.

    Args:
        prompt: the text to continue (default: "Alan Turing theorized that computers would one day become").
        n_tokens_to_generate: N, how many new tokens each sampler writes.
        draft_model_size: the small draft model: 124M, 355M, 774M, 1558M (downloaded into models_dir), or a local folder (OpenAI's layout or a Hugging Face GPT-2 folder).
        target_model_size: the big target model whose distribution both samplers reproduce; a size or a folder.
        K: lookahead, draft tokens guessed per round (>= 1). Leviathan et al. call it gamma.
        temperature: 0 is greedy decoding (then both texts must be identical); > 0 samples from softmax(logits / temperature).
        top_k: keep only the top_k most likely tokens before sampling (default: all).
        top_p: keep only the smallest set of most likely tokens whose probability sums to top_p (default: all).
        seed: seed of the np.random.Generator; each sampler gets a fresh one with this seed.
        kv_cache: True keeps the keys and values of earlier tokens. False recomputes the whole sequence in every forward pass, as picoGPT does: the setting in which checking K + 1 tokens is almost free.
        models_dir: where released sizes are downloaded to (models_dir/124M/...).
        base_url: where to download from (default: $GPT2_BASE_URL, else OpenAI's bucket).
        download_retries: how often a failed download is retried (waiting 1, 2, 4, ... s) before giving up.
    """
    prompt = str(prompt)  # fire turns `--prompt 42` into an int
    with errors_as_one_line():
        draft, target, prompt_ids = load_and_check(
            prompt, n_tokens_to_generate, draft_model_size, target_model_size, K, temperature, top_k, top_p,
            models_dir, base_url, download_retries,
        )

    # From here on the input has been checked: any exception is a bug and keeps its traceback.
    encoder, draft_hparams, draft_params = draft
    _, target_hparams, target_params = target
    settings = dict(temperature=temperature, top_k=top_k, top_p=top_p, kv_cache=kv_cache)
    N = n_tokens_to_generate

    def new_draft():
        return create_model_fn(draft_params, draft_hparams, **settings)

    def new_target():
        return create_model_fn(target_params, target_hparams, **settings)

    print(f"draft  {describe(draft_model_size, draft_hparams)}")
    print(f"target {describe(target_model_size, target_hparams)}")
    cache_note = "on" if kv_cache else "OFF (every forward pass recomputes the whole sequence, picoGPT's way)"
    print(f"K={K}, temperature={temperature}, top_k={top_k}, top_p={top_p}, seed={seed}, KV cache {cache_note}")
    print(f"prompt ({len(prompt_ids)} tokens): {prompt}\n", flush=True)

    new_draft()(prompt_ids)  # warm-up, not timed: see the docstring
    new_target()(prompt_ids)

    ar_stats = AutoregressiveStats()
    ar_ids, ar_time = timed(
        lambda: autoregressive_sampling(prompt_ids, new_target(), N, np.random.default_rng(seed), stats=ar_stats)
    )
    ar_text = encoder.decode(ar_ids[len(prompt_ids):])
    print(f"autoregressive sampling, target {target_model_size} alone:")
    print(prompt + ar_text)
    print(f"  {ar_stats.tokens} tokens in {ar_time:.2f} s = {ar_stats.tokens / ar_time:.2f} tokens/s; "
          f"{ar_stats.target_passes} target forward passes\n", flush=True)

    sp_stats = SpeculativeStats()
    sp_ids, sp_time = timed(
        lambda: speculative_sampling(
            prompt_ids, new_draft(), new_target(), N, K, np.random.default_rng(seed), stats=sp_stats
        )
    )
    sp_text = encoder.decode(sp_ids[len(prompt_ids):])
    print(f"speculative sampling, draft {draft_model_size}, target {target_model_size}, K={K}:")
    print(prompt + sp_text)
    print(f"  {sp_stats.tokens} tokens in {sp_time:.2f} s = {sp_stats.tokens / sp_time:.2f} tokens/s; "
          f"{sp_stats.target_passes} target forward passes, {sp_stats.draft_passes} draft forward passes\n")

    by_position = ", ".join("n/a" if rate is None else f"{rate:.2f}" for rate in sp_stats.acceptance_rate_at)
    print(f"speedup: {ar_time / sp_time:.2f}x (wall time, autoregressive / speculative)")
    print(f"acceptance rate: {sp_stats.acceptance_rate:.2f} ({sp_stats.accepted} of {sp_stats.checked} checked "
          f"draft tokens kept; by draft position 1..{K}: {by_position})")
    print(f"target forward passes: autoregressive {ar_stats.target_passes}, speculative {sp_stats.target_passes} "
          f"({sp_stats.tokens_per_target_pass:.2f} tokens per target pass)")
    if temperature == 0:
        if ar_ids == sp_ids:
            print("temperature 0: the two texts are identical: yes (both are the target's greedy text)")
        else:
            first = next(i for i, (a, b) in enumerate(zip(ar_ids, sp_ids)) if a != b) - len(prompt_ids)
            print(f"temperature 0: the two texts are identical: NO, they part at new token {first}. A "
                  f"{K + 1}-token pass and a 1-token pass round float32 differently, which can flip a near-tie "
                  f"between the two most likely tokens")
    else:
        print(f"temperature {temperature}: the two texts are two samples from the same distribution (the "
              f"samplers use the random numbers differently), so they need not be identical")


if __name__ == "__main__":
    fire.Fire(main)
