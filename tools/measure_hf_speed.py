"""For scale: how fast Hugging Face `transformers` decodes GPT-2 on this CPU (a tool, not a test).

Read tools/benchmark_forward.py first. docs/BENCHMARKS.md compares its cached decoding with this peer: random weights of the real shapes,
greedy decoding of --n_new tokens after a --n_prompt-token prompt, with HF's KV cache, --threads torch
threads, the best of --repeats runs. make_readme_figures.py runs it with --json right after
benchmark_forward.py, with the same prompt length, tokens and thread count, when torch and transformers are
installed in the same environment:

    pip install torch==2.13.0 transformers
    python tools/measure_hf_speed.py --sizes 124M,355M --n_new 16 --json hf.json
"""

import json as json_module
import os
import sys
import time
from pathlib import Path

# `python tools/measure_hf_speed.py` puts tools/ first on the path: put the repository's root there too
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loaders.download import HPARAMS  # noqa: E402
from loaders.safe_files import write_atomically  # noqa: E402
from command_line.flags import as_whole_number, errors_as_one_line  # noqa: E402
from command_line.scripts import as_names, check_output_file, run_script  # noqa: E402


def ms_per_token(size, n_prompt, n_new, repeats):
    """The best of `repeats` greedy generations of n_new tokens, in ms per token, for random weights of size."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

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


def main(sizes="124M,355M", n_prompt=16, n_new=32, repeats=3, threads=os.cpu_count(), json=None):
    """Time HF transformers' greedy decoding for each size (see the module docstring).

    Args:
        sizes: comma-separated, of 124M, 355M, 774M, 1558M.
        n_prompt: the prompt's tokens.
        n_new: the tokens decoded.
        repeats: the runs (the best counts).
        threads: torch threads (default: one per core).
        json: a file to write the results into, for make_readme_figures.py.
    """
    with errors_as_one_line():  # every flag before any work (and before torch loads): one line, exit code 2
        sizes = as_names(sizes, "--sizes")
        unknown = [size for size in sizes if size not in HPARAMS]
        if unknown:
            raise ValueError(f"--sizes: unknown size(s) {unknown}: choose from {', '.join(HPARAMS)}")
        n_prompt, n_new, repeats, threads = (as_whole_number(value, flag, 1) for flag, value in (
            ("--n_prompt", n_prompt), ("--n_new", n_new), ("--repeats", repeats), ("--threads", threads)))
        for size in sizes:  # positions past the context have no position embedding (torch's IndexError)
            if n_prompt + n_new > HPARAMS[size]["n_ctx"]:
                raise ValueError(f"--n_prompt {n_prompt} + --n_new {n_new} is more than {size}'s context of "
                                 f"{HPARAMS[size]['n_ctx']} tokens")
        json_path = check_output_file(json, "--json")
        try:
            import torch
            import transformers
        except ImportError as error:
            raise ValueError(f"{error.name} is not installed: pip install torch==2.13.0 transformers") from None
    torch.set_num_threads(threads)
    results = {}
    for size in sizes:
        results[size] = ms_per_token(size, n_prompt, n_new, repeats)
        print(f"{size}: HF transformers {transformers.__version__} on torch {torch.__version__}, {threads} "
              f"threads, greedy, {n_new} tokens after {n_prompt}, KV cache: {results[size]:.1f} ms/token")
    if json_path:
        write_atomically(json_path, json_module.dumps({
            "ms_per_token": results, "transformers": transformers.__version__, "torch": torch.__version__,
            "threads": threads, "n_prompt": n_prompt, "n_new": n_new, "repeats": repeats}))


if __name__ == "__main__":
    run_script(main, sys.argv[1:], "tools/measure_hf_speed.py")
