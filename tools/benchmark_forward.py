"""How fast is a decoding step? Greedy decoding through the sampler against the memory-bandwidth floor (a tool).

Read gpt2.py and model_fn.py first (what a step does); the tables this prints are docs/BENCHMARKS.md's "Speed of
the forward pass". With a KV cache each new token is a pass over ONE position: little arithmetic (about 2 flops
per weight), but every weight comes from memory, so a step cannot beat

    floor = bytes of the weights / memory bandwidth

The bandwidth is the STRICT one: the best that one large float32 matrix-vector product (a matrix several
times the largest cache) reaches in the same run, made the way the model makes a one-row product
(a step's products: both cores streaming), timed in bursts in turns with the decoding runs. For random weights
of the real shapes of each --sizes it prints:

1. The table: `autoregressive_sampling` at temperature 0, per token after the (untimed) prompt pass, best and
   median of --repeats runs of --n_new tokens, over the floor. For --no_cache_sizes also kv_cache=False
   (picoGPT's way) and picoGPT's setting under NumPy 2 (float64 activations: every product converts a weight
   matrix to float64 first).
2. A breakdown of one step: the block products, the LM head, attention and the rest of the pass, each timed in
   the step and alone (the products back to back, the rest the step `replayed`), the sampler's float64 work and
   its own loop, beside the floor.
3. r(m): an m-position pass over a 1-position pass after --r_context cached tokens, m = 1 .. --r_max.
4. ms per token against the context length (--context_lengths, for --context_size): the cache adds the keys
   and values of every cached position to the bytes a step reads, so the line should be nearly flat.

Timings are noisy on a shared machine: compare the ratios, measured in one run. Bests are the machine at its
least disturbed, medians typical; a burst of load can spoil every short bandwidth sample of a run but only part
of a long decoding run, so a ratio of bests and one of medians may fall either side of each other.

    python tools/benchmark_forward.py                                  # 124M and 355M
    python tools/benchmark_forward.py --sizes 124M --n_new 8 --context_size None     # quicker
    python tools/benchmark_forward.py --sizes ""        # only the context (with OPENBLAS_NUM_THREADS=1: one thread)
    python tools/benchmark_forward.py --json forward.json              # every measurement into a file too

A size is a released one or a model folder (its shapes). --json writes every timing, the machine, OpenBLAS's
threads and the load; make_readme_figures.py runs this script as a process of its own (OpenBLAS reads its thread
count when NumPy loads) and formats the tables with the functions that print them (tools/forward_tables.py,
markdown=True). Plots go into --img_dir with matplotlib (requirements/plots.txt): forward_r_of_m.png,
forward_ms_per_token_vs_context.png (plots/ by default; the README's, in img/, are the figures command's).
"""

import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

# `python tools/benchmark_forward.py` puts tools/ first on the path: put the repository's root there too, so
# that the modules it measures (and `tools.`) import as they do from the root
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import speed.openblas_env  # noqa: E402,F401  before NumPy loads OpenBLAS, which reads its settings then

import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from tools import benchmark  # noqa: E402
from speed import calibration  # noqa: E402
from speed import products  # noqa: E402
from speed import routes  # noqa: E402
from speed import second_core  # noqa: E402
from tools.benchmark import model_name  # noqa: E402
from speed.plug import routed_attention as attention  # noqa: E402  (what a pass attends with)
from loaders.random_weights import check_memory_for  # noqa: E402
from loaders.download import HPARAMS  # noqa: E402
from records import timed  # noqa: E402
from model_fn import create_model_fn, logits_to_probs  # noqa: E402
from loaders.safe_files import write_atomically  # noqa: E402
from checks import check_probs as _check_probs  # noqa: E402
from sampling import _sample, autoregressive_sampling  # noqa: E402
from tools.benchmark_plots import import_pyplot  # noqa: E402
from tools.forward_tables import (breakdown_table, context_table, main_table, plot_context,  # noqa: E402
                                  plot_r_of_m, r_table, threads_label)
from tools.machine import blas_description, blas_threads, load_average, machine_description  # noqa: E402
from command_line.flags import MAX_SEED, as_optional, as_text, as_whole_number, errors_as_one_line  # noqa: E402
from command_line.scripts import as_names, as_whole_numbers, check_output_file, check_output_folder, run_script  # noqa: E402
from loaders.weights import CheckpointError  # noqa: E402

BANDWIDTH_SHAPE = (8192, 8192)  # float32: 256 MiB, far larger than any cache
SAMPLING_SETTINGS = dict(temperature=1.0, top_k=50, top_p=0.9)  # the breakdown's sampled (not greedy) case

# ------------------------------------------------------------------------------------------------------------
# Small pure helpers (tests/test_benchmark_forward.py)
# ------------------------------------------------------------------------------------------------------------


def n_bytes(tree) -> int:
    """Bytes of all the arrays in a nested dict/list of parameters."""
    if isinstance(tree, dict):
        return sum(n_bytes(v) for v in tree.values())
    if isinstance(tree, list):
        return sum(n_bytes(v) for v in tree)
    return tree.nbytes


def block_matrices(params) -> list:
    """The weight matrices of every block in the order a step uses them: c_attn, attn's c_proj, c_fc,
    mlp's c_proj (4 per block; the LM head, wte, is not among them)."""
    return [m for block in params["blocks"] for m in (block["attn"]["c_attn"]["w"], block["attn"]["c_proj"]["w"],
                                                      block["mlp"]["c_fc"]["w"], block["mlp"]["c_proj"]["w"])]


def size_hparams(size) -> dict:
    """The shapes of a released size (HPARAMS) or of a model folder (its hparams.json or config.json), as
    benchmark.hparams_of reads them; a ValueError naming the sizes to choose from for an unknown one."""
    try:
        return benchmark.hparams_of(size)
    except CheckpointError:
        raise  # a folder whose hyperparameters are refused: its own message
    except ValueError:
        raise ValueError(f"unknown size(s) [{size!r}]: choose from {', '.join(HPARAMS)}, or a model folder") from None


def parse_list(value, kind=str) -> list:
    """fire gives "a,b" as the tuple ("a", "b"), "16" as the int 16 and "a" as "a": always a list of kind."""
    items = value.split(",") if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else [value]
    return [kind(item) for item in items if str(item).strip()]


def as_picogpt_runs_it(tree):
    """The parameters as picoGPT computes with them under NumPy 2: row-major weights, as read from the
    checkpoint, and float64 activations from the start (a float64 wpe makes x float64 at the embedding)."""
    if isinstance(tree, dict):
        return {key: np.asarray(as_picogpt_runs_it(value), dtype=np.float64) if key == "wpe"
                else as_picogpt_runs_it(value) for key, value in tree.items()}
    if isinstance(tree, list):
        return [as_picogpt_runs_it(value) for value in tree]
    return np.ascontiguousarray(tree)


# ------------------------------------------------------------------------------------------------------------
# Measurements
# ------------------------------------------------------------------------------------------------------------


def product_bandwidths(w, v, n_products: int) -> list:
    """Bytes per second of n_products float32 matrix-vector products by w, each timed on its own, made as the
    model makes a one-row product, in turns both ways a matrix can be stored (speed/layouts.py): v @ w.T (each
    output a dot product over a contiguous row of w, as by a matrix stored by column) and v @ w (w's rows added
    up, as by one stored by row), by a step's route (`one_row_product`), whose columns are shared with the helper
    process where one runs (so both cores stream, as a decoding step's do). w must be read-only, as the model's
    weights are; the first two products each way are not timed (the second starts the helper)."""
    row = v[None, :]  # [1, n]
    ways = [lambda: one_row_product(row, w.T), lambda: one_row_product(row, w)]  # [1, n] @ [n, n] -> [1, n]
    for product in ways * 2:
        product()
    return [w.nbytes / timed(ways[turn % 2])[1] for turn in range(n_products)]


def one_row_product(row, w):
    """row @ w ([1, n_in] @ [n_in, n_out]) by the route a decoding step's products.matmul takes, without the note
    matmul makes of a big matrix for speed/routes.py, which times the routes on the matrices a model multiplied:
    noted, this 8192-wide matrix was taken for the biggest model's, and the routes of 355M to 1558M were chosen
    on it (one BLAS call a share from 8 rows on, where their own matrices' passes then cost twice the panels')."""
    kind = products.kind_of(row, w)
    return products.multiply(row, w, products.route_of(kind, 1), kind)


def sampler_seconds_per_token(model, prompt, n_new: int, rng) -> float:
    """Seconds per token of autoregressive_sampling(prompt, model, n_new) after the prompt is cached.

    The model has seen the prompt before (the caller's untimed call), so each of the n_new calls is a
    1-position pass (the first recomputes the prompt's last position, whose logits were not kept).
    """
    _, seconds = timed(lambda: autoregressive_sampling(prompt, model, n_new, rng))
    return seconds / n_new


@dataclass
class SizeResult:
    """What was measured for one model size (seconds, bytes per second)."""

    size: str
    weight_bytes: int
    block_bytes: int  # the block matrices' (the products of the breakdown)
    head_bytes: int  # wte's
    bandwidths: list = field(default_factory=list)  # every timed product of the bursts
    sampler_steps: list = field(default_factory=list)  # seconds per token, one per decoding run
    no_cache: float = None  # seconds per token, kv_cache=False, one run
    picogpt: float = None  # the same in picoGPT's setting
    breakdown: dict = field(default_factory=dict)  # {part: best seconds}
    pass_seconds: dict = field(default_factory=dict)  # {m: [seconds of an m-position pass]}
    routes: str = ""  # the routes the products took (speed/routes.py chose them before anything was timed)

    @property
    def floor(self):  # the strict floor: the weights over the best bandwidth
        return self.weight_bytes / max(self.bandwidths)

    @property
    def median_floor(self):
        return self.weight_bytes / float(np.median(self.bandwidths))


def measure_size(size, w, v, n_prompt, n_new, repeats, breakdown_rounds, r_max, r_repeats, r_context, no_cache,
                 rng):
    """Everything the tables need for one size; the weights are freed when it returns."""
    hparams = size_hparams(size)
    params = benchmark.measured_random_params(hparams, rng)
    result = SizeResult(model_name(size), n_bytes(params), n_bytes(block_matrices(params)), params["wte"].nbytes)
    prompt = rng.integers(0, hparams["n_vocab"], n_prompt).tolist()
    model = create_model_fn(params, hparams, temperature=0)
    if r_context > hparams["n_ctx"] - r_max:  # a small model's context may hold fewer: said, not hidden
        r_context = hparams["n_ctx"] - r_max
        print(f"{result.size}: r(m) after {r_context} cached tokens, all its context of {hparams['n_ctx']} holds "
              f"before {r_max} more", flush=True)
    model(rng.integers(0, hparams["n_vocab"], r_context + 1).tolist(), 1)  # as calibrate does, before timing:
    model(prompt, 1)  # the products of a long context's passes met, their routes chosen; then the prompt's pass
    result.routes = routes.text(routes.choose())

    # 1. decoding through the sampler, in turns with bursts of bandwidth products
    for _ in tqdm(range(repeats), desc=f"{result.size}: decoding", unit="run", leave=False):
        result.bandwidths += product_bandwidths(w, v, 4)
        result.sampler_steps.append(sampler_seconds_per_token(model, prompt, n_new, rng))
    cached_ids = autoregressive_sampling(prompt, model, n_new, rng)
    if no_cache:
        for name, weights in [("no_cache", params), ("picogpt", as_picogpt_runs_it(params))]:
            uncached = create_model_fn(weights, hparams, temperature=0, kv_cache=False)
            with tqdm(total=1, desc=f"{result.size}: {name.replace('_', ' ')} (one run)", leave=False) as bar:
                ids, seconds = timed(lambda: autoregressive_sampling(prompt, uncached, n_new, rng))
                bar.update()
            setattr(result, name, seconds / n_new)
            if ids != cached_ids:  # the decoders must agree, or the timings compare different work
                raise SystemExit(f"{result.size}: greedy decoding with and without the cache chose different tokens")

    # 2. one step, part by part (bests, timed in turns)
    result.breakdown = step_breakdown(model, params, cached_ids, n_prompt, breakdown_rounds, rng, hparams["n_head"])

    # 3. r(m): an m-position pass after the same r_context tokens (the model rolls its cache back to them)
    tokens = rng.integers(0, hparams["n_vocab"], r_context + r_max).tolist()
    model(tokens[: r_context + 1], 1)  # the cached text (not timed)
    result.pass_seconds = {m: [] for m in range(1, r_max + 1)}
    for _ in tqdm(range(r_repeats), desc=f"{result.size}: r(m)", unit="round", leave=False):
        for m in result.pass_seconds:  # m = 1 .. r_max in turns, so load bursts hit them alike
            result.pass_seconds[m].append(timed(lambda: model(tokens[: r_context + m], m))[1])
    return result


def step_breakdown(model, params, ids, n_prompt, rounds, rng, n_head) -> dict:
    """Best seconds of the parts of one greedy decoding step, each timed on its own, in turns.

    "sampler step" is autoregressive_sampling of one token, and "model step" the model function's call
    inside it: a 1-position pass after n_prompt + half the decoded tokens (the model keeps them cached, so
    each call recomputes only the last position). "block products", "LM head" and "attention" (one query's,
    every layer's, over as many keys: products.share_heads on a products.kv_buffer, as a pass) are the same work
    on random numbers, alone. "block products, in the step", "LM head, in the step" and "attention, in the
    step" are the same parts timed inside a model step (`timed_inside`), where each comes between the step's
    other work: those of the fastest such step ("model step, its parts timed"), so that the rest of the forward
    pass, what that step spends beyond the three and logits_to_probs, is of one instant, not a difference of
    bests taken at different ones. "model step, replayed" is the model step with those products and the
    attention `replayed`: the rest of the pass alone, no weight read. Unlike the table's runs (a mean over n_new
    tokens), these are single steps.
    """
    step_ids = ids[: n_prompt + (len(ids) - n_prompt) // 2 + 1]
    n_embd, n_keys = params["wte"].shape[1], len(step_ids)
    n_layer, head_dim = len(params["blocks"]), n_embd // n_head
    rows = {n: rng.standard_normal((1, n), dtype=np.float32) for n in (n_embd, 4 * n_embd)}  # [1, n_in]
    kv = products.kv_buffer((n_layer, 2, n_head, n_keys, head_dim))  # in the memory a cache's is made in
    kv[...] = rng.standard_normal(kv.shape, dtype=np.float32)  # each layer's keys and values its own
    q = rng.standard_normal((n_head, 1, head_dim), dtype=np.float32)  # [n_head, 1, head_dim]
    mask = np.zeros((1, n_keys), dtype=np.float32)  # [1, n_keys]: the new position sees every key
    matrices = block_matrices(params)
    wte = params["wte"]  # [n_vocab, n_embd]
    logits = rows[n_embd] @ wte.T  # [1, n_vocab]
    n_vocab = wte.shape[0]

    def sampler_work(settings):
        probs = _check_probs(logits_to_probs(logits, **settings), 1, n_vocab, "the model")
        return _sample(probs[0], rng)

    model(step_ids, 1)  # caches step_ids; each timed call then recomputes its last position
    parts = {
        "sampler step": lambda: autoregressive_sampling(step_ids[:-1], model, 1, rng),  # the same pass, + sampler
        "model step": lambda: model(step_ids, 1),
        "model step, replayed": replayed(lambda: model(step_ids, 1)),  # the rest of the pass alone
        "model step, its parts timed": timed_inside(lambda: model(step_ids, 1)),  # INSIDE, where the step makes them
        "block products": lambda: [products.matmul(rows[m.shape[0]], m) for m in matrices],  # as gpt2.linear
        "LM head": lambda: products.matmul(rows[n_embd], wte.T),  # as gpt2.gpt2
        "attention": lambda: [products.share_heads(attention, q, k, v, mask) for k, v in kv],  # as gpt2.mha
        "logits_to_probs": lambda: logits_to_probs(logits, temperature=0),
        "_check_probs + _sample": lambda: _sample(_check_probs(logits_to_probs(logits, 0), 1, n_vocab, "m")[0], rng),
        "sampled": lambda: sampler_work(SAMPLING_SETTINGS),
    }
    best = {name: float("inf") for name in [*parts, *(f"{part}, in the step" for part in INSIDE)]}
    for _ in tqdm(range(rounds), desc="one step, part by part", unit="round", leave=False):
        for name, part in parts.items():
            answer, seconds = timed(part)
            if name == "model step, its parts timed" and seconds < best[name]:  # the fastest such step, and ITS
                best.update({f"{inside}, in the step": s for inside, s in answer.items()})  # parts: one instant
            best[name] = min(best[name], seconds)
    best["_check_probs + _sample"] -= best["logits_to_probs"]  # it ran logits_to_probs first
    return best


def outermost_calls(on_call):
    """(matmul, share_heads): products.matmul and products.share_heads, each calling on_call(name, args, answer,
    seconds) after a call made outside any other (attention's scores, a product made inside share_heads, is not
    reported: it is part of the attention). `plugged` puts them where speed/plug.py calls them."""
    depth = 0  # calls under way, of either function

    def wrapped(name, function):
        def call(*args):
            nonlocal depth
            depth += 1
            start = time.perf_counter()
            try:
                answer = function(*args)
            finally:
                depth -= 1
            if depth == 0:
                on_call(name, args, answer, time.perf_counter() - start)
            return answer
        return call

    return wrapped("matmul", products.matmul), wrapped("share_heads", products.share_heads)


def plugged(matmul, share_heads, step):
    """step(), with these in place of products.matmul and products.share_heads (speed/plug.py calls them by name),
    the real ones put back after."""
    real = products.matmul, products.share_heads
    products.matmul, products.share_heads = matmul, share_heads
    try:
        return step()
    finally:
        products.matmul, products.share_heads = real


def replayed(step):
    """A function that makes step() again with its weight products and attention (products.matmul and
    products.share_heads, as plugged into gpt2 by speed/plug.py) answered from a record of one real step, in
    order: the rest of the pass alone, the same Python and NumPy work with no weight and no cached key read from
    memory. The answers are the real ones, so a replayed step returns what the real one did. The record is made
    now; a product inside another (attention's scores) is not recorded, since the replay never asks for it."""
    answers = []
    plugged(*outermost_calls(lambda name, args, answer, seconds: answers.append(answer)), step)
    if not answers:  # a plain model (create_model_fn(..., plain=True)): its products do not pass through here
        raise ValueError("replayed: the step made no product through speed.products; replay a model with speed "
                         "plugged in (create_model_fn's plain=False)")

    def replay():
        answer = iter(answers).__next__
        return plugged(lambda *args: answer(), lambda *args: answer(), step)

    return replay


INSIDE = ("block products", "LM head", "attention")  # the parts `timed_inside` times where a step makes them


def timed_inside(step):
    """A function that makes step() and returns {part: seconds} of INSIDE for that call: the time of its block
    products, of its LM head (products.kind_of "head") and of its attention (products.share_heads), each summed
    over the step's calls as they ran in it, between the step's other work, not back to back alone."""

    def run():
        seconds = dict.fromkeys(INSIDE, 0.0)

        def on_call(name, args, answer, elapsed):
            part = "attention" if name == "share_heads" else "LM head" if products.kind_of(*args) == "head" else \
                "block products"
            seconds[part] += elapsed

        plugged(*outermost_calls(on_call), step)
        return seconds

    return run


@dataclass
class ContextResult:
    size: str
    seconds: dict = field(default_factory=dict)  # {context length: [seconds of one decoding step]}


def measure_context(size, lengths, n_steps, rounds, rng) -> ContextResult:
    """Seconds of 1-position steps of the model function after each context length, in rounds over all the
    lengths (so that load bursts hit them alike). A step at length L decodes token L + j after L + j cached
    tokens, j = 0 .. n_steps - 1. Each round first fills the cache up to the longest length (not timed), then
    goes through the lengths from the longest down: each shorter one is a rollback, which is free."""
    hparams = size_hparams(size)
    params = benchmark.measured_random_params(hparams, rng)
    tokens = rng.integers(0, hparams["n_vocab"], max(lengths) + n_steps).tolist()
    if len(tokens) > hparams["n_ctx"]:
        raise SystemExit(f"context lengths up to {max(lengths)} + {n_steps} steps do not fit in n_ctx")
    model = create_model_fn(params, hparams, temperature=0)
    result = ContextResult(model_name(size), {length: [] for length in lengths})
    for _ in tqdm(range(rounds), desc=f"{result.size}: ms/token vs context", unit="round", leave=False):
        model(tokens, 1)  # fill the cache (not timed)
        for length in sorted(lengths, reverse=True):
            for j in range(n_steps):
                result.seconds[length].append(timed(lambda: model(tokens[: length + j + 1], 1))[1])
    return result


# ------------------------------------------------------------------------------------------------------------
# Everything measured, as JSON (--json), and back
# ------------------------------------------------------------------------------------------------------------


def to_json(results, context, run) -> dict:
    """The measurements as JSON-ready data: {"run": run, "sizes": [SizeResult's fields], "context": ...}.

    run says where and how they were made (machine, BLAS, threads, load averages, minutes, settings).
    from_json(json.loads(json.dumps(to_json(results, context, run)))) == (results, context, run).
    """
    return {"run": run, "sizes": [asdict(res) for res in results], "context": asdict(context) if context else None}


def write_json(path, data):
    """data into the file path, as JSON text (a function of its own: main's flag --json hides the module)."""
    write_atomically(path, json.dumps(data, indent=1))


def from_json(data) -> tuple:
    """(results, context, run) from to_json's data after a round trip through JSON text, which turned the
    integer keys (m of pass_seconds, the context lengths) into strings: they are integers again."""
    results = [SizeResult(**{**res, "pass_seconds": {int(m): s for m, s in res["pass_seconds"].items()}})
               for res in data["sizes"]]
    context = data["context"]
    if context is not None:
        context = ContextResult(context["size"], {int(n): s for n, s in context["seconds"].items()})
    return results, context, data["run"]


# ------------------------------------------------------------------------------------------------------------
# The command line
# ------------------------------------------------------------------------------------------------------------


def check_fits(sizes, context_size, lengths, n_prompt=16, n_new=32, r_max=16, context_steps=4):
    """A ValueError naming the flag where a run's tokens, r(m)'s passes after at least one cached token or the
    longest context length do not fit a size's context (main's defaults; make_readme_figures.py checks its
    --forward_* flags here before its run, not minutes into it)."""
    for size in sizes:
        n_ctx = size_hparams(size)["n_ctx"]
        if n_prompt + n_new > n_ctx:
            raise ValueError(f"--n_prompt {n_prompt} + --n_new {n_new} is more than {size}'s context of {n_ctx} tokens")
        if r_max >= n_ctx:
            raise ValueError(f"--r_max {r_max} must be less than {size}'s context of {n_ctx} tokens")
    n_ctx = size_hparams(context_size)["n_ctx"] if context_size else None  # (a folder's: its file, read once)
    if n_ctx is not None and max(lengths) + context_steps > n_ctx:
        raise ValueError(f"--context_lengths: {max(lengths)} + --context_steps {context_steps} is more than "
                         f"{context_size}'s context of {n_ctx} tokens")


def main(sizes="124M,355M", n_prompt: int = 16, n_new: int = 32, repeats: int = 7, no_cache_sizes="124M,355M",
         breakdown_rounds: int = 15, r_max: int = 16, r_repeats: int = 5, r_context: int = 512,
         context_size="124M",
         context_lengths="16,64,128,256,384,512,640,768,896,1000", context_steps: int = 4, context_rounds: int = 6,
         img_dir="plots", seed: int = 0, json=None, r_table_dir=None):
    """Print the table, the breakdown of a step, r(m) and ms/token against the context (see the docstring).

    Args:
        sizes: comma-separated model sizes (124M, 355M, 774M, 1558M) or model folders; "" for none (then only
            the context is measured).
        n_prompt: prompt length in tokens.
        n_new: tokens decoded per run.
        repeats: decoding runs per size, each right after a burst of 4 bandwidth products.
        no_cache_sizes: sizes also decoded without the cache, once each (slow; picoGPT's setting copies the
            weights).
        breakdown_rounds: rounds over the parts of a step (each part's best is kept).
        r_max: r(m) is measured for m = 1 .. r_max.
        r_repeats: rounds over all m for r(m).
        r_context: cached tokens before each pass of r(m) (as calibration.calibrate times it).
        context_size: the size for ms/token against the context length (None: skip).
        context_lengths: the context lengths, comma-separated.
        context_steps: steps timed per length per round.
        context_rounds: rounds over all lengths.
        img_dir: where the plots go, a folder made if need be (None: no plots).
        seed: the seed of the random weights and tokens.
        json: a file to write every measurement into (see to_json), for make_readme_figures.py.
        r_table_dir: a folder to write each size's r(m) into as the costs file K="auto" plans with
            (DIR/r_table_SIZE.json, calibration.save_costs' format: `python main.py --K auto --r_table FILE`).
    """
    with errors_as_one_line():  # every flag before any work: one line `error: ...`, exit code 2
        sizes = as_names(sizes, "--sizes", allow_empty=True)
        no_cache_sizes = as_names(no_cache_sizes, "--no_cache_sizes", allow_empty=True)
        n_prompt, n_new, repeats, breakdown_rounds, r_max, r_repeats, context_steps, context_rounds = (
            as_whole_number(value, flag, 1) for flag, value in (
                ("--n_prompt", n_prompt), ("--n_new", n_new), ("--repeats", repeats),
                ("--breakdown_rounds", breakdown_rounds), ("--r_max", r_max), ("--r_repeats", r_repeats),
                ("--context_steps", context_steps), ("--context_rounds", context_rounds)))
        seed = as_whole_number(seed, "--seed", 0, MAX_SEED)
        r_context = as_whole_number(r_context, "--r_context", 0)
        context_size = as_optional(context_size, as_text, "--context_size")
        lengths = as_whole_numbers(context_lengths, "--context_lengths") if context_size else []
        for size in sizes + no_cache_sizes + ([context_size] if context_size else []):
            check_memory_for([(size, size_hparams(size))])  # an unknown or too large size stops the run here
        check_fits(sizes, context_size, lengths, n_prompt=n_prompt, n_new=n_new, r_max=r_max,
                   context_steps=context_steps)
        if not sizes and not context_size:
            raise ValueError("nothing to measure: --sizes is empty and --context_size is none; give either")
        if r_table_dir is not None:
            r_table_dir = check_output_folder(r_table_dir, "--r_table_dir")
            if r_max > calibration.MAX_R_TABLE:
                raise ValueError(f"--r_max {r_max}: a costs file holds r(m) up to m = {calibration.MAX_R_TABLE}")
        img_dir = as_optional(img_dir, check_output_folder, "--img_dir")
        json = check_output_file(json, "--json")
        if r_table_dir is not None:  # the last check passed: make the folder now, not after the measurement
            r_table_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    load_start = load_average()
    print(f"{machine_description()}; load average {load_start:.2f} at the start", flush=True)
    rng = np.random.default_rng(seed)

    results = []
    if sizes:
        w = rng.standard_normal(BANDWIDTH_SHAPE, dtype=np.float32)  # [8192, 8192]
        w.flags.writeable = False  # as the model's weights: the products share it with the helper processes
        v = rng.standard_normal(BANDWIDTH_SHAPE[1], dtype=np.float32)  # [8192]
        for size in sizes:
            results.append(measure_size(size, w, v, n_prompt, n_new, repeats, breakdown_rounds, r_max, r_repeats,
                                        r_context, size in no_cache_sizes, rng))
        del w, v  # and every size's weights are gone: a helper holding only freed matrices is stopped (renew),
        second_core.renew()  # else the context model's first shared attention forks one that holds none
        print(f"Greedy decoding through the sampler (autoregressive_sampling, create_model_fn), {n_new} tokens after "
              f"a {n_prompt}-token prompt\n(prompt pass not timed), random weights, ms per token; best and median of "
              f"{repeats} runs. floor = weights / the best bandwidth\nof single float32 {BANDWIDTH_SHAPE[0]}x"
              f"{BANDWIDTH_SHAPE[1]} matrix-vector products timed in turns with the runs (GB/s: their range); "
              f"median's x floor\nuses the median bandwidth. no cache and picoGPT's setting: one run each.\n")
        print(main_table(results))
        print(f"\nOne step, part by part (the best of {breakdown_rounds} single steps or parts, timed in turns; "
              f"shares of the step through the sampler):\n")
        print(breakdown_table(results))
        print(f"(sampled: logits_to_probs + _check_probs + _sample at {SAMPLING_SETTINGS}, instead of greedy)")
        print(f"\nr(m) = time of an m-position pass / time of a 1-position pass, after {r_context} cached tokens "
              f"(the cache rolled back to them each time):\n")
        print(r_table(results))
        for res in results:
            print(f"{res.size}'s routes: {res.routes or 'the defaults'}")
        for res in results if r_table_dir else ():
            costs = calibration.costs_from_seconds(res.pass_seconds)  # medians of the same ratios, as calibrate takes
            path = calibration.save_costs(Path(r_table_dir) / f"r_table_{res.size}.json", costs)
            print(f"wrote {path}: {costs.summary()}")

    context = None
    if context_size:
        context = measure_context(context_size, lengths, context_steps, context_rounds, rng)
        print(f"\nA decoding step (model function, greedy) after each context length; {context_steps} steps per "
              f"length in each of {context_rounds} rounds:\n")
        print(context_table(context))

    minutes, load_end = (time.perf_counter() - start) / 60, load_average()
    print(f"\n{minutes:.1f} minutes; load average {load_end:.2f} at the end "
          f"(the 1-minute run-queue average; this run adds 1-2 to it, on 2 cores)")
    if json:
        run = {"machine": machine_description(), "blas": blas_description(), "threads": blas_threads(),
               "load_average": [load_start, load_end], "minutes": minutes,
               "settings": {"n_prompt": n_prompt, "n_new": n_new, "repeats": repeats,
                            "breakdown_rounds": breakdown_rounds, "r_repeats": r_repeats, "r_context": r_context,
                            "context_steps": context_steps, "context_rounds": context_rounds,
                            "bandwidth_shape": list(BANDWIDTH_SHAPE), "sampling": SAMPLING_SETTINGS}}
        write_json(json, to_json(results, context, run))
    plt = import_pyplot() if img_dir and (results or context) else None
    if plt is not None:
        img_dir = Path(img_dir)
        if results:
            plot_r_of_m(plt, results, img_dir / "forward_r_of_m.png")
        if context is not None:
            floor = next((res.floor for res in results if res.size == context.size), None)
            plot_context(plt, {threads_label(blas_threads()): context}, floor,
                         img_dir / "forward_ms_per_token_vs_context.png")
    return None


if __name__ == "__main__":
    run_script(main, sys.argv[1:], "tools/benchmark_forward.py")
