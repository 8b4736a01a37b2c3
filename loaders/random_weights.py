"""Random GPT-2 weights of any size, for tests, tools and benchmarks: no download needed.

`random_params(hparams, rng)` gives what the loaders give (utils.load_encoder_hparams_and_params): float32,
read-only arrays in picoGPT's nested layout, the blocks' matrices stored column-major (speed/products.py says
why; the math does not care).
"""

import numpy as np


def random_params(hparams: dict, rng: np.random.Generator, std: float = 0.02) -> dict:
    """Random float32 weights of GPT-2's shapes in the loaders' layout (column-major matrices).

    Every term is non-trivial: biases are random and layer-norm gains and shifts are not 1 and 0, so a
    forward pass that forgets one of them gives different logits. Every array is read-only, as the loaders'
    are. Each block matrix is made column-major as it is drawn, so the memory needed is the weights plus one
    matrix (1558M: 6.2 GB, not twice that).
    """
    n_vocab, n_ctx, n_embd, n_layer = (hparams[k] for k in ("n_vocab", "n_ctx", "n_embd", "n_layer"))

    def constant(array):  # read-only, as the loaders' weights are (products.matmul shares only those)
        array.flags.writeable = False
        return array

    def normal(*shape, scale=std):
        return constant(scale * rng.standard_normal(shape, dtype=np.float32))  # float32: a Python float adapts

    def norm():
        return {"g": constant(1 + normal(n_embd, scale=0.1)), "b": normal(n_embd, scale=0.1)}

    def dense(n_in, n_out):  # column-major as it is made: one matrix at a time is copied, never all of them
        return {"w": constant(np.asfortranarray(normal(n_in, n_out))), "b": normal(n_out)}

    blocks = [
        {
            "ln_1": norm(),
            "attn": {"c_attn": dense(n_embd, 3 * n_embd), "c_proj": dense(n_embd, n_embd)},
            "ln_2": norm(),
            "mlp": {"c_fc": dense(n_embd, 4 * n_embd), "c_proj": dense(4 * n_embd, n_embd)},
        }
        for _ in range(n_layer)
    ]
    wte, wpe = normal(n_vocab, n_embd), normal(n_ctx, n_embd, scale=0.01)
    return {"wte": wte, "wpe": wpe, "blocks": blocks, "ln_f": norm()}  # in products.column_major's layout already
