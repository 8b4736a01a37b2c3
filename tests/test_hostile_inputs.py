"""Files the project reads, made hostile: hyperparameters beyond what is supported, and costs files that are not
files, are too large, or hold fields of the wrong type or shape. Each is one line naming the file and the field.

Read loaders/weights.py (check_hparams, HPARAM_LIMITS, read_small_file) and lookahead.py's load_costs first. The
costs-file cases run `python main.py --K auto --r_table FILE` in a subprocess: the file is checked with the
flags, before any model loads, so the target named here is an empty folder.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest


from speed import calibration
from loaders import weights
from conftest import REPO_ROOT
from test_main import TINY_HPARAMS, one_error_line, run_main, tiny_params, write_hf_folder
from loaders.weights import HPARAM_LIMITS, CheckpointError

# A size just past each bound, with the others GPT-2 1558M's (n_head 25 divides n_embd 1600 and 8,200).
GPT2_1558M = {"n_vocab": 50257, "n_ctx": 1024, "n_embd": 1600, "n_head": 25, "n_layer": 48}


@pytest.mark.parametrize("key", sorted(HPARAM_LIMITS))
def test_a_size_past_its_bound_is_refused_saying_what_is_supported_and_the_bound_itself_is_accepted(key, tmp_path):
    """The bounds are above GPT-2 1558M's sizes (which pass) and each bound passes; one more is one line naming
    the file, the size and the bound, without calling the file damaged (it is not: it is unsupported)."""
    assert weights.check_hparams(GPT2_1558M, "hparams.json") == GPT2_1558M
    at_bound = {**GPT2_1558M, key: HPARAM_LIMITS[key]}
    if key in ("n_embd", "n_head"):  # n_head must divide n_embd
        at_bound.update(n_embd=HPARAM_LIMITS["n_embd"], n_head=HPARAM_LIMITS["n_head"])
    assert weights.check_hparams(at_bound, "hparams.json") == at_bound
    path = tmp_path / "hparams.json"
    path.write_text(json.dumps({**at_bound, key: HPARAM_LIMITS[key] + 1}))
    with pytest.raises(CheckpointError) as error:
        weights.read_openai_hparams(path)
    message = str(error.value)
    assert message.startswith(f"{path}: {key} is {HPARAM_LIMITS[key] + 1}; this GPT-2 supports {key} from 1 to "
                              f"{HPARAM_LIMITS[key]}") and "damaged" not in message and "\n" not in message


def test_a_model_of_8192_positions_is_refused_in_one_line_before_its_weights_are_read(tmp_path, release_124M_dir):
    """The issue's model: prompt lookup over 8,192 repeated tokens took 17-20 s and 4.2 GB. Past the n_ctx bound
    of 4,096 it is refused when its config.json is read (the weights file is not even valid)."""
    folder = write_hf_folder(tmp_path / "long", tiny_params(seed=1), TINY_HPARAMS, release_124M_dir)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "n_positions": 8192}))
    (folder / "model.safetensors").write_bytes(b"")
    result = run_main("--drafter", "lookup", "--target_model_size", folder, "--prompt", "the " * 8000, cwd=tmp_path)
    line = one_error_line(result)
    assert f"{folder / 'config.json'}: n_ctx is 8192; this GPT-2 supports n_ctx from 1 to 4096" in line
    assert result.returncode == 1


def costs_run(tmp_path, costs_file):
    """main.py with --K auto and --r_table costs_file, for a target folder with nothing in it: the file is checked
    with the flags, before any model is looked at."""
    (tmp_path / "never-loaded").mkdir(exist_ok=True)
    return run_main("--drafter", "lookup", "--K", "auto", "--r_table", costs_file,
                    "--target_model_size", tmp_path / "never-loaded", cwd=tmp_path)


GOOD = {"r_table": [1.0, 2.5], "c": None, "measured": {"1": 1.0, "2": 2.5}, "target_step_ms": 3.0,
        "target": "124M", "draft": "", "machine": "x86_64"}
BAD_FIELDS = [  # (what the file holds, the field the line must name)
    ({**GOOD, "target_step_ms": "fast"}, '"target_step_ms" must be a number'),
    ({**GOOD, "r_table": [1.0, 10**30]}, '"r_table" must be [1.0, r(2), ...]'),
    ({**GOOD, "r_table": {"1": 1.0}}, '"r_table" must be [1.0, r(2), ...]'),
    ({**GOOD, "measured": [1.0, 2.5]}, '"measured" must be {"m": r(m)}'),
    ({**GOOD, "measured": {"9" * 5000: 1.0}}, '"measured" must be {"m": r(m)}'),
    ({**GOOD, "c": 10**30}, '"c" must be a number from 0 to'),
    ({**GOOD, "round_overhead": True}, '"round_overhead" (o, in target steps) must be a number from 0 to'),
    ({**GOOD, "machine": ["x86_64"]}, '"machine" must be text'),
    ([1.0, 2.5], "must hold a JSON object"),
]


@pytest.mark.parametrize("content, expected", BAD_FIELDS, ids=[expected for _, expected in BAD_FIELDS])
def test_a_costs_file_field_of_the_wrong_type_or_shape_is_one_line_naming_the_file_and_the_field(
        tmp_path, content, expected):
    path = tmp_path / "r_table.json"
    path.write_text(json.dumps(content))
    result = costs_run(tmp_path, path)
    line = one_error_line(result)
    assert result.returncode == 2 and f"the costs file {path}" in line and expected in line, line


def test_a_costs_file_nested_100000_deep_or_of_4_mb_is_refused_unread_or_by_its_size(tmp_path):
    """A 4 MB table was accepted and printed on one line of 10 million characters; 100,000 nested arrays gave
    a RecursionError's traceback. A costs file calibrate writes is about 1 KB: the cap is 64 KB."""
    deep, large = tmp_path / "deep.json", tmp_path / "large.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    large.write_text(json.dumps({**GOOD, "r_table": [1.0] + [2.5] * 800_000}))
    for path in (deep, large):
        line = one_error_line(costs_run(tmp_path, path))
        assert f"cannot read the costs file {path}: it has {path.stat().st_size:,} bytes, more than the 65,536" in line
    nested = tmp_path / "nested.json"  # under the cap, but deeper than Python's JSON reader goes
    nested.write_text("[" * 30_000 + "]" * 30_000)
    line = one_error_line(costs_run(tmp_path, nested))
    assert f"cannot read the costs file {nested}: maximum recursion depth" in line


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are a POSIX thing")
@pytest.mark.parametrize("kind", ["a named pipe", "/dev/zero"])
def test_a_costs_file_that_is_a_pipe_or_a_device_is_refused_without_waiting_or_reading(tmp_path, kind):
    """A named pipe with no writer hung the run; /dev/zero was read until the memory ran out."""
    if kind == "a named pipe":
        path = tmp_path / "pipe.json"
        os.mkfifo(path)
    else:
        path = "/dev/zero"
        if not os.path.exists(path):
            pytest.skip("no /dev/zero here")
    try:
        result = costs_run(tmp_path, path)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the run waited on {kind}")
    line = one_error_line(result)
    assert f"cannot read the costs file {path}: it is not a regular file" in line


def test_a_good_costs_file_still_loads_every_field(tmp_path):
    path = tmp_path / "r_table.json"
    path.write_text(json.dumps({**GOOD, "c": 0.25}))
    costs = calibration.load_costs(path)
    assert (costs.r_table, costs.c, costs.measured, costs.target_step_ms) == ([1.0, 2.5], 0.25, {1: 1.0, 2: 2.5}, 3.0)


def test_benchmark_py_checks_a_model_folders_hparams_json_as_the_loaders_do(tmp_path):
    """tools/benchmark.py --random_weights read a folder's hparams.json with json.loads alone: 3 heads for a width of
    8 made random weights and then a traceback from a reshape. Now it is one line naming the file."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "hparams.json").write_text(json.dumps({**TINY_HPARAMS, "n_head": 3}))
    result = subprocess.run([sys.executable, str(REPO_ROOT / "tools/benchmark.py"), "--random_weights",
                             "--draft_model_size", str(folder), "--target_model_size", str(folder), "--Ks", "1",
                             "--img_dir", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    line = one_error_line(result)
    assert str(folder / "hparams.json") in line and "n_head=3 does not divide n_embd=8" in line


HUGE = {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 8192, "n_head": 64, "n_layer": 192}
RANDOM_WEIGHT_RUNS = {  # every command that makes random weights of a named model's shapes; "{huge}" is the model
    "random_models": ["tools/random_models.py", "--sizes", "{huge}", "--folder", "{out}"],
    "benchmark_text": ["tools/benchmark_text.py", "--size", "{huge}", "--texts", "prose"],
    "pass_parts": ["tools/pass_parts.py", "--size", "{huge}"],
    "benchmark": ["tools/benchmark.py", "--random_weights", "--draft_model_size", "124M", "--target_model_size",
                  "{huge}", "--img_dir", "{out}"],
    "benchmark_forward": ["tools/benchmark_forward.py", "--sizes", "{huge}", "--no_cache_sizes", "",
                          "--img_dir", "{out}"],
    "measure_loading": ["tools/measure_loading.py", "--sizes", "{huge}", "--folder", "{out}"],
}


def _cap_memory_at_4_gb():  # should the check ever go, the run fails fast instead of waking the OOM killer
    if sys.platform != "win32":  # (the tests using it are skipped there: setrlimit is POSIX's)
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


@pytest.mark.skipif(sys.platform == "win32", reason="the memory cap is set with POSIX's setrlimit")
@pytest.mark.parametrize("command", RANDOM_WEIGHT_RUNS.values(), ids=RANDOM_WEIGHT_RUNS)
def test_a_config_json_naming_600_gb_of_weights_is_refused_in_one_line_before_any_is_made(tmp_path, command):
    """A folder holding only a config.json within the loaders' limits (192 layers x 8192 wide) made these try to
    allocate about 600 GB: a MemoryError after 15 s under a cap, the OOM killer without. The bytes are counted
    from the shapes first; the run is one line, exit code 2, and nothing is written."""
    huge = tmp_path / "huge"
    huge.mkdir()
    (huge / "config.json").write_text(json.dumps(HUGE))
    args = [arg.replace("{huge}", str(huge)).replace("{out}", str(tmp_path / "out")) for arg in command]
    result = subprocess.run([sys.executable, str(REPO_ROOT / args[0]), *args[1:]], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60, preexec_fn=_cap_memory_at_4_gb)
    line = one_error_line(result)
    assert result.returncode == 2 and "GB of memory and this machine has" in line and str(huge) in line, line
    assert sorted(tmp_path.iterdir()) == [huge]


def test_the_bytes_a_model_needs_cover_its_random_weights_and_the_check_refuses_one_byte_less():
    """bytes_needed counts at least what random_params makes; the check passes at exactly that many bytes."""
    from loaders.random_weights import bytes_needed, check_memory_for, random_params
    from tools.benchmark_forward import n_bytes

    weights = n_bytes(random_params(TINY_HPARAMS, np.random.default_rng(0)))
    needed = bytes_needed(TINY_HPARAMS)
    assert weights <= needed <= 4 * weights  # the weights, two of the largest matrix (tiny: wte), a cache
    check_memory_for([("tiny", TINY_HPARAMS)], available=needed)
    with pytest.raises(ValueError, match=r"^tiny and tiny: random weights of these shapes need"):
        check_memory_for([("tiny", TINY_HPARAMS), ("tiny", TINY_HPARAMS)], available=2 * needed - 1)
