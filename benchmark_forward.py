"""How fast is the forward pass? Greedy decoding against the memory-bandwidth floor, with and without the cache.

With a KV cache, each new token is one pass over ONE position. The arithmetic is small (~2 flops per weight)
but every weight must come from memory, so a decoding step cannot beat

    floor = bytes of the weights / memory bandwidth        (≈ 498 MB / 30 GB/s ≈ 17 ms for 124M)

This script times greedy decoding of --n_new tokens after a --n_prompt-token prompt, on random weights of the
real shapes, and measures the bandwidth in the same run, in turns with the decoding: float32 [8192, 8192] @
[8192] products (the operation a decoding step is made of, on a matrix 8x larger than the largest cache),
repeated until they have read as many bytes as a decoding run. The best of each is kept, so the floor comes
from the machine at its fastest, like the decoding time it is compared with. Decoding runs three ways:

    cached         this repo: prefill the prompt once, then one position per step (the prefill is included)
    no cache f32   the same gpt2() called picoGPT's way: the whole sequence again every step, all logits
    no cache f64   the same, with float64 activations, which is how picoGPT runs under NumPy 2: its gelu
                   multiplies by np.sqrt(2 / np.pi), a float64 scalar, so every activation after the first
                   MLP is float64 and each float64 @ float32 product first converts the weight matrix

Timings are noisy on a shared 2-core machine (bandwidth readings here moved between 24 and 53 GB/s from one
short measurement to the next): compare the ratios printed, which are measured in one run, rather than the
absolute times.

    python benchmark_forward.py                         # 124M and 355M shapes (about 2 minutes)
    python benchmark_forward.py --sizes 124M --n_new 8  # quicker
"""

import fire
import numpy as np

from gpt2 import HPARAMS, empty_cache, gpt2, random_params
from main import timed


def measure_bandwidth(w, v, n_bytes_to_read: int) -> float:
    """Bytes per second that float32 matrix-vector products w @ v stream, over about n_bytes_to_read bytes.

    w is far larger than any cache, so every product reads it from memory again. Repeating it until it has
    read as many bytes as a decoding run does makes the two measurements equally long, so that they see the
    same kinds of interference (this machine's bandwidth drifts from second to second).
    """
    n_products = max(1, round(n_bytes_to_read / w.nbytes))
    _, seconds = timed(lambda: [w @ v for _ in range(n_products)])
    return n_products * w.nbytes / seconds


def n_bytes(tree) -> int:
    """Bytes of all the arrays in a nested dict/list of parameters."""
    if isinstance(tree, dict):
        return sum(n_bytes(v) for v in tree.values())
    if isinstance(tree, list):
        return sum(n_bytes(v) for v in tree)
    return tree.nbytes


def as_picogpt_runs_it(tree):
    """The parameters as picoGPT computes with them under NumPy 2: row-major weights, as read from the
    checkpoint, and float64 activations from the start (a float64 wpe makes x float64 at the embedding)."""
    if isinstance(tree, dict):
        return {key: np.asarray(as_picogpt_runs_it(value), dtype=np.float64) if key == "wpe"
                else as_picogpt_runs_it(value) for key, value in tree.items()}
    if isinstance(tree, list):
        return [as_picogpt_runs_it(value) for value in tree]
    return np.ascontiguousarray(tree)


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


def main(sizes="124M,355M", n_prompt: int = 16, n_new: int = 32, repeats: int = 7, seed: int = 0):
    """Print ms/token of greedy decoding against the bandwidth floor, for random weights of each size.

    sizes: comma-separated model sizes (124M, 355M, 774M, 1558M).
    n_prompt: prompt length in tokens. n_new: tokens generated.
    repeats: runs of the cached decoding, each right after a bandwidth measurement, so that both see the
        machine in the same state (its bandwidth drifts); the best of each is kept. The slow no-cache runs
        are run once.
    """
    sizes = sizes.split(",") if isinstance(sizes, str) else list(sizes)  # fire turns "a,b" into a tuple
    unknown = [s for s in sizes if s not in HPARAMS]
    if unknown:
        raise SystemExit(f"unknown size(s) {unknown}: choose from {', '.join(HPARAMS)}")
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((8192, 8192), dtype=np.float32)  # [8192, 8192]: 256 MiB, 8x the largest cache
    v = rng.standard_normal(8192, dtype=np.float32)  # [8192]
    print(f"greedy decoding of {n_new} tokens after a {n_prompt}-token prompt, random weights, ms per token.")
    print("floor = bytes of the weights / bandwidth, where the bandwidth is that of float32 [8192, 8192] @ [8192]")
    print(f"products reading as many bytes as a decoding run ({n_new} x the weights), measured right before each")
    print(f"of the {repeats} cached runs; the best of each is kept.\n")
    header = ("size", "weights", "GB/s", "floor", "cached", "x floor", "(median)", "no cache f32", "speedup",
              "no cache f64", "speedup")
    print("{:>6} {:>9} {:>9} {:>7} {:>7} {:>8} {:>9} {:>13} {:>8} {:>13} {:>8}".format(*header))

    for size in sizes:
        hparams = HPARAMS[size]
        params = random_params(hparams, rng)
        prompt = rng.integers(0, hparams["n_vocab"], n_prompt).tolist()
        n_head = hparams["n_head"]

        bandwidths, cached_times = [], []
        for _ in range(repeats):  # interleaved: a bandwidth sample, then a decoding run
            bandwidths.append(measure_bandwidth(w, v, n_new * n_bytes(params)))
            ids_cached, seconds = timed(lambda: greedy_cached(prompt, params, n_head, n_new))
            cached_times.append(seconds / n_new)
        bandwidth, cached = max(bandwidths), min(cached_times)
        floor = n_bytes(params) / bandwidth  # seconds per token to read every weight once
        median_ratio = np.median(cached_times) / (n_bytes(params) / np.median(bandwidths))

        ids_f32, full_f32 = timed(lambda: greedy_full_recompute(prompt, params, n_head, n_new))
        ids_f64, full_f64 = timed(lambda: greedy_full_recompute(prompt, as_picogpt_runs_it(params), n_head, n_new))
        full_f32, full_f64 = full_f32 / n_new, full_f64 / n_new

        # the cached and uncached float32 decoders must agree, or the timings compare different work
        if ids_cached != ids_f32:
            raise SystemExit(f"{size}: cached and full-recompute greedy decoding chose different tokens")

        row = (size, f"{n_bytes(params) / 1e6:.0f} MB", f"{min(bandwidths) / 1e9:.0f}-{bandwidth / 1e9:.0f}",
               f"{floor * 1e3:.1f}", f"{cached * 1e3:.1f}", f"{cached / floor:.2f}x", f"{median_ratio:.2f}x",
               f"{full_f32 * 1e3:.0f}", f"{full_f32 / cached:.1f}x", f"{full_f64 * 1e3:.0f}",
               f"{full_f64 / cached:.1f}x")
        print("{:>6} {:>9} {:>9} {:>7} {:>7} {:>8} {:>9} {:>13} {:>8} {:>13} {:>8}".format(*row), flush=True)


if __name__ == "__main__":
    fire.Fire(main)
