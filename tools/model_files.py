"""GPT-2 weights written in the two formats the loaders read: a Hugging Face folder and OpenAI's TF checkpoint.

Read loaders/hf_folder.py and loaders/tf_checkpoint.py first: these are their writers, by hand with NumPy from
each format's spec, so that a model of any shape can be made without torch or TensorFlow.

- A Hugging Face folder: config.json, and model.safetensors (8 bytes little-endian header length, a JSON header
  naming each tensor's dtype, shape and byte range, padded to a multiple of 8, then the raw bytes).
- OpenAI's checkpoint: hparams.json, checkpoint, model.ckpt.index (a LevelDB table whose values are protobufs
  saying where each tensor's float32 bytes are) and model.ckpt.data-00000-of-00001 (the bytes).

    write_hf_folder(Path("/tmp/tiny"), random_params(hparams, rng), hparams, tokenizer_folder())

tools/random_models.py writes the README's sample-run models with it, tools/measure_loading.py the files it
loads; the tests write the models they load with it (tests/test_main.py, tests/test_load.py), and
tests/make_bad_inputs.py damages tables written by `table`.
"""

import json
import shutil
from pathlib import Path

import numpy as np

from loaders import tf_checkpoint

# ------------------------------------------------------------------------------------------------------------
# Names: picoGPT's nested params, OpenAI's flat names, Hugging Face's names
# ------------------------------------------------------------------------------------------------------------


def flat_params(params):
    """{"h0/attn/c_attn/w": array, "wte": array, ...}: picoGPT's nested params in OpenAI's names."""
    out = {"wte": params["wte"], "wpe": params["wpe"], "ln_f/g": params["ln_f"]["g"], "ln_f/b": params["ln_f"]["b"]}
    for i, block in enumerate(params["blocks"]):
        for module, leaves in block.items():
            for name, value in leaves.items():
                if isinstance(value, dict):
                    out.update({f"h{i}/{module}/{name}/{leaf}": v for leaf, v in value.items()})
                else:
                    out[f"h{i}/{module}/{name}"] = value
    return out


def hf_name(openai_name, prefix):
    """"h3/attn/c_attn/w" -> prefix + "h.3.attn.c_attn.weight": the inverse of hf_name_to_openai_name."""
    *modules, leaf = openai_name.split("/")
    if modules and modules[0][0] == "h" and modules[0][1:].isdigit():
        modules = ["h", modules[0][1:]] + modules[1:]
    kind = "bias" if leaf == "b" else "weight"
    return prefix + ".".join(modules + ([kind] if modules else [leaf, "weight"]))


# ------------------------------------------------------------------------------------------------------------
# A Hugging Face folder
# ------------------------------------------------------------------------------------------------------------


def tensor_bytes(array, dtype):
    """The bytes of a float32 array stored as "F32", "F16" or "BF16" (the top 16 bits of each float32)."""
    if dtype == "F16":
        return array.astype("<f2").tobytes()
    if dtype == "BF16":
        return (array.view(np.uint32) >> 16).astype("<u2").tobytes()
    return np.ascontiguousarray(array, dtype="<f4").tobytes()


def write_safetensors(path, tensors, dtype="F32"):
    """Write {name: float32 array} as a safetensors file with every tensor stored as `dtype`, one tensor's bytes
    in memory at a time (tools/measure_loading.py writes 1558M's 6.2 GB with it)."""
    itemsize = 4 if dtype == "F32" else 2  # F16 and BF16: 2 bytes
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, array in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.size * itemsize]}
        offset += array.size * itemsize
    header_bytes = json.dumps(header).encode()
    header_bytes += b" " * (-len(header_bytes) % 8)  # the format pads the header to a multiple of 8
    with open(path, "wb") as file:
        file.write(len(header_bytes).to_bytes(8, "little") + header_bytes)
        for array in tensors.values():
            file.write(tensor_bytes(array, dtype))


def hf_config(hparams):
    """config.json's fields for GPT-2 of these hparams, as GPT2LMHeadModel saves them."""
    return {"model_type": "gpt2", "vocab_size": hparams["n_vocab"], "n_positions": hparams["n_ctx"],
            "n_embd": hparams["n_embd"], "n_head": hparams["n_head"], "n_layer": hparams["n_layer"],
            "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}


def write_hf_folder(folder, params, hparams, tokenizer_dir):
    """A new Hugging Face GPT-2 folder (an existing one is an error): config.json + model.safetensors from
    picoGPT's nested params + OpenAI's tokenizer files copied from tokenizer_dir. Returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(hf_config(hparams)))
    write_safetensors(folder / "model.safetensors", {hf_name(n, ""): a for n, a in flat_params(params).items()})
    for name in ("encoder.json", "vocab.bpe"):
        shutil.copy(Path(tokenizer_dir) / name, folder / name)
    return folder


# ------------------------------------------------------------------------------------------------------------
# OpenAI's TF checkpoint: a LevelDB table (the format tf_checkpoint.read_sstable reads), with valid checksums
# ------------------------------------------------------------------------------------------------------------


def varint(value):
    """Protobuf/LevelDB base-128 varint: varint(150) == b"\\x96\\x01"."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number, wire_type, payload):
    """One protobuf field: tag varint, then the payload (already encoded for its wire type)."""
    return varint(number << 3 | wire_type) + payload


def block(entries):
    """A block of (key, value, shared) entries: each key stored as its last len(key) - shared bytes."""
    body = b"".join(varint(shared) + varint(len(key) - shared) + varint(len(value)) + key[shared:] + value
                    for key, value, shared in entries)
    return body + (0).to_bytes(4, "little") + (1).to_bytes(4, "little")  # one restart point, at 0


def table(pairs, shared_prefix=None):
    """The bytes of a LevelDB table holding `pairs` [(key, value)] in one data block, with valid crc32cs.

    shared_prefix: a function (previous key, key) -> how many bytes the entry claims to share (default:
    none, every key written in full)."""
    entries, previous = [], b""
    for key, value in pairs:
        entries.append((key, value, shared_prefix(previous, key) if shared_prefix else 0))
        previous = key
    out = bytearray()

    def add_block(contents):
        offset = len(out)
        out.extend(contents + b"\x00" + tf_checkpoint.masked_crc32c(contents + b"\x00").to_bytes(4, "little"))
        return varint(offset) + varint(len(contents))

    data_handle = add_block(block(entries))
    meta_handle = add_block(block([]))
    index_handle = add_block(block([(pairs[-1][0] if pairs else b"", data_handle, 0)]))
    footer = (meta_handle + index_handle).ljust(40, b"\x00") + tf_checkpoint.TABLE_MAGIC.to_bytes(8, "little")
    return bytes(out) + footer




def write_tf_checkpoint(folder, arrays, hparams):
    """OpenAI's layout from {OpenAI name: array}: hparams.json, checkpoint, model.ckpt.index (a LevelDB table)
    and the data file. Returns the bytes of the weights."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "hparams.json").write_text(json.dumps(hparams))
    (folder / "checkpoint").write_text('model_checkpoint_path: "model.ckpt"\n')
    pairs, offset = [(b"", field(1, 0, varint(1)))], 0
    with open(folder / "model.ckpt.data-00000-of-00001", "wb") as data:
        for name in sorted(arrays):
            array = np.ascontiguousarray(arrays[name], dtype="<f4")
            shape = ([1] + list(array.shape)) if name.endswith("/w") else list(array.shape)
            dims = b"".join(field(2, 2, varint(len(d)) + d) for d in (field(1, 0, varint(s)) for s in shape))
            entry = field(1, 0, varint(1)) + field(2, 2, varint(len(dims)) + dims)
            entry += field(4, 0, varint(offset)) + field(5, 0, varint(array.nbytes))
            pairs.append((f"model/{name}".encode(), entry))
            data.write(array.tobytes())
            offset += array.nbytes
    (folder / "model.ckpt.index").write_bytes(table(pairs))
    return offset
