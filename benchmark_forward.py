"""How fast is the forward pass? Greedy decoding against the memory-bandwidth floor, with and without the cache.

With a KV cache, each new token is one pass over ONE position. The arithmetic is small (~2 flops per weight)
but every weight must come from memory, so a decoding step cannot beat

    floor = bytes of the weights / memory bandwidth        (≈ 498 MB / 35 GB/s ≈ 14 ms for 124M)

This script measures the bandwidth in the same run (a large float32 matrix-vector product, the operation a
decoding step is made of), then times greedy decoding of --n_new tokens after a --n_prompt-token prompt, on
random weights of the real shapes, in three ways:

    cached         this repo: prefill the prompt once, then one position per step (the prefill is included)
    no cache f32   the same gpt2() called picoGPT's way: the whole sequence again every step, all logits
    no cache f64   the same, with float64 activations, which is how picoGPT runs under NumPy 2: its gelu
                   multiplies by np.sqrt(2 / np.pi), a float64 scalar, so every activation after the first
                   MLP is float64 and each float64 @ float32 product first converts the weight matrix

Timings are noisy on a shared 2-core machine: the cached run is repeated and the best kept; compare the
ratios printed, which are measured in one run, rather than the absolute times.

    python benchmark_forward.py                         # 124M and 355M shapes (about 2 minutes)
    python benchmark_forward.py --sizes 124M --n_new 8  # quicker
"""

import time

import fire
import numpy as np

from gpt2 import HPARAMS, empty_cache, gpt2, random_params


def timed(fn):
    """(what fn() returns, its wall time in seconds)."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def measure_bandwidth(rng: np.random.Generator, n: int = 8192, repeats: int = 10) -> float:
    """Bytes per second that a float32 matrix-vector product streams: the best of `repeats` runs."""
    w = rng.standard_normal((n, n), dtype=np.float32)  # [n, n]: 256 MiB for n = 8192, far beyond any cache
    v = rng.standard_normal(n, dtype=np.float32)  # [n]
    return w.nbytes / min(timed(lambda: w @ v)[1] for _ in range(repeats))


def n_bytes(tree) -> int:
    """Bytes of all the arrays in a nested dict/list of parameters."""
    if isinstance(tree, dict):
        return sum(n_bytes(v) for v in tree.values())
    if isinstance(tree, list):
        return sum(n_bytes(v) for v in tree)
    return tree.nbytes


def greedy_cached(prompt, params, n_head: int, n_new: int) -> list:
    """Greedy decoding with the KV cache: the prompt in one pass, then one new position per step."""
    ids = list(prompt)
    logits, past = gpt2(ids, **params, n_head=n_head, past=empty_cache(params["blocks"], n_head), n_logits=1)
    while True:
        ids.append(int(np.argmax(logits[-1])))
        if len(ids) == len(prompt) + n_new:  # the last token needs no pass of its own
            return ids
        logits, past = gpt2(ids[-1:], **params, n_head=n_head, past=past)  # [1, n_vocab]


def greedy_full_recompute(prompt, params, n_head: int, n_new: int) -> list:
    """Greedy decoding picoGPT's way: every step runs the whole sequence and computes every position's logits."""
    ids = list(prompt)
    for _ in range(n_new):
        logits = gpt2(ids, **params, n_head=n_head)  # [len(ids), n_vocab]
        ids.append(int(np.argmax(logits[-1])))
    return ids


def main(sizes="124M,355M", n_prompt: int = 16, n_new: int = 32, repeats: int = 3, seed: int = 0):
    """Print ms/token of greedy decoding against the bandwidth floor, for random weights of each size.

    sizes: comma-separated model sizes (124M, 355M, 774M, 1558M).
    n_prompt: prompt length in tokens. n_new: tokens generated.
    repeats: runs of the cached decoding; the fastest is kept (the slow no-cache runs are run once).
    """
    sizes = sizes.split(",") if isinstance(sizes, str) else list(sizes)  # fire turns "a,b" into a tuple
    unknown = [s for s in sizes if s not in HPARAMS]
    if unknown:
        raise SystemExit(f"unknown size(s) {unknown}: choose from {', '.join(HPARAMS)}")
    rng = np.random.default_rng(seed)
    bandwidth = measure_bandwidth(rng)
    print(f"memory bandwidth: {bandwidth / 1e9:.1f} GB/s (float32 [8192, 8192] @ [8192], best of 10)")
    print(f"greedy decoding of {n_new} tokens after a {n_prompt}-token prompt, random weights, ms per token:\n")
    header = ("size", "weights", "floor", "cached", "x floor", "no cache f32", "speedup", "no cache f64", "speedup")
    print("{:>6} {:>9} {:>7} {:>7} {:>8} {:>13} {:>8} {:>13} {:>8}".format(*header))

    for size in sizes:
        hparams = HPARAMS[size]
        params = random_params(hparams, rng)
        prompt = rng.integers(0, hparams["n_vocab"], n_prompt).tolist()
        n_head = hparams["n_head"]
        floor = n_bytes(params) / bandwidth  # seconds per token to read every weight once

        runs = [timed(lambda: greedy_cached(prompt, params, n_head, n_new)) for _ in range(repeats)]
        ids_cached, cached = runs[0][0], min(t for _, t in runs) / n_new
        ids_f32, full_f32 = timed(lambda: greedy_full_recompute(prompt, params, n_head, n_new))
        params_f64 = dict(params, wpe=params["wpe"].astype(np.float64))  # float64 activations from the start
        ids_f64, full_f64 = timed(lambda: greedy_full_recompute(prompt, params_f64, n_head, n_new))
        full_f32, full_f64 = full_f32 / n_new, full_f64 / n_new

        # the cached and uncached float32 decoders must agree, or the timings compare different work
        if ids_cached != ids_f32:
            raise SystemExit(f"{size}: cached and full-recompute greedy decoding chose different tokens")

        row = (size, f"{n_bytes(params) / 1e6:.0f} MB", f"{floor * 1e3:.1f}", f"{cached * 1e3:.1f}",
               f"{cached / floor:.2f}x", f"{full_f32 * 1e3:.0f}", f"{full_f32 / cached:.1f}x",
               f"{full_f64 * 1e3:.0f}", f"{full_f64 / cached:.1f}x")
        print("{:>6} {:>9} {:>7} {:>7} {:>8} {:>13} {:>8} {:>13} {:>8}".format(*row), flush=True)


if __name__ == "__main__":
    fire.Fire(main)
