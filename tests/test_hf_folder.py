"""hf_folder.load_hf_gpt2 reads a Hugging Face GPT-2 folder (config.json + model.safetensors) into gpt2.py's layout.

tests/make_hf_fixture.py saved two random-weight models with `save_pretrained(..., safe_serialization=True)`,
in the two ways GPT-2 folders come:

    hf_folder_tiny/         from GPT2LMHeadModel: keys "transformer.wte.weight", "transformer.h.0.ln_1.weight", ...
    hf_folder_eight_heads/  from the base GPT2Model: keys "wte.weight", "h.0.ln_1.weight", ..., plus the causal
                            mask buffers "h.{i}.attn.bias" [1, 1, n_ctx, n_ctx], like the hub's gpt2 files

The same models' weights (in OpenAI's layout), inputs and Hugging Face's logits are in hf_gpt2_<name>.npz.
So the loader is right when it gives back exactly those weights, and gpt2 on them gives HF's logits.
"""

import numpy as np
import pytest
from conftest import FIXTURES_DIR
from test_gpt2 import HF_TOLERANCE, leaves, load_fixture, max_abs_diff

from loaders import hf_folder
from gpt2 import gpt2

FOLDER_NAMES = ["tiny", "eight_heads"]  # tests/fixtures/hf_folder_<name>/ and hf_gpt2_<name>.npz
HPARAM_KEYS = ["n_vocab", "n_ctx", "n_embd", "n_head", "n_layer"]


@pytest.mark.parametrize("name", FOLDER_NAMES)
def test_the_hparams_come_from_config_json(name):
    """vocab_size, n_positions, n_embd, n_head, n_layer in config.json -> OpenAI's hparams names."""
    hparams, _ = hf_folder.load_hf_gpt2(str(FIXTURES_DIR / f"hf_folder_{name}"))
    expected_hparams, _, _ = load_fixture(name)
    assert {key: int(hparams[key]) for key in HPARAM_KEYS} == expected_hparams


@pytest.mark.parametrize("name", FOLDER_NAMES)
def test_the_params_are_the_saved_weights_bit_for_bit_in_openai_layout(name):
    """Every array of the nested params equals the one the fixture script converted from HF, as float32.

    Nothing is computed on the way, so the comparison is exact; extra tensors in the file (the mask buffers
    "h.{i}.attn.bias" of the hub-like folder) are ignored.
    """
    _, params = hf_folder.load_hf_gpt2(str(FIXTURES_DIR / f"hf_folder_{name}"))
    _, expected_params, _ = load_fixture(name)
    loaded = dict(leaves(params))
    expected = dict(leaves(expected_params))
    assert sorted(loaded) == sorted(expected)
    for key, value in expected.items():
        assert loaded[key].dtype == np.float32, key
        assert loaded[key].shape == value.shape, key
        assert np.array_equal(loaded[key], value), key


@pytest.mark.parametrize("name", FOLDER_NAMES)
def test_gpt2_on_a_loaded_folder_gives_hugging_faces_logits(name):
    """load_hf_gpt2 + gpt2 reproduce GPT2LMHeadModel's logits for every saved input, to 1e-4."""
    hparams, params = hf_folder.load_hf_gpt2(str(FIXTURES_DIR / f"hf_folder_{name}"))
    _, _, cases = load_fixture(name)
    for ids, hf_logits, _ in cases:
        logits = gpt2(ids, **params, n_head=hparams["n_head"])
        assert logits.dtype == np.float32
        assert max_abs_diff(logits, hf_logits) <= HF_TOLERANCE
