"""Read a Hugging Face GPT-2 folder (`load_hf_gpt2`): config.json + model.safetensors, with NumPy alone.

Read loaders/weights.py first (the checks every reader shares); utils.py calls this file for a folder in Hugging
Face's layout, and loaders/hub.py is where such a folder comes from when a model is named by its Hub name.

A safetensors file is an 8-byte little-endian header length N, then N bytes of JSON that give each tensor's
dtype, shape and `data_offsets` (begin, end) in the bytes that follow the header, then those bytes. The
tensors' names are Hugging Face's ("h.0.attn.c_attn.weight"); `hf_name_to_openai_name` turns them into
OpenAI's ("h0/attn/c_attn/w"), and config.json's settings into OpenAI's hparams (`read_hf_hparams`).
(This file is not called safetensors.py: that name would hide the pip package of the same name.)
"""

import json
import math
from pathlib import Path

import numpy as np

from loaders.weights import (MAX_DIMENSION, check_hparams, check_names_and_shapes, check_tensors_tile, checkpoint_error, file_errors_as_checkpoint_errors, nest_params, read_json_file, read_tensor, reading_bar, stored_by_column)

from loaders.matrix_memory import for_block_matrices
from loaders.messages import shown

# safetensors dtype -> how its bytes are stored. BF16 has no NumPy dtype: it is the top 16 bits of a float32.
SAFETENSORS_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}

# Settings of a Hugging Face GPT-2 config under which its model computes what gpt2.py computes.
HF_CONFIG_ASSUMED = {
    "model_type": "gpt2",
    "activation_function": "gelu_new",  # the tanh approximation of GELU, as in OpenAI's code
    "layer_norm_epsilon": 1e-5,
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "reorder_and_upcast_attn": False,
}


MAX_HEADER_BYTES = 100 * 2**20  # safetensors' own limit on the JSON header


@file_errors_as_checkpoint_errors
def read_safetensors_header(path):
    """The checked header of a .safetensors file: ({name: (dtype, shape, begin, end)}, where the data starts).

    Layout: 8 bytes little-endian N, then N bytes of JSON like
    {"wte.weight": {"dtype": "F32", "shape": [50257, 768], "data_offsets": [0, 154389504]}, ...,
     "__metadata__": {...}}, then the tensors' bytes; data_offsets count from the end of the JSON.
    Every rule of the format is checked before any tensor is read: a JSON object at the root, each entry an
    object with a supported dtype, a shape of whole numbers and two whole-number offsets whose span holds the
    shape exactly; the tensors tile the data from its first byte to the end of the file (no overlap, no hole).
    """
    path = Path(path)
    if not path.is_file():
        raise checkpoint_error(path, "file not found")
    file_size = path.stat().st_size
    with open(path, "rb") as file:
        first_8 = file.read(8)
        header_length = int.from_bytes(first_8, "little") if len(first_8) == 8 else -1
        if not 0 <= header_length <= min(file_size - 8, MAX_HEADER_BYTES):
            raise checkpoint_error(path, "not a safetensors file (no valid header length in its first 8 bytes)")
        header_bytes = file.read(header_length)
    try:
        header = json.loads(header_bytes, parse_constant=_no_json_constants)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise checkpoint_error(path, f"not a safetensors file (its header is not JSON: {error})") from None
    if not isinstance(header, dict):
        raise checkpoint_error(path, f"its header is a JSON {type(header).__name__}, not an object")

    data_start, data_size = 8 + header_length, file_size - 8 - header_length
    entries = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not (isinstance(info, dict) and {"dtype", "shape", "data_offsets"} <= info.keys()):
            raise checkpoint_error(path, f"its header entry for {shown(name)} is not an object with dtype, shape and "
                                          f"data_offsets")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if not isinstance(dtype, str) or dtype not in SAFETENSORS_DTYPES:
            raise checkpoint_error(path, f"{shown(name)} has dtype {shown(dtype)}; supported: {list(SAFETENSORS_DTYPES)}")
        if not (isinstance(shape, list) and len(shape) <= 8 and all(_whole(d, MAX_DIMENSION) for d in shape)):
            raise checkpoint_error(path, f"{shown(name)} has shape {shown(shape)}: expected a list of whole numbers")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_whole(o, data_size + 1) for o in offsets)):
            raise checkpoint_error(path, f"{shown(name)} has data_offsets {shown(offsets)}: expected [begin, end] "
                                         f"within the {data_size} bytes of data (a tensor that runs past the end, or worse)")
        begin, end = offsets
        if end - begin != np.dtype(SAFETENSORS_DTYPES[dtype]).itemsize * math.prod(shape):
            raise checkpoint_error(path, f"{shown(name)}: bytes {begin} .. {end} do not hold a {dtype} tensor of shape "
                                         f"{shape}")
        entries[name] = (dtype, shape, begin, end)
    check_tensors_tile([(name, begin, end) for name, (_, _, begin, end) in entries.items()], path)
    last_end = max((end for _, _, _, end in entries.values()), default=0)
    if last_end != data_size:
        raise checkpoint_error(path, f"its tensors end at byte {last_end} of the data, but the file has {data_size}")
    return entries, data_start


def _whole(value, limit):
    """value is an int (not a bool), 0 <= value < limit."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < limit


def _no_json_constants(constant):
    raise ValueError(f"{constant} is not a number a safetensors header can hold")


@file_errors_as_checkpoint_errors
def read_safetensors(path, column_major=lambda name: False):
    """Read a .safetensors file into {name: float32 array} with NumPy alone (the header: read_safetensors_header).

    Each tensor goes straight from the file into its final array (`read_tensor`), column-major where
    column_major(name) says so. F16 and BF16 are widened to float32.
    """
    entries, data_start = read_safetensors_header(path)
    arrays = {}
    with open(path, "rb") as file:
        for name, (dtype, shape, begin, _end) in sorted(entries.items(), key=lambda item: item[1][2]):
            arrays[name] = read_tensor(file, data_start + begin, shape, SAFETENSORS_DTYPES[dtype], path,
                                       column_major=len(shape) == 2 and column_major(name))
    return arrays


def hf_name_to_openai_name(hf_name):
    """Translate a Hugging Face GPT-2 parameter name into the checkpoint's (picoGPT's) name.

    "transformer.h.3.attn.c_attn.weight" -> "h3/attn/c_attn/w", "h.0.ln_1.weight" -> "h0/ln_1/g",
    "wte.weight" -> "wte". HF's Conv1D keeps weights as [n_in, n_out], as OpenAI did: no transpose needed.
    Returns None for the names that are not parameters of the model: the causal-mask buffers
    `attn.bias` / `attn.masked_bias`, and `lm_head.weight`, which is tied to (a copy of) wte.
    """
    name = hf_name.removeprefix("transformer.")
    parts = name.split(".")
    if name == "lm_head.weight" or parts[-2:] in (["attn", "bias"], ["attn", "masked_bias"]):
        return None
    if name in ("wte.weight", "wpe.weight"):
        return parts[0]
    if parts[0] == "h" and len(parts) > 2:
        parts = [f"h{parts[1]}"] + parts[2:]
    if len(parts) < 2:
        return name  # not a GPT-2 parameter: check_names_and_shapes reports it as unexpected
    *modules, kind = parts
    leaf = {"weight": "g" if modules[-1].startswith("ln") else "w", "bias": "b"}.get(kind, kind)
    return "/".join(modules + [leaf])


def read_hf_hparams(config_path):
    """config.json -> OpenAI's hparams, after checking the settings gpt2.py assumes (HF_CONFIG_ASSUMED)."""
    config_path = Path(config_path)
    if not config_path.is_file():
        raise checkpoint_error(config_path, "file not found")
    config = read_json_file(config_path, "GPT-2 config.json")
    if not isinstance(config, dict):
        raise checkpoint_error(config_path, f"not a GPT-2 config.json (a JSON {type(config).__name__})")
    missing = [key for key in ("vocab_size", "n_embd", "n_head", "n_layer") if key not in config]
    if missing:
        raise checkpoint_error(config_path, f"not a GPT-2 config.json (no {', '.join(missing)})")
    for key, assumed in HF_CONFIG_ASSUMED.items():
        if key in config and config[key] != assumed:
            raise checkpoint_error(config_path, f"{key} is {shown(config[key])}, but this GPT-2 implements {assumed!r}")
    n_ctx = config.get("n_positions", config.get("n_ctx"))
    hparams = {"n_vocab": config["vocab_size"], "n_ctx": n_ctx, "n_embd": config["n_embd"],
               "n_head": config["n_head"], "n_layer": config["n_layer"]}
    return check_hparams(hparams, config_path)


@file_errors_as_checkpoint_errors
def load_hf_gpt2(model_dir, layouts=None):
    """Read a Hugging Face GPT-2 folder (config.json + model.safetensors) -> (hparams, params).

    Works for folders written by GPT2LMHeadModel.save_pretrained (names start with "transformer.") and for
    the hub's gpt2 files (no prefix). F32, F16 and BF16 weights all come out float32, each matrix in its
    layout ({"blocks": layout, "head": layout}: speed/layouts.py; None: the default) as it is read.
    """
    model_dir = Path(model_dir)
    hparams = read_hf_hparams(model_dir / "config.json")
    safetensors_path = model_dir / "model.safetensors"
    entries, data_start = read_safetensors_header(safetensors_path)
    names = {hf_name: hf_name_to_openai_name(hf_name) for hf_name in entries}  # None: not a parameter
    shapes = {name: entries[hf_name][1] for hf_name, name in names.items() if name is not None}
    check_names_and_shapes(shapes, hparams, safetensors_path)  # before a single tensor is read
    arrays, memory = {}, for_block_matrices(shapes, layouts)
    total = sum(end - begin for hf_name, (_, _, begin, end) in entries.items() if names[hf_name] is not None)
    with open(safetensors_path, "rb") as file, reading_bar(total, safetensors_path) as bar:
        for hf_name, name in names.items():
            if name is not None:
                dtype, shape, begin, end = entries[hf_name]
                arrays[name] = read_tensor(file, data_start + begin, shape, SAFETENSORS_DTYPES[dtype],
                                           safetensors_path, column_major=stored_by_column(name, layouts),
                                           out=memory.empty(name))
                bar.update(end - begin)
    memory.seal()
    return hparams, nest_params(arrays, hparams["n_layer"])
