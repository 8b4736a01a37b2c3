"""main.py's failures, as a learner meets them: one clear line, a non-zero exit code, no traceback.

Read tests/test_main.py first (the tiny random models, run_main and the runs that succeed). Offline, a download
points to the random-weights demo; a bad flag is one line before any download or loading (BAD_FLAGS, run in
this process: fast; a few in a subprocess, where the exit code and "nothing ran first" matter); a prompt, a
tree or a draft that does not fit, and weights that are NaN or overflow, are reported instead of decoded.
"""

import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from encoder import bytes_to_unicode
from loaders.random_weights import random_params
from test_main import (PROMPT, REPO_ROOT, TINY_HPARAMS, _base_env, draft_dir, one_error_line, run_main,  # noqa: F401
                       target_dir, tiny_params, write_hf_folder)


def test_offline_the_download_error_points_to_random_weights_and_leaves_no_empty_folder(tmp_path):
    """$GPT2_BASE_URL points at a closed port on 127.0.0.1 (bound, then released: nobody listens there), as
    when there is no network. `python main.py` as the README's set-up runs it: one line naming the URL and the
    folder, ending with what works offline (the sample run's random weights, in this system's temporary
    folder); and models/, which the download made, is gone again."""
    import tempfile

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run_main("--download_retries", 0, cwd=tmp_path, env={"GPT2_BASE_URL": f"http://127.0.0.1:{port}"})
    line = one_error_line(result)
    assert result.returncode == 1
    assert f"http://127.0.0.1:{port}/124M/" in line and str(Path("models") / "124M") in line and "by hand" in line
    assert f"could not connect to 127.0.0.1:{port} (" in line
    folder = Path(tempfile.gettempdir())
    assert line.endswith(f"python tools/random_models.py, then python main.py --draft_model_size "
                         f"{folder / 'random-124M'} --target_model_size {folder / 'random-355M'} (random_models.py "
                         f"needs only OpenAI's tokenizer files, encoder.json and vocab.bpe, 1.5 MB, in "
                         f"$GPT2_MODELS_DIR/124M or models/124M: copy them from anywhere that has them)"), line
    assert list(tmp_path.iterdir()) == []


def test_offline_a_hugging_face_name_points_to_random_weights_too(tmp_path):
    """gpt2 by its Hub name, with the Hub ($HF_ENDPOINT) on a closed port and an empty cache: the one line ends
    with the same pointer to what runs without a network."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    hub = {"HF_ENDPOINT": f"http://127.0.0.1:{port}", "HF_HOME": str(tmp_path / "hf"),
           "HF_HUB_CACHE": str(tmp_path / "hf" / "hub")}  # these win over the environment's (run_main's do not)
    result = subprocess.run([sys.executable, str(REPO_ROOT / "main.py"), "--target_model_size", "gpt2", "--drafter",
                             "lookup", "--download_retries", "0"], cwd=tmp_path, capture_output=True, text=True,
                            encoding="utf-8", timeout=120, env={**_base_env(), **hub})
    line = one_error_line(result)
    assert result.returncode == 1 and "could not reach the Hugging Face Hub" in line
    assert "Without a network, random weights of the same shapes run the demo: python tools/random_models.py" in line
    assert "needs only OpenAI's tokenizer files, encoder.json and vocab.bpe, 1.5 MB, in $GPT2_MODELS_DIR/124M" in line


def test_a_server_that_answers_an_error_is_not_called_offline(tmp_path):
    """A mirror that answers HTTP 404 was reached: the line says what it answered and nothing about working
    without a network."""
    import http.server
    import threading

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_error(404)

        def log_message(self, *args):  # keep the test output quiet
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()
    try:
        result = run_main("--download_retries", 0, "--base_url", f"http://127.0.0.1:{server.server_port}",
                          cwd=tmp_path)
    finally:
        server.shutdown()
        server.server_close()
    line = one_error_line(result)
    assert "404" in line and "Without a network" not in line
    assert list(tmp_path.iterdir()) == []


def test_the_base_url_flag_overrides_the_environment(tmp_path):
    """--base_url wins over $GPT2_BASE_URL: the message names the flag's URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run_main("--models_dir", tmp_path / "m", "--download_retries", 0, "--base_url",
                      f"http://127.0.0.1:{port}/mirror", cwd=tmp_path, env={"GPT2_BASE_URL": "http://127.0.0.1:9"})
    assert f"http://127.0.0.1:{port}/mirror/124M/" in one_error_line(result)


BAD_FLAGS = [
    # (flags, what the one error line must say); each is refused before anything is downloaded
    (("--target_model_size", "7B"), "--target_model_size: unknown model '7B': use one of 124M"),
    (("--draft_model_size", "no/such/folder"), "--draft_model_size: there is no folder 'no/such/folder' (seen from "),
    (("--draft_model_size", "no-such-model"), "--draft_model_size: unknown model 'no-such-model': use one of"),
    (("--draft_model_size", "124"), "--draft_model_size: unknown model '124'"),  # fire would have made it the int 124
    (("--K", 0), "--K (draft tokens per round) must be a whole number >= 1 (at most 2**63 - 1), auto or hf; got "
                 "'0'"),
    (("--K", "2.5"), "--K (draft tokens per round) must be a whole number >= 1 (at most 2**63 - 1), auto or hf"),
    (("--K", 1_000_000_000), "--K 1000000000 is more draft tokens than GPT-2's context of 1024 tokens can hold"),
    (("--n_tokens_to_generate", 2000), "more than GPT-2's context of 1024 tokens"),
    (("--temperature", -1), "--temperature must be a finite number >= 0"),
    (("--temperature", "1e-320"), "--temperature 1e-320 is too small: logits / temperature overflows float64"),
    (("--temperature", "nan"), "--temperature must be a finite number"),
    (("--top_p", 1.5), "--top_p must be a number in (0, 1]"),
    (("--top_k", "0"), "--top_k must be a whole number >= 1"),
    (("--temprature", 0.7), "unknown flag --temprature (did you mean --temperature?)"),
    (("--kv-cach", "false"), "unknown flag --kv-cach (did you mean --kv_cache?)"),
    (("--kv_cache", "maybe"), "--kv_cache must be true or false; got 'maybe'"),
    (("--trace", "1"), "--trace must be true or false; got '1'"),
    (("--verbose", "loud"), "--verbose must be true or false; got 'loud'"),
    (("--seed", -1), "--seed must be a whole number >= 0; got -1"),
    (("--seed", "abc"), "--seed must be a whole number >= 0; got 'abc'"),
    (("--download_retries", "abc"), "--download_retries must be a whole number >= 0; got 'abc'"),
    (("--download_retries", 10_000), "--download_retries must be a whole number from 0 to 20"),
    (("--base_url", 123), "--base_url must be a web address starting http:// or https://; got '123'"),
    (("--drafter", "lokup"), "--drafter must be one of model, lookup, staged; got 'lokup' (did you mean lookup?)"),
    (("--drafter", "lookup", "--max_ngram", 0), "--max_ngram must be a whole number >= 1; got 0"),
    (("--drafter", "lookup", "--max_ngram", 3, "--min_ngram", 4), "--min_ngram 4 is more than --max_ngram 3"),
    (("--max_ngram", 3), "--max_ngram sets prompt lookup's matches, which only --drafter lookup or staged makes; got "
                         "--drafter model"),  # the draft model drafts alone: it was ignored
    (("--drafter", "staged", "--min_ngram", 2), "--min_ngram sets prompt lookup's matches, which only --drafter "
                                                "lookup makes; got --drafter staged"),
    (("Hello", "world"), "'world' follows the prompt 'Hello' where the number of tokens would go: a prompt of "
                         "several words needs quotes"),  # fire's values by position: it said --n_tokens_to_generate
    (("--r_table", "r_table.json"), "--r_table gives the costs that --K auto plans with; got --K 4"),
    (("--K", "auto", "--r_table", "no/such/r_table.json"), "cannot read the costs file no/such/r_table.json"),
    (("--tree", ""), "--tree is empty"),
    (("--tree", "2,0,1"), "--tree: every branching must be >= 1"),
    (("--tree", "2,x"), "--tree must be whole numbers separated by commas"),
    (("--tree", ",".join(["2"] * 40)), "has more than 1023 nodes: it does not fit in GPT-2's context of 1024"),
    (("--tree", "2,2", "--drafter", "lookup"), "--tree needs --drafter model"),
    (("--color", "sometimes"), "--color must be one of auto, always, never"),
    (("--plot", "no/such/folder/rounds.png"), "--plot must name a file in an existing folder"),
    (("--prompt",), "--prompt needs a value"),
    (("--K", 3, "--K", 4), "--K is given twice"),
    (("-t", 1), "-t is ambiguous"),
    (("one", "two", "three", *["x"] * 40), "unexpected argument"),  # more values than main() has flags
]


@pytest.mark.parametrize("flags, expected", BAD_FLAGS, ids=[" ".join(map(str, f)) for f, _ in BAD_FLAGS])
def test_a_bad_flag_gets_one_clear_line_before_any_download(tmp_path, monkeypatch, capsys, flags, expected):
    """main.py's command line, run in this process (fast): one `error:` line, exit code 2, nothing downloaded.

    In-process is as strict as a subprocess here: an exception other than the SystemExit of the one-line
    report would fail the test with its traceback.
    """
    import main

    monkeypatch.setenv("GPT2_BASE_URL", "http://127.0.0.1:9")  # nobody listens: a download could not succeed
    with pytest.raises(SystemExit) as exit_info:
        main.run_command_line(["--models_dir", str(tmp_path / "models"), *map(str, flags)])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and expected in err, err
    assert "loading" not in out and not (tmp_path / "models").exists()


def test_an_empty_models_dir_gets_one_clear_line_instead_of_downloading_into_the_current_folder(tmp_path, capsys,
                                                                                                  monkeypatch):
    import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPT2_BASE_URL", "http://127.0.0.1:9")  # nobody listens: a download could not succeed
    with pytest.raises(SystemExit) as exit_info:
        main.run_command_line(["--models_dir", ""])
    assert exit_info.value.code == 2 and list(tmp_path.iterdir()) == []
    assert capsys.readouterr().err == "error: --models_dir is empty: name a folder to download models into\n"


def test_models_dir_naming_a_file_gets_one_clear_line(tmp_path, capsys):
    import main

    (tmp_path / "a_file").write_text("not a folder")
    with pytest.raises(SystemExit) as exit_info:
        main.run_command_line(["--models_dir", str(tmp_path / "a_file")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: --models_dir {tmp_path / 'a_file'} is a file, not a folder")


def test_a_misspelt_flag_stops_the_run_before_any_loading_in_a_subprocess_too(tmp_path, target_dir, draft_dir):
    """fire alone would run the whole comparison and only then complain about --temprature."""
    result = run_main("--prompt", PROMPT, "--draft_model_size", draft_dir, "--target_model_size", target_dir,
                      "--temprature", 0.7, cwd=tmp_path)
    assert "unknown flag --temprature (did you mean --temperature?)" in one_error_line(result)
    assert result.returncode == 2 and result.stdout == ""


def test_flags_take_fires_syntax_and_booleans_any_case(target_dir, draft_dir):
    """--name value, --name=value, a bare --flag, --noflag, -x for a unique first letter, and values by position."""
    from command_line.flags import check_flags
    from command_line.scripts import parse_command_line
    import main

    kwargs = parse_command_line(["Hello, world", "--K=3", "--nokv_cache", "--trace", "-s", "5", "--drafter",
                                     "lookup"], main.main)
    assert kwargs == {"prompt": "Hello, world", "K": "3", "kv_cache": False, "trace": True, "seed": "5",
                      "drafter": "lookup"}
    flags = check_flags(**{**main_defaults(), "kv_cache": "FALSE", "trace": "True", "K": "auto",
                               "tree": "2,2,1", "prompt": "Hello, world", "target_model_size": str(target_dir),
                               "draft_model_size": str(draft_dir)})
    assert flags.kv_cache is False and flags.trace is True and flags.K == "auto" and flags.tree == (2, 2, 1)
    assert flags.prompt == "Hello, world"  # fire would have made the tuple ("Hello", "world")


def main_defaults():
    import inspect

    import main

    return {name: p.default for name, p in inspect.signature(main.main).parameters.items()}


def test_a_prompt_and_n_longer_than_the_context_get_one_clear_line(tmp_path, target_dir, draft_dir):
    """The tiny models have n_ctx 64: a 5-token prompt + 100 new tokens does not fit."""
    result = run_main("--prompt", PROMPT, "--n_tokens_to_generate", 100,
                      "--draft_model_size", draft_dir, "--target_model_size", target_dir, cwd=tmp_path)
    line = one_error_line(result)
    assert "is more than the models' context of 64" in line and result.returncode == 2
    result = run_main("--prompt", "Hello", "--n_tokens_to_generate", 64,
                      "--draft_model_size", draft_dir, "--target_model_size", target_dir, cwd=tmp_path)
    assert "the prompt (1 token) + --n_tokens_to_generate 64 = 65 tokens" in one_error_line(result)


def test_a_tree_that_does_not_fit_after_the_prompt_and_n_gets_one_clear_line(tmp_path, target_dir, draft_dir):
    """n_ctx 64, a 6-token prompt, N = 50 (T = 56), the tree 4,4 (4 + 16 = 20 nodes): a round after L tokens sends
    min(2, T - L - 1) depths, so the round after 53 tokens still sends all 20 nodes: 73 positions."""
    result = run_main("--prompt", PROMPT, "--n_tokens_to_generate", 50, "--tree", "4,4",
                      "--draft_model_size", draft_dir, "--target_model_size", target_dir, cwd=tmp_path)
    line = one_error_line(result)
    assert "--tree 4,4 sends 20 nodes in the round after 53 tokens" in line
    assert "73 positions, more than the models' context of 64" in line and result.returncode == 2


def test_a_tree_whose_last_rounds_are_cut_short_runs_to_the_end_of_the_context(tmp_path, target_dir, draft_dir):
    """n_ctx 64, a 6-token prompt, N = 40 (T = 46), the tree 4,4: the round after 43 tokens sends 20 nodes (63
    positions), the one after 44 sends 4 (48), the one after 45 none: every round fits, though the whole tree
    after the prompt and N - 1 new tokens (45 + 20 = 65) would not."""
    result = run_main("--prompt", PROMPT, "--n_tokens_to_generate", 40, "--tree", "4,4",
                      "--draft_model_size", draft_dir, "--target_model_size", target_dir, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]


def test_a_draft_with_another_vocabulary_gets_one_clear_line(tmp_path, target_dir):
    """A draft whose own tokenizer has 257 symbols (the 256 bytes and one merge) beside a 50257-token target."""
    tokenizer = tmp_path / "tiny_tokenizer"
    tokenizer.mkdir()
    symbols = list(bytes_to_unicode().values()) + ["Ġt"]
    (tokenizer / "encoder.json").write_text(json.dumps({s: i for i, s in enumerate(symbols)}), encoding="utf-8")
    (tokenizer / "vocab.bpe").write_text("#version: 0.2\nĠ t\n", encoding="utf-8")
    hparams = {**TINY_HPARAMS, "n_vocab": len(symbols)}
    draft = write_hf_folder(tmp_path / "draft", random_params(hparams, np.random.default_rng(3)), hparams, tokenizer)
    result = run_main("--prompt", PROMPT, "--draft_model_size", draft, "--target_model_size", target_dir,
                      cwd=tmp_path)
    line = one_error_line(result)
    assert "different vocabularies" in line and "n_vocab 257)" in line and "n_vocab 50257)" in line
    assert result.returncode == 2


def test_nan_weights_are_reported_not_decoded(tmp_path, release_124M_dir):
    """A NaN in one weight makes every logit NaN, and greedy decoding would print "!!!!!" (token 0) forever."""
    params = tiny_params(seed=1)
    damaged = params["blocks"][1]["mlp"]["c_fc"]["w"].copy(order="F")  # weights are read-only: a damaged copy
    damaged[3, 5] = np.nan
    params["blocks"][1]["mlp"]["c_fc"]["w"] = damaged
    folder = write_hf_folder(tmp_path / "nan_target", params, TINY_HPARAMS, release_124M_dir)
    result = run_main("--prompt", PROMPT, "--drafter", "lookup", "--target_model_size", folder, cwd=tmp_path)
    line = one_error_line(result)
    assert result.returncode == 1 and "NaN or infinite weights in blocks.1.mlp.c_fc.w (1 NaN" in line
    assert "!!!" not in result.stdout


def test_weights_that_overflow_in_the_forward_pass_are_reported_not_decoded(tmp_path, release_124M_dir):
    """Finite weights of size 1e20: x * x in layer norm overflows float32 to inf, so the logits are NaN."""
    params = random_params(TINY_HPARAMS, np.random.default_rng(1), std=1e20)
    folder = write_hf_folder(tmp_path / "huge_target", params, TINY_HPARAMS, release_124M_dir)
    result = run_main("--prompt", PROMPT, "--drafter", "lookup", "--target_model_size", folder, cwd=tmp_path)
    assert "NaN" in one_error_line(result) and result.returncode == 1
    assert "!!!" not in result.stdout


def test_a_tool_that_decodes_overflowing_weights_says_so_in_one_line_as_main_py_does(tmp_path, release_124M_dir):
    """tools/benchmark.py reads no weight check of its own: the NaN the overflow makes reaches checks.check_finite
    in its first pass, and the tool ends as main.py does (every script's ending: one line, exit code 1), not in
    a traceback."""
    params = random_params(TINY_HPARAMS, np.random.default_rng(1), std=1e20)
    folder = write_hf_folder(tmp_path / "huge", params, TINY_HPARAMS, release_124M_dir)
    flags = ["--draft_model_size", folder, "--target_model_size", folder, "--Ks", 1, "--n_tokens_to_generate", 3,
             "--repeats", 1, "--prefix_length", 4, "--prompts", "Hello", "--img_dir", tmp_path / "plots"]
    result = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "benchmark.py"), *map(str, flags)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "the model produced NaN/inf logits" in one_error_line(result) and result.returncode == 1
