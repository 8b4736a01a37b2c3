"""The small parts: timings and counts that need no model run, each measured in this process (a tool).

Read tools/make_readme_figures.py first (it calls these; `--only NAME` remeasures one alone), then what each
times: drafters.py's prompt lookup against a full scan (tools/full_scan_lookup.py, the tests' reference),
encoder.py on one very long word, the sampler's float64 work (model_fn.logits_to_probs, checks.check_probs and
sampling._sample), gpt2.py's small design choices against the other way; and how closely gpt2 and encoder.py agree with
their peers (the numbers tests/test_gpt2.py records, read from a run of it: tools/recorded.py).
"""

import functools
import importlib.util
import time

import numpy as np

import drafters
from speed import second_core
from speed import products
from speed import routes
from gpt2 import attention, causal_mask
from loaders.random_weights import random_params
from loaders.weights import read_only
from loaders.download import HPARAMS
from records import timed
from model_fn import logits_to_probs
from checks import check_probs as _check_probs
from sampling import _sample
from tools import benchmark_forward, pass_parts
from tools.machine import SETTLE_SECONDS, load_average  # a pause before each timed product
from tools.pages import duration_text, scientific, wrap
from tools.full_scan_lookup import brute_force_lookup
from tools.peers import tiktoken_gpt2
from tools.recorded import recorded


# ------------------------------------------------------------------------------------------------------------
# Small timings the prose would otherwise quote from memory
# ------------------------------------------------------------------------------------------------------------


def best_seconds(fns, repeats, settle=0.0):
    """The fastest of `repeats` calls of each of fns, called in turns so that noise hits them alike (and
    noise only ever adds time): best_seconds([f, g], 3) times f, g, f, g, f, g and returns [best f, best g].
    settle: seconds to wait, untimed, before each call (for the workers of the call before to go to sleep)."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            time.sleep(settle)
            best[i] = min(best[i], timed(fn)[1])
    return best


def lookup_timing(n_tokens=1000, alphabet=50, repeats=5, seed=0):
    """(seconds per call with PromptLookup's index, seconds per call with a Python full scan).

    One pass calls each once per new token of a random text of an `alphabet`-token vocabulary, up to n_tokens
    tokens, as a generation does: n_tokens calls, on prefixes cut before the clock starts (so no call pays for
    copying its input), the index with a fresh PromptLookup each pass (it grows with the text). Each is the
    best of `repeats` passes, the two taken in turns (best_seconds), divided by the calls in a pass.
    """
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
        reference = tiktoken_gpt2(tokenizer_dir)
        text += f" (tiktoken: {timed(lambda: reference.encode(word, disallowed_special=()))[1]:.3f} s)"
    return wrap(f"In this run {text}, reading the vocabulary included.")


TIMED_SIZE = "124M"  # the shapes of the small timings below
UNICODE_LAST = 0x31FFF  # the last code point the unicode-count part writes through both tokenizers


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
    own_arrays = [read_only(np.array(m, order="F")) for m in matrices]  # each an array of its own, as NumPy makes one
    rows = {n: rng.standard_normal((1, n), dtype=np.float32) for n in (n_embd, 4 * n_embd)}  # [1, n_in]
    rows64 = {n: row.astype(np.float64) for n, row in rows.items()}
    by_rows = {m: {n: rng.standard_normal((m, n), dtype=np.float32) for n in rows} for m in (2, 8)}  # [m, n_in]
    x, row = rows[4 * n_embd], rows[n_embd]  # x: what GELU sees, [1, 4 n_embd]
    n_head, n_keys = HPARAMS[TIMED_SIZE]["n_head"], 512 + 4  # attention's scores: 4 queries after 512 cached
    q = rng.standard_normal((n_head, 4, n_embd // n_head), dtype=np.float32)  # [n_head, 4, head_dim]
    k = rng.standard_normal((n_head, n_keys, n_embd // n_head), dtype=np.float32)  # [n_head, n_keys, head_dim]
    cache_shape = (len(params["blocks"]), 2, n_head, 513, n_embd // n_head)  # every layer's keys and values
    shared_kv = products.kv_buffer(cache_shape)  # as gpt2 makes a cache: memory the helper process can map
    shared_kv[...] = rng.standard_normal(cache_shape, dtype=np.float32)
    plain_kv = np.array(shared_kv)  # the same numbers in ordinary memory
    q1, mask1 = rng.standard_normal((n_head, 1, n_embd // n_head), dtype=np.float32), causal_mask(1, 512)
    n_prompt = 512  # a prompt's attention: each of its queries over the keys up to its own
    q_prompt = rng.standard_normal((n_head, n_prompt, n_embd // n_head), dtype=np.float32)
    mask_prompt = causal_mask(n_prompt, 0)  # [n_prompt, n_prompt]

    def on_all_cores(work):  # BLAS on all cores first (the helper process asleep, if there is one), as a prompt's
        # product leaves it; a shared job after it (share_heads, products.matmul) puts BLAS on one thread again
        return lambda: (second_core.all_cores(), work())

    def blas_products(by_size, weights):  # plain BLAS on all cores
        return on_all_cores(lambda: [by_size[m.shape[0]] @ m for m in weights])

    def left_products(by_size, weights):  # one BLAS call on all cores, the big matrix on the left
        return on_all_cores(lambda: [(m.T @ by_size[m.shape[0]].T).T for m in weights])

    def panel_products(by_size, weights):  # gpt2.linear's way: half of the panels in the helper process
        return lambda: [products.matmul(by_size[m.shape[0]], m) for m in weights]

    def attend(kv, share, q=q1, mask=mask1):  # the queries' attention over the keys their mask covers, in every
        # layer: one query over 512 cached keys as a decoding step's, or a prompt's
        n_keys = mask.shape[1]
        return lambda: [share(attention, q, k[:, :n_keys], v[:, :n_keys], mask) for k, v in kv]

    def here(function, *arguments):  # every head in this process
        return function(*arguments)

    for _ in range(2):  # the first call makes gpt2.attention known; the second, or the first shared product
        # after it, forks a helper that has it
        attend(shared_kv, products.share_heads)()

    cases = [  # (what, gpt2.py's way, its function, the other way, its function, calls to time)
        (f"GELU's cube of a [1, {4 * n_embd}] float32 row", "`x * x * x`", lambda: x * x * x, "`x**3`",
         lambda: x**3, repeats),
        (f"one row through each of the {len(matrices)} block matrices", "column-major (`products.column_major`)",
         blas_products(rows, matrices), "row-major", blas_products(rows, row_major), product_repeats),
        (f"one row through each of the {len(matrices)} block matrices (`gpt2.linear`)",
         "in one array, in 2 MB pages (`loaders/matrix_memory.py`)", panel_products(rows, matrices),
         "each matrix an array of its own", panel_products(rows, own_arrays), product_repeats),
        *[(f"{m} rows through each of the {len(matrices)} block matrices (`gpt2.linear`)",
           "`products.matmul` (panel by panel, half in the helper process)", panel_products(by_rows[m], matrices),
           "one BLAS call on all cores, `(w.T @ x.T).T`", left_products(by_rows[m], matrices), product_repeats)
          for m in (2, 8)],
        (f"attention's scores of 4 queries over {n_keys} keys, {n_head} heads (`gpt2.attention`)",
         "`products.matmul(q, k.T)` (turned round: `(k @ q.T).T`)", lambda: products.matmul(q, k.transpose(0, 2, 1)),
         "`q @ k.T` (k.T a transposed operand)", lambda: q @ k.transpose(0, 2, 1), repeats),
        (f"1 query's attention over 512 cached keys, each of the {cache_shape[0]} layers (`gpt2.mha`)",
         "`products.share_heads` (half of the heads in the helper process, the cache a `products.kv_buffer`)",
         attend(shared_kv, products.share_heads), "every head here, the cache in ordinary memory",
         attend(plain_kv, here), product_repeats),
        (f"a {n_prompt}-token prompt's attention, each of the {cache_shape[0]} layers (`gpt2.mha`)",
         "`products.share_heads` (half of the heads in the helper process, BLAS on one thread in each)",
         on_all_cores(attend(shared_kv, products.share_heads, q_prompt, mask_prompt)),
         "every head here, BLAS on all cores", on_all_cores(attend(plain_kv, here, q_prompt, mask_prompt)),
         product_repeats),
        ("one row through the same products, after it met a float64 scalar", "float32 row",
         blas_products(rows, matrices), "float64 row (every matrix converted each time)",
         blas_products(rows64, matrices), product_repeats),
        (f"the mean of a [1, {n_embd}] row (`layer_norm`)", "`x.mean(axis=-1, keepdims=True)`",
         lambda: row.mean(axis=-1, keepdims=True), "`np.add.reduce(x, axis=-1, keepdims=True) / n`",
         lambda: np.add.reduce(row, axis=-1, keepdims=True) / n_embd, repeats),
    ]
    lines = [f"| {TIMED_SIZE}'s shapes, best of {repeats} ({product_repeats} for the products), in turns | "
             f"gpt2.py's way | time | the other way | time | other / gpt2.py's |", "|" + " --- |" * 6]
    for what, ours_label, ours, other_label, other, calls in cases:
        settle = SETTLE_SECONDS if calls == product_repeats else 0.0
        mine, theirs = best_seconds([ours, other], calls, settle)
        lines.append(f"| {what} | {ours_label} | {duration_text(mine)} | {other_label} | {duration_text(theirs)} | "
                     f"{theirs / mine:.2f}× |")
    return "\n".join(lines)


def pass_table(n_cached=512, ms=(1, 2, 3, 4, 8, 16), rounds=7):
    """Markdown: tools/pass_parts.py's table, an m-position pass after n_cached tokens part by part, on
    TIMED_SIZE's shapes."""
    params = random_params(HPARAMS[TIMED_SIZE], np.random.default_rng(0))  # made once, timed twice
    start = load_average()
    best = pass_parts.measure(TIMED_SIZE, n_cached, ms, rounds, params=params)
    calibrated_r = pass_parts.calibrated(TIMED_SIZE, n_cached, ms, params=params, chosen=routes.current())
    n_cached = min(n_cached, HPARAMS[TIMED_SIZE]["n_ctx"] - max(ms))
    return (wrap(pass_parts.header_text(TIMED_SIZE, n_cached, rounds, (start, load_average()))) + "\n\n"
            + pass_parts.table(best, markdown=True, calibrated_r=calibrated_r))


# ------------------------------------------------------------------------------------------------------------
# How closely the peers agree: numbers the tests check, quoted from this run
# ------------------------------------------------------------------------------------------------------------


def hf_agreement_text():
    """The sentence on gpt2 against Hugging Face's logits in tests/fixtures: the largest difference over every
    fixture and input, and the least that resetting one parameter array moves the logits (the test's teeth), as
    a run of tests/test_gpt2.py records them."""
    runs = recorded("tests/test_gpt2.py", "match_hugging_face or every_weight_bias").values()
    worst = max(run["max_abs_diff"] for run in runs if "max_abs_diff" in run)
    least = min(run["least_max_abs_diff"] for run in runs if "least_max_abs_diff" in run)
    tolerance = next(run["tolerance"] for run in runs if "tolerance" in run)
    return wrap(f"In this run `gpt2` matches within {scientific(worst)} (the bound is "
                f"{scientific(tolerance, 0)}), and resetting any single parameter array to what HF's "
                f"initialisation leaves (0, or 1 for a layer-norm gain) moves the logits by at least {least:.2f}.")


def unicode_text(tokenizer_dir, last):
    """The sentence on how many code points from U+0080 to `last` encoder.py (the `regex` package's Unicode tables)
    and tiktoken encode differently, written as "!" + c + "'s"; or why it was not counted."""
    if importlib.util.find_spec("tiktoken") is None:
        return "(tiktoken is not installed, so this run did not count them: `pip install -r requirements/dev.txt`.)"
    import regex
    import tiktoken
    from encoder import get_encoder

    ours, reference = get_encoder(tokenizer_dir.name, tokenizer_dir.parent), tiktoken_gpt2(tokenizer_dir)
    texts = ["!" + chr(c) + "'s" for c in range(0x80, last + 1) if not 0xD800 <= c <= 0xDFFF]  # no surrogates
    differ = sum(ours.encode(text) != reference.encode(text, disallowed_special=()) for text in texts)
    return wrap(f"With `regex` {regex.__version__} and tiktoken {tiktoken.__version__}, {differ:,} code points "
                f"from U+0080 to U+{last:04X} give different ids when written as `\"!\" + c + \"'s\"`.")


# ------------------------------------------------------------------------------------------------------------
# Every small part, by the name of its marks
# ------------------------------------------------------------------------------------------------------------


SMALL_PARTS = {  # the parts that need no model run: name -> f(forward's measurements, OpenAI's 124M folder)
    "lookup-timing": lambda forward, tokenizer_dir: lookup_text(forward),
    "bpe-timing": lambda forward, tokenizer_dir: bpe_text(tokenizer_dir),
    "sampler-timing": lambda forward, tokenizer_dir: sampler_table(),
    "design-timing": lambda forward, tokenizer_dir: design_table(),
    "pass-timing": lambda forward, tokenizer_dir: pass_table(),
    "hf-agreement": lambda forward, tokenizer_dir: hf_agreement_text(),
    "unicode-count": lambda forward, tokenizer_dir: unicode_text(tokenizer_dir, UNICODE_LAST),
}
