"""Bad input fails clearly, fast and in bounded memory: every reader gives one CheckpointError naming the file.

The corpus in tests/fixtures/bad_inputs/ (made by tests/make_bad_inputs.py from the small valid fixtures) has
one file per class of damage that a quick check would not see: TF indexes with valid block checksums whose
protobuf fields have the wrong wire type or absurd values, a prefix-compression "bomb", safetensors headers
that are valid JSON of the wrong shape, and configs with wrong types and ranges. Then a seeded mutation run
damages the valid fixtures thousands of times and checks that only CheckpointError ever escapes, and that a
mutant that loads gives exactly the original tensors (never a silently wrong one).
"""

import json
import shutil
import time
import tracemalloc

import numpy as np
import pytest

from loaders import hf_folder
from loaders import tf_checkpoint
from loaders import weights
from make_bad_inputs import HF_DIR, OUT, TF_DIR, fixture_pairs, safetensors_bytes, table
from loaders.weights import CheckpointError

HPARAMS = json.loads((TF_DIR / "hparams.json").read_text())


def tf_folder_with_index(tmp_path, index_bytes):
    """A copy of the TF fixture with its index replaced."""
    folder = tmp_path / "tf"
    shutil.copytree(TF_DIR, folder)
    (folder / "model.ckpt.index").write_bytes(index_bytes)
    return folder


@pytest.mark.parametrize("case", sorted(p.name for p in (OUT / "tf_index").iterdir()))
def test_each_bad_tf_index_is_one_checkpoint_error_naming_it(case, tmp_path):
    folder = tf_folder_with_index(tmp_path, (OUT / "tf_index" / case / "model.ckpt.index").read_bytes())
    with pytest.raises(CheckpointError, match="model.ckpt.index"):
        tf_checkpoint.load_gpt2_params_from_tf_ckpt(folder / "model.ckpt", HPARAMS)


@pytest.mark.parametrize("case", sorted(p.name for p in (OUT / "safetensors").iterdir()))
def test_each_bad_safetensors_file_is_one_checkpoint_error_naming_it(case, tmp_path):
    folder = tmp_path / "hf"
    shutil.copytree(HF_DIR, folder)
    shutil.copy(OUT / "safetensors" / case, folder / "model.safetensors")
    with pytest.raises(CheckpointError, match="model.safetensors"):
        hf_folder.load_hf_gpt2(folder)


@pytest.mark.parametrize("case", sorted(p.name for p in (OUT / "config").iterdir()))
def test_each_bad_config_is_one_checkpoint_error_naming_it_before_any_tensor_is_read(case, tmp_path):
    folder = tmp_path / "hf"
    shutil.copytree(HF_DIR, folder)
    shutil.copy(OUT / "config" / case, folder / "config.json")
    (folder / "model.safetensors").write_bytes(b"")  # never reached: the config is checked first
    with pytest.raises(CheckpointError, match="config.json"):
        hf_folder.load_hf_gpt2(folder)


@pytest.mark.parametrize("value, message", [("2", "n_layer"), (None, "n_layer"), (2.5, "n_layer"),
                                            (10**6, "supports n_layer from 1 to 192")])
def test_a_bad_hparams_json_is_one_checkpoint_error_naming_it(value, message, tmp_path):
    path = tmp_path / "hparams.json"
    path.write_text(json.dumps({**HPARAMS, "n_layer": value}))
    with pytest.raises(CheckpointError, match=f"hparams.json: .*{message}"):
        weights.read_openai_hparams(path)


def test_a_1_mb_prefix_compression_bomb_fails_in_well_under_a_second_and_100_mb(tmp_path):
    """250,000 entries of 4 bytes, each claiming to share a 250-byte key prefix: rebuilt in full, the keys
    would take 62 MB of Python bytes objects (and the issue's 1 MB index took 3.2 GB and 14 s). The entry
    count is bounded by what GPT-2 needs (at most a few hundred), so reading stops early."""
    pairs = fixture_pairs()
    key = b"model/" + b"y" * 244
    bomb = [(b"", pairs[0][1]), (key, b"")] + [(key, b"") for _ in range(250_000)]
    index = table(bomb, shared_prefix=lambda previous, current: min(len(previous), len(current)))
    assert 0.9e6 < len(index) < 1.2e6
    folder = tf_folder_with_index(tmp_path, index)
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match="entries"):
        tf_checkpoint.read_checkpoint_index(folder / "model.ckpt")
    assert time.perf_counter() - start < 5  # generous on a loaded machine; it takes ~0.1 s
    tracemalloc.start()  # again, counting what Python and NumPy allocate, on every system (getrusage is POSIX's)
    try:
        with pytest.raises(CheckpointError, match="entries"):
            tf_checkpoint.read_checkpoint_index(folder / "model.ckpt")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100e6  # bytes allocated at the peak while reading: under 100 MB


# --- a seeded mutation run: only CheckpointError escapes, and a mutant that loads loads the right tensors ------


def flat(params):
    """{path: array} of a nested params dict, to compare two loads."""
    out = {}
    for key, value in params.items():
        if key == "blocks":
            for i, block in enumerate(value):
                out.update({f"h{i}/{k}": v for k, v in flat(block).items()})
        elif isinstance(value, dict):
            out.update({f"{key}/{k}": v for k, v in flat(value).items()})
        else:
            out[key] = value
    return out


def mutate(data, rng):
    """One random edit of bytes: flip, set, insert or delete a byte, or cut the end."""
    data = bytearray(data)
    kind, i = rng.integers(5), int(rng.integers(len(data)))
    if kind == 0:
        data[i] ^= 1 << int(rng.integers(8))
    elif kind == 1:
        data[i] = int(rng.integers(256))
    elif kind == 2:
        data.insert(i, int(rng.integers(256)))
    elif kind == 3:
        del data[i]
    else:
        del data[i:]
    return bytes(data)


def test_a_thousand_mutated_tf_index_values_only_ever_give_checkpoint_errors(tmp_path):
    """Each protobuf value of the index is mutated (and the table rewritten with valid checksums, so the
    damage reaches the parsers), then the checkpoint is loaded."""
    rng = np.random.default_rng(0)
    pairs = fixture_pairs()
    folder = tf_folder_with_index(tmp_path, table(pairs))
    original = flat(tf_checkpoint.load_gpt2_params_from_tf_ckpt(folder / "model.ckpt", HPARAMS))
    outcomes = {"error": 0, "loaded": 0}
    for _ in range(1_000):
        i = int(rng.integers(len(pairs)))
        mutant = pairs[:i] + [(pairs[i][0], mutate(pairs[i][1], rng) if pairs[i][1] else b"\x08")] + pairs[i + 1 :]
        (folder / "model.ckpt.index").write_bytes(table(mutant))
        try:
            loaded = flat(tf_checkpoint.load_gpt2_params_from_tf_ckpt(folder / "model.ckpt", HPARAMS))
        except CheckpointError:
            outcomes["error"] += 1
            continue
        outcomes["loaded"] += 1
        assert loaded.keys() == original.keys() and all(np.array_equal(loaded[k], original[k]) for k in original)
    assert outcomes["error"] > 500  # most damage is caught; what loads (a changed crc32c, say) loads right


def test_two_thousand_mutated_safetensors_headers_only_ever_give_checkpoint_errors(tmp_path):
    """Mutations of the header's JSON text (the data bytes after it kept as they are)."""
    rng = np.random.default_rng(1)
    raw = (HF_DIR / "model.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header, data = raw[8 : 8 + n], raw[8 + n :]
    folder = tmp_path / "hf"
    shutil.copytree(HF_DIR, folder)
    original = flat(hf_folder.load_hf_gpt2(folder)[1])
    errors = 0
    for _ in range(2_000):
        (folder / "model.safetensors").write_bytes(safetensors_bytes(mutate(header, rng), data))
        try:
            loaded = flat(hf_folder.load_hf_gpt2(folder)[1])
        except CheckpointError:
            errors += 1
            continue
        assert all(np.array_equal(loaded[k], original[k]) for k in original)
    assert errors > 1_000
