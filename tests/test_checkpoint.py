"""Reading TensorFlow checkpoints without TensorFlow, checked against two real peers:

- OpenAI's real 124M `model.ckpt.index` (fixture `release_124M_dir`; its 498 MB data file is not needed to
  check the table of contents);
- a tiny GPT-2 checkpoint written by TensorFlow itself (tests/fixtures/tf_ckpt/, made by
  tests/make_tf_checkpoint_fixture.py), with TF's own `tf.train.list_variables` output and the exact values
  it saved.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from loaders.tf_checkpoint import (
    crc32c,
    list_checkpoint_variables,
    load_gpt2_params_from_tf_ckpt,
    masked_crc32c,
    read_checkpoint_index,
    read_varint,
)
from loaders.weights import CheckpointError, gpt2_param_shapes

TF_CKPT_DIR = Path(__file__).resolve().parent / "fixtures" / "tf_ckpt"
DATA_FILE = "model.ckpt.data-00000-of-00001"


def load_fixture_hparams():
    return json.loads((TF_CKPT_DIR / "hparams.json").read_text())


@pytest.fixture
def ckpt_copy(tmp_path):
    """A copy of the TF fixture checkpoint in tmp_path, free to damage. Returns the checkpoint prefix."""
    for name in ("model.ckpt.index", DATA_FILE):
        shutil.copy(TF_CKPT_DIR / name, tmp_path / name)
    return tmp_path / "model.ckpt"


# --- the building blocks ---------------------------------------------------------------------------------


def test_crc32c_gives_the_standard_check_value():
    """CRC-32C of the ASCII digits 1..9 is 0xE3069283 (the check value in every CRC catalogue)."""
    assert crc32c(b"123456789") == 0xE3069283


def test_a_varint_keeps_7_bits_per_byte_low_bits_first():
    """0x96 0x01 = 0b0010110 + (0b0000001 << 7) = 22 + 128 = 150, and the position moves past both bytes."""
    assert read_varint(b"\x96\x01\xff", 0) == (150, 2)
    assert read_varint(b"\x00", 0) == (0, 1)


# --- OpenAI's real 124M index ----------------------------------------------------------------------------


def test_the_real_124M_index_lists_148_variables_with_the_released_shapes(release_124M_dir):
    """12 blocks x 12 variables + wte, wpe, ln_f/g, ln_f/b = 148, with the shapes of OpenAI's release."""
    variables = dict(list_checkpoint_variables(release_124M_dir / "model.ckpt"))

    assert len(variables) == 148
    assert variables["model/wte"] == [50257, 768]
    assert variables["model/wpe"] == [1024, 768]
    assert variables["model/h0/attn/c_attn/w"] == [1, 768, 2304]
    assert variables["model/h0/attn/c_attn/b"] == [2304]
    assert variables["model/h5/mlp/c_fc/w"] == [1, 768, 3072]
    assert variables["model/h11/mlp/c_proj/w"] == [1, 3072, 768]
    assert variables["model/h11/mlp/c_proj/b"] == [768]
    assert variables["model/ln_f/g"] == [768]


def test_the_real_124M_index_lists_its_variables_sorted_by_name(release_124M_dir):
    names = [name for name, _shape in list_checkpoint_variables(release_124M_dir / "model.ckpt")]
    assert names == sorted(names)
    assert names[0] == "model/h0/attn/c_attn/b"


def test_the_real_124M_index_accounts_for_497759232_bytes_of_float32(release_124M_dir):
    """124,439,808 parameters x 4 bytes = 497,759,232 bytes, laid end to end in the data file."""
    num_shards, entries = read_checkpoint_index(release_124M_dir / "model.ckpt")

    assert num_shards == 1
    for name, entry in entries.items():
        assert entry["dtype"] == 1, name  # DT_FLOAT
        assert entry["size"] == 4 * int(np.prod(entry["shape"])), name
    assert sum(entry["size"] for entry in entries.values()) == 497_759_232
    ends = sorted((entry["offset"], entry["offset"] + entry["size"]) for entry in entries.values())
    assert ends[0][0] == 0
    assert all(end == next_start for (_, end), (next_start, _) in zip(ends, ends[1:]))  # no gaps, no overlaps


def test_the_real_124M_index_matches_its_hparams_and_then_the_loader_wants_the_data_file(
    release_124M_dir, tmp_path
):
    """The names and shapes pass the loader's checks for hparams.json; only then does it look for the data."""
    shutil.copy(release_124M_dir / "model.ckpt.index", tmp_path / "model.ckpt.index")
    hparams = json.loads((release_124M_dir / "hparams.json").read_text())
    assert len(gpt2_param_shapes(hparams)) == 148

    with pytest.raises(CheckpointError, match=f"{tmp_path / DATA_FILE}: file not found"):
        load_gpt2_params_from_tf_ckpt(tmp_path / "model.ckpt", hparams)


# --- the tiny checkpoint written by TensorFlow ---------------------------------------------------------------


def test_the_variable_list_equals_tensorflows_own_list_variables():
    tf_listed = json.loads((TF_CKPT_DIR / "list_variables.json").read_text())["variables"]
    ours = list_checkpoint_variables(TF_CKPT_DIR / "model.ckpt")
    assert ours == [(name, shape) for name, shape in tf_listed]
    assert len(ours) == 4 + 12 * load_fixture_hparams()["n_layer"]


def test_the_loaded_params_are_exactly_the_values_tensorflow_saved():
    expected = np.load(TF_CKPT_DIR / "expected.npz")
    params = load_gpt2_params_from_tf_ckpt(TF_CKPT_DIR / "model.ckpt", load_fixture_hparams())

    assert np.array_equal(params["wte"], expected["model/wte"])
    assert np.array_equal(params["wpe"], expected["model/wpe"])
    assert np.array_equal(params["ln_f"]["g"], expected["model/ln_f/g"])
    assert np.array_equal(params["ln_f"]["b"], expected["model/ln_f/b"])
    assert len(params["blocks"]) == 2
    for i, block in enumerate(params["blocks"]):
        for layer, parts in [("ln_1", "gb"), ("ln_2", "gb")]:
            for part in parts:
                assert np.array_equal(block[layer][part], expected[f"model/h{i}/{layer}/{part}"])
        for layer in ("attn/c_attn", "attn/c_proj", "mlp/c_fc", "mlp/c_proj"):
            group, sub = layer.split("/")
            stored_w = expected[f"model/h{i}/{layer}/w"]  # [1, n_in, n_out]
            assert np.array_equal(block[group][sub]["w"], stored_w[0])
            assert np.array_equal(block[group][sub]["b"], expected[f"model/h{i}/{layer}/b"])
    assert block["attn"]["c_attn"]["w"].shape == (8, 24)
    assert block["mlp"]["c_proj"]["w"].shape == (32, 8)


def test_every_loaded_array_is_float32_with_the_shape_gpt2_uses():
    hparams = load_fixture_hparams()
    params = load_gpt2_params_from_tf_ckpt(TF_CKPT_DIR / "model.ckpt", hparams)
    for name, shape in gpt2_param_shapes(hparams).items():
        array = params
        for key in name.split("/"):
            array = array["blocks"][int(key[1:])] if key[0] == "h" and key[1:].isdigit() else array[key]
        assert type(array) is np.ndarray, name  # an array in memory, not a view into the file
        assert array.dtype == np.float32, name
        assert array.shape == shape, name


def test_tensorflow_stores_the_masked_crc32c_of_each_tensors_bytes():
    """Why verify_checksums compares masked_crc32c(bytes): that is what TF's BundleWriter writes."""
    _, entries = read_checkpoint_index(TF_CKPT_DIR / "model.ckpt")
    data = (TF_CKPT_DIR / DATA_FILE).read_bytes()
    for name, entry in entries.items():
        tensor_bytes = data[entry["offset"] : entry["offset"] + entry["size"]]
        assert masked_crc32c(tensor_bytes) == entry["crc32c"], name
        assert crc32c(tensor_bytes) != entry["crc32c"], name
    load_gpt2_params_from_tf_ckpt(TF_CKPT_DIR / "model.ckpt", load_fixture_hparams(), verify_checksums=True)


# --- damaged files: a CheckpointError that names the file, never a silently wrong tensor --------------------


def assert_names_the_damaged_file_and_what_to_do(error, path):
    """The file, and: in a folder of the user's own (these tests' copies), make or copy it again; main.py
    downloads only into a folder named after a released size (and the Hub's cache), where deleting it and running
    again downloads it afresh."""
    message = str(error.value)
    assert str(path) in message and "The file is damaged or incomplete" in message
    assert ("delete it and run again to download it afresh" in message) == (path.parent.name == "124M"), message
    assert ("make or copy it again" in message) == (path.parent.name != "124M"), message


def test_a_damaged_file_in_a_download_folder_is_to_be_deleted_and_downloaded_again(tmp_path):
    """The same truncated data file in models_dir/124M, where main.py downloads OpenAI's files: delete it, and
    the next run fetches it again (anywhere else nothing would be downloaded: tests above)."""
    folder = tmp_path / "models" / "124M"
    shutil.copytree(TF_CKPT_DIR, folder)
    data_path = folder / DATA_FILE
    data_path.write_bytes(data_path.read_bytes()[:-4])
    with pytest.raises(CheckpointError) as error:
        load_gpt2_params_from_tf_ckpt(folder / "model.ckpt", load_fixture_hparams())
    assert_names_the_damaged_file_and_what_to_do(error, data_path)


def assert_names_the_missing_file_and_says_copy_it(error, path):
    """A file that is not there: nothing to delete (a folder given by its path is never downloaded into)."""
    message = str(error.value)
    assert message.startswith(f"{path}: file not found. Copy it into that folder") and "delete" not in message


def test_a_truncated_data_file_is_a_CheckpointError_naming_it(ckpt_copy):
    data_path = ckpt_copy.parent / DATA_FILE
    data_path.write_bytes(data_path.read_bytes()[:-4])  # the last float is missing
    with pytest.raises(CheckpointError) as error:
        load_gpt2_params_from_tf_ckpt(ckpt_copy, load_fixture_hparams())
    assert_names_the_damaged_file_and_what_to_do(error, data_path)
    assert "9148 bytes" in str(error.value) and "9152" in str(error.value)


def test_a_data_file_with_extra_bytes_is_a_CheckpointError_naming_it(ckpt_copy):
    data_path = ckpt_copy.parent / DATA_FILE
    data_path.write_bytes(data_path.read_bytes() + b"\x00" * 4)
    with pytest.raises(CheckpointError) as error:
        load_gpt2_params_from_tf_ckpt(ckpt_copy, load_fixture_hparams())
    assert_names_the_damaged_file_and_what_to_do(error, data_path)


def test_a_missing_data_file_is_a_CheckpointError_naming_it(ckpt_copy):
    (ckpt_copy.parent / DATA_FILE).unlink()
    with pytest.raises(CheckpointError) as error:
        load_gpt2_params_from_tf_ckpt(ckpt_copy, load_fixture_hparams())
    assert_names_the_missing_file_and_says_copy_it(error, ckpt_copy.parent / DATA_FILE)


def test_a_missing_index_file_is_a_CheckpointError_naming_it(ckpt_copy):
    index_path = ckpt_copy.parent / "model.ckpt.index"
    index_path.unlink()
    with pytest.raises(CheckpointError) as error:
        list_checkpoint_variables(ckpt_copy)
    assert_names_the_missing_file_and_says_copy_it(error, index_path)


def test_an_index_with_a_flipped_magic_byte_is_a_CheckpointError_naming_it(ckpt_copy):
    index_path = ckpt_copy.parent / "model.ckpt.index"
    index = bytearray(index_path.read_bytes())
    index[-1] ^= 0xFF
    index_path.write_bytes(index)
    with pytest.raises(CheckpointError, match="magic number") as error:
        list_checkpoint_variables(ckpt_copy)
    assert_names_the_damaged_file_and_what_to_do(error, index_path)


def test_an_index_with_a_corrupt_varint_in_its_footer_is_a_CheckpointError(ckpt_copy):
    """0xFF bytes say "more follows" forever: a varint longer than the 10 bytes any 64-bit number needs."""
    index_path = ckpt_copy.parent / "model.ckpt.index"
    index = bytearray(index_path.read_bytes())
    index[-48:-8] = b"\xff" * 40  # the two block handles and the padding
    index_path.write_bytes(index)
    with pytest.raises(CheckpointError, match="varint") as error:
        list_checkpoint_variables(ckpt_copy)
    assert_names_the_damaged_file_and_what_to_do(error, index_path)


def test_an_index_with_a_flipped_byte_inside_a_block_fails_the_block_checksum(ckpt_copy):
    index_path = ckpt_copy.parent / "model.ckpt.index"
    index = bytearray(index_path.read_bytes())
    position = index.find(b"c_attn")  # inside the first data block
    index[position] ^= 0x01
    index_path.write_bytes(index)
    with pytest.raises(CheckpointError, match="crc32c") as error:
        list_checkpoint_variables(ckpt_copy)
    assert_names_the_damaged_file_and_what_to_do(error, index_path)


def test_a_flipped_byte_in_the_data_is_caught_when_checksums_are_verified(ckpt_copy):
    data_path = ckpt_copy.parent / DATA_FILE
    data = bytearray(data_path.read_bytes())
    data[100] ^= 0x01
    data_path.write_bytes(data)
    with pytest.raises(CheckpointError, match="crc32c") as error:
        load_gpt2_params_from_tf_ckpt(ckpt_copy, load_fixture_hparams(), verify_checksums=True)
    assert_names_the_damaged_file_and_what_to_do(error, data_path)


def test_hparams_that_do_not_match_the_checkpoint_are_a_CheckpointError(ckpt_copy):
    with pytest.raises(CheckpointError, match="h2/attn/c_attn/b"):
        load_gpt2_params_from_tf_ckpt(ckpt_copy, {**load_fixture_hparams(), "n_layer": 3})
    with pytest.raises(CheckpointError, match="wte has shape"):
        load_gpt2_params_from_tf_ckpt(ckpt_copy, {**load_fixture_hparams(), "n_vocab": 51})
