"""Get GPT-2's weights onto disk and into NumPy arrays, without TensorFlow or PyTorch.

Three jobs, each a handful of small functions:

1. Download OpenAI's release files (`download_gpt2_files`): seven files per model size, streamed with a
   progress bar, resumed after an interruption, retried on transient network errors.

2. Read OpenAI's TensorFlow checkpoint (`list_checkpoint_variables`, `load_gpt2_params_from_tf_ckpt`).
   A TF checkpoint "bundle" is two files:

   - `model.ckpt.index`: a table of contents. It is a LevelDB "SSTable": sorted key/value pairs stored in
     blocks, plus an index block that says where each block is, plus a 48-byte footer at the very end that
     says where the index block is. Each key is a variable's name (`model/h0/attn/c_attn/w`); each value is a
     small protobuf message (`BundleEntryProto`) with the variable's dtype, shape, and the byte `offset` and
     `size` of its values in the data file.
   - `model.ckpt.data-00000-of-00001`: nothing but the raw tensor bytes (little-endian float32, row-major),
     one tensor after another. With the table of contents, reading a tensor is one slice of this file.

3. Read a Hugging Face GPT-2 folder (`load_hf_gpt2`): `config.json` + `model.safetensors`. A safetensors
   file is an 8-byte little-endian header length N, then N bytes of JSON that give each tensor's dtype,
   shape and `data_offsets` (begin, end) in the bytes that follow the header, then those bytes.

`load_encoder_hparams_and_params` ties it together for `main.py`: a model size ("124M") or a folder in,
(tokenizer, hyperparameters, parameters) out. The parameters always come out in the nested layout of
OpenAI's checkpoint names (picoGPT's layout): params["blocks"][i]["attn"]["c_attn"]["w"], all float32.
"""

import json
import math
import os
import re
import time
from pathlib import Path

import numpy as np
import requests
from tqdm import tqdm

from encoder import get_encoder

MODEL_SIZES = ("124M", "355M", "774M", "1558M")

OPENAI_BASE_URL = "https://openaipublic.blob.core.windows.net/gpt-2/models"

# The files of one release, as OpenAI published them under {base_url}/{model_size}/.
RELEASE_FILES = (
    "checkpoint",
    "encoder.json",
    "hparams.json",
    "model.ckpt.data-00000-of-00001",
    "model.ckpt.index",
    "model.ckpt.meta",
    "vocab.bpe",
)


class DownloadError(RuntimeError):
    """A release file could not be downloaded; the message names the URL, the folder, and what to do."""


class CheckpointError(ValueError):
    """A weights file is missing, damaged or not what it claims to be; the message names the file."""


# ----------------------------------------------------------------------------------------------------------
# 1. Downloading
#
# A file is first written as NAME.part and renamed to NAME only once its size matches what the server
# announced. So a file under its final name is always complete, and that is how we know to skip it on the
# next run: no request needed. (A truncated file put there by hand is caught later by the checkpoint reader,
# which compares every size with the index.) A leftover NAME.part is resumed with an HTTP Range request.
# ----------------------------------------------------------------------------------------------------------


class _TransientError(Exception):
    """A failure worth retrying: a 5xx answer, or a body shorter than announced."""


# What requests raises for a dropped connection, a body cut short, or a server that does not answer in time.
_RETRYABLE_ERRORS = (
    _TransientError,
    requests.ConnectionError,
    requests.exceptions.ChunkedEncodingError,
    requests.Timeout,
)


def download_gpt2_files(model_size, model_dir, base_url=None, retries=5, backoff_seconds=1.0, timeout_seconds=30.0):
    """Download the seven release files of `model_size` into `model_dir`, skipping those already there.

    The files come from {base_url}/{model_size}/{file}; base_url defaults to $GPT2_BASE_URL, else OpenAI's
    bucket. Retries wait backoff_seconds * 1, 2, 4, ... between attempts. Raises DownloadError when a file
    still fails after `retries` retries. The size is not checked here: resolve_model is the one place that
    understands model names.
    """
    base_url = (base_url or os.environ.get("GPT2_BASE_URL") or OPENAI_BASE_URL).rstrip("/")
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    for filename in RELEASE_FILES:
        path = model_dir / filename
        if path.exists():  # only ever created by a rename after a size check: complete
            continue
        download_file(f"{base_url}/{model_size}/{filename}", path, retries, backoff_seconds, timeout_seconds)


def download_file(url, path, retries=5, backoff_seconds=1.0, timeout_seconds=30.0):
    """Download `url` to `path` via `path`.part, resuming and retrying; rename only once complete."""
    path = Path(path)
    part_path = path.with_name(path.name + ".part")
    last_error = None
    for attempt in range(retries + 1):
        if attempt > 0:
            time.sleep(backoff_seconds * 2 ** (attempt - 1))  # exponential backoff: 1, 2, 4, ... x backoff
        try:
            fetch_into_part_file(url, part_path, timeout_seconds)
        except _RETRYABLE_ERRORS as error:
            last_error = error
            continue
        part_path.replace(path)  # complete: give it its final name
        return
    raise _download_error(url, path.parent, f"{retries + 1} attempts failed, the last with: {last_error}")


def _download_error(url, folder, reason):
    by_hand_url = url.rsplit("/", 1)[0]
    if "/resolve/main/" in url:  # a Hub file (section 5): its blob's name must be the ETag, so no copy by hand
        return DownloadError(f"could not download {url} into {folder}: {reason}. Run again to resume (finished "
                             f"files are kept)")
    return DownloadError(
        f"could not download {url} into {folder}: {reason}. Run again to resume (finished files are kept), "
        f"or download the files by hand from {by_hand_url} into {folder} "
        f"(they are: {', '.join(RELEASE_FILES)})"
    )


def fetch_into_part_file(url, part_path, timeout_seconds):
    """One attempt: append the rest of `url` to `part_path` (or start it afresh); return once it is complete.

    Raises _TransientError (or a requests error) for anything worth retrying, DownloadError otherwise.
    """
    have = part_path.stat().st_size if part_path.exists() else 0
    headers = {"Range": f"bytes={have}-"} if have > 0 else {}
    with requests.get(url, headers=headers, stream=True, timeout=timeout_seconds) as response:
        if response.status_code == 416:  # "range not satisfiable": our partial file is no use, start over
            part_path.unlink()
            raise _TransientError(f"server refused to resume from byte {have}")
        if response.status_code >= 500 or response.status_code == 429:
            raise _TransientError(f"HTTP {response.status_code} {response.reason}")
        if response.status_code == 206:  # the server resumes: it sends bytes have.. of `total`
            start, total = parse_content_range(response.headers.get("Content-Range", ""))
            if start != have:
                part_path.unlink()
                raise _TransientError(f"asked to resume at byte {have}, server sent from byte {start}")
            mode = "ab"
        elif response.status_code == 200:  # the whole file (also when the server ignores our Range header)
            have = 0
            total = int(response.headers["Content-Length"]) if "Content-Length" in response.headers else None
            mode = "wb"
        else:
            raise _download_error(url, part_path.parent, f"HTTP {response.status_code} {response.reason}")
        write_body(response, part_path, mode, have, total, desc=url.rsplit("/", 1)[-1])

    size = part_path.stat().st_size
    if total is not None and size != total:
        if size > total:
            part_path.unlink()
        raise _TransientError(f"got {size} of {total} bytes")


def write_body(response, part_path, mode, have, total, desc=None):
    """Stream the response body into `part_path` with a progress bar (bytes, scaled units, rate) named desc."""
    with open(part_path, mode) as file, tqdm(
        desc=desc or part_path.name.removesuffix(".part"),
        total=total,
        initial=have,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
    ) as progress:
        for chunk in response.iter_content(chunk_size=64 * 1024):
            file.write(chunk)
            progress.update(len(chunk))


def parse_content_range(content_range):
    """'bytes 100-999/1000' -> (100, 1000): where the sent bytes start, and the size of the whole file."""
    match = re.fullmatch(r"bytes (\d+)-\d+/(\d+)", content_range.strip())
    if match is None:
        raise _TransientError(f"unreadable Content-Range header {content_range!r}")
    return int(match.group(1)), int(match.group(2))


# ----------------------------------------------------------------------------------------------------------
# 2. Reading a TensorFlow checkpoint (the index is a LevelDB SSTable of BundleEntryProto messages)
# ----------------------------------------------------------------------------------------------------------

TABLE_MAGIC = 0xDB4775248B80FB57  # the last 8 bytes of every LevelDB table, little-endian
FOOTER_SIZE = 48  # two BlockHandles (varints), zero padding to 40 bytes, the 8-byte magic number
BLOCK_TRAILER_SIZE = 5  # after each block: 1 byte compression type (0 = none, 1 = snappy), 4 bytes crc32c
DT_FLOAT = 1  # TensorFlow's DataType enum value for float32


class _CorruptData(Exception):
    """Raised by the low-level parsers; the caller turns it into a CheckpointError naming the file."""


def _checkpoint_error(path, problem):
    return CheckpointError(
        f"{path}: {problem}. The file is damaged or incomplete: delete it and run again to download it afresh"
    )


def crc32c(data):
    """CRC-32C (Castagnoli) of `data`, bit by bit through a 256-entry table: fine for kilobytes, not megabytes.

    >>> hex(crc32c(b"123456789"))  # the standard check value
    '0xe3069283'
    """
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)  # 0x82F63B78: the Castagnoli polynomial, reversed
        table.append(crc)
    return table


_CRC32C_TABLE = _crc32c_table()


def masked_crc32c(data):
    """The crc32c as LevelDB and TensorFlow store it: rotated right by 15 bits, plus a constant."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_varint(data, pos):
    """Read a base-128 varint (7 bits per byte, low bits first, high bit = "more follows") at `pos`.

    Returns (value, position after it). Example: bytes 0x96 0x01 -> 0x16 + (0x01 << 7) = 150.
    """
    value = 0
    for shift in range(0, 70, 7):
        if pos >= len(data):
            raise _CorruptData("a varint runs past the end of its data")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
    raise _CorruptData("a varint is longer than 10 bytes")


def read_block_handle(data, pos):
    """A BlockHandle is two varints: the block's offset and size in the file. Returns (offset, size, pos)."""
    offset, pos = read_varint(data, pos)
    size, pos = read_varint(data, pos)
    return offset, size, pos


def read_block(table, offset, size):
    """Return the contents of the block at `offset`, after checking its trailer (compression and crc32c)."""
    end = offset + size
    if end + BLOCK_TRAILER_SIZE > len(table) - FOOTER_SIZE:
        raise _CorruptData(f"a block at bytes {offset}..{end} runs past the end of the table")
    contents = table[offset:end]
    compression = table[end]
    if compression == 1:
        raise _CorruptData("a block is snappy-compressed; TensorFlow checkpoints never are, so this is not one")
    if compression != 0:
        raise _CorruptData(f"a block has unknown compression type {compression}")
    stored_crc = int.from_bytes(table[end + 1 : end + 5], "little")
    if masked_crc32c(table[offset : end + 1]) != stored_crc:  # the crc covers the contents and the type byte
        raise _CorruptData(f"the block at byte {offset} fails its crc32c check")
    return contents


MAX_KEY_BYTES = 256  # TensorFlow variable names are far shorter ("model/h47/attn/c_attn/w" is 23 bytes)
MAX_TABLE_ENTRIES = 10_000  # GPT-2 has 12 n_layer + 4 variables: 580 for 1558M


def parse_block(block):
    """Yield the (key, value) pairs of a block.

    A block is a run of entries, then an array of uint32 "restart points", then their count (uint32).
    Each entry stores only what its key adds to the previous key (keys are sorted, so neighbours share a
    prefix): varint shared, varint non_shared, varint value_length, key[shared:], value.
    Example: after key b"model/h0/attn/c_attn/b", the entry (shared=20, non_shared=1, b"w") is key
    b"model/h0/attn/c_attn/w".
    """
    if len(block) < 4:
        raise _CorruptData("a block is too short to hold its restart count")
    num_restarts = int.from_bytes(block[-4:], "little")
    entries_end = len(block) - 4 - 4 * num_restarts
    if entries_end < 0:
        raise _CorruptData("a block's restart array is longer than the block")
    pos, key = 0, b""
    while pos < entries_end:
        shared, pos = read_varint(block, pos)
        non_shared, pos = read_varint(block, pos)
        value_length, pos = read_varint(block, pos)
        if shared > len(key) or pos + non_shared + value_length > entries_end:
            raise _CorruptData("a block entry runs past the end of its block")
        if shared + non_shared > MAX_KEY_BYTES:  # keys are variable names: short. Prefix sharing could make a
            raise _CorruptData(f"a key is {shared + non_shared} bytes long, more than {MAX_KEY_BYTES}")  # 3-byte
        key = key[:shared] + block[pos : pos + non_shared]  # entry rebuild a long key: bounded, so is memory
        pos += non_shared
        yield key, block[pos : pos + value_length]
        pos += value_length


def read_sstable(table):
    """All (key, value) pairs of a LevelDB table (the bytes of a whole file), in key order.

    The footer (last 48 bytes) points at the index block; each index entry's value points at a data block.
    """
    if len(table) < FOOTER_SIZE or int.from_bytes(table[-8:], "little") != TABLE_MAGIC:
        raise _CorruptData("it does not end with the LevelDB table magic number, so it is not a checkpoint index")
    footer = table[-FOOTER_SIZE:]
    _metaindex_offset, _metaindex_size, pos = read_block_handle(footer, 0)  # meta blocks: unused by TF
    index_offset, index_size, _ = read_block_handle(footer, pos)
    pairs = []
    for _last_key, handle in parse_block(read_block(table, index_offset, index_size)):
        offset, size, _ = read_block_handle(handle, 0)
        for pair in parse_block(read_block(table, offset, size)):
            pairs.append(pair)
            if len(pairs) > MAX_TABLE_ENTRIES:
                raise _CorruptData(f"it has more than {MAX_TABLE_ENTRIES} entries; GPT-2 has at most a few hundred")
    return pairs


def parse_protobuf(message):
    """Split a protobuf message into [(field_number, value), ...], by hand.

    Each field starts with a varint tag = field_number << 3 | wire_type. The wire type says how the value is
    stored: 0 varint, 1 8 bytes, 2 varint length then that many bytes (strings, nested messages), 5 4 bytes.
    Values come back as ints (types 0, 1, 5) or bytes (type 2, to be parsed by whoever knows the field).
    Example: b"\\x08\\x01" is field 1, wire type 0, value 1.
    """
    fields, pos = [], 0
    while pos < len(message):
        tag, pos = read_varint(message, pos)
        field_number, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            value, pos = read_varint(message, pos)
        elif wire_type in (1, 5):
            width = 8 if wire_type == 1 else 4
            if pos + width > len(message):
                raise _CorruptData("a protobuf field runs past the end of its message")
            value, pos = int.from_bytes(message[pos : pos + width], "little"), pos + width
        elif wire_type == 2:
            length, pos = read_varint(message, pos)
            if pos + length > len(message):
                raise _CorruptData("a protobuf field runs past the end of its message")
            value, pos = message[pos : pos + length], pos + length
        else:
            raise _CorruptData(f"unexpected protobuf wire type {wire_type}")
        fields.append((field_number, value))
    return fields


MAX_DIMENSION = 2**40  # no tensor of a GPT-2 is anywhere near: a larger size is damage, not a model


def field_int(value, what, maximum=2**63):
    """An integer field's value, checked: a varint or fixed field (int), 0 <= value < maximum."""
    if not isinstance(value, int):
        raise _CorruptData(f"its {what} is stored as bytes where a number belongs (wrong protobuf wire type)")
    if not 0 <= value < maximum:
        raise _CorruptData(f"its {what} is {value}, outside 0 .. {maximum - 1}")
    return value


def field_message(value, what):
    """A nested message field's bytes, checked: length-delimited (bytes), not a number."""
    if not isinstance(value, bytes):
        raise _CorruptData(f"its {what} is stored as a number where a message belongs (wrong protobuf wire type)")
    return value


def parse_tensor_shape(message):
    """TensorShapeProto -> list of dimension sizes. Field 2 is a repeated Dim message whose field 1 is size."""
    shape = []
    for field_number, value in parse_protobuf(message):
        if field_number == 2:
            dim = dict(parse_protobuf(field_message(value, "shape dimension")))
            shape.append(field_int(dim.get(1, 0), "dimension size", MAX_DIMENSION))  # proto3: 0 is not written
        if len(shape) > 8:
            raise _CorruptData("a shape has more than 8 dimensions; GPT-2's tensors have at most 3")
    return shape


def parse_bundle_entry(message):
    """BundleEntryProto -> dict: where one tensor's bytes are in the data file, and what they are.

    Fields: 1 dtype, 2 shape (TensorShapeProto), 3 shard_id, 4 offset, 5 size, 6 crc32c (fixed32; TF stores
    it masked, see masked_crc32c), 7 slices (only for partitioned variables, which GPT-2 does not have).
    """
    entry = {"dtype": 0, "shape": [], "shard_id": 0, "offset": 0, "size": 0, "crc32c": 0, "sliced": False}
    names = {1: "dtype", 3: "shard_id", 4: "offset", 5: "size", 6: "crc32c"}
    for field_number, value in parse_protobuf(message):
        if field_number == 2:
            entry["shape"] = parse_tensor_shape(field_message(value, "shape"))
        elif field_number == 7:
            entry["sliced"] = True
        elif field_number in names:
            entry[names[field_number]] = field_int(value, names[field_number])
    return entry


def read_checkpoint_index(ckpt_prefix):
    """Read `{ckpt_prefix}.index` -> (number of data shards, {variable name: bundle entry dict}).

    The entry under the empty key is the BundleHeaderProto (1 num_shards, 2 endianness), not a variable.
    """
    index_path = Path(f"{ckpt_prefix}.index")
    if not index_path.is_file():
        raise _checkpoint_error(index_path, "file not found")
    try:
        pairs = read_sstable(index_path.read_bytes())
        header = dict(parse_protobuf(pairs[0][1])) if pairs and pairs[0][0] == b"" else None
        if header is None:
            raise _CorruptData("it has no bundle header (the entry under the empty key)")
        if field_int(header.get(2, 0), "endianness") != 0:
            raise _CorruptData("its tensors are big-endian; only little-endian checkpoints are supported")
        num_shards = field_int(header.get(1, 1), "number of data files", 10_000)
        entries = {key.decode("utf-8"): parse_bundle_entry(value) for key, value in pairs[1:]}
    except (_CorruptData, UnicodeDecodeError) as error:
        raise _checkpoint_error(index_path, f"not a valid TensorFlow checkpoint index: {error}") from None
    return num_shards, entries


def list_checkpoint_variables(ckpt_prefix):
    """[(name, shape), ...] of the checkpoint's variables, sorted by name, like tf.train.list_variables.

    >>> list_checkpoint_variables("models/124M/model.ckpt")[:2]  # doctest: +SKIP
    [('model/h0/attn/c_attn/b', [2304]), ('model/h0/attn/c_attn/w', [1, 768, 2304])]
    """
    _num_shards, entries = read_checkpoint_index(ckpt_prefix)
    return sorted((name, entry["shape"]) for name, entry in entries.items())


HPARAM_LIMITS = {"n_vocab": 10**6, "n_ctx": 10**6, "n_embd": 10**5, "n_head": 10**4, "n_layer": 10**3}


def check_hparams(hparams, path):
    """hparams with every size a positive whole number within HPARAM_LIMITS and n_head dividing n_embd;
    else a CheckpointError naming `path` (hparams.json or config.json) and what is wrong."""
    if not isinstance(hparams, dict):
        raise _checkpoint_error(path, f"it holds a JSON {type(hparams).__name__}, not an object of hyperparameters")
    for key, limit in HPARAM_LIMITS.items():
        value = hparams.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
            raise _checkpoint_error(path, f"{key} is {value!r}; it must be a whole number from 1 to {limit}")
    if hparams["n_embd"] % hparams["n_head"]:
        raise _checkpoint_error(
            path, f"n_head={hparams['n_head']} does not divide n_embd={hparams['n_embd']}: heads split the width evenly"
        )
    return {key: hparams[key] for key in HPARAM_LIMITS}


def read_openai_hparams(path):
    """hparams.json -> the checked hparams (check_hparams)."""
    path = Path(path)
    try:
        hparams = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise _checkpoint_error(path, f"not a readable JSON hparams file ({type(error).__name__}: {error})") from None
    return check_hparams(hparams, path)


def gpt2_param_shapes(hparams):
    """{name: shape} of every GPT-2 parameter as it is used (the checkpoint's names without "model/").

    Example for 124M: "wte" (50257, 768), "h0/attn/c_attn/w" (768, 2304), "h11/mlp/c_proj/b" (768,).
    """
    n_embd = hparams["n_embd"]
    shapes = {"wte": (hparams["n_vocab"], n_embd), "wpe": (hparams["n_ctx"], n_embd)}
    for i in range(hparams["n_layer"]):
        shapes[f"h{i}/ln_1/g"] = (n_embd,)
        shapes[f"h{i}/ln_1/b"] = (n_embd,)
        shapes[f"h{i}/attn/c_attn/w"] = (n_embd, 3 * n_embd)
        shapes[f"h{i}/attn/c_attn/b"] = (3 * n_embd,)
        shapes[f"h{i}/attn/c_proj/w"] = (n_embd, n_embd)
        shapes[f"h{i}/attn/c_proj/b"] = (n_embd,)
        shapes[f"h{i}/ln_2/g"] = (n_embd,)
        shapes[f"h{i}/ln_2/b"] = (n_embd,)
        shapes[f"h{i}/mlp/c_fc/w"] = (n_embd, 4 * n_embd)
        shapes[f"h{i}/mlp/c_fc/b"] = (4 * n_embd,)
        shapes[f"h{i}/mlp/c_proj/w"] = (4 * n_embd, n_embd)
        shapes[f"h{i}/mlp/c_proj/b"] = (n_embd,)
    shapes["ln_f/g"] = (n_embd,)
    shapes["ln_f/b"] = (n_embd,)
    return shapes


def check_names_and_shapes(shapes, hparams, path):
    """Raise CheckpointError unless `shapes` ({name: shape}) has exactly GPT-2's parameters for `hparams`."""
    n_expected = 12 * hparams["n_layer"] + 4  # counted before the names are built: n_layer may be absurd
    if n_expected > len(shapes) + 1000:  # far more names than tensors: say so without building them all
        raise _checkpoint_error(
            path, f"it holds {len(shapes)} tensors, but GPT-2 with n_layer={hparams['n_layer']} has {n_expected}"
        )
    expected = gpt2_param_shapes(hparams)
    missing = sorted(set(expected) - set(shapes))
    unexpected = sorted(set(shapes) - set(expected))
    if missing or unexpected:
        raise _checkpoint_error(
            path, f"not GPT-2 with {hparams}: missing variables {missing[:5]}, unexpected variables {unexpected[:5]}"
        )
    for name, shape in expected.items():
        if tuple(shapes[name]) != shape:
            raise _checkpoint_error(
                path, f"{name} has shape {list(shapes[name])}, but the hyperparameters {hparams} make it {list(shape)}"
            )


def nest_params(arrays, n_layer):
    """{"h0/attn/c_attn/w": array, "wte": array, ...} -> picoGPT's nested params dict.

    "wte" -> params["wte"]; "ln_f/g" -> params["ln_f"]["g"]; "h3/attn/c_attn/w" ->
    params["blocks"][3]["attn"]["c_attn"]["w"].
    """
    params = {"blocks": [{} for _ in range(n_layer)]}
    for name, array in arrays.items():
        keys = name.split("/")
        tree = params
        if re.fullmatch(r"h\d+", keys[0]):
            tree, keys = params["blocks"][int(keys[0][1:])], keys[1:]
        for key in keys[:-1]:
            tree = tree.setdefault(key, {})
        tree[keys[-1]] = array
    return params


READ_CHUNK_BYTES = 2 << 20  # rows read per step of read_tensor: about 2 MB, so a chunk stays in the L2 cache


def read_tensor(file, offset, shape, stored_dtype, path, column_major=False):
    """The tensor of `shape` whose values (row-major, `stored_dtype`) start at byte `offset` of `file`, as
    float32 in its final layout: column-major if `column_major` (the blocks' weight matrices: see
    gpt2.column_major), else row-major.

    The array is allocated once, in its final layout, and filled from the file: a float32 row-major tensor
    by one `readinto`, straight into it; anything else (a matrix made column-major, float16 or bfloat16
    widened) a few rows at a time, through a chunk of about READ_CHUNK_BYTES. So loading a model holds the
    weights plus one small chunk, never a second copy of a tensor. No memory map, whose touched pages would
    count as the process's memory too.

    Why chunks of rows: the file holds w [n_in, n_out] row by row, and column-major memory holds it column by
    column, so every value moves. Copying a whole 9 MB matrix at once (np.asfortranarray) scatters its writes
    over the whole destination, far more than the CPU's caches hold; a chunk of rows writes a short run into
    every column, and both the chunk and the runs it writes stay in cache. For 124M's shapes that made the
    reordering several times faster (see the README's "Loading weights").
    """
    stored = np.dtype(stored_dtype)
    array = np.empty(shape, dtype=np.float32, order="F" if column_major else "C")  # the final array
    file.seek(offset)
    if stored == np.float32 and not column_major:  # already in its final form: straight from the file
        return _read_exactly(file, array, offset, path)
    row_values = math.prod(shape[1:])  # values per row (1 for a vector, whose "rows" are its values)
    rows_per_chunk = max(1, READ_CHUNK_BYTES // (row_values * stored.itemsize))
    for first in range(0, shape[0], rows_per_chunk):
        rows = min(rows_per_chunk, shape[0] - first)
        chunk = _read_exactly(file, np.empty((rows, *shape[1:]), dtype=stored), offset, path)  # row-major, as stored
        if stored_dtype == "<u2":  # bfloat16: the top half of a float32
            chunk = (chunk.astype(np.uint32) << 16).view(np.float32)
        array[first : first + rows] = chunk  # widened to float32 and put in the array's layout
    return array


def _read_exactly(file, array, offset, path):
    """array, filled with the next array.nbytes bytes of file; CheckpointError if the file ends first."""
    if file.readinto(memoryview(array.reshape(-1, order="A")).cast("B")) != array.nbytes:
        raise _checkpoint_error(path, f"it ends inside a tensor at byte {offset}")
    return array


def reading_bar(total_bytes, path):
    """A progress bar over the bytes of weights read from `path`; silent below 100 MB (tests, tiny models)."""
    return tqdm(desc=f"reading {Path(path).name}", total=total_bytes, unit="B", unit_scale=True, unit_divisor=1024,
                disable=total_bytes < 100e6)


def is_block_matrix(name):
    """A block's weight matrix ("h3/attn/c_attn/w"): stored column-major (gpt2.column_major)."""
    return name.startswith("h") and name.endswith("/w")


def check_tensors_tile(spans, path):
    """CheckpointError unless the tensors' byte spans [(name, begin, end)] lie end to end from byte 0, with
    no overlap and no hole: two tensors sharing bytes would silently read each other's values."""
    position = 0
    for name, begin, end in sorted(spans, key=lambda span: (span[1], span[2])):
        if begin != position:
            problem = "overlaps the tensor before it" if begin < position else f"leaves a hole at byte {position}"
            raise _checkpoint_error(path, f"{name} (bytes {begin} .. {end}) {problem}")
        position = end


def load_gpt2_params_from_tf_ckpt(ckpt_prefix, hparams, verify_checksums=False):
    """Read OpenAI's TF checkpoint `{ckpt_prefix}.index` + `.data-00000-of-00001` into picoGPT's nested params.

    Every tensor is float32, read from its offset in the data file; the matrices lose the leading 1 they
    carry in the checkpoint (`model/h0/attn/c_attn/w` is stored [1, 768, 2304], used as [768, 2304]).

    Checks: the names and shapes match `hparams`, every entry is float32 with size = 4 * number of values, and
    the data file is exactly as long as the index says. Those checks catch a truncated or swapped file.
    With verify_checksums=True each tensor's crc32c is also checked, which catches flipped bytes too, but
    this is plain Python: about 40 s for the 124M model, so it is off by default.
    Raises CheckpointError naming the bad file.
    """
    num_shards, entries = read_checkpoint_index(ckpt_prefix)
    index_path = f"{ckpt_prefix}.index"
    data_path = Path(f"{ckpt_prefix}.data-00000-of-{num_shards:05d}")
    if num_shards != 1:
        raise _checkpoint_error(index_path, f"it spreads the tensors over {num_shards} data files; expected 1")

    shapes = {}
    for name, entry in entries.items():
        n_values = math.prod(entry["shape"])  # a Python int: no overflow, whatever the index claims
        if entry["dtype"] != DT_FLOAT or entry["sliced"] or entry["shard_id"] != 0:
            raise _checkpoint_error(index_path, f"{name} is not a plain float32 tensor (dtype {entry['dtype']})")
        if entry["size"] != 4 * n_values:
            raise _checkpoint_error(index_path, f"{name} has {entry['size']} bytes for {n_values} float32 values")
        shape = entry["shape"]
        if name.endswith("/w") and len(shape) == 3 and shape[0] == 1:
            shape = shape[1:]  # OpenAI's matrices are stored [1, n_in, n_out]
        shapes[name.removeprefix("model/")] = shape
    check_names_and_shapes(shapes, hparams, index_path)
    check_tensors_tile(
        [(name, entry["offset"], entry["offset"] + entry["size"]) for name, entry in entries.items()], index_path
    )

    if not data_path.is_file():
        raise _checkpoint_error(data_path, "file not found")
    data_size = max(entry["offset"] + entry["size"] for entry in entries.values())
    if data_path.stat().st_size != data_size:
        raise _checkpoint_error(
            data_path, f"it has {data_path.stat().st_size} bytes, but the index says its tensors take {data_size}"
        )

    arrays = {}
    with open(data_path, "rb") as file, reading_bar(data_size, data_path) as bar:
        for name, entry in sorted(entries.items(), key=lambda item: item[1]["offset"]):  # in file order
            short_name = name.removeprefix("model/")
            arrays[short_name] = read_tensor(file, entry["offset"], shapes[short_name], "<f4", data_path,
                                             column_major=is_block_matrix(short_name))
            bar.update(entry["size"])
            if verify_checksums and masked_crc32c(arrays[short_name].tobytes(order="C")) != entry["crc32c"]:
                raise _checkpoint_error(data_path, f"the bytes of {name} fail their crc32c check")
    return nest_params(arrays, hparams["n_layer"])


# ----------------------------------------------------------------------------------------------------------
# 3. Reading a Hugging Face GPT-2 folder (config.json + model.safetensors)
# ----------------------------------------------------------------------------------------------------------

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
        raise _checkpoint_error(path, "file not found")
    file_size = path.stat().st_size
    with open(path, "rb") as file:
        first_8 = file.read(8)
        header_length = int.from_bytes(first_8, "little") if len(first_8) == 8 else -1
        if not 0 <= header_length <= min(file_size - 8, MAX_HEADER_BYTES):
            raise _checkpoint_error(path, "not a safetensors file (no valid header length in its first 8 bytes)")
        header_bytes = file.read(header_length)
    try:
        header = json.loads(header_bytes, parse_constant=_no_json_constants)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise _checkpoint_error(path, f"not a safetensors file (its header is not JSON: {error})") from None
    if not isinstance(header, dict):
        raise _checkpoint_error(path, f"its header is a JSON {type(header).__name__}, not an object")

    data_start, data_size = 8 + header_length, file_size - 8 - header_length
    entries = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not (isinstance(info, dict) and {"dtype", "shape", "data_offsets"} <= info.keys()):
            raise _checkpoint_error(path, f"its header entry for {name!r} is not an object with dtype, shape and "
                                          f"data_offsets")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if not isinstance(dtype, str) or dtype not in SAFETENSORS_DTYPES:
            raise _checkpoint_error(path, f"{name} has dtype {dtype!r}; supported: {list(SAFETENSORS_DTYPES)}")
        if not (isinstance(shape, list) and len(shape) <= 8 and all(_whole(d, MAX_DIMENSION) for d in shape)):
            raise _checkpoint_error(path, f"{name} has shape {shape!r}: expected a list of whole numbers")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_whole(o, data_size + 1) for o in offsets)):
            raise _checkpoint_error(path, f"{name} has data_offsets {offsets!r}: expected [begin, end] within the "
                                          f"{data_size} bytes of data (a tensor that runs past the end, or worse)")
        begin, end = offsets
        if end - begin != np.dtype(SAFETENSORS_DTYPES[dtype]).itemsize * math.prod(shape):
            raise _checkpoint_error(path, f"{name}: bytes {begin} .. {end} do not hold a {dtype} tensor of shape {shape}")
        entries[name] = (dtype, shape, begin, end)
    check_tensors_tile([(name, begin, end) for name, (_, _, begin, end) in entries.items()], path)
    last_end = max((end for _, _, _, end in entries.values()), default=0)
    if last_end != data_size:
        raise _checkpoint_error(path, f"its tensors end at byte {last_end} of the data, but the file has {data_size}")
    return entries, data_start


def _whole(value, limit):
    """value is an int (not a bool), 0 <= value < limit."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < limit


def _no_json_constants(constant):
    raise ValueError(f"{constant} is not a number a safetensors header can hold")


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
        raise _checkpoint_error(config_path, "file not found")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        sizes = [config[key] for key in ("vocab_size", "n_embd", "n_head", "n_layer")]
    except (UnicodeDecodeError, ValueError, RecursionError, KeyError, TypeError, IndexError) as error:
        raise _checkpoint_error(config_path, f"not a GPT-2 config.json ({type(error).__name__}: {error})") from None
    if not isinstance(config, dict):
        raise _checkpoint_error(config_path, f"not a GPT-2 config.json (a JSON {type(config).__name__})")
    for key, assumed in HF_CONFIG_ASSUMED.items():
        if key in config and config[key] != assumed:
            raise _checkpoint_error(config_path, f"{key} is {config[key]!r}, but this GPT-2 implements {assumed!r}")
    n_vocab, n_embd, n_head, n_layer = sizes
    n_ctx = config.get("n_positions", config.get("n_ctx"))
    hparams = {"n_vocab": n_vocab, "n_ctx": n_ctx, "n_embd": n_embd, "n_head": n_head, "n_layer": n_layer}
    return check_hparams(hparams, config_path)


def load_hf_gpt2(model_dir):
    """Read a Hugging Face GPT-2 folder (config.json + model.safetensors) -> (hparams, params).

    Works for folders written by GPT2LMHeadModel.save_pretrained (names start with "transformer.") and for
    the hub's gpt2 files (no prefix). F32, F16 and BF16 weights all come out float32.
    """
    model_dir = Path(model_dir)
    hparams = read_hf_hparams(model_dir / "config.json")
    safetensors_path = model_dir / "model.safetensors"
    entries, data_start = read_safetensors_header(safetensors_path)
    names = {hf_name: hf_name_to_openai_name(hf_name) for hf_name in entries}  # None: not a parameter
    shapes = {name: entries[hf_name][1] for hf_name, name in names.items() if name is not None}
    check_names_and_shapes(shapes, hparams, safetensors_path)  # before a single tensor is read
    arrays = {}
    total = sum(end - begin for hf_name, (_, _, begin, end) in entries.items() if names[hf_name] is not None)
    with open(safetensors_path, "rb") as file, reading_bar(total, safetensors_path) as bar:
        for hf_name, name in names.items():
            if name is not None:
                dtype, shape, begin, end = entries[hf_name]
                arrays[name] = read_tensor(file, data_start + begin, shape, SAFETENSORS_DTYPES[dtype],
                                           safetensors_path, column_major=is_block_matrix(name))
                bar.update(end - begin)
    return hparams, nest_params(arrays, hparams["n_layer"])


# ----------------------------------------------------------------------------------------------------------
# 4. The entry point for main.py
# ----------------------------------------------------------------------------------------------------------


def openai_checkpoint_prefix(folder):
    """The checkpoint prefix named by the folder's `checkpoint` file (model_checkpoint_path: "model.ckpt").

    Only the file name is kept, so a folder that was moved still works; "model.ckpt" if there is no such file.
    """
    checkpoint_file = Path(folder) / "checkpoint"
    text = checkpoint_file.read_text() if checkpoint_file.is_file() else ""
    match = re.search(r'^model_checkpoint_path: "(.*)"', text, flags=re.MULTILINE)
    return Path(folder) / Path(match.group(1) if match else "model.ckpt").name


def resolve_model(name, models_dir="models", base_url=None, retries=3):
    """Step 1 of 2: the local folder that holds the model called `name`, downloading what is missing.

    The ONE place where a model's name is understood (check_model_name says, without any network, whether it
    will be):
    - an existing folder: itself (OpenAI's layout or a Hugging Face GPT-2 folder);
    - one of MODEL_SIZES ("124M", ...): OpenAI's release files in models_dir/SIZE, downloaded if missing
      (from base_url, default $GPT2_BASE_URL, else OpenAI's bucket);
    - a Hugging Face name or id ("gpt2", "distilgpt2", "openai-community/gpt2-medium", any "owner/name" of a
      GPT-2 repository): its snapshot in the Hugging Face cache, downloaded from the Hub if missing.
    """
    check_model_name(name)
    if Path(name).is_dir():
        return Path(name)
    if name in MODEL_SIZES:
        folder = Path(models_dir) / name
        try:
            download_gpt2_files(name, folder, base_url=base_url, retries=retries)
        except DownloadError as error:
            hub_name = next(short for short, (_, size) in HUB_MODELS.items() if size == name)
            raise DownloadError(f"{error}. The same model is on the Hugging Face Hub as {hub_name!r}: try "
                                f"--target_model_size {hub_name} (or --draft_model_size {hub_name})") from None
        return folder
    return hub_snapshot(hub_repo_id(name), retries=retries)


def load_model(folder):
    """Step 2 of 2: (encoder, hparams, params) from a folder in OpenAI's layout (hparams.json + model.ckpt.*) or
    a Hugging Face GPT-2 folder (config.json + model.safetensors), with the tokenizer files beside them
    (encoder.json + vocab.bpe, or vocab.json + merges.txt). The weight matrices come back column-major
    (`gpt2.column_major`): same shapes and values, faster decoding."""
    folder = Path(folder)
    if (folder / "hparams.json").is_file():
        hparams = read_openai_hparams(folder / "hparams.json")
        params = load_gpt2_params_from_tf_ckpt(openai_checkpoint_prefix(folder), hparams)
    elif (folder / "config.json").is_file() and (folder / "model.safetensors").is_file():
        hparams, params = load_hf_gpt2(folder)
    elif (folder / "config.json").is_file():
        raise CheckpointError(f"{folder} has a config.json but no model.safetensors: this project reads GPT-2 "
                              f"weights in safetensors only (a pytorch_model.bin would need torch)")
    else:
        raise ValueError(
            f"{folder} holds neither OpenAI's GPT-2 files (hparams.json + model.ckpt.*) "
            f"nor a Hugging Face GPT-2 folder (config.json + model.safetensors)"
        )
    encoder = get_encoder(folder.name, str(folder.parent))
    return encoder, hparams, params  # the readers put each block matrix column-major as they read it


def load_encoder_hparams_and_params(model_size, models_dir="models"):
    """(encoder, hparams, params) for a model name or folder: resolve_model, then load_model."""
    return load_model(resolve_model(model_size, models_dir))


# ----------------------------------------------------------------------------------------------------------
# 5. Models by their Hugging Face names: the Hugging Face cache, and the Hub
#
# The Hub's cache layout (huggingface_hub's, shared with transformers), under $HF_HUB_CACHE, else $HF_HOME/hub,
# else ~/.cache/huggingface/hub:
#     models--openai-community--gpt2/
#         refs/main                       the commit that "main" pointed at: 607a30d783dfa663caf39e06633721c8d4cfcd7e
#         blobs/<etag>                    each file's bytes, named by its ETag (a sha256 for large files)
#         snapshots/<commit>/config.json  -> ../../blobs/<etag>   (a relative symlink per file)
# A file is downloaded as blobs/<etag>.part and renamed once complete, like OpenAI's files (section 1).
# ----------------------------------------------------------------------------------------------------------

# name -> (its Hub id, the OpenAI release it matches, or None)
HUB_MODELS = {
    "gpt2": ("openai-community/gpt2", "124M"),
    "gpt2-medium": ("openai-community/gpt2-medium", "355M"),
    "gpt2-large": ("openai-community/gpt2-large", "774M"),
    "gpt2-xl": ("openai-community/gpt2-xl", "1558M"),
    "distilgpt2": ("distilbert/distilgpt2", None),
}
DISTILGPT2_HPARAMS = {"n_vocab": 50257, "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 6}
HUB_FILES = ("config.json", "model.safetensors", "vocab.json", "merges.txt")
HUB_ENDPOINT = "https://huggingface.co"
REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")  # owner/name


def model_names_help():
    """The names a model flag takes, one line each, for --help and error messages."""
    lines = [f"{size} (OpenAI's release files)" for size in MODEL_SIZES]
    for name, (repo_id, size) in HUB_MODELS.items():
        lines.append(f"{name} or {repo_id} (Hugging Face" + (f"; the same weights as {size})" if size else ")"))
    lines.append("any owner/name of a GPT-2 repository on the Hub with config.json and model.safetensors")
    lines.append("a local folder in OpenAI's or Hugging Face's layout")
    return lines


def hub_repo_id(name):
    """The Hub id for a name: hub_repo_id("gpt2") == "openai-community/gpt2"; an owner/name stays as it is."""
    if name in HUB_MODELS:
        return HUB_MODELS[name][0]
    return name if isinstance(name, str) and REPO_ID.fullmatch(name) else None


def check_model_name(name):
    """ValueError naming `name` and the known names unless it is a model name resolve_model understands.
    No network: an owner/name passes here and may still turn out not to exist on the Hub."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a model name must be text, like 124M or gpt2; got {name!r}")
    if Path(name).is_dir() or name in MODEL_SIZES or hub_repo_id(name):
        return
    if Path(name).exists():
        raise ValueError(f"{name!r} is a file, not a folder: give the folder that holds the model's files")
    raise ValueError(f"unknown model {name!r}: use one of " + "; ".join(model_names_help()))


def hf_hub_cache():
    """The Hugging Face cache folder: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def hub_cache_folders(repo_id):
    """The cache folders a repository may be under: its canonical name, and the legacy one for the models the
    Hub once had without an owner ("gpt2" was renamed "openai-community/gpt2")."""
    names = [repo_id]
    legacy = {hub_id: short for short, (hub_id, _) in HUB_MODELS.items()}
    if repo_id in legacy:
        names.append(legacy[repo_id])
    return [hf_hub_cache() / ("models--" + name.replace("/", "--")) for name in names]


def cached_snapshot(repo_id):
    """The snapshot folder of repo_id's "main" in the Hugging Face cache that holds every HUB_FILES, or None."""
    for folder in hub_cache_folders(repo_id):
        ref = folder / "refs" / "main"
        if ref.is_file():
            snapshot = folder / "snapshots" / ref.read_text().strip()
            if all((snapshot / name).is_file() for name in HUB_FILES):  # is_file follows the symlinks
                return snapshot
    return None


def hub_snapshot(repo_id, retries=3, backoff_seconds=1.0, timeout_seconds=30.0):
    """repo_id's snapshot folder: from the Hugging Face cache if every file is there (no network at all), else
    downloaded from the Hub ($HF_ENDPOINT, default https://huggingface.co) into that cache, in its layout."""
    snapshot = cached_snapshot(repo_id)
    if snapshot is not None:
        return snapshot
    endpoint = (os.environ.get("HF_ENDPOINT") or HUB_ENDPOINT).rstrip("/")
    folder = hub_cache_folders(repo_id)[0]
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):  # huggingface_hub's switch
        raise DownloadError(f"{repo_id} is not (completely) in the Hugging Face cache {hf_hub_cache()}, and "
                            f"HF_HUB_OFFLINE is set: unset it to download it from {endpoint}/{repo_id}")
    commit = None
    for name in HUB_FILES:
        url = f"{endpoint}/{repo_id}/resolve/main/{name}"
        etag, file_commit, size = hub_file_metadata(url, folder, timeout_seconds)
        commit = commit or file_commit
        blob = folder / "blobs" / etag
        if not blob.is_file():  # a blob under its final name is complete (section 1)
            blob.parent.mkdir(parents=True, exist_ok=True)
            download_file(url, blob, retries, backoff_seconds, timeout_seconds)
            if size is not None and blob.stat().st_size != size:  # the size the Hub announced (X-Linked-Size)
                got = blob.stat().st_size
                blob.unlink()
                raise DownloadError(f"{url} sent {got} bytes where the Hub announced {size}: run again to download "
                                    f"it afresh")
        if name == "config.json":  # first, so that a repository of another kind fails before its big weights
            check_hub_config(repo_id, blob)
        link = folder / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(Path("..") / ".." / "blobs" / etag)  # relative, as huggingface_hub makes them
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text(commit)
    return folder / "snapshots" / commit


def check_hub_config(repo_id, config_path):
    """DownloadError unless the config.json of repo_id is readable and says model_type "gpt2" (the loader checks
    the rest of it)."""
    try:
        model_type = json.loads(Path(config_path).read_text(encoding="utf-8")).get("model_type")
    except (ValueError, AttributeError):
        raise DownloadError(f"{repo_id}'s config.json ({config_path}) is not a JSON object") from None
    if model_type != "gpt2":
        raise DownloadError(f"{repo_id} is not a GPT-2 repository: its config.json says model_type {model_type!r}, "
                            f"and this project runs GPT-2 only (model_type 'gpt2')")


def hub_file_metadata(url, cache_folder, timeout_seconds):
    """(etag, commit, size) of a file on the Hub, from a HEAD request as huggingface_hub makes it: the ETag of
    the file (X-Linked-Etag for a large file stored elsewhere, whose answer is a redirect), X-Repo-Commit, and
    the size (X-Linked-Size, else Content-Length of a direct answer; None if neither)."""
    try:
        response = requests.head(url, allow_redirects=False, timeout=timeout_seconds,
                                 headers={"Accept-Encoding": "identity"})
    except requests.RequestException as error:
        raise DownloadError(
            f"could not reach the Hugging Face Hub at {url} ({type(error).__name__}), and the model is not in the "
            f"Hugging Face cache {cache_folder}: connect to the internet once, or set HF_ENDPOINT to a mirror"
        ) from None
    if response.status_code == 404 and response.headers.get("X-Error-Code") == "EntryNotFound":
        head, _, name = url.partition("/resolve/main/")  # {endpoint}/{owner}/{name}/resolve/main/{file}
        repo_id = "/".join(head.rsplit("/", 2)[-2:])
        raise DownloadError(f"{repo_id} has no {name} on the Hub ({url} answered HTTP 404): this project reads a "
                            f"GPT-2 repository with {', '.join(HUB_FILES)}")
    if response.status_code in (401, 404):
        raise DownloadError(f"{url} answered HTTP {response.status_code}: the repository or its file does not "
                            f"exist (or is private). A GPT-2 repository needs {', '.join(HUB_FILES)}")
    if response.status_code >= 400:
        raise DownloadError(f"{url} answered HTTP {response.status_code} {response.reason}")
    etag = response.headers.get("X-Linked-Etag") or response.headers.get("ETag")
    commit = response.headers.get("X-Repo-Commit")
    if not etag or not commit:
        raise DownloadError(f"{url} did not answer like the Hugging Face Hub (no ETag or X-Repo-Commit header)")
    etag = etag.removeprefix("W/").strip('"')
    if not re.fullmatch(r"[\w.-]+", etag) or not re.fullmatch(r"[\w.-]+", commit):
        raise DownloadError(f"{url} sent an ETag or commit that cannot name a file: {etag!r}, {commit!r}")
    size = response.headers.get("X-Linked-Size") or (None if response.is_redirect else
                                                       response.headers.get("Content-Length"))
    return etag, commit, int(size) if size and size.isdigit() else None
