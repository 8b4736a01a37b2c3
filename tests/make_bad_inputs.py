"""Write the corpus of bad inputs in tests/fixtures/bad_inputs/ (run from the repository root):

Read loaders/weights.py, loaders/tf_checkpoint.py and loaders/hf_folder.py first: the readers these files attack.

    python tests/make_bad_inputs.py

Each file is well formed where a quick check would look (a TF index with valid block checksums, a
safetensors file whose header is valid JSON, a config that parses) and wrong in its content, one class of
damage per file, made from the small valid fixtures (tests/fixtures/tf_ckpt, tests/fixtures/hf_folder_tiny).
tests/test_bad_inputs.py checks that each gives one CheckpointError naming the file, and runs a seeded
mutation run over the same fixtures with the functions below. The script is deterministic: rerunning it
rewrites the same bytes.
"""

import json
import shutil
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS.parent))

from loaders import tf_checkpoint  # noqa: E402
from tools.model_files import field, table, varint  # noqa: E402  (a LevelDB table with valid checksums)

TF_DIR = TESTS / "fixtures" / "tf_ckpt"
HF_DIR = TESTS / "fixtures" / "hf_folder_tiny"
OUT = TESTS / "fixtures" / "bad_inputs"


def fixture_pairs():
    """The (key, value) pairs of the valid TF fixture's index."""
    return tf_checkpoint.read_sstable((TF_DIR / "model.ckpt.index").read_bytes())


def replace_entry(pairs, key, value):
    return [(k, value if k == key else v) for k, v in pairs]


# --- the corpus ------------------------------------------------------------------------------------------------


def tf_cases():
    """{name: index bytes}: wrong wire types, absurd values, and a prefix-compression bomb."""
    pairs = fixture_pairs()
    name = b"model/h0/attn/c_attn/b"
    shape = field(2, 2, varint(4) + field(2, 2, varint(2) + field(1, 0, varint(24))))  # shape [24], as a message
    as_bytes = lambda number, value: field(number, 2, varint(len(varint(value))) + varint(value))  # noqa: E731
    good = dict(tf_checkpoint.parse_protobuf(dict(pairs)[name]))
    offset, size = good.get(4, 0), good[5]
    cases = {
        "shape_as_number": replace_entry(pairs, name, field(1, 0, varint(1)) + field(2, 0, varint(24))
                                         + field(5, 0, varint(size))),
        "dimension_as_bytes": replace_entry(pairs, name, field(1, 0, varint(1))
                                            + field(2, 2, varint(6) + field(2, 2, varint(4) + as_bytes(1, 24)))
                                            + field(5, 0, varint(size))),
        "offset_as_bytes": replace_entry(pairs, name, field(1, 0, varint(1)) + shape + as_bytes(4, offset)
                                         + field(5, 0, varint(size))),
        "size_as_bytes": replace_entry(pairs, name, field(1, 0, varint(1)) + shape + as_bytes(5, size)),
        "shard_count_as_bytes": [(b"", as_bytes(1, 1))] + pairs[1:],
        "negative_dimension": replace_entry(pairs, name, field(1, 0, varint(1))
                                            + field(2, 2, varint(12) + field(2, 2, varint(10) + field(1, 0, varint(2**64 - 1))))
                                            + field(5, 0, varint(size))),
        "huge_offset": replace_entry(pairs, name, field(1, 0, varint(1)) + shape + field(4, 0, varint(2**62))
                                     + field(5, 0, varint(size))),
        "overlapping_tensors": replace_entry(pairs, name, field(1, 0, varint(1)) + shape
                                             + field(4, 0, varint(offset + 4)) + field(5, 0, varint(size))),
    }
    out = {case: table(case_pairs) for case, case_pairs in cases.items()}
    # 20,000 entries whose keys share a 1,000-byte prefix built once: 3-byte entries, 20 MB of keys if rebuilt
    long_key = b"model/" + b"x" * 1000
    bomb = [(b"", pairs[0][1]), (long_key, b"")] + [(long_key + b"%05d" % i, b"") for i in range(20_000)]
    out["prefix_compression_bomb"] = table(bomb, shared_prefix=lambda previous, key: min(len(previous), 1006))
    return out


def safetensors_bytes(header, data=b""):
    raw = json.dumps(header).encode() if not isinstance(header, bytes) else header
    return len(raw).to_bytes(8, "little") + raw + data


def safetensors_cases():
    """{name: file bytes}: headers that are valid JSON of the wrong shape, and offsets that lie."""
    tensor = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    eight = b"\x00" * 8
    return {
        "empty_file": b"",
        "root_is_a_list": safetensors_bytes([tensor], eight),
        "offsets_an_int": safetensors_bytes({"wte.weight": {**tensor, "data_offsets": 8}}, eight),
        "offsets_of_length_3": safetensors_bytes({"wte.weight": {**tensor, "data_offsets": [0, 4, 8]}}, eight),
        "shape_of_strings": safetensors_bytes({"wte.weight": {**tensor, "shape": ["2"]}}, eight),
        "shape_of_floats": safetensors_bytes({"wte.weight": {**tensor, "shape": [2.0]}}, eight),
        "dtype_a_list": safetensors_bytes({"wte.weight": {**tensor, "dtype": ["F32"]}}, eight),
        "infinity": safetensors_bytes(b'{"wte.weight": {"dtype": "F32", "shape": [Infinity], "data_offsets": [0, 8]}}',
                                      eight),
        "huge_integer": safetensors_bytes({"wte.weight": {**tensor, "shape": [10**30]}}, eight),
        "name_with_one_part": safetensors_bytes({"weight": tensor}, eight),
        "nested_1000_deep": safetensors_bytes(b"[" * 1000 + b"]" * 1000),
        "negative_offset": safetensors_bytes({"a.weight": {**tensor, "data_offsets": [-8, 0]}}, eight),
        "overlapping": safetensors_bytes({"a.weight": tensor, "b.weight": {**tensor, "data_offsets": [4, 12]}},
                                         b"\x00" * 12),
        "hole": safetensors_bytes({"a.weight": {**tensor, "data_offsets": [4, 12]}}, b"\x00" * 12),
        "header_length_past_the_end": (10**6).to_bytes(8, "little") + b"{}",
    }


def config_cases():
    """{name: config.json text} for an HF folder (the tiny fixture's config, one value broken)."""
    config = json.loads((HF_DIR / "config.json").read_text())
    cases = {
        "n_layer_a_string": {**config, "n_layer": "2"},
        "n_layer_null": {**config, "n_layer": None},
        "n_layer_a_float": {**config, "n_layer": 2.0},
        "n_layer_a_million": {**config, "n_layer": 10**6},
        "n_head_not_dividing": {**config, "n_head": 3},
        "n_head_zero": {**config, "n_head": 0},
        "not_gpt2": {**config, "model_type": "llama"},
        "root_a_list": [config],
    }
    return {name: json.dumps(value) for name, value in cases.items()}


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    for name, data in tf_cases().items():
        folder = OUT / "tf_index" / name
        folder.mkdir(parents=True)
        (folder / "model.ckpt.index").write_bytes(data)
    for name, data in safetensors_cases().items():
        (OUT / "safetensors").mkdir(parents=True, exist_ok=True)
        (OUT / "safetensors" / f"{name}.safetensors").write_bytes(data)
    for name, text in config_cases().items():
        (OUT / "config").mkdir(parents=True, exist_ok=True)
        (OUT / "config" / f"{name}.json").write_text(text)
    print(f"wrote {sum(1 for p in OUT.rglob('*') if p.is_file())} files into {OUT}")


if __name__ == "__main__":
    main()
