"""Loading weights from a Hugging Face folder (safetensors, by hand) and through the main entry point.

Read utils.py and loaders/weights.py first: these tests are its specification.

The safetensors files here are written by tools/model_files.py (`write_safetensors`, following the format's
spec: 8-byte little-endian header length, JSON header, raw bytes), from random parameters in OpenAI's
names, so the expected values are known exactly; so are TensorFlow checkpoints (`write_tf_checkpoint`, a
LevelDB table of hand-written protobufs). The entry point is tested on folders with GPT-2's tokenizer, whose
models therefore have n_vocab=50257 (a tokenizer the model does not match is refused), and on a folder
"downloaded" from a local HTTP server.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_download import FlakyFileServer

from loaders.download import MODEL_SIZES
from loaders.hf_folder import hf_name_to_openai_name, load_hf_gpt2
from loaders.tf_checkpoint import load_gpt2_params_from_tf_ckpt
from utils import load_encoder_hparams_and_params
from loaders.weights import CheckpointError, gpt2_param_shapes
from loaders.download import HPARAMS as DOWNLOAD_HPARAMS
from tools.model_files import hf_config, hf_name, write_safetensors, write_tf_checkpoint

TF_CKPT_DIR = Path(__file__).resolve().parent / "fixtures" / "tf_ckpt"
HPARAMS = {"n_vocab": 50, "n_ctx": 16, "n_embd": 8, "n_head": 2, "n_layer": 2}
GPT2_VOCAB = {**HPARAMS, "n_vocab": 50257}  # the size of GPT-2's tokenizer, for the tests that load one


def random_flat_params(hparams, rng):
    """{"h0/attn/c_attn/w": array, ...}: random float32 values for every GPT-2 parameter."""
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in gpt2_param_shapes(hparams).items()}


def to_stored_dtype(array, dtype):
    """What `array` becomes when stored as `dtype` and read back as float32 (BF16: the top 16 bits)."""
    if dtype == "F16":
        return array.astype(np.float16).astype(np.float32)
    if dtype == "BF16":
        return (array.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    return array


def write_hf_folder(folder, flat_params, dtype="F32", prefix="transformer.", extra=None, config_changes=None):
    """A Hugging Face GPT-2 folder: config.json + model.safetensors (+ the buffers HF saves along)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {**hf_config(HPARAMS), **(config_changes or {})}
    (folder / "config.json").write_text(json.dumps(config))
    tensors = {hf_name(name, prefix): array for name, array in flat_params.items()}
    write_safetensors(folder / "model.safetensors", {**tensors, **(extra or {})}, dtype)
    return folder


def assert_params_equal(params, flat_expected):
    for name, expected in flat_expected.items():
        first, *rest = name.split("/")  # "h1/attn/c_attn/w" -> params["blocks"][1]["attn"]["c_attn"]["w"]
        array = params["blocks"][int(first[1:])] if first[1:].isdigit() else params[first]
        for key in rest:
            array = array[key]
        assert array.dtype == np.float32, name
        assert np.array_equal(array, expected), name


# --- Hugging Face folders ----------------------------------------------------------------------------------


def test_hf_names_translate_to_the_checkpoint_names():
    assert hf_name_to_openai_name("transformer.h.3.attn.c_attn.weight") == "h3/attn/c_attn/w"
    assert hf_name_to_openai_name("h.0.ln_1.weight") == "h0/ln_1/g"
    assert hf_name_to_openai_name("h.11.mlp.c_proj.bias") == "h11/mlp/c_proj/b"
    assert hf_name_to_openai_name("transformer.ln_f.bias") == "ln_f/b"
    assert hf_name_to_openai_name("wte.weight") == "wte"
    assert hf_name_to_openai_name("transformer.wpe.weight") == "wpe"
    assert hf_name_to_openai_name("h.0.attn.bias") is None  # the causal mask buffer
    assert hf_name_to_openai_name("h.0.attn.masked_bias") is None
    assert hf_name_to_openai_name("lm_head.weight") is None  # tied to wte
    assert all(hf_name_to_openai_name(hf_name(name, "")) == name for name in gpt2_param_shapes(HPARAMS))


def test_an_f32_folder_saved_by_GPT2LMHeadModel_loads_exactly(tmp_path):
    """Names prefixed "transformer.", plus the mask buffers and a tied lm_head.weight, which are ignored."""
    flat = random_flat_params(HPARAMS, np.random.default_rng(0))
    extra = {
        "transformer.h.0.attn.bias": np.ones((1, 1, 16, 16), np.float32),
        "transformer.h.1.attn.masked_bias": np.full((), -1e4, np.float32),
        "lm_head.weight": flat["wte"],
    }
    folder = write_hf_folder(tmp_path / "hf", flat, "F32", "transformer.", extra)

    hparams, params = load_hf_gpt2(folder)

    assert hparams == HPARAMS
    assert_params_equal(params, flat)
    assert len(params["blocks"]) == 2
    assert params["blocks"][1]["mlp"]["c_fc"]["w"].shape == (8, 32)  # [n_in, n_out], as in OpenAI's layout


@pytest.mark.parametrize("dtype", ["F16", "BF16"])
def test_half_precision_weights_come_out_as_float32(tmp_path, dtype):
    """Hub-style names (no prefix); each value is the float32 that the half-precision one stands for."""
    flat = random_flat_params(HPARAMS, np.random.default_rng(1))
    folder = write_hf_folder(tmp_path / "hf", flat, dtype, prefix="")

    _hparams, params = load_hf_gpt2(folder)

    assert_params_equal(params, {name: to_stored_dtype(array, dtype) for name, array in flat.items()})
    assert not np.array_equal(params["wte"], flat["wte"])  # the rounding did happen: the test can tell


def test_a_safetensors_file_missing_a_tensor_is_a_CheckpointError_naming_it(tmp_path):
    flat = random_flat_params(HPARAMS, np.random.default_rng(2))
    del flat["h1/mlp/c_fc/b"]
    folder = write_hf_folder(tmp_path / "hf", flat)
    with pytest.raises(CheckpointError, match="h1/mlp/c_fc/b") as error:
        load_hf_gpt2(folder)
    assert str(folder / "model.safetensors") in str(error.value)


def test_a_truncated_safetensors_file_is_a_CheckpointError_naming_it(tmp_path):
    folder = write_hf_folder(tmp_path / "hf", random_flat_params(HPARAMS, np.random.default_rng(3)))
    path = folder / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-4])
    with pytest.raises(CheckpointError, match="runs past the end") as error:
        load_hf_gpt2(folder)
    assert str(path) in str(error.value)


@pytest.mark.parametrize(
    "damage, problem",
    [("delete", "file not found"), ("not json", "not a GPT-2 config.json"), ("no n_layer", "n_layer")],
)
def test_a_missing_or_malformed_config_json_is_a_CheckpointError_naming_it(tmp_path, damage, problem):
    folder = write_hf_folder(tmp_path / "hf", random_flat_params(HPARAMS, np.random.default_rng(5)))
    config_path = folder / "config.json"
    if damage == "delete":
        config_path.unlink()
    elif damage == "not json":
        config_path.write_text("{ this is not json")
    else:
        config = json.loads(config_path.read_text())
        del config["n_layer"]
        config_path.write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=problem) as error:
        load_hf_gpt2(folder)
    advice = "Copy it into that folder" if damage == "delete" else "make or copy it again"  # a folder of one's own
    assert str(config_path) in str(error.value) and advice in str(error.value)


def test_a_config_for_a_different_activation_is_refused(tmp_path):
    flat = random_flat_params(HPARAMS, np.random.default_rng(4))
    folder = write_hf_folder(tmp_path / "hf", flat, config_changes={"activation_function": "relu"})
    with pytest.raises(ValueError, match="activation_function"):
        load_hf_gpt2(folder)


# --- the entry point ------------------------------------------------------------------------------------------


def copy_tokenizer(release_124M_dir, folder, hf_names=False):
    """Put OpenAI's tokenizer files into `folder`: as released, or under Hugging Face's names."""
    names = {"encoder.json": "vocab.json", "vocab.bpe": "merges.txt"} if hf_names else {}
    for name in ("encoder.json", "vocab.bpe"):
        shutil.copy(release_124M_dir / name, folder / names.get(name, name))


def test_a_folder_in_openais_layout_gives_encoder_hparams_and_params(release_124M_dir, tmp_path):
    flat = random_flat_params(GPT2_VOCAB, np.random.default_rng(4))
    folder = tmp_path / "tiny"
    write_tf_checkpoint(folder, flat, GPT2_VOCAB)
    copy_tokenizer(release_124M_dir, folder)

    encoder, hparams, params = load_encoder_hparams_and_params(str(folder))

    assert encoder.encode("Hello world") == [15496, 995]  # GPT-2's ids, as tiktoken's "gpt2" gives them
    assert hparams == GPT2_VOCAB
    assert_params_equal(params, flat)


def test_a_tokenizer_with_more_symbols_than_the_model_has_rows_is_refused_before_the_weights_are_read(
        release_124M_dir, tmp_path):
    """The TF fixture has n_vocab=50; GPT-2's tokenizer has 50,257 symbols: an id like 15496 ("Hello") would
    have no row in wte. The weights are never read (the data file is emptied to show it)."""
    folder = tmp_path / "tiny"
    shutil.copytree(TF_CKPT_DIR, folder)
    copy_tokenizer(release_124M_dir, folder)
    (folder / "model.ckpt.data-00000-of-00001").write_bytes(b"")
    with pytest.raises(CheckpointError, match="50257 symbols but hparams.json says n_vocab=50"):
        load_encoder_hparams_and_params(str(folder))


def test_a_folder_in_hugging_faces_layout_gives_encoder_hparams_and_params(release_124M_dir, tmp_path):
    flat = random_flat_params(GPT2_VOCAB, np.random.default_rng(5))
    folder = write_hf_folder(tmp_path / "hf", flat, config_changes={"vocab_size": GPT2_VOCAB["n_vocab"]})
    copy_tokenizer(release_124M_dir, folder, hf_names=True)

    encoder, hparams, params = load_encoder_hparams_and_params(str(folder))

    assert encoder.decode([15496, 995]) == "Hello world"
    assert hparams == GPT2_VOCAB
    assert_params_equal(params, flat)


def test_a_model_size_downloads_what_is_missing_then_loads_it(release_124M_dir, tmp_path, monkeypatch):
    """A local server plays OpenAI's bucket, serving a tiny TF checkpoint with GPT-2's vocabulary as "124M"."""
    monkeypatch.setitem(DOWNLOAD_HPARAMS, "124M", GPT2_VOCAB)  # the tiny model plays 124M
    flat = random_flat_params(GPT2_VOCAB, np.random.default_rng(6))
    write_tf_checkpoint(tmp_path / "served", flat, GPT2_VOCAB)
    release = {name: (tmp_path / "served" / name).read_bytes()
               for name in ("checkpoint", "hparams.json", "model.ckpt.index", "model.ckpt.data-00000-of-00001")}
    release["model.ckpt.meta"] = b"(the graph; never read)"
    release["encoder.json"] = (release_124M_dir / "encoder.json").read_bytes()
    release["vocab.bpe"] = (release_124M_dir / "vocab.bpe").read_bytes()
    models_dir = tmp_path / "models"
    server = FlakyFileServer({f"/124M/{name}": data for name, data in release.items()}, models_dir / "124M")
    server.thread.start()
    try:
        monkeypatch.setenv("GPT2_BASE_URL", server.url)
        encoder, hparams, params = load_encoder_hparams_and_params("124M", str(models_dir))
        _, _, params_again = load_encoder_hparams_and_params("124M", str(models_dir))
    finally:
        server.http.shutdown()
        server.http.server_close()
    assert len(server.requests) == 7  # the second call found every file in place
    assert encoder.encode("Hello world") == [15496, 995]
    assert hparams == GPT2_VOCAB
    assert_params_equal(params, flat)
    assert np.array_equal(params_again["wpe"], params["wpe"])


def test_anything_else_is_a_ValueError_listing_the_sizes_and_mentioning_folders(tmp_path):
    with pytest.raises(ValueError) as error:
        load_encoder_hparams_and_params("gpt-2-medium!", str(tmp_path))  # gpt2-medium is a Hub name now
    for size in MODEL_SIZES:
        assert size in str(error.value)
    assert "local folder" in str(error.value)


def test_a_folder_without_weights_is_a_ValueError_saying_what_it_should_hold(tmp_path):
    with pytest.raises(ValueError, match="hparams.json.*config.json"):
        load_encoder_hparams_and_params(str(tmp_path))


def test_both_layouts_load_block_matrices_column_major_and_embeddings_row_major():
    """The readers put each tensor in its final layout as they read it (products.column_major's layout): the blocks'
    weight matrices column by column, wte and wpe row by row; nothing is converted afterwards."""
    hf_folder = Path(__file__).resolve().parent / "fixtures" / "hf_folder_tiny"
    tf_params = load_gpt2_params_from_tf_ckpt(TF_CKPT_DIR / "model.ckpt", HPARAMS)
    for params in (tf_params, load_hf_gpt2(hf_folder)[1]):
        for block in params["blocks"]:
            for matrix in (block["attn"]["c_attn"]["w"], block["attn"]["c_proj"]["w"], block["mlp"]["c_fc"]["w"],
                           block["mlp"]["c_proj"]["w"]):
                assert matrix.flags.f_contiguous and matrix.dtype == np.float32
        assert params["wte"].flags.c_contiguous and params["wpe"].flags.c_contiguous
