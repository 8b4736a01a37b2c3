"""Read OpenAI's TensorFlow checkpoint with NumPy alone (`list_checkpoint_variables`,
`load_gpt2_params_from_tf_ckpt`).

Read loaders/weights.py first (the checks every reader shares); utils.py calls this file for a folder in OpenAI's
layout (hparams.json + model.ckpt.*). A TF checkpoint "bundle" is two files:

- `model.ckpt.index`: a table of contents. It is a LevelDB "SSTable": sorted key/value pairs stored in
  blocks, plus an index block that says where each block is, plus a 48-byte footer at the very end that
  says where the index block is. Each key is a variable's name (`model/h0/attn/c_attn/w`); each value is a
  small protobuf message (`BundleEntryProto`) with the variable's dtype, shape, and the byte `offset` and
  `size` of its values in the data file. Blocks carry a crc32c checksum.
- `model.ckpt.data-00000-of-00001`: nothing but the raw tensor bytes (little-endian float32, row-major),
  one tensor after another. With the table of contents, reading a tensor is one slice of this file.

In file order: crc32c, the table's blocks, protobuf, the index, then the tensors.
"""

import math
from pathlib import Path

from loaders.weights import (MAX_DIMENSION, check_names_and_shapes, check_tensors_tile, checkpoint_error, file_errors_as_checkpoint_errors, nest_params, read_tensor, reading_bar, stored_by_column)

from loaders.matrix_memory import for_block_matrices
from loaders.messages import shown

TABLE_MAGIC = 0xDB4775248B80FB57  # the last 8 bytes of every LevelDB table, little-endian
FOOTER_SIZE = 48  # two BlockHandles (varints), zero padding to 40 bytes, the 8-byte magic number
BLOCK_TRAILER_SIZE = 5  # after each block: 1 byte compression type (0 = none, 1 = snappy), 4 bytes crc32c
DT_FLOAT = 1  # TensorFlow's DataType enum value for float32


class _CorruptData(Exception):
    """Raised by the low-level parsers; the caller turns it into a CheckpointError naming the file."""


def crc32c(data):
    """CRC-32C (Castagnoli) of `data`, a byte at a time through a 256-entry table: fine for kilobytes, not megabytes.

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
MAX_INDEX_BYTES = 64 << 20  # 124M's model.ckpt.index is 5 KB; 1558M's, with 580 variables, some tens of KB


def parse_block(block):
    """Yield the (key, value) pairs of a block.

    A block is a run of entries, then an array of uint32 "restart points", then their count (uint32).
    Each entry stores only what its key adds to the previous key (keys are sorted, so neighbours share a
    prefix): varint shared, varint non_shared, varint value_length, key[shared:], value.
    Example: after key b"model/h0/attn/c_attn/b", the entry (shared=21, non_shared=1, b"w") is key
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


@file_errors_as_checkpoint_errors
def read_checkpoint_index(ckpt_prefix):
    """Read `{ckpt_prefix}.index` -> (number of data shards, {variable name: bundle entry dict}).

    The entry under the empty key is the BundleHeaderProto (1 num_shards, 2 endianness), not a variable.
    """
    index_path = Path(f"{ckpt_prefix}.index")
    if not index_path.is_file():
        raise checkpoint_error(index_path, "file not found")
    if index_path.stat().st_size > MAX_INDEX_BYTES:
        raise checkpoint_error(index_path, f"it has {index_path.stat().st_size} bytes, more than the {MAX_INDEX_BYTES} "
                                           f"an index of GPT-2's few hundred tensors can need")
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
        raise checkpoint_error(index_path, f"not a valid TensorFlow checkpoint index: {error}") from None
    return num_shards, entries


def list_checkpoint_variables(ckpt_prefix):
    """[(name, shape), ...] of the checkpoint's variables, sorted by name, like tf.train.list_variables.

    >>> list_checkpoint_variables("models/124M/model.ckpt")[:2]  # doctest: +SKIP
    [('model/h0/attn/c_attn/b', [2304]), ('model/h0/attn/c_attn/w', [1, 768, 2304])]
    """
    _num_shards, entries = read_checkpoint_index(ckpt_prefix)
    return sorted((name, entry["shape"]) for name, entry in entries.items())


@file_errors_as_checkpoint_errors
def load_gpt2_params_from_tf_ckpt(ckpt_prefix, hparams, verify_checksums=False, layouts=None):
    """Read OpenAI's TF checkpoint `{ckpt_prefix}.index` + `.data-00000-of-00001` into picoGPT's nested params.

    Every tensor is float32, read from its offset in the data file; the matrices lose the leading 1 they
    carry in the checkpoint (`model/h0/attn/c_attn/w` is stored [1, 768, 2304], used as [768, 2304]).

    Checks: the names and shapes match `hparams`, every entry is float32 with size = 4 * number of values, and
    the data file is exactly as long as the index says. Those checks catch a truncated or swapped file.
    With verify_checksums=True each tensor's crc32c is also checked, which catches flipped bytes too, but
    this is plain Python: about 40 s for the 124M model, so it is off by default. Each matrix is read straight
    into its layout ({"blocks": layout, "head": layout}: speed/layouts.py; None: the default).
    Raises CheckpointError naming the bad file.
    """
    num_shards, entries = read_checkpoint_index(ckpt_prefix)
    index_path = f"{ckpt_prefix}.index"
    data_path = Path(f"{ckpt_prefix}.data-00000-of-{num_shards:05d}")
    if num_shards != 1:
        raise checkpoint_error(index_path, f"it spreads the tensors over {num_shards} data files; expected 1")

    shapes = {}
    for name, entry in entries.items():
        n_values = math.prod(entry["shape"])  # a Python int: no overflow, whatever the index claims
        if entry["dtype"] != DT_FLOAT or entry["sliced"] or entry["shard_id"] != 0:
            raise checkpoint_error(index_path, f"{shown(name)} is not a plain float32 tensor (dtype {entry['dtype']})")
        if entry["size"] != 4 * n_values:
            raise checkpoint_error(index_path, f"{shown(name)} has {entry['size']} bytes for {n_values} float32 values")
        shape = entry["shape"]
        if name.endswith("/w") and len(shape) == 3 and shape[0] == 1:
            shape = shape[1:]  # OpenAI's matrices are stored [1, n_in, n_out]
        shapes[name.removeprefix("model/")] = shape
    check_names_and_shapes(shapes, hparams, index_path)
    check_tensors_tile(
        [(name, entry["offset"], entry["offset"] + entry["size"]) for name, entry in entries.items()], index_path
    )

    if not data_path.is_file():
        raise checkpoint_error(data_path, "file not found")
    data_size = max(entry["offset"] + entry["size"] for entry in entries.values())
    if data_path.stat().st_size != data_size:
        raise checkpoint_error(
            data_path, f"it has {data_path.stat().st_size} bytes, but the index says its tensors take {data_size}"
        )

    arrays, memory = {}, for_block_matrices(shapes, layouts)
    with open(data_path, "rb") as file, reading_bar(data_size, data_path) as bar:
        for name, entry in sorted(entries.items(), key=lambda item: item[1]["offset"]):  # in file order
            short_name = name.removeprefix("model/")
            arrays[short_name] = read_tensor(file, entry["offset"], shapes[short_name], "<f4", data_path,
                                             column_major=stored_by_column(short_name, layouts),
                                             out=memory.empty(short_name))
            bar.update(entry["size"])
            if verify_checksums and masked_crc32c(arrays[short_name].tobytes(order="C")) != entry["crc32c"]:
                raise checkpoint_error(data_path, f"the bytes of {name} fail their crc32c check")
    memory.seal()
    return nest_params(arrays, hparams["n_layer"])
