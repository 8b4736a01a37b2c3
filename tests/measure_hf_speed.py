"""For scale: how fast Hugging Face `transformers` decodes GPT-2 on this machine's CPU (not part of the tests).

The README compares benchmark_forward.py's cached decoding with this peer: random weights of the real 124M and
355M shapes, greedy decoding of 32 tokens after a 16-token prompt, with HF's KV cache, 2 torch threads, the
best of 3 runs. torch and transformers are heavy, so they live in a throwaway virtual environment:

    python3 -m venv /tmp/venv-hf && /tmp/venv-hf/bin/pip install torch==2.13.0 transformers
    /tmp/venv-hf/bin/python tests/measure_hf_speed.py
    python benchmark_forward.py --repeats 3          # then this repository, right after, on the same machine
"""

import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

SHAPES = {"124M": (768, 12, 12), "355M": (1024, 16, 24)}  # n_embd, n_head, n_layer


def main(n_prompt=16, n_new=32, repeats=3):
    torch.set_num_threads(2)
    for size, (n_embd, n_head, n_layer) in SHAPES.items():
        model = GPT2LMHeadModel(GPT2Config(n_embd=n_embd, n_head=n_head, n_layer=n_layer)).eval()
        prompt = torch.randint(0, 50257, (1, n_prompt), generator=torch.Generator().manual_seed(0))
        best = float("inf")
        with torch.inference_mode():
            for _ in range(repeats):
                start = time.perf_counter()
                model.generate(prompt, max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False,
                               use_cache=True, pad_token_id=0)
                best = min(best, time.perf_counter() - start)
        print(f"{size}: HF transformers on torch {torch.__version__}, greedy, {n_new} tokens after {n_prompt}, "
              f"KV cache: {best / n_new * 1e3:.1f} ms/token")


if __name__ == "__main__":
    main()
