"""command_line/flags.py, main.py's command line: odd flag values get one `error:` line that names the flag, before any work.

Read tests/test_main.py first (it runs the demo end to end; the tiny random models and the helpers come from
there), then tests/test_main_failures.py (the ordinary bad flags). This file holds the odd values a shell or a
script can produce: numbers of thousands of digits (Python itself refuses to read an int of more than 4,300),
floats that round to 0 or to infinity, text that is not UTF-8, a --plot path that cannot be written, and `--K hf`.
A run is in this process where only the message matters (fast) and in a subprocess where the exit code and
"nothing ran first" matter.
"""

import os
import re
import subprocess
import sys

import pytest
from test_main import PROMPT, REPO_ROOT, _base_env, draft_dir, one_error_line, run_main, target_dir  # noqa: F401

from command_line.flags import as_number, check_flags, check_writable, errors_as_one_line
import main

HUGE = "9" * 5000  # more digits than Python's int() reads from text (4,300)


def run_in_process(argv, tmp_path, monkeypatch, capsys):
    """main.py's command line in this process, nothing downloadable: (exit code, stdout, stderr)."""
    monkeypatch.setenv("GPT2_BASE_URL", "http://127.0.0.1:9")  # nobody listens: a download could not succeed
    models_dir = [] if "--models_dir" in argv else ["--models_dir", str(tmp_path / "models")]
    with pytest.raises(SystemExit) as exit_info:
        main.run_command_line([*models_dir, *argv])
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


NUMBER_FLAGS = ["--seed", "--n_tokens_to_generate", "--top_k", "--max_ngram", "--min_ngram", "--download_retries",
                "--tree", "--K", "--temperature", "--top_p", "--download_deadline"]


@pytest.mark.parametrize("value", [HUGE, "-" + HUGE, "+" + HUGE], ids=["huge", "huge negative", "huge plus"])
@pytest.mark.parametrize("flag", NUMBER_FLAGS)
def test_a_number_of_thousands_of_digits_gets_one_short_line_naming_its_flag(tmp_path, monkeypatch, capsys, flag,
                                                                              value):
    """Exit code 2 (bad input), one `error:` line that names the flag and quotes the value cut short: no
    "Exceeds the limit (4300 digits)" from Python, and no 5,000-digit line on the terminal."""
    code, out, err = run_in_process([flag, value], tmp_path, monkeypatch, capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"error: {flag}") and err.count("\n") == 1, err
    assert "4300" not in err and len(err) < 300 and "99999..." in err, err


@pytest.mark.parametrize("flag", NUMBER_FLAGS)
def test_a_huge_number_from_python_is_refused_by_name_too(flag, target_dir):
    """main(seed=10**5000) from Python: the int never was text, and Python cannot even write it (over 4,300
    digits), so the message describes its size instead of quoting it (messages.shown)."""
    name = flag.lstrip("-")
    value = (10**5000,) if name == "tree" else 10**5000
    with pytest.raises(ValueError, match=rf"^{flag}.*a number of about 5000 digits") as error:
        check_flags(**{**defaults(target_dir), name: value})
    assert len(str(error.value)) < 300


def defaults(target_dir):
    """main()'s defaults, with the tiny target so that nothing names a model that would need downloading."""
    import inspect

    values = {name: p.default for name, p in inspect.signature(main.main).parameters.items()}
    return {**values, "target_model_size": str(target_dir), "draft_model_size": str(target_dir)}


def test_leading_zeros_do_not_count_as_digits(target_dir):
    """"000...0007" is 7, however many zeros come first: only the digits after them are counted and read."""
    flags = check_flags(**{**defaults(target_dir), "seed": "0" * 5000 + "7", "tree": "0" * 5000 + "2,1"})
    assert flags.seed == 7 and flags.tree == (2, 1)


@pytest.mark.parametrize("flag, value, expected", [
    ("--seed", str(2**128 - 1), None),  # the largest seed taken
    ("--seed", str(2**128), "--seed must be a whole number from 0 to 2**128 - 1"),
    ("--top_k", str(2**63 - 1), None),  # NumPy's largest int64
    ("--top_k", str(2**63), "--top_k must be a whole number from 1 to 2**63 - 1"),
    ("--temperature", "1e308", None),
    ("--temperature", "1e309", "--temperature must be a finite number; got '1e309'"),  # float64 overflows to inf
    ("--temperature", "1e-400", "--temperature '1e-400' is too close to 0 for a float64 (it would round to 0)"),
    ("--top_p", "0." + "0" * 400 + "1", "--top_p '0.000000"),  # 1e-401: rounds to 0, not silently to 0.0
    ("--temperature", "0e-400", None),  # really 0: greedy decoding
])
def test_the_bounds_of_a_number_are_exact(target_dir, flag, value, expected):
    """Just inside a bound is taken, just outside is refused with the bound in the message."""
    arguments = {**defaults(target_dir), flag.lstrip("-"): value}
    if expected is None:
        check_flags(**arguments)
    else:
        with pytest.raises(ValueError, match="^" + re.escape(expected)):
            check_flags(**arguments)


@pytest.mark.parametrize("flag, value", [("--seed", "0" * 500_000 + "x"), ("--tree", "2," + "0" * 500_000 + "x"),
                                         ("--base_url", "http://" + "a" * 500_000 + " x")])
def test_a_long_value_that_is_not_a_number_or_an_address_is_refused_without_backtracking(target_dir, flag, value):
    """The patterns read such a value once: "0*(\\d+)" or "[^\\s/]+\\S*" would try every way to split the run
    before failing: n² steps, over 10 minutes for 500,000 characters (then pytest.ini's timeout of 300 s fails
    the test; measured here: 110 s for 100,000 zeros, 1.2 s for an address of 20,000 characters)."""
    with pytest.raises(ValueError, match="^" + flag):
        check_flags(**{**defaults(target_dir), flag.lstrip("-"): value})


def test_minus_zero_is_zero():
    """`--temperature -0` is greedy decoding like 0, and the run's heading prints temperature=0.0, not -0.0."""
    assert str(as_number("-0", "--temperature")) == "0.0"
    assert str(as_number(-0.0, "--temperature")) == "0.0"


# ------------------------------------------------------------------------------------------------------------
# Text that is not UTF-8
# ------------------------------------------------------------------------------------------------------------


def test_a_prompt_that_is_not_utf8_is_refused_before_the_models_load(tmp_path, target_dir, draft_dir):
    """The shell hands Python the bytes b"caf\\xe9" (Latin-1 é): Python keeps the byte as the "surrogate escape"
    U+DCE9, which the tokenizer would refuse only after loading, without saying which flag. Now: one line
    naming --prompt and the byte, exit code 2, and nothing printed before it (no "loading")."""
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "main.py"), "--prompt", b"caf\xe9", "--draft_model_size", str(draft_dir),
         "--target_model_size", str(target_dir)],
        cwd=tmp_path, capture_output=True, text=True, encoding="utf-8", timeout=120, env=_base_env(),
    )
    line = one_error_line(result)
    assert result.returncode == 2 and result.stdout == ""
    assert line == "error: --prompt is not valid UTF-8 text: it holds the byte 0xe9 at character 3; give it in UTF-8"


@pytest.mark.skipif(sys.platform == "win32", reason="the C locale's surrogate escapes are POSIX's")
def test_a_utf8_prompt_under_the_c_locale_is_read_as_the_text_it_is(tmp_path, target_dir, draft_dir):
    """`LANG=C PYTHONUTF8=0 python main.py --prompt café`: the C locale decodes no byte past ASCII, so sys.argv held
    'caf\\udcc3\\udca9' and the run called a valid prompt "not valid UTF-8". Its bytes are UTF-8: it is 'café'."""
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "main.py"), "--prompt", "café".encode(), "--draft_model_size", str(draft_dir),
         "--target_model_size", str(target_dir), "--n_tokens_to_generate", "2"],
        cwd=tmp_path, capture_output=True, text=True, encoding="utf-8", timeout=120,
        env={**_base_env(), "LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0"},
    )
    assert result.returncode == 0 and "prompt (3 tokens): café\n" in result.stdout, result.stderr[-2000:]


@pytest.mark.parametrize("flag", ["--prompt", "--models_dir", "--target_model_size", "--draft_model_size", "--plot",
                                  "--base_url", "--color", "--drafter"])
def test_every_text_flag_must_be_utf8(tmp_path, monkeypatch, capsys, flag):
    """"\\udcff" is how Python writes the byte 0xff from a command line that is not UTF-8."""
    code, out, err = run_in_process([flag, "x\udcff"], tmp_path, monkeypatch, capsys)
    assert code == 2 and out == ""
    assert err == f"error: {flag} is not valid UTF-8 text: it holds the byte 0xff at character 1; give it in UTF-8\n"


def test_a_prompt_that_is_empty_is_refused_before_the_models_load(tmp_path, monkeypatch, capsys):
    code, out, err = run_in_process(["--prompt", ""], tmp_path, monkeypatch, capsys)
    assert code == 2 and out == "" and err == "error: --prompt is empty: give some text to continue\n"


# ------------------------------------------------------------------------------------------------------------
# Paths: --plot and --models_dir are checked before the run, not after it
# ------------------------------------------------------------------------------------------------------------


def unwritable_plot_paths(tmp_path):
    """{what: a --plot path that no run can write, not even root's}."""
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)  # a named pipe with no reader: opening it to write would wait forever
    return {
        "a name too long": (tmp_path / ("x" * 300 + ".png"), "File name too long"),
        "a named pipe": (fifo, "is not a regular file"),
        "a folder's name": (tmp_path / "folder.png", "must name a file in an existing folder"),
        "under a file": (tmp_path / "a_file" / "rounds.png", "must name a file in an existing folder"),
    }


@pytest.mark.parametrize("what", ["a name too long", "a named pipe", "a folder's name", "under a file"])
def test_a_plot_path_that_cannot_be_written_stops_the_run_before_the_models_load(tmp_path, target_dir, draft_dir,
                                                                                  what):
    """Before, the picture was written after the whole run, and only then did the path fail."""
    pytest.importorskip("matplotlib")
    (tmp_path / "folder.png").mkdir()
    (tmp_path / "a_file").write_text("not a folder")
    path, expected = unwritable_plot_paths(tmp_path)[what]
    result = run_main("--prompt", PROMPT, "--draft_model_size", draft_dir, "--target_model_size", target_dir,
                      "--plot", path, cwd=tmp_path)
    line = one_error_line(result)
    assert result.returncode == 2 and result.stdout == ""  # nothing loaded, nothing decoded
    assert line.startswith("error: --plot") and expected in line, line


def test_a_plot_into_a_read_only_folder_stops_the_run_before_the_models_load(tmp_path, monkeypatch, capsys,
                                                                             read_only_folder):
    pytest.importorskip("matplotlib")
    code, out, err = run_in_process(["--plot", str(read_only_folder / "rounds.png")], tmp_path, monkeypatch, capsys)
    assert code == 2 and out == ""
    assert err == f"error: --plot {read_only_folder / 'rounds.png'} cannot be written: Permission denied\n"


def test_checking_that_the_plot_can_be_written_leaves_the_folder_as_it_was(tmp_path):
    """A new path: made and removed again. An existing file: opened to append, its bytes unchanged."""
    check_writable(tmp_path / "new.png", "--plot")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "old.png").write_bytes(b"old picture")
    check_writable(tmp_path / "old.png", "--plot")
    assert (tmp_path / "old.png").read_bytes() == b"old picture"


@pytest.mark.parametrize("models_dir, expected", [
    ("a_file/models", "a_file is a file, so no folder can be made under it"),
    ("x" * 300, "cannot be a folder: File name too long"),
])
def test_a_models_dir_that_cannot_be_made_is_refused_first(tmp_path, monkeypatch, capsys, models_dir, expected):
    """Before, `--models_dir a_file/models` ended in a NotADirectoryError traceback at the first download."""
    (tmp_path / "a_file").write_text("not a folder")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPT2_BASE_URL", "http://127.0.0.1:9")
    with pytest.raises(SystemExit) as exit_info:
        main.run_command_line(["--models_dir", models_dir])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: --models_dir") and expected in err, err


@pytest.mark.parametrize("where", ["--base_url", "$GPT2_BASE_URL"])
@pytest.mark.parametrize("url, expected", [
    ("ftp://mirror/gpt2", "must be a web address starting http:// or https://; got 'ftp://mirror/gpt2'"),
    ("http://127.0.0.1:99999/", "is not a valid web address (Port out of range 0-65535)"),
    ("http://[::1/gpt2", "is not a valid web address (Invalid IPv6 URL)"),
])
def test_a_download_address_that_cannot_work_is_refused_first_naming_where_it_came_from(tmp_path, monkeypatch,
                                                                                        capsys, where, url, expected):
    """Before, these reached the download and came back as requests' words ("No connection adapters were
    found"), naming neither the flag nor the environment variable."""
    monkeypatch.setenv("GPT2_BASE_URL", url if where == "$GPT2_BASE_URL" else "http://127.0.0.1:9")
    flag = ["--base_url", url] if where == "--base_url" else []
    with pytest.raises(SystemExit) as exit_info:
        main.run_command_line(["--models_dir", str(tmp_path / "models"), "--drafter", "lookup", *flag])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith(f"error: {where} {expected}"), err
    assert not (tmp_path / "models").exists()


def test_a_broken_GPT2_BASE_URL_does_not_matter_when_nothing_is_downloaded_from_it(target_dir, monkeypatch):
    """It only names where released sizes come from: local folders (as here) or Hub names never read it."""
    monkeypatch.setenv("GPT2_BASE_URL", "ftp://mirror")
    assert check_flags(**defaults(target_dir)).target_model_size == str(target_dir)


def test_a_model_name_too_long_for_a_path_gets_one_line(tmp_path, monkeypatch, capsys):
    """Looking for a folder of that name fails in the file system (ENAMETOOLONG), not with "unknown model"."""
    code, out, err = run_in_process(["--target_model_size", "a" * 5000], tmp_path, monkeypatch, capsys)
    assert code == 2 and err.startswith("error: --target_model_size") and "'aaaa" in err and "File name too long" in err
    assert len(err) < 300


def test_a_file_that_cannot_be_read_or_written_is_one_line_with_exit_code_1(capsys):
    """An OSError (a file system's refusal) names its file: not bad input (2), not a bug (a traceback)."""
    with pytest.raises(SystemExit) as exit_info, errors_as_one_line():
        raise PermissionError(13, "Permission denied", "/models/124M/encoder.json")
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == "error: /models/124M/encoder.json: Permission denied\n"


# ------------------------------------------------------------------------------------------------------------
# --K hf: Hugging Face's schedule
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["hf", "HF", " hf "])
def test_K_takes_hf_as_sampling_does(text, target_dir):
    assert check_flags(**{**defaults(target_dir), "K": text}).K == "hf"


def test_K_hf_runs_hugging_faces_schedule_and_reports_the_positions_it_drafted(tmp_path, target_dir):
    """Draft = target at temperature 0, so every guess is kept. N = 12; the schedule starts at k = 5 and its
    k_max is min(16, N - 1) = 11. Round 1: k = 5 guesses, all kept, + 1 bonus = 6 tokens; k becomes 5 + 2 = 7.
    Round 2: only 12 - 6 = 6 tokens remain, so k = min(7, 6 - 1) = 5: 6 more. So 2 rounds, mean k 5.00, and
    draft positions 1..5 each kept 2 of 2 (a fixed K=4 would report 3 rounds and positions 1..4)."""
    result = run_main("--prompt", PROMPT, "--n_tokens_to_generate", 12, "--K", "hf", "--draft_model_size",
                      target_dir, "--target_model_size", target_dir, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "speculative sampling, draft" in out and ", K=hf:" in out
    assert "acceptance rate: 1.00 (10 of 10 checked draft tokens kept; by draft position 1..5: 1.00, 1.00, 1.00, " \
           "1.00, 1.00)" in out
    assert "drafter model, K=hf: 2 rounds, mean k 5.00" in out
    assert "target forward passes: autoregressive 12, speculative 2 (6.00 tokens per target pass)" in out
    assert "the two texts are identical: yes" in out


def test_a_run_that_drafted_no_guess_says_so_instead_of_an_empty_range_of_positions():
    """--K auto choosing k = 0 every round read "by draft position 1..0:" with nothing after it. A fixed K still
    lists its positions, each n/a."""
    from types import SimpleNamespace

    from command_line.report import acceptance_line
    from records import SpeculativeStats

    line = acceptance_line(SpeculativeStats(), SimpleNamespace(K="auto", tree=None))
    assert line == "acceptance rate: 0.00 (0 of 0 checked draft tokens kept; no guess was drafted)"
    line = acceptance_line(SpeculativeStats(), SimpleNamespace(K=3, tree=None))
    assert line.endswith("kept; by draft position 1..3: n/a, n/a, n/a)")


def test_an_unknown_flag_thousands_of_characters_long_is_quoted_cut_short(tmp_path, monkeypatch, capsys):
    code, out, err = run_in_process(["--" + "a" * 5000, "1"], tmp_path, monkeypatch, capsys)
    assert code == 2
    expected = "error: unknown flag --" + "a" * 58 + "... (5,002 characters); python main.py --help lists every flag"
    assert err == expected + "\n"


# ------------------------------------------------------------------------------------------------------------
# The terminal: an encoding that cannot show a character, a reader that goes away
# ------------------------------------------------------------------------------------------------------------


def test_a_terminal_that_cannot_show_a_character_gets_an_escape_not_a_traceback(tmp_path, target_dir):
    """PYTHONIOENCODING=ascii stands for an old terminal: the prompt's é is printed as \\xe9."""
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "main.py"), "--prompt", "Alan é", "--n_tokens_to_generate", "3",
         "--drafter", "lookup", "--target_model_size", str(target_dir)],
        cwd=tmp_path, capture_output=True, timeout=120, env={**_base_env(), "PYTHONIOENCODING": "ascii"},
    )
    assert result.returncode == 0, result.stderr.decode("ascii", "replace")
    assert b"prompt (2 tokens): Alan \\xe9\n" in result.stdout


def test_when_the_reader_of_the_output_goes_away_the_run_stops_quietly(tmp_path):
    """`python main.py | head -3`: head exits, the next print raises BrokenPipeError. A subprocess whose main()
    raises it at once (a real pipe may or may not still have room when head leaves): exit code 1, no traceback."""
    script = ("import sys; sys.path.insert(0, sys.argv[1]); import main\n"
              "def broken(**flags):\n    raise BrokenPipeError(32, 'Broken pipe')\n"
              "main.main = broken\nmain.run_command_line([])\n")
    result = subprocess.run([sys.executable, "-c", script, str(REPO_ROOT)], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, env=_base_env())
    assert result.returncode == 1 and result.stderr == "", result.stderr


# ------------------------------------------------------------------------------------------------------------
# --download_deadline: the overall time one file's download may take
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [
    ("0", "--download_deadline must be a number of seconds > 0; got '0'"),
    ("-5", "--download_deadline must be a number of seconds > 0; got '-5'"),
    ("soon", "--download_deadline must be a number; got 'soon'"),
    ("inf", "--download_deadline must be a finite number; got 'inf'"),
    (HUGE, "--download_deadline must be a finite number; got '9999"),
])
def test_a_download_deadline_that_is_not_seconds_is_refused_first(tmp_path, monkeypatch, capsys, value, expected):
    code, out, err = run_in_process(["--download_deadline", value], tmp_path, monkeypatch, capsys)
    assert code == 2 and out == "" and err.startswith("error: " + expected) and len(err) < 300, err


def test_a_bad_GPT2_DOWNLOAD_DEADLINE_is_refused_before_a_download_and_ignored_without_one(tmp_path, monkeypatch,
                                                                                         capsys, target_dir):
    """The variable only bounds downloads: with a released size it is checked first (exit code 2, nothing made
    in --models_dir); with local folders nothing is downloaded, so it does not matter; the flag wins over it."""
    monkeypatch.setenv("GPT2_DOWNLOAD_DEADLINE", "soon")
    code, out, err = run_in_process(["--drafter", "lookup"], tmp_path, monkeypatch, capsys)
    assert code == 2 and "GPT2_DOWNLOAD_DEADLINE must be a number of seconds > 0; got 'soon'" in err, err
    assert not (tmp_path / "models").exists()
    assert check_flags(**defaults(target_dir)).download_deadline is None
    flags = check_flags(**{**defaults(target_dir), "target_model_size": "124M", "download_deadline": "60"})
    assert flags.download_deadline == 60.0


class DrippingServer:
    """A local HTTP server that announces 1,000 bytes for any file and sends one every 0.2 s (a run would take
    200 s): the server that keeps a download going forever without a deadline."""

    def __enter__(self):
        import http.server
        import threading
        import time

        class Drip(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                try:
                    for _ in range(1000):
                        self.wfile.write(b"x")
                        self.wfile.flush()
                        time.sleep(0.2)
                except OSError:  # the client gave up: what the test wants
                    pass

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Drip)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_the_download_deadline_flag_stops_a_server_that_drips_with_one_line_and_exit_code_1(tmp_path):
    """--download_deadline 1 against DrippingServer: the first file fails after about 1 s (5 of its 1,000
    bytes) with one line naming its URL and the deadline, exit code 1 (a download), and its .part file is kept
    for the next run to resume."""
    with DrippingServer() as url:
        result = run_main("--drafter", "lookup", "--target_model_size", "124M", "--models_dir", tmp_path / "models",
                          "--download_retries", 0, "--download_deadline", 1, cwd=tmp_path,
                          env={"GPT2_BASE_URL": url})
    line = one_error_line(result)
    assert result.returncode == 1
    assert f"{url}/124M/" in line and "deadline of 1 seconds" in line, line
    assert list((tmp_path / "models" / "124M").glob("*.part")), "the bytes that arrived are kept"


def test_minus_k_is_refused_as_one_keystroke_from_minus_capital_k(tmp_path, monkeypatch, capsys):
    """fire reads -x as the one flag starting with x, so -k would turn the KV cache off where -K sets the guesses
    per round: -k is refused with one line naming both flags, and -K still means --K."""
    from command_line.scripts import parse_command_line

    code, out, err = run_in_process(["-k", "False"], tmp_path, monkeypatch, capsys)
    assert code == 2 and err == "error: -k is one keystroke from -K: spell the flag out (--K, --kv_cache)\n", err
    assert parse_command_line(["-K", "3"], main.main) == {"K": "3"}


def test_minus_capital_k_means_the_one_flag_it_starts_as_fires_help_lists_it():
    """tools/benchmark.py's help (fire's) lists `-K, --Ks`: -K is the one flag starting with K there, and is taken
    as --Ks; only the lowercase -k is refused as one keystroke from it (it could turn the KV cache off)."""
    from command_line.scripts import parse_command_line
    from tools import benchmark

    assert parse_command_line(["-K", "2,4"], benchmark.main) == {"Ks": "2,4"}
    with pytest.raises(ValueError, match="-k is one keystroke from -K"):
        parse_command_line(["-k", "2,4"], benchmark.main)
