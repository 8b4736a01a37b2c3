"""For scale: how fast Hugging Face `transformers` decodes GPT-2 on this CPU (a tool, not a test).

Read tools/benchmark_forward.py first. BENCHMARKS.md compares its cached decoding with this peer: random weights of the real shapes,
greedy decoding of --n_new tokens after a --n_prompt-token prompt, with HF's KV cache, --threads torch
threads, the best of --repeats runs. make_readme_figures.py runs it with --json right after
benchmark_forward.py, with the same prompt length, tokens and thread count, when torch and transformers are
installed in the same environment:

    pip install torch==2.13.0 transformers
    python tools/measure_hf_speed.py --sizes 124M,355M --n_new 16 --json hf.json
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

# `python tools/measure_hf_speed.py` puts tools/ first on the path: put the repository's root there too
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpt2 import HPARAMS  # noqa: E402
from safe_files import write_atomically  # noqa: E402


def ms_per_token(size, n_prompt, n_new, repeats):
    """The best of `repeats` greedy generations of n_new tokens, in ms per token, for random weights of size."""
    hparams = HPARAMS[size]
    config = GPT2Config(n_embd=hparams["n_embd"], n_head=hparams["n_head"], n_layer=hparams["n_layer"],
                        n_positions=hparams["n_ctx"], vocab_size=hparams["n_vocab"])
    model = GPT2LMHeadModel(config).eval()
    prompt = torch.randint(0, hparams["n_vocab"], (1, n_prompt), generator=torch.Generator().manual_seed(0))
    best = float("inf")
    with torch.inference_mode():
        for _ in range(repeats):
            start = time.perf_counter()
            model.generate(prompt, max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False, use_cache=True,
                           pad_token_id=0)
            best = min(best, time.perf_counter() - start)
    return best / n_new * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="124M,355M", help=f"comma-separated, of {', '.join(HPARAMS)}")
    parser.add_argument("--n_prompt", type=int, default=16)
    parser.add_argument("--n_new", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads (default: one per core)")
    parser.add_argument("--json", help="a file to write the results into, for make_readme_figures.py")
    args = parser.parse_args()
    sizes = [size for size in args.sizes.split(",") if size.strip()]
    unknown = [size for size in sizes if size not in HPARAMS]
    if unknown:
        raise SystemExit(f"unknown size(s) {unknown}: choose from {', '.join(HPARAMS)}")
    torch.set_num_threads(args.threads)
    results = {}
    for size in sizes:
        results[size] = ms_per_token(size, args.n_prompt, args.n_new, args.repeats)
        print(f"{size}: HF transformers {transformers.__version__} on torch {torch.__version__}, {args.threads} "
              f"threads, greedy, {args.n_new} tokens after {args.n_prompt}, KV cache: {results[size]:.1f} ms/token")
    if args.json:
        write_atomically(args.json, json.dumps({
            "ms_per_token": results, "transformers": transformers.__version__, "torch": torch.__version__,
            "threads": args.threads, "n_prompt": args.n_prompt, "n_new": args.n_new, "repeats": args.repeats}))


if __name__ == "__main__":
    main()
